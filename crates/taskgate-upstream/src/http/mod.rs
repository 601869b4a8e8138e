//! The Streamable HTTP transport toward an upstream (basic/transports "Streamable HTTP"):
//! requests and their JSON or SSE replies here, the long-lived streams in `listen`, the bound
//! on connections in `connections`.

mod connections;
mod listen;
mod stream;

pub(crate) use connections::Connections;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, CONTENT_TYPE};
use reqwest::{Method, StatusCode};
use serde_json::Value;
use taskgate_config::UpstreamConfig;
use taskgate_protocol::pass_through::Reply as Received;
use taskgate_protocol::{Message, Payload, RequestId};
use tokio::sync::{mpsc, watch};

use crate::client::{HttpClient, HttpError, Reply, Target};
use crate::routes::{Incoming, Routes};
use crate::wire::{ChannelError, Encoded};
use crate::UpstreamError;

const SESSION_HEADER: HeaderName = HeaderName::from_static("mcp-session-id");
const VERSION_HEADER: HeaderName = HeaderName::from_static("mcp-protocol-version");
const JSON: HeaderValue = HeaderValue::from_static("application/json");
const JSON_OR_SSE: HeaderValue = HeaderValue::from_static("application/json, text/event-stream");

/// A session's id and version as header values (see [`HttpChannel::build_headers`]).
struct Built {
    session_id: Option<HeaderValue>,
    version: Option<HeaderValue>,
}

/// One Streamable HTTP session with an upstream.
pub(crate) struct HttpChannel {
    name: String,
    /// Parsed once (`None`: the configured URL is not one, and every request fails saying so).
    target: Option<Target>,
    url_text: String,
    client: HttpClient,
    headers: HeaderMap,
    max_message_bytes: usize,
    /// How long the GET stream stays open once nothing needs it.
    stream_idle: Duration,
    /// How long a notification or a response may take to be accepted (`timeout_secs`).
    send_timeout: Duration,
    /// The longest wait before resuming a call's stream the upstream closed early.
    resume_wait_max: Duration,
    session_id: Mutex<Option<String>>,
    protocol_version: Mutex<Option<String>>,
    /// The session's id and version as header values, as last built: the same for every
    /// request until one of them changes (each change clears them).
    built_headers: Mutex<Option<Built>>,
    expired: AtomicBool,
    /// Speaking 2026-07-28: no session, and an error status carries a JSON-RPC error.
    speaks_2026: AtomicBool,
    /// A modern request was refused as a legacy server refuses one (a 4xx without a recognized
    /// modern error): the upstream may have gone back to 2025-11-25 (see [`Self::take_doubt`]).
    doubt: AtomicBool,
    incoming: mpsc::Sender<Box<Incoming>>,
    routes: Arc<Routes>,
    closed: watch::Receiver<bool>,
    /// Whether the GET stream is open (`Some(true)`), not (`Some(false)`), or will not be
    /// (`None`: the upstream offers none).
    stream: watch::Sender<Option<bool>>,
    connections: Arc<Connections>,
    /// The gateway's OAuth client for the upstream: each request carries its token.
    credentials: Option<crate::credentials::Authorizer>,
}

impl HttpChannel {
    pub(crate) fn new(
        config: &UpstreamConfig,
        client: HttpClient,
        incoming: mpsc::Sender<Box<Incoming>>,
        routes: Arc<Routes>,
        closed: watch::Receiver<bool>,
        connections: Arc<Connections>,
        credentials: Option<crate::credentials::Authorizer>,
    ) -> HttpChannel {
        let mut headers = HeaderMap::new();
        for (k, v) in &config.headers {
            match (HeaderName::try_from(k.as_str()), HeaderValue::try_from(v.as_str())) {
                (Ok(k), Ok(v)) => {
                    headers.insert(k, v);
                }
                _ => tracing::warn!(upstream = %config.name, header = %k, "ignoring an invalid configured header"),
            }
        }
        HttpChannel {
            name: config.name.clone(),
            // A URL that does not parse makes every request fail (see `send`), naming it.
            target: Target::parse(config.url.as_deref().unwrap_or_default()),
            url_text: config.url.clone().unwrap_or_default(),
            client,
            headers,
            max_message_bytes: config.max_message_bytes,
            stream_idle: Duration::from_secs(config.stream_idle_secs),
            send_timeout: Duration::from_secs(config.timeout_secs),
            resume_wait_max: Duration::from_millis(config.resume_wait_max_ms),
            session_id: Mutex::new(None),
            protocol_version: Mutex::new(None),
            built_headers: Mutex::new(None),
            expired: AtomicBool::new(false),
            doubt: AtomicBool::new(false),
            speaks_2026: AtomicBool::new(false),
            incoming,
            routes,
            closed,
            stream: watch::channel(Some(false)).0,
            connections,
            credentials,
        }
    }

    pub(crate) fn set_protocol_version(&self, version: &str) {
        *self.protocol_version.lock() = Some(version.to_owned());
        *self.built_headers.lock() = None;
    }

    fn set_session_id(&self, id: &str) {
        *self.session_id.lock() = Some(id.to_owned());
        *self.built_headers.lock() = None;
    }

    /// From now on the channel speaks 2026-07-28: every POST carries that version's header and
    /// no session; an error status's JSON-RPC error body is the request's outcome.
    pub(crate) fn set_2026(&self) {
        self.set_protocol_version(taskgate_protocol::revision_2026::PROTOCOL_VERSION);
        self.speaks_2026.store(true, Ordering::Relaxed);
    }

    fn is_2026(&self) -> bool {
        self.speaks_2026.load(Ordering::Relaxed)
    }

    /// Continues a session the upstream gave an earlier process of the gateway.
    pub(crate) fn adopt(&self, resume: &crate::SessionResume) {
        self.set_session_id(&resume.session_id);
        self.set_protocol_version(&resume.protocol_version);
    }

    /// The session's id and version, once the upstream has given one.
    pub(crate) fn resume_point(&self) -> Option<crate::SessionResume> {
        let session_id = self.session_id.lock().clone()?;
        let protocol_version = self.protocol_version.lock().clone()?;
        Some(crate::SessionResume { session_id, protocol_version })
    }

    /// Whether the upstream gave this channel a session (`Mcp-Session-Id`).
    pub(crate) fn has_session(&self) -> bool {
        self.session_id.lock().is_some()
    }

    /// The channel is no longer usable: the next request connects again.
    pub(crate) fn expire(&self) {
        self.expired.store(true, Ordering::Relaxed);
    }

    /// Whether a modern request was refused as a legacy server refuses one since last asked.
    pub(crate) fn take_doubt(&self) -> bool {
        self.doubt.swap(false, Ordering::Relaxed)
    }

    /// Back to no version header: the probe set one, and a legacy `initialize` carries none.
    pub(crate) fn clear_protocol_version(&self) {
        *self.protocol_version.lock() = None;
        *self.built_headers.lock() = None;
    }

    pub(crate) fn is_alive(&self) -> bool {
        !self.expired.load(Ordering::Relaxed)
    }

    fn unavailable(&self, reason: impl Into<String>) -> UpstreamError {
        UpstreamError::Unavailable { upstream: self.name.clone(), reason: reason.into() }
    }

    fn protocol(&self, reason: impl Into<String>) -> UpstreamError {
        UpstreamError::Protocol { upstream: self.name.clone(), reason: reason.into() }
    }

    /// The headers of a request in this session: the configured ones, the session's id and
    /// protocol version.
    fn headers(&self) -> HeaderMap {
        self.build_headers(0)
    }

    /// [`Self::headers`] with a POST's content type and `Accept`.
    fn post_headers(&self) -> HeaderMap {
        let mut headers = self.build_headers(2);
        headers.insert(CONTENT_TYPE, JSON);
        headers.insert(ACCEPT, JSON_OR_SSE);
        headers
    }

    /// The headers, with room for `more`. The session's id and version are kept as header
    /// values (checked and copied once per session, not per request; a map kept whole would
    /// cost an upstream session a kilobyte).
    fn build_headers(&self, more: usize) -> HeaderMap {
        let (id, version) = {
            // Built under the lock: a change of id or version clears it after setting them,
            // so what is kept is never older than they are.
            let mut built = self.built_headers.lock();
            let built = built.get_or_insert_with(|| {
                let value = |v: &Mutex<Option<String>>| v.lock().as_deref().and_then(|v| HeaderValue::from_str(v).ok());
                Built { session_id: value(&self.session_id), version: value(&self.protocol_version) }
            });
            (built.session_id.clone(), built.version.clone())
        };
        let mut headers = HeaderMap::with_capacity(self.headers.len() + 2 + more);
        for (name, value) in &self.headers {
            headers.append(name, value.clone());
        }
        if let Some(id) = id {
            headers.insert(SESSION_HEADER, id);
        }
        if let Some(version) = version {
            headers.insert(VERSION_HEADER, version);
        }
        headers
    }

    /// Sends a request of this session with `headers` (from [`Self::headers`]).
    async fn send_request(&self, method: Method, mut headers: HeaderMap, body: Bytes) -> Result<Reply, UpstreamError> {
        let Some(target) = &self.target else {
            return Err(self.unavailable(format!("its url {:?} is not a valid URL", self.url_text)));
        };
        if let Some(credentials) = &self.credentials {
            let authorization =
                credentials.of.authorization(credentials.caller.as_ref()).await.map_err(|why| self.unavailable(why))?;
            headers.insert(reqwest::header::AUTHORIZATION, authorization);
        }
        self.client.send(method, target, headers, body).await.map_err(|e| self.unavailable(e.0))
    }

    async fn post(&self, json: Bytes, extra: &[(HeaderName, HeaderValue)]) -> Result<Reply, ChannelError> {
        let response = self.post_raw(json, extra).await?;
        self.check_status(response).await
    }

    async fn post_raw(&self, json: Bytes, extra: &[(HeaderName, HeaderValue)]) -> Result<Reply, UpstreamError> {
        let mut headers = self.post_headers();
        for (name, value) in extra {
            headers.insert(name, value.clone());
        }
        // The span of this upstream call is the parent of the upstream's (W3C Trace Context).
        if let Some(trace) = crate::trace_context::current() {
            if let Ok(value) = HeaderValue::from_str(&trace.traceparent) {
                headers.insert(HeaderName::from_static("traceparent"), value);
            }
            if let Some(Ok(value)) = trace.tracestate.as_deref().map(HeaderValue::from_str) {
                headers.insert(HeaderName::from_static("tracestate"), value);
            }
        }
        self.send_request(Method::POST, headers, json).await
    }

    /// Sends a modern `server/discover` probe (streamable-http "Backward Compatibility"): the
    /// HTTP status, and the JSON-RPC outcome when the body carries one.
    pub(crate) async fn probe(
        &self,
        message: &Message,
        extra: &[(HeaderName, HeaderValue)],
    ) -> Result<(StatusCode, Option<Result<Value, taskgate_protocol::ErrorObject>>), UpstreamError> {
        let id = message.id().cloned().expect("requests have ids");
        let _connection = self.connections.for_request().await;
        let response = self.post_raw(message.to_json().into(), extra).await?;
        let status = response.status();
        if status.is_success() {
            return match self.read_reply(response, &id, false, None).await {
                Ok(v) => Ok((status, Some(Ok(v.into_value())))),
                Err(ChannelError::Failed(UpstreamError::Rpc { error, .. })) => Ok((status, Some(Err(*error)))),
                Err(ChannelError::Failed(e)) => Err(e),
                Err(ChannelError::Expired) => Ok((status, None)),
            };
        }
        let body = self.read_body(response).await.unwrap_or_default();
        let mut error = rpc_error(&body);
        if matches!(status.as_u16(), 401 | 403) {
            // What it says of refused credentials, as `check_status` keeps it.
            error = error.and_then(|mut e| {
                e.message = self.refusal_said(&e.message)?;
                Some(e)
            });
        }
        Ok((status, error.map(Err)))
    }

    /// What an upstream says of the credentials it refused, fit to pass on: one line, bounded,
    /// the credential it was sent cut out should it echo it; nothing when that credential is
    /// the gateway's own token (what is said goes on to the gateway's clients).
    fn refusal_said(&self, message: &str) -> Option<String> {
        if self.credentials.is_some() {
            return None;
        }
        let sent = self.headers.get(reqwest::header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        let secret = sent.map(|v| v.split_once(' ').map_or(v, |(_, t)| t).trim()).filter(|t| t.len() >= 4);
        let mut said: String = message.chars().filter(|c| !c.is_control()).take(300).collect();
        if let Some(secret) = secret {
            said = said.replace(secret, "…");
        }
        Some(said)
    }

    /// Maps HTTP statuses: 404 on a known session means it expired; others are errors.
    async fn check_status(&self, response: Reply) -> Result<Reply, ChannelError> {
        let status = response.status();
        if status == StatusCode::NOT_FOUND && self.session_id.lock().is_some() {
            self.expired.store(true, Ordering::Relaxed);
            return Err(ChannelError::Expired);
        }
        if status.is_success() {
            return Ok(response);
        }
        // An upstream that is a resource server refused the gateway's credentials: the error
        // says what it asks for (its challenge names its metadata and scope, MCP authorization).
        if matches!(status.as_u16(), 401 | 403) {
            // Only a 401 says the token is bad; a 403 is about what it may do.
            if let (Some(credentials), 401) = (&self.credentials, status.as_u16()) {
                credentials.of.refused(credentials.caller.as_ref());
            }
            let challenge = response.headers().get("www-authenticate").and_then(|v| v.to_str().ok()).map(str::to_owned);
            // What it says is wrong, when its body is a JSON-RPC error (`refusal_said`).
            let body = response.text(self.max_message_bytes).await.unwrap_or_default();
            let said = rpc_error(body.as_bytes())
                .and_then(|e| self.refusal_said(&e.message))
                .map(|said| format!("; it says: {said}"))
                .unwrap_or_default();
            let asks = challenge.map(|c| format!("; it asks: {c}")).unwrap_or_default();
            let what = match &self.credentials {
                Some(a) => format!("it refused {} ({status}{said}{asks})", a.whose()),
                None if self.headers.contains_key(reqwest::header::AUTHORIZATION) => {
                    format!("it refused the Authorization header it was sent ({status}{said}{asks})")
                }
                None => format!(
                    "it requires authorization ({status}{said}{asks}): give the upstream [upstream.oauth] or its headers"
                ),
            };
            return Err(self.unavailable(what).into());
        }
        let body = response.text(self.max_message_bytes).await.unwrap_or_default();
        let error = rpc_error(body.as_bytes());
        if self.is_2026() {
            // basic/versioning "Backward Compatibility": a 4xx without a recognized modern error
            // is how a legacy server refuses a modern request. Which statuses say nothing of
            // the revision is as for the probe (`revision_2026::classify`), and 413 is the size.
            let recognized = error.as_ref().is_some_and(|e| crate::revision_2026::is_2026_error(e.code));
            if status.is_client_error() && !recognized && !matches!(status.as_u16(), 401 | 403 | 407 | 408 | 413 | 429)
            {
                self.doubt.store(true, Ordering::Relaxed);
            }
            // streamable-http "Server Validation", "Protocol Version Header": a modern server
            // answers 400 or 404 with the JSON-RPC error that says why.
            if let Some(error) = error {
                return Err(UpstreamError::Rpc { upstream: self.name.clone(), error: Box::new(error) }.into());
            }
        } else if let Some(error) = error.filter(|e| e.code == taskgate_protocol::codes::UNSUPPORTED_PROTOCOL_VERSION) {
            // A 2026-only server refusing a legacy request (or `initialize`): the session
            // probes its revision again (see `UpstreamSession::request`).
            return Err(UpstreamError::Rpc { upstream: self.name.clone(), error: Box::new(error) }.into());
        }
        let snippet: String = body.chars().take(200).collect();
        let reason = format!("HTTP {status} from {}: {snippet}", self.url_text);
        Err(if status.is_server_error() { self.unavailable(reason) } else { self.protocol(reason) }.into())
    }

    /// Sends a request and waits for its response, which may come as JSON or on an SSE stream.
    pub(crate) async fn request(
        &self,
        request: &Encoded,
        sink: Option<&crate::Sender<Message>>,
        extra: &[(HeaderName, HeaderValue)],
    ) -> Result<Payload, ChannelError> {
        let id = request.id.clone();
        let _connection = self.connections.for_request().await;
        let response = self.post(request.json.clone(), extra).await?;
        if request.initialize {
            if let Some(sid) = response.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok()) {
                self.set_session_id(sid);
            }
        }
        self.read_reply(response, &id, request.pass, sink).await
    }

    /// The outcome of request `id` from its response: JSON, or an SSE stream carrying it. With
    /// `pass`, its result is kept as the text it came as ([`Payload::Raw`]).
    async fn read_reply(
        &self,
        response: Reply,
        id: &RequestId,
        pass: bool,
        sink: Option<&crate::Sender<Message>>,
    ) -> Result<Payload, ChannelError> {
        let id = id.clone();
        let (sse, json) = {
            let content_type = content_type(&response);
            (is_media(content_type, "text/event-stream"), is_media(content_type, "application/json"))
        };
        if sse {
            self.read_resuming(response, &id, pass, sink).await
        } else if json {
            let body = self.read_body(response).await?;
            let passing = pass.then(|| id.clone());
            // A server in transition may write the call's notifications before its response in
            // one JSON body, a message a line: such a body (a line starting with an object) is
            // kept to be read again as a stream's events if it is not one message.
            let lines = memchr::memmem::find(&body, b"\n{").is_some().then(|| body.clone());
            let reply = match crate::decode_reply(body, move |got| passing.as_ref() == Some(got)).await {
                Ok(reply) => reply.map_err(|e| self.protocol(e.to_string()))?,
                Err(e) if lines.is_some() => {
                    return self
                        .read_lines(lines.unwrap_or_default(), &id, pass, sink)
                        .await
                        .map_err(|_| self.protocol(format!("response is not JSON: {e}")))?
                        .ok_or_else(|| {
                            self.protocol(format!("the JSON response does not answer request {id}")).into()
                        });
                }
                Err(e) => return Err(self.protocol(format!("response is not JSON: {e}")).into()),
            };
            self.outcome(&id, reply)
                .unwrap_or_else(|| Err(self.protocol(format!("the JSON response does not answer request {id}")).into()))
        } else if response.status() == StatusCode::ACCEPTED {
            Err(self.protocol("answered a request with 202 Accepted and no response").into())
        } else {
            Err(self
                .protocol(format!("unexpected Content-Type {:?}", content_type(&response).to_ascii_lowercase()))
                .into())
        }
    }

    /// Sends a notification or a response; the upstream answers 202.
    pub(crate) async fn send(&self, message: &Message) -> Result<(), ChannelError> {
        // Not under max_connections: a response or a notification is short, and one may be
        // what a request holding a connection waits for (the answer to the upstream's
        // elicitation); waiting for a connection here could wait for ever. Bounded in time
        // instead: an upstream that never answers holds no connection and no task for ever
        // (a client's cancellations each send one).
        let sent = async {
            let response = self.post(message.to_json().into(), &[]).await?;
            // Some servers answer notifications with a body; drain and ignore it.
            let _ = self.read_body(response).await;
            Ok(())
        };
        match tokio::time::timeout(self.send_timeout, sent).await {
            Ok(outcome) => outcome,
            Err(_) => Err(self
                .unavailable(format!(
                    "it did not accept a message within {} s (timeout_secs)",
                    self.send_timeout.as_secs()
                ))
                .into()),
        }
    }

    /// The result or error for `id` from a reply message, if it is that reply.
    fn outcome(&self, id: &RequestId, reply: Received) -> Option<Result<Payload, ChannelError>> {
        let reply = match reply {
            Received::Passed { id: got, result } => return (&got == id).then_some(Ok(Payload::Raw(result))),
            Received::Message(message) => message,
        };
        match reply {
            Message::Response { id: got, result } if &got == id => Some(Ok(Payload::Value(result))),
            Message::Error { id: got, error } if got.as_ref() == Some(id) || got.is_none() => {
                Some(Err(UpstreamError::Rpc { upstream: self.name.clone(), error: Box::new(error) }.into()))
            }
            _ => None,
        }
    }

    async fn read_body(&self, mut response: Reply) -> Result<Vec<u8>, ChannelError> {
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e: HttpError| self.unavailable(e.0))? {
            if body.len() + chunk.len() > self.max_message_bytes {
                return Err(self
                    .protocol(format!("response exceeds max_message_bytes ({})", self.max_message_bytes))
                    .into());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    /// Ends the session at the upstream (basic/transports: clients SHOULD send DELETE).
    pub(crate) async fn delete(&self) {
        self.expired.store(true, Ordering::Relaxed);
        if self.session_id.lock().is_none() {
            return;
        }
        let sent = tokio::time::timeout(
            Duration::from_secs(5),
            self.send_request(Method::DELETE, self.headers(), Bytes::new()),
        )
        .await;
        match sent {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::debug!(upstream = %self.name, error = %e, "DELETE of the upstream session failed"),
            Err(_) => tracing::debug!(upstream = %self.name, "DELETE of the upstream session timed out"),
        }
    }
}

/// The JSON-RPC error a body carries, if it is one.
fn rpc_error(body: &[u8]) -> Option<taskgate_protocol::ErrorObject> {
    match Message::from_slice(body) {
        Ok(Ok(Message::Error { error, .. })) => Some(error),
        _ => None,
    }
}

/// The response's Content-Type, as sent.
fn content_type(response: &Reply) -> &str {
    response.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default()
}

/// True when `content_type` is `media`, parameters and all (media types are ASCII
/// case-insensitive; compared in place: this runs on every response).
fn is_media(content_type: &str, media: &str) -> bool {
    content_type.as_bytes().get(..media.len()).is_some_and(|head| head.eq_ignore_ascii_case(media.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn channel(headers: &[(&str, &str)]) -> HttpChannel {
        let mut config = UpstreamConfig::http("demo", "http://127.0.0.1:9/mcp");
        config.headers = headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let client = HttpClient::new(config.url.as_deref(), 1, Duration::from_secs(1));
        let (incoming, _) = mpsc::channel(1);
        let (_, closed) = watch::channel(false);
        HttpChannel::new(&config, client, incoming, Arc::default(), closed, Connections::new("demo", 1, None), None)
    }

    fn shown(headers: &HeaderMap) -> Vec<String> {
        let mut shown: Vec<String> =
            headers.iter().map(|(k, v)| format!("{k}: {}", v.to_str().unwrap_or("?"))).collect();
        shown.sort();
        shown
    }

    #[test]
    fn each_request_carries_the_session_id_and_version_as_they_are_now() {
        let channel = channel(&[("authorization", "Bearer k"), ("x-team", "a")]);
        assert_eq!(shown(&channel.headers()), ["authorization: Bearer k", "x-team: a"]);
        assert_eq!(
            shown(&channel.post_headers()),
            [
                "accept: application/json, text/event-stream",
                "authorization: Bearer k",
                "content-type: application/json",
                "x-team: a"
            ]
        );
        // Each change is in the next request's headers, whatever was built before it.
        channel.set_session_id("s-1");
        channel.set_protocol_version("2025-11-25");
        let first = shown(&channel.post_headers());
        assert!(first.contains(&"mcp-session-id: s-1".to_owned()), "{first:?}");
        assert!(first.contains(&"mcp-protocol-version: 2025-11-25".to_owned()), "{first:?}");
        assert_eq!(first.len(), 6);
        channel.adopt(&crate::SessionResume { session_id: "s-2".into(), protocol_version: "2025-06-18".into() });
        assert_eq!(
            shown(&channel.headers()),
            ["authorization: Bearer k", "mcp-protocol-version: 2025-06-18", "mcp-session-id: s-2", "x-team: a"]
        );
        channel.clear_protocol_version();
        assert_eq!(shown(&channel.headers()), ["authorization: Bearer k", "mcp-session-id: s-2", "x-team: a"]);
        // An id that is not a header value is left out, as before.
        channel.set_session_id("bad\nid");
        assert_eq!(shown(&channel.headers()), ["authorization: Bearer k", "x-team: a"]);
    }

    #[test]
    fn a_media_type_is_matched_case_insensitively_with_its_parameters() {
        assert!(is_media("text/event-stream", "text/event-stream"));
        assert!(is_media("Text/Event-Stream; charset=utf-8", "text/event-stream"));
        assert!(is_media("APPLICATION/JSON", "application/json"));
        assert!(!is_media("text/event", "text/event-stream"));
        assert!(!is_media("", "application/json"));
        assert!(!is_media("application/jsonl", "text/event-stream"));
    }
}
