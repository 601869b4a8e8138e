//! A stream of messages as an SSE response body.

use actix_web::http::header;
use actix_web::HttpResponse;
use bytes::Bytes;
use taskgate_protocol::sse::encode_event;
use taskgate_protocol::Message;
use tokio::sync::mpsc;

/// The most an SSE write carries: a large event goes out as many HTTP chunks, as servers that
/// flush while they serialise send it, so a reader sees it arrive in pieces.
const SSE_PIECE: usize = 8 << 10;

pub(crate) fn sse(mut rx: mpsc::Receiver<Message>) -> HttpResponse {
    let mut pending = Bytes::new();
    let body = futures_util::stream::poll_fn(move |cx| {
        if pending.is_empty() {
            match rx.poll_recv(cx) {
                std::task::Poll::Ready(Some(m)) => pending = Bytes::from(encode_event(None, &m.to_json())),
                std::task::Poll::Ready(None) => return std::task::Poll::Ready(None),
                std::task::Poll::Pending => return std::task::Poll::Pending,
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
