//! The demo server at MCP 2026-07-28 ("modern"): stateless requests that carry their version,
//! capabilities and client info in `_meta`, checked against the standard headers over HTTP;
//! `server/discover`; questions asked as `input_required` results (`modern_input`);
//! `subscriptions/listen`.
//!
//! [`Revisions`] says which revisions a demo serves: 2025-11-25 only (the default), 2026-07-28
//! only, or both. A dual-era demo serves a request that carries modern `_meta` (or a modern
//! `MCP-Protocol-Version` header) statelessly, and `initialize` opens a legacy session
//! (basic/versioning "Compatibility Matrix"). Its 2026-07-28 side asks the legacy fixtures'
//! questions as requests on the call's stream, as servers in transition (the conformance
//! suite's reference server among them) do; the 2026-07-28 fixtures ask with `input_required`.
//!
//! Each modern request runs on a connection number of its own, which holds the request's
//! declared capabilities and log level while it runs, so the tools see what a legacy
//! session's would.

use std::sync::Arc;

use serde_json::{json, Map, Value};
use taskgate_protocol::mcp::methods;
use taskgate_protocol::param_headers::{check_params, param_headers};
use taskgate_protocol::revision_2026::{self as wire, meta, methods as modern_methods, MetaError, RequestMeta};
use taskgate_protocol::{codes, ErrorObject, Message, RequestId};
use tokio::sync::mpsc;

use crate::modern_state::{Listen, Revisions};
use crate::DemoServer;

/// The most `subscriptions/listen` streams one transport connection holds.
const MAX_LISTENS: usize = 64;

/// The legacy versions, negotiated by `initialize`.
const LEGACY: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// The methods a modern request may name (the rest, `initialize`, `ping`, `logging/setLevel`
/// and `resources/(un)subscribe` among them, are removed at 2026-07-28: -32601).
const SERVED: [&str; 8] = [
    methods::TOOLS_LIST,
    methods::TOOLS_CALL,
    methods::PROMPTS_LIST,
    methods::PROMPTS_GET,
    methods::RESOURCES_LIST,
    methods::RESOURCES_TEMPLATES_LIST,
    methods::RESOURCES_READ,
    methods::COMPLETION_COMPLETE,
];

/// The standard headers of a request over HTTP (streamable-http "Standard Request Headers").
#[derive(Debug, Default)]
pub(crate) struct Headers {
    /// `MCP-Protocol-Version`.
    pub(crate) version: Option<String>,
    /// `Mcp-Method`.
    pub(crate) method: Option<String>,
    /// `Mcp-Name`, as sent.
    pub(crate) name: Option<Vec<u8>>,
    /// `Mcp-Param-*`: the name after the prefix, lowercased, and the value as sent.
    pub(crate) params: Vec<(String, Vec<u8>)>,
}

/// What a modern message is, once checked.
pub(crate) enum Checked {
    /// Refused before it ran: the HTTP status and the error.
    Refused(u16, Message),
    /// A notification or a response: nothing to answer.
    Notification(Message),
    /// `subscriptions/listen`: its id (the subscription's) and the filter honoured.
    Listen(RequestId, Value),
    /// A request to run.
    Request(RequestId, String, Option<Value>, RequestMeta),
}

/// Optional whitespace around a header value (RFC 9110 "OWS").
fn trim_ows(raw: &[u8]) -> &[u8] {
    let start = raw.iter().position(|b| *b != b' ' && *b != b'\t').unwrap_or(raw.len());
    let end = raw.iter().rposition(|b| *b != b' ' && *b != b'\t').map_or(start, |e| e + 1);
    &raw[start..end.max(start)]
}

/// A header value as the client meant it (streamable-http "Value Encoding"), Base64 strictly
/// (padded, standard alphabet).
fn header_value(raw: &[u8]) -> Result<String, String> {
    use base64::Engine as _;
    wire::decode_header_value(trim_ows(raw), |b| base64::engine::general_purpose::STANDARD.decode(b).ok())
}

fn meta_of(params: Option<&Value>) -> Option<&Map<String, Value>> {
    params?.get("_meta")?.as_object()
}

impl DemoServer {
    /// Which revisions this demo serves.
    pub fn revisions(&self) -> Revisions {
        self.inner.revisions
    }

    /// Whether `message` is served at 2026-07-28: always by a modern-only demo, never by a
    /// legacy one; by a dual-era one when it is outside a legacy session and carries modern
    /// `_meta`, a version header that is not a legacy one, or is `server/discover`.
    pub(crate) fn speaks_modern(&self, message: &Message, header_version: Option<&str>, in_session: bool) -> bool {
        match self.inner.revisions {
            Revisions::Legacy => false,
            Revisions::Modern => true,
            Revisions::Both => {
                let params = match message {
                    Message::Request { params, .. } | Message::Notification { params, .. } => params.as_ref(),
                    _ => None,
                };
                !in_session
                    && (meta_of(params).is_some_and(|m| m.contains_key(meta::PROTOCOL_VERSION))
                        || header_version.is_some_and(|v| !LEGACY.contains(&v))
                        || message.method() == Some(modern_methods::SERVER_DISCOVER))
            }
        }
    }

    /// The versions this demo implements, modern first.
    fn supported(&self) -> Vec<&'static str> {
        let mut versions = vec![wire::PROTOCOL_VERSION];
        if self.inner.revisions == Revisions::Both {
            versions.extend(LEGACY);
        }
        versions
    }

    /// -32022 for `requested` (basic/versioning: the error lists the versions implemented).
    fn unsupported(&self, requested: &str) -> ErrorObject {
        let supported = self.supported();
        ErrorObject::new(
            codes::UNSUPPORTED_PROTOCOL_VERSION,
            format!("protocol version {requested:?} is not supported; this server implements {}", supported.join(", ")),
        )
        .with_data(json!({"supported": supported, "requested": requested}))
    }

    /// Checks a modern message before it runs, in the order of the standard's validation: the
    /// headers (streamable-http "Server Validation": 400 and -32020 when they are missing or
    /// disagree with the body), the required `_meta` fields (-32602), the version header
    /// against `_meta` (-32020), then the version itself (-32022). `headers` is `None` on stdio.
    pub(crate) fn check_modern(&self, message: Message, headers: Option<&Headers>) -> Checked {
        let Message::Request { id, method, params } = message else { return Checked::Notification(message) };
        let refuse =
            |status: u16, error: ErrorObject| Checked::Refused(status, Message::error(Some(id.clone()), error));
        let meta = meta_of(params.as_ref());
        let meta_version = meta.and_then(|m| m.get(meta::PROTOCOL_VERSION));
        // A legacy client's handshake: a modern-only server names what it implements
        // (basic/versioning "Compatibility Matrix").
        if method == methods::INITIALIZE && meta_version.is_none() {
            let requested = params.as_ref().and_then(|p| p.get("protocolVersion")).and_then(Value::as_str);
            return refuse(400, self.unsupported(requested.unwrap_or_default()));
        }
        if let Some(headers) = headers {
            if let Err(why) = self.check_headers(headers, &method, params.as_ref()) {
                return refuse(400, ErrorObject::new(codes::HEADER_MISMATCH, why));
            }
        }
        for required in [meta::PROTOCOL_VERSION, meta::CLIENT_CAPABILITIES] {
            if !meta.is_some_and(|m| m.contains_key(required)) {
                let why = format!("the request has no _meta[\"{required}\"]; every 2026-07-28 request carries it");
                return refuse(400, ErrorObject::invalid_params(why));
            }
        }
        if let (Some(headers), Some(Value::String(in_meta))) = (headers, meta_version) {
            if headers.version.as_deref() != Some(in_meta.as_str()) {
                let why = format!(
                    "the MCP-Protocol-Version header ({:?}) does not match _meta[\"{}\"] ({in_meta:?})",
                    headers.version.as_deref().unwrap_or_default(),
                    meta::PROTOCOL_VERSION
                );
                return refuse(400, ErrorObject::new(codes::HEADER_MISMATCH, why));
            }
        }
        let request_meta = match RequestMeta::from_params(params.as_ref()) {
            Ok(m) => m,
            Err(MetaError::Unsupported(v)) => return refuse(400, self.unsupported(&v)),
            Err(MetaError::Invalid(why)) => return refuse(400, ErrorObject::invalid_params(why)),
        };
        if method == modern_methods::SUBSCRIPTIONS_LISTEN {
            let asked = params.as_ref().and_then(|p| p.get("notifications")).cloned().unwrap_or_else(|| json!({}));
            return match self.honoured(&asked) {
                Ok(filter) => Checked::Listen(id, filter),
                Err(error) => refuse(200, error),
            };
        }
        Checked::Request(id, method, params, request_meta)
    }

    /// The standard headers against the body: `MCP-Protocol-Version` present, `Mcp-Method`
    /// equal to the method, `Mcp-Name` to the name or URI it names, and each `Mcp-Param-*` of
    /// a tool's `x-mcp-header` parameters to the argument (values trimmed and decoded first).
    fn check_headers(&self, headers: &Headers, method: &str, params: Option<&Value>) -> Result<(), String> {
        if headers.version.is_none() {
            return Err("the request has no MCP-Protocol-Version header".into());
        }
        match headers.method.as_deref().map(|m| m.trim_matches([' ', '\t'])) {
            None => return Err("the request has no Mcp-Method header".into()),
            Some(m) if m != method => {
                return Err(format!("the Mcp-Method header ({m:?}) is not the method ({method:?})"))
            }
            Some(_) => {}
        }
        if let Some(source) = wire::name_source(method) {
            let raw = headers.name.as_deref().ok_or_else(|| format!("a {method} request needs an Mcp-Name header"))?;
            let name = header_value(raw).map_err(|why| format!("Mcp-Name: {why}"))?;
            let in_body = params.and_then(|p| p.get(source)).and_then(Value::as_str).unwrap_or_default();
            if name != in_body {
                return Err(format!("the Mcp-Name header ({name:?}) is not the {source} in the body ({in_body:?})"));
            }
        }
        if method == methods::TOOLS_CALL {
            let name = params.and_then(|p| p.get("name")).and_then(Value::as_str).unwrap_or_default();
            let tools = self.modern_tools();
            let schema = tools.iter().find(|t| t["name"] == name).and_then(|t| t.get("inputSchema"));
            let specs = param_headers(schema).unwrap_or_default();
            let sent = |header: &str| {
                let mut copies = headers.params.iter().filter(|(n, _)| format!("mcp-param-{n}") == header);
                let (_, raw) = copies.next()?;
                if copies.next().is_some() {
                    return Some(Err("the header is sent more than once".to_owned()));
                }
                Some(header_value(raw))
            };
            check_params(&specs, params.and_then(|p| p.get("arguments")), sent)?;
        }
        Ok(())
    }

    /// `server/discover` (server/discover): the versions, capabilities and identity.
    fn discover(&self) -> Value {
        let mut capabilities = json!({"tools": {"listChanged": true}});
        if self.inner.offerings.is_some() {
            if let (Value::Object(c), Value::Object(more)) = (&mut capabilities, crate::offerings::capabilities()) {
                c.extend(more);
            }
        }
        json!({
            "supportedVersions": self.supported(),
            "capabilities": capabilities,
            "instructions": "Demo tools for taskgate.",
            "_meta": {meta::SERVER_INFO: {"name": "taskgate-demo", "version": env!("CARGO_PKG_VERSION")}},
        })
    }

    /// The part of a `subscriptions/listen` filter this demo honours (basic/patterns/subscriptions
    /// "Acknowledgment": types it does not support are left out).
    fn honoured(&self, asked: &Value) -> Result<Value, ErrorObject> {
        let Some(asked) = asked.as_object() else {
            return Err(ErrorObject::invalid_params("\"notifications\" must be an object"));
        };
        let offers = self.inner.offerings.is_some();
        let mut filter = Map::new();
        for (key, offered) in
            [("toolsListChanged", true), ("promptsListChanged", offers), ("resourcesListChanged", offers)]
        {
            if offered && asked.get(key) == Some(&Value::Bool(true)) {
                filter.insert(key.into(), Value::Bool(true));
            }
        }
        let uris = match asked.get("resourceSubscriptions") {
            None => None,
            Some(Value::Array(uris)) if uris.iter().all(Value::is_string) => Some(uris),
            Some(_) => return Err(ErrorObject::invalid_params("\"resourceSubscriptions\" must be an array of URIs")),
        };
        if let Some(uris) = uris.filter(|u| offers && !u.is_empty()) {
            filter.insert("resourceSubscriptions".into(), Value::Array(uris.clone()));
        }
        Ok(Value::Object(filter))
    }

    /// Opens a `subscriptions/listen` stream on `tx`: the acknowledgment first, then every
    /// notification its filter asks for, tagged with its id.
    pub(crate) fn listen(&self, origin: u64, id: RequestId, filter: Value, tx: mpsc::Sender<Message>) {
        let ack = json!({"_meta": {meta::SUBSCRIPTION_ID: id.to_value()}, "notifications": filter});
        let _ = tx.try_send(Message::notification(modern_methods::SUBSCRIPTIONS_ACKNOWLEDGED, Some(ack)));
        let mut listens = self.inner.listens.lock();
        listens.retain(|l| !l.tx.is_closed());
        // A transport connection's streams are bounded (stdio's share one channel, which only
        // `notifications/cancelled` ends): past the bound its oldest is dropped.
        if listens.iter().filter(|l| l.origin == origin).count() >= MAX_LISTENS {
            let oldest = listens.iter().position(|l| l.origin == origin);
            if let Some(oldest) = oldest {
                listens.remove(oldest);
            }
        }
        listens.push(Listen { origin, id, filter, tx });
    }

    /// Sends a list change or resource update to the listen streams that asked for it.
    pub(crate) fn notify_listens(&self, message: &Message) {
        let Message::Notification { method, params } = message else { return };
        let wants = |filter: &Value| match method.as_str() {
            methods::TOOLS_LIST_CHANGED => filter["toolsListChanged"] == true,
            methods::PROMPTS_LIST_CHANGED => filter["promptsListChanged"] == true,
            methods::RESOURCES_LIST_CHANGED => filter["resourcesListChanged"] == true,
            methods::RESOURCES_UPDATED => {
                let uri = params.as_ref().and_then(|p| p.get("uri"));
                filter["resourceSubscriptions"].as_array().is_some_and(|uris| uris.iter().any(|u| Some(u) == uri))
            }
            _ => false,
        };
        let mut listens = self.inner.listens.lock();
        listens.retain(|l| !l.tx.is_closed());
        for listen in listens.iter().filter(|l| wants(&l.filter)) {
            let mut params = params.clone().unwrap_or_else(|| json!({}));
            params["_meta"] = json!({meta::SUBSCRIPTION_ID: listen.id.to_value()});
            let _ = listen.tx.try_send(Message::notification(method.clone(), Some(params)));
        }
    }

    /// Ends a listen stream the client cancelled (stdio `notifications/cancelled`); false when
    /// `id` names none on `origin`.
    pub(crate) fn end_listen(&self, origin: u64, id: &RequestId) -> bool {
        let mut listens = self.inner.listens.lock();
        let before = listens.len();
        listens.retain(|l| !(l.origin == origin && &l.id == id));
        before != listens.len()
    }

    /// Stops a modern request the client cancelled or left: its stream closed (HTTP), or
    /// `notifications/cancelled` (stdio).
    pub(crate) fn cancel_modern(&self, origin: u64, id: &RequestId) {
        let Some(connection) = self.inner.modern_calls.lock().get(&(origin, id.clone())).copied() else { return };
        // The request's connection is its own: whatever it waits on is the request's.
        for ((c, _), stop) in self.inner.in_flight.lock().iter() {
            if *c == connection {
                stop.notify_one();
            }
        }
    }

    /// Runs a checked modern request that came on `origin`: the response, and the HTTP status
    /// it goes with (404 for a method not found, 400 for a missing capability, else 200).
    pub(crate) async fn run_modern(
        &self,
        origin: u64,
        id: RequestId,
        method: &str,
        params: Option<Value>,
        request: RequestMeta,
        related: &mpsc::Sender<Message>,
    ) -> (u16, Message) {
        let outcome = if method == modern_methods::SERVER_DISCOVER {
            Ok(self.discover())
        } else if SERVED.contains(&method) {
            let connection = self.connection();
            self.inner.modern_calls.lock().insert((origin, id.clone()), connection);
            let _done = Done { demo: self.clone(), origin, id: id.clone(), connection };
            self.serve_modern(connection, &id, method, params, request, related).await
        } else {
            Err(ErrorObject::method_not_found(method))
        };
        match outcome {
            Ok(mut result) => {
                if let Value::Object(fields) = &mut result {
                    fields.entry("resultType").or_insert_with(|| json!("complete"));
                    // server/utilities/caching: lists and reads say how long they stay fresh
                    // (ttlMs ≥ 0); they vary with the client's capabilities, so private.
                    let cacheable = method == modern_methods::SERVER_DISCOVER
                        || method.ends_with("/list")
                        || method == methods::RESOURCES_READ;
                    if cacheable && fields.get("resultType") == Some(&json!("complete")) {
                        fields.entry("ttlMs").or_insert(json!(0));
                        fields.entry("cacheScope").or_insert(json!("private"));
                    }
                }
                (200, Message::response(id, result))
            }
            Err(error) => {
                let status = match error.code {
                    codes::METHOD_NOT_FOUND => 404,
                    codes::MISSING_REQUIRED_CLIENT_CAPABILITY => 400,
                    _ => 200,
                };
                (status, Message::error(Some(id), error))
            }
        }
    }

    /// A served request on its own connection: the request's capabilities and log level are
    /// the connection's while it runs, and a question the request needs answered first ends
    /// it with `input_required`.
    async fn serve_modern(
        &self,
        connection: u64,
        id: &RequestId,
        method: &str,
        mut params: Option<Value>,
        request: RequestMeta,
        related: &mpsc::Sender<Message>,
    ) -> Result<Value, ErrorObject> {
        self.inner.client_capabilities.lock().insert(connection, request.capabilities.clone());
        if let Some(offerings) = &self.inner.offerings {
            // server/utilities/logging: no log messages unless the request asks for a level.
            offerings.set_minimum(connection, request.log_level);
        }
        let (answers, bound) = self.round_of(method, params.as_mut())?;
        let on_stream = self.inner.revisions == Revisions::Both;
        self.inner.rounds.lock().insert(connection, crate::modern_state::Round::new(answers, on_stream, method));
        let name = params.as_ref().and_then(|p| p.get(crate::modern_input::subject(method))).cloned();
        let outcome = match (method, name.as_ref().and_then(Value::as_str)) {
            (methods::TOOLS_CALL, Some(tool)) if self.inner.conformance && crate::modern_fixtures::is_tool(tool) => {
                let args = params.as_ref().and_then(|p| p.get("arguments")).cloned().unwrap_or_else(|| json!({}));
                self.modern_fixture(connection, tool, &args, related).await
            }
            (methods::PROMPTS_GET, Some(crate::modern_fixtures::PROMPT)) if self.inner.conformance => {
                self.modern_prompt(connection).await
            }
            _ => self.dispatch_modern(connection, id, method, params, related).await,
        };
        self.finish_round(connection, &bound, outcome)
    }

    /// A served method, as a legacy session's request would run, with what 2026-07-28 changes.
    async fn dispatch_modern(
        &self,
        connection: u64,
        id: &RequestId,
        method: &str,
        params: Option<Value>,
        related: &mpsc::Sender<Message>,
    ) -> Result<Value, ErrorObject> {
        let mut outcome = if method == methods::TOOLS_CALL {
            // Not the legacy core's tasks: a modern call runs as called.
            self.call(connection, id, params.unwrap_or_default(), related).await
        } else {
            self.request(connection, id, method, params, related).await
        };
        match (method, &mut outcome) {
            (methods::PROMPTS_LIST, Ok(result)) if self.inner.conformance => {
                if let Some(prompts) = result["prompts"].as_array_mut() {
                    prompts.push(crate::modern_fixtures::prompt());
                }
            }
            // server/resources "Error Handling": -32602 for a resource not found (-32002 before).
            (methods::RESOURCES_READ, Err(error)) if error.code == -32002 => error.code = codes::INVALID_PARAMS,
            _ => {}
        }
        outcome
    }
}

/// Forgets a modern request's connection when it ends, however it ends.
struct Done {
    demo: DemoServer,
    origin: u64,
    id: RequestId,
    connection: u64,
}

impl Drop for Done {
    fn drop(&mut self) {
        let inner: &Arc<crate::server::Inner> = &self.demo.inner;
        // Another request of the same id on the same connection may have its own entry now.
        let mut calls = inner.modern_calls.lock();
        if calls.get(&(self.origin, self.id.clone())) == Some(&self.connection) {
            calls.remove(&(self.origin, self.id.clone()));
        }
        drop(calls);
        inner.client_capabilities.lock().remove(&self.connection);
        inner.rounds.lock().remove(&self.connection);
        if let Some(offerings) = &inner.offerings {
            offerings.forget(self.connection);
        }
    }
}
