//! MCP 2026-07-28 toward an upstream: the era probe, and the translation that lets the rest of
//! the gateway keep speaking one model (2025-11-25's shapes) to a modern upstream.
//!
//! - Every request is stateless: `_meta` carries the version, the capabilities the gateway may
//!   relay for its client, and its client info; over HTTP the standard headers go with it
//!   (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`, `Mcp-Param-*`).
//! - An `input_required` result (basic/patterns/mrtr) becomes server-to-client requests, sent
//!   the way a legacy upstream's would be (on the call's stream); their answers go back in the
//!   retry, with the upstream's `requestState` echoed.
//! - A tasks-extension upstream's task (`resultType: "task"`) is presented as a 2025-11-25
//!   native task: `tasks/get` is translated, `tasks/result` polls until the task is terminal
//!   (relaying its `inputRequests` and answering them with `tasks/update`), `tasks/cancel`
//!   passes on.
//! - Cancellation closes the request's stream (HTTP) or sends `notifications/cancelled`
//!   (stdio); `resources/subscribe` and list changes become a `subscriptions/listen` filter;
//!   `logging/setLevel` becomes each request's `logLevel`.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use parking_lot::Mutex;
use reqwest::header::{HeaderName, HeaderValue};
use serde_json::{json, Map, Value};
use taskgate_protocol::mcp::{self, methods};
use taskgate_protocol::modern::{self as wire, meta as wmeta, methods as wmethods, PROTOCOL_VERSION, TASKS_EXTENSION};
use taskgate_protocol::{codes, ErrorObject, Message, RequestId};
use tokio::sync::{oneshot, watch, Notify};

use crate::session::{Channel, ChannelError, Ready, UpstreamSession};
use crate::{UpstreamError, UpstreamEvent};

/// Most `input_required` rounds one request may take before the gateway gives up on it.
const MAX_ROUNDS: usize = 16;
/// Most input requests in one `input_required` result.
const MAX_INPUT_REQUESTS: usize = 64;
/// Most resource URIs one session subscribes to at an upstream.
const MAX_SUBSCRIPTIONS: usize = 1024;
/// Most upstream tasks one session remembers (input keys already relayed; results of calls
/// the upstream completed at once).
const MAX_REMEMBERED: usize = 4096;
/// Most tools with `x-mcp-header` annotations remembered per upstream.
const MAX_ANNOTATED_TOOLS: usize = 10_000;
/// The bounds on how often `tasks/result` polls a modern upstream's task.
const MIN_POLL: Duration = Duration::from_millis(50);
const MAX_POLL: Duration = Duration::from_secs(5);
/// The request methods a modern upstream may embed in `inputRequests` (mrtr "InputRequests").
const INPUT_METHODS: [&str; 3] = [methods::ELICITATION_CREATE, methods::SAMPLING_CREATE_MESSAGE, methods::ROOTS_LIST];

/// Which revision an upstream speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Era {
    Legacy,
    Modern,
}

/// What a `server/discover` probe says about an upstream.
#[derive(Debug)]
pub(crate) enum Verdict {
    /// It speaks 2026-07-28: its `DiscoverResult`.
    Modern(Value),
    /// It answered as a legacy server would: why we think so.
    Legacy(String),
}

/// Reads a probe's answer (basic/versioning and streamable-http "Backward Compatibility"). `status`
/// is the HTTP status (`None` on stdio), `outcome` the JSON-RPC result or error if the answer
/// carried one. `Err` is no evidence either way (an authorization failure, an overloaded or
/// broken server): nothing is concluded or cached.
pub(crate) fn classify(status: Option<u16>, outcome: Option<Result<Value, ErrorObject>>) -> Result<Verdict, String> {
    if let Some(status) = status {
        // 401/403 say who may call, 408/429/5xx how the server is doing: neither says which
        // revision it speaks.
        if matches!(status, 401 | 403 | 407 | 408 | 429) || status >= 500 {
            return Err(format!("server/discover answered HTTP {status}"));
        }
    }
    match outcome {
        Some(Ok(result)) => {
            let versions: Vec<&str> = result
                .get("supportedVersions")
                .and_then(Value::as_array)
                .map(|v| v.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            if versions.contains(&PROTOCOL_VERSION) {
                Ok(Verdict::Modern(result))
            } else if versions.iter().any(|v| mcp::is_supported_version(v)) {
                Ok(Verdict::Legacy(format!("server/discover lists only {versions:?}")))
            } else {
                Err(format!("server/discover lists {versions:?}: no version taskgate speaks"))
            }
        }
        // A recognized modern error: a modern server, which must not be answered by falling
        // back to `initialize`.
        Some(Err(e)) if e.code == codes::UNSUPPORTED_PROTOCOL_VERSION => {
            let supported = e.data.as_ref().and_then(|d| d.get("supported")).cloned().unwrap_or(Value::Null);
            Err(format!("it does not support {PROTOCOL_VERSION} (it supports {supported}) and is not a legacy server"))
        }
        Some(Err(e)) if e.code == codes::HEADER_MISMATCH || e.code == codes::MISSING_REQUIRED_CLIENT_CAPABILITY => {
            Err(format!("it refused server/discover: {} ({})", e.message, e.code))
        }
        Some(Err(e)) => Ok(Verdict::Legacy(format!("server/discover answered {} {:?}", e.code, e.message))),
        None => match status {
            Some(status) if status == 200 || (400..500).contains(&status) => {
                Ok(Verdict::Legacy(format!("server/discover answered HTTP {status} without a modern error")))
            }
            Some(status) => Err(format!("server/discover answered HTTP {status}")),
            None => Ok(Verdict::Legacy("server/discover got no answer".into())),
        },
    }
}

/// The JSON-RPC errors only a modern server sends (basic/versioning "Backward Compatibility": a
/// recognized modern error identifies a modern server).
pub(crate) fn is_modern_error(code: i64) -> bool {
    matches!(
        code,
        codes::UNSUPPORTED_PROTOCOL_VERSION | codes::HEADER_MISMATCH | codes::MISSING_REQUIRED_CLIENT_CAPABILITY
    )
}

/// An `x-mcp-header` annotation of a tool's parameter: the header's name part and the
/// parameter's path from the arguments' root.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ParamHeader {
    name: HeaderName,
    path: Vec<String>,
}

/// The `x-mcp-header` annotations of a tool's input schema (streamable-http "Schema
/// Extension"), or why the tool definition is invalid and MUST be left out of the listing.
pub(crate) fn param_headers(schema: Option<&Value>) -> Result<Vec<ParamHeader>, String> {
    fn walk(node: &Value, path: &mut Vec<String>, out: &mut Vec<ParamHeader>, reachable: bool) -> Result<(), String> {
        let Value::Object(map) = node else { return Ok(()) };
        if let Some(header) = map.get("x-mcp-header") {
            let name = header.as_str().ok_or("an x-mcp-header value is not a string")?;
            if !reachable || path.is_empty() {
                return Err(format!("x-mcp-header {name:?} is not on a property reachable through properties alone"));
            }
            let tchar = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
            if name.is_empty() || !name.chars().all(tchar) {
                return Err(format!("x-mcp-header {name:?} is not an HTTP field-name token"));
            }
            match map.get("type").and_then(Value::as_str) {
                Some("string" | "integer" | "boolean") => {}
                other => return Err(format!("x-mcp-header {name:?} is on a parameter of type {other:?}")),
            }
            if out.iter().any(|h| h.name.as_str().eq_ignore_ascii_case(&format!("mcp-param-{name}"))) {
                return Err(format!("x-mcp-header {name:?} is used twice"));
            }
            let name = HeaderName::try_from(format!("mcp-param-{name}")).map_err(|e| e.to_string())?;
            out.push(ParamHeader { name, path: path.clone() });
        }
        for (key, child) in map {
            match key.as_str() {
                "properties" => {
                    if let Value::Object(props) = child {
                        for (prop, schema) in props {
                            path.push(prop.clone());
                            walk(schema, path, out, reachable)?;
                            path.pop();
                        }
                    }
                }
                "x-mcp-header" | "type" | "required" | "description" | "title" | "enum" | "const" | "default" => {}
                // Anything under another keyword (items, oneOf, $ref, if…) is not statically
                // reachable: an annotation there makes the definition invalid.
                _ => match child {
                    Value::Array(items) => {
                        for item in items {
                            walk(item, path, out, false)?;
                        }
                    }
                    other => walk(other, path, out, false)?,
                },
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    if let Some(schema) = schema {
        walk(schema, &mut Vec::new(), &mut out, true)?;
    }
    Ok(out)
}

/// A header value as streamable-http "Value Encoding" requires: as it is when it is plain
/// visible ASCII without surrounding whitespace, else in the `=?base64?…?=` sentinel.
pub(crate) fn header_value(text: &str) -> HeaderValue {
    let visible = text.bytes().all(|b| b.is_ascii_graphic() || b == b' ');
    let padded = text.starts_with(' ') || text.ends_with(' ');
    let sentinel = text.starts_with("=?base64?") && text.ends_with("?=");
    let plain = visible && !padded && !sentinel;
    let encoded;
    let text = if plain {
        text
    } else {
        encoded = format!("=?base64?{}?=", base64::engine::general_purpose::STANDARD.encode(text));
        &encoded
    };
    HeaderValue::from_str(text).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// The headers of a modern POST (streamable-http "Standard Request Headers", "Client Behavior";
/// ext-tasks "Routing Headers").
fn request_headers(method: &str, params: &Value, tools: &ToolHeaders) -> Vec<(HeaderName, HeaderValue)> {
    let mut headers = vec![(crate::http::METHOD_HEADER, header_value(method))];
    if let Some(name) = wire::name_source(method).and_then(|field| params.get(field)).and_then(Value::as_str) {
        headers.push((crate::http::NAME_HEADER, header_value(name)));
        if method == methods::TOOLS_CALL {
            let specs = tools.lock().get(name).cloned().unwrap_or_default();
            for spec in specs {
                let mut value = params.get("arguments");
                for step in &spec.path {
                    value = value.and_then(|v| v.get(step));
                }
                let text = match value {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Bool(b)) => b.to_string(),
                    Some(Value::Number(n)) if n.is_i64() || n.is_u64() => n.to_string(),
                    _ => continue, // absent or null: the header is omitted
                };
                headers.push((spec.name.clone(), header_value(&text)));
            }
        }
    }
    headers
}

/// The `x-mcp-header` annotations of an upstream's tools, by the upstream's tool name.
pub(crate) type ToolHeaders = Arc<Mutex<HashMap<String, Vec<ParamHeader>>>>;

/// A notification from a listen stream, as the rest of the gateway expects a GET stream's:
/// without the subscription id; the acknowledgment itself is consumed (`None`).
pub(crate) fn from_listen(message: Message) -> Option<Message> {
    let Message::Notification { method, mut params } = message else { return Some(message) };
    if method == wmethods::SUBSCRIPTIONS_ACKNOWLEDGED {
        return None;
    }
    if let Some(Value::Object(meta)) = params.as_mut().and_then(|p| p.get_mut("_meta")) {
        meta.remove(wmeta::SUBSCRIPTION_ID);
        if meta.is_empty() {
            params.as_mut().and_then(Value::as_object_mut).map(|p| p.remove("_meta"));
        }
    }
    Some(Message::Notification { method, params })
}

/// A modern task's fields as a 2025-11-25 `Task` (basic/utilities/tasks): `ttlMs` is `ttl`,
/// `pollIntervalMs` is `pollInterval`; the inlined `result`, `error` and `inputRequests` stay
/// behind.
pub(crate) fn legacy_task(task: &Value) -> Value {
    let mut out = Map::new();
    for (from, to) in [
        ("taskId", "taskId"),
        ("status", "status"),
        ("statusMessage", "statusMessage"),
        ("createdAt", "createdAt"),
        ("lastUpdatedAt", "lastUpdatedAt"),
        ("ttlMs", "ttl"),
        ("pollIntervalMs", "pollInterval"),
    ] {
        if let Some(v) = task.get(from) {
            out.insert(to.into(), v.clone());
        }
    }
    out.entry("ttl").or_insert(Value::Null);
    Value::Object(out)
}

/// A client's capabilities as a modern request declares them: the legacy `tasks` capability
/// has no meaning there (the tasks extension replaces it).
fn modern_capabilities(capabilities: &Value) -> Value {
    let mut caps = match capabilities {
        Value::Object(m) => m.clone(),
        _ => Map::new(),
    };
    caps.remove("tasks");
    Value::Object(caps)
}

/// A modern upstream's capabilities as the rest of the gateway reads them: the tasks
/// extension is 2025-11-25's `tasks.requests.tools.call`.
fn legacy_capabilities(discovered: &Value, tasks_ext: bool) -> Value {
    let mut caps = discovered.get("capabilities").cloned().unwrap_or_else(|| json!({}));
    if tasks_ext {
        caps["tasks"] = json!({"cancel": {}, "requests": {"tools": {"call": {}}}});
    }
    caps
}

/// A synthetic upstream task id: the upstream answered a task-augmented call at once.
const SYNC_TASK_PREFIX: &str = "taskgate-sync-";

/// The requests in flight that can be cancelled, by the id the rest of the gateway knows.
struct InFlight {
    cancel: oneshot::Sender<()>,
    /// The id of its current round at the upstream (a retry has a new one).
    round: Arc<Mutex<RequestId>>,
}

/// What a session with a modern upstream keeps.
pub(crate) struct ModernState {
    upstream: String,
    http: bool,
    /// `_meta` of every request: version, the capabilities relayed for this client, its info.
    meta: Map<String, Value>,
    /// Whether the upstream declared the tasks extension.
    tasks_ext: bool,
    /// The upstream's capabilities, in the 2025-11-25 shape.
    pub(crate) capabilities: Value,
    log_level: Mutex<Option<String>>,
    subscriptions: Mutex<BTreeSet<String>>,
    /// What the listen stream should ask for (`None`: nothing, no stream).
    pub(crate) filter: watch::Sender<Option<Value>>,
    /// Input requests sent toward the client, by the id they were given, awaiting answers.
    pending: Mutex<HashMap<RequestId, oneshot::Sender<Message>>>,
    in_flight: Mutex<HashMap<RequestId, InFlight>>,
    /// Input request keys of an upstream task already relayed to the client.
    asked: Mutex<HashMap<String, HashSet<String>>>,
    /// Results of task-augmented calls the upstream answered at once, by synthetic task id,
    /// with their size; held until the gateway's task reads the result.
    settled: Mutex<Settled>,
    /// Raised when the client answers one of a task's input requests (poll again at once).
    answered: Notify,
    tool_headers: ToolHeaders,
}

static NEXT_SYNC_TASK: AtomicU64 = AtomicU64::new(1);

/// Most results of at-once answers one session holds, in count and bytes (the gateway's task
/// reads each at its first poll; one never read is dropped oldest first, and that task then
/// fails saying the upstream lost it).
const MAX_SETTLED: usize = 256;
const MAX_SETTLED_BYTES: usize = 64 << 20;

#[derive(Default)]
struct Settled {
    results: VecDeque<(String, Value, usize)>,
    bytes: usize,
}

impl ModernState {
    pub(crate) fn new(
        upstream: &str,
        http: bool,
        identity: &crate::ClientIdentity,
        discovered: &Value,
        tool_headers: ToolHeaders,
    ) -> ModernState {
        let tasks_ext = discovered.pointer("/capabilities/extensions").and_then(|e| e.get(TASKS_EXTENSION)).is_some();
        let mut meta = Map::new();
        meta.insert(wmeta::PROTOCOL_VERSION.into(), Value::from(PROTOCOL_VERSION));
        meta.insert(wmeta::CLIENT_CAPABILITIES.into(), modern_capabilities(&identity.capabilities));
        meta.insert(wmeta::CLIENT_INFO.into(), identity.client_info.clone());
        let capabilities = legacy_capabilities(discovered, tasks_ext);
        let state = ModernState {
            upstream: upstream.to_owned(),
            http,
            meta,
            tasks_ext,
            capabilities,
            log_level: Mutex::new(None),
            subscriptions: Mutex::new(BTreeSet::new()),
            filter: watch::channel(None).0,
            pending: Mutex::default(),
            in_flight: Mutex::default(),
            asked: Mutex::default(),
            settled: Mutex::default(),
            answered: Notify::new(),
            tool_headers,
        };
        state.refilter();
        state
    }

    /// The listen filter from the list changes the upstream announces and the resources this
    /// session subscribed to.
    fn refilter(&self) {
        let caps = &self.capabilities;
        let mut filter = Map::new();
        for (kind, field) in
            [("tools", "toolsListChanged"), ("prompts", "promptsListChanged"), ("resources", "resourcesListChanged")]
        {
            if caps.get(kind).and_then(|c| c.get("listChanged")) == Some(&Value::Bool(true)) {
                filter.insert(field.into(), Value::Bool(true));
            }
        }
        let subscriptions = self.subscriptions.lock();
        if !subscriptions.is_empty() {
            filter.insert("resourceSubscriptions".into(), subscriptions.iter().cloned().collect());
        }
        let wanted = (!filter.is_empty()).then(|| Value::Object(filter));
        self.filter.send_if_modified(|current| {
            let changed = *current != wanted;
            *current = wanted.clone();
            changed
        });
    }

    /// `params` with this session's `_meta` (the tasks extension declared when `tasks`).
    pub(crate) fn stamp(&self, params: &mut Value, tasks: bool) {
        if !params.is_object() {
            *params = json!({});
        }
        let meta = params.as_object_mut().expect("an object").entry("_meta").or_insert_with(|| json!({}));
        if !meta.is_object() {
            *meta = json!({});
        }
        let meta = meta.as_object_mut().expect("an object");
        // The legacy task's related-task tag names a task of the gateway's, meaningless upstream.
        meta.remove(mcp::meta::RELATED_TASK);
        for (k, v) in &self.meta {
            meta.insert(k.clone(), v.clone());
        }
        if tasks {
            let caps = meta.get_mut(wmeta::CLIENT_CAPABILITIES).expect("just set");
            if !caps.get("extensions").is_some_and(Value::is_object) {
                caps["extensions"] = json!({});
            }
            caps["extensions"][TASKS_EXTENSION] = json!({});
        }
        if let Some(level) = self.log_level.lock().clone() {
            meta.insert(wmeta::LOG_LEVEL.into(), Value::from(level));
        }
    }

    /// A request for a listen stream with `filter`.
    pub(crate) fn listen_request(self: &Arc<Self>, filter: Value, id: RequestId) -> Message {
        let mut params = json!({ "notifications": filter });
        self.stamp(&mut params, false);
        Message::request(id, wmethods::SUBSCRIPTIONS_LISTEN, Some(params))
    }

    /// The client's answer to an input request this session sent toward it: `true` when it was
    /// one.
    pub(crate) fn answer(&self, response: Message) -> bool {
        let Some(id) = response.id() else { return false };
        match self.pending.lock().remove(id) {
            Some(waiter) => {
                let _ = waiter.send(response);
                true
            }
            None => false,
        }
    }

    fn protocol(&self, reason: impl Into<String>) -> UpstreamError {
        UpstreamError::Protocol { upstream: self.upstream.clone(), reason: reason.into() }
    }

    fn rpc(&self, error: ErrorObject) -> UpstreamError {
        UpstreamError::Rpc { upstream: self.upstream.clone(), error: Box::new(error) }
    }

    fn remember_settled(&self, result: Value) -> String {
        let id = format!("{SYNC_TASK_PREFIX}{}", NEXT_SYNC_TASK.fetch_add(1, Ordering::Relaxed));
        let size = serde_json::to_vec(&result).map_or(0, |v| v.len());
        let mut settled = self.settled.lock();
        while !settled.results.is_empty()
            && (settled.results.len() >= MAX_SETTLED || settled.bytes + size > MAX_SETTLED_BYTES)
        {
            if let Some((_, _, dropped)) = settled.results.pop_front() {
                settled.bytes -= dropped;
            }
        }
        settled.bytes += size;
        settled.results.push_back((id.clone(), result, size));
        id
    }

    /// Whether `task_id` names a result held here (a synthetic task).
    fn is_settled(&self, task_id: &str) -> bool {
        self.settled.lock().results.iter().any(|(id, _, _)| id == task_id)
    }

    /// The result of a synthetic task. Its bytes leave this session with it; the task stays
    /// known as completed (the gateway's task polls once more to learn its status), and is
    /// forgotten among the oldest.
    fn take_settled(&self, task_id: &str) -> Option<Value> {
        let mut settled = self.settled.lock();
        let entry = settled.results.iter_mut().find(|(id, _, _)| id == task_id)?;
        let size = std::mem::take(&mut entry.2);
        let result = std::mem::take(&mut entry.1);
        settled.bytes -= size;
        Some(result)
    }

    /// Whether `key` of `task_id` is new (and now remembered as relayed).
    fn first_ask(&self, task_id: &str, key: &str) -> bool {
        let mut asked = self.asked.lock();
        if !asked.contains_key(task_id) && asked.len() >= MAX_REMEMBERED {
            // Forget an arbitrary old task: at worst one of its questions is asked twice,
            // and the upstream ignores the second answer (ext-tasks "Task Update Requests").
            if let Some(old) = asked.keys().next().cloned() {
                asked.remove(&old);
            }
        }
        let keys = asked.entry(task_id.to_owned()).or_default();
        keys.len() < MAX_REMEMBERED && keys.insert(key.to_owned())
    }

    fn forget_task(&self, task_id: &str) {
        self.asked.lock().remove(task_id);
    }
}

/// A task in the 2025-11-25 shape, made up for a call the upstream completed at once.
fn settled_task(task_id: &str) -> Value {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let at = taskgate_protocol::tasks::rfc3339(now.as_millis() as u64);
    json!({
        "taskId": task_id,
        "status": "completed",
        "createdAt": at,
        "lastUpdatedAt": at,
        "ttl": null,
        "pollInterval": MIN_POLL.as_millis() as u64,
    })
}

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

/// One request of the core's at a modern upstream: where it goes, its id, and the id of its
/// current round there (a retry has a new one).
#[derive(Clone, Copy)]
struct Call<'a> {
    ready: &'a Ready,
    state: &'a Arc<ModernState>,
    id: &'a RequestId,
    round: &'a Arc<Mutex<RequestId>>,
}

/// Removes a request from the in-flight table whichever way its future ends. Over stdio, a
/// future dropped before it ended (the client cancelled it and the core stopped its work, or
/// the upstream's timeout) also tells the process: stdio "Cancellation" is
/// `notifications/cancelled` naming the request's current round; over HTTP dropping the
/// future closes the request's stream, which is the cancellation.
struct InFlightGuard<'a> {
    state: &'a ModernState,
    id: RequestId,
    channel: &'a Channel,
    round: &'a Arc<Mutex<RequestId>>,
    ended: bool,
}

impl Drop for InFlightGuard<'_> {
    fn drop(&mut self) {
        let removed = self.state.in_flight.lock().remove(&self.id);
        if self.ended || self.state.http || removed.is_none() {
            // Ended with an outcome, or cancelled by `modern_notify`, which told the process.
            return;
        }
        let channel = self.channel.clone();
        let notice = Message::notification(
            methods::CANCELLED,
            Some(json!({ "requestId": self.round.lock().to_value(), "reason": "the request was abandoned" })),
        );
        tokio::spawn(async move {
            let _ = channel.send(&notice).await;
        });
    }
}

impl UpstreamSession {
    /// One request to a modern upstream, as the rest of the gateway asked it in the 2025-11-25
    /// model.
    pub(crate) async fn modern_request(
        &self,
        ready: &Ready,
        state: &Arc<ModernState>,
        id: RequestId,
        method: &str,
        params: Option<Value>,
        related: Option<crate::Sender<Message>>,
    ) -> Result<Value, UpstreamError> {
        let (cancel, cancelled) = oneshot::channel();
        let round = Arc::new(Mutex::new(id.clone()));
        state.in_flight.lock().insert(id.clone(), InFlight { cancel, round: round.clone() });
        let mut guard = InFlightGuard { state, id: id.clone(), channel: &ready.channel, round: &round, ended: false };
        let call = Call { ready, state, id: &id, round: &round };
        let work = self.modern_dispatch(call, method, params, related);
        let outcome = tokio::select! {
            outcome = work => outcome,
            // basic/patterns/cancellation: the request's stream is closed (the future above is
            // dropped with it); nothing more is read for it.
            _ = cancelled => Err(state.rpc(ErrorObject::new(codes::INTERNAL_ERROR, "the request was cancelled"))),
        };
        guard.ended = true;
        outcome
    }

    async fn modern_dispatch(
        &self,
        call: Call<'_>,
        method: &str,
        params: Option<Value>,
        related: Option<crate::Sender<Message>>,
    ) -> Result<Value, UpstreamError> {
        let Call { ready, state, id, .. } = call;
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
                if state.is_settled(&task_id) {
                    return Ok(settled_task(&task_id));
                }
                let task = self.task_get(ready, state, id.clone(), &task_id).await?;
                Ok(legacy_task(&task))
            }
            methods::TASKS_RESULT => {
                let task_id = task_id()?;
                if let Some(result) = state.take_settled(&task_id) {
                    return Ok(result);
                }
                self.follow_task(ready, state, id, &task_id, related.as_ref()).await
            }
            methods::TASKS_CANCEL => {
                let task_id = task_id()?;
                if state.is_settled(&task_id) {
                    return Ok(settled_task(&task_id));
                }
                let mut p = json!({ "taskId": task_id });
                state.stamp(&mut p, true);
                self.exchange(&ready.channel, state, id.clone(), methods::TASKS_CANCEL, p, None).await?;
                state.forget_task(&task_id);
                match self.task_get(ready, state, self.next_request_id(), &task_id).await {
                    Ok(task) => Ok(legacy_task(&task)),
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
                self.exchange(&ready.channel, state, id.clone(), wmethods::SERVER_DISCOVER, p, None)
                    .await
                    .map(|_| json!({}))
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
        let Call { ready, state, id, round } = call;
        let mut params = params.unwrap_or_else(|| json!({}));
        // A legacy task augmentation becomes the extension, declared on this request only
        // (ext-tasks: the server decides; it MUST NOT return a task to a request without it).
        let augmented = method == methods::TOOLS_CALL
            && params.as_object_mut().and_then(|p| p.remove("task")).is_some()
            && state.tasks_ext;
        let mut declare = augmented;
        let mut responses: Option<Value> = None;
        let mut request_state: Option<Value> = None;
        for n in 0..MAX_ROUNDS {
            let round_id = if n == 0 { id.clone() } else { self.next_request_id() };
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
            let result = match self.exchange(&ready.channel, state, round_id, method, p, related).await {
                Err(e) if !declare && state.tasks_ext && wants_tasks_extension(&e) => {
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
                        Some(asks) => Some(self.ask_client(state, &asks, id, related).await?),
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
                        out.insert("task".into(), legacy_task(&result));
                        if let Some(m) = result.get("_meta") {
                            out.insert("_meta".into(), m.clone());
                        }
                        return Ok(Value::Object(out));
                    }
                    return self.follow_task(ready, state, id, task_id, related).await;
                }
                _ => {
                    let result = plain(result);
                    if augmented {
                        // The upstream chose to answer at once: the gateway's task completes
                        // with this outcome at its first poll.
                        let task_id = state.remember_settled(result);
                        return Ok(json!({ "task": settled_task(&task_id) }));
                    }
                    return Ok(if method == methods::TOOLS_LIST { self.tools_listed(state, result) } else { result });
                }
            }
        }
        Err(state.protocol(format!("it asked for input more than {MAX_ROUNDS} times for one request")))
    }

    /// A `tools/list` page of a modern upstream: tools whose `x-mcp-header` annotations are
    /// invalid are left out (streamable-http "Schema Extension": clients MUST exclude them), the
    /// valid annotations are kept for calls, and with the tasks extension every tool may run
    /// as a task.
    fn tools_listed(&self, state: &ModernState, mut result: Value) -> Value {
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
                        tracing::warn!(upstream = self.upstream(), tool = %name, %why, "tool definition rejected (x-mcp-header)");
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

    /// Sends each input request toward the client the way a legacy upstream's request would go
    /// (on the call's stream, or as an event naming the call) and collects the answers by key.
    async fn ask_client(
        &self,
        state: &Arc<ModernState>,
        asks: &Value,
        related_id: &RequestId,
        related: Option<&crate::Sender<Message>>,
    ) -> Result<Value, UpstreamError> {
        let Value::Object(asks) = asks else { return Err(state.protocol("inputRequests is not an object")) };
        if asks.len() > MAX_INPUT_REQUESTS {
            return Err(state.protocol(format!("more than {MAX_INPUT_REQUESTS} input requests at once")));
        }
        let mut waits = Vec::with_capacity(asks.len());
        for (key, ask) in asks {
            let waiter = self.ask_one(state, ask, related_id, related).await?;
            waits.push((key.clone(), waiter));
        }
        let mut answers = Map::new();
        for (key, waiter) in waits {
            answers.insert(key, self.answer_of(state, waiter).await?);
        }
        Ok(Value::Object(answers))
    }

    /// Sends one input request toward the client; the receiver gets the client's answer.
    async fn ask_one(
        &self,
        state: &Arc<ModernState>,
        ask: &Value,
        related_id: &RequestId,
        related: Option<&crate::Sender<Message>>,
    ) -> Result<Asked, UpstreamError> {
        let method = ask.get("method").and_then(Value::as_str).unwrap_or_default();
        if !INPUT_METHODS.contains(&method) {
            // mrtr "Server Requirements": values MUST be one of these three requests.
            return Err(state.protocol(format!("an input request for {method:?}, which is not a client request")));
        }
        let id = self.next_request_id();
        let (tx, rx) = oneshot::channel();
        state.pending.lock().insert(id.clone(), tx);
        let request = Message::request(id.clone(), method, ask.get("params").cloned());
        match related {
            Some(sink) => {
                let _ = sink.send(request).await;
            }
            None => {
                if let Message::Request { id, method, params } = request {
                    let event = UpstreamEvent::Request { id, method, params, related: Some(related_id.clone()) };
                    self.to_owner(event).await;
                }
            }
        }
        Ok(Asked { id, answer: rx, state: state.clone() })
    }

    /// The client's answer to one input request: its result, or its error as the request's.
    async fn answer_of(&self, state: &ModernState, mut asked: Asked) -> Result<Value, UpstreamError> {
        match (&mut asked.answer).await {
            Ok(Message::Response { result, .. }) => Ok(result),
            Ok(Message::Error { error, .. }) => Err(state.rpc(error)),
            _ => {
                Err(state
                    .rpc(ErrorObject::new(codes::INTERNAL_ERROR, "the client's answer to the upstream never came")))
            }
        }
    }

    /// `tasks/get` at the upstream (ext-tasks "Task Polling"), the task as it answered.
    async fn task_get(
        &self,
        ready: &Ready,
        state: &ModernState,
        id: RequestId,
        task_id: &str,
    ) -> Result<Value, UpstreamError> {
        let mut p = json!({ "taskId": task_id });
        state.stamp(&mut p, true);
        let task = self.exchange(&ready.channel, state, id, methods::TASKS_GET, p, None).await?;
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
        ready: &Ready,
        state: &Arc<ModernState>,
        related_id: &RequestId,
        task_id: &str,
        related: Option<&crate::Sender<Message>>,
    ) -> Result<Value, UpstreamError> {
        loop {
            let task = self.task_get(ready, state, self.next_request_id(), task_id).await?;
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
                    return Err(state.rpc(ErrorObject::new(codes::INTERNAL_ERROR, "the upstream cancelled the task")));
                }
                "input_required" => {
                    if let Some(Value::Object(asks)) = task.get("inputRequests") {
                        for (key, ask) in asks.iter().take(MAX_INPUT_REQUESTS) {
                            if !state.first_ask(task_id, key) {
                                continue;
                            }
                            let asked = self.ask_one(state, ask, related_id, related).await?;
                            self.forward_answer(ready, state, task_id, key, asked);
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

    /// When the client answers a task's input request, `tasks/update` hands it to the upstream
    /// (ext-tasks "Task Update Requests"). Bounded by the upstream's timeout and the session.
    fn forward_answer(&self, ready: &Ready, state: &Arc<ModernState>, task_id: &str, key: &str, asked: Asked) {
        let session = self.downgrade();
        let (state, task_id, key) = (state.clone(), task_id.to_owned(), key.to_owned());
        let channel = ready.channel.clone();
        let timeout = Duration::from_secs(self.inner.connector.config().timeout_secs);
        tokio::spawn(async move {
            let mut asked = asked;
            let answer = tokio::time::timeout(timeout, &mut asked.answer).await;
            let Some(session) = session.upgrade() else { return };
            let result = match answer {
                Ok(Ok(Message::Response { result, .. })) => result,
                Ok(Ok(Message::Error { error, .. })) => {
                    tracing::info!(upstream = session.upstream(), %task_id, %key, code = error.code, "the client refused a task's input request; the upstream task waits on");
                    return;
                }
                _ => return,
            };
            let mut p = json!({ "taskId": task_id, "inputResponses": { key.clone(): result } });
            state.stamp(&mut p, true);
            let id = session.next_request_id();
            if let Err(e) = session.exchange(&channel, &state, id, wmethods::TASKS_UPDATE, p, None).await {
                tracing::info!(upstream = session.upstream(), %task_id, %key, error = %e, "tasks/update failed");
            }
            state.answered.notify_waiters();
        });
    }

    /// One request and its outcome at a modern upstream, with the request headers over HTTP.
    pub(crate) async fn exchange(
        &self,
        channel: &Channel,
        state: &ModernState,
        id: RequestId,
        method: &str,
        params: Value,
        related: Option<&crate::Sender<Message>>,
    ) -> Result<Value, UpstreamError> {
        let headers = if state.http { request_headers(method, &params, &state.tool_headers) } else { Vec::new() };
        let request = crate::session::Encoded::request(id, method, Some(&params));
        drop(params);
        match channel.request(&request, related, &headers).await {
            Ok(result) if result.is_object() => Ok(result),
            Ok(result) => Err(state
                .protocol(format!("its result is {}, not an object", taskgate_protocol::jsonrpc::json_kind(&result)))),
            Err(ChannelError::Failed(e)) => Err(e),
            Err(ChannelError::Expired) => Err(state.protocol("it answered 404 to a request of no session")),
        }
    }

    /// A notification the rest of the gateway sends, as the modern upstream takes it.
    pub(crate) async fn modern_notify(
        &self,
        ready: &Ready,
        state: &ModernState,
        method: &str,
        params: Option<Value>,
    ) -> Result<(), UpstreamError> {
        match method {
            methods::CANCELLED => {
                let Some(id) = params.as_ref().and_then(|p| p.get("requestId")).and_then(RequestId::from_value) else {
                    return Ok(());
                };
                let Some(in_flight) = state.in_flight.lock().remove(&id) else { return Ok(()) };
                let round = in_flight.round.lock().clone();
                let _ = in_flight.cancel.send(());
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

/// An input request sent toward the client, awaiting its answer; forgotten when dropped.
pub(crate) struct Asked {
    id: RequestId,
    answer: oneshot::Receiver<Message>,
    state: Arc<ModernState>,
}

impl Drop for Asked {
    fn drop(&mut self) {
        self.state.pending.lock().remove(&self.id);
    }
}

impl Channel {
    /// Keeps the listen stream of a modern session open as its filter says (HTTP); over stdio
    /// the stream is one long request whose notifications arrive like any other.
    pub(crate) fn subscribe(&self, session: &UpstreamSession, state: &Arc<ModernState>) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_tells_modern_from_legacy_and_concludes_nothing_from_auth_or_server_errors() {
        let discover = json!({"supportedVersions": ["2026-07-28", "2025-11-25"], "capabilities": {}});
        assert!(matches!(classify(Some(200), Some(Ok(discover))), Ok(Verdict::Modern(_))));
        let legacy = ErrorObject::new(-32000, "Bad Request: Server not initialized");
        assert!(matches!(classify(Some(400), Some(Err(legacy.clone()))), Ok(Verdict::Legacy(_))));
        assert!(matches!(classify(Some(404), None), Ok(Verdict::Legacy(_))));
        assert!(matches!(classify(Some(405), None), Ok(Verdict::Legacy(_))));
        assert!(matches!(classify(None, Some(Err(ErrorObject::new(-32601, "no")))), Ok(Verdict::Legacy(_))));
        assert!(matches!(classify(None, None), Ok(Verdict::Legacy(_))));
        for status in [401, 403, 429, 500, 502, 503] {
            assert!(classify(Some(status), Some(Err(legacy.clone()))).is_err(), "{status}");
            assert!(classify(Some(status), None).is_err(), "{status}");
        }
        let unsupported = ErrorObject::new(-32022, "Unsupported protocol version")
            .with_data(json!({"supported": ["2027-01-01"], "requested": "2026-07-28"}));
        assert!(classify(Some(400), Some(Err(unsupported))).is_err());
        assert!(classify(Some(400), Some(Err(ErrorObject::new(-32020, "Header mismatch")))).is_err());
    }

    #[test]
    fn header_values_are_plain_or_base64_as_the_encoding_rules_say() {
        assert_eq!(header_value("us-west1"), "us-west1");
        assert_eq!(header_value("Hello, 世界"), "=?base64?SGVsbG8sIOS4lueVjA==?=");
        assert_eq!(header_value(" padded "), "=?base64?IHBhZGRlZCA=?=");
        assert_eq!(header_value("line1\nline2"), "=?base64?bGluZTEKbGluZTI=?=");
        assert_eq!(header_value("=?base64?literal?="), "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?=");
    }

    #[test]
    fn x_mcp_header_annotations_are_read_and_invalid_ones_reject_the_tool() {
        let schema = json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "opts": {"type": "object", "properties": {"dry": {"type": "boolean", "x-mcp-header": "Dry"}}},
            "query": {"type": "string"}
        }});
        let specs = param_headers(Some(&schema)).unwrap();
        assert_eq!(specs.len(), 2);
        let tools: ToolHeaders = Arc::default();
        tools.lock().insert("sql".into(), specs);
        let params = json!({"name": "sql", "arguments": {"region": "us-west1", "opts": {"dry": true}, "query": "x"}});
        let headers = request_headers("tools/call", &params, &tools);
        let find = |n: &str| headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.to_str().unwrap().to_owned());
        assert_eq!(find("mcp-method").as_deref(), Some("tools/call"));
        assert_eq!(find("mcp-name").as_deref(), Some("sql"));
        assert_eq!(find("mcp-param-region").as_deref(), Some("us-west1"));
        assert_eq!(find("mcp-param-dry").as_deref(), Some("true"));
        let null = json!({"name": "sql", "arguments": {"region": null}});
        assert!(!request_headers("tools/call", &null, &tools).iter().any(|(k, _)| k == "mcp-param-region"));
        for bad in [
            json!({"properties": {"n": {"type": "number", "x-mcp-header": "N"}}}),
            json!({"properties": {"a": {"type": "array", "items": {"type": "string", "x-mcp-header": "A"}}}}),
            json!({"properties": {"a": {"type": "string", "x-mcp-header": ""}}}),
            json!({"properties": {"a": {"type": "string", "x-mcp-header": "a b"}}}),
            json!({"properties": {"a": {"type": "string", "x-mcp-header": "X"}, "b": {"type": "string", "x-mcp-header": "x"}}}),
            json!({"oneOf": [{"properties": {"a": {"type": "string", "x-mcp-header": "A"}}}]}),
        ] {
            assert!(param_headers(Some(&bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn modern_tasks_read_as_legacy_tasks() {
        let task = json!({"taskId": "t", "status": "completed", "createdAt": "a", "lastUpdatedAt": "b",
            "ttlMs": 60000, "pollIntervalMs": 500, "result": {"content": []}, "resultType": "complete"});
        assert_eq!(
            legacy_task(&task),
            json!({"taskId": "t", "status": "completed", "createdAt": "a", "lastUpdatedAt": "b", "ttl": 60000, "pollInterval": 500})
        );
        assert_eq!(legacy_task(&json!({"taskId": "t", "status": "working", "ttlMs": null}))["ttl"], Value::Null);
    }

    #[test]
    fn listen_notifications_lose_the_subscription_id_and_the_acknowledgment_is_consumed() {
        let ack = Message::notification(wmethods::SUBSCRIPTIONS_ACKNOWLEDGED, Some(json!({"notifications": {}})));
        assert!(from_listen(ack).is_none());
        let note = Message::notification(
            "notifications/resources/updated",
            Some(json!({"_meta": {wmeta::SUBSCRIPTION_ID: 7}, "uri": "file:///a"})),
        );
        assert_eq!(
            from_listen(note),
            Some(Message::notification("notifications/resources/updated", Some(json!({"uri": "file:///a"}))))
        );
    }
}
