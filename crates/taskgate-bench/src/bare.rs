//! The gateway's HTTP stack with nothing of the gateway in it: a bare proxy built from the
//! same libraries (actix-web in front, one worker; hyper's pooled client behind, where the
//! gateway's upstream channels keep hyper's connections per thread), which forwards each
//! POST's bytes and the headers MCP needs and streams the answer back as it comes, reading
//! none of it. Sections 1 and 9 measure
//! it beside the gateway and nginx: what it costs is the floor of this stack, before any MCP
//! work.
//!
//! Beside it, the same proxy with hyper's server in front instead of actix-web (one thread,
//! tokio's current-thread runtime, as actix's worker): the floor of the leanest Rust HTTP
//! stack, which says how much of the stack's cost is actix-web's.

use crate::harness::{free_port, spawn_until, Process};
use actix_web::http::StatusCode;
use actix_web::web::Bytes;
use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use anyhow::Result;
use http_body_util::Full;
use hyper_util::client::legacy::connect::HttpConnector;
use tokio::process::Command;

/// The request headers forwarded (MCP's and the content's), and the response headers returned.
const REQUEST_HEADERS: [&str; 4] = ["content-type", "accept", "mcp-session-id", "mcp-protocol-version"];
const RESPONSE_HEADERS: [&str; 2] = ["content-type", "mcp-session-id"];

/// Serves the bare proxy on `port` in front of `upstream` (an MCP endpoint URL) until SIGTERM.
pub async fn serve(port: u16, upstream: String) -> Result<()> {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client: Client =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build(connector);
    // Parsed once, as the gateway does.
    let upstream: hyper::Uri = upstream.parse()?;
    let server = HttpServer::new(move || {
        let (client, upstream) = (client.clone(), upstream.clone());
        App::new().route(
            "/mcp",
            web::post()
                .to(move |request: HttpRequest, body: Bytes| forward(client.clone(), upstream.clone(), request, body)),
        )
    })
    .workers(1)
    // As the gateway does: no Nagle stall on small writes.
    .on_connect(|connection, _| {
        if let Some(tcp) = connection.downcast_ref::<actix_web::rt::net::TcpStream>() {
            let _ = tcp.set_nodelay(true);
        }
    })
    .shutdown_timeout(1)
    .bind(("127.0.0.1", port))?
    .run();
    println!("bare proxy listening on {port}");
    server.await?;
    Ok(())
}

type Client = hyper_util::client::legacy::Client<HttpConnector, Full<Bytes>>;

async fn forward(client: Client, upstream: hyper::Uri, request: HttpRequest, body: Bytes) -> HttpResponse {
    let mut out = hyper::Request::post(upstream);
    for name in REQUEST_HEADERS {
        if let Some(value) = request.headers().get(name) {
            out = out.header(name, value.as_bytes());
        }
    }
    let Ok(out) = out.body(Full::new(body)) else {
        return HttpResponse::BadRequest().body("a header that is not one");
    };
    match client.request(out).await {
        Ok(reply) => {
            let status = StatusCode::from_u16(reply.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
            let mut response = HttpResponse::build(status);
            for name in RESPONSE_HEADERS {
                if let Some(value) = reply.headers().get(name) {
                    response.insert_header((name, value.as_bytes()));
                }
            }
            let body = http_body_util::BodyDataStream::new(reply.into_body());
            response.streaming(body)
        }
        Err(e) => HttpResponse::BadGateway().body(e.to_string()),
    }
}

/// The front door of a bare proxy.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Front {
    /// actix-web, as the gateway's.
    Actix,
    /// hyper's server.
    Hyper,
}

/// Serves the bare proxy with hyper's server in front, on `port`, until killed.
pub fn serve_hyper(port: u16, upstream: String) -> Result<()> {
    use hyper::server::conn::http1;
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;

    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async move {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client: Client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build(connector);
        let upstream: hyper::Uri = upstream.parse()?;
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
        println!("bare proxy listening on {port}");
        loop {
            let (stream, _) = listener.accept().await?;
            let _ = stream.set_nodelay(true);
            let (client, upstream) = (client.clone(), upstream.clone());
            let service = service_fn(move |request| forward_hyper(client.clone(), upstream.clone(), request));
            tokio::spawn(async move {
                let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
            });
        }
    })
}

type Reply = hyper::Response<http_body_util::Either<hyper::body::Incoming, Full<Bytes>>>;

async fn forward_hyper(
    client: Client,
    upstream: hyper::Uri,
    request: hyper::Request<hyper::body::Incoming>,
) -> Result<Reply, std::convert::Infallible> {
    use http_body_util::{BodyExt, Either};
    let answer = |status: u16, text: String| {
        let mut reply = hyper::Response::new(Either::Right(Full::new(Bytes::from(text))));
        *reply.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::BAD_GATEWAY);
        reply
    };
    if request.method() != hyper::Method::POST || request.uri().path() != "/mcp" {
        return Ok(answer(404, String::new()));
    }
    let mut out = hyper::Request::post(upstream);
    for name in REQUEST_HEADERS {
        if let Some(value) = request.headers().get(name) {
            out = out.header(name, value);
        }
    }
    let body = match request.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(e) => return Ok(answer(400, e.to_string())),
    };
    let Ok(out) = out.body(Full::new(body)) else {
        return Ok(answer(400, "a header that is not one".into()));
    };
    match client.request(out).await {
        Ok(reply) => {
            let mut response = hyper::Response::builder().status(reply.status());
            for name in RESPONSE_HEADERS {
                if let Some(value) = reply.headers().get(name) {
                    response = response.header(name, value);
                }
            }
            Ok(response.body(Either::Left(reply.into_body())).unwrap_or_else(|e| answer(502, e.to_string())))
        }
        Err(e) => Ok(answer(502, e.to_string())),
    }
}

/// Starts a bare proxy (this program, `--bare-proxy` or `--bare-hyper-proxy`) with `front` in
/// front of `upstream`, under `wrap` (a profiler's command line) if any; returns it and its MCP
/// endpoint URL.
pub async fn start(upstream: &str, wrap: &[String], front: Front) -> Result<(Process, String)> {
    let port = free_port()?;
    let exe = std::env::current_exe()?;
    let mut command = match wrap.split_first() {
        Some((program, args)) => {
            let mut command = Command::new(program);
            command.args(args).arg(&exe);
            command
        }
        None => Command::new(&exe),
    };
    let flag = match front {
        Front::Actix => "--bare-proxy",
        Front::Hyper => "--bare-hyper-proxy",
    };
    command.arg(flag).arg(port.to_string()).arg(upstream);
    let (process, _) = spawn_until(command, "bare proxy listening").await?;
    Ok((process, format!("http://127.0.0.1:{port}/mcp")))
}
