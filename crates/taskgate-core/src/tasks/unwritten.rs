//! Status changes a task's actor could not write because the store failed (Redis out of reach,
//! a full disk): each is retried with backoff, in order, until it lands; waiters hear of it
//! then. What waits to be written is counted ([`Unwritten`]), and over its bound new tasks
//! are refused, saying why, rather than holding more state the store cannot take.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use taskgate_protocol::tasks::TaskStatus;
use taskgate_store::{StoreError, TaskRecord, TaskStore, Update};

use crate::metrics::Metrics;

/// Changes waiting to be written at most before new tasks are refused.
pub(crate) const MAX_CHANGES: usize = 1024;
/// Bytes of results waiting to be written at most before new tasks are refused.
pub(crate) const MAX_BYTES: usize = 64 << 20;
/// The first retry's delay; each next one doubles, up to [`LAST_DELAY`].
const FIRST_DELAY: Duration = Duration::from_millis(50);
/// The longest wait between two tries: well within a third of the shortest lease, so a change
/// lands in the same lease period as the store comes back.
const LAST_DELAY: Duration = Duration::from_secs(1);
/// Tries between two warnings while a change waits.
const WARN_EVERY: u32 = 30;

/// What waits to be written, across every task actor of this process.
#[derive(Default)]
pub struct Unwritten {
    changes: AtomicUsize,
    bytes: AtomicUsize,
}

impl Unwritten {
    /// Why new tasks are refused now, when what waits is over its bound.
    pub(crate) fn over_bound(&self) -> Option<String> {
        let (changes, bytes) = (self.changes.load(Ordering::Relaxed), self.bytes.load(Ordering::Relaxed));
        (changes >= MAX_CHANGES || bytes >= MAX_BYTES).then(|| {
            format!(
                "the task store is failing and {changes} task status changes ({bytes} bytes of results) wait to be \
                 written to it; new tasks are refused until they are (retry later)"
            )
        })
    }

    /// Changes waiting now.
    pub fn changes(&self) -> usize {
        self.changes.load(Ordering::Relaxed)
    }

    fn hold(self: &Arc<Self>, bytes: usize, metrics: &Arc<Metrics>) -> Waiting {
        self.changes.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        metrics.store_unwritten.with_label_values(&["changes"]).add(1);
        metrics.store_unwritten.with_label_values(&["bytes"]).add(bytes as i64);
        Waiting { of: self.clone(), bytes, metrics: metrics.clone() }
    }
}

/// One change counted as waiting, until it is dropped.
struct Waiting {
    of: Arc<Unwritten>,
    bytes: usize,
    metrics: Arc<Metrics>,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.of.changes.fetch_sub(1, Ordering::Relaxed);
        self.of.bytes.fetch_sub(self.bytes, Ordering::Relaxed);
        self.metrics.store_unwritten.with_label_values(&["changes"]).sub(1);
        self.metrics.store_unwritten.with_label_values(&["bytes"]).sub(self.bytes as i64);
    }
}

/// A store failure that may pass (nothing was decided about the change).
fn passing(e: &StoreError) -> bool {
    matches!(e, StoreError::Unavailable(_) | StoreError::Backend(_) | StoreError::Failed(_))
}

/// Writes a task's status change (compare-and-set against `expected`), trying again with
/// backoff for as long as the store fails, and returns what the store decided. The future is
/// the task actor's: it ends with the actor, and the actor handles nothing else meanwhile, so
/// its changes land in order.
///
/// A try that failed may still have been applied (Redis wrote it, then the answer was lost): a
/// later try refused because the task already has the status it sets is that change, applied.
pub(crate) async fn write_change(
    store: Arc<dyn TaskStore>,
    unwritten: Arc<Unwritten>,
    metrics: Arc<Metrics>,
    id: Arc<str>,
    expected: TaskStatus,
    update: Update,
) -> Result<TaskRecord, StoreError> {
    let mut waiting: Option<Waiting> = None;
    let mut delay = FIRST_DELAY;
    let mut tries = 0u32;
    loop {
        tries += 1;
        let failure = match store.compare_and_set(&id, expected, update.clone()).await {
            Ok(record) => {
                if waiting.is_some() {
                    tracing::info!(task = %id, tries, status = %record.status, "a task's status change reached the store");
                }
                return Ok(record);
            }
            Err(StoreError::Conflict { current }) if waiting.is_some() && current == update.status => {
                match store.get(&id).await {
                    Ok(Some(record)) if record.status == update.status => return Ok(record),
                    Ok(Some(record)) => return Err(StoreError::Conflict { current: record.status }),
                    Ok(None) => return Err(StoreError::NotFound),
                    Err(e) => e,
                }
            }
            Err(e) if passing(&e) => e,
            Err(e) => return Err(e),
        };
        match &waiting {
            None => {
                let bytes = update.outcome.as_ref().map_or(0, |o| serde_json::to_vec(o).map_or(0, |v| v.len()));
                tracing::warn!(task = %id, status = %update.status, error = %failure, "a task's status change could not be written; it is retried until the store takes it");
                waiting = Some(unwritten.hold(bytes, &metrics));
            }
            Some(_) if tries.is_multiple_of(WARN_EVERY) => {
                tracing::warn!(task = %id, status = %update.status, tries, error = %failure, "a task's status change still waits for the store");
            }
            Some(_) => {}
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(LAST_DELAY);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;
    use std::collections::VecDeque;
    use taskgate_store::{MemoryTaskStore, StoreFuture, TaskOutcome};

    /// A store whose compare-and-sets fail as scripted (`true`: fail before applying,
    /// `false`: apply, then fail as if the answer was lost), then pass to memory.
    struct Flaky {
        inner: MemoryTaskStore,
        script: Mutex<VecDeque<bool>>,
    }

    impl TaskStore for Flaky {
        fn create(&self, record: TaskRecord) -> StoreFuture<'_, ()> {
            self.inner.create(record)
        }
        fn get<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<TaskRecord>> {
            self.inner.get(id)
        }
        fn compare_and_set<'a>(&'a self, id: &'a str, expected: TaskStatus, u: Update) -> StoreFuture<'a, TaskRecord> {
            let next = self.script.lock().pop_front();
            Box::pin(async move {
                match next {
                    Some(true) => Err(StoreError::Unavailable("Redis is unreachable".into())),
                    Some(false) => {
                        self.inner.compare_and_set(id, expected, u).await?;
                        Err(StoreError::Unavailable("Redis did not answer in time".into()))
                    }
                    None => self.inner.compare_and_set(id, expected, u).await,
                }
            })
        }
        fn list<'a>(
            &'a self,
            owner: &'a taskgate_store::Owner,
            cursor: Option<&'a str>,
            limit: usize,
        ) -> StoreFuture<'a, taskgate_store::ListPage> {
            self.inner.list(owner, cursor, limit)
        }
        fn expire(&self, now_ms: u64) -> StoreFuture<'_, Vec<TaskRecord>> {
            self.inner.expire(now_ms)
        }
        fn delete<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<TaskRecord>> {
            self.inner.delete(id)
        }
        fn claim_orphans<'a>(&'a self, replica: &'a str, now_ms: u64) -> StoreFuture<'a, Vec<TaskRecord>> {
            self.inner.claim_orphans(replica, now_ms)
        }
        fn len(&self) -> usize {
            self.inner.len()
        }
    }

    fn done() -> Update {
        Update {
            status: TaskStatus::Completed,
            status_message: None,
            outcome: Some(TaskOutcome::Result(serde_json::json!({"content": [{"type": "text", "text": "42"}]}))),
            upstream_task_id: None,
            upstream_session: None,
            now_ms: 7,
        }
    }

    async fn written(script: &[bool]) -> (Result<TaskRecord, StoreError>, Arc<Unwritten>) {
        let store = Flaky { inner: MemoryTaskStore::new(10), script: Mutex::new(script.iter().copied().collect()) };
        let task = taskgate_store::testing::record("task", taskgate_store::testing::owner("p"), 0, None);
        store.inner.create(task).await.unwrap();
        let (unwritten, metrics) = (Arc::new(Unwritten::default()), Arc::new(Metrics::new()));
        let change =
            write_change(Arc::new(store), unwritten.clone(), metrics, "task".into(), TaskStatus::Working, done());
        (change.await, unwritten)
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_the_store_refuses_for_a_while_lands_once_it_answers() {
        let (record, unwritten) = written(&[true; 12]).await;
        let record = record.unwrap();
        assert_eq!(record.status, TaskStatus::Completed);
        assert_eq!(record.outcome, done().outcome);
        assert_eq!(unwritten.changes(), 0, "nothing waits once it landed");
    }

    #[tokio::test(start_paused = true)]
    async fn a_try_applied_whose_answer_was_lost_counts_as_written() {
        let (record, _) = written(&[true, false]).await;
        assert_eq!(record.unwrap().status, TaskStatus::Completed);
    }

    #[tokio::test(start_paused = true)]
    async fn what_waits_is_counted_and_over_the_bound_new_tasks_are_refused() {
        let (unwritten, metrics) = (Arc::new(Unwritten::default()), Arc::new(Metrics::new()));
        let held: Vec<_> = (0..MAX_CHANGES).map(|_| unwritten.hold(10, &metrics)).collect();
        let why = unwritten.over_bound().expect("refused at the bound");
        assert!(why.contains("1024 task status changes (10240 bytes"), "{why}");
        assert_eq!(metrics.store_unwritten.with_label_values(&["changes"]).get(), 1024);
        drop(held);
        assert_eq!(unwritten.over_bound(), None);
        assert_eq!(metrics.store_unwritten.with_label_values(&["bytes"]).get(), 0);
        let big = unwritten.hold(MAX_BYTES, &metrics);
        assert!(unwritten.over_bound().is_some(), "bytes bound too");
        drop(big);
    }
}
