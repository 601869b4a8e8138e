//! [`Connector`]: one configured upstream as the gateway holds it. It opens sessions (one per
//! client session, or a member in a session shared by several, see the `shared` module), keeps the
//! shared ones in a pool by sharing key, and stops the upstream's processes at shutdown.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use taskgate_config::{Transport, UpstreamConfig};
use tokio::sync::{mpsc, watch};

use crate::endpoint::{Endpoint, Reclaim};
use crate::http::HttpChannel;
use crate::identity::{ClientIdentity, SessionResume};
use crate::observer::RequestObserver;
use crate::session::{pump, Ready, SessionInner, UpstreamSession, INCOMING_BUFFER};
use crate::shared::{Members, Owners};
use crate::transport::Channel;

/// Idle shared sessions one upstream keeps at most (beyond them, one ends with its last member).
pub(crate) const MAX_IDLE_SHARED: usize = 64;

/// One configured upstream: what its sessions share, and the pool of its shared sessions.
#[derive(Clone)]
pub struct Connector {
    inner: Arc<ConnectorInner>,
}

struct ConnectorInner {
    endpoint: Arc<Endpoint>,
    /// Sessions shared by client sessions, by sharing key (see [`Connector::open_shared`]).
    shared: parking_lot::Mutex<foldhash::HashMap<String, Arc<SessionInner>>>,
    /// Sessions held by one client session at a time, by key, held or idle (see
    /// [`Connector::open_pooled`]).
    pooled: parking_lot::Mutex<foldhash::HashMap<String, Vec<Arc<SessionInner>>>>,
}

impl Connector {
    /// A connector for one upstream.
    pub fn new(config: UpstreamConfig) -> Connector {
        Connector::with_observer(config, None)
    }

    /// A connector whose requests are reported to `observer`.
    pub fn with_observer(config: UpstreamConfig, observer: Option<Arc<dyn RequestObserver>>) -> Connector {
        Connector::of(Endpoint::new(config, observer))
    }

    /// A connector whose stdio processes have `wait` to answer the revision probe.
    #[cfg(test)]
    pub(crate) fn with_probe_wait(config: UpstreamConfig, wait: std::time::Duration) -> Connector {
        let mut endpoint = Endpoint::new(config, None);
        endpoint.probe_wait = wait;
        Connector::of(endpoint)
    }

    fn of(endpoint: Endpoint) -> Connector {
        let endpoint = Arc::new(endpoint);
        let connector = Connector {
            inner: Arc::new(ConnectorInner { endpoint, shared: Default::default(), pooled: Default::default() }),
        };
        // Every process place taken: the shared and pooled sessions no client holds end first.
        // (`share_sessions = "never"`: every session is its client's for its life, none is
        // taken from it; a new process is refused at once.)
        if connector.pools_sessions() {
            let weak = Arc::downgrade(&connector.inner);
            connector.inner.endpoint.when_full(Arc::new(move |holder| {
                if let Some(inner) = weak.upgrade() {
                    Connector { inner }.end_idle(holder);
                }
            }));
        }
        connector
    }

    /// Adds what to call when a new stdio process finds every place under `max_processes`
    /// taken (`None`), or its holder's share of them (`Some(holder)`): whoever holds sessions it
    /// is not using lets them go; the new process waits for a place a few seconds meanwhile,
    /// asking again each second, and sessions no client holds end at once rather than after
    /// `shared_idle_secs` while it does.
    pub fn when_full(&self, reclaim: Reclaim) {
        self.inner.endpoint.when_full(reclaim);
    }

    /// Ends the shared and pooled sessions no client session holds now (of `holder` only,
    /// when given).
    fn end_idle(&self, holder: Option<&str>) {
        let idle = |s: &Arc<SessionInner>| {
            matches!(&s.events, Owners::Shared(members) if members.is_idle())
                && holder.is_none_or(|h| s.process_share.get().is_some_and(|p| &*p.holder == h))
        };
        let ended: Vec<Arc<SessionInner>> = {
            let mut shared = self.inner.shared.lock();
            let keys: Vec<String> = shared.iter().filter(|(_, s)| idle(s)).map(|(k, _)| k.clone()).collect();
            keys.iter().filter_map(|k| shared.remove(k)).collect()
        };
        let pooled: Vec<Arc<SessionInner>> = {
            let mut pool = self.inner.pooled.lock();
            let mut ended = Vec::new();
            for sessions in pool.values_mut() {
                let (idle_ones, kept): (Vec<_>, Vec<_>) = std::mem::take(sessions).into_iter().partition(|s| idle(s));
                *sessions = kept;
                ended.extend(idle_ones);
            }
            pool.retain(|_, sessions| !sessions.is_empty());
            ended
        };
        if !ended.is_empty() || !pooled.is_empty() {
            tracing::debug!(upstream = %self.name(), shared = ended.len(), pooled = pooled.len(), "every process place taken: idle sessions end");
        }
        drop((ended, pooled)); // their DELETEs are spawned by their drops
    }

    /// Stops every stdio process of this upstream in the order basic/lifecycle "Shutdown"
    /// gives for stdio: close its stdin, wait; SIGTERM, wait; SIGKILL. Resolves once all have
    /// exited; no process is started after it.
    pub async fn shutdown(&self) {
        self.inner.endpoint.shutdown.send_replace(true);
        // The pool's sessions end with their last client session now, not after an idle while.
        let pooled: Vec<_> = self.inner.shared.lock().drain().collect();
        drop(pooled);
        let pooled: Vec<_> = self.inner.pooled.lock().drain().collect();
        drop(pooled);
        let all = self.inner.endpoint.config().max_processes as u32;
        // Each process holds a permit until it has exited.
        let _ = self.inner.endpoint.processes.acquire_many(all).await;
        self.inner.endpoint.processes.close();
    }

    /// Whether this upstream is called with each caller's own identity (token exchange): its
    /// sessions are to be told whom they act for ([`UpstreamSession::on_behalf_of`]).
    pub fn acts_for_callers(&self) -> bool {
        self.inner.endpoint.credentials.as_ref().is_some_and(|c| c.exchanges())
    }

    /// The issuer whose callers' tokens this upstream exchanges.
    pub fn exchange_issuer(&self) -> Option<&str> {
        self.config().oauth.as_ref().and_then(|o| o.issuer.as_deref())
    }

    /// Tokens exchanged for callers that this upstream keeps now.
    pub fn exchanged_tokens(&self) -> usize {
        self.inner.endpoint.credentials.as_ref().map_or(0, |c| c.exchanged_tokens())
    }

    /// Whether `client`'s sessions of this upstream are shared with other client sessions now
    /// (`share_sessions`): always, never, or (`auto`) once they are known to speak 2026-07-28.
    pub fn shares_sessions(&self, client: &ClientIdentity) -> bool {
        self.inner.endpoint.shares_sessions(client)
    }

    /// Whether `client`'s sessions of this upstream speak 2026-07-28 (known once the
    /// upstream's revision is): a 2025-11-25 client's sessions of a dual-era upstream speak
    /// 2025-11-25.
    pub fn speaks_2026_to(&self, client: &ClientIdentity) -> bool {
        self.inner.endpoint.spoken_for(client) == Some(crate::revision_2026::Spoken::V2026)
    }

    /// Shared sessions kept now (with client sessions, or idle).
    pub fn shared_sessions(&self) -> usize {
        self.inner.shared.lock().len()
    }

    /// A member in the session shared under `key`, opening it if there is none: its client
    /// session receives on `events` what the upstream sends about its own requests and what
    /// every sharing client receives (see the `shared` module). The key is the caller's: it
    /// must separate everything the upstream must not mix (tenant, principal, and the
    /// identity declared, which must be the same for one key).
    pub fn open_shared(
        &self,
        key: &str,
        identity: impl FnOnce() -> ClientIdentity,
        events: crate::EventSender,
    ) -> UpstreamSession {
        let mut pool = self.inner.shared.lock();
        let inner = match pool.get(key).filter(|inner| !*inner.closed.borrow()) {
            Some(inner) => inner.clone(),
            None => {
                let members =
                    Arc::new_cyclic(|me: &std::sync::Weak<Members>| Members::new(self.when_idle(key, me.clone())));
                let inner = self.new_inner(identity(), Owners::Shared(members));
                pool.insert(key.to_owned(), inner.clone());
                inner
            }
        };
        let Owners::Shared(members) = &inner.events else { unreachable!("a pooled session is shared") };
        // Joined under the pool's lock: a session found is never ended as idle meanwhile.
        let member = Arc::new(members.join(events));
        drop(pool);
        UpstreamSession { inner, member: Some(member) }
    }

    /// Whether client sessions that can be asked things (roots, sampling, elicitation) reuse
    /// this upstream's sessions one after another (`share_sessions` other than `never`).
    pub fn pools_sessions(&self) -> bool {
        self.config().share_sessions != taskgate_config::ShareSessions::Never
    }

    /// Pooled sessions kept now: how many a client session holds, and how many wait idle.
    pub fn pooled_sessions(&self) -> (usize, usize) {
        let pool = self.inner.pooled.lock();
        let idle = |s: &&Arc<SessionInner>| matches!(&s.events, Owners::Shared(members) if members.is_idle());
        let (all, idle) = (pool.values().map(Vec::len).sum::<usize>(), pool.values().flatten().filter(idle).count());
        (all - idle, idle)
    }

    /// A session of this upstream that only the client session `holder` holds until it lets it
    /// go, from the pool of `key` (as for [`Connector::open_shared`], the key separates
    /// everything the upstream must not mix): the one `holder` held last if no client session
    /// holds it, else another one no client session holds, else a new one. What the upstream
    /// sends on its own, its requests included, is this client session's. The flag says
    /// whether the session served another client session last (the upstream may hold state of
    /// that one's, such as its roots).
    pub fn open_pooled(
        &self,
        key: &str,
        holder: &str,
        identity: impl FnOnce() -> ClientIdentity,
        events: crate::EventSender,
    ) -> (UpstreamSession, bool) {
        let mut pool = self.inner.pooled.lock();
        let sessions = pool.entry(key.to_owned()).or_default();
        sessions.retain(|s| !*s.closed.borrow());
        let idle = |s: &&Arc<SessionInner>| matches!(&s.events, Owners::Shared(members) if members.is_idle());
        let held_last = |s: &&Arc<SessionInner>| matches!(&s.events, Owners::Shared(members) if members.last_holder.lock().as_deref() == Some(holder));
        let idle = sessions.iter().filter(idle).find(held_last).or_else(|| sessions.iter().find(idle)).cloned();
        let (inner, reused) = match idle {
            Some(inner) => {
                let Owners::Shared(members) = &inner.events else { unreachable!("a pooled session has members") };
                let another = members.last_holder.lock().as_deref() != Some(holder);
                (inner, another)
            }
            None => {
                let members = Arc::new_cyclic(|me: &std::sync::Weak<Members>| {
                    Members::exclusive(self.pooled_idle(key, me.clone()))
                });
                let inner = self.new_inner(identity(), Owners::Shared(members));
                sessions.push(inner.clone());
                (inner, false)
            }
        };
        let Owners::Shared(members) = &inner.events else { unreachable!("a pooled session has members") };
        // Joined under the pool's lock: no other client session takes it meanwhile.
        let member = Arc::new(members.join(events));
        *members.last_holder.lock() = Some(holder.to_owned());
        drop(pool);
        (UpstreamSession { inner, member: Some(member) }, reused)
    }

    /// What a pooled session's members (`me`) call when their one member leaves (the `emptied`th
    /// time): the session waits in the pool for `shared_idle_secs`, then ends unless a client
    /// session took it meanwhile. Idle sessions kept are bounded ([`MAX_IDLE_SHARED`]).
    fn pooled_idle(&self, key: &str, me: std::sync::Weak<Members>) -> Box<dyn Fn(u64) + Send + Sync> {
        let (connector, key) = (Arc::downgrade(&self.inner), key.to_owned());
        Box::new(move |emptied| {
            let Some(inner) = connector.upgrade() else { return };
            let (connector, key, me) = (Arc::downgrade(&inner), key.clone(), me.clone());
            let expire = move || {
                let Some(inner) = connector.upgrade() else { return };
                let mut pool = inner.pooled.lock();
                let Some(sessions) = pool.get_mut(&key) else { return };
                let mine = |s: &Arc<SessionInner>| matches!(&s.events, Owners::Shared(members) if std::ptr::eq(Arc::as_ptr(members), me.as_ptr()));
                let ended: Vec<_> = match sessions.iter().position(|s| {
                    mine(s) && matches!(&s.events, Owners::Shared(members) if members.idle_since(emptied))
                }) {
                    Some(at) => vec![sessions.swap_remove(at)],
                    None => Vec::new(),
                };
                if sessions.is_empty() {
                    pool.remove(&key);
                }
                drop(pool);
                drop(ended); // its DELETE is spawned by its drop
            };
            let idle_now = inner
                .pooled
                .lock()
                .values()
                .flatten()
                .filter(|s| matches!(&s.events, Owners::Shared(members) if members.is_idle()))
                .count();
            // A new process waiting for a place: no idle wait.
            let idle = match idle_now > MAX_IDLE_SHARED || inner.endpoint.pressed() {
                true => Duration::ZERO,
                false => Duration::from_secs(inner.endpoint.config().shared_idle_secs),
            };
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) if !idle.is_zero() => {
                    runtime.spawn(async move {
                        tokio::time::sleep(idle).await;
                        expire();
                    });
                }
                _ => expire(),
            }
        })
    }

    /// What a shared session's members call when their last one leaves (the `emptied`th time).
    fn when_idle(&self, key: &str, me: std::sync::Weak<Members>) -> Box<dyn Fn(u64) + Send + Sync> {
        let (connector, key) = (Arc::downgrade(&self.inner), key.to_owned());
        Box::new(move |emptied| {
            if let Some(inner) = connector.upgrade() {
                Connector { inner }.shared_idle(&key, emptied, me.clone());
            }
        })
    }

    /// The last member left the session shared under `key` (the `emptied`th time): it ends
    /// after `shared_idle_secs` unless a client session joins meanwhile.
    fn shared_idle(&self, key: &str, emptied: u64, me: std::sync::Weak<Members>) {
        let mut idle = Duration::from_secs(self.inner.endpoint.config().shared_idle_secs);
        {
            // Idle sessions kept are bounded too: clients declaring ever new identities would
            // otherwise leave a session each behind for the idle time.
            let pool = self.inner.shared.lock();
            let crowded = pool.len() > MAX_IDLE_SHARED
                && pool.values().filter(|s| matches!(&s.events, Owners::Shared(members) if members.is_idle())).count()
                    > MAX_IDLE_SHARED;
            if crowded || self.inner.endpoint.pressed() {
                idle = Duration::ZERO;
            }
        }
        let expire = {
            let connector = Arc::downgrade(&self.inner);
            let key = key.to_owned();
            move || {
                let Some(inner) = connector.upgrade() else { return };
                let mut pool = inner.shared.lock();
                // The session under the key may be another by now (this one ended while a
                // process waited for a place): only this one ends, and only if still idle.
                let idle = pool.get(&key).is_some_and(|session| match &session.events {
                    Owners::Shared(members) => {
                        std::ptr::eq(Arc::as_ptr(members), me.as_ptr()) && members.idle_since(emptied)
                    }
                    Owners::One(_) => true,
                });
                let ended = if idle { pool.remove(&key) } else { None };
                drop(pool);
                drop(ended); // its DELETE is spawned by its drop
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) if !idle.is_zero() => {
                runtime.spawn(async move {
                    tokio::time::sleep(idle).await;
                    expire();
                });
            }
            _ => expire(),
        }
    }

    /// The upstream's configured name.
    pub fn name(&self) -> &str {
        self.inner.endpoint.name()
    }

    /// The upstream's configuration.
    pub fn config(&self) -> &UpstreamConfig {
        self.inner.endpoint.config()
    }

    /// The revision this upstream speaks, once known: pinned by `protocol`, or found by a
    /// probe. `None` until the first session has connected.
    pub fn protocol_version(&self) -> Option<&'static str> {
        self.inner.endpoint.protocol_version()
    }

    /// stdio processes of this upstream running now.
    pub fn running_processes(&self) -> usize {
        self.inner.endpoint.running_processes()
    }

    /// Stops every stdio process of this upstream running now, in the order basic/lifecycle
    /// "Shutdown" gives for stdio; the sessions that used them start new ones at their next
    /// request (requests in flight in them fail). Returns how many were running.
    pub fn restart_processes(&self) -> usize {
        self.inner.endpoint.restart_processes()
    }

    /// Continues, without `initialize`, an HTTP session this upstream gave an earlier process
    /// of the gateway (to follow its native tasks again after a restart). If the upstream has
    /// ended that session (404), the next request initializes a new one, as for any session.
    /// `None` for a stdio upstream: its process ended with the earlier gateway.
    pub fn resume(
        &self,
        identity: ClientIdentity,
        events: crate::EventSender,
        resume: &SessionResume,
        caller: Option<crate::Caller>,
    ) -> Option<UpstreamSession> {
        if self.config().transport != Transport::Http {
            return None;
        }
        let session = self.open(identity, events);
        if let Some(caller) = caller {
            session.on_behalf_of(caller);
        }
        if resume.protocol_version == taskgate_protocol::revision_2026::PROTOCOL_VERSION {
            // A modern upstream has no sessions: any process continues where another left off.
            return Some(session);
        }
        let (incoming_tx, incoming_rx) = mpsc::channel(INCOMING_BUFFER);
        let channel = Arc::new(HttpChannel::new(
            self.config(),
            self.inner.endpoint.http.clone(),
            incoming_tx,
            session.inner.routes.clone(),
            session.inner.closed.subscribe(),
            self.inner.endpoint.connections.clone(),
            self.inner.endpoint.authorizer(session.inner.caller.get()),
        ));
        channel.adopt(resume);
        tokio::spawn(pump(Arc::downgrade(&session.inner), incoming_rx));
        drop(channel.clone().listen(session.listening()));
        let ready = Arc::new(Ready {
            channel: Channel::Http(channel),
            server_capabilities: Arc::new(json!({})),
            state_2026: None,
        });
        *session.inner.state.try_lock().expect("a new session's state is free") = Some(ready);
        Some(session)
    }

    /// Opens a session; nothing is sent until its first request. Messages the upstream sends
    /// on its own arrive on `events`.
    pub fn open(&self, identity: ClientIdentity, events: crate::EventSender) -> UpstreamSession {
        UpstreamSession { inner: self.new_inner(identity, Owners::One(events)), member: None }
    }

    fn new_inner(&self, identity: ClientIdentity, events: Owners) -> Arc<SessionInner> {
        let (closed, _) = watch::channel(false);
        let (holds, _) = watch::channel(0);
        if let Some(observer) = &self.inner.endpoint.observer {
            observer.session(self.name(), matches!(&events, Owners::Shared(members) if !members.exclusive), true);
        }
        Arc::new(SessionInner {
            endpoint: self.inner.endpoint.clone(),
            listen_always: identity.answers_requests(),
            holds: Arc::new(holds),
            identity,
            events,
            state: tokio::sync::Mutex::new(None),
            calls: parking_lot::Mutex::default(),
            closed,
            routes: Arc::default(),
            process_share: Default::default(),
            caller: Default::default(),
            kept: Default::default(),
        })
    }
}
