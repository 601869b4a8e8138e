//! Bounded channels as actor streams: an actor pulls the next item only when it is ready, so
//! the channel's bound is the backpressure.

use futures_util::Stream;
use tokio::sync::mpsc;

/// Adapts a bounded receiver to a stream for `ctx.add_stream`, mapping each item.
pub(crate) fn receiver_stream<T, U>(
    mut rx: mpsc::Receiver<T>,
    mut map: impl FnMut(T) -> U + Unpin,
) -> impl Stream<Item = U> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx).map(|item| item.map(&mut map)))
}
