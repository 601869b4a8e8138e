//! Bounded channels as actor streams: an actor pulls the next item only when it is ready, so
//! the channel's bound is the backpressure.

use futures_util::Stream;

/// Adapts an upstream session's event receiver to a stream for `ctx.add_stream`, mapping each
/// event.
pub(crate) fn event_stream<U>(
    mut rx: taskgate_upstream::EventReceiver,
    mut map: impl FnMut(Box<taskgate_upstream::UpstreamEvent>) -> U + Unpin,
) -> impl Stream<Item = U> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx).map(|item| item.map(&mut map)))
}
