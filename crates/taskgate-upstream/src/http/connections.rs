//! The bound on connections to one HTTP upstream, shared by all its sessions.

use std::sync::Arc;

/// The bound on connections to one HTTP upstream (`upstream[].max_connections`), shared by all
/// its sessions: a request holds one until its response is read, a long-lived stream (GET,
/// `subscriptions/listen`) while it is open. A stream takes one only while a quarter of them
/// (at least one) stays free, so streams never starve requests; a request waits for one,
/// within its timeout. Responses and notifications to the upstream are not held to it (see
/// `send`).
pub(crate) struct Connections {
    permits: Arc<tokio::sync::Semaphore>,
    max: usize,
    reserve: usize,
    pub(crate) observer: Option<Arc<dyn crate::RequestObserver>>,
    gauge: Option<Box<dyn Fn(usize) + Send + Sync>>,
    waited: Option<Box<dyn Fn() + Send + Sync>>,
}

/// One connection's place under the bound, given back when dropped.
pub(crate) struct ConnectionPermit {
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
    connections: Arc<Connections>,
}

impl Drop for ConnectionPermit {
    fn drop(&mut self) {
        drop(self.permit.take());
        self.connections.report();
    }
}

impl Connections {
    pub(crate) fn new(name: &str, max: usize, observer: Option<Arc<dyn crate::RequestObserver>>) -> Arc<Connections> {
        let max = max.max(1);
        let gauge = observer.as_ref().and_then(|o| o.connections_gauge(name));
        let waited = observer.as_ref().and_then(|o| o.connection_waits(name));
        Arc::new(Connections {
            permits: Arc::new(tokio::sync::Semaphore::new(max)),
            max,
            reserve: (max / 4).max(1),
            observer,
            gauge,
            waited,
        })
    }

    /// A place for a request, waiting for one if all are taken.
    pub(super) async fn for_request(self: &Arc<Self>) -> ConnectionPermit {
        let permit = match self.permits.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                if let Some(waited) = &self.waited {
                    waited();
                }
                self.permits.clone().acquire_owned().await.expect("the semaphore is never closed")
            }
        };
        self.report();
        ConnectionPermit { permit: Some(permit), connections: self.clone() }
    }

    /// A place for a long-lived stream, if one is free beyond the requests' reserve.
    pub(super) fn for_stream(self: &Arc<Self>) -> Option<ConnectionPermit> {
        if self.permits.available_permits() <= self.reserve {
            return None;
        }
        let permit = self.permits.clone().try_acquire_owned().ok()?;
        self.report();
        Some(ConnectionPermit { permit: Some(permit), connections: self.clone() })
    }

    fn report(&self) {
        if let Some(gauge) = &self.gauge {
            gauge(self.max - self.permits.available_permits());
        }
    }
}
