use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Weak};
use std::task::Poll;
use std::time::Duration;

use serde_json::{json, Value};
use taskgate_config::{ShareSessions, Transport, UpstreamConfig, UpstreamProtocol};
use taskgate_protocol::mcp::{self, methods};
use taskgate_protocol::{ErrorObject, Message, Payload, RawArguments, RequestId};
use tokio::sync::{mpsc, watch, Semaphore};

use crate::http::HttpChannel;
use crate::modern::{Era, ModernState, ToolHeaders, Verdict};
use crate::shared::{Lane, LaneCall, Lanes, Owners};
use crate::stdio::StdioChannel;
use crate::UpstreamError;

/// Messages buffered from an upstream before its reader waits for the owner.
const INCOMING_BUFFER: usize = 256;

/// How long a new session waits for its GET stream to open before its first request.
const GET_STREAM_WAIT: Duration = Duration::from_secs(2);

/// How long a stdio process may take to answer the `server/discover` probe before it is taken
/// for a legacy server (stdio "Backward Compatibility": one that does not respond).
const STDIO_PROBE_WAIT: Duration = Duration::from_secs(5);

/// What an upstream session declares about its client in `initialize`.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientIdentity {
    /// Capabilities declared upstream (mirrors the gateway client's own).
    pub capabilities: Value,
    /// `clientInfo` sent upstream.
    pub client_info: Value,
}

impl ClientIdentity {
    /// Whether the client can be asked things (elicitation, sampling, roots): an upstream may
    /// ask on its GET stream, so a session of such a client keeps that stream open.
    pub fn answers_requests(&self) -> bool {
        ["elicitation", "sampling", "roots"].iter().any(|c| self.capabilities.get(c).is_some())
    }

    /// The gateway itself as a client with no optional capabilities (used for the catalog).
    pub fn gateway() -> ClientIdentity {
        ClientIdentity {
            capabilities: json!({}),
            client_info: json!({"name": "taskgate", "version": env!("CARGO_PKG_VERSION")}),
        }
    }
}

/// An upstream HTTP session, as another gateway process can continue it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionResume {
    /// The upstream's `Mcp-Session-Id`.
    pub session_id: String,
    /// The protocol version negotiated in it.
    pub protocol_version: String,
}

/// A message an upstream sent on its own initiative.
#[derive(Debug, Clone, PartialEq)]
pub enum UpstreamEvent {
    /// A notification (progress, list changes, log messages…).
    Notification {
        /// Method name.
        method: String,
        /// Params as sent.
        params: Option<Value>,
        /// The upstream-local id of the request on whose response stream it arrived.
        related: Option<RequestId>,
    },
    /// A request to the client (elicitation, sampling, roots…); answer with
    /// [`UpstreamSession::respond`].
    Request {
        /// The upstream's id for it.
        id: RequestId,
        /// Method name.
        method: String,
        /// Params as sent.
        params: Option<Value>,
        /// The upstream-local id of the request on whose response stream it arrived.
        related: Option<RequestId>,
    },
}

/// A message read from an upstream, with the request whose stream carried it.
#[derive(Debug)]
pub(crate) struct Incoming {
    pub message: Message,
    pub related: Option<RequestId>,
}

/// Where notifications about an in-flight request go, so that they reach its caller before
/// its response: the caller's sink, found by the request's progress token. (Notifications on
/// a request's own SSE response stream go to its sink directly.)
#[derive(Default)]
pub(crate) struct Routes {
    by_token: parking_lot::Mutex<foldhash::HashMap<String, crate::Sender<Message>>>,
}

impl Routes {
    /// The sink for a notification that names a progress token of an in-flight request.
    pub(crate) fn sink_for(&self, message: &Message) -> Option<crate::Sender<Message>> {
        let Message::Notification { params: Some(params), .. } = message else { return None };
        let token = params.get(mcp::meta::PROGRESS_TOKEN)?;
        self.by_token.lock().get(&token.to_string()).cloned()
    }

    /// Delivers an unattributed message: to a request's sink when its token matches, else to
    /// the session's owner.
    pub(crate) async fn deliver(&self, message: Message, incoming: &mpsc::Sender<Box<Incoming>>) -> bool {
        let message = match self.sink_for(&message) {
            Some(sink) => match sink.send(message).await {
                Ok(()) => return true,
                // The request it belonged to has just ended: the owner decides (and drops it).
                Err(crate::NotSent(message)) => message,
            },
            None => message,
        };
        incoming.send(Box::new(Incoming { message, related: None })).await.is_ok()
    }
}

/// The requests in flight that may have the upstream ask the client something meanwhile, kept
/// only as far as [`SessionInner::sole_call`] needs: how many there are and the sum of their
/// (numeric) ids, which is the id itself when one is. A table of them cost every waiting call
/// (a wrapped task's, for the task's life) a slot. The gateway's ids to an upstream are
/// numbers ([`UpstreamSession::next_request_id`]); a string id is listed as it is.
#[derive(Default)]
struct InFlight {
    count: usize,
    /// The numeric ids' sum (wrapping: only its value with one call in flight is read).
    sum: i64,
    strings: Vec<String>,
}

impl InFlight {
    fn add(&mut self, id: &RequestId) {
        self.count += 1;
        match id {
            RequestId::Number(n) => self.sum = self.sum.wrapping_add(*n),
            RequestId::String(s) => self.strings.push(s.clone()),
        }
    }

    fn remove(&mut self, id: &RequestId) {
        self.count -= 1;
        match id {
            RequestId::Number(n) => self.sum = self.sum.wrapping_sub(*n),
            RequestId::String(s) => {
                if let Some(at) = self.strings.iter().position(|x| x == s) {
                    self.strings.swap_remove(at);
                }
                if self.strings.is_empty() {
                    self.strings = Vec::new();
                }
            }
        }
    }

    fn sole(&self) -> Option<RequestId> {
        match (self.count, self.strings.first()) {
            (1, Some(s)) => Some(RequestId::String(s.clone())),
            (1, None) => Some(RequestId::Number(self.sum)),
            _ => None,
        }
    }
}

/// Keeps a request in [`SessionInner::calls`] while it is in flight. (It borrows the id the
/// call holds: a waiting call keeps one copy.)
struct CallGuard<'a> {
    inner: &'a SessionInner,
    id: Option<&'a RequestId>,
}

impl<'a> CallGuard<'a> {
    fn new(inner: &'a SessionInner, id: &'a RequestId, method: &str) -> CallGuard<'a> {
        let asks = matches!(
            method,
            methods::TOOLS_CALL
                | methods::TASKS_RESULT
                | methods::PROMPTS_GET
                | methods::RESOURCES_READ
                | methods::COMPLETION_COMPLETE
        );
        if asks {
            inner.calls.lock().add(id);
        }
        CallGuard { inner, id: asks.then_some(id) }
    }
}

impl CallGuard<'_> {
    /// Hands the call's place among those in flight to a [`WaitingCall`]: whether it has one.
    fn keep(mut self) -> bool {
        self.id.take().is_some()
    }
}

impl Drop for CallGuard<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            self.inner.calls.lock().remove(id);
        }
    }
}

/// Routes progress naming `token` to a sink for as long as it is held (a native task's token
/// stays valid for the task's lifetime, beyond the request that created it).
pub struct ProgressRoute {
    routes: Arc<Routes>,
    key: String,
    /// The progress of a task the upstream runs may come on its GET stream.
    _listening: StreamHold,
}

/// Keeps an upstream session's GET stream open while held (see [`UpstreamSession::hold_stream`]).
pub struct StreamHold {
    holds: Arc<watch::Sender<usize>>,
}

impl Drop for StreamHold {
    fn drop(&mut self) {
        self.holds.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// When an upstream session's GET stream is open (streamable-http "Listening for Messages from
/// the Server"): always for a client that can be asked things (an upstream may ask on it), and
/// otherwise while something holds it: the client's own GET stream, a native task's progress
/// route, a catalog session. With nothing to receive what it carries, it closes after the
/// upstream's `stream_idle_secs`.
pub(crate) struct Listening {
    pub(crate) always: bool,
    pub(crate) holds: watch::Receiver<usize>,
}

impl Listening {
    pub(crate) fn wanted(&self) -> bool {
        self.always || *self.holds.borrow() > 0
    }
}

impl Drop for ProgressRoute {
    fn drop(&mut self) {
        self.routes.by_token.lock().remove(&self.key);
    }
}

/// Registers a request's progress token while the request is in flight.
struct TokenRoute<'a> {
    routes: &'a Routes,
    key: Option<String>,
}

impl<'a> TokenRoute<'a> {
    fn new(routes: &'a Routes, params: Option<&Value>, sink: Option<&crate::Sender<Message>>) -> TokenRoute<'a> {
        let key = match (mcp::progress_token(params), sink) {
            (Some(token), Some(sink)) => {
                let key = token.to_string();
                routes.by_token.lock().insert(key.clone(), sink.clone());
                Some(key)
            }
            _ => None,
        };
        TokenRoute { routes, key }
    }
}

impl TokenRoute<'_> {
    /// Hands the route to a [`WaitingCall`]: its key, if a route was made.
    fn keep(mut self) -> Option<String> {
        self.key.take()
    }
}

impl Drop for TokenRoute<'_> {
    fn drop(&mut self) {
        if let Some(key) = &self.key {
            self.routes.by_token.lock().remove(key);
        }
    }
}

/// A transport-level failure, before it becomes an [`UpstreamError`].
#[derive(Debug)]
pub(crate) enum ChannelError {
    /// The upstream no longer knows our session (HTTP 404): initialize again and retry.
    Expired,
    Failed(UpstreamError),
}

impl From<UpstreamError> for ChannelError {
    fn from(e: UpstreamError) -> Self {
        ChannelError::Failed(e)
    }
}

/// Told about every upstream request, for metrics.
pub trait RequestObserver: Send + Sync + 'static {
    /// One request to `upstream` took `took`; `error` is the failure's reason label, if any.
    fn observe(&self, upstream: &str, method: &str, took: Duration, error: Option<&'static str>);

    /// A long-lived stream to `upstream` (a GET stream, a `subscriptions/listen` stream) opened
    /// or closed.
    fn stream(&self, _upstream: &str, _open: bool) {}

    /// Where to report how many connections to `upstream` are in use (requests in flight and
    /// streams open, under its `max_connections`): asked once per upstream, called on every
    /// change.
    fn connections_gauge(&self, _upstream: &str) -> Option<Box<dyn Fn(usize) + Send + Sync>> {
        None
    }

    /// Where to count the requests to `upstream` that waited for a connection (all of its
    /// `max_connections` were in use).
    fn connection_waits(&self, _upstream: &str) -> Option<Box<dyn Fn() + Send + Sync>> {
        None
    }

    /// A session with `upstream` began (`open`) or ended; `shared` when client sessions share it.
    fn session(&self, _upstream: &str, _shared: bool, _open: bool) {}
}

/// One configured upstream: what its sessions share.
#[derive(Clone)]
pub struct Connector {
    inner: Arc<ConnectorInner>,
}

pub(crate) struct ConnectorInner {
    config: UpstreamConfig,
    /// The revision the upstream was found to speak (basic/versioning: cached for the origin,
    /// probed again when the cached assumption fails).
    era: parking_lot::Mutex<Option<Era>>,
    /// The `x-mcp-header` annotations of a modern upstream's tools.
    tool_headers: ToolHeaders,
    http: crate::client::HttpClient,
    processes: Arc<Semaphore>,
    /// The bound on connections to an HTTP upstream.
    connections: Arc<crate::http::Connections>,
    /// The capabilities its sessions were last given, shared by them.
    capabilities: parking_lot::Mutex<Option<Arc<Value>>>,
    /// Sessions shared by client sessions, by sharing key (see [`Connector::open_shared`]).
    shared: parking_lot::Mutex<foldhash::HashMap<String, Arc<SessionInner>>>,
    observer: Option<Arc<dyn RequestObserver>>,
    /// Raised once, when the gateway shuts down: every process of this upstream is stopped.
    shutdown: tokio::sync::watch::Sender<bool>,
}

/// How long an idle connection to an upstream is kept for reuse: under the keep-alive of the
/// common servers (Node's and actix-web's 5 s, uvicorn's 5 s, nginx's 75 s), so the gateway
/// closes an idle connection before the server does. A request sent on a connection just as
/// the server closes it fails (the server may or may not have read it, so it is not sent
/// again): with 90 s, a request after 5 to 90 s of quiet could meet that race.
const POOL_IDLE: Duration = Duration::from_secs(4);

impl Connector {
    /// A connector for one upstream.
    pub fn new(config: UpstreamConfig) -> Connector {
        Connector::with_observer(config, None)
    }

    /// A connector whose requests are reported to `observer`.
    pub fn with_observer(config: UpstreamConfig, observer: Option<Arc<dyn RequestObserver>>) -> Connector {
        let http = crate::client::HttpClient::new(config.url.as_deref(), config.max_connections, POOL_IDLE);
        let processes = Arc::new(Semaphore::new(config.max_processes));
        let connections = crate::http::Connections::new(&config.name, config.max_connections, observer.clone());
        let shutdown = tokio::sync::watch::channel(false).0;
        let (era, tool_headers) = (parking_lot::Mutex::new(None), ToolHeaders::default());
        Connector {
            inner: Arc::new(ConnectorInner {
                config,
                era,
                tool_headers,
                http,
                processes,
                connections,
                capabilities: parking_lot::Mutex::new(None),
                shared: parking_lot::Mutex::default(),
                observer,
                shutdown,
            }),
        }
    }

    /// Stops every stdio process of this upstream in the order basic/lifecycle "Shutdown"
    /// gives for stdio: close its stdin, wait; SIGTERM, wait; SIGKILL. Resolves once all have
    /// exited; no process is started after it.
    pub async fn shutdown(&self) {
        self.inner.shutdown.send_replace(true);
        // The pool's sessions end with their last client session now, not after an idle while.
        let pooled: Vec<_> = self.inner.shared.lock().drain().collect();
        drop(pooled);
        let all = self.inner.config.max_processes as u32;
        // Each process holds a permit until it has exited.
        let _ = self.inner.processes.acquire_many(all).await;
        self.inner.processes.close();
    }

    /// `capabilities`, as the one copy the sessions of this upstream share while it declares
    /// the same (each session kept its own: about 2 KB a session for the demo's).
    pub(crate) fn shared_capabilities(&self, capabilities: Value) -> Arc<Value> {
        let mut last = self.inner.capabilities.lock();
        match &*last {
            Some(shared) if **shared == capabilities => shared.clone(),
            _ => {
                let shared = Arc::new(capabilities);
                *last = Some(shared.clone());
                shared
            }
        }
    }

    pub(crate) fn from_inner(inner: Arc<ConnectorInner>) -> Connector {
        Connector { inner }
    }

    /// Whether client sessions share this upstream's sessions now (`share_sessions`): always,
    /// never, or (`auto`) once the upstream is known to speak 2026-07-28.
    pub fn shares_sessions(&self) -> bool {
        match self.inner.config.share_sessions {
            ShareSessions::Always => true,
            ShareSessions::Never => false,
            ShareSessions::Auto => self.era() == Some(Era::Modern),
        }
    }

    /// Shared sessions kept now (with client sessions, or idle).
    pub fn shared_sessions(&self) -> usize {
        self.inner.shared.lock().len()
    }

    /// A lane in the session shared under `key`, opening it if there is none: its client
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
                let lanes = Arc::new(Lanes::new(key.to_owned(), Arc::downgrade(&self.inner)));
                let inner = self.new_inner(identity(), Owners::Shared(lanes));
                pool.insert(key.to_owned(), inner.clone());
                inner
            }
        };
        drop(pool);
        let Owners::Shared(lanes) = &inner.events else { unreachable!("a pooled session is shared") };
        let lane = Arc::new(lanes.join(events));
        UpstreamSession { inner, lane: Some(lane) }
    }

    /// The last lane left the session shared under `key` (the `emptied`th time): it ends
    /// after `shared_idle_secs` unless a client session joins meanwhile.
    pub(crate) fn shared_idle(&self, key: &str, emptied: u64) {
        let mut idle = Duration::from_secs(self.inner.config.shared_idle_secs);
        {
            // Idle sessions kept are bounded too: clients declaring ever new identities would
            // otherwise leave a session each behind for the idle time.
            let pool = self.inner.shared.lock();
            let crowded = pool.len() > MAX_IDLE_SHARED
                && pool.values().filter(|s| matches!(&s.events, Owners::Shared(lanes) if lanes.is_idle())).count()
                    > MAX_IDLE_SHARED;
            if crowded {
                idle = Duration::ZERO;
            }
        }
        let expire = {
            let connector = Arc::downgrade(&self.inner);
            let key = key.to_owned();
            move || {
                let Some(inner) = connector.upgrade() else { return };
                let mut pool = inner.shared.lock();
                let idle = pool.get(&key).is_some_and(|session| match &session.events {
                    Owners::Shared(lanes) => lanes.idle_since(emptied),
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
        &self.inner.config.name
    }

    /// The upstream's configuration.
    pub fn config(&self) -> &UpstreamConfig {
        &self.inner.config
    }

    /// The revision this upstream speaks, once known: pinned by `protocol`, or found by a
    /// probe. `None` until the first session has connected.
    pub fn protocol_version(&self) -> Option<&'static str> {
        match self.era() {
            Some(Era::Modern) => Some(taskgate_protocol::modern::PROTOCOL_VERSION),
            Some(Era::Legacy) => Some(mcp::LATEST_PROTOCOL_VERSION),
            None => None,
        }
    }

    pub(crate) fn era(&self) -> Option<Era> {
        match self.inner.config.protocol {
            UpstreamProtocol::Legacy => Some(Era::Legacy),
            UpstreamProtocol::Modern => Some(Era::Modern),
            UpstreamProtocol::Auto => *self.inner.era.lock(),
        }
    }

    fn learn(&self, era: Option<Era>) {
        if self.inner.config.protocol == UpstreamProtocol::Auto {
            *self.inner.era.lock() = era;
        }
    }

    /// stdio processes of this upstream running now.
    pub fn running_processes(&self) -> usize {
        self.inner.config.max_processes - self.inner.processes.available_permits()
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
    ) -> Option<UpstreamSession> {
        if self.config().transport != Transport::Http {
            return None;
        }
        if resume.protocol_version == taskgate_protocol::modern::PROTOCOL_VERSION {
            // A modern upstream has no sessions: any process continues where another left off.
            return Some(self.open(identity, events));
        }
        let session = self.open(identity, events);
        let (incoming_tx, incoming_rx) = mpsc::channel(INCOMING_BUFFER);
        let channel = Arc::new(HttpChannel::new(
            self.config(),
            self.inner.http.clone(),
            incoming_tx,
            session.inner.routes.clone(),
            session.inner.closed.subscribe(),
            self.inner.connections.clone(),
        ));
        channel.adopt(resume);
        tokio::spawn(pump(Arc::downgrade(&session.inner), incoming_rx));
        drop(channel.clone().listen(session.listening()));
        let ready =
            Arc::new(Ready { channel: Channel::Http(channel), server_capabilities: Arc::new(json!({})), modern: None });
        *session.inner.state.try_lock().expect("a new session's state is free") = Some(ready);
        Some(session)
    }

    /// Opens a session; nothing is sent until its first request. Messages the upstream sends
    /// on its own arrive on `events`.
    pub fn open(&self, identity: ClientIdentity, events: crate::EventSender) -> UpstreamSession {
        UpstreamSession { inner: self.new_inner(identity, Owners::One(events)), lane: None }
    }

    fn new_inner(&self, identity: ClientIdentity, events: Owners) -> Arc<SessionInner> {
        let (closed, _) = watch::channel(false);
        let (holds, _) = watch::channel(0);
        if let Some(observer) = &self.inner.observer {
            observer.session(self.name(), matches!(events, Owners::Shared(_)), true);
        }
        Arc::new(SessionInner {
            connector: self.clone(),
            listen_always: identity.answers_requests(),
            holds: Arc::new(holds),
            identity,
            events,
            state: tokio::sync::Mutex::new(None),
            calls: parking_lot::Mutex::default(),
            closed,
            routes: Arc::default(),
        })
    }
}

/// Idle shared sessions one upstream keeps at most (beyond them, one ends with its last lane).
pub(crate) const MAX_IDLE_SHARED: usize = 64;

/// The next request id of any upstream session of this process.
static NEXT_REQUEST_ID: AtomicI64 = AtomicI64::new(1);

/// One MCP session with an upstream. Cheap to clone; all clones are the same session, which
/// ends (DELETE, or the process is stopped) when the last clone is dropped or on [`Self::close`].
/// A handle from [`Connector::open_shared`] is one client session's lane in a shared session:
/// the lane leaves when its last clone is dropped, and the session ends after it is idle.
#[derive(Clone)]
pub struct UpstreamSession {
    pub(crate) inner: Arc<SessionInner>,
    lane: Option<Arc<Lane>>,
}

pub(crate) struct SessionInner {
    pub(crate) connector: Connector,
    identity: ClientIdentity,
    /// The GET stream is always open (the client can be asked things).
    listen_always: bool,
    /// How many [`StreamHold`]s keep the GET stream open.
    holds: Arc<watch::Sender<usize>>,
    /// Who receives what the upstream sends on its own: one client session, or the lanes of a
    /// shared session. (Events are boxed: a channel allocates its first block of 32 slots at
    /// once, and an event is 144 bytes; most sessions never get one.)
    pub(crate) events: Owners,
    /// Requests in flight that may have the upstream ask the client something meanwhile.
    calls: parking_lot::Mutex<InFlight>,
    /// The live connection; the async mutex serialises (re-)initialization.
    state: tokio::sync::Mutex<Option<Arc<Ready>>>,
    closed: watch::Sender<bool>,
    routes: Arc<Routes>,
}

/// An initialized connection (legacy), or a modern upstream's channel and what the session
/// keeps for it.
pub(crate) struct Ready {
    pub(crate) channel: Channel,
    /// Shared by the sessions of a connector while the upstream declares the same (see
    /// [`Connector::shared_capabilities`]).
    pub(crate) server_capabilities: Arc<Value>,
    pub(crate) modern: Option<Arc<ModernState>>,
}

/// A request as it goes on the wire, written once. A call holds this rather than its message
/// while it waits for the answer (a wrapped task's call waits for its task's whole life): the
/// JSON text is one allocation and a fraction of the size of the parsed params, and a retry
/// (after a 404, or in a new revision) sends it again as it is.
pub(crate) struct Encoded {
    pub(crate) id: RequestId,
    /// An `initialize` (its response names the HTTP session).
    pub(crate) initialize: bool,
    /// Followed on the GET stream after its response: a `resources/subscribe` (the updates),
    /// or a call creating a task with a progress token (the task's progress). When something
    /// receives what that stream carries, it opens first.
    pub(crate) on_stream: bool,
    /// Its result is passed through: kept as the text it comes as ([`Payload::Raw`]).
    pub(crate) pass: bool,
    pub(crate) json: bytes::Bytes,
}

impl Encoded {
    /// A request from its parts.
    pub(crate) fn request(id: RequestId, method: &str, params: Option<&Value>) -> Encoded {
        Encoded::passing(id, method, params, None)
    }

    /// [`Encoded::request`] with a `tools/call`'s arguments as the client wrote them.
    pub(crate) fn passing(
        id: RequestId,
        method: &str,
        params: Option<&Value>,
        arguments: Option<&RawArguments>,
    ) -> Encoded {
        let json = Message::request_bytes_passing(&id, method, params, arguments).into();
        let initialize = method == methods::INITIALIZE;
        let creates_task = params.is_some_and(|p| p.get("task").is_some());
        let on_stream =
            method == methods::RESOURCES_SUBSCRIBE || (creates_task && mcp::progress_token(params).is_some());
        Encoded { id, initialize, on_stream, pass: false, json }
    }

    /// `message`, a request.
    pub(crate) fn of(message: &Message) -> Encoded {
        let Message::Request { id, method, params } = message else { unreachable!("a request") };
        Encoded::request(id.clone(), method, params.as_ref())
    }
}

/// A request's params as its call holds them until they go: as a message has them, or boxed
/// (a wrapped task's call, which waits for its task's life, keeps a word for them, not a
/// `Value`).
trait Params: Send {
    /// The params as a tree (without arguments passed as written: nothing reads those).
    fn value(&self) -> Option<&Value>;
    /// The whole params as a tree, taken.
    fn take_value(&mut self) -> Option<Value>;
    /// The request written for a legacy session, the params taken.
    fn encode(&mut self, id: &RequestId, method: &str) -> Encoded {
        Encoded::request(id.clone(), method, self.take_value().as_ref())
    }
}

/// A request's params, with a `tools/call`'s arguments as the client wrote them
/// ([`UpstreamSession::request_payload`]).
struct Passing {
    params: Option<Value>,
    arguments: Option<RawArguments>,
}

impl Params for Passing {
    fn value(&self) -> Option<&Value> {
        self.params.as_ref()
    }

    /// The arguments back in the params (a 2026-07-28 session rewrites the params).
    fn take_value(&mut self) -> Option<Value> {
        let mut params = self.params.take();
        if let Some(arguments) = self.arguments.take() {
            arguments.restore(&mut params);
        }
        params
    }

    fn encode(&mut self, id: &RequestId, method: &str) -> Encoded {
        let arguments = self.arguments.take();
        Encoded::passing(id.clone(), method, self.params.take().as_ref(), arguments.as_ref())
    }
}

impl Params for Option<Value> {
    fn value(&self) -> Option<&Value> {
        self.as_ref()
    }

    fn take_value(&mut self) -> Option<Value> {
        self.take()
    }
}

impl Params for Option<Box<Value>> {
    fn value(&self) -> Option<&Value> {
        self.as_deref()
    }

    fn take_value(&mut self) -> Option<Value> {
        self.take().map(|params| *params)
    }
}

/// A request started: its outcome, or the call waiting for its answer.
enum Started<'m> {
    Done(Result<Payload, UpstreamError>),
    Waiting(WaitingCall<'m>),
}

/// What a wrapped task's call is once sent ([`UpstreamSession::into_call`]).
pub enum CallState {
    /// Its outcome.
    Done(Result<Value, UpstreamError>),
    /// Written to a stdio upstream, waiting for its answer: poll it for the outcome.
    Waiting(WaitingCall<'static>),
}

/// A call written to a stdio upstream and waiting for its answer, holding what its call held
/// while it waits: the pending entry, its deadline, its progress route, its place among the
/// calls in flight and its lane's, and what the metrics need at the end. Dropped unanswered
/// (a cancelled task), it gives all of them back. A few words, not the state of the layers
/// that sent the request: a wrapped task's call waits in it for the task's life.
pub struct WaitingCall<'m> {
    session: UpstreamSession,
    id: RequestId,
    method: &'m str,
    started: std::time::Instant,
    wait: crate::stdio::StdioWait,
    deadline: std::pin::Pin<Box<tokio::time::Sleep>>,
    route: Option<String>,
    asks: bool,
    /// In a shared session: the lane's call, and whether it creates a task.
    lane: Option<bool>,
}

impl std::future::Future for WaitingCall<'_> {
    type Output = Result<Payload, UpstreamError>;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        // Answered first, as `tokio::time::timeout` polls its future first.
        let outcome = match std::pin::Pin::new(&mut this.wait).poll(cx) {
            Poll::Ready(answer) => this.session.answered(answer.map_err(|e| this.session.expired_twice(e))),
            Poll::Pending => {
                std::task::ready!(this.deadline.as_mut().poll(cx));
                Err(this.session.timed_out())
            }
        };
        Poll::Ready(this.session.observed(this.method, this.started, outcome))
    }
}

impl Drop for WaitingCall<'_> {
    fn drop(&mut self) {
        let inner = &self.session.inner;
        if let Some(key) = &self.route {
            inner.routes.by_token.lock().remove(key);
        }
        if self.asks {
            inner.calls.lock().remove(&self.id);
        }
        if let (Some(creates_task), Some(lane)) = (self.lane, &self.session.lane) {
            lane.ended(&self.id, creates_task);
        }
    }
}

/// A request sent: its outcome, or (a legacy stdio session's) what waits for it.
enum Sent {
    Done(Result<Payload, UpstreamError>),
    Waiting(crate::stdio::StdioWait),
}

#[derive(Clone)]
pub(crate) enum Channel {
    Http(Arc<HttpChannel>),
    Stdio(Arc<StdioChannel>),
}

impl Channel {
    pub(crate) async fn request(
        &self,
        request: &Encoded,
        sink: Option<&crate::Sender<Message>>,
        headers: &[(reqwest::header::HeaderName, reqwest::header::HeaderValue)],
    ) -> Result<Value, ChannelError> {
        self.request_payload(request, sink, headers).await.map(Payload::into_value)
    }

    /// [`Channel::request`], a result passed through (`request.pass`) kept as text.
    pub(crate) async fn request_payload(
        &self,
        request: &Encoded,
        sink: Option<&crate::Sender<Message>>,
        headers: &[(reqwest::header::HeaderName, reqwest::header::HeaderValue)],
    ) -> Result<Payload, ChannelError> {
        match self {
            // Boxed: the HTTP path's future is large, and a stdio call should not carry its size.
            Channel::Http(c) => Box::pin(c.request(request, sink, headers)).await,
            Channel::Stdio(c) => c.request(request).await,
        }
    }

    pub(crate) async fn send(&self, message: &Message) -> Result<(), ChannelError> {
        match self {
            Channel::Http(c) => c.send(message).await,
            Channel::Stdio(c) => c.send(message).await,
        }
    }

    fn is_alive(&self) -> bool {
        match self {
            Channel::Http(c) => c.is_alive(),
            Channel::Stdio(c) => c.is_alive(),
        }
    }

    async fn shutdown(&self) {
        match self {
            Channel::Http(c) => c.delete().await,
            Channel::Stdio(c) => c.shutdown(),
        }
    }
}

/// A hold on an [`UpstreamSession`] that does not keep it open.
#[derive(Clone)]
pub struct WeakUpstreamSession {
    inner: Weak<SessionInner>,
    lane: Option<Weak<Lane>>,
}

impl WeakUpstreamSession {
    /// The session, while something else holds it (a lane: while something holds the lane).
    pub fn upgrade(&self) -> Option<UpstreamSession> {
        let lane = match &self.lane {
            Some(lane) => Some(lane.upgrade()?),
            None => None,
        };
        self.inner.upgrade().map(|inner| UpstreamSession { inner, lane })
    }
}

impl UpstreamSession {
    /// A hold that does not keep the session open.
    pub fn downgrade(&self) -> WeakUpstreamSession {
        WeakUpstreamSession { inner: Arc::downgrade(&self.inner), lane: self.lane.as_ref().map(Arc::downgrade) }
    }

    /// Whether this is a lane of a session shared by client sessions.
    pub fn is_shared(&self) -> bool {
        self.lane.is_some()
    }

    /// The upstream's name.
    pub fn upstream(&self) -> &str {
        self.inner.connector.name()
    }

    /// A fresh request id, for callers that must know it before sending (to route a
    /// cancellation later). Ids are unique across every upstream session of the process, not
    /// only within this one: (upstream, id) names one request, so that what an upstream sends
    /// about a request (an elicitation for a task's call) is never taken for another session's.
    pub fn next_request_id(&self) -> RequestId {
        RequestId::Number(NEXT_REQUEST_ID.fetch_add(1, Ordering::Relaxed))
    }

    /// Sends a request and waits for its result, initializing the session first if needed.
    pub async fn request(&self, method: &str, params: Option<Value>) -> Result<Value, UpstreamError> {
        self.request_with_id(self.next_request_id(), method, params).await
    }

    /// [`Self::request`] with an id from [`Self::next_request_id`].
    pub async fn request_with_id(
        &self,
        id: RequestId,
        method: &str,
        params: Option<Value>,
    ) -> Result<Value, UpstreamError> {
        self.request_routed(id, method, params, None).await
    }

    /// Sends a request; notifications about it (those on its response stream, and progress
    /// naming its token) and requests the upstream sends on its response stream (other than
    /// `ping`) go to `related`, each before the result is returned, in the order sent. (The
    /// message is made here: the future holds it once.)
    pub fn request_routed<'a>(
        &'a self,
        id: RequestId,
        method: &str,
        params: Option<Value>,
        related: Option<crate::Sender<Message>>,
    ) -> impl std::future::Future<Output = Result<Value, UpstreamError>> + 'a {
        self.request_message(Message::request(id, method, params), related)
    }

    /// [`UpstreamSession::request_routed`] of a request already made (`message` is a request).
    // Not an async fn: one keeps its arguments twice in its state (as passed, and moved into
    // its body); this block uses them where they are.
    #[allow(clippy::manual_async_fn)]
    pub fn request_message<'a>(
        &'a self,
        mut message: Message,
        related: Option<crate::Sender<Message>>,
    ) -> impl std::future::Future<Output = Result<Value, UpstreamError>> + 'a {
        async move { self.run(&mut message, related.as_ref(), false).await.map(Payload::into_value) }
    }

    /// [`UpstreamSession::request_routed`], its result as a [`Payload`]. With `pass` (a caller
    /// that passes the result on without looking inside, as a plain `tools/call`'s), over a
    /// 2025-11-25 session the result stays the text the upstream wrote ([`Payload::Raw`]), read
    /// only as far as checking that it is JSON and an object. (A 2026-07-28 upstream's result
    /// is read: the gateway rewrites it.) A `tools/call`'s `arguments`, when the front door
    /// kept them as the client wrote them ([`RawArguments`]), go so to a 2025-11-25 session:
    /// never read into a tree nor written again; a 2026-07-28 session gets them in the params
    /// it rewrites.
    #[allow(clippy::manual_async_fn)]
    pub fn request_payload<'a>(
        &'a self,
        id: RequestId,
        method: &'a str,
        params: Option<Value>,
        arguments: Option<RawArguments>,
        related: Option<crate::Sender<Message>>,
        pass: bool,
    ) -> impl std::future::Future<Output = Result<Payload, UpstreamError>> + 'a {
        async move {
            let mut params = Passing { params, arguments };
            self.run_parts(&id, method, &mut params, related.as_ref(), pass).await
        }
    }

    /// A request with the session moved in, for a call that outlives its caller (a wrapped
    /// task's): its outcome, or, over a legacy stdio session, the call waiting for its answer
    /// ([`CallState::Waiting`]), which the caller keeps and polls: a wrapped task's call then
    /// waits with no task of its own. Only its id, method and params are kept until then (its
    /// params until they go). Not an async fn, for the same reason as
    /// [`Self::request_message`].
    #[allow(clippy::manual_async_fn)]
    pub fn into_call(
        self,
        id: RequestId,
        method: &'static str,
        mut params: Option<Box<Value>>,
    ) -> impl std::future::Future<Output = CallState> + 'static {
        async move {
            match self.start_call(&id, method, &mut params, None, false).await {
                Started::Done(outcome) => CallState::Done(outcome.map(Payload::into_value)),
                Started::Waiting(waiting) => CallState::Waiting(waiting),
            }
        }
    }

    /// Runs `message` (a request): [`Self::run_parts`].
    async fn run(
        &self,
        message: &mut Message,
        related: Option<&crate::Sender<Message>>,
        pass: bool,
    ) -> Result<Payload, UpstreamError> {
        let Message::Request { id, method, params } = message else { unreachable!("a request") };
        self.run_parts(id, method, params, related, pass).await
    }

    /// Runs a request, its progress routed and the call counted in flight meanwhile. Its params
    /// are taken when it goes (a call holds them only as the text sent, or not at all).
    async fn run_parts<P: Params>(
        &self,
        id: &RequestId,
        method: &str,
        params: &mut P,
        related: Option<&crate::Sender<Message>>,
        pass: bool,
    ) -> Result<Payload, UpstreamError> {
        match self.start_call(id, method, params, related, pass).await {
            Started::Done(outcome) => outcome,
            Started::Waiting(waiting) => waiting.await,
        }
    }

    /// Sends a request, its progress routed and the call counted in flight meanwhile: its
    /// outcome, or, once a legacy stdio request is written, the call waiting for its answer
    /// ([`WaitingCall`], which holds all that from then on).
    async fn start_call<'m, P: Params>(
        &self,
        id: &RequestId,
        method: &'m str,
        params: &mut P,
        related: Option<&crate::Sender<Message>>,
        pass: bool,
    ) -> Started<'m> {
        let route = TokenRoute::new(&self.inner.routes, params.value(), related);
        let call = CallGuard::new(&self.inner, id, method);
        // In a shared session, what the upstream sends about this request reaches this lane.
        let lane =
            self.lane.as_ref().map(|lane| lane.call(id, params.value().is_some_and(|p| p.get("task").is_some())));
        let started = std::time::Instant::now();
        let deadline = tokio::time::sleep(self.timeout());
        tokio::pin!(deadline);
        let sent = tokio::select! {
            biased;
            sent = Box::pin(self.send(id, method, params, related, pass)) => sent,
            () = &mut deadline => return Started::Done(self.observed(method, started, Err(self.timed_out()))),
        };
        match sent {
            Sent::Done(outcome) => Started::Done(self.observed(method, started, self.answered(outcome))),
            Sent::Waiting(wait) => Started::Waiting(WaitingCall {
                session: self.clone(),
                id: id.clone(),
                method,
                started,
                wait,
                deadline: Box::pin(tokio::time::sleep_until(deadline.deadline())),
                route: route.keep(),
                asks: call.keep(),
                lane: lane.map(LaneCall::keep),
            }),
        }
    }

    /// `outcome`, counted in the upstream's metrics.
    fn observed(
        &self,
        method: &str,
        started: std::time::Instant,
        outcome: Result<Payload, UpstreamError>,
    ) -> Result<Payload, UpstreamError> {
        self.observe(method, started, &outcome);
        outcome
    }

    /// How long a request may take.
    fn timeout(&self) -> Duration {
        Duration::from_secs(self.inner.connector.config().timeout_secs)
    }

    fn timed_out(&self) -> UpstreamError {
        UpstreamError::Timeout { upstream: self.upstream().into(), after: self.timeout() }
    }

    /// A request's outcome as its caller gets it.
    fn answered(&self, outcome: Result<Payload, UpstreamError>) -> Result<Payload, UpstreamError> {
        match outcome {
            // Every MCP result is an object (schema.ts `Result`); `null` or a bare value is the
            // upstream's mistake, answered as one, never passed on.
            Ok(result) if !result.is_object() => Err(UpstreamError::Protocol {
                upstream: self.upstream().into(),
                reason: format!("its result is {}, not an object", result.json_kind()),
            }),
            result => result.map_err(|e| self.revision_refusal_named(e)),
        }
    }

    /// Sends a request: over a legacy stdio session, until it is written (what waits for its
    /// answer is returned); otherwise until it is answered. Over a legacy session the request
    /// is held as the JSON text it goes as (`Encoded`), not as parsed params.
    async fn send<P: Params>(
        &self,
        id: &RequestId,
        method: &str,
        params: &mut P,
        related: Option<&crate::Sender<Message>>,
        pass: bool,
    ) -> Sent {
        let ready = match Box::pin(self.connect_probing()).await {
            Ok(ready) => ready,
            Err(e) => return Sent::Done(Err(e)),
        };
        if ready.modern.is_some() {
            return Sent::Done(Box::pin(self.modern_attempt(ready, id, method, params.take_value(), related)).await);
        }
        let mut request = params.encode(id, method);
        request.pass = pass;
        if let Channel::Stdio(stdio) = &ready.channel {
            // A process has no session to expire and keeps its revision for life (a legacy
            // session's failure is never sent again: `after_failure`), so once written the
            // request needs nothing but its answer. Its progress and the requests the process
            // sends about it are routed by the guards `run` holds.
            return match stdio.start(&request).await {
                Ok(wait) => Sent::Waiting(wait),
                Err(e) => Sent::Done(Err(self.expired_twice(e))),
            };
        }
        // The outcome is taken apart before the retry's wait, so that it takes no room in the
        // state the call waits in.
        let error = match self.dispatch(&ready, &request, related).await {
            Err(e) => e,
            outcome => return Sent::Done(outcome),
        };
        Sent::Done(Box::pin(self.after_failure(ready, error, &request, related)).await)
    }

    /// A request in a 2026-07-28 session. Its params stay for one retry in another revision,
    /// should the upstream have moved. (A future of its own, boxed by its caller: a legacy
    /// call's waiting state takes no room for it.)
    async fn modern_attempt(
        &self,
        ready: Arc<Ready>,
        id: &RequestId,
        method: &str,
        params: Option<Value>,
        related: Option<&crate::Sender<Message>>,
    ) -> Result<Payload, UpstreamError> {
        let outcome = {
            let state = ready.modern.as_ref().expect("a modern session");
            self.modern_request(&ready, state, id.clone(), method, params.clone(), related.cloned()).await
        };
        match outcome {
            Err(e) => {
                let request = Encoded::request(id.clone(), method, params.as_ref());
                drop(params);
                Box::pin(self.after_failure(ready, e, &request, related)).await
            }
            outcome => outcome.map(Payload::Value),
        }
    }

    /// `request`, written for a legacy session, sent again in a 2026-07-28 one (the upstream
    /// moved): read back and rewritten as that revision sends it.
    async fn modern_again(
        &self,
        ready: &Ready,
        state: &Arc<ModernState>,
        request: &Encoded,
        related: Option<&crate::Sender<Message>>,
    ) -> Result<Value, UpstreamError> {
        let Ok(Ok(Message::Request { id, method, params })) = Message::from_slice(&request.json) else {
            // The gateway's own text always reads back; should it not, the call fails plainly.
            return Err(UpstreamError::Unavailable {
                upstream: self.upstream().into(),
                reason: "the request could not be sent again in the upstream's new revision".into(),
            });
        };
        self.modern_request(ready, state, id, &method, params, related.cloned()).await
    }

    /// The session's connection; when the revision cached for the upstream failed at
    /// `initialize` (which forgot it), connects again, probing (basic/versioning: re-probe when
    /// the cached assumption later fails).
    async fn connect_probing(&self) -> Result<Arc<Ready>, UpstreamError> {
        match Box::pin(self.connect()).await {
            Err(e) if is_revision_refusal(&e) && self.inner.connector.era().is_none() => Box::pin(self.connect()).await,
            other => other,
        }
    }

    /// A request that failed: when the upstream refused it unprocessed because it no longer
    /// speaks the revision the session was opened with, it goes again, once, in the revision a
    /// new probe finds; any other failure stands.
    async fn after_failure(
        &self,
        ready: Arc<Ready>,
        error: UpstreamError,
        request: &Encoded,
        related: Option<&crate::Sender<Message>>,
    ) -> Result<Payload, UpstreamError> {
        if !self.revision_moved(&ready, &error).await {
            return Err(error);
        }
        drop(ready);
        let ready = self.ready().await?;
        if let Some(state) = &ready.modern {
            return Box::pin(self.modern_again(&ready, state, request, related)).await.map(Payload::Value);
        }
        self.dispatch(&ready, request, related).await
    }

    /// Sends `request` in the session's legacy revision and waits for its outcome.
    async fn dispatch(
        &self,
        ready: &Ready,
        request: &Encoded,
        related: Option<&crate::Sender<Message>>,
    ) -> Result<Payload, UpstreamError> {
        if let (Channel::Http(http), true) = (&ready.channel, request.on_stream) {
            // What follows it comes on the GET stream (a subscription's updates, a new task's
            // progress, sent by the upstream as soon as it starts the task): when something
            // receives it, the stream is open before the request goes, so that none of it is
            // sent to no stream. (Boxed: rare, and a wrapped call's future stays small without
            // it.)
            if self.listening().wanted() {
                Box::pin(http.stream_opened(GET_STREAM_WAIT)).await;
            }
        }
        match ready.channel.request_payload(request, related, &[]).await {
            // basic/transports "Session Management": on 404 start a new session (boxed: rare,
            // and kept out of the state a call waits in, as the outcome it replaces is).
            Err(ChannelError::Expired) => {}
            other => return other.map_err(|e| self.expired_twice(e)),
        }
        Box::pin(self.renewed(request, related)).await
    }

    /// A request the upstream answered with 404 (it expired the session), sent again once in a
    /// new session.
    async fn renewed(
        &self,
        request: &Encoded,
        related: Option<&crate::Sender<Message>>,
    ) -> Result<Payload, UpstreamError> {
        tracing::info!(upstream = self.upstream(), "upstream expired the session; initializing again");
        let ready = self.ready().await?;
        if let Some(state) = &ready.modern {
            return Box::pin(self.modern_again(&ready, state, request, related)).await.map(Payload::Value);
        }
        ready.channel.request_payload(request, related, &[]).await.map_err(|e| self.expired_twice(e))
    }

    /// Whether `error` shows that the upstream no longer speaks the revision `ready` was opened
    /// with, having refused the request unprocessed (basic/versioning: re-probe when the cached
    /// assumption later fails). If so, the revision is forgotten (or learnt) and the session
    /// ends, so that the next connection finds the upstream as it is now.
    async fn revision_moved(&self, ready: &Ready, error: &UpstreamError) -> bool {
        let connector = &self.inner.connector;
        if connector.config().protocol != UpstreamProtocol::Auto {
            return false;
        }
        let Channel::Http(http) = &ready.channel else {
            // A process keeps its revision for life; the next one is probed unless it was
            // learnt legacy, and a refused `initialize` forgets that (`initialize`).
            if ready.modern.is_some() && is_revision_refusal(error) {
                connector.learn(None);
            }
            return false;
        };
        let moved = match &ready.modern {
            // A 2026-only server refusing a legacy request: `UnsupportedProtocolVersionError`.
            None => is_revision_refusal(error),
            // A modern upstream refusing 2026-07-28 itself: the probe says what it speaks now.
            Some(_) if is_revision_refusal(error) => true,
            // A modern request refused as a legacy server refuses one: ask the upstream.
            Some(_) if http.take_doubt() => match self.probe(&ready.channel).await {
                Ok(Verdict::Legacy(why)) => {
                    tracing::info!(upstream = self.upstream(), %why, "upstream answers as a legacy server now");
                    true
                }
                _ => false,
            },
            Some(_) => false,
        };
        if moved {
            tracing::info!(upstream = self.upstream(), "upstream's revision changed; connecting again");
            connector.learn(None);
            http.expire();
        }
        moved
    }

    /// The one request in flight in this session during which the upstream may ask the client
    /// something (`tools/call`, `tasks/result`, `prompts/get`, `resources/read`,
    /// `completion/complete`), if exactly one is. A request the upstream sends on no request's
    /// stream (stdio has none; an HTTP server may use its GET stream) then belongs to it.
    pub fn sole_call_in_flight(&self) -> Option<RequestId> {
        self.inner.sole_call()
    }

    /// Routes the upstream's progress notifications naming `token` to `sink` until the returned
    /// guard is dropped.
    pub fn route_progress(&self, token: &Value, sink: crate::Sender<Message>) -> ProgressRoute {
        let key = token.to_string();
        self.inner.routes.by_token.lock().insert(key.clone(), sink);
        ProgressRoute { routes: self.inner.routes.clone(), key, _listening: self.hold_stream() }
    }

    /// Keeps the session's GET stream open (opening it if it is not) until the hold is dropped:
    /// something can receive what the upstream sends there.
    pub fn hold_stream(&self) -> StreamHold {
        self.inner.holds.send_modify(|n| *n += 1);
        StreamHold { holds: self.inner.holds.clone() }
    }

    /// Keeps the session's GET stream open for as long as the session lives (a catalog
    /// session, which learns of list changes there).
    pub fn keep_listening(&self) {
        self.inner.holds.send_modify(|n| *n += 1);
    }

    pub(crate) fn listening(&self) -> Listening {
        Listening { always: self.inner.listen_always, holds: self.inner.holds.subscribe() }
    }

    /// Sends a notification (initializing first if needed).
    pub async fn notify(&self, method: &str, params: Option<Value>) -> Result<(), UpstreamError> {
        let ready = self.ready().await?;
        if let Some(state) = &ready.modern {
            return self.modern_notify(&ready, state, method, params).await;
        }
        ready.channel.send(&Message::notification(method, params)).await.map_err(|e| self.expired_twice(e))
    }

    /// Hands a request the upstream sent on a request's own stream (it arrived with that
    /// request's notifications, see [`Self::request_routed`]) to the session's owner as an
    /// [`UpstreamEvent::Request`] related to `related`, as if it had come on its own.
    pub async fn hand_over(&self, request: Message, related: RequestId) {
        if let Message::Request { id, method, params } = request {
            let event = UpstreamEvent::Request { id, method, params, related: Some(related) };
            self.to_owner(event).await;
        }
    }

    /// Gives what the upstream sent on its own to the session's owner. A request in a shared
    /// session is refused here: its clients declared none of roots, sampling and elicitation
    /// (the core shares no other session), so none of them could answer it, and a request
    /// meant for one client must not reach another.
    pub(crate) async fn to_owner(&self, event: UpstreamEvent) {
        if let (Owners::Shared(_), UpstreamEvent::Request { id, method, .. }) = (&self.inner.events, &event) {
            let why = format!(
                "{method} was not relayed: the client shares this session with others and declared no capability to answer requests"
            );
            let refusal =
                Message::error(Some(id.clone()), ErrorObject::new(taskgate_protocol::codes::METHOD_NOT_FOUND, why));
            if let Err(e) = self.respond(refusal).await {
                tracing::debug!(upstream = self.upstream(), error = %e, "could not refuse an upstream request");
            }
            return;
        }
        self.inner.events.deliver(event).await;
    }

    /// Answers a request the upstream sent (an [`UpstreamEvent::Request`]).
    pub async fn respond(&self, response: Message) -> Result<(), UpstreamError> {
        let ready = self.current().await.ok_or_else(|| UpstreamError::Unavailable {
            upstream: self.upstream().into(),
            reason: "the session that sent the request has ended".into(),
        })?;
        if let Some(state) = &ready.modern {
            // The answer to an input request of a modern upstream's: it goes into the retry.
            return match state.answer(response) {
                true => Ok(()),
                false => Err(UpstreamError::Unavailable {
                    upstream: self.upstream().into(),
                    reason: "the request it answers is no longer waiting".into(),
                }),
            };
        }
        ready.channel.send(&response).await.map_err(|e| self.expired_twice(e))
    }

    /// What another gateway process needs to continue this session ([`Connector::resume`]):
    /// for an HTTP upstream that has given a session id; `None` otherwise.
    pub async fn resume_point(&self) -> Option<SessionResume> {
        let ready = self.current().await?;
        match &ready.channel {
            Channel::Http(_) if ready.modern.is_some() => Some(SessionResume {
                session_id: String::new(),
                protocol_version: taskgate_protocol::modern::PROTOCOL_VERSION.into(),
            }),
            Channel::Http(http) => http.resume_point(),
            Channel::Stdio(_) => None,
        }
    }

    /// The upstream's capabilities from `initialize`, initializing first if needed.
    pub async fn server_capabilities(&self) -> Result<Value, UpstreamError> {
        Ok(Value::clone(&self.ready().await?.server_capabilities))
    }

    /// Ends the session: HTTP DELETE, or closing the process's stdin and then killing it. (A
    /// lane of a shared session only leaves it, when dropped.)
    pub async fn close(&self) {
        if self.lane.is_some() {
            return;
        }
        self.inner.closed.send_replace(true);
        let ready = self.inner.state.lock().await.take();
        if let Some(ready) = ready {
            ready.channel.shutdown().await;
        }
    }

    /// Tells the connector's observer (metrics) about one exchange with the upstream.
    fn observe<T>(&self, method: &str, started: std::time::Instant, outcome: &Result<T, UpstreamError>) {
        if let Some(observer) = &self.inner.connector.inner.observer {
            let error = outcome.as_ref().err().map(UpstreamError::reason);
            observer.observe(self.upstream(), method, started.elapsed(), error);
        }
    }

    fn expired_twice(&self, e: ChannelError) -> UpstreamError {
        match e {
            ChannelError::Failed(e) => e,
            ChannelError::Expired => UpstreamError::Protocol {
                upstream: self.upstream().into(),
                reason: "the upstream rejected a session it had just created (HTTP 404)".into(),
            },
        }
    }

    async fn current(&self) -> Option<Arc<Ready>> {
        self.inner.state.lock().await.clone()
    }

    /// The session, connected: [`Self::connect`], with a revision refusal named as the
    /// upstream's.
    async fn ready(&self) -> Result<Arc<Ready>, UpstreamError> {
        Box::pin(self.connect()).await.map_err(|e| self.revision_refusal_named(e))
    }

    /// The session, connecting (probing, initializing) first if it is not.
    async fn connect(&self) -> Result<Arc<Ready>, UpstreamError> {
        let mut state = self.inner.state.lock().await;
        if let Some(ready) = state.as_ref().filter(|r| r.channel.is_alive()) {
            return Ok(ready.clone());
        }
        let started = std::time::Instant::now();
        let outcome = self.initialize(&mut state).await;
        self.observe(methods::INITIALIZE, started, &outcome);
        outcome
    }

    /// An upstream's `UnsupportedProtocolVersionError` is about the revision the gateway sent
    /// it, not the client's: passed on, it would tell the client that the gateway does not
    /// speak the client's version. It becomes an error naming the upstream.
    fn revision_refusal_named(&self, error: UpstreamError) -> UpstreamError {
        match error {
            UpstreamError::Rpc { upstream, error }
                if error.code == taskgate_protocol::codes::UNSUPPORTED_PROTOCOL_VERSION =>
            {
                let supported = error.data.as_ref().and_then(|d| d.get("supported")).cloned().unwrap_or(Value::Null);
                UpstreamError::Protocol {
                    upstream,
                    reason: format!(
                        "it refused the revision taskgate speaks to it ({}; it supports {supported})",
                        error.message
                    ),
                }
            }
            other => other,
        }
    }

    async fn initialize(&self, state: &mut Option<Arc<Ready>>) -> Result<Arc<Ready>, UpstreamError> {
        if let Some(ready) = state.as_ref().filter(|r| r.channel.is_alive()) {
            return Ok(ready.clone());
        }
        let name = self.upstream().to_owned();
        if *self.inner.closed.borrow() {
            return Err(UpstreamError::Unavailable { upstream: name, reason: "the session is closed".into() });
        }
        if let Some(old) = state.take() {
            old.channel.shutdown().await;
        }
        let config = self.inner.connector.config();
        let (incoming_tx, incoming_rx) = mpsc::channel(INCOMING_BUFFER);
        let channel = match config.transport {
            Transport::Http => Channel::Http(Arc::new(HttpChannel::new(
                config,
                self.inner.connector.inner.http.clone(),
                incoming_tx,
                self.inner.routes.clone(),
                self.inner.closed.subscribe(),
                self.inner.connector.inner.connections.clone(),
            ))),
            Transport::Stdio => {
                let permit = self.inner.connector.inner.processes.clone().try_acquire_owned().map_err(|_| {
                    UpstreamError::Overloaded {
                        upstream: name.clone(),
                        reason: format!(
                            "it already runs its maximum of {} processes (max_processes)",
                            config.max_processes
                        ),
                    }
                })?;
                let shutdown = self.inner.connector.inner.shutdown.subscribe();
                let spawned = StdioChannel::spawn(config, permit, incoming_tx, self.inner.routes.clone(), shutdown)?;
                Channel::Stdio(Arc::new(spawned))
            }
        };
        tokio::spawn(pump(Arc::downgrade(&self.inner), incoming_rx));

        let connector = &self.inner.connector;
        if connector.era() != Some(Era::Legacy) {
            let verdict = match self.probe(&channel).await {
                Ok(verdict) => verdict,
                Err(e) => {
                    channel.shutdown().await;
                    return Err(e);
                }
            };
            match verdict {
                Verdict::Modern(discovered) => {
                    connector.learn(Some(Era::Modern));
                    return Ok(self.modern_ready(channel, &discovered, state));
                }
                Verdict::Legacy(why) if config.protocol == UpstreamProtocol::Modern => {
                    channel.shutdown().await;
                    return Err(UpstreamError::Protocol {
                        upstream: name,
                        reason: format!(
                            "it is configured as protocol \"2026-07-28\" but answers as a legacy server: {why}"
                        ),
                    });
                }
                Verdict::Legacy(why) => {
                    tracing::info!(upstream = %name, %why, "upstream speaks a legacy revision; initializing");
                    connector.learn(Some(Era::Legacy));
                    if let Channel::Http(http) = &channel {
                        http.clear_protocol_version();
                    }
                }
            }
        }

        let init = Message::request(
            self.next_request_id(),
            methods::INITIALIZE,
            Some(json!({
                "protocolVersion": mcp::LATEST_PROTOCOL_VERSION,
                "capabilities": self.inner.identity.capabilities,
                "clientInfo": self.inner.identity.client_info,
            })),
        );
        let result = match channel.request(&Encoded::of(&init), None, &[]).await {
            Ok(result) => result,
            Err(e) => {
                channel.shutdown().await;
                let e = self.expired_twice(e);
                if matches!(e, UpstreamError::Rpc { .. } | UpstreamError::Protocol { .. }) {
                    // The upstream may have moved to 2026-07-28: probe again next time
                    // (basic/versioning: re-probe when the cached assumption fails).
                    connector.learn(None);
                }
                return Err(e);
            }
        };
        let version = result.get("protocolVersion").and_then(Value::as_str).unwrap_or_default().to_owned();
        if !mcp::is_supported_version(&version) {
            channel.shutdown().await;
            return Err(UpstreamError::Protocol {
                upstream: name,
                reason: format!("it negotiated protocol version {version:?}, which taskgate does not speak"),
            });
        }
        if let Channel::Http(http) = &channel {
            http.set_protocol_version(&version);
        }
        channel.send(&Message::notification(methods::INITIALIZED, None)).await.map_err(|e| self.expired_twice(e))?;
        if let Channel::Http(http) = &channel {
            // When wanted, the GET stream is open before the first request goes out: a server
            // that sends a request for its client on it (elicitation during the first call)
            // would otherwise send it to no stream, and the call would hang until its timeout.
            let opened = http.clone().listen(self.listening());
            if tokio::time::timeout(GET_STREAM_WAIT, opened).await.is_err() {
                tracing::debug!(upstream = %name, "the GET stream did not open in time; going on without waiting");
            }
        }
        let mut result = result;
        let server_capabilities =
            connector.shared_capabilities(result.get_mut("capabilities").map_or_else(|| json!({}), Value::take));
        tracing::debug!(upstream = %name, %version, "upstream session initialized");
        let ready = Arc::new(Ready { channel, server_capabilities, modern: None });
        *state = Some(ready.clone());
        Ok(ready)
    }

    /// Asks the upstream which revision it speaks with a modern `server/discover`
    /// (basic/versioning "Backward Compatibility"; over HTTP with the modern headers).
    async fn probe(&self, channel: &Channel) -> Result<Verdict, UpstreamError> {
        let name = self.upstream().to_owned();
        let identity = &self.inner.identity;
        let mut params = json!({});
        let meta = ModernState::new(&name, false, identity, &json!({}), ToolHeaders::default());
        meta.stamp(&mut params, false);
        let discover =
            Message::request(self.next_request_id(), taskgate_protocol::modern::methods::SERVER_DISCOVER, Some(params));
        let (status, outcome) = match channel {
            Channel::Http(http) => {
                let headers = [(
                    crate::http::METHOD_HEADER,
                    reqwest::header::HeaderValue::from_static(taskgate_protocol::modern::methods::SERVER_DISCOVER),
                )];
                http.set_protocol_version(taskgate_protocol::modern::PROTOCOL_VERSION);
                let (status, outcome) = http.probe(&discover, &headers).await?;
                (Some(status.as_u16()), outcome)
            }
            Channel::Stdio(stdio) => {
                match tokio::time::timeout(STDIO_PROBE_WAIT, stdio.request(&Encoded::of(&discover))).await {
                    Ok(Ok(result)) => (None, Some(Ok(result.into_value()))),
                    Ok(Err(ChannelError::Failed(UpstreamError::Rpc { error, .. }))) => (None, Some(Err(*error))),
                    Ok(Err(ChannelError::Failed(e))) => return Err(e),
                    Ok(Err(ChannelError::Expired)) | Err(_) => (None, None),
                }
            }
        };
        crate::modern::classify(status, outcome).map_err(|reason| UpstreamError::Unavailable { upstream: name, reason })
    }

    /// A modern upstream's session: nothing to initialize; the listen stream opens for what
    /// the upstream announces.
    fn modern_ready(&self, channel: Channel, discovered: &Value, state: &mut Option<Arc<Ready>>) -> Arc<Ready> {
        let http = matches!(channel, Channel::Http(_));
        if let Channel::Http(c) = &channel {
            c.set_modern();
        }
        let tool_headers = self.inner.connector.inner.tool_headers.clone();
        let modern = Arc::new(ModernState::new(self.upstream(), http, &self.inner.identity, discovered, tool_headers));
        channel.subscribe(self, &modern);
        tracing::debug!(upstream = self.upstream(), "upstream speaks 2026-07-28");
        let server_capabilities = self.inner.connector.shared_capabilities(modern.capabilities.clone());
        let ready = Arc::new(Ready { channel, server_capabilities, modern: Some(modern) });
        *state = Some(ready.clone());
        ready
    }
}

/// An upstream's `UnsupportedProtocolVersionError`: it does not speak the revision it was sent.
fn is_revision_refusal(error: &UpstreamError) -> bool {
    matches!(error, UpstreamError::Rpc { error, .. } if error.code == taskgate_protocol::codes::UNSUPPORTED_PROTOCOL_VERSION)
}

impl SessionInner {
    fn sole_call(&self) -> Option<RequestId> {
        self.calls.lock().sole()
    }
}

/// The last holder of a session is gone (the client session ended and no task still runs on
/// it): end it at the upstream too. A stdio process is stopped by dropping its channel.
impl Drop for SessionInner {
    fn drop(&mut self) {
        if let Some(observer) = &self.connector.inner.observer {
            observer.session(self.connector.name(), matches!(self.events, Owners::Shared(_)), false);
        }
        self.closed.send_replace(true);
        let ready = self.state.try_lock().ok().and_then(|mut state| state.take());
        if let (Some(ready), Ok(runtime)) = (ready, tokio::runtime::Handle::try_current()) {
            runtime.spawn(async move { ready.channel.shutdown().await });
        }
    }
}

/// Moves what the upstream sends on its own to the session's owner; answers pings itself.
async fn pump(session: Weak<SessionInner>, mut incoming: mpsc::Receiver<Box<Incoming>>) {
    while let Some(boxed) = incoming.recv().await {
        let Incoming { message, related } = *boxed;
        let Some(inner) = session.upgrade() else { return };
        let event = match message {
            Message::Request { id, method, .. } if method == methods::PING => {
                let session = UpstreamSession { inner, lane: None };
                // Boxed: this task lives as long as its session, and its state is as large as
                // the largest future it awaits; pings are rare.
                if let Err(e) = Box::pin(session.respond(Message::response(id, json!({})))).await {
                    tracing::debug!(upstream = session.upstream(), error = %e, "could not answer an upstream ping");
                }
                continue;
            }
            Message::Request { id, method, params } => UpstreamEvent::Request { id, method, params, related },
            Message::Notification { .. } => match crate::modern::from_listen(message) {
                Some(Message::Notification { method, params }) => {
                    UpstreamEvent::Notification { method, params, related }
                }
                _ => continue, // a listen acknowledgment
            },
            other => {
                tracing::warn!(upstream = inner.connector.name(), id = ?other.id(), "upstream sent a response to no pending request; dropped");
                continue;
            }
        };
        if matches!((&event, &inner.events), (UpstreamEvent::Request { .. }, Owners::Shared(_))) {
            // Boxed, as the ping's answer: rare, and this task lives as long as its session.
            Box::pin(UpstreamSession { inner, lane: None }.to_owner(event)).await;
            continue;
        }
        let events = inner.events.clone();
        drop(inner);
        if !events.deliver(event).await {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sole_call_in_flight_is_known_from_a_count_and_a_sum() {
        let mut calls = InFlight::default();
        let (a, b, c) = (RequestId::Number(7), RequestId::Number(i64::MAX), RequestId::String("s".into()));
        assert_eq!(calls.sole(), None);
        calls.add(&a);
        assert_eq!(calls.sole(), Some(a.clone()));
        calls.add(&b);
        calls.add(&c);
        assert_eq!(calls.sole(), None);
        calls.remove(&a);
        calls.remove(&c);
        // The sum wrapped past i64::MAX on the way and came back.
        assert_eq!(calls.sole(), Some(b.clone()));
        calls.add(&c);
        calls.remove(&b);
        assert_eq!(calls.sole(), Some(c.clone()));
        calls.remove(&c);
        assert_eq!((calls.sole(), calls.count, calls.sum, calls.strings.capacity()), (None, 0, 0, 0));
    }
}
