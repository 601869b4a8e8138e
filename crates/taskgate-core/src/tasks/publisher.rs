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

/// The outgoing half: a bounded queue to one publishing loop.
pub(crate) struct Publisher {
    queue: Option<mpsc::Sender<EventEnvelope>>,
    replica: String,
    /// Bytes of clients' messages in the queue.
    bytes: AtomicUsize,
}

/// The bytes of a client's message an event carries (0 for the task layer's own events).
pub(crate) fn client_bytes(event: &StoreEvent) -> usize {
    match event {
        StoreEvent::SessionMessage { message, .. } => message.len(),
        StoreEvent::SessionClient { message, .. } => message.len(),
        _ => 0,
    }
}

impl Publisher {
    /// A publisher for a shared store; for one that is not shared, publishing does nothing.
    pub(crate) fn new(shared_store: bool, replica: String) -> (Publisher, Option<mpsc::Receiver<EventEnvelope>>) {
        if !shared_store {
            return (Publisher { queue: None, replica, bytes: AtomicUsize::new(0) }, None);
        }
        let (tx, rx) = mpsc::channel(PUBLISH_QUEUE);
        (Publisher { queue: Some(tx), replica, bytes: AtomicUsize::new(0) }, Some(rx))
    }

    /// Queues an event for the other replicas; false when it was dropped (queue full, or the
    /// clients' messages in it at their bound).
    pub(crate) fn publish(&self, event: StoreEvent) -> bool {
        let Some(queue) = &self.queue else { return true };
        let bytes = client_bytes(&event);
        if bytes > 0 && self.bytes.fetch_add(bytes, Ordering::Relaxed) + bytes > PUBLISH_BYTES {
            self.bytes.fetch_sub(bytes, Ordering::Relaxed);
            return false;
        }
        let queued = queue.try_send(EventEnvelope { from: self.replica.clone(), event }).is_ok();
        if !queued {
            self.bytes.fetch_sub(bytes, Ordering::Relaxed);
        }
        queued
    }

    /// The publishing loop is done with an event (published or lost).
    pub(crate) fn sent(&self, bytes: usize) {
        self.bytes.fetch_sub(bytes, Ordering::Relaxed);
    }
}
