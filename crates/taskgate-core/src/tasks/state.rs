//! [`TaskState`]: the one owner of task state. Sessions only parse a task method's params
//! and dispatch here; task actors and the Supervisor read and change tasks through it.
//!
//! It owns:
//! - the [`TaskStore`] (every backend plugs in behind it: memory, the embedded file, Redis);
//! - the live task actors by task id (their handle `A`: the task layer's state names no actor
//!   type, [`super::TaskService`] is this state with the actors' addresses);
//! - the maps from what upstreams say to our tasks: native upstream task ids, and the upstream
//!   requests made for a task;
//! - the `tasks/result` waiters, woken by [`TaskState::finished`] when a task turns terminal
//!   or is deleted (locally, or on another replica through the store's events);
//! - what the owner's sessions hear about its tasks (status, progress), here and, through the
//!   store's events, on the other replicas;
//! - poll bookkeeping (`taskgate_task_polls_early_total`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use serde_json::{json, Value};
use taskgate_protocol::tasks::TaskStatus;
use taskgate_protocol::RequestId;
use taskgate_store::{StoreError, StoreEvent, TaskOutcome, TaskRecord, TaskStore, Update};
use tokio::sync::watch;

use super::publisher::Publisher;
use super::requestor_sessions::RequestorSessions;
use super::{cancelled_outcome, not_found, owner, store_error};
use crate::identity::Identity;
use crate::metrics::Metrics;
use crate::GatewayError;

/// (upstream, upstream task id) of a native task.
pub(crate) type NativeKey = (String, String);

/// The task layer's state and operations.
pub struct TaskState<A> {
    pub(super) store: Arc<dyn TaskStore>,
    pub(super) metrics: Arc<Metrics>,
    sessions: Arc<dyn RequestorSessions>,
    publisher: Publisher,
    clock: Arc<dyn crate::clock::Clock>,
    /// `tasks/list` page size.
    page_size: usize,
    /// Live task actors by task id.
    /// (Keys share the actor's own copy of the id.)
    actors: RwLock<HashMap<Arc<str>, A>>,
    /// Native tasks: what the upstream calls them → our task id.
    native: RwLock<HashMap<NativeKey, String>>,
    /// Upstream requests made for a task → our task id. What the upstream sends on their
    /// streams (elicitation…) belongs to that task.
    /// By upstream, then request id: an entry per call names no upstream of its own.
    calls: RwLock<HashMap<String, HashMap<RequestId, Arc<str>>>>,
    /// `tasks/result` waiters by task id; entries go with their last waiter.
    waiting: Mutex<HashMap<String, watch::Sender<()>>>,
    /// When each task was last polled, and its suggested interval. An entry is useful only for
    /// that interval: the Supervisor prunes older ones ([`TaskState::prune_polls`]), so a task
    /// deleted by another replica leaves nothing here for long.
    last_poll: Mutex<HashMap<String, (Instant, Duration)>>,
    /// What each tenant holds, in tasks and result bytes (its share of the pools).
    pub(crate) holdings: super::Holdings,
    /// Every live task's ttl, on one timer (run by the Supervisor).
    pub(crate) expiries: Arc<super::expiries::Expiries>,
    /// The last progress of live tasks, here and at other replicas (the operator's view).
    pub(crate) board: super::ProgressBoard,
    /// Status changes waiting for a failing store.
    pub(crate) unwritten: Arc<super::Unwritten>,
}

impl<A: Clone> TaskState<A> {
    pub(crate) fn new(
        store: Arc<dyn TaskStore>,
        metrics: Arc<Metrics>,
        clock: Arc<dyn crate::clock::Clock>,
        page_size: usize,
        sessions: Arc<dyn RequestorSessions>,
        publisher: Publisher,
    ) -> TaskState<A> {
        TaskState {
            store,
            metrics,
            sessions,
            publisher,
            clock,
            page_size,
            actors: RwLock::default(),
            native: RwLock::default(),
            calls: RwLock::default(),
            waiting: Mutex::default(),
            last_poll: Mutex::default(),
            holdings: super::Holdings::default(),
            expiries: Arc::default(),
            board: Default::default(),
            unwritten: Arc::default(),
        }
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn TaskStore> {
        &self.store
    }

    // ---- live actors and the upstream maps ----

    /// The live actor of a task.
    pub(crate) fn actor(&self, task_id: &str) -> Option<A> {
        self.actors.read().get(task_id).cloned()
    }

    /// Task actors alive now.
    pub fn live_actors(&self) -> usize {
        self.actors.read().len()
    }

    /// The tasks this process runs now.
    pub(crate) fn running_ids(&self) -> Vec<String> {
        self.actors.read().keys().map(|id| id.to_string()).collect()
    }

    /// Registers a started actor (and, for a native task, the upstream's id for it).
    pub(crate) fn register(&self, task_id: &Arc<str>, actor: A, native: Option<NativeKey>) {
        self.actors.write().insert(task_id.clone(), actor);
        if let Some(key) = native {
            self.native.write().insert(key, task_id.to_string());
        }
    }

    /// Notes the upstream's id of a task that became native while it ran.
    pub(crate) fn register_native(&self, key: NativeKey, task_id: &Arc<str>) {
        self.native.write().insert(key, task_id.to_string());
    }

    /// Forgets a stopped actor and its native id.
    pub(crate) fn unregister(&self, task_id: &str, native: Option<&NativeKey>) {
        self.actors.write().remove(task_id);
        if let Some(key) = native {
            self.native.write().remove(key);
        }
    }

    /// Our task for a native upstream task.
    pub(crate) fn native_task(&self, key: &NativeKey) -> Option<String> {
        self.native.read().get(key).cloned()
    }

    /// Whether an upstream task id is one of ours.
    pub(crate) fn knows_native(&self, key: &NativeKey) -> bool {
        self.native.read().contains_key(key)
    }

    /// Notes that an upstream request is made for a task.
    pub(crate) fn track_call(&self, upstream: &str, request: RequestId, task_id: &Arc<str>) {
        let mut calls = self.calls.write();
        let of_upstream = match calls.get_mut(upstream) {
            Some(of_upstream) => of_upstream,
            None => calls.entry(upstream.to_owned()).or_default(),
        };
        of_upstream.insert(request, task_id.clone());
    }

    /// The request ended.
    pub(crate) fn forget_call(&self, upstream: &str, request: &RequestId) {
        if let Some(of_upstream) = self.calls.write().get_mut(upstream) {
            of_upstream.remove(request);
        }
    }

    /// The task an upstream request was made for.
    pub(crate) fn task_of_call(&self, upstream: &str, request: &RequestId) -> Option<String> {
        self.calls.read().get(upstream)?.get(request).map(|id| id.to_string())
    }

    /// Forgets polls older than their task's interval: they can no longer make a poll early.
    pub(crate) fn prune_polls(&self) {
        self.board.prune();
        self.last_poll.lock().retain(|_, (at, interval)| at.elapsed() < *interval);
    }

    /// Gives back memory the tables kept at their peak (after a burst).
    pub(crate) fn compact(&self) {
        self.store.compact();
        self.actors.write().shrink_to_fit();
        let mut calls = self.calls.write();
        calls.retain(|_, of_upstream| !of_upstream.is_empty());
        calls.values_mut().for_each(HashMap::shrink_to_fit);
        calls.shrink_to_fit();
        drop(calls);
        self.native.write().shrink_to_fit();
        self.last_poll.lock().shrink_to_fit();
        self.waiting.lock().shrink_to_fit();
    }

    // ---- creation and the end of a task ----

    /// Reserves a place for a new task under its tenant's caps across every replica (a shared
    /// store): over a cap, the same clear error as a single process gives, and no task.
    pub(crate) async fn reserve(
        self: Arc<Self>,
        identity: Identity,
        task_id: String,
        caps: taskgate_store::Caps,
        hold_ms: u64,
    ) -> Result<(), GatewayError> {
        match self.store.reserve(&owner(&identity), &task_id, caps, hold_ms).await.map_err(store_error)? {
            Ok(()) => Ok(()),
            Err(refused) => {
                let cap = match refused {
                    taskgate_store::CapRefused::Tenant => crate::tenants::Cap::Tenant(caps.tenant.unwrap_or(0)),
                    taskgate_store::CapRefused::Principal => {
                        crate::tenants::Cap::Principal(caps.principal.unwrap_or(0))
                    }
                };
                let reason = cap.label();
                self.metrics.admission_rejected.with_label_values(&[&identity.tenant, reason]).inc();
                tracing::info!(target: "taskgate::audit", tenant = %identity.tenant, principal = %identity.principal, reason, "task refused at admission");
                Err(cap.error(&identity))
            }
        }
    }

    /// One more task held by its tenant, within its share of `tasks.max_tasks` (one tenant
    /// never fills the store for all). Taken before anything reaches the upstream; given back by
    /// [`TaskState::release`] when the task is not created after all.
    pub(crate) fn admit_holding(&self, record: &TaskRecord, share: usize) -> Result<(), GatewayError> {
        let tenant = &record.owner.tenant;
        let expires_at_ms = record.ttl_ms.map(|ttl| record.created_at_ms.saturating_add(ttl));
        self.holdings.admit(&record.id, tenant, expires_at_ms, share).map_err(|share| {
            self.metrics.admission_rejected.with_label_values(&[tenant, "tenant_max_tasks"]).inc();
            GatewayError::LimitExceeded(format!(
                "tenant \"{tenant}\" holds its share of {share} tasks (server.tenant_share_percent of tasks.max_tasks, or limits.share_percent); they are freed as their ttl passes"
            ))
        })
    }

    /// Gives back what a task that was not created took: its place among its tenant's
    /// holdings, and its reservation under the caps (shared stores).
    pub(crate) fn release(&self, record: &TaskRecord) {
        self.holdings.release(&record.id);
        if !self.store.shared() {
            return;
        }
        let (store, owner, id) = (self.store.clone(), record.owner.clone(), record.id.clone());
        actix::spawn(async move {
            if let Err(e) = store.release(&owner, &id).await {
                tracing::warn!(task = %id, error = %e, "a task's reservation could not be given back; it lapses by itself");
            }
        });
    }

    /// A task turned terminal or was deleted: wake its `tasks/result` waiters here and on the
    /// other replicas; they read the store again.
    pub(crate) fn finished(&self, task_id: &str) {
        self.wake(task_id);
        self.publish(StoreEvent::Finished { task_id: task_id.to_owned() });
    }

    /// Wakes this process's waiters of a task (it ended, here or elsewhere).
    pub(crate) fn wake(&self, task_id: &str) {
        self.board.forget(task_id);
        if let Some(waiters) = self.waiting.lock().get(task_id) {
            waiters.send_replace(());
        }
    }

    /// Tells the other replicas (a shared store); a full queue drops the event, counted.
    pub(crate) fn publish(&self, event: StoreEvent) -> bool {
        let queued = self.publisher.publish(event);
        if !queued {
            self.metrics.store_events.with_label_values(&["dropped", "queue_full"]).inc();
        }
        queued
    }

    /// The publishing loop is done with an event.
    pub(crate) fn published(&self, weight: super::publisher::Weight) {
        self.publisher.sent(weight);
    }

    /// `notifications/tasks/status` to the owner's sessions, here and on the other replicas.
    pub(crate) fn announce(&self, owner: &Identity, task: Value) {
        self.status_to_sessions(owner, task.clone());
        self.publish(StoreEvent::Status { owner: super::owner(owner), task });
    }

    /// `notifications/tasks/status` to the owner's sessions on this replica (their GET streams).
    pub(crate) fn status_to_sessions(&self, owner: &Identity, task: Value) {
        self.sessions.task_status(owner, &task);
    }

    /// A task's progress (`notifications/progress` params under the client's token) to the
    /// owner's sessions, here and on the other replicas. False when no session here took it
    /// and there are no other replicas.
    pub(crate) fn task_progress(&self, owner: &Identity, task_id: &str, requester: &str, params: Value) -> bool {
        self.board.record(task_id, &params);
        let here = self.progress_to_sessions(owner, task_id, Some(requester), params.clone());
        let shared = self.store.shared();
        if shared {
            self.publish(StoreEvent::Progress { owner: super::owner(owner), task_id: task_id.to_owned(), params });
        }
        here || shared
    }

    /// A task's progress to the owner's sessions on this replica, with the task's related-task
    /// `_meta`: to the session that requested the task when it is here, else (it ended, the
    /// gateway restarted, it is on another replica: `requester` is `None`) to those that follow
    /// the task with `tasks/result` ([`RequestorSessions::task_progress`]).
    pub(crate) fn progress_to_sessions(
        &self,
        owner: &Identity,
        task_id: &str,
        requester: Option<&str>,
        mut params: Value,
    ) -> bool {
        params["_meta"] = json!({ taskgate_protocol::mcp::meta::RELATED_TASK: { "taskId": task_id } });
        let notification =
            taskgate_protocol::Message::notification(taskgate_protocol::mcp::methods::PROGRESS, Some(params));
        self.sessions.task_progress(owner, task_id, requester, &notification)
    }

    /// The task's actor stored a new input request: the owner's sessions on the other replicas
    /// that wait on the task relay it.
    pub(crate) fn input_stored(&self, owner: &Identity, task_id: &str) {
        self.publish(StoreEvent::InputRequested { owner: super::owner(owner), task_id: task_id.to_owned() });
    }

    /// A task running on another replica has a new input request: the owner's sessions here
    /// with a `tasks/result` open for it fetch it from the store and relay it.
    pub(crate) fn inputs_to_sessions(&self, owner: &Identity, task_id: &str) {
        self.sessions.remote_inputs(owner, task_id);
    }

    /// A task was deleted (ttl): forget its bookkeeping and wake its waiters.
    pub(crate) fn deleted(&self, record: &TaskRecord) {
        self.holdings.release(&record.id);
        self.metrics.tasks.with_label_values(&[&record.owner.tenant, record.status.as_str()]).dec();
        self.last_poll.lock().remove(&record.id);
        self.finished(&record.id);
    }

    fn subscribe(self: &Arc<Self>, task_id: &str) -> Waiter<A> {
        let rx = self.waiting.lock().entry(task_id.to_owned()).or_insert_with(|| watch::channel(()).0).subscribe();
        Waiter { service: self.clone(), task_id: task_id.to_owned(), rx }
    }

    // ---- the client's task methods ----

    /// The task, if it exists and belongs to `identity`; otherwise the one not-found answer,
    /// whatever the reason.
    pub(super) async fn owned(&self, identity: &Identity, task_id: &str) -> Result<TaskRecord, GatewayError> {
        let owner = owner(identity);
        match self.store.get(task_id).await {
            Ok(Some(record)) if record.owner == owner => Ok(record),
            Ok(_) => {
                // Counted per tenant: a burst of these is a client guessing ids.
                self.metrics.task_lookup_failures.with_label_values(&[&identity.tenant]).inc();
                // The id is the client's: cut and escaped, and a burst is logged in part.
                if let Some(suppressed) = crate::logs::limiter().allow("task_lookup_failed") {
                    tracing::info!(target: "taskgate::audit", tenant = %identity.tenant, principal = %crate::logs::Untrusted(&identity.principal), task = %crate::logs::Untrusted(task_id), suppressed, "task look-up failed: unknown, expired or another requestor's");
                }
                Err(not_found())
            }
            Err(e) => Err(store_error(e)),
        }
    }

    /// `tasks/get`: the Task itself (no related-task `_meta`: the taskId is in it).
    pub(crate) async fn get(self: Arc<Self>, identity: Identity, task_id: String) -> Result<Value, GatewayError> {
        let record = self.owned(&identity, &task_id).await?;
        self.count_poll(&identity.tenant, &record);
        Ok(record.view().to_value())
    }

    /// `tasks/result`: the outcome, waiting until the task is terminal
    /// (basic/utilities/tasks "Result Retrieval").
    pub(crate) async fn result(
        self: Arc<Self>,
        identity: Identity,
        task_id: String,
    ) -> Result<TaskOutcome, GatewayError> {
        let mut record = self.owned(&identity, &task_id).await?;
        if !record.status.is_terminal() {
            let _waiting = WaiterGauge::new(self.metrics.task_result_waiters.with_label_values(&[&identity.tenant]));
            let mut waiter = self.subscribe(&task_id);
            // With other replicas, an event may be lost (a subscription cut off): read the
            // store again at least this often.
            let recheck = self.store.lease_ms().map(Duration::from_millis);
            loop {
                // Read again after subscribing: the task may have ended in between.
                match self.store.get(&task_id).await.map_err(store_error)? {
                    Some(now) if now.status.is_terminal() => {
                        record = now;
                        break;
                    }
                    Some(_) => {}
                    None => return Err(not_found()),
                }
                let changed = match recheck {
                    Some(every) => tokio::time::timeout(every, waiter.rx.changed()).await.unwrap_or(Ok(())),
                    None => waiter.rx.changed().await,
                };
                if changed.is_err() {
                    return Err(GatewayError::Internal("the gateway is shutting down".into()));
                }
            }
        }
        tracing::info!(target: "taskgate::audit", tenant = %identity.tenant, principal = %identity.principal, task = %task_id, "task result retrieved");
        Ok(record.outcome.unwrap_or_else(cancelled_outcome))
    }

    /// Resolves once the task is terminal or gone, here or at another replica (or when its
    /// store cannot say).
    pub(crate) async fn ended(self: Arc<Self>, task_id: String) {
        let mut waiter = self.subscribe(&task_id);
        let recheck = self.store.lease_ms().map(Duration::from_millis);
        loop {
            // Read again after subscribing: the task may have ended in between.
            if !matches!(self.store.get(&task_id).await, Ok(Some(now)) if !now.status.is_terminal()) {
                return;
            }
            let changed = match recheck {
                Some(every) => tokio::time::timeout(every, waiter.rx.changed()).await.unwrap_or(Ok(())),
                None => waiter.rx.changed().await,
            };
            if changed.is_err() {
                return;
            }
        }
    }

    /// `tasks/list`: the requestor's tasks, oldest first, a page at a time.
    pub(crate) async fn list(
        self: Arc<Self>,
        identity: Identity,
        cursor: Option<String>,
    ) -> Result<Value, GatewayError> {
        let page =
            self.store.list(&owner(&identity), cursor.as_deref(), self.page_size).await.map_err(|e| match e {
                StoreError::BadCursor => GatewayError::InvalidParams(
                    "Invalid cursor: it was not issued by this gateway for tasks/list".into(),
                ),
                e => store_error(e),
            })?;
        let tasks: Vec<Value> = page.tasks.iter().map(|r| r.view().to_value()).collect();
        let mut result = json!({ "tasks": tasks });
        if let Some(next) = page.next_cursor {
            result["nextCursor"] = Value::from(next);
        }
        Ok(result)
    }

    /// The change `tasks/cancel` makes.
    pub(crate) fn cancel_update(&self) -> Update {
        Update {
            status: TaskStatus::Cancelled,
            status_message: Some("The task was cancelled by request.".into()),
            outcome: Some(cancelled_outcome()),
            upstream_task_id: None,
            upstream_session: None,
            now_ms: self.clock.now_ms(),
        }
    }

    /// Counts a `tasks/get` of an existing task, and whether it came sooner than the task's
    /// suggested pollInterval.
    fn count_poll(&self, tenant: &str, record: &TaskRecord) {
        self.metrics.task_polls.with_label_values(&[tenant]).inc();
        let now = Instant::now();
        let interval = Duration::from_millis(record.poll_interval_ms);
        let previous = self.last_poll.lock().insert(record.id.clone(), (now, interval));
        if previous.is_some_and(|(at, _)| now.duration_since(at) < interval) {
            self.metrics.task_polls_early.with_label_values(&[tenant]).inc();
        }
    }
}

/// A `tasks/result` waiting for one task; its entry goes with the task's last waiter.
struct Waiter<A> {
    service: Arc<TaskState<A>>,
    task_id: String,
    rx: watch::Receiver<()>,
}

impl<A> Drop for Waiter<A> {
    fn drop(&mut self) {
        let mut waiting = self.service.waiting.lock();
        // This receiver still counts: it is the last one when the count is 1.
        if waiting.get(&self.task_id).is_some_and(|tx| tx.receiver_count() <= 1) {
            waiting.remove(&self.task_id);
        }
    }
}

/// Counts a `tasks/result` waiter for as long as it waits.
struct WaiterGauge(prometheus::IntGauge);

impl WaiterGauge {
    fn new(gauge: prometheus::IntGauge) -> WaiterGauge {
        gauge.inc();
        WaiterGauge(gauge)
    }
}

impl Drop for WaiterGauge {
    fn drop(&mut self) {
        self.0.dec();
    }
}

pub(super) fn already_terminal(status: TaskStatus) -> GatewayError {
    GatewayError::InvalidParams(format!("Cannot cancel task: already in terminal status '{status}'"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use taskgate_store::{MemoryTaskStore, Owner};

    /// No client sessions.
    struct NoSessions;

    impl RequestorSessions for NoSessions {
        fn task_status(&self, _: &Identity, _: &Value) {}
        fn task_progress(&self, _: &Identity, _: &str, _: Option<&str>, _: &taskgate_protocol::Message) -> bool {
            false
        }
        fn remote_inputs(&self, _: &Identity, _: &str) {}
        fn to_stream(&self, _: &str, _: String) {}
        fn client_said(&self, _: &str, _: String) {}
        fn ended(&self, _: &str) {}
        fn changed(&self, _: &str) {}
        fn activated_elsewhere(&self, _: &Identity, _: Option<&str>) {}
        fn stream_at(&self, _: &str, _: String, _: bool) {}
        fn release_idle(&self, _: u64, _: u64) {}
        fn close_idle(self: Arc<Self>, _: u64) -> futures_util::future::BoxFuture<'static, ()> {
            Box::pin(async {})
        }
    }

    fn service() -> TaskState<()> {
        let metrics = Arc::new(Metrics::new());
        let (publisher, _) = super::super::publisher::Publisher::new(false, "r".into());
        TaskState::new(
            Arc::new(MemoryTaskStore::new(10)),
            metrics,
            Arc::new(crate::clock::SystemClock),
            10,
            Arc::new(NoSessions),
            publisher,
        )
    }

    fn polled(id: &str, poll_interval_ms: u64) -> TaskRecord {
        TaskRecord {
            id: id.into(),
            owner: Owner { tenant: "t".into(), principal: "p".into() },
            status: TaskStatus::Working,
            status_message: None,
            created_at_ms: 0,
            last_updated_at_ms: 0,
            ttl_ms: None,
            poll_interval_ms,
            upstream: "u".into(),
            tool: "x".into(),
            upstream_task_id: None,
            upstream_session: None,
            replica: None,
            outcome: None,
        }
    }

    #[test]
    fn poll_bookkeeping_forgets_polls_older_than_their_interval() {
        let s = service();
        s.count_poll("t", &polled("gone", 0));
        s.count_poll("t", &polled("kept", 3_600_000));
        // An early second poll of the kept task is counted.
        s.count_poll("t", &polled("kept", 3_600_000));
        assert_eq!(s.metrics.task_polls_early.with_label_values(&["t"]).get(), 1);
        s.prune_polls();
        let left: Vec<String> = s.last_poll.lock().keys().cloned().collect();
        assert_eq!(left, ["kept"]);
    }
}
