//! [`TaskService`]: the task state with the live actors' addresses, and what takes an actor:
//! creating a task (its record durable first, then its actor), recovering orphans, cancelling,
//! and the input requests a running task's actor holds.

use std::sync::Arc;

use actix::prelude::*;
use serde_json::Value;
use taskgate_store::{StoreError, StoreEvent, TaskRecord};

use super::actor::{TaskActor, TaskShared};
use super::messages::{Cancel, DeliverInputs, ListInputs};
use super::state::{already_terminal, TaskState};
use super::work::{TaskStart, Work};
use super::{not_found, owner, store_error};
use crate::identity::Identity;
use crate::GatewayError;

/// The task state, its actors known by their addresses.
pub type TaskService = TaskState<Addr<TaskActor>>;

impl TaskState<Addr<TaskActor>> {
    /// Claims the tasks no live gateway process runs (after a restart, or a replica's death)
    /// and follows each again or fails it.
    pub(crate) async fn recover(shared: Arc<TaskShared>) -> Result<super::Recovered, GatewayError> {
        super::recovery::recover(shared).await.map_err(store_error)
    }

    /// Stores a new task durably, then starts its actor: the `CreateTaskResult` may be sent
    /// once this returns (ext-tasks: a task handle MUST NOT be returned before the task is
    /// durably created).
    pub(crate) async fn create(shared: Arc<TaskShared>, start: TaskStart) -> Result<TaskRecord, GatewayError> {
        let record = start.record.clone();
        let service = &shared.tasks;
        if let Some(why) = service.unwritten.over_bound() {
            service.release(&record);
            service.metrics.admission_rejected.with_label_values(&[&record.owner.tenant, "store_unwritten"]).inc();
            return Err(GatewayError::StoreUnavailable(why));
        }
        if let Err(e) = service.store.create(record.clone()).await {
            service.release(&record);
            return Err(match e {
                StoreError::Full { limit } => {
                    service.metrics.admission_rejected.with_label_values(&[&record.owner.tenant, "max_tasks"]).inc();
                    GatewayError::Overloaded(format!(
                        "the gateway holds its maximum of {limit} tasks (tasks.max_tasks); retry later"
                    ))
                }
                e => store_error(e),
            });
        }
        let native = match &start.work {
            Work::Native(native) => Some((record.upstream.clone(), native.upstream_task_id.clone())),
            Work::Wrapped { .. } => None,
        };
        let m = &service.metrics;
        m.tasks_created.with_label_values(&[&record.owner.tenant, &record.upstream]).inc();
        m.tasks.with_label_values(&[&record.owner.tenant, record.status.as_str()]).inc();
        tracing::info!(target: "taskgate::audit", task = %record.id, tenant = %record.owner.tenant, principal = %record.owner.principal, upstream = %record.upstream, ttl_ms = ?record.ttl_ms, "task created");
        let actor = TaskActor::new(shared.clone(), start);
        let id = actor.id.clone();
        let actor = actor.start();
        // Registered before the answer, so a tasks/result right after finds the task running.
        service.register(&id, actor, native);
        Ok(record)
    }

    /// The input requests of the requestor's task that are outstanding, by key: its actor's
    /// when it runs here, else the shared store's (written by the replica running it). A task
    /// of someone else is not found.
    pub async fn input_requests(
        &self,
        requestor: &Identity,
        task_id: &str,
    ) -> Result<Vec<(String, Value)>, GatewayError> {
        match self.store.get(task_id).await.map_err(store_error)? {
            Some(record) if record.owner == owner(requestor) => {}
            _ => return Err(not_found()),
        }
        if let Some(actor) = self.actor(task_id) {
            if let Ok(inputs) = actor.send(ListInputs).await {
                return Ok(inputs);
            }
        }
        if !self.store.shared() {
            return Ok(Vec::new());
        }
        self.store.inputs(task_id).await.map_err(store_error)
    }

    /// Answers to the requestor's task's input requests (JSON-RPC responses whose ids are the
    /// requests' keys), for whichever replica runs the task: its actor here, or the others
    /// through the store's events. They are no longer listed from this moment. A task of
    /// someone else is not found.
    pub async fn answer_inputs(
        &self,
        requestor: &Identity,
        task_id: &str,
        responses: Vec<taskgate_protocol::Message>,
    ) -> Result<(), GatewayError> {
        match self.store.get(task_id).await.map_err(store_error)? {
            Some(record) if record.owner == owner(requestor) => {}
            _ => return Err(not_found()),
        }
        self.deliver_inputs(task_id, responses).await;
        Ok(())
    }

    /// [`TaskService::answer_inputs`] once the owner is known.
    pub(crate) async fn deliver_inputs(&self, task_id: &str, responses: Vec<taskgate_protocol::Message>) {
        if responses.is_empty() {
            return;
        }
        let keys: Vec<String> = responses
            .iter()
            .filter_map(|r| r.id())
            .filter_map(|id| id.to_value().as_str().map(str::to_owned))
            .collect();
        if let Some(actor) = self.actor(task_id) {
            // ext-tasks "Task Update Requests": answered requests are no longer listed once
            // this returns: the actor drops them as it handles this (before a later ListInputs),
            // and the shared store's copies go first.
            if actor.try_send(DeliverInputs(responses)).is_err() {
                self.metrics.mailbox_full.with_label_values(&["task_mailbox"]).inc();
                tracing::info!(task = %task_id, "the task's queue is full; answers to its input requests were dropped");
                return;
            }
            if self.store.shared() {
                if let Err(e) = self.store.remove_inputs(task_id, &keys).await {
                    tracing::debug!(task = %task_id, error = %e, "answered input requests stay listed until the task ends");
                }
            }
            return;
        }
        if !self.store.shared() {
            tracing::debug!(task = %task_id, "answers to the input requests of a task no longer running were ignored");
            return;
        }
        if let Err(e) = self.store.remove_inputs(task_id, &keys).await {
            tracing::debug!(task = %task_id, error = %e, "answered input requests stay listed until the task ends");
        }
        let responses = responses.iter().map(taskgate_protocol::Message::to_value).collect();
        self.publish(StoreEvent::InputResponses { task_id: task_id.to_owned(), responses });
    }

    /// `tasks/cancel`: the task is `cancelled` before the answer is sent, and its work stops.
    pub(crate) async fn cancel(self: Arc<Self>, identity: Identity, task_id: String) -> Result<Value, GatewayError> {
        let record = self.owned(&identity, &task_id).await?;
        if record.status.is_terminal() {
            // basic/utilities/tasks: MUST reject with -32602 for tasks already terminal.
            return Err(already_terminal(record.status));
        }
        if self.unwritten.waits(&task_id) {
            // Its actor waits for the store to take its last change; the cancel would wait too.
            return Err(GatewayError::StoreUnavailable(
                "the task's last status change waits for the task store, which is failing; retry".into(),
            ));
        }
        if let Some(actor) = self.actor(&task_id) {
            // If the actor stopped meanwhile (the task just finished), the store answers below.
            if let Ok(cancelled) = actor.send(Cancel).await {
                return cancelled.map(|r| r.view().to_value());
            }
        }
        let current = self.store.get(&task_id).await.map_err(store_error)?.ok_or_else(not_found)?;
        if current.status.is_terminal() {
            return Err(already_terminal(current.status));
        }
        let cancelled =
            self.store.compare_and_set(&task_id, current.status, self.cancel_update()).await.map_err(|e| match e {
                StoreError::NotFound => not_found(),
                StoreError::Conflict { current } => already_terminal(current),
                e => store_error(e),
            })?;
        self.metrics.tasks.with_label_values(&[&cancelled.owner.tenant, current.status.as_str()]).dec();
        self.metrics.tasks.with_label_values(&[&cancelled.owner.tenant, cancelled.status.as_str()]).inc();
        // Another replica may run it: its work stops there.
        self.publish(StoreEvent::Cancelled { task_id: task_id.clone() });
        self.announce(&identity, cancelled.view().to_value());
        self.finished(&task_id);
        tracing::info!(target: "taskgate::audit", task = %task_id, tenant = %identity.tenant, principal = %identity.principal, "task cancelled");
        Ok(cancelled.view().to_value())
    }
}

impl crate::progress::TaskProgressSink for TaskService {
    fn task_progress(&self, owner: &Identity, task_id: &str, requester: &str, params: Value) -> bool {
        TaskService::task_progress(self, owner, task_id, requester, params)
    }
}
