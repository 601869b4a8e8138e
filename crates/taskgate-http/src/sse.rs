//! Outbound SSE bodies: one event per JSON-RPC message, with a comment line as keep-alive so
//! idle proxies do not cut a stream that is waiting on a slow upstream.

use std::convert::Infallible;
use std::task::Poll;
use std::time::Duration;

use actix_web::http::header;
use actix_web::HttpResponse;
use bytes::Bytes;
use taskgate_protocol::sse::encode_event;
use taskgate_protocol::Message;
use tokio::sync::mpsc;

/// How often an idle stream carries a keep-alive comment.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// A `text/event-stream` response that ends when `messages` ends.
pub fn response(mut messages: mpsc::Receiver<Message>) -> HttpResponse {
    let mut keep_alive = tokio::time::interval_at(tokio::time::Instant::now() + KEEP_ALIVE, KEEP_ALIVE);
    let body = futures_util::stream::poll_fn(move |cx| {
        match messages.poll_recv(cx) {
            Poll::Ready(Some(m)) => {
                return Poll::Ready(Some(Ok::<_, Infallible>(Bytes::from(encode_event(None, &m.to_json())))))
            }
            Poll::Ready(None) => return Poll::Ready(None),
            Poll::Pending => {}
        }
        if keep_alive.poll_tick(cx).is_ready() {
            return Poll::Ready(Some(Ok(Bytes::from_static(b": keep-alive\n\n"))));
        }
        Poll::Pending
    });
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(body)
}
