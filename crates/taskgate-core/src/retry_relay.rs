//! A 2026-07-28 client's retry that reaches another replica than the one holding its exchange
//! (stateless clients behind a balancer that spreads their requests; basic/patterns/mrtr): the
//! exchange is an upstream request still open in that replica's memory, so the retry goes
//! there. The replica that received it passes it on through the shared store
//! (`StoreEvent::RetryForwarded`); the replica holding the exchange serves it as if it had come
//! there and sends its answer back part by part (`RetryReply`: taken, status and type, body,
//! end); a client that goes away is passed on too (`RetryClosed`), which cancels the request
//! there as closing its stream would.
//!
//! Bounds: at most [`MAX_WAITING`] forwarded retries wait at a replica and [`MAX_SERVING`] are
//! served for others; the parts of one answer wait in a queue of [`PARTS`], and the parts of
//! every answer waiting to be read hold at most [`MAX_QUEUED_BYTES`] together. A part lost on the
//! way (a full queue, the bytes' bound, an event the store did not take) shows as a gap in the
//! sequence and the answer ends there; how long each step may take is the front door's to bound.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use futures_util::future::LocalBoxFuture;
use futures_util::stream::LocalBoxStream;
use futures_util::StreamExt;
use parking_lot::Mutex;
use taskgate_store::StoreEvent;
use tokio::sync::mpsc;

pub use taskgate_store::RetryPart;

use crate::identity::Identity;

/// Forwarded retries waiting for their answer at this replica, at most.
pub const MAX_WAITING: usize = 1024;
/// Retries this replica serves for the others at once, at most.
pub const MAX_SERVING: usize = 1024;
/// Parts of one answer waiting to be read, at most.
const PARTS: usize = 256;
/// Bytes of the parts of every forwarded answer waiting to be read here, at most.
pub const MAX_QUEUED_BYTES: usize = 64 << 20;

/// An answer the front door made for a forwarded retry: its HTTP status, content type and body.
pub struct Served {
    pub status: u16,
    pub content_type: String,
    /// The body's parts as they come (UTF-8: JSON, or SSE events of JSON).
    pub body: LocalBoxStream<'static, String>,
}

/// How the front door serves a retry forwarded here: who retries, and the request (JSON text).
pub type RetryHandler = Arc<dyn Fn(Identity, String) -> LocalBoxFuture<'static, Served> + Send + Sync>;

/// Publishes one event to the other replicas; false when it was dropped.
pub(crate) type Publish = Arc<dyn Fn(StoreEvent) -> bool + Send + Sync>;

/// Forwarded retries, both ways.
#[derive(Default)]
pub struct RetryRelay {
    /// Retries forwarded from here, by relay: where their parts go.
    waiting: Mutex<HashMap<String, mpsc::Sender<(u64, RetryPart)>>>,
    /// Retries served here for another replica, by that replica and its relay.
    serving: Mutex<HashMap<(String, String), tokio::task::JoinHandle<()>>>,
    handler: OnceLock<RetryHandler>,
    next: AtomicU64,
    /// Bytes of body parts delivered here and not read yet.
    queued: Arc<std::sync::atomic::AtomicUsize>,
}

/// Why a forwarded retry's answer stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lost {
    /// A part did not arrive (a gap in the sequence).
    Part,
    /// The relay was let go here (the gateway stops).
    Gone,
}

/// A retry forwarded to the replica holding its exchange: read its answer's parts in order.
/// Dropped before the end, it tells that replica the client went away.
pub struct Forwarded {
    parts: mpsc::Receiver<(u64, RetryPart)>,
    /// The relay's count of bytes waiting to be read (a part read is taken off it).
    queued: Arc<std::sync::atomic::AtomicUsize>,
    expected: u64,
    ended: bool,
    close: Option<Box<dyn FnOnce(bool) + Send>>,
}

impl Forwarded {
    /// The next part, in order.
    pub fn poll_part(&mut self, cx: &mut Context<'_>) -> Poll<Result<RetryPart, Lost>> {
        match self.parts.poll_recv(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(None) => Poll::Ready(Err(Lost::Gone)),
            Poll::Ready(Some((seq, part))) => {
                self.queued.fetch_sub(weight(&part), Ordering::Relaxed);
                if seq != self.expected {
                    return Poll::Ready(Err(Lost::Part));
                }
                self.expected += 1;
                if part == RetryPart::End {
                    self.ended = true;
                }
                Poll::Ready(Ok(part))
            }
        }
    }

    /// The next part, in order.
    pub async fn part(&mut self) -> Result<RetryPart, Lost> {
        std::future::poll_fn(|cx| self.poll_part(cx)).await
    }
}

impl Drop for Forwarded {
    fn drop(&mut self) {
        // What was delivered and never read leaves the count.
        self.parts.close();
        while let Ok((_, part)) = self.parts.try_recv() {
            self.queued.fetch_sub(weight(&part), Ordering::Relaxed);
        }
        if let Some(close) = self.close.take() {
            close(self.ended);
        }
    }
}

/// The bytes a part holds while it waits to be read.
fn weight(part: &RetryPart) -> usize {
    match part {
        RetryPart::Body(text) => text.len(),
        _ => 0,
    }
}

impl RetryRelay {
    /// Sets how the front door serves retries forwarded here (once).
    pub fn handle_with(&self, handler: RetryHandler) {
        let _ = self.handler.set(handler);
    }

    /// Passes a retry on to `holder`; `None` when too many wait here already or the event could
    /// not be queued for the store.
    pub(crate) fn forward(
        self: &Arc<Self>,
        publish: Publish,
        holder: &str,
        identity: &Identity,
        request: String,
    ) -> Option<Forwarded> {
        let relay = format!("r{}", self.next.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = mpsc::channel(PARTS);
        {
            let mut waiting = self.waiting.lock();
            if waiting.len() >= MAX_WAITING {
                return None;
            }
            waiting.insert(relay.clone(), tx);
        }
        let sent = publish(StoreEvent::RetryForwarded {
            replica: holder.to_owned(),
            relay: relay.clone(),
            tenant: identity.tenant.to_string(),
            principal: identity.principal.to_string(),
            request,
        });
        if !sent {
            self.waiting.lock().remove(&relay);
            return None;
        }
        let (relays, holder) = (self.clone(), holder.to_owned());
        let close = Box::new(move |ended: bool| {
            relays.waiting.lock().remove(&relay);
            if !ended {
                publish(StoreEvent::RetryClosed { replica: holder, relay });
            }
        });
        Some(Forwarded { parts: rx, queued: self.queued.clone(), expected: 0, ended: false, close: Some(close) })
    }

    /// A part of the answer to a retry forwarded from here.
    pub(crate) fn deliver(&self, relay: &str, seq: u64, part: RetryPart) {
        let waiting = self.waiting.lock();
        // A full queue, or the bytes' bound, loses the part: the reader sees the gap.
        let Some(tx) = waiting.get(relay) else { return };
        let bytes = weight(&part);
        if self.queued.fetch_add(bytes, Ordering::Relaxed) + bytes > MAX_QUEUED_BYTES {
            self.queued.fetch_sub(bytes, Ordering::Relaxed);
            return;
        }
        if tx.try_send((seq, part)).is_err() {
            self.queued.fetch_sub(bytes, Ordering::Relaxed);
        }
    }

    /// Serves a retry another replica (`from`) forwarded here, and sends its answer back.
    pub(crate) fn serve(
        self: &Arc<Self>,
        publish: Publish,
        from: String,
        relay: String,
        identity: Identity,
        request: String,
    ) {
        let Some(handler) = self.handler.get().cloned() else { return };
        let key = (from.clone(), relay.clone());
        let mut serving = self.serving.lock();
        if serving.len() >= MAX_SERVING || serving.contains_key(&key) {
            tracing::warn!(from = %from, "a retry forwarded by another replica is refused: too many are served here");
            // Told at once, as an overloaded gateway tells its own clients.
            let error = serde_json::json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32002,
                "message": format!("Overloaded: the replica holding the exchange serves {MAX_SERVING} retries for others already; retry")}});
            let parts = [
                RetryPart::Head { status: 503, content_type: "application/json".into() },
                RetryPart::Body(error.to_string()),
                RetryPart::End,
            ];
            for (seq, part) in parts.into_iter().enumerate() {
                publish(StoreEvent::RetryReply { replica: from.clone(), relay: relay.clone(), seq: seq as u64, part });
            }
            return;
        }
        let relays = self.clone();
        let done = key.clone();
        let task = actix::spawn(async move {
            let mut seq = 0;
            let mut send = |part: RetryPart| {
                let sent = publish(StoreEvent::RetryReply { replica: from.clone(), relay: relay.clone(), seq, part });
                seq += 1;
                sent
            };
            if send(RetryPart::Accepted) {
                let Served { status, content_type, mut body } = handler(identity, request).await;
                let mut whole = send(RetryPart::Head { status, content_type });
                while whole {
                    match body.next().await {
                        Some(text) => whole = send(RetryPart::Body(text)),
                        None => {
                            send(RetryPart::End);
                            break;
                        }
                    }
                }
            }
            relays.serving.lock().remove(&done);
        });
        serving.insert(key, task);
    }

    /// The client of a retry served here for `from` went away: its answer is dropped, which
    /// cancels the request as closing its stream would.
    pub(crate) fn closed(&self, from: &str, relay: &str) {
        if let Some(task) = self.serving.lock().remove(&(from.to_owned(), relay.to_owned())) {
            task.abort();
        }
    }

    /// Forwarded retries waiting here, and served here for others.
    pub fn counts(&self) -> (usize, usize) {
        (self.waiting.lock().len(), self.serving.lock().len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn relay() -> (Arc<RetryRelay>, Forwarded, String) {
        let relays = Arc::new(RetryRelay::default());
        let publish: Publish = Arc::new(|_| true);
        let who = Identity { tenant: "acme".into(), principal: "ada".into() };
        let forwarded = relays.forward(publish, "other", &who, "{}".into()).expect("room");
        let relay = relays.waiting.lock().keys().next().unwrap().clone();
        (relays, forwarded, relay)
    }

    #[tokio::test]
    async fn parts_come_in_order_a_gap_ends_the_answer_and_bytes_are_bounded() {
        let (relays, mut forwarded, relay) = relay();
        relays.deliver(&relay, 0, RetryPart::Accepted);
        relays.deliver(&relay, 1, RetryPart::Body("abc".into()));
        assert_eq!(relays.queued.load(Ordering::Relaxed), 3);
        assert_eq!(forwarded.part().await, Ok(RetryPart::Accepted));
        assert_eq!(forwarded.part().await, Ok(RetryPart::Body("abc".into())));
        assert_eq!(relays.queued.load(Ordering::Relaxed), 0);
        // Past the bytes' bound a part is lost, and the reader sees the gap.
        relays.deliver(&relay, 2, RetryPart::Body("x".repeat(MAX_QUEUED_BYTES + 1)));
        relays.deliver(&relay, 3, RetryPart::End);
        assert_eq!(relays.queued.load(Ordering::Relaxed), 0);
        assert_eq!(forwarded.part().await, Err(Lost::Part));
        // Dropped, what it never read leaves the count and the relay is let go.
        relays.deliver(&relay, 4, RetryPart::Body("unread".into()));
        drop(forwarded);
        assert_eq!(relays.queued.load(Ordering::Relaxed), 0);
        assert_eq!(relays.counts(), (0, 0));
    }
}
