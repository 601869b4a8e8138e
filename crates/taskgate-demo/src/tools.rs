//! The demo's tools: their listing, and what each does when called (with tasks, natively).

use crate::server::DemoServer;
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::time::Duration;
use taskgate_protocol::mcp::{self, methods};
use taskgate_protocol::tasks::{self as wire_tasks, TaskStatus};
use taskgate_protocol::{ErrorObject, Message, RequestId};
use tokio::sync::mpsc;

impl DemoServer {
    /// The tools offered on `connection`: [`DemoServer::tools`], and `list_roots` when its
    /// client declared `roots` (as servers offer tools that need a client capability only to
    /// clients that declare it).
    pub fn tools_for(&self, connection: u64) -> Vec<Value> {
        let mut tools = self.tools();
        if self.client_declares(connection, "roots").is_ok() {
            tools.push(json!({"name": "list_roots", "description": "Asks the client for its roots (roots/list) and returns them; offered only to clients that declare roots.",
                "inputSchema": {"type": "object", "properties": {}}}));
        }
        if self.inner.conformance && self.inner.rounds.lock().contains_key(&connection) {
            tools.extend(crate::modern_fixtures::tools());
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
            json!({"name":"slow","description":"Sleeps for ms milliseconds, reporting progress in steps; with gate, each step waits until the gate \"{gate}-{step}\" opens instead.",
                   "inputSchema":object(json!({"ms":{"type":"integer"},"steps":{"type":"integer"},"gate":{"type":"string"}}), &[])}),
            json!({"name":"wait","description":"Blocks until the gate is released or the call is cancelled.",
                   "inputSchema":object(json!({"gate":{"type":"string"}}), &["gate"])}),
            json!({"name":"fail","description":"Returns a tool error (isError: true).","inputSchema":object(json!({"message":{"type":"string"}}), &[])}),
            json!({"name":"error","description":"Answers with a JSON-RPC error.","inputSchema":object(json!({"code":{"type":"integer"},"message":{"type":"string"}}), &[])}),
            json!({"name":"toggle_extra","description":"Adds or removes the 'extra' tool and announces the change.","inputSchema":object(json!({}), &[])}),
            json!({"name":"progress","description":"Reports the given progress values in order, then returns.",
                   "inputSchema":object(json!({"values":{"type":"array","items":{"type":"number"}}}), &["values"])}),
            json!({"name":"late_progress","description":"Returns, then reports progress for the finished call (which must not reach anyone).",
                   "inputSchema":object(json!({}), &[])}),
            json!({"name":"ask","description":"Asks the client a question (elicitation/create) and returns the answer (or returns at once with wait: false); with gate, it first waits until that gate opens; with stream: \"get\" the question goes on the GET stream, and is lost if none is open; with withdraw (true, or a gate's name) it cancels its question (at once, or when that gate opens); answered or withdrawn, it returns once the gate then_gate names opens, if given.",
                   "inputSchema":object(json!({"question":{"type":"string"},"wait":{"type":"boolean"},"gate":{"type":"string"},"withdraw":{"type":["boolean","string"]},"then_gate":{"type":"string"}}), &[])}),
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
            json!({"name":"blob","description":"Returns a text of bytes bytes; with gate, once that gate opens.",
                   "inputSchema":object(json!({"bytes":{"type":"integer"},"gate":{"type":"string"}}), &["bytes"])}),
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

    /// tools/call on a server with native tasks: task-augmented calls become tasks.
    pub(crate) async fn call_native(
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

    pub(crate) async fn task_method(&self, method: &str, params: Option<Value>) -> Result<Value, ErrorObject> {
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

    pub(crate) async fn call(
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
            if let Some(trace) = params.pointer("/_meta/traceparent").and_then(Value::as_str) {
                stats.meta_traceparents.push(trace.to_owned());
            }
        }
        let text = |t: String| json!({"content": [{"type": "text", "text": t}], "isError": false});
        match name {
            "echo" => Ok(text(args.get("text").and_then(Value::as_str).unwrap_or_default().to_owned())),
            "add" => {
                let (Some(a), Some(b)) = (args.get("a").and_then(Value::as_f64), args.get("b").and_then(Value::as_f64))
                else {
                    // server/tools "Error Handling": invalid input is a tool execution error.
                    let mut refused = text("add needs numbers \"a\" and \"b\"".into());
                    refused["isError"] = json!(true);
                    return Ok(refused);
                };
                let sum = a + b;
                let mut result = text(sum.to_string());
                result["structuredContent"] = json!({"sum": sum});
                Ok(result)
            }
            "slow" => {
                let ms = args.get("ms").and_then(Value::as_u64).unwrap_or(1000).min(600_000);
                let steps = args.get("steps").and_then(Value::as_u64).unwrap_or(4).clamp(1, 1000);
                let gate = args.get("gate").and_then(Value::as_str).map(str::to_owned);
                let token = mcp::progress_token(Some(&params)).cloned();
                let stop = self.track(connection, id);
                let outcome = async {
                    for step in 1..=steps {
                        // With a gate, each step waits for its own ("{gate}-{step}"), not for time.
                        let wait = async {
                            match &gate {
                                Some(gate) => self.opened(&format!("{gate}-{step}")).await,
                                None => tokio::time::sleep(Duration::from_millis(ms / steps)).await,
                            }
                        };
                        tokio::select! {
                            _ = wait => {}
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
                let said = |answer: &Value| {
                    let text = match answer.get("action").and_then(Value::as_str) {
                        Some("accept") => {
                            format!("answer: {}", answer["content"]["answer"].as_str().unwrap_or_default())
                        }
                        other => format!("no answer ({})", other.unwrap_or("?")),
                    };
                    json!({"content": [{"type": "text", "text": text}], "isError": false})
                };
                let schema =
                    json!({"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]});
                if self.asks_with_input_required(connection) {
                    // A 2026-07-28-only demo asks with input_required (basic/patterns/mrtr: never
                    // a request on the stream), whatever `stream`, `wait` or `withdraw` say.
                    let question = json!({"mode": "form", "message": question, "requestedSchema": schema});
                    let answer = self.ask_client(connection, methods::ELICITATION_CREATE, question, related).await?;
                    return Ok(said(&answer));
                }
                let ask_id = RequestId::String(format!("demo-ask-{}", uuid::Uuid::new_v4()));
                let (tx, rx) = tokio::sync::oneshot::channel();
                self.inner.asked.lock().insert(ask_id.clone(), tx);
                let params = json!({
                    "_meta": {"progressToken": format!("{ask_id}-progress")},
                    "mode": "form",
                    "message": question,
                    "requestedSchema": schema
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
                if let Some(withdraw) = args.get("withdraw").filter(|w| w.is_string() || **w == true) {
                    // The server changes its mind (at once, or once the gate named opens): it
                    // cancels its own request; with `then_gate`, it works on until that gate opens.
                    if let Some(gate_name) = withdraw.as_str() {
                        let waited = self.wait_gate(connection, id, gate_name).await;
                        if waited.is_err() {
                            self.inner.asked.lock().remove(&ask_id);
                        }
                        waited?;
                    }
                    self.inner.asked.lock().remove(&ask_id);
                    let cancel = json!({"requestId": ask_id.to_value(), "reason": "no longer needed"});
                    let _ = related.send(Message::notification(methods::CANCELLED, Some(cancel))).await;
                    if let Some(gate_name) = args.get("then_gate").and_then(Value::as_str) {
                        self.wait_gate(connection, id, gate_name).await?;
                    }
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
                // Answered, it may go on working until a gate opens.
                if let Some(gate_name) = args.get("then_gate").and_then(Value::as_str) {
                    self.wait_gate(connection, id, gate_name).await?;
                }
                Ok(said(&answer))
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
                let updated = Message::notification(methods::RESOURCES_UPDATED, Some(json!({"uri": "demo://counter"})));
                for subscriber in subscribed {
                    self.announce_to(subscriber, updated.clone());
                }
                self.notify_listens(&updated);
                Ok(text(format!("counter is {now}")))
            }
            "blob" => {
                if let Some(gate) = args.get("gate").and_then(Value::as_str) {
                    self.wait_gate(connection, id, gate).await?;
                }
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
                let answer = self.ask_client(connection, methods::ROOTS_LIST, json!({}), related).await?;
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
}
