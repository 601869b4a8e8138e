//! A 2026-07-28 upstream's requests, as the rest of the gateway asks them in the 2025-11-25
//! model: stateless requests, multi round-trip input, tasks of the extension followed as native
//! tasks, cancellation, subscriptions through the listen stream.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::{json, Map, Value};
use taskgate_protocol::mcp::methods;
use taskgate_protocol::revision_2026::{self as wire, methods as wmethods, TASKS_EXTENSION};
use taskgate_protocol::{codes, ErrorObject, Message, Payload, RequestId};
use tokio::sync::oneshot;

use super::headers::{param_headers, request_headers};
use super::probe::task_2025;
use super::state::{InFlight, State2026, MAX_INPUT_REQUESTS, MIN_POLL};
use crate::revision::Revision;
use crate::session::{Ready, UpstreamSession};
use crate::transport::Channel;
use crate::wire::{ChannelError, Encoded};
use crate::UpstreamError;

/// Most `input_required` rounds one request may take before the gateway gives up on it.
const MAX_ROUNDS: usize = 16;
/// Most resource URIs one session subscribes to at an upstream.
const MAX_SUBSCRIPTIONS: usize = 1024;
/// Most tools with `x-mcp-header` annotations remembered per upstream.
const MAX_ANNOTATED_TOOLS: usize = 10_000;
/// The most a `tasks/result` waits between two polls of a modern upstream's task.
const MAX_POLL: Duration = Duration::from_secs(5);

/// The `resultType` of a modern result (absent is `complete`).
fn result_type(result: &Value) -> &str {
    result.get("resultType").and_then(Value::as_str).unwrap_or("complete")
}

/// Removes the modern-only envelope field from a result that goes on as a legacy one.
fn plain(mut result: Value) -> Value {
    if let Value::Object(m) = &mut result {
        m.remove("resultType");
    }
    result
}

/// Whether an error is the upstream asking for the tasks extension (ext-tasks "Capability
/// Negotiation": -32021 naming it).
fn wants_tasks_extension(e: &UpstreamError) -> bool {
    match e {
        UpstreamError::Rpc { error, .. } => {
            error.code == codes::MISSING_REQUIRED_CLIENT_CAPABILITY
                && error
                    .data
                    .as_ref()
                    .and_then(|d| d.pointer("/requiredCapabilities/extensions"))
                    .and_then(|x| x.get(TASKS_EXTENSION))
                    .is_some()
        }
        _ => false,
    }
}

/// One request of the core's at a 2026-07-28 upstream: its id, and the id of its current round
/// there (a retry has a new one).
#[derive(Clone, Copy)]
struct Call<'a> {
    id: &'a RequestId,
    round: &'a Arc<Mutex<RequestId>>,
}

/// A session with a 2026-07-28 upstream, speaking to it: the session, its connection and what
/// it keeps. The rest of the gateway asks in the 2025-11-25 model; this type translates.
#[derive(Clone, Copy)]
pub(crate) struct Revision2026<'a> {
    pub(crate) session: &'a UpstreamSession,
    pub(crate) ready: &'a Ready,
    pub(crate) state: &'a Arc<State2026>,
}

/// Removes a request from the in-flight table whichever way its future ends. Over stdio, a
/// future dropped before it ended (the client cancelled it and the core stopped its work, or
/// the upstream's timeout) also tells the process: stdio "Cancellation" is
/// `notifications/cancelled` naming the request's current round; over HTTP dropping the
/// future closes the request's stream, which is the cancellation.
struct InFlightGuard<'a> {
    state: &'a State2026,
    id: RequestId,
    channel: &'a Channel,
    round: &'a Arc<Mutex<RequestId>>,
    ended: bool,
}

impl Drop for InFlightGuard<'_> {
    fn drop(&mut self) {
        let removed = self.state.in_flight.lock().remove(&self.id);
        let following = removed.as_ref().and_then(|r| r.following.lock().take());
        if let (false, Some(task_id)) = (self.ended, following) {
            // Abandoned while waiting on a task the upstream made: that task is cancelled
            // (ext-tasks "Task Cancellation"), over either transport.
            let mut params = json!({ "taskId": task_id });
            self.state.stamp(&mut params, true);
            let id = RequestId::String(format!("{}-cancel", self.id));
            let request = crate::wire::Encoded::request(id, methods::TASKS_CANCEL, Some(&params));
            let headers = if self.state.http {
                request_headers(methods::TASKS_CANCEL, &params, &self.state.tool_headers)
            } else {
                Vec::new()
            };
            self.state.forget_task(&task_id);
            let channel = self.channel.clone();
            // Dropped where no runtime runs (as the gateway shuts down), nothing can be sent: the
            // upstream's process or connection ends with it.
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => drop(runtime.spawn(async move {
                    let _ = channel.request(&request, None, &headers).await;
                })),
                Err(_) => tracing::debug!(%task_id, "no runtime to cancel an abandoned upstream task with"),
            }
            return;
        }
        if self.ended || self.state.http || removed.is_none() {
            // Ended with an outcome, or cancelled by `notify_2026`, which told the process.
            return;
        }
        let channel = self.channel.clone();
        let notice = Message::notification(
            methods::CANCELLED,
            Some(json!({ "requestId": self.round.lock().to_value(), "reason": "the request was abandoned" })),
        );
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn(async move {
                let _ = channel.send(&notice).await;
            })),
            Err(_) => tracing::debug!("no runtime to tell the upstream of an abandoned request with"),
        }
    }
}

impl Revision2026<'_> {
    /// One request to a 2026-07-28 upstream, as the rest of the gateway asked it in the
    /// 2025-11-25 model.
    pub(crate) async fn request(
        &self,
        id: RequestId,
        method: &str,
        params: Option<Value>,
        related: Option<crate::Sender<Message>>,
    ) -> Result<Value, UpstreamError> {
        let (ready, state) = (self.ready, self.state);
        let (cancel, cancelled) = oneshot::channel();
        let round = Arc::new(Mutex::new(id.clone()));
        state.in_flight.lock().insert(id.clone(), InFlight { cancel, round: round.clone(), following: Arc::default() });
        let mut guard = InFlightGuard { state, id: id.clone(), channel: &ready.channel, round: &round, ended: false };
        let call = Call { id: &id, round: &round };
        let work = self.dispatch(call, method, params, related);
        tokio::pin!(work);
        let outcome = tokio::select! {
            outcome = &mut work => outcome,
            // basic/patterns/cancellation: the request's stream is closed (the future above is
            // dropped with it). What has already come is read first: an answer there (a task
            // the upstream made) is not lost with the stream.
            _ = cancelled => match futures_util::FutureExt::now_or_never(&mut work) {
                Some(outcome) => outcome,
                None => Err(state.rpc(ErrorObject::new(codes::INTERNAL_ERROR, "the request was cancelled"))),
            },
        };
        guard.ended = true;
        outcome
    }

    async fn dispatch(
        &self,
        call: Call<'_>,
        method: &str,
        params: Option<Value>,
        related: Option<crate::Sender<Message>>,
    ) -> Result<Value, UpstreamError> {
        let (state, id) = (self.state, call.id);
        let task_id = || {
            params
                .as_ref()
                .and_then(|p| p.get("taskId"))
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| state.protocol(format!("{method} without a taskId")))
        };
        match method {
            methods::TASKS_GET => {
                let task_id = task_id()?;
                let task = self.task_get(id.clone(), &task_id).await?;
                Ok(task_2025(&task))
            }
            methods::TASKS_RESULT => {
                let task_id = task_id()?;
                self.follow_task(id, &task_id, related.as_ref()).await
            }
            methods::TASKS_CANCEL => {
                let task_id = task_id()?;
                let mut p = json!({ "taskId": task_id });
                state.stamp(&mut p, true);
                self.exchange(id.clone(), methods::TASKS_CANCEL, p, None).await?;
                state.forget_task(&task_id);
                match self.task_get(self.session.next_request_id(), &task_id).await {
                    Ok(task) => Ok(task_2025(&task)),
                    Err(_) => Ok(json!({ "taskId": task_id, "status": "cancelled", "ttl": null })),
                }
            }
            // ext-tasks: there is no tasks/list; the gateway lists its own tasks.
            methods::TASKS_LIST => Err(state.rpc(ErrorObject::new(
                codes::METHOD_NOT_FOUND,
                "tasks/list does not exist in MCP 2026-07-28's tasks extension",
            ))),
            // changelog: `logging/setLevel` is gone; the level goes with each request.
            methods::LOGGING_SET_LEVEL => {
                let level = params.as_ref().and_then(|p| p.get("level")).and_then(Value::as_str);
                match level.filter(|l| wire::log_rank(l).is_some()) {
                    Some(level) => *state.log_level.lock() = Some(level.to_owned()),
                    None => {
                        return Err(state.rpc(ErrorObject::new(codes::INVALID_PARAMS, "level must be a log level name")))
                    }
                }
                Ok(json!({}))
            }
            // basic/patterns/subscriptions: subscribing is the listen stream's filter.
            methods::RESOURCES_SUBSCRIBE | methods::RESOURCES_UNSUBSCRIBE => {
                let Some(uri) = params.as_ref().and_then(|p| p.get("uri")).and_then(Value::as_str) else {
                    return Err(state.rpc(ErrorObject::new(codes::INVALID_PARAMS, "uri must be a string")));
                };
                {
                    let mut subscriptions = state.subscriptions.lock();
                    if method == methods::RESOURCES_SUBSCRIBE {
                        if subscriptions.len() >= MAX_SUBSCRIPTIONS && !subscriptions.contains(uri) {
                            return Err(state.rpc(ErrorObject::new(
                                codes::LIMIT_EXCEEDED,
                                format!("at most {MAX_SUBSCRIPTIONS} resource subscriptions per upstream"),
                            )));
                        }
                        subscriptions.insert(uri.to_owned());
                    } else {
                        subscriptions.remove(uri);
                    }
                }
                state.refilter();
                Ok(json!({}))
            }
            // changelog: `ping` is gone; an upstream that answers discover is alive.
            methods::PING => {
                let mut p = json!({});
                state.stamp(&mut p, false);
                self.exchange(id.clone(), wmethods::SERVER_DISCOVER, p, None).await.map(|_| json!({}))
            }
            _ => self.mrtr_call(call, method, params, related.as_ref()).await,
        }
    }

    /// A request that may need the client's input (mrtr "Basic Workflow"): each
    /// `input_required` result's requests go toward the client, and the request is retried
    /// with the answers and the upstream's `requestState`.
    async fn mrtr_call(
        &self,
        call: Call<'_>,
        method: &str,
        params: Option<Value>,
        related: Option<&crate::Sender<Message>>,
    ) -> Result<Value, UpstreamError> {
        let (state, Call { id, round }) = (self.state, call);
        let mut params = params.unwrap_or_else(|| json!({}));
        // A legacy task augmentation becomes the extension, declared on this request only
        // (ext-tasks: the server decides; it MUST NOT return a task to a request without it):
        // a task it makes comes back as the legacy `CreateTaskResult`, an answer at once as
        // itself.
        // `"task": false` (the core's own mark): the caller is a 2026-07-28 client that declares
        // no tasks extension, and a refusal asking for it is its answer, passed on.
        let task = (method == methods::TOOLS_CALL).then(|| params.as_object_mut().and_then(|p| p.remove("task")));
        let task = task.flatten();
        let bridge = task != Some(Value::Bool(false));
        let augmented = task.is_some_and(|t| t != Value::Bool(false)) && state.tasks_ext;
        let mut declare = augmented;
        let mut responses: Option<Value> = None;
        let mut request_state: Option<Value> = None;
        for n in 0..MAX_ROUNDS {
            let round_id = if n == 0 { id.clone() } else { self.session.next_request_id() };
            *round.lock() = round_id.clone();
            let mut p = params.clone();
            if let Some(r) = &responses {
                p["inputResponses"] = r.clone();
            }
            // mrtr "Client Requirements": echo the exact requestState, or none at all.
            if let Some(s) = &request_state {
                p["requestState"] = s.clone();
            }
            state.stamp(&mut p, declare);
            let result = match self.exchange(round_id, method, p, related).await {
                Err(e) if !declare && bridge && state.tasks_ext && wants_tasks_extension(&e) => {
                    // The tool runs only as a task: run it as one and wait for its outcome,
                    // as ext-tasks "Backwards Compatibility" describes for a legacy caller.
                    declare = true;
                    continue;
                }
                other => other?,
            };
            match result_type(&result) {
                "input_required" => {
                    let asks = result.get("inputRequests").cloned();
                    request_state = result.get("requestState").cloned();
                    if asks.is_none() && request_state.is_none() {
                        return Err(
                            state.protocol("an input_required result with neither inputRequests nor requestState")
                        );
                    }
                    responses = match asks {
                        Some(asks) => Some(self.ask_client(&asks, id, related).await?),
                        None => None,
                    };
                }
                "task" => {
                    let Some(task_id) = result.get("taskId").and_then(Value::as_str) else {
                        return Err(state.protocol("a task result without a taskId"));
                    };
                    if !declare {
                        return Err(
                            state.protocol("it returned a task to a request that did not declare the tasks extension")
                        );
                    }
                    if augmented {
                        let mut out = Map::new();
                        out.insert("task".into(), task_2025(&result));
                        if let Some(m) = result.get("_meta") {
                            out.insert("_meta".into(), m.clone());
                        }
                        return Ok(Value::Object(out));
                    }
                    // The call is now this task: cancelling the call cancels it.
                    if let Some(in_flight) = state.in_flight.lock().get(id) {
                        *in_flight.following.lock() = Some(task_id.to_owned());
                    }
                    return self.follow_task(id, task_id, related).await;
                }
                _ => {
                    // ext-tasks: the server decides; an answer at once is the call's answer,
                    // even to a request that declared the extension.
                    let result = plain(result);
                    return Ok(if method == methods::TOOLS_LIST { self.tools_listed(result) } else { result });
                }
            }
        }
        Err(state.protocol(format!("it asked for input more than {MAX_ROUNDS} times for one request")))
    }

    /// A `tools/list` page of a modern upstream: tools whose `x-mcp-header` annotations are
    /// invalid are left out (streamable-http "Schema Extension": clients MUST exclude them), the
    /// valid annotations are kept for calls, and with the tasks extension every tool may run
    /// as a task.
    fn tools_listed(&self, mut result: Value) -> Value {
        let state = self.state;
        let Some(Value::Array(tools)) = result.get_mut("tools") else { return result };
        let mut headers = state.tool_headers.lock();
        tools.retain_mut(|tool| {
            let name = tool.get("name").and_then(Value::as_str).unwrap_or_default().to_owned();
            if state.http {
                match param_headers(tool.get("inputSchema")) {
                    Ok(specs) if specs.is_empty() => {
                        headers.remove(&name);
                    }
                    Ok(specs) => {
                        if headers.len() >= MAX_ANNOTATED_TOOLS && !headers.contains_key(&name) {
                            // Kept for the tools listed since; older ones are read again at
                            // their next listing.
                            headers.clear();
                        }
                        headers.insert(name.clone(), specs);
                    }
                    Err(why) => {
                        tracing::warn!(upstream = self.session.upstream(), tool = %name, %why, "tool definition rejected (x-mcp-header)");
                        return false;
                    }
                }
            }
            if state.tasks_ext && tool.pointer("/execution/taskSupport").is_none() {
                tool["execution"]["taskSupport"] = Value::from("optional");
            }
            true
        });
        result
    }

    /// `tasks/get` at the upstream (ext-tasks "Task Polling"), the task as it answered.
    async fn task_get(&self, id: RequestId, task_id: &str) -> Result<Value, UpstreamError> {
        let state = self.state;
        let mut p = json!({ "taskId": task_id });
        state.stamp(&mut p, true);
        let task = self.exchange(id, methods::TASKS_GET, p, None).await?;
        if task.get("status").and_then(Value::as_str).is_none() {
            return Err(state.protocol("tasks/get answered without a status"));
        }
        Ok(task)
    }

    /// Waits for a modern upstream task's outcome, as legacy `tasks/result` does: polls
    /// `tasks/get` at the task's `pollIntervalMs`, relays each input request once (answered
    /// with `tasks/update`), and returns the inlined result or error.
    async fn follow_task(
        &self,
        related_id: &RequestId,
        task_id: &str,
        related: Option<&crate::Sender<Message>>,
    ) -> Result<Value, UpstreamError> {
        let state = self.state;
        loop {
            let task = self.task_get(self.session.next_request_id(), task_id).await?;
            let status = task.get("status").and_then(Value::as_str).unwrap_or_default();
            match status {
                "completed" => {
                    state.forget_task(task_id);
                    return Ok(task.get("result").cloned().unwrap_or_else(|| json!({})));
                }
                "failed" => {
                    state.forget_task(task_id);
                    let error = task
                        .get("error")
                        .and_then(|e| serde_json::from_value::<ErrorObject>(e.clone()).ok())
                        .unwrap_or_else(|| ErrorObject::new(codes::INTERNAL_ERROR, "the upstream task failed"));
                    return Err(state.rpc(error));
                }
                "cancelled" => {
                    state.forget_task(task_id);
                    // Cancelled (by whoever cancelled it: the task's status message says, when
                    // it does), not failed.
                    let message = match task.get("statusMessage").and_then(Value::as_str) {
                        Some(why) if !why.is_empty() => format!("the task was cancelled: {why}"),
                        _ => "the task was cancelled".to_owned(),
                    };
                    return Err(state.rpc(ErrorObject::new(codes::INTERNAL_ERROR, message)));
                }
                "input_required" => {
                    if let Some(Value::Object(asks)) = task.get("inputRequests") {
                        let of = asks.len().min(MAX_INPUT_REQUESTS);
                        for (key, ask) in asks.iter().take(MAX_INPUT_REQUESTS) {
                            if !state.first_ask(task_id, key) {
                                continue;
                            }
                            let input = taskgate_protocol::revision_2026::InputKey { key: key.clone(), of };
                            let asked = self.ask_one(input, ask, related_id, related).await?;
                            self.forward_answer(task_id, key, asked);
                        }
                    }
                }
                _ => {}
            }
            let poll = task
                .get("pollIntervalMs")
                .and_then(Value::as_u64)
                .map_or(Duration::from_secs(1), Duration::from_millis)
                .clamp(MIN_POLL, MAX_POLL);
            tokio::select! {
                _ = tokio::time::sleep(poll) => {},
                _ = state.answered.notified() => {},
            }
        }
    }

    /// One request and its outcome at the upstream ([`exchange`]).
    async fn exchange(
        &self,
        id: RequestId,
        method: &str,
        params: Value,
        related: Option<&crate::Sender<Message>>,
    ) -> Result<Value, UpstreamError> {
        exchange(&self.ready.channel, self.state, id, method, params, related).await
    }

    /// A notification the rest of the gateway sends, as the upstream takes it.
    pub(crate) async fn notify(&self, method: &str, params: Option<Value>) -> Result<(), UpstreamError> {
        let (ready, state) = (self.ready, self.state);
        match method {
            methods::CANCELLED => {
                let Some(id) = params.as_ref().and_then(|p| p.get("requestId")).and_then(RequestId::from_value) else {
                    return Ok(());
                };
                let Some(in_flight) = state.in_flight.lock().remove(&id) else { return Ok(()) };
                let round = in_flight.round.lock().clone();
                let _ = in_flight.cancel.send(());
                let following = in_flight.following.lock().take();
                if let Some(task_id) = following {
                    // The call waits on a task the upstream made: cancelling it is tasks/cancel
                    // (ext-tasks "Task Cancellation").
                    let mut p = json!({ "taskId": task_id });
                    state.stamp(&mut p, true);
                    let cancel =
                        exchange(&ready.channel, state, self.session.next_request_id(), methods::TASKS_CANCEL, p, None);
                    if let Err(e) = cancel.await {
                        tracing::info!(upstream = self.session.upstream(), task = %task_id, error = %e, "could not cancel the upstream task");
                    }
                    state.forget_task(&task_id);
                    return Ok(());
                }
                if !state.http {
                    // stdio "Cancellation": the notification names the request's current id.
                    let mut p = json!({ "requestId": round.to_value() });
                    if let Some(reason) = params.as_ref().and_then(|p| p.get("reason")) {
                        p["reason"] = reason.clone();
                    }
                    let _ = ready.channel.send(&Message::notification(methods::CANCELLED, Some(p))).await;
                }
                Ok(())
            }
            // There is no handshake to complete, and roots/list_changed is gone (changelog).
            _ => Ok(()),
        }
    }
}

impl Revision for Revision2026<'_> {
    /// `request`, written for a 2025-11-25 session, read back and sent as 2026-07-28 sends it
    /// (a request tried again after the upstream moved to this revision).
    async fn send(
        &self,
        request: &Encoded,
        related: Option<&crate::Sender<Message>>,
    ) -> Result<Payload, UpstreamError> {
        let Ok(Ok(Message::Request { id, method, params })) = Message::from_slice(&request.json) else {
            // The gateway's own text always reads back; should it not, the call fails plainly.
            return Err(UpstreamError::Unavailable {
                upstream: self.session.upstream().into(),
                reason: "the request could not be sent again in the upstream's new revision".into(),
            });
        };
        self.request(id, &method, params, related.cloned()).await.map(Payload::Value)
    }

    async fn notify(&self, method: &str, params: Option<Value>) -> Result<(), UpstreamError> {
        Revision2026::notify(self, method, params).await
    }
}

/// One request and its outcome at a 2026-07-28 upstream, with the request headers over HTTP.
pub(super) async fn exchange(
    channel: &Channel,
    state: &State2026,
    id: RequestId,
    method: &str,
    params: Value,
    related: Option<&crate::Sender<Message>>,
) -> Result<Value, UpstreamError> {
    let headers = if state.http { request_headers(method, &params, &state.tool_headers) } else { Vec::new() };
    let request = crate::wire::Encoded::request(id, method, Some(&params));
    drop(params);
    match channel.request(&request, related, &headers).await {
        Ok(result) if result.is_object() => Ok(result),
        Ok(result) => {
            Err(state
                .protocol(format!("its result is {}, not an object", taskgate_protocol::jsonrpc::json_kind(&result))))
        }
        Err(ChannelError::Failed(e)) => Err(e),
        Err(ChannelError::Expired) => Err(state.protocol("it answered 404 to a request of no session")),
    }
}

impl Channel {
    /// Keeps the listen stream of a modern session open as its filter says (HTTP); over stdio
    /// the stream is one long request whose notifications arrive like any other.
    pub(crate) fn subscribe(&self, session: &UpstreamSession, state: &Arc<State2026>) {
        let weak = session.downgrade();
        let for_request = state.clone();
        let request: Box<dyn Fn(Value) -> Message + Send> = Box::new(move |filter| {
            let id = weak.upgrade().map_or(RequestId::Number(0), |s| s.next_request_id());
            for_request.listen_request(filter, id)
        });
        match self {
            Channel::Http(http) => http.clone().subscribe(state.filter.subscribe(), request, session.listening()),
            Channel::Stdio(stdio) => stdio.subscribe(state.filter.subscribe(), request),
        }
    }
}
