//! Outbound client streams bounded in bytes: the queue between the gateway and one HTTP response
//! (a request's SSE reply or the session's GET stream).
//!
//! Messages are serialised when queued, so the queue knows its exact size. A stream holds at
//! most `server.stream_buffer` messages and `server.stream_buffer_bytes` bytes, and all the
//! streams of one session together at most `server.session_buffer_bytes`. A message that does
//! not fit is dropped and counted (a client that reads slower than an upstream talks loses
//! notifications, never its response: the final message always fits). A client is judged by
//! time, never by how fast the upstream talks: one that has read nothing for
//! `server.stream_stall_secs` while messages for it were being dropped has stopped reading: the
//! stream *overflows*, what it held is freed at once, the stream ends, and the owner is told (the
//! session cancels the request upstream and counts the drop). The clock is read only when a
//! message is dropped. One message always fits an empty stream, so a large result still reaches
//! a client that reads.
//!
//! A stream ends when its final message has been read ([`Outbound::send_final`]), when it is
//! closed or overflowed, or when every sender is gone, whichever is first.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::time::Instant;

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
    /// It is a JSON-RPC error.
    pub error: bool,
    /// Not a message: the upstream closed the call's stream before its response and resumes
    /// it after this many milliseconds, so a resumable client stream may close the same way
    /// (only a receiver that [`OutboundReceiver::take_pauses`] sees it).
    pub pause: Option<u64>,
}

impl Frame {
    /// Serialises a message.
    pub fn new(message: &Message) -> Frame {
        let store_unavailable =
            matches!(message, Message::Error { error, .. } if crate::error::is_store_unavailable(error));
        let error = matches!(message, Message::Error { .. });
        Frame { json: message.to_json(), response: message.is_response(), store_unavailable, error, pause: None }
    }

    /// The upstream paused the call's stream for `retry_ms` (see [`Frame::pause`]).
    pub fn paused(retry_ms: u64) -> Frame {
        Frame { json: String::new(), response: false, store_unavailable: false, error: false, pause: Some(retry_ms) }
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
    /// How long a client may read nothing while messages for it are dropped before it is
    /// judged to have stopped reading.
    pub stall: Duration,
}

/// What a stream tells its owner, outside any lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamEvent {
    /// The client stopped reading: the stream overflowed and ended.
    Overflowed,
    /// This many messages did not fit and were dropped (the stream goes on).
    Dropped(usize),
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
    /// Frames the client has read in all.
    reads: u64,
    /// Since when messages have been dropped with the client reading nothing: the time of the
    /// first such drop, and how many frames it had read then.
    stalled_since: Option<(Instant, u64)>,
    /// Held for its client to come back (its connection left): what does not fit is dropped,
    /// but it never overflows (leaving is not cancelling).
    held: bool,
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
    on_event: Box<dyn Fn(StreamEvent) + Send + Sync>,
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
    /// Whether pause frames are handed out (else they are skipped).
    pauses: bool,
}

/// A new stream under `limits` and the session's budget. `on_event` runs outside any lock:
/// for each message dropped, and once when the stream overflows.
pub fn channel(
    limits: Limits,
    session: Arc<SessionBudget>,
    on_event: Box<dyn Fn(StreamEvent) + Send + Sync>,
) -> (Outbound, OutboundReceiver) {
    let state = State { senders: 1, ..State::default() };
    let queue = Arc::new(Queue { state: Mutex::new(state), limits, session, on_event });
    (Outbound { queue: queue.clone() }, OutboundReceiver { queue, guards: Vec::new(), pauses: false })
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
                let now = Instant::now();
                let reads = state.reads;
                let since = match state.stalled_since {
                    Some((since, read_then)) if read_then == reads => since,
                    _ => {
                        state.stalled_since = Some((now, reads));
                        now
                    }
                };
                if now.duration_since(since) >= queue.limits.stall && !state.held {
                    // Nothing read for the whole stall time while messages were dropped: the
                    // client has stopped reading.
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
        match outcome {
            Err(Refused::Overflow) => (queue.on_event)(StreamEvent::Overflowed),
            Err(Refused::Full) => (queue.on_event)(StreamEvent::Dropped(1)),
            _ => {}
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

    /// Hands out pause frames too ([`Frame::pause`]): for a stream that can close and be
    /// resumed.
    pub fn take_pauses(&mut self) {
        self.pauses = true;
    }

    /// Marks the stream held for its client to come back (`true`) or read again (`false`): a
    /// held stream drops what does not fit, and never overflows.
    pub fn set_held(&self, held: bool) {
        let mut state = self.queue.state.lock();
        state.held = held;
        state.stalled_since = None;
    }

    /// The next message, or `None` when the stream has ended.
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Frame>> {
        let mut state = self.queue.state.lock();
        while let Some(frame) = state.frames.pop_front() {
            state.bytes -= frame.json.len();
            state.reads += 1;
            self.queue.session.used.fetch_sub(frame.json.len(), Ordering::Relaxed);
            // A pause with more behind it is stale: what follows is here already.
            if frame.pause.is_some() && (!self.pauses || !state.frames.is_empty()) {
                continue;
            }
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

    const STALL: Duration = Duration::from_secs(30);

    fn limits(messages: usize, bytes: usize) -> Limits {
        Limits { messages, bytes, stall: STALL }
    }

    /// A stream; the flag is set when it overflows, the count is what it reported dropped.
    fn stream(
        limits: Limits,
        session: &Arc<SessionBudget>,
    ) -> (Outbound, OutboundReceiver, Arc<AtomicBool>, Arc<AtomicUsize>) {
        let (overflowed, dropped) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
        let (flag, count) = (overflowed.clone(), dropped.clone());
        let on_event = move |event| match event {
            StreamEvent::Overflowed => flag.store(true, Ordering::SeqCst),
            StreamEvent::Dropped(n) => drop(count.fetch_add(n, Ordering::SeqCst)),
        };
        let (tx, rx) = channel(limits, session.clone(), Box::new(on_event));
        (tx, rx, overflowed, dropped)
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_that_is_not_read_for_the_stall_time_overflows_and_frees_everything() {
        let session = SessionBudget::new(1 << 20);
        let (tx, mut rx, overflowed, _) = stream(limits(1000, 10_000), &session);
        let mut sent = 0;
        while tx.send(&note(1000)).is_ok() {
            sent += 1;
        }
        assert!((8..=10).contains(&sent), "{sent}");
        // However much more is dropped, a client is judged by time only.
        for _ in 0..10_000 {
            assert_eq!(tx.send(&note(1000)), Err(Refused::Full));
        }
        tokio::time::advance(STALL - Duration::from_millis(1)).await;
        assert_eq!(tx.send(&note(1000)), Err(Refused::Full));
        assert!(!overflowed.load(Ordering::SeqCst) && session.used() > 0);
        // The whole stall time with nothing read: it overflows, and everything goes back.
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(tx.send(&note(1000)), Err(Refused::Overflow));
        assert!(overflowed.load(Ordering::SeqCst));
        assert_eq!(session.used(), 0, "the bytes went back at once");
        assert!(tx.is_closed() && tx.overflowed());
        assert!(rx.recv().await.is_none(), "the stream ends");
        assert_eq!(tx.send(&note(1)), Err(Refused::Closed));
    }

    #[tokio::test(start_paused = true)]
    async fn a_held_stream_drops_what_does_not_fit_but_never_overflows_and_its_response_fits() {
        let session = SessionBudget::new(1 << 20);
        let (tx, mut rx, overflowed, _) = stream(limits(2, 10_000), &session);
        rx.set_held(true);
        while tx.send(&note(10)).is_ok() {}
        tokio::time::advance(STALL * 3).await;
        assert_eq!(tx.send(&note(10)), Err(Refused::Full), "held: dropped, not overflowed");
        assert!(!overflowed.load(Ordering::SeqCst));
        let response = Message::response(RequestId::Number(1), serde_json::json!({}));
        assert_eq!(tx.send_final(&response), Ok(()));
        // Read again: its client came back.
        rx.set_held(false);
        let mut frames = 0;
        while let Some(frame) = rx.recv().await {
            frames += 1;
            if frame.response {
                break;
            }
        }
        assert_eq!(frames, 3, "the two that fit, then the response");
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_reads_is_never_judged_stalled_however_fast_the_upstream_talks() {
        let session = SessionBudget::new(1 << 20);
        let (tx, mut rx, overflowed, dropped) = stream(limits(4, 1 << 20), &session);
        let mut lost = 0;
        // 5,000 short messages far faster than the client reads (one read every 100), over
        // ten times the stall time.
        for i in 0..5_000 {
            if tx.send(&note(10)) == Err(Refused::Full) {
                lost += 1;
            }
            if i % 100 == 99 {
                tokio::time::advance(STALL / 5).await;
                rx.recv().await.unwrap();
            }
        }
        assert!(!overflowed.load(Ordering::SeqCst) && lost > 4_000, "{lost}");
        tx.send_final(&Message::response(RequestId::Number(1), serde_json::json!({}))).unwrap();
        let mut last = None;
        while let Some(frame) = rx.recv().await {
            last = Some(frame);
        }
        assert!(last.unwrap().response, "the response arrives");
        assert_eq!(dropped.load(Ordering::SeqCst), lost, "every dropped message is counted as it is dropped");
    }

    #[tokio::test(start_paused = true)]
    async fn the_session_budget_bounds_all_its_streams_together() {
        let session = SessionBudget::new(5_000);
        let (a, _ra, _, _) = stream(limits(1000, 1 << 20), &session);
        let (b, _rb, b_overflowed, _) = stream(limits(1000, 1 << 20), &session);
        for _ in 0..3 {
            a.send(&note(1000)).unwrap();
        }
        b.send(&note(1000)).unwrap();
        assert_eq!(b.send(&note(1000)), Err(Refused::Full));
        assert!(!b_overflowed.load(Ordering::SeqCst));
        tokio::time::advance(STALL).await;
        assert_eq!(b.send(&note(1000)), Err(Refused::Overflow));
        assert!(b_overflowed.load(Ordering::SeqCst));
        assert!(!a.is_closed());
    }

    #[tokio::test]
    async fn one_message_larger_than_the_budget_fits_an_empty_stream_and_read_bytes_come_back() {
        let session = SessionBudget::new(1000);
        let (tx, mut rx, dropped, _) = stream(limits(4, 1000), &session);
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
        let (tx, mut rx, dropped, _) = stream(limits(4, 1 << 20), &session);
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
        let (tx, mut rx, _, _) = stream(limits(8, 1 << 20), &session);
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
        let (tx, mut rx, _, _) = stream(limits(8, 1 << 20), &session);
        drop(tx);
        assert!(rx.recv().await.is_none());
        let (tx, rx, _, _) = stream(limits(8, 1 << 20), &session);
        tx.send(&note(100)).unwrap();
        assert!(session.used() > 100);
        drop(rx);
        assert_eq!(session.used(), 0);
        assert!(tx.is_closed());
    }

    #[tokio::test]
    async fn a_new_stream_takes_over_what_the_old_one_held() {
        let session = SessionBudget::new(1 << 20);
        let (old, mut old_rx, _, _) = stream(limits(8, 1 << 20), &session);
        old.send(&note(1)).unwrap();
        old.send(&note(2)).unwrap();
        let (new, mut new_rx, _, _) = stream(limits(8, 1 << 20), &session);
        new.take_over(&old);
        assert!(old_rx.recv().await.is_none());
        assert!(new_rx.recv().await.unwrap().json.contains("\"x\""));
        assert!(new_rx.recv().await.unwrap().json.contains("\"xx\""));
        assert!(old.is_closed() && !new.is_closed());
    }
}
