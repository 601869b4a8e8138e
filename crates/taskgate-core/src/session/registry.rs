//! The live client sessions, by id, bounded by `server.max_sessions`.

// foldhash: the maps of ids and names on every request's path hash in a few instructions,
// not SipHash's hundreds; its seeds are random per map.
use foldhash::{HashMap, HashMapExt};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use actix::Addr;
use parking_lot::RwLock;

use futures_util::future::BoxFuture;
use serde_json::Value;
use taskgate_protocol::Message as RpcMessage;

use super::across_replicas::FromElsewhere;
use super::lifecycle::{Close, CloseIfIdle, ReleaseUpstreams, ToolsChanged};
use super::session_context::SessionTable;
use super::task_calls::{RemoteInputs, TaskProgress, TaskStatusChanged};
use super::SessionActor;
use crate::identity::Identity;
use crate::metrics::Metrics;
use crate::router::{Caps, CatalogListeners};
use crate::tasks::RequestorSessions;

pub(crate) struct SessionEntry {
    pub addr: Addr<SessionActor>,
    pub identity: Identity,
    pub protocol_version: String,
    /// When the session was made, at this replica or another (ms, the gateway clock).
    pub created_ms: u64,
    /// When the session last received a request (ms, the gateway clock).
    pub last_seen_ms: Arc<AtomicU64>,
    /// The bytes all its outbound streams may hold together.
    pub budget: Arc<crate::outbound::SessionBudget>,
    /// When the session was last asked to let its upstream sessions go (ms, the gateway clock):
    /// at most once per release period, so one that holds something is not asked every sweep.
    pub release_asked_ms: AtomicU64,
    /// A session every replica serves (a shared store): its record as this replica keeps it.
    pub record: Option<Recorded>,
    /// The profile whose endpoint it was opened at (`None`: the tenant's own).
    pub profile: Option<Arc<str>>,
    /// Its tool catalog (the one for the capabilities its client declared).
    pub catalog: crate::router::ToolCatalog,
}

/// A session's record, as the replica serving it keeps it.
#[derive(Default)]
pub(crate) struct Recorded {
    /// When this replica last pushed the record's expiry back, or tried to write it (ms, the
    /// gateway clock).
    pub touched_ms: AtomicU64,
    /// A record not written yet (the store was unreachable at `initialize`): written at the
    /// next request served here once the store answers.
    pub pending: parking_lot::Mutex<Option<taskgate_store::SessionRecord>>,
    /// A write of the pending record is under way (one at a time).
    pub writing: std::sync::atomic::AtomicBool,
}

/// Why a session could not be added.
pub(crate) enum Full {
    /// `server.max_sessions`.
    Gateway,
    /// The tenant's `limits.max_sessions`.
    Tenant(usize),
    /// A session with this id is here already.
    Present,
}

/// The session table.
pub(crate) struct Sessions {
    /// Each entry shared: a request's handle holds it without copying it.
    map: RwLock<HashMap<String, Arc<SessionEntry>>>,
    max: usize,
    metrics: Arc<Metrics>,
}

impl Sessions {
    pub fn new(max: usize, metrics: Arc<Metrics>) -> Sessions {
        Sessions { map: RwLock::new(HashMap::new()), max, metrics }
    }

    /// Bytes queued on the outbound streams of every session now.
    pub fn stream_bytes(&self) -> usize {
        self.map.read().values().map(|e| e.budget.used()).sum()
    }

    /// Adds a session unless the gateway or its tenant is at its limit.
    pub fn insert(&self, id: String, entry: SessionEntry, tenant_cap: Option<usize>) -> Result<(), Full> {
        let mut map = self.map.write();
        if map.contains_key(&id) {
            return Err(Full::Present);
        }
        if map.len() >= self.max {
            return Err(Full::Gateway);
        }
        if let Some(cap) = tenant_cap {
            // A scan, under the write lock so two initializes cannot both take the last place;
            // only tenants with a cap pay for it.
            if map.values().filter(|e| e.identity.tenant == entry.identity.tenant).count() >= cap {
                return Err(Full::Tenant(cap));
            }
        }
        map.insert(id, Arc::new(entry));
        Ok(())
    }

    /// Sessions whose last request is older than `cutoff_ms`.
    pub fn seen_before(&self, cutoff_ms: u64) -> Vec<(String, Arc<SessionEntry>)> {
        self.map
            .read()
            .iter()
            .filter(|(_, e)| e.last_seen_ms.load(Ordering::Relaxed) < cutoff_ms)
            .map(|(id, e)| (id.clone(), e.clone()))
            .collect()
    }

    /// Removes a session if it is still idle since `cutoff_ms` (a request may have come in
    /// since it was found idle).
    pub fn remove_if_idle(&self, id: &str, cutoff_ms: u64) -> Option<Arc<SessionEntry>> {
        let mut map = self.map.write();
        if map.get(id)?.last_seen_ms.load(Ordering::Relaxed) < cutoff_ms {
            map.remove(id)
        } else {
            None
        }
    }

    pub fn is_full(&self) -> bool {
        self.map.read().len() >= self.max
    }

    /// The session, if it exists and belongs to `identity`. A session of another identity is
    /// reported exactly like one that does not exist.
    pub fn get(&self, id: &str, identity: &Identity, now_ms: u64) -> Option<Arc<SessionEntry>> {
        let entry = self.map.read().get(id).filter(|e| &e.identity == identity).cloned()?;
        entry.last_seen_ms.fetch_max(now_ms, Ordering::Relaxed);
        Some(entry)
    }

    /// The session `id`, whoever it belongs to.
    pub fn entry(&self, id: &str) -> Option<Arc<SessionEntry>> {
        self.map.read().get(id).cloned()
    }

    pub fn contains(&self, id: &str) -> bool {
        self.map.read().contains_key(id)
    }

    pub fn remove(&self, id: &str) -> Option<Arc<SessionEntry>> {
        self.map.write().remove(id)
    }

    pub fn len(&self) -> usize {
        self.map.read().len()
    }

    /// Sessions open per tenant.
    pub fn count_by_tenant(&self) -> HashMap<String, usize> {
        let mut counts = HashMap::new();
        for entry in self.map.read().values() {
            *counts.entry(entry.identity.tenant.to_string()).or_default() += 1;
        }
        counts
    }

    /// The sessions of one identity, the longest idle first.
    pub fn idle_first(&self, identity: &Identity) -> Vec<(String, Arc<SessionEntry>)> {
        let mut sessions: Vec<(String, Arc<SessionEntry>)> = self
            .map
            .read()
            .iter()
            .filter(|(_, e)| &e.identity == identity)
            .map(|(id, e)| (id.clone(), e.clone()))
            .collect();
        sessions.sort_by_key(|(_, e)| e.last_seen_ms.load(Ordering::Relaxed));
        sessions
    }

    /// How long from `now_ms` until one of `tenant`'s sessions has been idle for `idle_ms` (when
    /// the Supervisor closes it, if it holds nothing then).
    pub fn soonest_idle(&self, tenant: &str, idle_ms: u64, now_ms: u64) -> Option<u64> {
        self.map
            .read()
            .values()
            .filter(|e| &*e.identity.tenant == tenant)
            .map(|e| e.last_seen_ms.load(Ordering::Relaxed).saturating_add(idle_ms).saturating_sub(now_ms))
            .min()
    }

    /// The sessions of one identity (where its task notifications go).
    pub fn of(&self, identity: &Identity) -> Vec<Addr<SessionActor>> {
        self.map.read().values().filter(|e| &e.identity == identity).map(|e| e.addr.clone()).collect()
    }

    /// Tells session `id`, when it is served here, what another replica says about it.
    fn tell_elsewhere_said(&self, id: &str, message: FromElsewhere) {
        let Some(addr) = self.map.read().get(id).map(|e| e.addr.clone()) else { return };
        if addr.try_send(message).is_err() {
            self.metrics.mailbox_full.with_label_values(&["session_notification"]).inc();
        }
    }

    /// Every session here, with its id, sorted by id.
    pub fn entries(&self) -> Vec<(String, Arc<SessionEntry>)> {
        let mut all: Vec<_> = self.map.read().iter().map(|(id, e)| (id.clone(), e.clone())).collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    pub fn all(&self) -> Vec<Addr<SessionActor>> {
        self.map.read().values().map(|e| e.addr.clone()).collect()
    }

    /// The configuration was reloaded: every session reads its endpoint again (sent past a
    /// full mailbox: it is small, and once per reload).
    pub(crate) fn endpoints_reloaded(&self) {
        for session in self.all() {
            session.do_send(super::EndpointReloaded);
        }
    }
}

impl Sessions {
    /// Asks the sessions (of `tenant`, when given) with no request since `cutoff_ms` to let
    /// their session of `upstream` go if they hold nothing: a new process of it finds every
    /// place taken. A full mailbox skips one.
    pub(crate) fn release_for_a_process(&self, upstream: &str, tenant: Option<&str>, cutoff_ms: u64) {
        for entry in self.map.read().values() {
            let seen = entry.last_seen_ms.load(Ordering::Relaxed);
            if seen < cutoff_ms && tenant.is_none_or(|t| *entry.identity.tenant == *t) {
                let _ = entry.addr.try_send(ReleaseUpstreams {
                    cutoff_ms,
                    last_seen_ms: entry.last_seen_ms.clone(),
                    only: Some(upstream.to_owned()),
                });
            }
        }
    }
}

impl SessionTable for Sessions {
    fn forget(&self, id: &str) {
        self.remove(id);
    }

    fn activated(&self, identity: &Identity, profile: Option<&str>) {
        let profile: Option<Arc<str>> = profile.map(Arc::from);
        for session in self.of(identity) {
            if session.try_send(super::meta_tools::IdentityActivated(profile.clone())).is_err() {
                self.metrics.mailbox_full.with_label_values(&["session_notification"]).inc();
            }
        }
    }
}

/// The task layer reaches client sessions through the table (its port).
impl RequestorSessions for Sessions {
    fn task_status(&self, owner: &Identity, task: &Value) {
        for session in self.of(owner) {
            if session.try_send(TaskStatusChanged(task.clone())).is_err() {
                self.metrics.mailbox_full.with_label_values(&["session_notification"]).inc();
                tracing::debug!("a session's queue is full; a task status notification was dropped");
            }
        }
    }

    fn task_progress(
        &self,
        owner: &Identity,
        task_id: &str,
        requester: Option<&str>,
        notification: &RpcMessage,
    ) -> bool {
        let requesting = requester.and_then(|id| self.map.read().get(id).filter(|e| &e.identity == owner).cloned());
        if let Some(entry) = requesting {
            let progress =
                TaskProgress { task_id: task_id.to_owned(), notification: notification.clone(), requester: true };
            return entry.addr.try_send(progress).is_ok();
        }
        let mut any = false;
        for session in self.of(owner) {
            let progress =
                TaskProgress { task_id: task_id.to_owned(), notification: notification.clone(), requester: false };
            any |= session.try_send(progress).is_ok();
        }
        any
    }

    fn remote_inputs(&self, owner: &Identity, task_id: &str) {
        for session in self.of(owner) {
            if session.try_send(RemoteInputs(task_id.to_owned())).is_err() {
                self.metrics.mailbox_full.with_label_values(&["session_notification"]).inc();
            }
        }
    }

    fn to_stream(&self, id: &str, message: String) {
        self.tell_elsewhere_said(id, FromElsewhere::Stream(message));
    }

    fn client_said(&self, id: &str, message: String) {
        self.tell_elsewhere_said(id, FromElsewhere::Client(message));
    }

    fn ended(&self, id: &str) {
        if let Some(entry) = self.remove(id) {
            entry.addr.do_send(Close);
        }
    }

    fn changed(&self, id: &str) {
        self.tell_elsewhere_said(id, FromElsewhere::Changed);
    }

    fn activated_elsewhere(&self, owner: &Identity, profile: Option<&str>) {
        SessionTable::activated(self, owner, profile);
    }

    fn stream_at(&self, id: &str, replica: String, open: bool) {
        self.tell_elsewhere_said(id, FromElsewhere::StreamAt(replica, open));
    }

    fn release_idle(&self, cutoff_ms: u64, now_ms: u64) {
        for entry in self.map.read().values() {
            let last_seen = entry.last_seen_ms.load(Ordering::Relaxed);
            if last_seen < cutoff_ms && entry.release_asked_ms.load(Ordering::Relaxed) < cutoff_ms {
                entry.release_asked_ms.store(now_ms, Ordering::Relaxed);
                // A full mailbox skips it until the next period.
                let _ = entry.addr.try_send(ReleaseUpstreams {
                    cutoff_ms,
                    last_seen_ms: entry.last_seen_ms.clone(),
                    only: None,
                });
            }
        }
    }

    fn close_idle(self: Arc<Self>, cutoff: u64) -> BoxFuture<'static, ()> {
        let idle = self.seen_before(cutoff);
        let sessions = self;
        Box::pin(async move {
            for (id, entry) in idle {
                let check = CloseIfIdle { cutoff_ms: cutoff, last_seen_ms: entry.last_seen_ms.clone() };
                if entry.addr.send(check).await == Ok(true) {
                    sessions.remove_if_idle(&id, cutoff);
                    sessions.metrics.sessions_expired.with_label_values(&[&entry.identity.tenant]).inc();
                    tracing::info!(target: "taskgate::audit", session = %id, tenant = %entry.identity.tenant, principal = %entry.identity.principal, "idle session closed");
                }
            }
        })
    }
}

/// The router tells every client session when a catalog's tools change (its port).
impl CatalogListeners for Sessions {
    fn tools_changed(&self, caps: &Caps) {
        for session in self.all() {
            // A client cannot drive this path; a session whose queue is full misses one
            // list_changed hint, and its next tools/list is still correct.
            if session.try_send(ToolsChanged(caps.clone())).is_err() {
                tracing::debug!("a session's queue is full; list_changed not delivered");
            }
        }
    }
}
