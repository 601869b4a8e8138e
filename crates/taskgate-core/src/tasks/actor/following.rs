//! Following a task the upstream runs (a native task): polling its status, taking the status it
//! announces, fetching its result once it is terminal.

use std::time::Duration;

use crate::progress::Progress;
use crate::tasks::messages::UpstreamStatus;
use crate::tasks::work::Work;
use actix::prelude::*;
use serde_json::{json, Value};
use taskgate_protocol::mcp::{meta, methods};
use taskgate_protocol::tasks::{TaskStatus, UpstreamTask};
use taskgate_protocol::{codes, ErrorObject};
use taskgate_store::{TaskOutcome, Update};
use taskgate_upstream::UpstreamError;

use super::TaskActor;

/// Bounds on how often a native upstream task is polled.
const MIN_POLL: Duration = Duration::from_millis(50);
const MAX_POLL: Duration = Duration::from_secs(30);
/// Progress notifications of an upstream task held until its forwarder takes them.
const PROGRESS_BUFFER: usize = 64;
/// Consecutive failed polls after which a native task is failed.
const MAX_POLL_FAILURES: u32 = 5;

impl TaskActor {
    /// Forwards a native task's progress (routed by its token) for as long as it lives.
    pub(super) fn forward_native_progress(&mut self) {
        let Work::Native(native) = &mut self.work else { return };
        if let (Some((_, notes)), Some(actor)) = (native.progress_route.as_mut(), self.progress.clone()) {
            let mut notes = std::mem::replace(notes, taskgate_upstream::channel(1).1);
            // Outside the actor, like a wrapped call: it ends when the route is dropped.
            native.forwarder = Some(actix::spawn(async move {
                while let Some(note) = notes.recv().await {
                    if let taskgate_protocol::Message::Notification { params: Some(params), .. } = note {
                        if actor.send(Progress(params)).await.is_err() {
                            return;
                        }
                    }
                }
            }));
        }
    }

    /// The upstream made the task's call a task of its own (it speaks the tasks extension and
    /// so decided): the task now follows it, as a native task, under the same id. The store
    /// learns the upstream's id, so that a restarted gateway follows it again.
    pub(super) fn follow_upstream_task(&mut self, up: UpstreamTask, ctx: &mut Context<Self>) {
        let upstream = self.session.upstream().to_owned();
        if let Work::Wrapped { upstream_id, .. } = &self.work {
            self.shared.tasks.forget_call(&upstream, upstream_id);
        }
        let poll = up.poll_interval_ms.map_or(MIN_POLL, Duration::from_millis).clamp(MIN_POLL, MAX_POLL);
        let route = self.extras.take_upstream_token().filter(|_| self.progress.is_some()).map(|token| {
            let (sink, notes) = taskgate_upstream::channel(PROGRESS_BUFFER);
            (self.session.route_progress(&token, sink), notes)
        });
        self.work = crate::tasks::Native::work(up.task_id.clone(), poll, route);
        self.forward_native_progress();
        self.shared.tasks.register_native((upstream, up.task_id.clone()), &self.id);
        let store = self.shared.tasks.store().clone();
        let mut update = Update {
            status: self.status,
            status_message: up.status_message.clone().or_else(|| self.extras.status_message().map(str::to_owned)),
            outcome: None,
            upstream_task_id: Some(up.task_id.clone()),
            upstream_session: None,
            now_ms: self.shared.clock.now_ms(),
        };
        let (id, expected, session) = (self.id.clone(), self.status, self.session.clone());
        let (unwritten, metrics) = (self.shared.tasks.unwritten.clone(), self.shared.metrics.clone());
        // The upstream's id is what a restart needs to follow the task: written before anything
        // else the task does, tried again while the store fails.
        let change = async move {
            update.upstream_session = session.resume_point().await.map(|r| taskgate_store::UpstreamSessionRef {
                session_id: r.session_id,
                protocol_version: r.protocol_version,
            });
            super::super::unwritten::write_change(store, unwritten, metrics, id, expected, update).await
        };
        ctx.wait(change.into_actor(self).map(move |stored, act, ctx| {
            if let Err(e) = stored {
                tracing::warn!(task = %act.id, error = %e, "the upstream's id for a task could not be stored; a restart cannot follow it");
            }
            tracing::info!(task = %act.id, upstream = act.session.upstream(), "the upstream made the task's call a task of its own; following it");
            act.observe(up, ctx);
        }));
    }

    /// `call`, its upstream requests made for the access token of the request that created the
    /// task (when its upstream exchanges callers' tokens).
    pub(super) fn for_creator<F: std::future::Future>(&self, call: F) -> impl std::future::Future<Output = F::Output> {
        taskgate_upstream::made_for(self.extras.subject().cloned(), call)
    }

    /// When the access token of the request that created the task has expired (its upstream
    /// exchanges callers' tokens): the task fails, saying so, before anything more is asked of
    /// the upstream for it.
    pub(super) fn creator_token_expired(&mut self, ctx: &mut Context<Self>) -> bool {
        let now_secs = self.shared.clock.now_ms() / 1000;
        if !self.extras.subject().is_some_and(|s| s.expired(now_secs)) {
            return false;
        }
        let why = format!(
            "upstream '{}' is called with the caller's own identity, and the access token of the request that created the \
             task has expired: nothing more can be asked of the upstream for it",
            self.session.upstream()
        );
        let outcome = TaskOutcome::Error(ErrorObject::new(codes::UPSTREAM_UNAVAILABLE, why));
        self.settle(
            TaskStatus::Failed,
            Some("The access token that created the task expired".into()),
            Some(outcome),
            ctx,
        );
        true
    }

    pub(super) fn schedule_poll(&mut self, ctx: &mut Context<Self>) {
        if let Work::Native(native) = &self.work {
            ctx.run_later(native.poll, |act, ctx| act.poll(ctx));
        }
    }

    pub(super) fn poll(&mut self, ctx: &mut Context<Self>) {
        if self.status.is_terminal() || self.creator_token_expired(ctx) {
            return;
        }
        let Work::Native(native) = &self.work else { return };
        let session = self.session.clone();
        let params = json!({"taskId": native.upstream_task_id});
        let get = self.for_creator(async move { session.request(methods::TASKS_GET, Some(params)).await });
        ctx.spawn(get.into_actor(self).map(|result, act, ctx| match result {
            Ok(task) => match taskgate_protocol::tasks::TaskView::from_value(&task) {
                Some(up) => act.observe(up, ctx),
                None => act.poll_failed("tasks/get answered without a valid task".into(), ctx),
            },
            Err(UpstreamError::Rpc { error, .. }) if error.code == codes::INVALID_PARAMS => {
                let outcome = TaskOutcome::Error(ErrorObject::new(
                    codes::UPSTREAM_UNAVAILABLE,
                    format!("upstream '{}' no longer knows the task: {}", act.session.upstream(), error.message),
                ));
                act.settle(TaskStatus::Failed, Some("The upstream lost the task".into()), Some(outcome), ctx);
            }
            Err(e) => act.poll_failed(e.to_string(), ctx),
        }));
    }

    pub(super) fn poll_failed(&mut self, why: String, ctx: &mut Context<Self>) {
        let Work::Native(native) = &mut self.work else { return };
        if self.shared.stopping.load(std::sync::atomic::Ordering::Relaxed) {
            // The gateway is shutting down (a stdio upstream is stopped with it): the task is
            // left to the recovery of the next start, which follows it again or says why not.
            tracing::debug!(task = %self.id, %why, "polling the upstream task failed during shutdown");
            return;
        }
        native.poll_failures += 1;
        let failures = native.poll_failures;
        tracing::info!(task = %self.id, failures, %why, "polling the upstream task failed");
        if failures >= MAX_POLL_FAILURES {
            let error = ErrorObject::new(
                codes::UPSTREAM_UNAVAILABLE,
                format!("upstream '{}' stopped answering about the task: {why}", self.session.upstream()),
            );
            self.settle(
                TaskStatus::Failed,
                Some(format!("Lost contact with upstream '{}'", self.session.upstream())),
                Some(TaskOutcome::Error(error)),
                ctx,
            );
        } else {
            self.schedule_poll(ctx);
        }
    }

    /// A status seen at the upstream (by polling or `notifications/tasks/status`).
    pub(super) fn observe(&mut self, up: UpstreamTask, ctx: &mut Context<Self>) {
        let Work::Native(native) = &mut self.work else { return };
        native.poll_failures = 0;
        if let Some(ms) = up.poll_interval_ms {
            native.poll = Duration::from_millis(ms).clamp(MIN_POLL, MAX_POLL);
        }
        if self.status.is_terminal() {
            return;
        }
        if up.status.is_terminal() {
            let fetched = match &mut self.work {
                Work::Native(native) => native.fetched.take(),
                Work::Wrapped { .. } => None,
            };
            match fetched {
                Some(outcome) => self.settle(up.status, up.status_message, Some(*outcome), ctx),
                None => self.fetch_result(ctx),
            }
            return;
        }
        // ext-tasks "Task Polling": a task in input_required lists what it waits for. The
        // upstream's requests come on the tasks/result stream, after its status says so: the
        // status follows when the first of them is here (`wait_for_input`).
        let before_its_requests = up.status == TaskStatus::InputRequired && self.inputs.is_empty();
        if !before_its_requests
            && (up.status != self.status || up.status_message.as_deref() != self.extras.status_message())
        {
            self.settle(up.status, up.status_message, None, ctx);
        }
        if up.status == TaskStatus::InputRequired {
            // The upstream delivers what it needs from the requestor on the tasks/result stream
            // (basic/utilities/tasks "Input Required Status"): open it now.
            self.fetch_result(ctx);
        }
        self.schedule_poll(ctx);
    }

    /// Calls the upstream's `tasks/result` once: it returns when the upstream task is terminal
    /// (carrying, on its stream, whatever the upstream needs from the requestor meanwhile). The
    /// outcome is kept, and a poll learns the terminal status it goes with.
    pub(super) fn fetch_result(&mut self, ctx: &mut Context<Self>) {
        let Work::Native(native) = &mut self.work else { return };
        if native.fetching_result || native.fetched.is_some() {
            return;
        }
        native.fetching_result = true;
        let session = self.session.clone();
        let params = json!({"taskId": native.upstream_task_id});
        let request_id = session.next_request_id();
        self.shared.tasks.track_call(session.upstream(), request_id.clone(), &self.id);
        let key = request_id.clone();
        let fetch = self
            .for_creator(async move { session.request_with_id(request_id, methods::TASKS_RESULT, Some(params)).await });
        let running = ctx.spawn(fetch.into_actor(self).map(move |result, act, ctx| {
            act.shared.tasks.forget_call(act.session.upstream(), &key);
            let Work::Native(native) = &mut act.work else { return };
            native.running = None;
            native.fetching_result = false;
            match result {
                Ok(value) => native.fetched = Some(Box::new(TaskOutcome::Result(without_upstream_task(value)))),
                // The upstream's JSON-RPC error for the task is the underlying request's error.
                Err(UpstreamError::Rpc { error, .. }) => native.fetched = Some(Box::new(TaskOutcome::Error(*error))),
                Err(e) => {
                    tracing::info!(task = %act.id, error = %e, "fetching the upstream task result failed; polling on")
                }
            }
            act.poll(ctx);
        }));
        if let Work::Native(native) = &mut self.work {
            native.running = Some(running);
        }
    }
}

/// Drops the upstream's related-task `_meta` (it names the upstream's task id, which clients
/// never see); `tasks/result` adds the gateway's own.
fn without_upstream_task(mut result: Value) -> Value {
    if let Some(Value::Object(m)) = result.get_mut("_meta") {
        m.remove(meta::RELATED_TASK);
    }
    result
}

impl Handler<UpstreamStatus> for TaskActor {
    type Result = ();

    fn handle(&mut self, UpstreamStatus(up): UpstreamStatus, ctx: &mut Context<Self>) {
        self.observe(up, ctx);
    }
}
