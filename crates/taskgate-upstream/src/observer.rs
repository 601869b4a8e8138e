//! [`RequestObserver`]: what the owner of the upstream clients (the gateway's metrics) is told.

use std::time::Duration;

/// Told about every upstream request, for metrics.
pub trait RequestObserver: Send + Sync + 'static {
    /// One request to `upstream` took `took`; `error` is the failure's reason label, if any.
    fn observe(&self, upstream: &str, method: &str, took: Duration, error: Option<&'static str>);

    /// A long-lived stream to `upstream` (a GET stream, a `subscriptions/listen` stream) opened
    /// or closed.
    fn stream(&self, _upstream: &str, _open: bool) {}

    /// Where to report how many connections to `upstream` are in use (requests in flight and
    /// streams open, under its `max_connections`): asked once per upstream, called on every
    /// change.
    fn connections_gauge(&self, _upstream: &str) -> Option<Box<dyn Fn(usize) + Send + Sync>> {
        None
    }

    /// Where to count the requests to `upstream` that waited for a connection (all of its
    /// `max_connections` were in use).
    fn connection_waits(&self, _upstream: &str) -> Option<Box<dyn Fn() + Send + Sync>> {
        None
    }

    /// A session with `upstream` began (`open`) or ended; `shared` when client sessions share it.
    fn session(&self, _upstream: &str, _shared: bool, _open: bool) {}
}
