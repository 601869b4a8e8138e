//! An MCP client over Streamable HTTP for tests, with access to raw HTTP when a test needs to
//! send something a well-behaved client would not.

use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::StatusCode;
use serde_json::{json, Value};
use taskgate_protocol::sse::Decoder;
use taskgate_protocol::{ErrorObject, Message, RequestId};

/// How long any single test request may take before the test fails instead of hanging.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long an idle connection is kept for the next request: below the gateway's keep-alive
/// (actix-web's 5 s), so that a request never goes on a connection the gateway is closing
/// (a POST is not retried; the benchmark's section 10 once failed so, after its clients idled).
const POOL_IDLE: Duration = Duration::from_secs(3);

/// A reply to one POST.
#[derive(Debug)]
pub struct Reply {
    /// HTTP status.
    pub status: StatusCode,
    /// Response headers.
    pub headers: HeaderMap,
    /// The messages: one for a JSON reply, every event's message for SSE.
    pub messages: Vec<Message>,
    /// Whether it came as `text/event-stream`.
    pub sse: bool,
}

impl Reply {
    /// The response message (the last response in the reply).
    pub fn response(&self) -> &Message {
        self.messages.iter().rev().find(|m| m.is_response()).unwrap_or_else(|| panic!("no response in {self:?}"))
    }

    /// The result of the response, or its error.
    pub fn outcome(&self) -> Result<Value, ErrorObject> {
        match self.response() {
            Message::Response { result, .. } => Ok(result.clone()),
            Message::Error { error, .. } => Err(error.clone()),
            _ => unreachable!(),
        }
    }

    /// The notifications that came before the response.
    pub fn notifications(&self) -> Vec<&Message> {
        self.messages.iter().filter(|m| matches!(m, Message::Notification { .. })).collect()
    }
}

/// A test MCP client.
#[derive(Clone)]
pub struct McpClient {
    /// The endpoint URL.
    pub url: String,
    /// The session id after initialize.
    pub session: Option<String>,
    /// The protocol version header to send, after initialize.
    pub protocol_version: Option<String>,
    http: reqwest::Client,
    /// Shared by clones, so concurrent requests of one session never reuse an id.
    next_id: std::sync::Arc<std::sync::atomic::AtomicI64>,
    /// Sent as `Authorization: Bearer <token>` with every request.
    pub bearer: Option<String>,
}

impl McpClient {
    /// A client that presents `token` (an API key or a JWT) as its bearer credentials.
    pub fn with_bearer(url: &str, token: &str) -> McpClient {
        McpClient { bearer: Some(token.to_owned()), ..McpClient::new(url) }
    }

    /// A client that authenticates as an OAuth client of its own (the client credentials grant)
    /// the way MCP authorization has a client find out how: a request without credentials,
    /// the 401's `resource_metadata` (RFC 9728), the authorization server it names and that
    /// server's metadata (RFC 8414, or OpenID discovery), a token for the resource with the
    /// scope the challenge asks for (RFC 8707). Panics, saying which step failed.
    pub async fn with_client_credentials(url: &str, client_id: &str, secret: &str) -> McpClient {
        let mut client = McpClient::new(url);
        let refused = client.try_initialize().await;
        assert_eq!(refused.status, StatusCode::UNAUTHORIZED, "a request without credentials is refused");
        let challenge = refused.headers.get("www-authenticate").and_then(|v| v.to_str().ok()).unwrap_or_default();
        let attribute = |name: &str| {
            let start = challenge.find(&format!("{name}=\""))? + name.len() + 2;
            Some(challenge[start..].split('"').next()?.to_owned())
        };
        let metadata_url = attribute("resource_metadata").expect("the challenge names the resource metadata");
        let get = |url: String| {
            let http = client.http.clone();
            async move {
                let r = http.get(&url).send().await.ok()?;
                if !r.status().is_success() {
                    return None;
                }
                serde_json::from_slice::<Value>(&r.bytes().await.ok()?).ok()
            }
        };
        let metadata = get(metadata_url.clone()).await.expect("the protected resource metadata");
        let resource = metadata["resource"].as_str().expect("the metadata names the resource").to_owned();
        let issuer = metadata["authorization_servers"][0].as_str().expect("an authorization server").to_owned();
        let (origin, path) = match issuer.find("://").and_then(|i| issuer[i + 3..].find('/').map(|j| i + 3 + j)) {
            Some(at) => (&issuer[..at], issuer[at..].trim_end_matches('/')),
            None => (issuer.trim_end_matches('/'), ""),
        };
        let mut server = None;
        for candidate in [
            format!("{origin}/.well-known/oauth-authorization-server{path}"),
            format!("{origin}/.well-known/openid-configuration{path}"),
            format!("{}/.well-known/openid-configuration", issuer.trim_end_matches('/')),
        ] {
            if let Some(found) = get(candidate).await {
                server = Some(found);
                break;
            }
        }
        let server = server.expect("the authorization server's metadata");
        let token_endpoint = server["token_endpoint"].as_str().expect("a token endpoint").to_owned();
        let scope = attribute("scope")
            .or_else(|| {
                metadata["scopes_supported"]
                    .as_array()
                    .map(|s| s.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(" "))
            })
            .unwrap_or_default();
        let mut form = vec![("grant_type", "client_credentials"), ("resource", resource.as_str())];
        if !scope.is_empty() {
            form.push(("scope", scope.as_str()));
        }
        let body = form_urlencoded::Serializer::new(String::new()).extend_pairs(form).finish();
        let encode = |text: &str| form_urlencoded::byte_serialize(text.as_bytes()).collect::<String>();
        let answer: Value = client
            .http
            .post(&token_endpoint)
            .basic_auth(encode(client_id), Some(encode(secret)))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .expect("the token endpoint answers")
            .bytes()
            .await
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .expect("a JSON token response");
        let token = answer["access_token"].as_str().unwrap_or_else(|| panic!("no access token: {answer}"));
        client.bearer = Some(token.to_owned());
        client
    }

    /// A new session's client that shares `other`'s HTTP connections (its connection pool).
    pub fn sharing_connections(other: &McpClient) -> McpClient {
        McpClient::with_http(&other.url, other.http.clone())
    }

    /// A client for the endpoint at `url`.
    pub fn new(url: &str) -> McpClient {
        let http =
            reqwest::Client::builder().timeout(REQUEST_TIMEOUT).pool_idle_timeout(POOL_IDLE).build().expect("client");
        McpClient::with_http(url, http)
    }

    fn with_http(url: &str, http: reqwest::Client) -> McpClient {
        McpClient {
            url: url.to_owned(),
            session: None,
            protocol_version: None,
            http,
            next_id: std::sync::Arc::new(std::sync::atomic::AtomicI64::new(1)),
            bearer: None,
        }
    }

    fn id(&mut self) -> RequestId {
        RequestId::Number(self.next_id.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1)
    }

    /// The standard headers: both content types accepted, session and version when known.
    pub fn headers(&self) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("content-type", HeaderValue::from_static("application/json"));
        h.insert("accept", HeaderValue::from_static("application/json, text/event-stream"));
        if let Some(s) = &self.session {
            h.insert("mcp-session-id", HeaderValue::from_str(s).unwrap());
        }
        if let Some(v) = &self.protocol_version {
            h.insert("mcp-protocol-version", HeaderValue::from_str(v).unwrap());
        }
        if let Some(token) = &self.bearer {
            h.insert("authorization", HeaderValue::from_str(&format!("Bearer {token}")).unwrap());
        }
        h
    }

    /// Sends initialize and returns the reply whatever it is (for tests of refusals).
    pub async fn try_initialize(&mut self) -> Reply {
        let params = json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "taskgate-tests", "version": "1"}});
        let id = self.id();
        self.post_message(&Message::request(id, "initialize", Some(params))).await
    }

    /// Initializes with `capabilities`, keeping the session id. Returns the result.
    pub async fn initialize_with(&mut self, version: &str, capabilities: Value) -> Value {
        let params = json!({"protocolVersion": version, "capabilities": capabilities, "clientInfo": {"name": "taskgate-tests", "version": "1"}});
        let id = self.id();
        let reply = self.post_message(&Message::request(id, "initialize", Some(params))).await;
        assert_eq!(reply.status, StatusCode::OK, "initialize failed: {reply:?}");
        let session = reply
            .headers
            .get("mcp-session-id")
            .expect("Mcp-Session-Id on the InitializeResult")
            .to_str()
            .unwrap()
            .to_owned();
        self.session = Some(session);
        let result = reply.outcome().expect("initialize result");
        self.protocol_version = result["protocolVersion"].as_str().map(str::to_owned);
        let status = self.notify("notifications/initialized", None).await;
        assert_eq!(status, StatusCode::ACCEPTED);
        result
    }

    /// Initializes at the latest version with no capabilities.
    pub async fn initialize(&mut self) -> Value {
        self.initialize_with("2025-11-25", json!({})).await
    }

    /// POSTs raw bytes with extra headers (replacing the standard ones of the same name).
    pub async fn post_raw(&self, body: impl Into<reqwest::Body>, extra: &[(&str, &str)]) -> Reply {
        let mut headers = self.headers();
        for (k, v) in extra {
            let name = HeaderName::try_from(*k).unwrap();
            if v.is_empty() {
                headers.remove(&name);
            } else {
                headers.insert(name, HeaderValue::from_str(v).unwrap());
            }
        }
        let response = self.http.post(&self.url).headers(headers).body(body).send().await.expect("POST");
        read_reply(response).await
    }

    /// POSTs one message.
    pub async fn post_message(&self, message: &Message) -> Reply {
        self.post_raw(message.to_json(), &[]).await
    }

    /// Sends a request and reads the whole reply.
    pub async fn request(&mut self, method: &str, params: Option<Value>) -> Reply {
        let id = self.id();
        self.post_message(&Message::request(id, method, params)).await
    }

    /// Calls a tool; the result or the JSON-RPC error.
    pub async fn call(&mut self, name: &str, arguments: Value) -> Result<Value, ErrorObject> {
        self.request("tools/call", Some(json!({"name": name, "arguments": arguments}))).await.outcome()
    }

    /// Every tool name across all pages of `tools/list`.
    pub async fn tool_names(&mut self) -> Vec<String> {
        let mut names = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let params = cursor.as_ref().map(|c| json!({"cursor": c}));
            let result = self.request("tools/list", params).await.outcome().expect("tools/list");
            names.extend(result["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_owned()));
            match result.get("nextCursor").and_then(Value::as_str) {
                Some(next) => cursor = Some(next.to_owned()),
                None => return names,
            }
        }
    }

    /// Sends a notification; returns the HTTP status.
    pub async fn notify(&self, method: &str, params: Option<Value>) -> StatusCode {
        self.post_message(&Message::notification(method, params)).await.status
    }

    /// Sends a request and returns its reply as a stream, to read while it is in progress: an
    /// SSE stream, or one JSON message (the gateway answers a client that accepts both with
    /// JSON when the response is the first thing it has to send).
    pub async fn request_stream(&mut self, method: &str, params: Option<Value>) -> SseReader {
        let id = self.id();
        let body = Message::request(id, method, params).to_json();
        let mut response = self.http.post(&self.url).headers(self.headers()).body(body).send().await.expect("POST");
        let content_type = response.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned());
        let mut queue = Vec::new();
        let sse = content_type.as_deref() == Some("text/event-stream");
        match content_type.as_deref() {
            Some("text/event-stream") => {}
            Some("application/json") => {
                let mut body = Vec::new();
                while let Some(chunk) = response.chunk().await.expect("the JSON body") {
                    body.extend_from_slice(&chunk);
                }
                queue.push(Message::from_slice(&body).unwrap().unwrap());
            }
            other => panic!("a request answered with Content-Type {other:?}"),
        }
        SseReader { response, decoder: Decoder::new(1 << 24), queue, sse }
    }

    /// Opens the GET stream.
    pub async fn open_stream(&self) -> Result<SseReader, StatusCode> {
        let mut headers = self.headers();
        headers.remove("content-type");
        headers.insert("accept", HeaderValue::from_static("text/event-stream"));
        // A client without the request timeout (a stream stays open), built once: building one
        // loads the system's certificates.
        static STREAMS: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
        let http = STREAMS.get_or_init(reqwest::Client::new);
        let response = http.get(&self.url).headers(headers).send().await.expect("GET");
        if response.status() != StatusCode::OK {
            return Err(response.status());
        }
        Ok(SseReader { response, decoder: Decoder::new(1 << 24), queue: Vec::new(), sse: true })
    }

    /// Ends the session; returns the HTTP status.
    pub async fn delete(&self) -> StatusCode {
        self.http.delete(&self.url).headers(self.headers()).send().await.expect("DELETE").status()
    }
}

async fn read_reply(mut response: reqwest::Response) -> Reply {
    let status = response.status();
    let headers = response.headers().clone();
    let content_type = headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    let mut messages = Vec::new();
    let sse = content_type.starts_with("text/event-stream");
    if sse {
        let mut decoder = Decoder::new(1 << 24);
        while let Some(chunk) = response.chunk().await.expect("SSE chunk") {
            for event in decoder.feed(&chunk).unwrap() {
                if !event.data.is_empty() {
                    messages.push(Message::from_slice(event.data.as_bytes()).unwrap().unwrap());
                }
            }
        }
    } else {
        let body = response.bytes().await.expect("body");
        if !body.is_empty() {
            let value: Value =
                serde_json::from_slice(&body).unwrap_or_else(|e| panic!("body is not JSON ({e}): {body:?}"));
            messages.push(Message::parse(value).expect("a JSON-RPC message"));
        }
    }
    Reply { status, headers, messages, sse }
}

/// Reads messages from an open SSE stream.
pub struct SseReader {
    response: reqwest::Response,
    decoder: Decoder,
    queue: Vec<Message>,
    sse: bool,
}

impl SseReader {
    /// Reads the SSE body of a response the test sent itself.
    pub fn from_response(response: reqwest::Response) -> SseReader {
        SseReader { response, decoder: Decoder::new(1 << 24), queue: Vec::new(), sse: true }
    }

    /// Whether the reply is an SSE stream (not one JSON message).
    pub fn is_sse(&self) -> bool {
        self.sse
    }

    /// The next message, or `None` when the stream ends. Fails the test after 30 s.
    pub async fn next(&mut self) -> Option<Message> {
        let read = async {
            loop {
                if !self.queue.is_empty() {
                    return Some(self.queue.remove(0));
                }
                let chunk = self.response.chunk().await.ok()??;
                for event in self.decoder.feed(&chunk).unwrap() {
                    if !event.data.is_empty() {
                        self.queue.push(Message::from_slice(event.data.as_bytes()).unwrap().unwrap());
                    }
                }
            }
        };
        tokio::time::timeout(REQUEST_TIMEOUT, read).await.expect("no SSE message within 30 s")
    }
}
