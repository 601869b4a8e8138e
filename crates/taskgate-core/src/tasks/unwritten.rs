//! Status changes a task's actor could not write because the store failed: while the store is
//! out of reach (Redis away, a full disk) each is retried with backoff, in order, until it
//! lands, and waiters hear of it then; another failure is given up after a few tries; a change
//! is also given up when this replica no longer runs the task or the gateway stops. The actor
//! handles no other message meanwhile (its changes stay in order), so a cancel of its task is
//! refused at once instead of waiting. What waits is counted ([`Unwritten`]), and over its
//! bound new tasks are refused, saying why, rather than holding more state the store cannot
//! take.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
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
/// Tries of a change the store refuses with a failure that is not its being out of reach (a
/// damaged record, a Redis script error): such a failure rarely passes, and it is given up.
const OTHER_FAILURE_TRIES: u32 = 5;

/// What waits to be written, across every task actor of this process: each task's waiting
/// change, with the flag that tells its retries to stop.
#[derive(Default)]
pub struct Unwritten {
    waiting: Mutex<HashMap<Arc<str>, Arc<AtomicBool>>>,
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

    /// Whether the task's status change waits for the store.
    pub(crate) fn waits(&self, task: &str) -> bool {
        self.waiting.lock().contains_key(task)
    }

    /// Tells the task's waiting change to stop trying (this replica no longer runs the task,
    /// or the gateway stops): it ends with the store's last failure.
    pub(crate) fn give_up(&self, task: &str) {
        if let Some(stop) = self.waiting.lock().get(task) {
            stop.store(true, Ordering::Relaxed);
        }
    }

    /// Tells every waiting change to stop trying; how many there were.
    pub(crate) fn give_up_all(&self) -> usize {
        let waiting = self.waiting.lock();
        waiting.values().for_each(|stop| stop.store(true, Ordering::Relaxed));
        waiting.len()
    }

    fn hold(self: &Arc<Self>, task: &Arc<str>, bytes: usize, metrics: &Arc<Metrics>) -> Waiting {
        let stop = Arc::new(AtomicBool::new(false));
        self.waiting.lock().insert(task.clone(), stop.clone());
        self.changes.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        metrics.store_unwritten_changes.add(1);
        metrics.store_unwritten_bytes.add(bytes as i64);
        Waiting { of: self.clone(), task: task.clone(), stop, bytes, metrics: metrics.clone() }
    }
}

/// One change counted as waiting, until it is dropped.
struct Waiting {
    of: Arc<Unwritten>,
    task: Arc<str>,
    stop: Arc<AtomicBool>,
    bytes: usize,
    metrics: Arc<Metrics>,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.of.waiting.lock().remove(&self.task);
        self.of.changes.fetch_sub(1, Ordering::Relaxed);
        self.of.bytes.fetch_sub(self.bytes, Ordering::Relaxed);
        self.metrics.store_unwritten_changes.sub(1);
        self.metrics.store_unwritten_bytes.sub(self.bytes as i64);
    }
}

/// How many tries a store failure is worth: the store out of reach (or full) passes, and is
/// tried until it does; another failure a few times; a refusal (not found, conflict) none.
fn tries_for(e: &StoreError) -> u32 {
    match e {
        StoreError::Unavailable(_) => u32::MAX,
        StoreError::Backend(_) | StoreError::Failed(_) => OTHER_FAILURE_TRIES,
        _ => 0,
    }
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
            Err(e) if tries < tries_for(&e) => e,
            Err(e) => {
                if waiting.is_some() {
                    tracing::error!(task = %id, status = %update.status, tries, error = %e, "a task's status change was given up");
                }
                return Err(e);
            }
        };
        if waiting.as_ref().is_some_and(|w| w.stop.load(Ordering::Relaxed)) {
            tracing::warn!(task = %id, status = %update.status, tries, error = %failure, "a task's waiting status change was given up: this replica no longer runs the task");
            return Err(failure);
        }
        match &waiting {
            None => {
                let bytes = update.outcome.as_ref().map_or(0, |o| serde_json::to_vec(o).map_or(0, |v| v.len()));
                tracing::warn!(task = %id, status = %update.status, error = %failure, "a task's status change could not be written; it is retried until the store takes it");
                waiting = Some(unwritten.hold(&id, bytes, &metrics));
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

    /// How a scripted compare-and-set fails.
    #[derive(Clone, Copy)]
    enum Fail {
        /// Before applying, the store out of reach.
        Unreachable,
        /// After applying, as if the answer was lost.
        Lost,
        /// Another failure (a damaged record).
        Other,
    }

    /// A store whose compare-and-sets fail as scripted, then pass to memory.
    struct Flaky {
        inner: MemoryTaskStore,
        script: Mutex<VecDeque<Fail>>,
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
                    Some(Fail::Unreachable) => Err(StoreError::Unavailable("Redis is unreachable".into())),
                    Some(Fail::Other) => Err(StoreError::Backend("a stored task does not decode".into())),
                    Some(Fail::Lost) => {
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

    fn flaky(script: &[Fail]) -> Arc<Flaky> {
        Arc::new(Flaky { inner: MemoryTaskStore::new(10), script: Mutex::new(script.iter().copied().collect()) })
    }

    async fn write(store: Arc<Flaky>, unwritten: Arc<Unwritten>) -> Result<TaskRecord, StoreError> {
        let task = taskgate_store::testing::record("task", taskgate_store::testing::owner("p"), 0, None);
        store.inner.create(task).await.unwrap();
        let metrics = Arc::new(Metrics::new());
        write_change(store, unwritten, metrics, "task".into(), TaskStatus::Working, done()).await
    }

    async fn written(script: &[Fail]) -> (Result<TaskRecord, StoreError>, Arc<Unwritten>) {
        let unwritten = Arc::new(Unwritten::default());
        (write(flaky(script), unwritten.clone()).await, unwritten)
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_the_store_refuses_for_a_while_lands_once_it_answers() {
        let (record, unwritten) = written(&[Fail::Unreachable; 12]).await;
        let record = record.unwrap();
        assert_eq!(record.status, TaskStatus::Completed);
        assert_eq!(record.outcome, done().outcome);
        assert_eq!(unwritten.changes(), 0, "nothing waits once it landed");
    }

    #[tokio::test(start_paused = true)]
    async fn a_try_applied_whose_answer_was_lost_counts_as_written() {
        let (record, _) = written(&[Fail::Unreachable, Fail::Lost]).await;
        assert_eq!(record.unwrap().status, TaskStatus::Completed);
    }

    #[tokio::test(start_paused = true)]
    async fn another_failure_is_given_up_after_a_few_tries() {
        let store = flaky(&[Fail::Other; 10]);
        let outcome = write(store.clone(), Arc::default()).await;
        assert!(matches!(outcome, Err(StoreError::Backend(_))), "{outcome:?}");
        assert_eq!(store.script.lock().len(), 10 - OTHER_FAILURE_TRIES as usize);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_change_stops_when_told_to_give_up() {
        let unwritten = Arc::new(Unwritten::default());
        let writing = tokio::spawn(write(flaky(&[Fail::Unreachable; 10_000]), unwritten.clone()));
        while !unwritten.waits("task") {
            tokio::task::yield_now().await;
        }
        unwritten.give_up("task");
        assert!(matches!(writing.await.unwrap(), Err(StoreError::Unavailable(_))));
        assert_eq!(unwritten.changes(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn what_waits_is_counted_and_over_the_bound_new_tasks_are_refused() {
        let (unwritten, metrics) = (Arc::new(Unwritten::default()), Arc::new(Metrics::new()));
        let held: Vec<_> = (0..MAX_CHANGES).map(|i| unwritten.hold(&format!("t{i}").into(), 10, &metrics)).collect();
        assert!(unwritten.waits("t7") && !unwritten.waits("other"));
        let why = unwritten.over_bound().expect("refused at the bound");
        assert!(why.contains("1024 task status changes (10240 bytes"), "{why}");
        assert_eq!(metrics.store_unwritten_changes.get(), 1024);
        drop(held);
        assert_eq!(unwritten.over_bound(), None);
        assert!(!unwritten.waits("t7"));
        assert_eq!(metrics.store_unwritten_bytes.get(), 0);
        let big = unwritten.hold(&"big".into(), MAX_BYTES, &metrics);
        assert!(unwritten.over_bound().is_some(), "bytes bound too");
        drop(big);
    }
}
