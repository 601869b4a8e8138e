//! A stream of messages as an SSE response body.

use std::time::Duration;

use actix_web::http::header;
use actix_web::HttpResponse;
use bytes::Bytes;
use taskgate_protocol::sse::encode_event;
use taskgate_protocol::Message;
use tokio::sync::mpsc;

/// The most an SSE write carries: a large event goes out as many HTTP chunks, as servers that
/// flush while they serialise send it, so a reader sees it arrive in pieces.
const SSE_PIECE: usize = 8 << 10;

/// The messages of `rx` as an SSE response, until it ends.
pub(crate) fn sse(rx: mpsc::Receiver<Message>) -> HttpResponse {
    sse_kept_alive(rx, None)
}

/// [`sse`], with a comment every so long when no message is waiting: writing it is how a
/// connection its client closed is seen, and the stream's end then ends what it answers.
pub(crate) fn sse_kept_alive(mut rx: mpsc::Receiver<Message>, every: Option<Duration>) -> HttpResponse {
    use std::task::Poll;
    let mut pending = Bytes::new();
    let mut ticks = every.map(|e| tokio::time::interval_at(tokio::time::Instant::now() + e, e));
    let body = futures_util::stream::poll_fn(move |cx| {
        if pending.is_empty() {
            match rx.poll_recv(cx) {
                Poll::Ready(Some(m)) => pending = Bytes::from(encode_event(None, &m.to_json())),
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => match ticks.as_mut().map(|t| t.poll_tick(cx)) {
                    Some(Poll::Ready(_)) => pending = Bytes::from_static(b": keep-alive\n\n"),
                    _ => return Poll::Pending,
                },
            }
        }
        let piece = pending.split_to(pending.len().min(SSE_PIECE));
        std::task::Poll::Ready(Some(Ok::<_, std::convert::Infallible>(piece)))
    });
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .streaming(body)
}
