//! The demo tools and the protocol logic shared by both transports.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::{json, Value};
use taskgate_protocol::mcp::{self, methods};
use taskgate_protocol::tasks::{self as wire_tasks, TaskStatus};

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
}

/// The demo MCP server. Clone it to share: all clones are the same server.
#[derive(Clone, Default)]
pub struct DemoServer {
    inner: Arc<Inner>,
}

struct Inner {
    stats: Mutex<DemoStats>,
    gates: Mutex<HashMap<String, Arc<Gate>>>,
    extra_tool: AtomicBool,
    /// Streams that want server-initiated messages (HTTP GET streams, stdio stdout), by connection.
    listeners: Mutex<Vec<(u64, mpsc::Sender<Message>)>>,
    /// Messages for a connection that has no stream open yet, delivered when it opens one.
    undelivered: Mutex<HashMap<u64, Vec<Message>>>,
    /// Progress tokens of finished `late_progress` calls, reported when the connection's next
    /// request arrives (so surely after the client has the response).
    late: Mutex<HashMap<u64, Value>>,
    /// In-flight calls by (connection, request id), to honour cancellation.
    in_flight: Mutex<HashMap<(u64, RequestId), Arc<Notify>>>,
    next_connection: AtomicU64,
    /// The number of in-flight calls, for tests to wait on without sleeping.
    in_flight_count: watch::Sender<usize>,
    /// Whether it declares and runs native tasks.
    native_tasks: bool,
    tasks: Mutex<DemoTasks>,
    /// Requests the server sent to its client (elicitation), waiting for the answer.
    asked: Mutex<HashMap<RequestId, tokio::sync::oneshot::Sender<Result<Value, ErrorObject>>>>,
    /// Resources, prompts, completion and logging (absent on a tools-only server).
    offerings: Option<crate::offerings::Offerings>,
    /// Whether it also serves the conformance suite's fixtures ([`crate::conformance`]).
    conformance: bool,
    /// The capabilities each connection's client declared in `initialize`.
    client_capabilities: Mutex<HashMap<u64, Value>>,
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
        }
    }
}

#[derive(Default)]
struct Gate {
    open: AtomicBool,
    notify: Notify,
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

    /// A snapshot of what the server has seen.
    pub fn stats(&self) -> DemoStats {
        self.inner.stats.lock().clone()
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

    fn gate(&self, name: &str) -> Arc<Gate> {
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

    /// Sends to every connection's stream (list changes, task statuses).
    fn announce(&self, message: Message) {
        let listeners = self.inner.listeners.lock().clone();
        for (_, l) in listeners {
            let _ = l.try_send(message.clone());
        }
    }

    /// Sends on the connection's GET stream, or nowhere when it has none open.
    fn send_on_get_stream(&self, connection: u64, message: Message) {
        let listeners = self.inner.listeners.lock().clone();
        if let Some((_, l)) = listeners.iter().find(|(c, l)| *c == connection && !l.is_closed()) {
            let _ = l.try_send(message);
        }
    }

    /// Sends to one connection's stream (a request for its client).
    fn announce_to(&self, connection: u64, message: Message) {
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

    /// The tools offered on `connection`: [`DemoServer::tools`], and `list_roots` when its
    /// client declared `roots` (as servers offer tools that need a client capability only to
    /// clients that declare it).
    pub fn tools_for(&self, connection: u64) -> Vec<Value> {
        let mut tools = self.tools();
        if self.client_declares(connection, "roots").is_ok() {
            tools.push(json!({"name": "list_roots", "description": "Asks the client for its roots (roots/list) and returns them; offered only to clients that declare roots.",
                "inputSchema": {"type": "object", "properties": {}}}));
        }
        tools
    }

    /// The tools offered to every client.
    pub fn tools(&self) -> Vec<Value> {
        let object = |props: Value, required: &[&str]| json!({"type":"object","properties":props,"required":required});
        let mut tools = vec![
            json!({"name":"echo","description":"Returns its text.","inputSchema":object(json!({"text":{"type":"string"}}), &["text"])}),
            json!({"name":"add","description":"Adds two numbers.","inputSchema":object(json!({"a":{"type":"number"},"b":{"type":"number"}}), &["a","b"]),
                   "outputSchema":object(json!({"sum":{"type":"number"}}), &["sum"])}),
            json!({"name":"slow","description":"Sleeps for ms milliseconds, reporting progress in steps.",
                   "inputSchema":object(json!({"ms":{"type":"integer"},"steps":{"type":"integer"}}), &[])}),
            json!({"name":"wait","description":"Blocks until the gate is released or the call is cancelled.",
                   "inputSchema":object(json!({"gate":{"type":"string"}}), &["gate"])}),
            json!({"name":"fail","description":"Returns a tool error (isError: true).","inputSchema":object(json!({"message":{"type":"string"}}), &[])}),
            json!({"name":"error","description":"Answers with a JSON-RPC error.","inputSchema":object(json!({"code":{"type":"integer"},"message":{"type":"string"}}), &[])}),
            json!({"name":"toggle_extra","description":"Adds or removes the 'extra' tool and announces the change.","inputSchema":object(json!({}), &[])}),
            json!({"name":"progress","description":"Reports the given progress values in order, then returns.",
                   "inputSchema":object(json!({"values":{"type":"array","items":{"type":"number"}}}), &["values"])}),
            json!({"name":"late_progress","description":"Returns, then reports progress for the finished call (which must not reach anyone).",
                   "inputSchema":object(json!({}), &[])}),
            json!({"name":"ask","description":"Asks the client a question (elicitation/create) and returns the answer (or returns at once with wait: false); with gate, it first waits until that gate opens; with stream: \"get\" the question goes on the GET stream, and is lost if none is open.",
                   "inputSchema":object(json!({"question":{"type":"string"},"wait":{"type":"boolean"},"gate":{"type":"string"}}), &[])}),
            json!({"name":"chatter","description":"Sends count log messages (notifications/message) of bytes bytes each about the call (progress notifications if the call has a progress token), then waits at gate, if given, until it opens or the call is cancelled.",
                   "inputSchema":object(json!({"count":{"type":"integer"},"bytes":{"type":"integer"},"gate":{"type":"string"}}), &[])}),
            json!({"name":"broken","description":"Answers with a result that is not an object (null), as a faulty server would.",
                   "inputSchema":object(json!({}), &[])}),
            json!({"name":"toggle_prompt","description":"Adds or removes the 'extra' prompt and announces notifications/prompts/list_changed.",
                   "inputSchema":object(json!({}), &[])}),
            json!({"name":"toggle_resource","description":"Adds or removes the resource demo://extra and announces notifications/resources/list_changed.",
                   "inputSchema":object(json!({}), &[])}),
            json!({"name":"touch","description":"Bumps the resource demo://counter and notifies its subscribers.",
                   "inputSchema":object(json!({}), &[])}),
            json!({"name":"blob","description":"Returns a text of bytes bytes.",
                   "inputSchema":object(json!({"bytes":{"type":"integer"}}), &["bytes"])}),
        ];
        if self.inner.native_tasks {
            for tool in tools.iter_mut() {
                if tool["name"] == "slow" || tool["name"] == "wait" || tool["name"] == "ask" {
                    tool["execution"] = json!({"taskSupport": "optional"});
                }
            }
            tools.push(json!({"name":"job","description":"Like slow, but only as a task.","execution":{"taskSupport":"required"},
                   "inputSchema":object(json!({"ms":{"type":"integer"}}), &[])}));
        }
        if self.inner.conformance {
            tools.extend(crate::conformance::tools());
        }
        if self.inner.extra_tool.load(Ordering::SeqCst) {
            tools.push(json!({"name":"extra","description":"Appears after toggle_extra.","inputSchema":object(json!({}), &[])}));
        }
        tools
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

    async fn request(
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
                let outcome = match self.ask_client("elicitation/create", question, related).await {
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

    /// tools/call on a server with native tasks: task-augmented calls become tasks.
    async fn call_native(
        &self,
        connection: u64,
        id: &RequestId,
        params: Value,
        related: &mpsc::Sender<Message>,
    ) -> Result<Value, ErrorObject> {
        let name = params.get("name").and_then(Value::as_str).unwrap_or_default().to_owned();
        let task = taskgate_protocol::mcp::requested_task(Some(&params)).map_err(ErrorObject::invalid_params)?;
        let support = self
            .tools()
            .into_iter()
            .find(|t| t["name"] == name.as_str())
            .and_then(|t| t["execution"]["taskSupport"].as_str().map(str::to_owned));
        match (task, support.as_deref()) {
            (None, Some("required")) => Err(ErrorObject::method_not_found(&format!("{name} (it requires a task)"))),
            (Some(_), None | Some("forbidden")) => Err(ErrorObject::method_not_found(&format!("{name} as a task"))),
            (None, _) => self.call(connection, id, params, related).await,
            (Some(ttl), _) => {
                // `hold_create`: the CreateTaskResult waits at a gate (to test what happens while a
                // task-augmented request is in flight).
                let hold = params.pointer("/arguments/hold_create").and_then(Value::as_str).map(str::to_owned);
                if let Some(gate_name) = hold {
                    self.wait_gate(connection, id, &gate_name).await?;
                }
                let view = self.inner.tasks.lock().create(ttl, connection);
                self.inner.stats.lock().tasks_created += 1;
                let task_id = view.task_id.clone();
                let demo = self.clone();
                let mut params = params;
                if name == "job" {
                    params["name"] = json!("slow");
                }
                tokio::spawn(async move {
                    // What the tool sends its client during the task (elicitation) goes out on
                    // the GET streams, tagged with the task and with the task input_required.
                    let (tx, mut rx) = mpsc::channel::<Message>(64);
                    let (forwarder, forwarded_task) = (demo.clone(), task_id.clone());
                    tokio::spawn(async move {
                        while let Some(message) = rx.recv().await {
                            let related = json!({ mcp::meta::RELATED_TASK: { "taskId": forwarded_task } });
                            match message {
                                Message::Request { id, method, params } => {
                                    let mut params = params.unwrap_or_else(|| json!({}));
                                    params["_meta"] = related;
                                    let waiting = Some("waiting for the client's answer".to_string());
                                    forwarder.inner.tasks.lock().settle(
                                        &forwarded_task,
                                        TaskStatus::InputRequired,
                                        waiting,
                                        None,
                                    );
                                    forwarder.announce_to(connection, Message::request(id, method, Some(params)));
                                }
                                Message::Notification { method, params: Some(mut params) } => {
                                    params["_meta"] = related;
                                    forwarder.announce_to(connection, Message::notification(method, Some(params)));
                                }
                                _ => {}
                            }
                        }
                    });
                    let run_id = RequestId::String(task_id.clone());
                    let outcome = demo.call(connection, &run_id, params, &tx).await;
                    let (status, message) = match &outcome {
                        Ok(r) if r["isError"] == true => {
                            (TaskStatus::Failed, Some("the tool reported an error".to_string()))
                        }
                        Ok(_) => (TaskStatus::Completed, None),
                        Err(e) => (TaskStatus::Failed, Some(e.message.clone())),
                    };
                    let changed = demo.inner.tasks.lock().settle(&task_id, status, message, Some(outcome));
                    if let Some(view) = changed {
                        demo.announce(Message::notification(methods::TASKS_STATUS, Some(view.to_value())));
                    }
                });
                let immediate = json!({ mcp::meta::MODEL_IMMEDIATE_RESPONSE: "The demo task is running." });
                Ok(json!({"task": view.to_value(), "_meta": immediate}))
            }
        }
    }

    async fn task_method(&self, method: &str, params: Option<Value>) -> Result<Value, ErrorObject> {
        if method == methods::TASKS_LIST {
            return Ok(self.inner.tasks.lock().list());
        }
        let id = params.as_ref().and_then(|p| p.get("taskId")).and_then(Value::as_str).unwrap_or_default().to_owned();
        let missing = || ErrorObject::invalid_params("Failed to retrieve task: Task not found");
        match method {
            methods::TASKS_GET => self.inner.tasks.lock().by_id.get(&id).map(|t| t.view.to_value()).ok_or_else(missing),
            methods::TASKS_CANCEL => {
                let (view, connection) = {
                    let mut tasks = self.inner.tasks.lock();
                    let task = tasks.by_id.get(&id).ok_or_else(missing)?;
                    if task.view.status.is_terminal() {
                        let why = format!("Cannot cancel task: already in terminal status '{}'", task.view.status);
                        return Err(ErrorObject::invalid_params(why));
                    }
                    let connection = task.connection;
                    let cancelled = Some(Err(ErrorObject::new(-32800, "cancelled")));
                    (tasks.settle(&id, TaskStatus::Cancelled, Some("cancelled".into()), cancelled), connection)
                };
                self.inner.stats.lock().tasks_cancelled += 1;
                if let Some(stop) = self.inner.in_flight.lock().get(&(connection, RequestId::String(id.clone()))) {
                    stop.notify_one();
                }
                view.map(|v| v.to_value()).ok_or_else(missing)
            }
            _ => {
                let mut changed =
                    self.inner.tasks.lock().by_id.get(&id).map(|t| t.changed.subscribe()).ok_or_else(missing)?;
                let _ = changed.wait_for(|s| s.is_terminal()).await;
                let outcome =
                    self.inner.tasks.lock().by_id.get(&id).and_then(|t| t.outcome.clone()).ok_or_else(missing)?;
                outcome.map(|r| wire_tasks::with_related_task(r, &id))
            }
        }
    }

    async fn call(
        &self,
        connection: u64,
        id: &RequestId,
        params: Value,
        related: &mpsc::Sender<Message>,
    ) -> Result<Value, ErrorObject> {
        let name = params
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| ErrorObject::invalid_params("tools/call needs a string \"name\""))?;
        let args = params.get("arguments").cloned().unwrap_or_else(|| json!({}));
        {
            let mut stats = self.inner.stats.lock();
            stats.calls += 1;
            stats.call_ids.push(id.clone());
            if let Some(token) = mcp::progress_token(Some(&params)) {
                stats.progress_tokens.push(token.clone());
            }
        }
        let text = |t: String| json!({"content": [{"type": "text", "text": t}], "isError": false});
        match name {
            "echo" => Ok(text(args.get("text").and_then(Value::as_str).unwrap_or_default().to_owned())),
            "add" => {
                let (Some(a), Some(b)) = (args.get("a").and_then(Value::as_f64), args.get("b").and_then(Value::as_f64))
                else {
                    return Err(ErrorObject::invalid_params("add needs numbers \"a\" and \"b\""));
                };
                let sum = a + b;
                let mut result = text(sum.to_string());
                result["structuredContent"] = json!({"sum": sum});
                Ok(result)
            }
            "slow" => {
                let ms = args.get("ms").and_then(Value::as_u64).unwrap_or(1000).min(600_000);
                let steps = args.get("steps").and_then(Value::as_u64).unwrap_or(4).clamp(1, 1000);
                let token = mcp::progress_token(Some(&params)).cloned();
                let stop = self.track(connection, id);
                let outcome = async {
                    for step in 1..=steps {
                        tokio::select! {
                            _ = tokio::time::sleep(Duration::from_millis(ms / steps)) => {}
                            _ = stop.notified() => return Err(()),
                        }
                        if let Some(token) = &token {
                            let progress = json!({"progressToken": token, "progress": step, "total": steps, "message": format!("step {step} of {steps}")});
                            let _ = related.send(Message::notification(methods::PROGRESS, Some(progress))).await;
                        }
                    }
                    Ok(())
                }
                .await;
                self.untrack(connection, id, outcome.is_err());
                outcome
                    .map(|_| text(format!("slept {ms} ms")))
                    .map_err(|_| ErrorObject::new(-32800, "request cancelled"))
            }
            "wait" => {
                let gate_name = args.get("gate").and_then(Value::as_str).unwrap_or("default").to_owned();
                self.wait_gate(connection, id, &gate_name).await?;
                Ok(text(format!("gate {gate_name} opened")))
            }
            "fail" => {
                let message = args.get("message").and_then(Value::as_str).unwrap_or("the demo tool failed").to_owned();
                Ok(json!({"content": [{"type": "text", "text": message}], "isError": true}))
            }
            "error" => {
                let code = args.get("code").and_then(Value::as_i64).unwrap_or(-32000);
                let message = args.get("message").and_then(Value::as_str).unwrap_or("demo error").to_owned();
                Err(ErrorObject::new(code, message).with_data(json!({"tool": "error"})))
            }
            "progress" => {
                let token = mcp::progress_token(Some(&params)).cloned();
                let values = args.get("values").and_then(Value::as_array).cloned().unwrap_or_default();
                if let Some(token) = &token {
                    for value in &values {
                        let progress = json!({"progressToken": token, "progress": value, "total": 100});
                        let _ = related.send(Message::notification(methods::PROGRESS, Some(progress))).await;
                    }
                }
                Ok(
                    json!({"content": [{"type": "text", "text": format!("reported {} values", values.len())}], "isError": false}),
                )
            }
            "late_progress" => {
                if let Some(token) = mcp::progress_token(Some(&params)).cloned() {
                    self.inner.late.lock().insert(connection, token);
                }
                Ok(json!({"content": [{"type": "text", "text": "done"}], "isError": false}))
            }
            "ask" => {
                if let Some(gate_name) = args.get("gate").and_then(Value::as_str) {
                    self.wait_gate(connection, id, gate_name).await?;
                }
                let question = args.get("question").and_then(Value::as_str).unwrap_or("Proceed?").to_owned();
                let ask_id = RequestId::String(format!("demo-ask-{}", uuid::Uuid::new_v4()));
                let (tx, rx) = tokio::sync::oneshot::channel();
                self.inner.asked.lock().insert(ask_id.clone(), tx);
                let params = json!({
                    "_meta": {"progressToken": format!("{ask_id}-progress")},
                    "mode": "form",
                    "message": question,
                    "requestedSchema": {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
                });
                let request = Message::request(ask_id.clone(), "elicitation/create", Some(params));
                if args.get("stream").and_then(Value::as_str) == Some("get") {
                    // As SDK servers do when a request has no related request: on the GET stream,
                    // and lost if the client has none open yet.
                    self.send_on_get_stream(connection, request);
                } else {
                    let _ = related.send(request).await;
                }
                if args.get("wait").and_then(Value::as_bool) == Some(false) {
                    // It asked and moves on: the question stays unanswered as far as it cares.
                    return Ok(json!({"content": [{"type": "text", "text": "asked"}], "isError": false}));
                }
                if args.get("withdraw").and_then(Value::as_bool) == Some(true) {
                    // The server changes its mind: it cancels its own request.
                    self.inner.asked.lock().remove(&ask_id);
                    let cancel = json!({"requestId": ask_id.to_value(), "reason": "no longer needed"});
                    let _ = related.send(Message::notification(methods::CANCELLED, Some(cancel))).await;
                    return Ok(json!({"content": [{"type": "text", "text": "withdrawn"}], "isError": false}));
                }
                // Waiting for the answer is a call in flight, stopped by a cancellation.
                let stop = self.track(connection, id);
                let answer = tokio::select! {
                    answer = rx => answer,
                    _ = stop.notified() => {
                        self.inner.asked.lock().remove(&ask_id);
                        self.untrack(connection, id, true);
                        return Err(ErrorObject::new(-32800, "request cancelled"));
                    }
                };
                self.untrack(connection, id, false);
                let answer = answer.map_err(|_| ErrorObject::new(-32603, "the elicitation was never answered"))??;
                let text = match answer.get("action").and_then(Value::as_str) {
                    Some("accept") => format!("answer: {}", answer["content"]["answer"].as_str().unwrap_or_default()),
                    other => format!("no answer ({})", other.unwrap_or("?")),
                };
                Ok(json!({"content": [{"type": "text", "text": text}], "isError": false}))
            }
            "chatter" => {
                let count = args.get("count").and_then(Value::as_u64).unwrap_or(10).min(1_000_000);
                let bytes = args.get("bytes").and_then(Value::as_u64).unwrap_or(100).min(16 << 20) as usize;
                let data = "x".repeat(bytes);
                let gate = args.get("gate").and_then(Value::as_str).map(|g| self.gate(g));
                // With a progress token the chatter is progress about the call (routed by its
                // token on every transport); without, log messages.
                let token = mcp::progress_token(Some(&params)).cloned();
                let stop = self.track(connection, id);
                let outcome = async {
                    for i in 0..count {
                        let note = match &token {
                            Some(token) => Message::notification(
                                methods::PROGRESS,
                                Some(json!({"progressToken": token, "progress": i + 1, "message": data})),
                            ),
                            None if self.inner.offerings.as_ref().is_some_and(|o| !o.logs(connection, "info")) => {
                                continue;
                            }
                            None => Message::notification(
                                methods::LOG_MESSAGE,
                                Some(json!({"level": "info", "logger": "chatter", "data": {"n": i, "text": data}})),
                            ),
                        };
                        tokio::select! {
                            sent = related.send(note) => {
                                if sent.is_err() { break; }
                            }
                            _ = stop.notified() => return Err(()),
                        }
                    }
                    let Some(gate) = gate else { return Ok(()) };
                    loop {
                        let opened = gate.notify.notified();
                        if gate.open.load(Ordering::SeqCst) {
                            return Ok(());
                        }
                        tokio::select! {
                            _ = opened => {}
                            _ = stop.notified() => return Err(()),
                        }
                    }
                }
                .await;
                self.untrack(connection, id, outcome.is_err());
                outcome
                    .map(|()| text(format!("sent {count} messages")))
                    .map_err(|()| ErrorObject::new(-32800, "request cancelled"))
            }
            "broken" => Ok(Value::Null),
            "toggle_prompt" => {
                let Some(offerings) = &self.inner.offerings else {
                    return Err(ErrorObject::invalid_params("this server has no prompts"));
                };
                let now = offerings.toggle_prompt();
                self.announce(Message::notification(methods::PROMPTS_LIST_CHANGED, None));
                Ok(text(format!("extra prompt {}", if now { "added" } else { "removed" })))
            }
            "toggle_resource" => {
                let Some(offerings) = &self.inner.offerings else {
                    return Err(ErrorObject::invalid_params("this server has no resources"));
                };
                let now = offerings.toggle_resource();
                self.announce(Message::notification(methods::RESOURCES_LIST_CHANGED, None));
                Ok(text(format!("extra resource {}", if now { "added" } else { "removed" })))
            }
            "touch" => {
                let Some(offerings) = &self.inner.offerings else {
                    return Err(ErrorObject::invalid_params("this server has no resources"));
                };
                let (now, subscribed) = offerings.touch();
                for subscriber in subscribed {
                    let updated = json!({"uri": "demo://counter"});
                    self.announce_to(subscriber, Message::notification(methods::RESOURCES_UPDATED, Some(updated)));
                }
                Ok(text(format!("counter is {now}")))
            }
            "blob" => {
                let bytes = args.get("bytes").and_then(Value::as_u64).unwrap_or(0).min(64 << 20) as usize;
                Ok(text("b".repeat(bytes)))
            }
            "toggle_extra" => {
                let now = !self.inner.extra_tool.fetch_xor(true, Ordering::SeqCst);
                self.announce(Message::notification(methods::TOOLS_LIST_CHANGED, None));
                Ok(text(format!("extra tool {}", if now { "added" } else { "removed" })))
            }
            "extra" if self.inner.extra_tool.load(Ordering::SeqCst) => Ok(text("extra".into())),
            "list_roots" if self.client_declares(connection, "roots").is_ok() => {
                let answer = self.ask_client(methods::ROOTS_LIST, json!({}), related).await?;
                let roots = answer.get("roots").cloned().unwrap_or_else(|| json!([]));
                let uris: Vec<&str> =
                    roots.as_array().into_iter().flatten().filter_map(|r| r["uri"].as_str()).collect();
                let mut result = text(uris.join(" "));
                result["structuredContent"] = json!({ "roots": roots });
                Ok(result)
            }
            name if self.inner.conformance && crate::conformance::is_tool(name) => {
                let token = mcp::progress_token(Some(&params)).cloned();
                self.conformance_call(connection, name, &args, token, related).await
            }
            other => Err(ErrorObject::invalid_params(format!("Unknown tool: {other}"))),
        }
    }

    /// Sends `method` to the client on the call's stream and waits for its answer.
    pub(crate) async fn ask_client(
        &self,
        method: &str,
        params: Value,
        related: &mpsc::Sender<Message>,
    ) -> Result<Value, ErrorObject> {
        let ask_id = RequestId::String(format!("demo-ask-{}", uuid::Uuid::new_v4()));
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.inner.asked.lock().insert(ask_id.clone(), tx);
        let _ = related.send(Message::request(ask_id, method, Some(params))).await;
        rx.await.map_err(|_| ErrorObject::new(-32603, format!("the client never answered {method}")))?
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
    async fn wait_gate(&self, connection: u64, id: &RequestId, gate_name: &str) -> Result<(), ErrorObject> {
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

    fn track(&self, connection: u64, id: &RequestId) -> Arc<Notify> {
        let stop = Arc::new(Notify::new());
        let mut in_flight = self.inner.in_flight.lock();
        in_flight.insert((connection, id.clone()), stop.clone());
        self.inner.in_flight_count.send_replace(in_flight.len());
        stop
    }

    fn untrack(&self, connection: u64, id: &RequestId, cancelled: bool) {
        // Count first: tests that see the in-flight count drop then read the stats.
        if cancelled {
            self.inner.stats.lock().cancelled += 1;
        }
        let mut in_flight = self.inner.in_flight.lock();
        in_flight.remove(&(connection, id.clone()));
        self.inner.in_flight_count.send_replace(in_flight.len());
    }
}
