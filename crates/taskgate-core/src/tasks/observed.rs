//! [`ObservedStore`]: any [`TaskStore`] with each operation's latency and backend failures
//! counted (`taskgate_store_operation_duration_seconds`, `taskgate_store_errors_total`).

use std::future::Future;
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

    fn observe<'a, T: Send + 'a>(
        &'a self,
        operation: &'static str,
        work: impl Future<Output = Result<T, StoreError>> + Send + 'a,
    ) -> StoreFuture<'a, T> {
        Box::pin(async move {
            let started = Instant::now();
            // A panic inside a backend fails this operation, never the session or actor that
            // asked: it becomes a store failure naming the operation.
            let outcome = AssertUnwindSafe(work).catch_unwind().await.unwrap_or_else(|panic| {
                let why = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a panic".into());
                tracing::error!(operation, %why, "the task store failed inside");
                Err(StoreError::Backend(format!("the task store failed inside its '{operation}' operation ({why})")))
            });
            self.metrics.store_duration.with_label_values(&[operation]).observe(started.elapsed().as_secs_f64());
            if let Err(StoreError::Backend(_) | StoreError::Unavailable(_)) = &outcome {
                self.metrics.store_errors.with_label_values(&[operation]).inc();
            }
            outcome
        })
    }
}

impl TaskStore for ObservedStore {
    fn create(&self, record: TaskRecord) -> StoreFuture<'_, ()> {
        self.observe("create", self.inner.create(record))
    }

    fn get<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<TaskRecord>> {
        self.observe("get", self.inner.get(id))
    }

    fn compare_and_set<'a>(&'a self, id: &'a str, expected: TaskStatus, update: Update) -> StoreFuture<'a, TaskRecord> {
        self.observe("compare_and_set", self.inner.compare_and_set(id, expected, update))
    }

    fn list<'a>(&'a self, owner: &'a Owner, cursor: Option<&'a str>, limit: usize) -> StoreFuture<'a, ListPage> {
        self.observe("list", self.inner.list(owner, cursor, limit))
    }

    fn expire(&self, now_ms: u64) -> StoreFuture<'_, Vec<TaskRecord>> {
        self.observe("expire", self.inner.expire(now_ms))
    }

    fn delete<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<TaskRecord>> {
        self.observe("delete", self.inner.delete(id))
    }

    fn claim_orphans<'a>(&'a self, replica: &'a str, now_ms: u64) -> StoreFuture<'a, Vec<TaskRecord>> {
        self.observe("claim_orphans", self.inner.claim_orphans(replica, now_ms))
    }

    fn renew_leases<'a>(&'a self, replica: &'a str, ids: &'a [String]) -> StoreFuture<'a, Vec<String>> {
        self.observe("renew_leases", self.inner.renew_leases(replica, ids))
    }

    fn shared(&self) -> bool {
        self.inner.shared()
    }

    fn lease_ms(&self) -> Option<u64> {
        self.inner.lease_ms()
    }

    fn publish(&self, event: EventEnvelope) -> StoreFuture<'_, ()> {
        self.observe("publish", self.inner.publish(event))
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
        self.observe("reserve", self.inner.reserve(owner, task_id, caps, hold_ms))
    }

    fn release<'a>(&'a self, owner: &'a Owner, task_id: &'a str) -> StoreFuture<'a, ()> {
        self.observe("release", self.inner.release(owner, task_id))
    }

    fn admit_rates<'a>(&'a self, buckets: &'a [RateBucket]) -> StoreFuture<'a, Option<(usize, u64)>> {
        self.observe("admit_rates", self.inner.admit_rates(buckets))
    }

    fn put_input<'a>(
        &'a self,
        task_id: &'a str,
        key: &'a str,
        request: &'a serde_json::Value,
        keep_ms: u64,
    ) -> StoreFuture<'a, ()> {
        self.observe("put_input", self.inner.put_input(task_id, key, request, keep_ms))
    }

    fn remove_inputs<'a>(&'a self, task_id: &'a str, keys: &'a [String]) -> StoreFuture<'a, ()> {
        self.observe("remove_inputs", self.inner.remove_inputs(task_id, keys))
    }

    fn inputs<'a>(&'a self, task_id: &'a str) -> StoreFuture<'a, Vec<(String, serde_json::Value)>> {
        self.observe("inputs", self.inner.inputs(task_id))
    }

    fn health(&self) -> StoreFuture<'_, ()> {
        self.observe("health", self.inner.health())
    }

    fn len(&self) -> usize {
        self.inner.len()
    }

    fn compact(&self) {
        self.inner.compact();
    }
}
