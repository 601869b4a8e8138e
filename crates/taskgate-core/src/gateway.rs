//! [`Gateway`]: the handle the front door holds. It starts the Router, creates sessions at
//! `initialize`, and hands out [`SessionHandle`]s that deliver messages to session actors with
//! bounded waiting (invariant 3).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use parking_lot::RwLock;
use serde_json::{json, Value};
use taskgate_config::Config;
use taskgate_protocol::mcp::{self, InitializeView};
use taskgate_protocol::{Message as RpcMessage, RequestId};
use taskgate_upstream::{ClientIdentity, Connector};
use tokio::sync::mpsc;

use taskgate_store::{MemoryTaskStore, TaskStore};

use crate::catalog::{Catalog, Naming};
use crate::clock::{Clock, SystemClock};
use crate::metrics::Metrics;
use crate::registry::{Identity, SessionEntry, Sessions};
use crate::router::{Router, UpstreamHealth};
use crate::session::{ClientNotification, ClientRequest, ClientResponse, Close, OpenStream, SessionActor};
use crate::tasks::{Supervisor, Sweep, TaskActor};
use crate::GatewayError;

/// How long a message may wait for room in a session's mailbox before the client gets 503.
const MAILBOX_WAIT: Duration = Duration::from_secs(2);

/// Native tasks by (upstream, upstream task id): our task id and its actor.
pub(crate) type NativeTasks = HashMap<(String, String), (String, Addr<TaskActor>)>;

/// What every session and task shares.
pub(crate) struct Shared {
    pub config: Config,
    pub router: Addr<Router>,
    pub catalog: Arc<RwLock<Catalog>>,
    pub connectors: HashMap<String, Connector>,
    pub sessions: Arc<Sessions>,
    /// Task state (invariant 6: what another replica would need lives here).
    pub store: Arc<dyn TaskStore>,
    pub clock: Arc<dyn Clock>,
    /// Live task actors by task id.
    pub task_actors: RwLock<HashMap<String, Addr<TaskActor>>>,
    /// Native tasks by (upstream, upstream task id): our task id and its actor, to map what the
    /// upstream says about its task (status notifications, related-task `_meta`) to ours.
    pub native_tasks: RwLock<NativeTasks>,
    /// Upstream requests made for a task by (upstream, upstream request id): our task id. What
    /// the upstream sends on their streams (elicitation…) belongs to that task.
    pub task_calls: RwLock<HashMap<(String, taskgate_protocol::RequestId), String>>,
    /// Progress counters and the upstream token sequence.
    pub progress: Arc<crate::progress::ProgressStats>,
    /// Client requests in progress across all sessions.
    pub live_requests: std::sync::atomic::AtomicUsize,
    /// The Prometheus metrics.
    pub metrics: Arc<Metrics>,
    /// When each task was last polled (for `taskgate_task_polls_early_total`); entries go with
    /// their task, so it is bounded by `tasks.max_tasks`.
    pub last_poll: parking_lot::Mutex<HashMap<String, std::time::Instant>>,
}

/// The running gateway core. Cheap to clone.
#[derive(Clone)]
pub struct Gateway {
    shared: Arc<Shared>,
    supervisor: Addr<Supervisor>,
}

impl Gateway {
    /// Starts the core (the Router begins listing upstream tools). Call inside an actix system.
    pub fn start(config: Config) -> Gateway {
        Gateway::start_with_clock(config, Arc::new(SystemClock))
    }

    /// [`Gateway::start`] with a given clock (tests pass a [`crate::clock::ManualClock`]).
    pub fn start_with_clock(config: Config, clock: Arc<dyn Clock>) -> Gateway {
        let metrics = Arc::new(Metrics::new());
        let observer: Arc<dyn taskgate_upstream::RequestObserver> = metrics.clone();
        let connectors: Vec<Connector> =
            config.upstreams.iter().cloned().map(|u| Connector::with_observer(u, Some(observer.clone()))).collect();
        let naming = config.upstreams.iter().map(|u| Naming { upstream: u.name.clone(), prefix: u.prefix }).collect();
        let catalog = Arc::new(RwLock::new(Catalog::new(&config.federation.separator, naming)));
        let sessions = Arc::new(Sessions::new(config.server.max_sessions));
        let list_timeout = Duration::from_secs(config.federation.list_timeout_secs);
        let router = Router::new(connectors.clone(), catalog.clone(), sessions.clone(), list_timeout).start();
        let connectors = connectors.into_iter().map(|c| (c.name().to_owned(), c)).collect();
        let store: Arc<dyn TaskStore> = Arc::new(MemoryTaskStore::new(config.tasks.max_tasks));
        let shared = Arc::new(Shared {
            config,
            router,
            catalog,
            connectors,
            sessions,
            store,
            clock,
            task_actors: RwLock::new(HashMap::new()),
            native_tasks: RwLock::new(HashMap::new()),
            task_calls: RwLock::new(HashMap::new()),
            progress: Arc::new(crate::progress::ProgressStats::new(&metrics)),
            live_requests: Default::default(),
            metrics,
            last_poll: parking_lot::Mutex::new(HashMap::new()),
        });
        let supervisor = Supervisor::new(shared.clone()).start();
        Gateway { shared, supervisor }
    }

    /// The metrics registry.
    pub fn metrics(&self) -> &Metrics {
        &self.shared.metrics
    }

    /// The text exposition of every metric, with the gauges read at scrape time refreshed.
    pub async fn render_metrics(&self) -> String {
        let m = &self.shared.metrics;
        let (_, upstreams) = self.readiness().await;
        for u in upstreams {
            m.upstream_reachable.with_label_values(&[&u.name]).set(i64::from(u.reachable));
        }
        m.sessions_active.reset();
        for (tenant, count) in self.shared.sessions.count_by_tenant() {
            m.sessions_active.with_label_values(&[&tenant]).set(count as i64);
        }
        m.task_actors.set(self.shared.task_actors.read().len() as i64);
        m.requests_in_progress.set(self.live_requests() as i64);
        m.progress_actors.set(self.shared.progress.live.load(std::sync::atomic::Ordering::Relaxed) as i64);
        m.catalog_collisions.set(self.shared.catalog.read().collisions().len() as i64);
        m.render()
    }

    /// Whether the gateway is ready, and each upstream's reachability: ready when every upstream
    /// marked `required` has answered its `tools/list`.
    pub async fn readiness(&self) -> (bool, Vec<UpstreamHealth>) {
        let states = self.shared.router.send(crate::router::UpstreamStates).await.unwrap_or_default();
        let ready = states.iter().all(|u| !u.required || u.reachable);
        (ready, states)
    }

    /// Sweeps expired tasks now, and resolves when done.
    pub async fn sweep_expired(&self) {
        let _ = self.supervisor.send(Sweep).await;
    }

    /// Progress counters: relayed, coalesced, dropped, live tokens.
    pub fn progress_stats(&self) -> &crate::progress::ProgressStats {
        &self.shared.progress
    }

    /// Client requests in progress across all sessions.
    pub fn live_requests(&self) -> usize {
        self.shared.live_requests.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Task actors alive now.
    pub fn live_tasks(&self) -> usize {
        self.shared.task_actors.read().len()
    }

    /// Tasks held in the store (live and finished until their ttl).
    pub fn stored_tasks(&self) -> usize {
        self.shared.store.len()
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.shared.config
    }

    /// Tool names offered by more than one upstream, as last listed.
    pub fn collisions(&self) -> Vec<crate::catalog::Collision> {
        self.shared.catalog.read().collisions().to_vec()
    }

    /// Sessions open now.
    pub fn session_count(&self) -> usize {
        self.shared.sessions.len()
    }

    /// Handles `initialize`: negotiates the version, starts a session actor and returns the
    /// new session id with the `InitializeResult`.
    pub fn initialize(&self, identity: Identity, params: Option<&Value>) -> Result<(String, Value), GatewayError> {
        let view = InitializeView::from_params(params).map_err(GatewayError::InvalidParams)?;
        if self.shared.sessions.is_full() {
            self.shared.metrics.admission_rejected.with_label_values(&[&identity.tenant, "max_sessions"]).inc();
            return Err(GatewayError::Overloaded(format!(
                "the gateway has its maximum of {} sessions open (server.max_sessions)",
                self.shared.config.server.max_sessions
            )));
        }
        // basic/lifecycle "Version Negotiation": the requested version if supported, else ours.
        let version = mcp::negotiate_version(&view.protocol_version);
        // A v4 UUID comes from the OS CSPRNG and is visible ASCII (basic/transports "Session Management").
        let id = uuid::Uuid::new_v4().to_string();
        let client = ClientIdentity { capabilities: view.capabilities, client_info: view.client_info };
        let actor = SessionActor::new(id.clone(), self.shared.clone(), identity.clone(), client).start();
        let entry = SessionEntry { addr: actor.clone(), identity, protocol_version: version.to_owned() };
        if !self.shared.sessions.insert(id.clone(), entry) {
            actor.do_send(Close);
            return Err(GatewayError::Overloaded(
                "the gateway has its maximum of sessions open (server.max_sessions)".into(),
            ));
        }
        let result = json!({
            "protocolVersion": version,
            "capabilities": {
                "tools": { "listChanged": true },
                // basic/utilities/tasks "Capabilities": list, cancel and task-augmented tools/call.
                "tasks": { "list": {}, "cancel": {}, "requests": { "tools": { "call": {} } } },
            },
            "serverInfo": { "name": "taskgate", "title": "taskgate MCP gateway", "version": env!("CARGO_PKG_VERSION") },
        });
        Ok((id, result))
    }

    /// The session `id` of `identity`; another identity's session is not found, exactly like
    /// one that never existed.
    pub fn session(&self, id: &str, identity: &Identity) -> Result<SessionHandle, GatewayError> {
        let entry = self.shared.sessions.get(id, identity).ok_or(GatewayError::SessionNotFound)?;
        Ok(SessionHandle {
            addr: entry.addr,
            metrics: self.shared.metrics.clone(),
            protocol_version: entry.protocol_version,
            stream_buffer: self.shared.config.server.stream_buffer,
        })
    }

    /// Ends a session (DELETE).
    pub async fn end_session(&self, id: &str, identity: &Identity) -> Result<(), GatewayError> {
        let handle = self.session(id, identity)?;
        self.shared.sessions.remove(id);
        let _ = handle.addr.send(Close).await;
        Ok(())
    }
}

/// A client session, as the front door sees it.
pub struct SessionHandle {
    addr: Addr<SessionActor>,
    metrics: Arc<Metrics>,
    protocol_version: String,
    stream_buffer: usize,
}

impl SessionHandle {
    /// The protocol version negotiated at initialize.
    pub fn protocol_version(&self) -> &str {
        &self.protocol_version
    }

    async fn deliver<M>(&self, message: M) -> Result<M::Result, GatewayError>
    where
        M: Message + Send + 'static,
        M::Result: Send,
        SessionActor: Handler<M>,
    {
        match tokio::time::timeout(MAILBOX_WAIT, self.addr.send(message)).await {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(MailboxError::Closed)) => Err(GatewayError::SessionNotFound),
            Ok(Err(MailboxError::Timeout)) | Err(_) => {
                self.metrics.mailbox_full.with_label_values(&["session_mailbox"]).inc();
                Err(GatewayError::Overloaded(
                    "the session's queue is full (server.session_mailbox); retry later".into(),
                ))
            }
        }
    }

    /// Sends a request. The receiver yields messages about it, then its response, then ends.
    pub async fn request(
        &self,
        id: RequestId,
        method: String,
        params: Option<Value>,
    ) -> Result<mpsc::Receiver<RpcMessage>, GatewayError> {
        let (reply, rx) = mpsc::channel(self.stream_buffer);
        self.deliver(ClientRequest { id, method, params, reply }).await??;
        Ok(rx)
    }

    /// Delivers a notification.
    pub async fn notify(&self, method: String, params: Option<Value>) -> Result<(), GatewayError> {
        self.deliver(ClientNotification { method, params }).await
    }

    /// Delivers the client's response to a request relayed from an upstream.
    pub async fn respond(&self, response: RpcMessage) -> Result<(), GatewayError> {
        self.deliver(ClientResponse(response)).await?
    }

    /// Opens the session's GET stream.
    pub async fn open_stream(&self) -> Result<mpsc::Receiver<RpcMessage>, GatewayError> {
        let (tx, rx) = mpsc::channel(self.stream_buffer);
        self.deliver(OpenStream(tx)).await??;
        Ok(rx)
    }
}
