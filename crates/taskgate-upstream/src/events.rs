//! The channel that carries an upstream session's events to its owner (a client session, the
//! router, recovery), and a call's related messages to its caller: bounded, a sender waiting
//! while it is full, the order kept.
//!
//! Every client session holds one per upstream it has called, and most never carry anything;
//! every proxied call makes one for what the upstream sends about it before its response, and
//! most carry nothing either. A tokio channel takes about 800 bytes before its first message
//! (its shared state, padded to cache lines) and allocates a first block of 32 slots (4 KB for
//! a message) when made; this one takes about 130 (its state; the queue grows with what is in
//! it and gives its room back once drained).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;
use tokio::sync::Semaphore;

use serde_json::Value;
use taskgate_protocol::RequestId;

/// A message an upstream sent on its own initiative.
#[derive(Debug, Clone, PartialEq)]
pub enum UpstreamEvent {
    /// A notification (progress, list changes, log messages…).
    Notification {
        /// Method name.
        method: String,
        /// Params as sent.
        params: Option<Value>,
        /// The upstream-local id of the request on whose response stream it arrived.
        related: Option<RequestId>,
    },
    /// A request to the client (elicitation, sampling, roots…); answer with
    /// [`UpstreamSession::respond`](crate::UpstreamSession::respond).
    Request {
        /// The upstream's id for it.
        id: RequestId,
        /// Method name.
        method: String,
        /// Params as sent.
        params: Option<Value>,
        /// The upstream-local id of the request on whose response stream it arrived.
        related: Option<RequestId>,
    },
}

type Event = Box<UpstreamEvent>;

/// The sending side of an upstream session's events.
pub type EventSender = Sender<Event>;
/// The receiving side of an upstream session's events.
pub type EventReceiver = Receiver<Event>;

/// A bounded channel of upstream events holding at most `capacity` of them.
pub fn event_channel(capacity: usize) -> (EventSender, EventReceiver) {
    channel(capacity)
}

struct Chan<T> {
    /// Free places: a sender takes one for each item, the receiver gives it back.
    room: Semaphore,
    state: Mutex<State<T>>,
    senders: AtomicUsize,
}

struct State<T> {
    queue: VecDeque<T>,
    /// The receiver, waiting for an item.
    waker: Option<Waker>,
    receiver_gone: bool,
}

/// A bounded channel holding at most `capacity` items.
pub fn channel<T>(capacity: usize) -> (Sender<T>, Receiver<T>) {
    let chan = Arc::new(Chan {
        room: Semaphore::new(capacity),
        state: Mutex::new(State { queue: VecDeque::new(), waker: None, receiver_gone: false }),
        senders: AtomicUsize::new(1),
    });
    (Sender(chan.clone()), Receiver(chan))
}

/// The item was not sent: the receiver is gone (or, from `try_send`, the channel is full).
#[derive(Debug)]
pub struct NotSent<T = Event>(pub T);

/// The sending side; cloned for each sender.
pub struct Sender<T>(Arc<Chan<T>>);

impl<T> Sender<T> {
    /// Sends `item`, waiting while the channel is full.
    pub async fn send(&self, item: T) -> Result<(), NotSent<T>> {
        match self.0.room.acquire().await {
            Ok(place) => place.forget(),
            Err(_) => return Err(NotSent(item)),
        }
        self.push(item)
    }

    /// Sends `item` if there is room now.
    pub fn try_send(&self, item: T) -> Result<(), NotSent<T>> {
        match self.0.room.try_acquire() {
            Ok(place) => place.forget(),
            Err(_) => return Err(NotSent(item)),
        }
        self.push(item)
    }

    fn push(&self, item: T) -> Result<(), NotSent<T>> {
        let mut state = self.0.state.lock();
        if state.receiver_gone {
            return Err(NotSent(item));
        }
        state.queue.push_back(item);
        let waker = state.waker.take();
        drop(state);
        if let Some(waker) = waker {
            waker.wake();
        }
        Ok(())
    }

    /// Whether the receiver is gone.
    pub fn is_closed(&self) -> bool {
        self.0.state.lock().receiver_gone
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Sender<T> {
        self.0.senders.fetch_add(1, Ordering::Relaxed);
        Sender(self.0.clone())
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        if self.0.senders.fetch_sub(1, Ordering::AcqRel) == 1 {
            // The last sender: the receiver sees the end once the queue is drained.
            let waker = self.0.state.lock().waker.take();
            if let Some(waker) = waker {
                waker.wake();
            }
        }
    }
}

impl<T> std::fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sender")
    }
}

/// The receiving side.
pub struct Receiver<T>(Arc<Chan<T>>);

impl<T> Receiver<T> {
    /// The next item; `None` once every sender is gone and the queue is empty.
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let mut state = self.0.state.lock();
        if let Some(item) = state.queue.pop_front() {
            if state.queue.is_empty() && state.queue.capacity() > 8 {
                state.queue = VecDeque::new();
            }
            drop(state);
            self.0.room.add_permits(1);
            return Poll::Ready(Some(item));
        }
        // Read under the lock: the last sender's drop takes the waker under it after counting
        // itself out, so either it is seen gone here or it wakes the waker stored here.
        if self.0.senders.load(Ordering::Acquire) == 0 {
            return Poll::Ready(None);
        }
        state.waker = Some(cx.waker().clone());
        Poll::Pending
    }

    /// The next item if one is there now.
    pub fn try_recv(&mut self) -> Option<T> {
        let item = self.0.state.lock().queue.pop_front()?;
        self.0.room.add_permits(1);
        Some(item)
    }

    /// Waits for the next item; `None` once every sender is gone and the queue is empty.
    pub async fn recv(&mut self) -> Option<T> {
        std::future::poll_fn(|cx| self.poll_recv(cx)).await
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let dropped = {
            let mut state = self.0.state.lock();
            state.receiver_gone = true;
            std::mem::take(&mut state.queue)
        };
        // Senders waiting for room fail at once.
        self.0.room.close();
        drop(dropped);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(n: i64) -> Event {
        Box::new(UpstreamEvent::Notification {
            method: "notifications/message".into(),
            params: Some(serde_json::json!({ "n": n })),
            related: None,
        })
    }

    fn n(event: &UpstreamEvent) -> i64 {
        match event {
            UpstreamEvent::Notification { params: Some(p), .. } => p["n"].as_i64().expect("n"),
            _ => panic!("a numbered note"),
        }
    }

    #[test]
    fn an_unused_channel_is_one_small_allocation() {
        // What every client session holds per upstream before any event (the queue allocates
        // only when something is queued): the shared state and the Arc's two counts.
        let (tx, rx) = event_channel(256);
        assert_eq!(rx.0.state.lock().queue.capacity(), 0);
        assert!(std::mem::size_of::<Chan<Event>>() + 2 * std::mem::size_of::<usize>() <= 136);
        drop((tx, rx));
    }

    #[tokio::test]
    async fn events_arrive_in_order_and_the_end_comes_after_the_last_sender() {
        let (tx, mut rx) = event_channel(4);
        let other = tx.clone();
        tx.send(note(1)).await.expect("sent");
        other.try_send(note(2)).expect("sent");
        drop(tx);
        assert_eq!(n(&rx.recv().await.expect("1")), 1);
        other.send(note(3)).await.expect("sent");
        drop(other);
        assert_eq!(n(&rx.recv().await.expect("2")), 2);
        assert_eq!(n(&rx.recv().await.expect("3")), 3);
        assert!(rx.recv().await.is_none());
    }

    #[tokio::test]
    async fn a_full_channel_makes_a_sender_wait_and_try_send_fail() {
        let (tx, mut rx) = event_channel(2);
        tx.send(note(1)).await.expect("sent");
        tx.send(note(2)).await.expect("sent");
        assert!(tx.try_send(note(3)).is_err());
        let waiting = tokio::spawn({
            let tx = tx.clone();
            async move { tx.send(note(3)).await.is_ok() }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        assert_eq!(n(&rx.recv().await.expect("1")), 1);
        assert!(waiting.await.expect("joined"));
        assert_eq!(n(&rx.recv().await.expect("2")), 2);
        assert_eq!(n(&rx.recv().await.expect("3")), 3);
    }

    #[tokio::test]
    async fn a_gone_receiver_fails_senders_waiting_or_not() {
        let (tx, rx) = event_channel(1);
        tx.send(note(1)).await.expect("sent");
        let waiting = tokio::spawn({
            let tx = tx.clone();
            async move { tx.send(note(2)).await.is_err() }
        });
        tokio::task::yield_now().await;
        assert!(!tx.is_closed());
        drop(rx);
        assert!(waiting.await.expect("joined"), "the waiting sender fails");
        assert!(tx.is_closed());
        assert!(tx.send(note(3)).await.is_err());
        assert!(tx.try_send(note(4)).is_err());
    }

    #[tokio::test]
    async fn a_receiver_waiting_is_woken_by_an_event_and_by_the_last_sender_leaving() {
        let (tx, mut rx) = event_channel(4);
        let received = tokio::spawn(async move {
            let first = rx.recv().await.map(|e| n(&e));
            let end = rx.recv().await.is_none();
            (first, end)
        });
        tokio::task::yield_now().await;
        tx.send(note(7)).await.expect("sent");
        tokio::task::yield_now().await;
        drop(tx);
        assert_eq!(received.await.expect("joined"), (Some(7), true));
    }
}
