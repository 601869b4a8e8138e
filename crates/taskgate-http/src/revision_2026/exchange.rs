//! One stateless request served through a pooled session: its params turned into the internal
//! request (a process-unique id, a process-unique progress token, the per-request `_meta`
//! consumed), and what the session sends about it turned back into 2026-07-28 messages:
//! progress with the client's token, log messages at the request's level only, `resultType` on
//! the result, caching hints on listings, a task as the extension's flat `CreateTaskResult`,
//! and server-to-client requests as an `input_required` result (basic/patterns/mrtr) while
//! the upstream request waits, held here until the client's retry answers it or a bound passes.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use actix_web::HttpResponse;
use bytes::Bytes;
use futures_util::FutureExt;
use serde_json::{json, Map, Value};
use taskgate_core::outbound::{Frame, OutboundReceiver};
use taskgate_core::{GatewayError, Identity, SessionHandle};
use taskgate_protocol::mcp::methods;
use taskgate_protocol::revision_2026::{self, meta};
use taskgate_protocol::{codes, ErrorObject, Message, RequestId};

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;

use parking_lot::Mutex;
use taskgate_config::Config;

use super::results::{finish_result, plain_result, to_json};

/// How often an SSE response with nothing to say carries a comment: a closed connection is
/// only noticed on a write, and closing the stream is how a 2026 client cancels.
const KEEP_ALIVE: Duration = Duration::from_secs(1);

/// How long the input requests an upstream asked together may take to reach the front door
/// after the first of them (they come through the session one by one).
const GATHER_WAIT: Duration = Duration::from_secs(1);

/// The most input requests gathered into one `input_required` (as many as the gateway takes
/// from one upstream result).
const MAX_GATHERED: usize = 64;

/// A request in flight for a stateless client.
#[derive(Clone)]
pub(crate) struct Call {
    /// The client's JSON-RPC id (this attempt's: a retry has its own).
    pub client_id: RequestId,
    /// The id the session knows it by.
    pub internal_id: RequestId,
    pub method: String,
    /// The client's progress token (the session knows the internal id in its place).
    pub client_token: Option<Value>,
    /// The rank of the least severe log level to pass (`None`: no log messages at all).
    pub log_rank: Option<usize>,
    pub session: SessionHandle,
    pub identity: Identity,
    /// Binds a `requestState` to this request.
    pub digest: String,
}

/// What one message from the session becomes for the client.
enum Step {
    /// A notification to pass on.
    Send(String),
    /// A request the client must answer.
    Input(Input),
    /// The final message, with the HTTP status it takes when it is the whole answer, and whether
    /// it is a JSON-RPC error.
    Final(String, u16, bool),
    /// Nothing the client may see.
    Skip,
}

impl Call {
    /// Translates one message of the session about this request.
    fn translate(&self, frame: Frame) -> Step {
        if let Some(json) = plain_result(&self.method, &self.internal_id, &self.client_id, &frame.json) {
            return Step::Final(json, 200, false);
        }
        let Ok(mut value) = serde_json::from_str::<Value>(&frame.json) else { return Step::Skip };
        let Some(object) = value.as_object_mut() else { return Step::Skip };
        if object.contains_key("method") && object.contains_key("id") {
            // basic/transports "Receiving Messages": no requests on a response stream; they are
            // input requests of an input_required result.
            let key = match object.get("id") {
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => return Step::Skip,
            };
            if !taskgate_protocol::method::row(&self.method).is_some_and(|row| row.input_required) {
                // basic/patterns/mrtr "Supported Requests": no input_required on other methods.
                let session = self.session.clone();
                let error = ErrorObject::new(
                    codes::METHOD_NOT_FOUND,
                    format!("the client cannot be asked for input during {} (2026-07-28)", self.method),
                );
                let reply = Message::error(Some(RequestId::String(key)), error);
                actix_web::rt::spawn(async move {
                    let _ = session.respond(reply).await;
                });
                return Step::Skip;
            }
            let mut params = object.remove("params");
            // The upstream's own key of it, when it came as an input request of a 2026-07-28
            // upstream: the client is asked under that key.
            let (shown, of) = match revision_2026::take_input_key(&mut params) {
                Some(revision_2026::InputKey { key, of }) => (key, of),
                None => (key.clone(), 1),
            };
            let mut request = Map::new();
            if let Some(v) = object.remove("method") {
                request.insert("method".into(), v);
            }
            if let Some(v) = params {
                request.insert("params".into(), v);
            }
            return Step::Input(Input { id: key, shown, of, request: Value::Object(request) });
        }
        if let Some(method) = object.get("method").and_then(Value::as_str) {
            return match method {
                methods::PROGRESS => {
                    let (Some(client), Some(params)) = (&self.client_token, object.get_mut("params")) else {
                        return Step::Skip;
                    };
                    params["progressToken"] = client.clone();
                    Step::Send(to_json(&value))
                }
                // server/utilities/logging: none for a request without a level, and none below it.
                methods::LOG_MESSAGE => {
                    let level = object.get("params").and_then(|p| p.get("level")).and_then(Value::as_str);
                    match (self.log_rank, level.and_then(revision_2026::log_rank)) {
                        (Some(min), Some(rank)) if rank >= min => Step::Send(to_json(&value)),
                        _ => Step::Skip,
                    }
                }
                _ => Step::Skip,
            };
        }
        object.insert("id".into(), self.client_id.to_value());
        if let Some(error) = object.get_mut("error") {
            let mut code = error.get("code").and_then(Value::as_i64).unwrap_or(0);
            // server/resources "Error Handling": a resource that does not exist MUST be -32602
            // in this revision (a 2025-11-25 upstream, and the gateway itself, say -32002 with
            // the `uri` in `data`; the gateway's own -32002 without it is its overload).
            let not_found = code == codes::OVERLOADED && error.get("data").and_then(|d| d.get("uri")).is_some();
            if not_found && self.method == methods::RESOURCES_READ {
                code = codes::INVALID_PARAMS;
                error["code"] = Value::from(code);
            }
            // basic "`_meta`": -32021 and -32022 MUST be 400 on HTTP; -32020 too (transports).
            let status = match code {
                codes::HEADER_MISMATCH
                | codes::MISSING_REQUIRED_CLIENT_CAPABILITY
                | codes::UNSUPPORTED_PROTOCOL_VERSION => 400,
                _ if frame.store_unavailable => 503,
                _ => 200,
            };
            return Step::Final(to_json(&value), status, true);
        }
        if let Some(result) = object.get_mut("result").and_then(Value::as_object_mut) {
            finish_result(&self.method, result);
        }
        Step::Final(to_json(&value), 200, false)
    }
}

/// The JSON-RPC error response for the client, as a whole HTTP answer.
fn error_response(id: &RequestId, e: &GatewayError) -> HttpResponse {
    crate::reply::error(e, Some(id.clone()))
}

fn json_response(json: String, status: u16, error: bool) -> HttpResponse {
    let status = actix_web::http::StatusCode::from_u16(status).unwrap_or(actix_web::http::StatusCode::OK);
    let mut response = HttpResponse::build(status);
    if status == actix_web::http::StatusCode::SERVICE_UNAVAILABLE {
        response.insert_header(("Retry-After", "1"));
    }
    let mut response = response.content_type("application/json").body(json);
    if error {
        response.extensions_mut().insert(crate::metered::RpcError);
    }
    response
}

/// Sends `notifications/cancelled` for the call to its session (the session forwards it to the
/// one upstream that owns the request, as it does for a 2025-11-25 client).
fn cancel(call: &Call, reason: &str) {
    let (session, id) = (call.session.clone(), call.internal_id.to_value());
    let reason = reason.to_owned();
    actix_web::rt::spawn(async move {
        let _ = session.notify(methods::CANCELLED.into(), Some(json!({ "requestId": id, "reason": reason }))).await;
    });
}

/// Serves the call from its session's messages: one JSON object when the answer comes at once,
/// else an SSE stream that ends with it. Closing the stream cancels the request.
///
/// The front door waits `first_wait` (`server.first_message_wait_ms`, as for a 2025-11-25
/// session) for the first message of a request before it commits to an SSE response: a quick
/// result, an early error or an `input_required` goes out as one JSON object with its own HTTP
/// status.
pub(crate) async fn respond(
    front: Arc<Front2026>,
    call: Call,
    mut messages: OutboundReceiver,
    first_wait: Duration,
) -> HttpResponse {
    let deadline = tokio::time::Instant::now() + first_wait;
    let first = loop {
        match tokio::time::timeout_at(deadline, messages.recv()).await {
            Err(_) => break None,
            Ok(None) => return ended(&call),
            Ok(Some(frame)) => match call.translate(frame) {
                Step::Skip => continue,
                step => break Some(step),
            },
        }
    };
    let mut pending = VecDeque::new();
    match first {
        Some(Step::Final(json, status, error)) => return json_response(json, status, error),
        Some(Step::Input(input)) => {
            let (inputs, ended) = gather(&call, &mut messages, input).await;
            if let Some((json, status, error)) = ended {
                return json_response(json, status, error);
            }
            let (json, status) = park(&front, call, messages, inputs, &mut None);
            return json_response(json, status, false);
        }
        Some(Step::Send(json)) => pending.push_back(sse_event(&json)),
        Some(Step::Skip) | None => {}
    }
    stream(front, call, messages, pending)
}

/// The input requests an upstream asked together with `first`: they reach the session one by
/// one, and the client is asked for all of them in one `input_required` (mrtr "InputRequests").
/// Waits at most [`GATHER_WAIT`] for the rest; the final message if the call ends meanwhile.
async fn gather(
    call: &Call,
    messages: &mut OutboundReceiver,
    first: Input,
) -> (Vec<Input>, Option<(String, u16, bool)>) {
    // The count comes with the request (an upstream could claim any): bounded as an
    // `input_required` result's requests are.
    let expected = first.of.min(MAX_GATHERED);
    let mut inputs = vec![first];
    let deadline = tokio::time::Instant::now() + GATHER_WAIT;
    while inputs.len() < expected {
        match tokio::time::timeout_at(deadline, messages.recv()).await {
            Ok(Some(frame)) => match call.translate(frame) {
                Step::Input(input) => inputs.push(input),
                Step::Final(json, status, error) => return (inputs, Some((json, status, error))),
                Step::Send(_) | Step::Skip => {}
            },
            Ok(None) | Err(_) => break,
        }
    }
    (inputs, None)
}

fn ended(call: &Call) -> HttpResponse {
    let e = GatewayError::Internal("the request ended without a response (its session closed)".into());
    error_response(&call.client_id, &e)
}

fn sse_event(json: &str) -> Bytes {
    Bytes::from(format!("event: message\ndata: {json}\n\n"))
}

/// Cancels the call when the client closes its stream before the final message.
struct Guard {
    call: Call,
    armed: bool,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if self.armed {
            tracing::info!(request = %taskgate_core::logs::Untrusted(&self.call.client_id.to_string()), "a 2026-07-28 client closed its response stream; the request is cancelled");
            cancel(&self.call, "the client closed its response stream");
        }
    }
}

fn stream(front: Arc<Front2026>, call: Call, messages: OutboundReceiver, pending: VecDeque<Bytes>) -> HttpResponse {
    let mut guard = Guard { call, armed: true };
    let mut messages = Some(messages);
    let mut pending = pending;
    let mut keep_alive = tokio::time::interval_at(tokio::time::Instant::now() + KEEP_ALIVE, KEEP_ALIVE);
    let failed = crate::metered::StreamFailed::default();
    let failing = failed.clone();
    let body = futures_util::stream::poll_fn(move |cx| loop {
        if let Some(bytes) = pending.pop_front() {
            return Poll::Ready(Some(Ok::<_, std::convert::Infallible>(bytes)));
        }
        let Some(rx) = messages.as_mut() else { return Poll::Ready(None) };
        match rx.poll_recv(cx) {
            Poll::Ready(Some(frame)) => match guard.call.translate(frame) {
                Step::Skip => continue,
                Step::Send(json) => pending.push_back(sse_event(&json)),
                Step::Final(json, _, error) => {
                    if error {
                        failing.set();
                    }
                    guard.armed = false;
                    messages = None;
                    pending.push_back(sse_event(&json));
                }
                Step::Input(input) => {
                    guard.armed = false;
                    let rx = messages.take().expect("present");
                    let mut notes = Some(Vec::new());
                    let (json, _) = park(&front, guard.call.clone(), rx, vec![input], &mut notes);
                    pending.extend(notes.unwrap_or_default().iter().map(|n| sse_event(n)));
                    pending.push_back(sse_event(&json));
                }
            },
            Poll::Ready(None) => {
                guard.armed = false;
                messages = None;
                let e = GatewayError::Internal("the request ended without a response (its session closed)".into());
                pending.push_back(sse_event(
                    &Message::error(Some(guard.call.client_id.clone()), e.error_object()).to_json(),
                ));
            }
            Poll::Pending => {
                if keep_alive.poll_tick(cx).is_ready() {
                    return Poll::Ready(Some(Ok(Bytes::from_static(b": keep-alive\n\n"))));
                }
                return Poll::Pending;
            }
        }
    });
    crate::sse::streaming(body, failed)
}

/// The state of the 2026-07-28 front door: exchanges waiting for a client's retry and the
/// `requestState` key.
pub struct Front2026 {
    pub(super) key: super::state::StateKey,
    pub(super) parked: Mutex<HashMap<String, Parked>>,
    pub(super) next: AtomicU64,
    pub(super) input_wait: Duration,
    clock: Arc<dyn taskgate_core::clock::Clock>,
}

impl Front2026 {
    /// The front door's state for a configuration, at the replica `replica`, on the gateway's
    /// `clock`.
    pub fn new(config: &Config, replica: &str, clock: Arc<dyn taskgate_core::clock::Clock>) -> Front2026 {
        Front2026 {
            key: super::state::StateKey::random(replica),
            parked: Mutex::default(),
            next: AtomicU64::new(1),
            input_wait: Duration::from_secs(config.server.input_wait_secs),
            clock,
        }
    }

    pub(super) fn clock_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// A process-unique id for a request sent to a pooled session (a number: the pooled
    /// sessions' requests all come through here, so nothing else takes one of these ids there).
    pub(super) fn internal_id(&self) -> RequestId {
        RequestId::Number(self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) as i64)
    }
}

/// An exchange waiting for the client's retry: the upstream request is still open, its
/// messages held, and the requests the client must answer.
pub(crate) struct Parked {
    pub call: Call,
    pub messages: OutboundReceiver,
    /// The input requests not answered yet.
    pub inputs: Vec<Input>,
    /// When the retry is no longer waited for (ms, the gateway's clock; set by `hold`).
    pub until_ms: u64,
}

/// One request the client must answer.
#[derive(Clone)]
pub(crate) struct Input {
    /// The id the session relayed it under (its answer goes back under it).
    pub id: String,
    /// The key the client sees in `inputRequests` and answers under in `inputResponses`: the
    /// upstream's own where it gave one, else the id.
    pub shown: String,
    /// How many the upstream asked together, this one included.
    pub of: usize,
    /// `{method, params}`.
    pub request: Value,
}

/// Holds the call until its retry, and returns the `input_required` result for the client
/// (with every input request already queued), or the final message if the call ended in the
/// meantime. Notifications drained on the way go to `notes` when the answer is a stream.
fn park(
    front: &Arc<Front2026>,
    call: Call,
    mut messages: OutboundReceiver,
    mut inputs: Vec<Input>,
    notes: &mut Option<Vec<String>>,
) -> (String, u16) {
    while let Some(Some(frame)) = messages.recv().now_or_never() {
        match call.translate(frame) {
            Step::Input(input) => inputs.push(input),
            Step::Send(json) => {
                if let Some(notes) = notes.as_mut() {
                    notes.push(json);
                }
            }
            Step::Final(json, status, _) => return (json, status),
            Step::Skip => {}
        }
    }
    let client_id = call.client_id.clone();
    // Keys are unique in `inputRequests`: one the upstream's keys would repeat (two requests of
    // one exchange asked under the same key) is shown under its id.
    let mut input_requests = Map::new();
    for input in &mut inputs {
        // The id is unique among the session's relayed requests; suffixed until free, should
        // an upstream's key have taken it.
        let mut n = 0;
        while input_requests.contains_key(&input.shown) {
            n += 1;
            input.shown = format!("{}~{n}", input.id);
        }
        input_requests.insert(input.shown.clone(), input.request.clone());
    }
    let state = front.hold(Parked { call, messages, inputs, until_ms: 0 });
    let result = json!({
        "resultType": "input_required",
        "inputRequests": input_requests,
        "requestState": state,
        "_meta": { meta::SERVER_INFO: taskgate_core::server_info() },
    });
    (Message::response(client_id, result).to_json(), 200)
}

/// A retry carrying `requestState`: verified, its exchange taken (once), the answers in
/// `inputResponses` delivered to the waiting upstream requests, and the call served on.
pub(crate) async fn resume(
    front: Arc<Front2026>,
    client_id: RequestId,
    identity: &Identity,
    method: &str,
    params: &Value,
    client_token: Option<Value>,
    first_wait: Duration,
) -> HttpResponse {
    let state = params.get("requestState").and_then(Value::as_str).unwrap_or_default();
    let digest = super::state::digest(method, Some(params));
    let mut parked = match front.take(state, identity, method, &digest) {
        Ok(parked) => parked,
        Err(why) => return error_response(&client_id, &GatewayError::InvalidParams(why)),
    };
    let empty = Map::new();
    let responses = params.get("inputResponses").and_then(Value::as_object).unwrap_or(&empty);
    let mut unanswered = Vec::new();
    for input in std::mem::take(&mut parked.inputs) {
        match responses.get(&input.shown) {
            Some(answer) => {
                let id = RequestId::String(input.id.clone());
                let reply = Message::response(id, answer.clone());
                if let Err(e) = parked.call.session.respond(reply).await {
                    tracing::info!(error = %e, "could not deliver an input response");
                }
            }
            None => unanswered.push(input),
        }
    }
    parked.call.client_id = client_id;
    if client_token.is_some() {
        parked.call.client_token = client_token;
    }
    let Parked { call, messages, .. } = parked;
    if !unanswered.is_empty() {
        // basic/patterns/mrtr "Error Handling": missing answers are asked for again.
        let (json, status) = park(&front, call, messages, unanswered, &mut None);
        return json_response(json, status, false);
    }
    respond(front, call, messages, first_wait).await
}

impl Front2026 {
    /// Holds an exchange and returns its `requestState`; released with an error to the
    /// upstream when no retry takes it within `server.input_wait_secs`.
    pub(crate) fn hold(self: &Arc<Front2026>, mut parked: Parked) -> String {
        let exchange = format!("x{}", self.next.fetch_add(1, Ordering::Relaxed));
        parked.until_ms = self.clock_ms() + self.input_wait.as_millis() as u64;
        let state =
            self.key.issue(&exchange, &parked.call.identity, &parked.call.method, &parked.call.digest, parked.until_ms);
        self.parked.lock().insert(exchange.clone(), parked);
        let front = self.clone();
        let wait = self.input_wait;
        actix_web::rt::spawn(async move {
            tokio::time::sleep(wait).await;
            front.release(&exchange).await;
        });
        state
    }

    /// Releases now every exchange whose wait is over by the gateway's clock, as its own timer
    /// would (tests that move a manual clock call it rather than wait).
    pub async fn release_due(&self) {
        let now = self.clock_ms();
        let due: Vec<String> =
            self.parked.lock().iter().filter(|(_, p)| p.until_ms <= now).map(|(id, _)| id.clone()).collect();
        for exchange in due {
            self.release(&exchange).await;
        }
    }

    /// Takes the exchange a verified `requestState` names.
    fn take(&self, state: &str, identity: &Identity, method: &str, digest: &str) -> Result<Parked, String> {
        let claims = self
            .key
            .verify(state, identity, method, digest, self.clock_ms())
            .map_err(|why| format!("Invalid requestState: {why}"))?;
        self.parked.lock().remove(&claims.exchange).ok_or_else(|| {
            "Invalid requestState: the exchange it names is over (answered already, or released after server.input_wait_secs); send the request again without it".to_owned()
        })
    }

    /// No retry came: the waiting upstream requests get an error and the call is cancelled.
    async fn release(&self, exchange: &str) {
        let Some(parked) = self.parked.lock().remove(exchange) else { return };
        let secs = self.input_wait.as_secs();
        tracing::info!(method = %parked.call.method, "a 2026-07-28 client did not retry within {secs} s; its input requests are answered with an error and the request is cancelled");
        for Input { id: key, .. } in &parked.inputs {
            let error = ErrorObject::new(
                codes::UPSTREAM_UNAVAILABLE,
                format!("the client did not answer within {secs} s (server.input_wait_secs)"),
            );
            let _ = parked.call.session.respond(Message::error(Some(RequestId::String(key.clone())), error)).await;
        }
        // Cancelled before its messages are read: from then on the session adds nothing to
        // them (a wrapped task not shown yet is cancelled by the session itself).
        let (id, reason) =
            (parked.call.internal_id.to_value(), "the client did not retry with the input it was asked for");
        let cancelling = json!({ "requestId": id, "reason": reason });
        let _ = parked.call.session.notify(methods::CANCELLED.into(), Some(cancelling)).await;
        // A call answered while it waited for the retry (its questions withdrawn, a wrapped
        // task shown meanwhile): its client never saw the answer, so a task made for it is
        // known to no one, and is cancelled as a call its client gave up on would have it.
        let Parked { call, mut messages, .. } = parked;
        while let Some(Some(frame)) = messages.recv().now_or_never() {
            let answer = frame.response.then(|| serde_json::from_str::<Value>(&frame.json).ok()).flatten();
            let Some(task) = answer.as_ref().and_then(|a| a.pointer("/result/task/taskId")).and_then(Value::as_str)
            else {
                continue;
            };
            tracing::info!(%task, "a task made for a call whose client did not retry is cancelled");
            let cancelling = json!({ "taskId": task });
            match call.session.request(self.internal_id(), methods::TASKS_CANCEL.into(), Some(cancelling)).await {
                Ok(mut answer) => {
                    let _ = tokio::time::timeout(Duration::from_secs(10), answer.recv()).await;
                }
                Err(e) => tracing::debug!(error = %e, "the unseen task could not be cancelled"),
            }
        }
    }

    /// Exchanges held now.
    pub fn held(&self) -> usize {
        self.parked.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the general path makes of a response: parse, finish the result, the client's id.
    fn general(method: &str, id: &RequestId, json: &str) -> Value {
        let mut value: Value = serde_json::from_str(json).unwrap();
        value["id"] = id.to_value();
        finish_result(method, value["result"].as_object_mut().unwrap());
        value
    }

    #[test]
    fn the_plain_result_path_answers_as_the_general_one() {
        let id = RequestId::Number(7);
        let cases = [
            (
                methods::TOOLS_CALL,
                "taskgate-m1",
                r#"{"jsonrpc":"2.0","id":"taskgate-m1","result":{"content":[{"type":"text","text":"a \"q\" é"}],"isError":false}}"#,
            ),
            (
                methods::TOOLS_CALL,
                "taskgate-m2",
                r#"{"jsonrpc":"2.0","id":"taskgate-m2","result":{"content":[],"_meta":{"vendor/x":1,"io.modelcontextprotocol/serverInfo":{"name":"up"}},"resultType":"complete"}}"#,
            ),
            (
                methods::TOOLS_LIST,
                "taskgate-m3",
                r#"{"jsonrpc":"2.0","id":"taskgate-m3","result":{"tools":[{"name":"t","inputSchema":{"type":"object"}}],"ttlMs":5,"we\u0022ird":true}}"#,
            ),
            (
                methods::RESOURCES_READ,
                "taskgate-m4",
                r#"{"jsonrpc":"2.0","id":"taskgate-m4","result":{"contents":[]}}"#,
            ),
        ];
        for (method, internal, json) in cases {
            let internal = RequestId::String(internal.into());
            let fast = plain_result(method, &internal, &id, json).expect("a plain result");
            assert_eq!(serde_json::from_str::<Value>(&fast).unwrap(), general(method, &id, json), "{json}");
            // The members keep the upstream's order.
            let value: Value = serde_json::from_str(&fast).unwrap();
            let keys: Vec<&String> = value["result"].as_object().unwrap().keys().collect();
            let upstream: Value = serde_json::from_str(json).unwrap();
            let first: Vec<&String> =
                upstream["result"].as_object().unwrap().keys().filter(|k| *k != "_meta").collect();
            assert_eq!(&keys[..first.len()], &first[..], "{json}");
        }
        let numbered = r#"{"jsonrpc":"2.0","id":42,"result":{"content":[]}}"#;
        assert!(plain_result(methods::TOOLS_CALL, &RequestId::Number(42), &id, numbered).is_some());
        for other in [4, 420, -42] {
            assert_eq!(plain_result(methods::TOOLS_CALL, &RequestId::Number(other), &id, numbered), None);
        }
        // The client's id is written as JSON, whatever it holds.
        for client in [RequestId::String("a \"b\"\n".into()), RequestId::Number(-3)] {
            let fast = plain_result(methods::TOOLS_CALL, &RequestId::Number(42), &client, numbered).unwrap();
            assert_eq!(serde_json::from_str::<Value>(&fast).unwrap(), general(methods::TOOLS_CALL, &client, numbered));
        }
        // Anything else takes the general path: a task, an error, a request, a notification,
        // a `_meta` that is not an object, a response to another request.
        let m = RequestId::String("m".into());
        for json in [
            r#"{"jsonrpc":"2.0","id":"m","result":{"task":{"taskId":"t","status":"working"}}}"#,
            r#"{"jsonrpc":"2.0","id":"m","error":{"code":-1,"message":"no"}}"#,
            r#"{"jsonrpc":"2.0","id":"m","method":"elicitation/create","params":{}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}"#,
            r#"{"jsonrpc":"2.0","id":"m","result":{"_meta":null}}"#,
            r#"{"jsonrpc":"2.0","id":"n","result":{"content":[]}}"#,
            r#"{"jsonrpc":"2.0","id":"mm","result":{"content":[]}}"#,
        ] {
            assert_eq!(plain_result(methods::TOOLS_CALL, &m, &id, json), None, "{json}");
        }
        assert_eq!(plain_result(methods::TOOLS_CALL, &RequestId::Number(4), &id, numbered), None);
    }
}
