//! Outbound client streams bounded in bytes: the queue between the gateway and one HTTP response
//! (a request's SSE reply or the session's GET stream).
//!
//! Messages are serialised when queued, so the queue knows its exact size. A stream holds at
//! most `server.stream_buffer` messages and `server.stream_buffer_bytes` bytes, and all the
//! streams of one session together at most `server.session_buffer_bytes`. A message that does
//! not fit is dropped (a client that reads slower than an upstream talks loses notifications,
//! never its response: the final message always fits). A client that reads *nothing* while a
//! whole budget's worth more is dropped has stopped reading: the stream *overflows*, what it held
//! is freed at once, the stream ends, and the owner is told (the session cancels the request
//! upstream and counts the drop). One message always fits an empty stream, so a large result
//! still reaches a client that reads.
//!
//! A stream ends when its final message has been read ([`Outbound::send_final`]), when it is
//! closed or overflowed, or when every sender is gone, whichever is first.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;
use taskgate_protocol::Message;

/// One message as it goes on the wire.
#[derive(Debug, Clone)]
pub struct Frame {
    /// The JSON-RPC message, serialised.
    pub json: String,
    /// It is a response (the last message of a request's stream).
    pub response: bool,
    /// It is an error saying the task store is unavailable (HTTP 503 when sent alone).
    pub store_unavailable: bool,
}

impl Frame {
    /// Serialises a message.
    pub fn new(message: &Message) -> Frame {
        let store_unavailable =
            matches!(message, Message::Error { error, .. } if crate::error::is_store_unavailable(error));
        Frame { json: message.to_json(), response: message.is_response(), store_unavailable }
    }
}

/// The byte budget all the streams of one session share.
#[derive(Debug)]
pub struct SessionBudget {
    used: AtomicUsize,
    limit: usize,
}

impl SessionBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: usize) -> Arc<SessionBudget> {
        Arc::new(SessionBudget { used: AtomicUsize::new(0), limit })
    }

    /// Bytes queued on the session's streams now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }
}

/// The bounds of one stream.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Messages queued at most.
    pub messages: usize,
    /// Bytes queued at most.
    pub bytes: usize,
}

/// Why a message was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The stream has ended (read to its end, closed, or its client went away).
    Closed,
    /// The message did not fit and was dropped; the stream goes on.
    Full,
    /// The message did not fit: the stream overflowed and ended.
    Overflow,
}

#[derive(Default)]
struct State {
    frames: VecDeque<Frame>,
    bytes: usize,
    /// No more messages will be queued (the final one was, or the stream was closed).
    finished: bool,
    overflowed: bool,
    receiver_gone: bool,
    /// Bytes and messages dropped since the client last read anything.
    dropped_bytes: usize,
    dropped_messages: usize,
    senders: usize,
    waker: Option<Waker>,
}

impl State {
    fn ended(&self) -> bool {
        self.finished || self.overflowed || self.receiver_gone || self.senders == 0
    }
}

struct Queue {
    state: Mutex<State>,
    limits: Limits,
    session: Arc<SessionBudget>,
    on_overflow: Box<dyn Fn() + Send + Sync>,
}

impl Queue {
    /// Drops every queued frame and gives their bytes back to the session.
    fn drain(&self, state: &mut State) {
        self.session.used.fetch_sub(state.bytes, Ordering::Relaxed);
        state.bytes = 0;
        state.frames.clear();
    }
}

/// The sending side; clones share the stream.
pub struct Outbound {
    queue: Arc<Queue>,
}

/// The receiving side, held by the HTTP response.
pub struct OutboundReceiver {
    queue: Arc<Queue>,
    /// Released with the receiver (the stream's place in the gateway's pool of streams; what
    /// a GET stream keeps open upstream).
    guards: Vec<Box<dyn Send + Sync>>,
}

/// A new stream under `limits` and the session's budget. `on_overflow` runs once, outside any
/// lock, when the stream overflows.
pub fn channel(
    limits: Limits,
    session: Arc<SessionBudget>,
    on_overflow: Box<dyn Fn() + Send + Sync>,
) -> (Outbound, OutboundReceiver) {
    let state = State { senders: 1, ..State::default() };
    let queue = Arc::new(Queue { state: Mutex::new(state), limits, session, on_overflow });
    (Outbound { queue: queue.clone() }, OutboundReceiver { queue, guards: Vec::new() })
}

impl Outbound {
    /// Queues a message.
    pub fn send(&self, message: &Message) -> Result<(), Refused> {
        self.push(Frame::new(message), false)
    }

    /// Queues the last message; the stream ends once it is read.
    pub fn send_final(&self, message: &Message) -> Result<(), Refused> {
        self.push(Frame::new(message), true)
    }

    /// Queues the last message, serialised earlier; the stream ends once it is read.
    pub fn send_final_frame(&self, frame: Frame) -> Result<(), Refused> {
        self.push(frame, true)
    }

    /// Queues a message serialised earlier.
    pub fn send_frame(&self, frame: Frame) -> Result<(), Refused> {
        self.push(frame, false)
    }

    fn push(&self, frame: Frame, last: bool) -> Result<(), Refused> {
        let queue = &self.queue;
        let size = frame.json.len();
        let (waker, outcome) = {
            let mut state = queue.state.lock();
            if state.ended() {
                return Err(Refused::Closed);
            }
            let session_used = queue.session.used.load(Ordering::Relaxed);
            let fits = last
                || state.frames.is_empty()
                || (state.frames.len() < queue.limits.messages
                    && state.bytes + size <= queue.limits.bytes
                    && session_used + size <= queue.session.limit);
            if fits {
                queue.session.used.fetch_add(size, Ordering::Relaxed);
                state.bytes += size;
                state.frames.push_back(frame);
                state.finished |= last;
                (state.waker.take(), Ok(()))
            } else {
                state.dropped_bytes += size;
                state.dropped_messages += 1;
                if state.dropped_bytes > queue.limits.bytes || state.dropped_messages > queue.limits.messages {
                    // A whole budget more, and the client read nothing: it has stopped reading.
                    queue.drain(&mut state);
                    state.overflowed = true;
                    (state.waker.take(), Err(Refused::Overflow))
                } else {
                    (None, Err(Refused::Full))
                }
            }
        };
        if let Some(w) = waker {
            w.wake();
        }
        if outcome == Err(Refused::Overflow) {
            (queue.on_overflow)();
        }
        outcome
    }

    /// Ends the stream after what is queued has been read.
    pub fn close(&self) {
        let waker = {
            let mut state = self.queue.state.lock();
            state.finished = true;
            state.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// Whether nothing more can be queued.
    pub fn is_closed(&self) -> bool {
        self.queue.state.lock().ended()
    }

    /// Whether the stream ended because its client stopped reading.
    pub fn overflowed(&self) -> bool {
        self.queue.state.lock().overflowed
    }

    /// Whether both are the same stream.
    pub fn same(&self, other: &Outbound) -> bool {
        Arc::ptr_eq(&self.queue, &other.queue)
    }

    /// Moves what `old` still holds to the front of this stream and ends `old`: a client that
    /// reopens its GET stream gets what the previous one had not delivered.
    pub fn take_over(&self, old: &Outbound) {
        if self.same(old) {
            return;
        }
        let (frames, waker) = {
            let mut state = old.queue.state.lock();
            let frames = std::mem::take(&mut state.frames);
            old.queue.session.used.fetch_sub(state.bytes, Ordering::Relaxed);
            state.bytes = 0;
            state.finished = true;
            (frames, state.waker.take())
        };
        if let Some(w) = waker {
            w.wake();
        }
        for frame in frames {
            let _ = self.push(frame, false);
        }
    }
}

impl Clone for Outbound {
    fn clone(&self) -> Outbound {
        self.queue.state.lock().senders += 1;
        Outbound { queue: self.queue.clone() }
    }
}

impl Drop for Outbound {
    fn drop(&mut self) {
        let waker = {
            let mut state = self.queue.state.lock();
            state.senders -= 1;
            if state.senders == 0 {
                state.waker.take()
            } else {
                None
            }
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl OutboundReceiver {
    /// Keeps `guard` until the receiver is dropped.
    pub fn hold(&mut self, guard: Box<dyn Send + Sync>) {
        self.guards.push(guard);
    }

    /// The next message, or `None` when the stream has ended.
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Frame>> {
        let mut state = self.queue.state.lock();
        if let Some(frame) = state.frames.pop_front() {
            state.bytes -= frame.json.len();
            state.dropped_bytes = 0;
            state.dropped_messages = 0;
            self.queue.session.used.fetch_sub(frame.json.len(), Ordering::Relaxed);
            return Poll::Ready(Some(frame));
        }
        if state.ended() {
            return Poll::Ready(None);
        }
        state.waker = Some(cx.waker().clone());
        Poll::Pending
    }

    /// Waits for the next message.
    pub async fn recv(&mut self) -> Option<Frame> {
        std::future::poll_fn(|cx| self.poll_recv(cx)).await
    }
}

impl Drop for OutboundReceiver {
    fn drop(&mut self) {
        let mut state = self.queue.state.lock();
        state.receiver_gone = true;
        self.queue.drain(&mut state);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use taskgate_protocol::RequestId;

    fn note(bytes: usize) -> Message {
        Message::notification("notifications/message", Some(serde_json::json!({ "data": "x".repeat(bytes) })))
    }

    fn stream(limits: Limits, session: &Arc<SessionBudget>) -> (Outbound, OutboundReceiver, Arc<AtomicBool>) {
        let dropped = Arc::new(AtomicBool::new(false));
        let flag = dropped.clone();
        let (tx, rx) = channel(limits, session.clone(), Box::new(move || flag.store(true, Ordering::SeqCst)));
        (tx, rx, dropped)
    }

    #[tokio::test]
    async fn a_stream_that_is_not_read_overflows_at_its_byte_budget_and_frees_everything() {
        let session = SessionBudget::new(1 << 20);
        let (tx, mut rx, dropped) = stream(Limits { messages: 1000, bytes: 10_000 }, &session);
        let mut sent = 0;
        while tx.send(&note(1000)).is_ok() {
            sent += 1;
        }
        assert!((8..=10).contains(&sent), "{sent}");
        // Then a budget's worth is dropped while nothing is read, and the stream overflows.
        let mut full = 1;
        while tx.send(&note(1000)) == Err(Refused::Full) {
            full += 1;
        }
        assert!((9..=11).contains(&full), "{full}");
        assert!(dropped.load(Ordering::SeqCst));
        assert_eq!(session.used(), 0, "the bytes went back at once");
        assert!(tx.is_closed() && tx.overflowed());
        assert!(rx.recv().await.is_none(), "the stream ends");
        assert_eq!(tx.send(&note(1)), Err(Refused::Closed));
    }

    #[tokio::test]
    async fn the_session_budget_bounds_all_its_streams_together() {
        let session = SessionBudget::new(5_000);
        let (a, _ra, _) = stream(Limits { messages: 1000, bytes: 1 << 20 }, &session);
        let (b, _rb, b_dropped) = stream(Limits { messages: 1000, bytes: 1 << 20 }, &session);
        for _ in 0..3 {
            a.send(&note(1000)).unwrap();
        }
        b.send(&note(1000)).unwrap();
        assert_eq!(b.send(&note(1000)), Err(Refused::Full));
        assert!(!b_dropped.load(Ordering::SeqCst));
        while b.send(&note(1000)) == Err(Refused::Full) {}
        assert!(b_dropped.load(Ordering::SeqCst));
        assert!(!a.is_closed());
    }

    #[tokio::test]
    async fn one_message_larger_than_the_budget_fits_an_empty_stream_and_read_bytes_come_back() {
        let session = SessionBudget::new(1000);
        let (tx, mut rx, dropped) = stream(Limits { messages: 4, bytes: 1000 }, &session);
        tx.send(&note(50_000)).unwrap();
        assert!(rx.recv().await.unwrap().json.len() > 50_000);
        assert_eq!(session.used(), 0);
        for _ in 0..4 {
            tx.send(&note(10)).unwrap();
            rx.recv().await.unwrap();
        }
        assert!(!dropped.load(Ordering::SeqCst));
    }

    #[tokio::test]
    async fn a_client_that_reads_slower_than_the_upstream_talks_loses_notifications_not_its_response() {
        let session = SessionBudget::new(1 << 20);
        let (tx, mut rx, dropped) = stream(Limits { messages: 4, bytes: 1 << 20 }, &session);
        let mut lost = 0;
        for round in 0..100 {
            for _ in 0..5 {
                if tx.send(&note(round)) == Err(Refused::Full) {
                    lost += 1;
                }
            }
            rx.recv().await.unwrap(); // it reads one message a round
        }
        assert!(lost >= 100 && !dropped.load(Ordering::SeqCst), "{lost}");
        tx.send_final(&Message::response(RequestId::Number(1), serde_json::json!({}))).unwrap();
        let mut last = None;
        while let Some(frame) = rx.recv().await {
            last = Some(frame);
        }
        assert!(last.unwrap().response);
    }

    #[tokio::test]
    async fn the_stream_ends_after_its_final_message_even_with_senders_left() {
        let session = SessionBudget::new(1 << 20);
        let (tx, mut rx, _) = stream(Limits { messages: 8, bytes: 1 << 20 }, &session);
        let kept = tx.clone();
        tx.send(&note(1)).unwrap();
        tx.send_final(&Message::response(RequestId::Number(1), serde_json::json!({}))).unwrap();
        assert!(!rx.recv().await.unwrap().response);
        assert!(rx.recv().await.unwrap().response);
        assert!(rx.recv().await.is_none());
        assert!(kept.is_closed());
    }

    #[tokio::test]
    async fn a_stream_ends_when_its_senders_are_gone_and_frees_its_bytes_when_its_reader_is() {
        let session = SessionBudget::new(1 << 20);
        let (tx, mut rx, _) = stream(Limits { messages: 8, bytes: 1 << 20 }, &session);
        drop(tx);
        assert!(rx.recv().await.is_none());
        let (tx, rx, _) = stream(Limits { messages: 8, bytes: 1 << 20 }, &session);
        tx.send(&note(100)).unwrap();
        assert!(session.used() > 100);
        drop(rx);
        assert_eq!(session.used(), 0);
        assert!(tx.is_closed());
    }

    #[tokio::test]
    async fn a_new_stream_takes_over_what_the_old_one_held() {
        let session = SessionBudget::new(1 << 20);
        let (old, mut old_rx, _) = stream(Limits { messages: 8, bytes: 1 << 20 }, &session);
        old.send(&note(1)).unwrap();
        old.send(&note(2)).unwrap();
        let (new, mut new_rx, _) = stream(Limits { messages: 8, bytes: 1 << 20 }, &session);
        new.take_over(&old);
        assert!(old_rx.recv().await.is_none());
        assert!(new_rx.recv().await.unwrap().json.contains("\"x\""));
        assert!(new_rx.recv().await.unwrap().json.contains("\"xx\""));
        assert!(old.is_closed() && !new.is_closed());
    }
}
