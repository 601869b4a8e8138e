//! [`ObservedStore`]: any [`TaskStore`] with each operation's latency and backend failures
//! counted (`taskgate_store_operation_duration_seconds`, `taskgate_store_errors_total`).

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::FutureExt;
use std::time::Instant;

use taskgate_protocol::tasks::TaskStatus;
use taskgate_store::{
    CapRefused, Caps, EventEnvelope, ListPage, Owner, RateBucket, StoreError, StoreFuture, TaskRecord, TaskStore,
    Update,
};

use crate::metrics::Metrics;

/// A store whose operations are measured.
pub(crate) struct ObservedStore {
    inner: Arc<dyn TaskStore>,
    metrics: Arc<Metrics>,
}

impl ObservedStore {
    pub(crate) fn new(inner: Arc<dyn TaskStore>, metrics: Arc<Metrics>) -> ObservedStore {
        ObservedStore { inner, metrics }
    }

    /// Runs one operation of the inner store, measured. `start` calls the inner store: a panic
    /// inside a backend (as it starts the operation, or while its future runs) fails this
    /// operation, never the session or actor that asked.
    fn observe<'a, T: Send + 'a>(
        &'a self,
        operation: &'static str,
        start: impl FnOnce() -> StoreFuture<'a, T>,
    ) -> StoreFuture<'a, T> {
        let started_work = std::panic::catch_unwind(AssertUnwindSafe(start));
        Box::pin(async move {
            let started = Instant::now();
            let outcome = match started_work {
                Ok(work) => {
                    AssertUnwindSafe(work).catch_unwind().await.unwrap_or_else(|panic| Err(failed(operation, &*panic)))
                }
                Err(panic) => Err(failed(operation, &*panic)),
            };
            self.metrics.store_duration.with_label_values(&[operation]).observe(started.elapsed().as_secs_f64());
            if let Err(StoreError::Backend(_) | StoreError::Unavailable(_) | StoreError::Failed(_)) = &outcome {
                self.metrics.store_errors.with_label_values(&[operation]).inc();
            }
            outcome
        })
    }
}

/// A backend's panic as the operation's error.
fn failed(operation: &str, panic: &(dyn std::any::Any + Send)) -> StoreError {
    let why = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into());
    tracing::error!(operation, %why, "the task store failed inside");
    StoreError::Failed(format!("the task store failed inside its '{operation}' operation ({why})"))
}

impl TaskStore for ObservedStore {
    fn create(&self, record: TaskRecord) -> StoreFuture<'_, ()> {
        self.observe("create", || self.inner.create(record))
    }

    fn get<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<TaskRecord>> {
        self.observe("get", || self.inner.get(id))
    }

    fn compare_and_set<'a>(&'a self, id: &'a str, expected: TaskStatus, update: Update) -> StoreFuture<'a, TaskRecord> {
        self.observe("compare_and_set", || self.inner.compare_and_set(id, expected, update))
    }

    fn list<'a>(&'a self, owner: &'a Owner, cursor: Option<&'a str>, limit: usize) -> StoreFuture<'a, ListPage> {
        self.observe("list", || self.inner.list(owner, cursor, limit))
    }

    fn expire(&self, now_ms: u64) -> StoreFuture<'_, Vec<TaskRecord>> {
        self.observe("expire", || self.inner.expire(now_ms))
    }

    fn delete<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<TaskRecord>> {
        self.observe("delete", || self.inner.delete(id))
    }

    fn claim_orphans<'a>(&'a self, replica: &'a str, now_ms: u64) -> StoreFuture<'a, Vec<TaskRecord>> {
        self.observe("claim_orphans", || self.inner.claim_orphans(replica, now_ms))
    }

    fn renew_leases<'a>(&'a self, replica: &'a str, ids: &'a [String]) -> StoreFuture<'a, Vec<String>> {
        self.observe("renew_leases", || self.inner.renew_leases(replica, ids))
    }

    fn shared(&self) -> bool {
        self.inner.shared()
    }

    fn lease_ms(&self) -> Option<u64> {
        self.inner.lease_ms()
    }

    fn publish(&self, event: EventEnvelope) -> StoreFuture<'_, ()> {
        self.observe("publish", || self.inner.publish(event))
    }

    fn subscribe(&self) -> Option<tokio::sync::mpsc::Receiver<EventEnvelope>> {
        self.inner.subscribe()
    }

    fn reserve<'a>(
        &'a self,
        owner: &'a Owner,
        task_id: &'a str,
        caps: Caps,
        hold_ms: u64,
    ) -> StoreFuture<'a, Result<(), CapRefused>> {
        self.observe("reserve", || self.inner.reserve(owner, task_id, caps, hold_ms))
    }

    fn release<'a>(&'a self, owner: &'a Owner, task_id: &'a str) -> StoreFuture<'a, ()> {
        self.observe("release", || self.inner.release(owner, task_id))
    }

    fn admit_rates<'a>(&'a self, buckets: &'a [RateBucket]) -> StoreFuture<'a, Option<(usize, u64)>> {
        self.observe("admit_rates", || self.inner.admit_rates(buckets))
    }

    fn put_input<'a>(
        &'a self,
        task_id: &'a str,
        key: &'a str,
        request: &'a serde_json::Value,
        keep_ms: u64,
    ) -> StoreFuture<'a, ()> {
        self.observe("put_input", || self.inner.put_input(task_id, key, request, keep_ms))
    }

    fn remove_inputs<'a>(&'a self, task_id: &'a str, keys: &'a [String]) -> StoreFuture<'a, ()> {
        self.observe("remove_inputs", || self.inner.remove_inputs(task_id, keys))
    }

    fn inputs<'a>(&'a self, task_id: &'a str) -> StoreFuture<'a, Vec<(String, serde_json::Value)>> {
        self.observe("inputs", || self.inner.inputs(task_id))
    }

    fn put_session<'a>(
        &'a self,
        id: &'a str,
        record: &'a taskgate_store::SessionRecord,
        keep_ms: u64,
    ) -> StoreFuture<'a, ()> {
        self.observe("put_session", || self.inner.put_session(id, record, keep_ms))
    }

    fn session<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<taskgate_store::SessionRecord>> {
        self.observe("session", || self.inner.session(id))
    }

    fn change_session<'a>(
        &'a self,
        id: &'a str,
        change: taskgate_store::SessionChange,
        keep_ms: u64,
    ) -> StoreFuture<'a, bool> {
        self.observe("change_session", || self.inner.change_session(id, change, keep_ms))
    }

    fn delete_session<'a>(&'a self, id: &'a str) -> StoreFuture<'a, bool> {
        self.observe("delete_session", || self.inner.delete_session(id))
    }

    fn activate<'a>(&'a self, key: &'a str, names: &'a [String], keep_ms: u64) -> StoreFuture<'a, ()> {
        self.observe("activate", || self.inner.activate(key, names, keep_ms))
    }

    fn activated<'a>(&'a self, key: &'a str, keep_ms: u64) -> StoreFuture<'a, Vec<String>> {
        self.observe("activated", || self.inner.activated(key, keep_ms))
    }

    fn scan_tasks<'a>(
        &'a self,
        filter: &'a taskgate_store::TaskFilter,
        cursor: Option<&'a str>,
        limit: usize,
    ) -> StoreFuture<'a, taskgate_store::Page<TaskRecord>> {
        self.observe("scan_tasks", || self.inner.scan_tasks(filter, cursor, limit))
    }

    fn scan_sessions<'a>(
        &'a self,
        cursor: Option<&'a str>,
        limit: usize,
    ) -> StoreFuture<'a, taskgate_store::Page<taskgate_store::SessionEntry>> {
        self.observe("scan_sessions", || self.inner.scan_sessions(cursor, limit))
    }

    fn describe(&self) -> StoreFuture<'_, taskgate_store::StoreInfo> {
        self.observe("describe", || self.inner.describe())
    }

    fn health(&self) -> StoreFuture<'_, ()> {
        self.observe("health", || self.inner.health())
    }

    fn len(&self) -> usize {
        self.inner.len()
    }

    fn compact(&self) {
        self.inner.compact();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A backend with bugs: one operation panics as it is called, another inside its future.
    struct Panicking;

    impl TaskStore for Panicking {
        fn create(&self, _: TaskRecord) -> StoreFuture<'_, ()> {
            Box::pin(async { panic!("inside the future") })
        }
        fn get<'a>(&'a self, _: &'a str) -> StoreFuture<'a, Option<TaskRecord>> {
            panic!("as it is called")
        }
        fn compare_and_set<'a>(&'a self, _: &'a str, _: TaskStatus, _: Update) -> StoreFuture<'a, TaskRecord> {
            Box::pin(std::future::ready(Err(StoreError::NotFound)))
        }
        fn list<'a>(&'a self, _: &'a Owner, _: Option<&'a str>, _: usize) -> StoreFuture<'a, ListPage> {
            Box::pin(std::future::ready(Err(StoreError::BadCursor)))
        }
        fn expire(&self, _: u64) -> StoreFuture<'_, Vec<TaskRecord>> {
            Box::pin(std::future::ready(Ok(Vec::new())))
        }
        fn delete<'a>(&'a self, _: &'a str) -> StoreFuture<'a, Option<TaskRecord>> {
            Box::pin(std::future::ready(Ok(None)))
        }
        fn claim_orphans<'a>(&'a self, _: &'a str, _: u64) -> StoreFuture<'a, Vec<TaskRecord>> {
            Box::pin(std::future::ready(Ok(Vec::new())))
        }
        fn len(&self) -> usize {
            0
        }
    }

    #[tokio::test]
    async fn a_panic_inside_any_backend_fails_its_operation_and_nothing_else() {
        let store = ObservedStore::new(Arc::new(Panicking), Arc::new(Metrics::new()));
        let called = store.get("t").await.unwrap_err();
        assert!(
            matches!(&called, StoreError::Failed(why) if why.contains("'get'") && why.contains("as it is called")),
            "{called:?}"
        );
        let record = taskgate_store::testing::record("t", taskgate_store::testing::owner("p"), 0, None);
        let running = store.create(record).await.unwrap_err();
        assert!(matches!(&running, StoreError::Failed(why) if why.contains("inside the future")), "{running:?}");
        // The store goes on.
        assert_eq!(store.delete("t").await.unwrap(), None);
        assert_eq!(store.metrics.store_errors.with_label_values(&["get"]).get(), 1);
    }
}
