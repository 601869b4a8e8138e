//! [`DemoServer`]: the demo server's state and the protocol logic both transports share (dispatch,
//! gates, the client's streams and requests); its tools are in `tools`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::{json, Value};
use taskgate_protocol::mcp::{self, methods};

use crate::tasks::DemoTasks;
use taskgate_protocol::{ErrorObject, Message, RequestId};
use tokio::sync::{mpsc, watch, Notify};

/// What the demo server has seen, for tests to assert on.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DemoStats {
    /// `initialize` requests answered.
    pub initializes: u64,
    /// Sessions ended by DELETE.
    pub deletes: u64,
    /// Tool calls started.
    pub calls: u64,
    /// Tool calls stopped by `notifications/cancelled`.
    pub cancelled: u64,
    /// Capabilities declared by the most recent `initialize`.
    pub last_client_capabilities: Value,
    /// `clientInfo` of the most recent `initialize`.
    pub last_client_info: Value,
    /// Request ids of the tool calls received, in order.
    pub call_ids: Vec<RequestId>,
    /// Progress tokens of the tool calls received, in order.
    pub progress_tokens: Vec<Value>,
    /// Progress notifications received from the client (on requests this server sent).
    pub client_progress: Vec<Value>,
    /// Native tasks created.
    pub tasks_created: u64,
    /// Native tasks cancelled by `tasks/cancel`.
    pub tasks_cancelled: u64,
    /// `ping` requests answered.
    pub pings: u64,
    /// `logging/setLevel` levels received, in order.
    pub log_levels: Vec<String>,
    /// `notifications/roots/list_changed` received.
    pub roots_list_changed: u64,
    /// The W3C `traceparent` of each tool call, from its `_meta` (the MCP convention).
    pub meta_traceparents: Vec<String>,
    /// The `traceparent` HTTP header of each tool call (over HTTP).
    pub header_traceparents: Vec<String>,
}

/// The demo MCP server. Clone it to share: all clones are the same server.
#[derive(Clone, Default)]
pub struct DemoServer {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) stats: Mutex<DemoStats>,
    pub(crate) gates: Mutex<HashMap<String, Arc<Gate>>>,
    pub(crate) extra_tool: AtomicBool,
    /// Streams that want server-initiated messages (HTTP GET streams, stdio stdout), by connection.
    pub(crate) listeners: Mutex<Vec<(u64, mpsc::Sender<Message>)>>,
    /// Messages for a connection that has no stream open yet, delivered when it opens one.
    pub(crate) undelivered: Mutex<HashMap<u64, Vec<Message>>>,
    /// Progress tokens of finished `late_progress` calls, reported when the connection's next
    /// request arrives (so surely after the client has the response).
    pub(crate) late: Mutex<HashMap<u64, Value>>,
    /// In-flight calls by (connection, request id), to honour cancellation.
    pub(crate) in_flight: Mutex<HashMap<(u64, RequestId), Arc<Notify>>>,
    pub(crate) next_connection: AtomicU64,
    /// The number of in-flight calls, for tests to wait on without sleeping.
    pub(crate) in_flight_count: watch::Sender<usize>,
    /// Whether it declares and runs native tasks.
    pub(crate) native_tasks: bool,
    pub(crate) tasks: Mutex<DemoTasks>,
    /// Requests the server sent to its client (elicitation), waiting for the answer.
    pub(crate) asked: Mutex<HashMap<RequestId, tokio::sync::oneshot::Sender<Result<Value, ErrorObject>>>>,
    /// Resources, prompts, completion and logging (absent on a tools-only server).
    pub(crate) offerings: Option<crate::offerings::Offerings>,
    /// Whether it also serves the conformance suite's fixtures ([`crate::conformance`]).
    pub(crate) conformance: bool,
    /// The capabilities each connection's client declared (in `initialize`, or on a modern
    /// request, whose connection is its own).
    pub(crate) client_capabilities: Mutex<HashMap<u64, Value>>,
    /// Which protocol revisions it serves.
    pub(crate) revisions: crate::modern_state::Revisions,
    /// Open `subscriptions/listen` streams.
    pub(crate) listens: Mutex<Vec<crate::modern_state::Listen>>,
    /// Modern requests running, by (transport connection, request id): their own connection.
    pub(crate) modern_calls: Mutex<HashMap<(u64, RequestId), u64>>,
    /// The questions and answers of each modern request running, by its connection.
    pub(crate) rounds: Mutex<HashMap<u64, crate::modern_state::Round>>,
    /// The key that seals `input_required` states.
    pub(crate) state_key: [u8; 32],
}

impl Default for Inner {
    fn default() -> Self {
        Inner {
            stats: Mutex::default(),
            gates: Mutex::default(),
            extra_tool: AtomicBool::new(false),
            listeners: Mutex::default(),
            in_flight: Mutex::default(),
            next_connection: AtomicU64::new(1),
            in_flight_count: watch::channel(0).0,
            native_tasks: false,
            tasks: Mutex::default(),
            asked: Mutex::default(),
            undelivered: Mutex::default(),
            late: Mutex::default(),
            offerings: Some(crate::offerings::Offerings::default()),
            conformance: false,
            client_capabilities: Mutex::default(),
            revisions: crate::modern_state::Revisions::Legacy,
            listens: Mutex::default(),
            modern_calls: Mutex::default(),
            rounds: Mutex::default(),
            state_key: crate::modern_state::state_key(),
        }
    }
}

#[derive(Default)]
pub(crate) struct Gate {
    pub(crate) open: AtomicBool,
    pub(crate) notify: Notify,
}

impl DemoServer {
    /// A new server with plain tools only (no `tasks` capability).
    pub fn new() -> DemoServer {
        DemoServer::default()
    }

    /// A server that also runs native tasks: it declares `tasks.requests.tools.call`, `slow` and
    /// `wait` have `taskSupport: "optional"`, and `job` has `"required"`.
    pub fn with_tasks() -> DemoServer {
        DemoServer { inner: Arc::new(Inner { native_tasks: true, ..Inner::default() }) }
    }

    /// A server of tools only: no resources, prompts, completion or logging.
    pub fn tools_only() -> DemoServer {
        DemoServer { inner: Arc::new(Inner { offerings: None, ..Inner::default() }) }
    }

    /// A server that also serves the fixtures of the MCP conformance suite's server scenarios
    /// (tools, resources, prompts and completions named `test_*` and `test://`).
    pub fn conformance() -> DemoServer {
        let offerings = Some(crate::offerings::Offerings::with_conformance());
        DemoServer { inner: Arc::new(Inner { conformance: true, offerings, ..Inner::default() }) }
    }

    /// The same server serving `revisions` (call before it is shared or served).
    pub fn serving(mut self, revisions: crate::modern_state::Revisions) -> DemoServer {
        Arc::get_mut(&mut self.inner).expect("a server not yet shared").revisions = revisions;
        self
    }

    /// A snapshot of what the server has seen.
    pub fn stats(&self) -> DemoStats {
        self.inner.stats.lock().clone()
    }

    /// A tool call came with this `traceparent` header.
    pub(crate) fn record_header_traceparent(&self, trace: &str) {
        self.inner.stats.lock().header_traceparents.push(trace.to_owned());
    }

    /// Releases every `wait` call on `gate`, now and later.
    pub fn release(&self, gate: &str) {
        let gate = self.gate(gate);
        gate.open.store(true, Ordering::SeqCst);
        gate.notify.notify_waiters();
    }

    /// Calls currently waiting on gates or sleeping.
    pub fn in_flight(&self) -> usize {
        self.inner.in_flight.lock().len()
    }

    /// Waits until the number of in-flight calls satisfies `condition`.
    pub async fn wait_in_flight(&self, condition: impl FnMut(&usize) -> bool) {
        let mut rx = self.inner.in_flight_count.subscribe();
        let _ = rx.wait_for(condition).await;
    }

    /// The client ended `connection` (DELETE): count it and forget what it declared and set.
    pub(crate) fn end_connection(&self, connection: u64) {
        self.inner.stats.lock().deletes += 1;
        self.inner.client_capabilities.lock().remove(&connection);
        if let Some(offerings) = &self.inner.offerings {
            offerings.forget(connection);
        }
    }

    pub(crate) fn gate(&self, name: &str) -> Arc<Gate> {
        self.inner.gates.lock().entry(name.to_owned()).or_default().clone()
    }

    /// A number identifying one connection (an HTTP session or a stdio process) for request ids.
    pub(crate) fn connection(&self) -> u64 {
        self.inner.next_connection.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn add_listener(&self, connection: u64, tx: mpsc::Sender<Message>) {
        // Under the listeners' lock, as in `announce_to`: a message queued between the drain and
        // the push would otherwise wait for a stream that is already open.
        let mut listeners = self.inner.listeners.lock();
        for message in self.inner.undelivered.lock().remove(&connection).unwrap_or_default() {
            let _ = tx.try_send(message);
        }
        listeners.retain(|(_, l)| !l.is_closed());
        listeners.push((connection, tx));
    }

    /// Sends to every connection's stream (list changes, task statuses), and to the
    /// `subscriptions/listen` streams that asked for it.
    pub(crate) fn announce(&self, message: Message) {
        self.notify_listens(&message);
        let listeners = self.inner.listeners.lock().clone();
        for (_, l) in listeners {
            let _ = l.try_send(message.clone());
        }
    }

    /// Sends on the connection's GET stream, or nowhere when it has none open.
    pub(crate) fn send_on_get_stream(&self, connection: u64, message: Message) {
        let listeners = self.inner.listeners.lock().clone();
        if let Some((_, l)) = listeners.iter().find(|(c, l)| *c == connection && !l.is_closed()) {
            let _ = l.try_send(message);
        }
    }

    /// Sends to one connection's stream (a request for its client).
    pub(crate) fn announce_to(&self, connection: u64, message: Message) {
        let listeners = self.inner.listeners.lock();
        let open: Vec<_> = listeners.iter().filter(|(c, l)| *c == connection && !l.is_closed()).collect();
        if open.is_empty() {
            self.inner.undelivered.lock().entry(connection).or_default().push(message);
            return;
        }
        for (_, l) in open {
            let _ = l.try_send(message.clone());
        }
    }

    /// Handles one message from a client on `connection`. Returns the response for requests;
    /// `related` receives notifications about the request (progress) before the response.
    pub async fn handle(&self, connection: u64, message: Message, related: &mpsc::Sender<Message>) -> Option<Message> {
        match message {
            Message::Request { id, method, params } => {
                let outcome = self.request(connection, &id, &method, params, related).await;
                Some(match outcome {
                    Ok(result) => Message::response(id, result),
                    Err(error) => Message::error(Some(id), error),
                })
            }
            Message::Notification { method, params } => {
                if method == methods::PROGRESS {
                    self.inner.stats.lock().client_progress.push(params.clone().unwrap_or_default());
                }
                if method == methods::ROOTS_LIST_CHANGED {
                    self.inner.stats.lock().roots_list_changed += 1;
                }
                if method == methods::CANCELLED {
                    if let Some(id) = params.as_ref().and_then(|p| p.get("requestId")).and_then(RequestId::from_value) {
                        if let Some(stop) = self.inner.in_flight.lock().get(&(connection, id)) {
                            stop.notify_one();
                        }
                    }
                }
                None
            }
            Message::Response { id, result } => {
                if let Some(waiter) = self.inner.asked.lock().remove(&id) {
                    let _ = waiter.send(Ok(result));
                }
                None
            }
            Message::Error { id: Some(id), error } => {
                if let Some(waiter) = self.inner.asked.lock().remove(&id) {
                    let _ = waiter.send(Err(error));
                }
                None
            }
            _ => None,
        }
    }

    pub(crate) async fn request(
        &self,
        connection: u64,
        id: &RequestId,
        method: &str,
        params: Option<Value>,
        related: &mpsc::Sender<Message>,
    ) -> Result<Value, ErrorObject> {
        // A misbehaving server: progress for a call that has already been answered.
        if let Some(token) = self.inner.late.lock().remove(&connection) {
            let late = json!({"progressToken": token, "progress": 99});
            self.announce_to(connection, Message::notification(methods::PROGRESS, Some(late)));
        }
        match method {
            methods::INITIALIZE => {
                let view = mcp::InitializeView::from_params(params.as_ref()).map_err(ErrorObject::invalid_params)?;
                let mut stats = self.inner.stats.lock();
                stats.initializes += 1;
                stats.last_client_capabilities = view.capabilities.clone();
                stats.last_client_info = view.client_info.clone();
                self.inner.client_capabilities.lock().insert(connection, view.capabilities.clone());
                let mut capabilities = json!({"tools": {"listChanged": true}});
                if self.inner.offerings.is_some() {
                    if let (Value::Object(c), Value::Object(more)) =
                        (&mut capabilities, crate::offerings::capabilities())
                    {
                        c.extend(more);
                    }
                }
                if self.inner.native_tasks {
                    capabilities["tasks"] = json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}});
                }
                Ok(json!({
                    "protocolVersion": mcp::negotiate_version(&view.protocol_version),
                    "capabilities": capabilities,
                    "serverInfo": {"name": "taskgate-demo", "version": env!("CARGO_PKG_VERSION")},
                    "instructions": "Demo tools for taskgate."
                }))
            }
            methods::PING => {
                self.inner.stats.lock().pings += 1;
                Ok(json!({}))
            }
            methods::TOOLS_LIST => Ok(json!({"tools": self.tools_for(connection)})),
            // A completion of the value "?ask" asks the client first (elicitation on the
            // request's stream), as a server might; the values say how that went.
            methods::COMPLETION_COMPLETE
                if self.inner.offerings.is_some()
                    && params.as_ref().and_then(|p| p.pointer("/argument/value")) == Some(&json!("?ask")) =>
            {
                let question = json!({"mode": "form", "message": "Complete what?", "requestedSchema": {"type": "object", "properties": {}}});
                let outcome = match self.ask_client(connection, methods::ELICITATION_CREATE, question, related).await {
                    Ok(answer) => format!("answered {}", answer["action"].as_str().unwrap_or("?")),
                    Err(error) => format!("refused {}", error.code),
                };
                Ok(json!({"completion": {"values": [outcome], "total": 1, "hasMore": false}}))
            }
            methods::TOOLS_CALL if self.inner.native_tasks => {
                self.call_native(connection, id, params.unwrap_or_default(), related).await
            }
            methods::TOOLS_CALL => self.call(connection, id, params.unwrap_or_default(), related).await,
            methods::TASKS_GET | methods::TASKS_RESULT | methods::TASKS_CANCEL | methods::TASKS_LIST
                if self.inner.native_tasks =>
            {
                self.task_method(method, params).await
            }
            other => match &self.inner.offerings {
                Some(offerings) => {
                    let params = params.unwrap_or_else(|| json!({}));
                    match other {
                        methods::RESOURCES_LIST => offerings.list_resources(&params),
                        methods::RESOURCES_TEMPLATES_LIST => Ok(offerings.list_templates()),
                        methods::RESOURCES_READ => offerings.read(&params),
                        methods::RESOURCES_SUBSCRIBE => offerings.subscribe(connection, &params, true),
                        methods::RESOURCES_UNSUBSCRIBE => offerings.subscribe(connection, &params, false),
                        methods::PROMPTS_LIST => Ok(offerings.list_prompts()),
                        methods::PROMPTS_GET => offerings.get_prompt(&params),
                        methods::COMPLETION_COMPLETE => offerings.complete(&params),
                        methods::LOGGING_SET_LEVEL => {
                            let set = offerings.set_level(connection, &params);
                            if set.is_ok() {
                                let level = params["level"].as_str().unwrap_or_default().to_owned();
                                self.inner.stats.lock().log_levels.push(level);
                            }
                            set
                        }
                        other => Err(ErrorObject::method_not_found(other)),
                    }
                }
                None => Err(ErrorObject::method_not_found(other)),
            },
        }
    }

    /// Refuses a request the client did not declare the capability for (basic/lifecycle
    /// "Capability Negotiation").
    pub(crate) fn client_declares(&self, connection: u64, capability: &str) -> Result<(), ErrorObject> {
        let declared =
            self.inner.client_capabilities.lock().get(&connection).is_some_and(|c| c.get(capability).is_some());
        if declared {
            Ok(())
        } else {
            Err(ErrorObject::invalid_params(format!("the client did not declare the {capability} capability")))
        }
    }

    /// Whether a log message at `level` goes to `connection` (its logging/setLevel).
    pub(crate) fn logs(&self, connection: u64, level: &str) -> bool {
        self.inner.offerings.as_ref().is_none_or(|o| o.logs(connection, level))
    }

    /// Waits until the gate opens or the request is cancelled (then -32800).
    pub(crate) async fn wait_gate(&self, connection: u64, id: &RequestId, gate_name: &str) -> Result<(), ErrorObject> {
        let gate = self.gate(gate_name);
        let stop = self.track(connection, id);
        let outcome = loop {
            let opened = gate.notify.notified();
            if gate.open.load(Ordering::SeqCst) {
                break Ok(());
            }
            tokio::select! {
                _ = opened => {}
                _ = stop.notified() => break Err(()),
            }
        };
        self.untrack(connection, id, outcome.is_err());
        outcome.map_err(|_| ErrorObject::new(-32800, "request cancelled"))
    }

    /// Resolves once `gate` is open (now or later).
    pub(crate) async fn opened(&self, gate_name: &str) {
        let gate = self.gate(gate_name);
        loop {
            let opened = gate.notify.notified();
            if gate.open.load(Ordering::SeqCst) {
                return;
            }
            opened.await;
        }
    }

    pub(crate) fn track(&self, connection: u64, id: &RequestId) -> Arc<Notify> {
        let stop = Arc::new(Notify::new());
        let mut in_flight = self.inner.in_flight.lock();
        in_flight.insert((connection, id.clone()), stop.clone());
        self.inner.in_flight_count.send_replace(in_flight.len());
        stop
    }

    pub(crate) fn untrack(&self, connection: u64, id: &RequestId, cancelled: bool) {
        // Count first: tests that see the in-flight count drop then read the stats.
        if cancelled {
            self.inner.stats.lock().cancelled += 1;
        }
        let mut in_flight = self.inner.in_flight.lock();
        in_flight.remove(&(connection, id.clone()));
        self.inner.in_flight_count.send_replace(in_flight.len());
    }
}
