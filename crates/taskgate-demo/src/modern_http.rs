//! Modern (2026-07-28) requests over Streamable HTTP: no session; a request is answered with
//! one JSON object, or with an SSE stream once something about it (progress, a log message, a
//! dual-era demo's question) comes before its answer, or once a second has passed without one
//! (then with keep-alives: an answer that fails after that is an error in the stream, not an
//! HTTP status); `subscriptions/listen` is a stream of its own. A client that closes a
//! request's stream, or leaves before its answer, cancels it (basic/patterns/cancellation at
//! 2026-07-28).

use std::time::Duration;

use actix_web::http::header::HeaderMap;
use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse};
use taskgate_protocol::{ErrorObject, Message, RequestId};
use tokio::sync::mpsc;

use crate::modern::{Checked, Headers};
use crate::sse_body::sse_kept_alive;
use crate::DemoServer;

/// How long a request's answer is waited for before its response becomes a stream (and the
/// keep-alive interval of that stream).
const STREAM_AFTER: Duration = Duration::from_secs(1);

/// The standard headers (names arrive lowercased).
fn headers(map: &HeaderMap) -> Headers {
    let text = |name: &str| map.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    Headers {
        version: text("mcp-protocol-version"),
        method: text("mcp-method"),
        name: map.get("mcp-name").map(|v| v.as_bytes().to_vec()),
        params: map
            .iter()
            .filter_map(|(n, v)| n.as_str().strip_prefix("mcp-param-").map(|p| (p.to_owned(), v.as_bytes().to_vec())))
            .collect(),
    }
}

fn json(status: u16, message: &Message) -> HttpResponse {
    HttpResponse::build(StatusCode::from_u16(status).unwrap_or(StatusCode::OK))
        .content_type("application/json")
        .body(message.to_json())
}

/// Cancels a request whose client left before its answer (dropped with the response).
struct CancelOnDrop {
    demo: DemoServer,
    origin: u64,
    id: RequestId,
    armed: bool,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if self.armed {
            self.demo.cancel_modern(self.origin, &self.id);
        }
    }
}

/// A POST served at 2026-07-28.
pub(crate) async fn post(req: &HttpRequest, message: Message, demo: DemoServer) -> HttpResponse {
    // Each request is its own transport connection: nothing is shared between requests.
    let origin = demo.connection();
    match demo.check_modern(message, Some(&headers(req.headers()))) {
        Checked::Refused(status, error) => json(status, &error),
        Checked::Notification(message) => {
            // A response to a question a dual-era demo asked on a call's stream.
            let (tx, _rx) = mpsc::channel(1);
            demo.handle(origin, message, &tx).await;
            HttpResponse::Accepted().finish()
        }
        Checked::Listen(id, filter) => {
            let (tx, rx) = mpsc::channel(64);
            demo.listen(origin, id, filter, tx);
            // Kept alive, so that a client gone is seen and its stream dropped.
            sse_kept_alive(rx, Some(Duration::from_secs(15)))
        }
        Checked::Request(id, method, params, meta) => {
            let (related, mut about) = mpsc::channel(64);
            let mut run = {
                let (demo, id) = (demo.clone(), id.clone());
                actix_rt::spawn(async move { demo.run_modern(origin, id, &method, params, meta, &related).await })
            };
            let mut guard = CancelOnDrop { demo, origin, id: id.clone(), armed: true };
            let failed =
                |id: RequestId| (500, Message::error(Some(id), ErrorObject::new(-32603, "the request failed")));
            // One JSON object when the answer comes first; else a stream, from the first thing
            // said about the request, or from a second on (kept alive, so that a client that
            // leaves is seen and its request cancelled).
            // What was said about the request comes first: it is queued before the answer.
            let first = tokio::select! {
                biased;
                Some(first) = about.recv() => Some(first),
                answered = &mut run => {
                    guard.armed = false;
                    let (status, reply) = answered.unwrap_or_else(|_| failed(id));
                    return json(status, &reply);
                }
                () = tokio::time::sleep(STREAM_AFTER) => None,
            };
            let (out, streamed) = mpsc::channel(64);
            if let Some(first) = first {
                let _ = out.try_send(first);
            }
            actix_rt::spawn(async move {
                // The whole guard moves here: the stream's end cancels, not the handler's.
                let mut guard = guard;
                loop {
                    tokio::select! {
                        biased;
                        Some(message) = about.recv() => {
                            if out.send(message).await.is_err() {
                                return;
                            }
                        }
                        answered = &mut run => {
                            while let Ok(message) = about.try_recv() {
                                let _ = out.send(message).await;
                            }
                            let (_, reply) = answered.unwrap_or_else(|_| failed(id));
                            guard.armed = false;
                            let _ = out.send(reply).await;
                            return;
                        }
                        () = out.closed() => return,
                    }
                }
            });
            sse_kept_alive(streamed, Some(STREAM_AFTER))
        }
    }
}
