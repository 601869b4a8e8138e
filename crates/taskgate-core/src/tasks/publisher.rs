//! [`Publisher`]: what this replica tells the others sharing its store, through a bounded queue
//! to one publishing loop (a full queue drops the event and counts it; waiters also re-read the
//! store on their own).

use taskgate_store::{EventEnvelope, StoreEvent};
use tokio::sync::mpsc;

/// Events waiting to be published, at most.
const PUBLISH_QUEUE: usize = 4096;

/// The outgoing half: a bounded queue to one publishing loop.
pub(crate) struct Publisher {
    queue: Option<mpsc::Sender<EventEnvelope>>,
    replica: String,
}

impl Publisher {
    /// A publisher for a shared store; for one that is not shared, publishing does nothing.
    pub(crate) fn new(shared_store: bool, replica: String) -> (Publisher, Option<mpsc::Receiver<EventEnvelope>>) {
        if !shared_store {
            return (Publisher { queue: None, replica }, None);
        }
        let (tx, rx) = mpsc::channel(PUBLISH_QUEUE);
        (Publisher { queue: Some(tx), replica }, Some(rx))
    }

    /// Queues an event for the other replicas; false when it was dropped (queue full).
    pub(crate) fn publish(&self, event: StoreEvent) -> bool {
        let Some(queue) = &self.queue else { return true };
        queue.try_send(EventEnvelope { from: self.replica.clone(), event }).is_ok()
    }
}
