//! [`Publisher`]: what this replica tells the others sharing its store, through a bounded queue
//! to one publishing loop (a full queue drops the event and counts it; waiters also re-read the
//! store on their own).

use std::sync::atomic::{AtomicUsize, Ordering};

use taskgate_store::{EventEnvelope, StoreEvent};
use tokio::sync::mpsc;

/// Events waiting to be published, at most.
const PUBLISH_QUEUE: usize = 4096;
/// Bytes of clients' messages (session events) waiting to be published, at most: each waits
/// only as long as a publish takes, but a slow Redis must not make them pile up.
const PUBLISH_BYTES: usize = 16 << 20;
/// Client sessions' events waiting to be published, at most: a quarter of the queue, so that
/// what clients make cannot crowd out the task events.
const SESSION_EVENTS: usize = PUBLISH_QUEUE / 4;

/// The outgoing half: a bounded queue to one publishing loop.
pub(crate) struct Publisher {
    queue: Option<mpsc::Sender<EventEnvelope>>,
    replica: String,
    /// Bytes of clients' messages in the queue.
    bytes: AtomicUsize,
    /// Client sessions' events in the queue.
    session_events: AtomicUsize,
}

/// What an event weighs against the queue's bounds.
#[derive(Clone, Copy)]
pub(crate) struct Weight {
    /// Bytes of a client's message it carries.
    bytes: usize,
    /// It is a client session's event.
    session: bool,
}

/// What an event weighs: the bytes of a client's message it carries, whether it is a client
/// session's.
pub(crate) fn weight(event: &StoreEvent) -> Weight {
    match event {
        StoreEvent::SessionMessage { message, .. } | StoreEvent::SessionClient { message, .. } => {
            Weight { bytes: message.len(), session: true }
        }
        StoreEvent::RetryForwarded { request: message, .. }
        | StoreEvent::RetryReply { part: taskgate_store::RetryPart::Body(message), .. } => {
            Weight { bytes: message.len(), session: true }
        }
        StoreEvent::SessionEnded { .. }
        | StoreEvent::SessionChanged { .. }
        | StoreEvent::SessionStream { .. }
        | StoreEvent::IdentityActivated { .. }
        | StoreEvent::RetryReply { .. }
        | StoreEvent::RetryClosed { .. } => Weight { bytes: 0, session: true },
        _ => Weight { bytes: 0, session: false },
    }
}

impl Publisher {
    /// A publisher for a shared store; for one that is not shared, publishing does nothing.
    pub(crate) fn new(shared_store: bool, replica: String) -> (Publisher, Option<mpsc::Receiver<EventEnvelope>>) {
        if !shared_store {
            return (
                Publisher { queue: None, replica, bytes: AtomicUsize::new(0), session_events: AtomicUsize::new(0) },
                None,
            );
        }
        let (tx, rx) = mpsc::channel(PUBLISH_QUEUE);
        let publisher =
            Publisher { queue: Some(tx), replica, bytes: AtomicUsize::new(0), session_events: AtomicUsize::new(0) };
        (publisher, Some(rx))
    }

    /// Queues an event for the other replicas; false when it was dropped (queue full, or the
    /// client sessions' events in it at their bounds).
    pub(crate) fn publish(&self, event: StoreEvent) -> bool {
        let Some(queue) = &self.queue else { return true };
        let weight = weight(&event);
        if weight.session {
            let over_count = self.session_events.fetch_add(1, Ordering::Relaxed) >= SESSION_EVENTS;
            let over_bytes = self.bytes.fetch_add(weight.bytes, Ordering::Relaxed) + weight.bytes > PUBLISH_BYTES;
            if over_count || over_bytes {
                self.sent(weight);
                return false;
            }
        }
        let queued = queue.try_send(EventEnvelope { from: self.replica.clone(), event }).is_ok();
        if !queued {
            self.sent(weight);
        }
        queued
    }

    /// The publishing loop is done with an event (published or lost).
    pub(crate) fn sent(&self, weight: Weight) {
        if weight.session {
            self.session_events.fetch_sub(1, Ordering::Relaxed);
            self.bytes.fetch_sub(weight.bytes, Ordering::Relaxed);
        }
    }
}
