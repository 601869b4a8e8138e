//! The demo server over Streamable HTTP (actix-web): sessions, JSON and SSE responses, the GET
//! stream for `notifications/tools/list_changed`, DELETE.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use actix_web::dev::ServerHandle;
use actix_web::http::header::{self, HeaderMap};
use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use bytes::Bytes;
use parking_lot::Mutex;
use taskgate_protocol::mcp::methods;
use taskgate_protocol::sse::encode_event;
use taskgate_protocol::{ErrorObject, Message};
use tokio::sync::{mpsc, watch};

use crate::sse_body::sse;
use crate::DemoServer;

/// A running demo HTTP server.
pub struct DemoHttp {
    /// The bound address.
    pub addr: SocketAddr,
    /// The MCP endpoint URL.
    pub url: String,
    handle: ServerHandle,
    state: Arc<State>,
}

struct State {
    demo: DemoServer,
    /// Session id → connection number.
    sessions: Mutex<HashMap<String, u64>>,
    /// The number of sessions, for tests to wait on without sleeping.
    session_count: watch::Sender<usize>,
    /// `test_reconnection` streams closed early, by stream id.
    closed_early: Mutex<HashMap<String, ClosedEarly>>,
}

/// A stream closed early: its session, and its response once made.
type ClosedEarly = (String, watch::Receiver<Option<Message>>);

impl State {
    fn update(&self, change: impl FnOnce(&mut HashMap<String, u64>)) {
        let mut sessions = self.sessions.lock();
        change(&mut sessions);
        self.session_count.send_replace(sessions.len());
    }
}

impl DemoHttp {
    /// Forgets every session, so the next request with an old session id gets 404.
    pub fn expire_sessions(&self) {
        self.state.update(|s| s.clear());
    }

    /// Waits until the number of sessions satisfies `condition`.
    pub async fn wait_sessions(&self, condition: impl FnMut(&usize) -> bool) {
        let mut rx = self.state.session_count.subscribe();
        let _ = rx.wait_for(condition).await;
    }

    /// Sessions open now.
    pub fn sessions(&self) -> usize {
        self.state.sessions.lock().len()
    }

    /// Stops the server, dropping its connections.
    pub async fn stop(&self) {
        self.handle.stop(false).await;
    }
}

/// Serves `demo` on `addr` (use `127.0.0.1:0` for any free port). Call inside an actix system.
pub fn serve(demo: DemoServer, addr: &str) -> std::io::Result<DemoHttp> {
    let state = Arc::new(State {
        demo,
        sessions: Mutex::new(HashMap::new()),
        session_count: watch::channel(0).0,
        closed_early: Mutex::new(HashMap::new()),
    });
    let shared = web::Data::from(state.clone());
    let server = HttpServer::new(move || {
        App::new().app_data(shared.clone()).service(
            web::resource("/mcp").route(web::post().to(post)).route(web::get().to(get)).route(web::delete().to(delete)),
        )
    })
    .workers(1)
    // Small streamed writes (SSE): disable Nagle's algorithm, as the gateway does.
    .on_connect(|connection, _| {
        if let Some(tcp) = connection.downcast_ref::<actix_web::rt::net::TcpStream>() {
            let _ = tcp.set_nodelay(true);
        }
    })
    .disable_signals()
    .bind(addr)?;
    let addr = server.addrs()[0];
    let server = server.run();
    let handle = server.handle();
    actix_rt::spawn(server);
    Ok(DemoHttp { addr, url: format!("http://{addr}/mcp"), handle, state })
}

/// Refuses a request whose `Origin` names anything but this machine (basic/transports
/// "Security Warning": servers MUST validate `Origin` against DNS rebinding). `Host` is left
/// alone: a proxy in front (the benchmark's nginx) names its upstream block there.
fn local_only(headers: &HeaderMap) -> Result<(), HttpResponse> {
    let Some(origin) = headers.get(header::ORIGIN) else { return Ok(()) };
    let origin = origin.to_str().unwrap_or("<not ASCII>");
    let authority = origin.split_once("://").map_or("", |(_, rest)| rest);
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().map(|h| format!("[{h}]")).unwrap_or_default(),
        None => authority.split(':').next().unwrap_or_default().to_owned(),
    };
    if matches!(host.to_ascii_lowercase().as_str(), "localhost" | "127.0.0.1" | "[::1]") {
        Ok(())
    } else {
        Err(HttpResponse::Forbidden().body(format!("Origin {origin} is not allowed")))
    }
}

fn session(headers: &HeaderMap, state: &State) -> Result<(String, u64), HttpResponse> {
    local_only(headers)?;
    let Some(id) = headers.get("mcp-session-id").and_then(|v| v.to_str().ok()) else {
        return Err(HttpResponse::BadRequest().body("missing Mcp-Session-Id"));
    };
    match state.sessions.lock().get(id) {
        Some(conn) => Ok((id.to_owned(), *conn)),
        None => Err(HttpResponse::NotFound().body("unknown session")),
    }
}

async fn post(req: HttpRequest, body: Bytes, state: web::Data<State>) -> HttpResponse {
    if let Err(refused) = local_only(req.headers()) {
        return refused;
    }
    let message = match Message::from_slice(&body) {
        Ok(Ok(m)) => m,
        Ok(Err(e)) => {
            return HttpResponse::BadRequest()
                .json(Message::error(None, ErrorObject::new(-32600, e.to_string())).to_value())
        }
        Err(e) => {
            return HttpResponse::BadRequest()
                .json(Message::error(None, ErrorObject::new(-32700, e.to_string())).to_value())
        }
    };
    let demo = state.demo.clone();
    let version = req.headers().get("mcp-protocol-version").and_then(|v| v.to_str().ok());
    if demo.speaks_modern(&message, version, req.headers().contains_key("mcp-session-id")) {
        return crate::modern_http::post(&req, message, demo).await;
    }
    if message.method() == Some(methods::TOOLS_CALL) {
        if let Some(trace) = req.headers().get("traceparent").and_then(|v| v.to_str().ok()) {
            demo.record_header_traceparent(trace);
        }
    }
    if message.method() == Some(methods::INITIALIZE) {
        let conn = demo.connection();
        let (tx, _rx) = mpsc::channel(1);
        let reply = demo.handle(conn, message, &tx).await.expect("requests are answered");
        let sid = uuid::Uuid::new_v4().to_string();
        state.update(|s| {
            s.insert(sid.clone(), conn);
        });
        return HttpResponse::Ok().insert_header(("mcp-session-id", sid)).json(reply.to_value());
    }
    let (sid, conn) = match session(req.headers(), &state) {
        Ok(s) => s,
        Err(response) => return response,
    };
    if !matches!(message, Message::Request { .. }) {
        let (tx, _rx) = mpsc::channel(1);
        demo.handle(conn, message, &tx).await;
        return HttpResponse::Accepted().finish();
    }
    let accept = req.headers().get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let wants_sse = accept.contains("text/event-stream");
    // A client that lists SSE first is answered with a stream whatever the method, as the
    // gateway answers it.
    let sse_first = accept.split(',').next().is_some_and(|m| m.trim().starts_with("text/event-stream"));
    // Tool calls stream what they send about themselves; so does a completion that asks
    // the client first.
    let asks = |m: &Message| match m {
        Message::Request { method, params: Some(p), .. } => {
            method == methods::COMPLETION_COMPLETE
                && p.pointer("/argument/value").and_then(|v| v.as_str()) == Some("?ask")
        }
        _ => false,
    };
    let reconnection = message.method() == Some(methods::TOOLS_CALL)
        && matches!(&message, Message::Request { params: Some(p), .. } if p["name"] == "test_reconnection");
    if wants_sse && reconnection && demo.inner.conformance {
        return close_early(&state, sid, conn, message);
    }
    if wants_sse && (sse_first || message.method() == Some(methods::TOOLS_CALL) || asks(&message)) {
        let (tx, rx) = mpsc::channel(64);
        actix_rt::spawn(async move {
            if let Some(reply) = demo.handle(conn, message, &tx).await {
                let _ = tx.send(reply).await;
            }
        });
        return sse(rx);
    }
    let (tx, _rx) = mpsc::channel(64);
    let reply = demo.handle(conn, message, &tx).await.expect("requests are answered");
    HttpResponse::Ok().json(reply.to_value())
}

/// The `retry` a stream closed early asks for, in milliseconds.
const RECONNECTION_RETRY_MS: u64 = 200;
/// Streams closed early kept for their resumption, at most.
const MAX_CLOSED_EARLY: usize = 64;

/// `test_reconnection` of the suite's `server-sse-polling` (SEP-1699): the call's stream is
/// primed, asks for a `retry`, and closes before the response; the response is kept for a
/// `GET` with `Last-Event-ID` (basic/transports "Resumability and Redelivery"), whenever it
/// comes.
fn close_early(state: &Arc<State>, sid: String, conn: u64, message: Message) -> HttpResponse {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let stream = format!("r{}", NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    let (answered, answer) = watch::channel(None);
    {
        let mut closed = state.closed_early.lock();
        if closed.len() >= MAX_CLOSED_EARLY {
            let oldest = closed.keys().next().cloned();
            closed.remove(&oldest.unwrap_or_default());
        }
        closed.insert(stream.clone(), (sid, answer));
    }
    let demo = state.demo.clone();
    actix_rt::spawn(async move {
        let (related, _) = mpsc::channel(64);
        if let Some(reply) = demo.handle(conn, message, &related).await {
            answered.send_replace(Some(reply));
        }
    });
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .body(format!("id: {stream}-0\nretry: {RECONNECTION_RETRY_MS}\ndata: \n\n"))
}

/// A `GET` with `Last-Event-ID` naming a stream closed early: its response, then the end.
fn resume(state: &State, sid: &str, last: &str) -> HttpResponse {
    let stream = last.strip_suffix("-0").unwrap_or_default();
    let mut answer = match state.closed_early.lock().get(stream) {
        Some((owner, answer)) if owner == sid => answer.clone(),
        _ => return HttpResponse::BadRequest().body(format!("no stream to resume after {last:?}")),
    };
    let stream = stream.to_owned();
    let body = async_stream_once(async move {
        let reply = answer.wait_for(Option::is_some).await.ok().and_then(|r| r.clone());
        let json = reply.map(|r| r.to_json()).unwrap_or_default();
        Bytes::from(encode_event(Some(&format!("{stream}-1")), &json))
    });
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .streaming(body)
}

/// A body of the one chunk `make` gives.
fn async_stream_once(
    make: impl std::future::Future<Output = Bytes> + 'static,
) -> impl futures_util::Stream<Item = Result<Bytes, std::convert::Infallible>> {
    futures_util::stream::once(async move { Ok(make.await) })
}

/// A modern-only demo has no GET stream and no sessions (2026-07-28: `subscriptions/listen`
/// replaces the GET stream).
fn modern_only(state: &State) -> Option<HttpResponse> {
    (state.demo.revisions() == crate::Revisions::Modern)
        .then(|| HttpResponse::MethodNotAllowed().insert_header((header::ALLOW, "POST")).finish())
}

async fn get(req: HttpRequest, state: web::Data<State>) -> HttpResponse {
    if let Some(refused) = modern_only(&state) {
        return refused;
    }
    let (sid, connection) = match session(req.headers(), &state) {
        Ok(s) => s,
        Err(response) => return response,
    };
    if let Some(last) = req.headers().get("last-event-id").and_then(|v| v.to_str().ok()) {
        return resume(&state, &sid, last);
    }
    let (tx, rx) = mpsc::channel(64);
    state.demo.add_listener(connection, tx);
    sse(rx)
}

async fn delete(req: HttpRequest, state: web::Data<State>) -> HttpResponse {
    if let Some(refused) = modern_only(&state) {
        return refused;
    }
    match session(req.headers(), &state) {
        Ok((sid, connection)) => {
            state.update(|s| {
                s.remove(&sid);
            });
            state.demo.end_connection(connection);
            HttpResponse::Ok().finish()
        }
        Err(response) => response,
    }
}
