//! Outbound SSE bodies: one event per JSON-RPC message, with a comment line as keep-alive so
//! idle proxies do not cut a stream that is waiting on a slow upstream.

use std::convert::Infallible;
use std::task::Poll;
use std::time::Duration;

use actix_web::http::header;
use actix_web::HttpResponse;
use bytes::Bytes;
use taskgate_core::outbound::{Frame, OutboundReceiver};

/// How often an idle stream carries a keep-alive comment.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// Frames one serialised message as an SSE event (`event: message`; the JSON has no newline).
fn event(json: String) -> Bytes {
    let mut out = String::with_capacity(json.len() + 24);
    out.push_str("event: message\ndata: ");
    out.push_str(&json);
    out.push_str("\n\n");
    Bytes::from(out)
}

/// A `text/event-stream` response that ends when `messages` ends.
pub fn response(messages: OutboundReceiver) -> HttpResponse {
    response_after(None, messages)
}

/// A `text/event-stream` response that starts with `first` (a frame already taken from
/// `messages`), then carries `messages` until it ends.
pub fn response_after(first: Option<Frame>, mut messages: OutboundReceiver) -> HttpResponse {
    let mut first = first;
    let failed = crate::metered::StreamFailed::default();
    let failing = failed.clone();
    let mut keep_alive = tokio::time::interval_at(tokio::time::Instant::now() + KEEP_ALIVE, KEEP_ALIVE);
    let body = futures_util::stream::poll_fn(move |cx| {
        if let Some(frame) = first.take() {
            if frame.error && frame.response {
                failing.set();
            }
            return Poll::Ready(Some(Ok::<_, Infallible>(event(frame.json))));
        }
        match messages.poll_recv(cx) {
            Poll::Ready(Some(m)) => {
                if m.error && m.response {
                    failing.set();
                }
                return Poll::Ready(Some(Ok::<_, Infallible>(event(m.json))));
            }
            Poll::Ready(None) => return Poll::Ready(None),
            Poll::Pending => {}
        }
        if keep_alive.poll_tick(cx).is_ready() {
            return Poll::Ready(Some(Ok(Bytes::from_static(b": keep-alive\n\n"))));
        }
        Poll::Pending
    });
    streaming(body, failed)
}

/// A `text/event-stream` response of `body` (no caching, no proxy buffering), marked failed when
/// `failed` is set.
pub(crate) fn streaming(
    body: impl futures_util::Stream<Item = Result<Bytes, Infallible>> + 'static,
    failed: crate::metered::StreamFailed,
) -> HttpResponse {
    let mut response = HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(body);
    response.extensions_mut().insert(failed);
    response
}
