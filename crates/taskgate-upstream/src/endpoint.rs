//! [`Endpoint`]: one configured upstream as its sessions see it: its configuration and what
//! they share (the HTTP connection pool and its bound, the stdio process bound, the revision the
//! upstream speaks, its tools' header annotations, the capabilities it declares). The
//! [`Connector`](crate::Connector) that opens sessions holds one; each session holds it too.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use taskgate_config::{ShareSessions, UpstreamConfig, UpstreamProtocol};
use taskgate_protocol::mcp;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::client::HttpClient;
use crate::http::Connections;
use crate::identity::ClientIdentity;
use crate::observer::RequestObserver;
use crate::revision_2026::{Spoken, ToolHeaders};
use crate::UpstreamError;

/// How long an idle connection to an upstream is kept for reuse: under the keep-alive of the
/// common servers (Node's and actix-web's 5 s, uvicorn's 5 s, nginx's 75 s), so the gateway
/// closes an idle connection before the server does. A request sent on a connection just as
/// the server closes it fails (the server may or may not have read it, so it is not sent
/// again): with 90 s, a request after 5 to 90 s of quiet could meet that race.
const POOL_IDLE: Duration = Duration::from_secs(4);

/// One configured upstream: its configuration and what its sessions share.
pub(crate) struct Endpoint {
    config: UpstreamConfig,
    /// The revision the upstream was found to speak (basic/versioning: cached for the origin,
    /// probed again when the cached assumption fails).
    spoken: parking_lot::Mutex<Option<Spoken>>,
    /// Whether 2025-11-25 clients' sessions of an upstream found to speak 2026-07-28 speak
    /// 2025-11-25 to it ([`Endpoint::spoken_for`]): yes once it answered such a session's
    /// `initialize` (a dual-era server); no when it did not, or when its 2026-07-28 side speaks
    /// the tasks extension (the gateway follows those tasks for 2025-11-25 clients, which its
    /// 2025-11-25 side may not offer); unknown until then. Forgotten with the revision.
    side_2025: parking_lot::Mutex<Option<bool>>,
    /// The `x-mcp-header` annotations of a modern upstream's tools.
    pub(crate) tool_headers: ToolHeaders,
    pub(crate) http: HttpClient,
    /// The gateway's own OAuth client for the upstream, when it has one.
    pub(crate) credentials: Option<Arc<crate::credentials::Credentials>>,
    pub(crate) processes: Arc<Semaphore>,
    /// The bound on connections to an HTTP upstream.
    pub(crate) connections: Arc<Connections>,
    /// The capabilities its sessions were last given, shared by them.
    capabilities: parking_lot::Mutex<Option<Arc<Value>>>,
    pub(crate) observer: Option<Arc<dyn RequestObserver>>,
    /// Raised once, when the gateway shuts down: every process of this upstream is stopped.
    pub(crate) shutdown: tokio::sync::watch::Sender<bool>,
    /// Bumped to stop every process running now (an operator's restart); new ones start as
    /// sessions need them.
    pub(crate) restart: tokio::sync::watch::Sender<u64>,
    /// Processes running now, by the holder they count against (a tenant: [`ProcessShare`]).
    held: Held,
    /// Told when a process's place is given back.
    freed: Arc<tokio::sync::Notify>,
    /// New processes waiting for a place now: while any does, sessions nobody holds end at
    /// once rather than after their idle time.
    waiting: std::sync::atomic::AtomicUsize,
    /// What to call when the places are all taken (with the holder whose share is, when only
    /// its share is): whoever holds sessions it is not using lets them go (the gateway's idle
    /// client sessions).
    on_full: parking_lot::Mutex<Vec<Reclaim>>,
    /// When (and for which holder) the hooks were last called: at most once per
    /// [`RECLAIM_EVERY`] per holder, however many processes wait (each call sweeps the
    /// gateway's sessions).
    last_reclaim: parking_lot::Mutex<Option<(tokio::time::Instant, Option<Arc<str>>)>>,
    /// How long a new stdio process may take to answer the revision probe.
    pub(crate) probe_wait: std::time::Duration,
}

/// How long a stdio process may take to answer the `server/discover` probe before it is taken
/// for a legacy server (stdio "Backward Compatibility": one that does not respond).
const STDIO_PROBE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Processes running now, by holder.
type Held = Arc<parking_lot::Mutex<foldhash::HashMap<Arc<str>, usize>>>;

/// Whom the processes of a session count against (a tenant), and its share (a percentage) of the
/// upstream's `max_processes`: one holder never takes the whole pool from the others.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessShare {
    /// Who holds them.
    pub holder: Arc<str>,
    /// Its share of `max_processes`, in percent (at least one process).
    pub percent: usize,
}

/// One process's place under the upstream's `max_processes` and its holder's share, given back
/// when dropped (once the process has exited).
pub(crate) struct ProcessPlace {
    freed: Arc<tokio::sync::Notify>,
    permit: Option<OwnedSemaphorePermit>,
    held: Option<(Held, Arc<str>)>,
}

impl Drop for ProcessPlace {
    fn drop(&mut self) {
        if let Some((held, holder)) = &self.held {
            let mut held = held.lock();
            if let Some(n) = held.get_mut(holder) {
                *n -= 1;
                if *n == 0 {
                    held.remove(holder);
                }
            }
        }
        // The place first, then the notice: a waiter woken finds it.
        drop(self.permit.take());
        self.freed.notify_waiters();
    }
}

/// How long a new process waits for a place while idle sessions let theirs go.
const PLACE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);
/// How often a waiting process asks again (sessions that were not idle long enough may be by
/// then).
const RECLAIM_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// What is called when a new process finds every place taken: `Some(holder)` when only that
/// holder's share of them is.
pub type Reclaim = Arc<dyn Fn(Option<&str>) + Send + Sync>;

impl Endpoint {
    /// The endpoint of one upstream, its requests reported to `observer`.
    pub(crate) fn new(config: UpstreamConfig, observer: Option<Arc<dyn RequestObserver>>) -> Endpoint {
        let http = HttpClient::new(config.url.as_deref(), config.max_connections, POOL_IDLE);
        let credentials = config
            .oauth
            .as_ref()
            .map(|o| Arc::new(crate::credentials::Credentials::new(&config.name, config.url.as_deref(), o)));
        let processes = Arc::new(Semaphore::new(config.max_processes));
        let connections = Connections::new(&config.name, config.max_connections, observer.clone());
        let shutdown = tokio::sync::watch::channel(false).0;
        let restart = tokio::sync::watch::channel(0).0;
        let (spoken, tool_headers) = (parking_lot::Mutex::new(None), ToolHeaders::default());
        Endpoint {
            config,
            spoken,
            side_2025: parking_lot::Mutex::new(None),
            tool_headers,
            http,
            credentials,
            processes,
            connections,
            capabilities: parking_lot::Mutex::new(None),
            observer,
            shutdown,
            restart,
            held: Arc::default(),
            freed: Arc::default(),
            waiting: Default::default(),
            on_full: Default::default(),
            last_reclaim: Default::default(),
            probe_wait: STDIO_PROBE_WAIT,
        }
    }

    /// Adds what to call when every process place is taken (see [`Endpoint::on_full`]).
    pub(crate) fn when_full(&self, reclaim: Reclaim) {
        self.on_full.lock().push(reclaim);
    }

    /// Whether the reclaim hooks may be called now for `holder`: not within [`RECLAIM_EVERY`] of
    /// their last call for the same holder, whichever waiter made it.
    fn may_reclaim(&self, now: tokio::time::Instant, holder: Option<&Arc<str>>) -> bool {
        let mut last = self.last_reclaim.lock();
        if last.as_ref().is_some_and(|(at, of)| of.as_ref() == holder && now.duration_since(*at) < RECLAIM_EVERY) {
            return false;
        }
        *last = Some((now, holder.cloned()));
        true
    }

    /// Whether a new process waits for a place now.
    pub(crate) fn pressed(&self) -> bool {
        self.waiting.load(std::sync::atomic::Ordering::Relaxed) > 0
    }

    /// A place for a new process ([`Endpoint::process_place`]); when they are all taken, the
    /// sessions nobody is using are asked to let theirs go, and the place is waited for (at
    /// most [`PLACE_WAIT`]): processes follow the work in flight, not the sessions left open.
    pub(crate) async fn process_place_waiting(
        &self,
        share: Option<&ProcessShare>,
    ) -> Result<ProcessPlace, UpstreamError> {
        let refused = match self.process_place(share) {
            Ok(place) => return Ok(place),
            Err(refused) => refused,
        };
        let reclaim: Vec<_> = self.on_full.lock().clone();
        if reclaim.is_empty() {
            return Err(refused);
        }
        struct Waiting<'a>(&'a std::sync::atomic::AtomicUsize);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
        self.waiting.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let _waiting = Waiting(&self.waiting);
        // The whole upstream is full, or only the holder's share of it: then only its sessions
        // are asked to let go (one tenant never empties another's).
        let holder = match (self.processes.available_permits(), share) {
            (0, _) | (_, None) => None,
            (_, Some(share)) => Some(share.holder.clone()),
        };
        let deadline = tokio::time::Instant::now() + PLACE_WAIT;
        let mut next_ask = tokio::time::Instant::now();
        loop {
            let now = tokio::time::Instant::now();
            if now >= next_ask && now < deadline {
                if self.may_reclaim(now, holder.as_ref()) {
                    for reclaim in &reclaim {
                        reclaim(holder.as_deref());
                    }
                }
                next_ask = now + RECLAIM_EVERY;
            }
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            match self.process_place(share) {
                Ok(place) => return Ok(place),
                Err(refused) if tokio::time::Instant::now() >= deadline => return Err(refused),
                Err(_) => {}
            }
            let _ = tokio::time::timeout_at(deadline.min(next_ask), freed).await;
        }
    }

    /// A place for a new process: one of `max_processes`, within `share` (its holder's part of
    /// them) when the session has one.
    pub(crate) fn process_place(&self, share: Option<&ProcessShare>) -> Result<ProcessPlace, UpstreamError> {
        let max = self.config.max_processes;
        let full = |reason: String| UpstreamError::Overloaded { upstream: self.config.name.clone(), reason };
        let Some(share) = share else {
            let permit = self.processes.clone().try_acquire_owned();
            let permit =
                permit.map_err(|_| full(format!("it already runs its maximum of {max} processes (max_processes)")))?;
            return Ok(ProcessPlace { freed: self.freed.clone(), permit: Some(permit), held: None });
        };
        let limit = (max.saturating_mul(share.percent.min(100)) / 100).max(1);
        let mut held = self.held.lock();
        let holding = held.get(&share.holder).copied().unwrap_or(0);
        if holding >= limit {
            return Err(full(format!(
                "tenant \"{}\" runs its share of {limit} of its {max} processes (max_processes, and the tenant's share of gateway-wide pools)",
                share.holder
            )));
        }
        let permit = self.processes.clone().try_acquire_owned();
        let permit =
            permit.map_err(|_| full(format!("it already runs its maximum of {max} processes (max_processes)")))?;
        *held.entry(share.holder.clone()).or_default() += 1;
        Ok(ProcessPlace {
            freed: self.freed.clone(),
            permit: Some(permit),
            held: Some((self.held.clone(), share.holder.clone())),
        })
    }

    /// What the requests of a channel made for `caller` carry (`None`: no OAuth configured).
    pub(crate) fn authorizer(&self, caller: Option<&crate::Caller>) -> Option<crate::credentials::Authorizer> {
        let of = self.credentials.clone()?;
        Some(crate::credentials::Authorizer { of, caller: caller.cloned() })
    }

    /// The upstream's configured name.
    pub(crate) fn name(&self) -> &str {
        &self.config.name
    }

    /// The upstream's configuration.
    pub(crate) fn config(&self) -> &UpstreamConfig {
        &self.config
    }

    /// `capabilities`, as the one copy the sessions of this upstream share while it declares
    /// the same (each session kept its own: about 2 KB a session for the demo's).
    pub(crate) fn shared_capabilities(&self, capabilities: Value) -> Arc<Value> {
        let mut last = self.capabilities.lock();
        match &*last {
            Some(shared) if **shared == capabilities => shared.clone(),
            _ => {
                let shared = Arc::new(capabilities);
                *last = Some(shared.clone());
                shared
            }
        }
    }

    /// Whether `client`'s sessions of this upstream are shared with other client sessions now
    /// (`share_sessions`): always, never, or (`auto`) once they are known to speak 2026-07-28.
    pub(crate) fn shares_sessions(&self, client: &ClientIdentity) -> bool {
        match self.config.share_sessions {
            ShareSessions::Always => true,
            ShareSessions::Never => false,
            ShareSessions::Auto => self.spoken_for(client) == Some(Spoken::V2026),
        }
    }

    /// The revision this upstream speaks, once known: pinned by `protocol`, or found by a
    /// probe. `None` until the first session has connected.
    pub(crate) fn protocol_version(&self) -> Option<&'static str> {
        match self.spoken() {
            Some(Spoken::V2026) => Some(taskgate_protocol::revision_2026::PROTOCOL_VERSION),
            Some(Spoken::V2025) => Some(mcp::LATEST_PROTOCOL_VERSION),
            None => None,
        }
    }

    /// The revision this upstream speaks: pinned, or as last found.
    pub(crate) fn spoken(&self) -> Option<Spoken> {
        match self.config.protocol {
            UpstreamProtocol::V2025 => Some(Spoken::V2025),
            UpstreamProtocol::V2026 => Some(Spoken::V2026),
            UpstreamProtocol::Auto => *self.spoken.lock(),
        }
    }

    /// The revision `client`'s sessions of this upstream speak, once known: the upstream's,
    /// but 2025-11-25 for a 2025-11-25 client where a 2026-07-28 upstream also answers
    /// `initialize` (or has not been tried yet: the session tries). `protocol` pinned to
    /// 2026-07-28 keeps every session in 2026-07-28.
    pub(crate) fn spoken_for(&self, client: &ClientIdentity) -> Option<Spoken> {
        match self.spoken() {
            Some(Spoken::V2026) if self.tries_2025_side(client) => Some(Spoken::V2025),
            era => era,
        }
    }

    /// Whether a session for `client` of this 2026-07-28 upstream opens with `initialize`
    /// (the dual-era server's legacy side) rather than in 2026-07-28.
    pub(crate) fn tries_2025_side(&self, client: &ClientIdentity) -> bool {
        client.speaks_2025 && self.config.protocol == UpstreamProtocol::Auto && *self.side_2025.lock() != Some(false)
    }

    /// Whether this 2026-07-28 upstream is known to answer `initialize` too.
    pub(crate) fn has_2025_side(&self) -> bool {
        *self.side_2025.lock() == Some(true)
    }

    /// Remembers whether 2025-11-25 clients' sessions of this 2026-07-28 upstream speak
    /// 2025-11-25 to it.
    pub(crate) fn learn_2025_side(&self, answers: bool) {
        *self.side_2025.lock() = Some(answers);
    }

    /// Remembers what a probe found (or forgets it, `None`) for an upstream whose revision is
    /// not pinned; whether a modern upstream has a legacy side is found again with it.
    pub(crate) fn learn(&self, spoken: Option<Spoken>) {
        if self.config.protocol == UpstreamProtocol::Auto {
            let mut known = self.spoken.lock();
            if *known != spoken {
                *self.side_2025.lock() = None;
            }
            *known = spoken;
        }
    }

    /// stdio processes of this upstream running now.
    pub(crate) fn running_processes(&self) -> usize {
        self.config.max_processes - self.processes.available_permits()
    }

    /// What tells a process started now to stop.
    pub(crate) fn stop_signals(&self) -> StopSignals {
        StopSignals { shutdown: self.shutdown.subscribe(), restart: self.restart.subscribe() }
    }

    /// Tells every process running now to stop (stdin closed, then SIGTERM, then SIGKILL);
    /// sessions start new ones at their next request. Returns how many were running.
    pub(crate) fn restart_processes(&self) -> usize {
        let running = self.running_processes();
        self.restart.send_modify(|generation| *generation += 1);
        running
    }
}

/// What stops a process: the gateway shutting down, or a restart of its upstream's processes
/// after it started.
#[derive(Clone)]
pub(crate) struct StopSignals {
    shutdown: tokio::sync::watch::Receiver<bool>,
    restart: tokio::sync::watch::Receiver<u64>,
}

impl StopSignals {
    /// Resolves once the process is to stop.
    pub(crate) async fn fired(&mut self) {
        let StopSignals { shutdown, restart } = self;
        let shutdown = async {
            let _ = shutdown.wait_for(|s| *s).await;
        };
        let restart = async {
            // The endpoint is gone: nothing restarts it any more.
            if restart.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            _ = shutdown => {}
            _ = restart => {}
        }
    }
}

#[cfg(test)]
mod place_tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn endpoint(asked: &Arc<AtomicUsize>) -> Arc<Endpoint> {
        let mut config = UpstreamConfig::stdio("x", "cat", Vec::new());
        config.max_processes = 1;
        let endpoint = Arc::new(Endpoint::new(config, None));
        let asked = asked.clone();
        endpoint.when_full(Arc::new(move |_| {
            asked.fetch_add(1, Ordering::SeqCst);
        }));
        endpoint
    }

    #[tokio::test]
    async fn a_new_process_waits_for_a_place_given_back_and_asks_for_one() {
        let asked = Arc::new(AtomicUsize::new(0));
        let endpoint = endpoint(&asked);
        let held = endpoint.process_place(None).unwrap();
        let waiter = tokio::spawn({
            let endpoint = endpoint.clone();
            async move { endpoint.process_place_waiting(None).await.map(drop) }
        });
        while !endpoint.pressed() {
            tokio::task::yield_now().await;
        }
        assert_eq!(asked.load(Ordering::SeqCst), 1, "the holders were asked to let places go");
        drop(held);
        assert!(waiter.await.unwrap().is_ok(), "the place given back is the waiter's");
        assert!(!endpoint.pressed());
    }

    #[tokio::test(start_paused = true)]
    async fn many_waiters_ask_the_holders_once_a_second_between_them() {
        let asked = Arc::new(AtomicUsize::new(0));
        let endpoint = endpoint(&asked);
        let _held = endpoint.process_place(None).unwrap();
        let waiters = (0..10).map(|_| endpoint.process_place_waiting(None));
        let refused = futures_util::future::join_all(waiters).await;
        assert!(refused.iter().all(Result::is_err));
        assert_eq!(asked.load(Ordering::SeqCst), 5, "once a second, not once a waiter");
    }

    #[tokio::test(start_paused = true)]
    async fn a_place_never_given_back_is_refused_after_the_wait_asking_each_second() {
        let asked = Arc::new(AtomicUsize::new(0));
        let endpoint = endpoint(&asked);
        let _held = endpoint.process_place(None).unwrap();
        let refused = endpoint.process_place_waiting(None).await.err();
        assert!(matches!(refused, Some(UpstreamError::Overloaded { .. })), "{refused:?}");
        assert_eq!(asked.load(Ordering::SeqCst), 5, "asked at once, then each second of the 5 s wait");
        assert!(!endpoint.pressed());
        // A waiter given up (its request cancelled) is no longer counted.
        let mut waiting = Box::pin(endpoint.process_place_waiting(None));
        assert!(futures_util::FutureExt::now_or_never(waiting.as_mut()).is_none());
        assert!(endpoint.pressed());
        drop(waiting);
        assert!(!endpoint.pressed());
    }
}
