//! A wrapped task's first questions, asked in the call that makes it. A server that speaks the
//! tasks extension may ask for input before it decides on a task (ext-tasks with
//! basic/patterns/mrtr: `input_required` first, `CreateTaskResult` on the retry); a tool the
//! gateway wraps does the same when its upstream's `tool_first_input_wait_ms` names it. For
//! that long after a 2026-07-28 client's call makes the task, the task's requests go on the
//! call's own stream (its front door answers them as `input_required`, and the call's retry
//! answers them); the task is shown once that long has passed with no question outstanding, or
//! as soon as it ends.
//! A call its client gives up on before that has its task cancelled: no one else knows of it.

use std::time::Duration;

use actix::prelude::*;
use serde_json::Value;
use taskgate_protocol::RequestId;

use super::unshown::Pending;
use super::SessionActor;

impl SessionActor {
    /// Request `id`'s task `task` exists and may ask first: its questions come on the
    /// request's stream from now on (it is a request waiting on the task).
    pub(super) fn ask_first(&mut self, id: &RequestId, task: &str) {
        if let Some(request) = self.requests.get_mut(id) {
            request.task = Some(task.to_owned());
        }
    }

    /// The task made for request `id` is stored: the call is answered `result` once `wait` has
    /// passed with none of the task's questions outstanding.
    pub(super) fn hold_task(&mut self, id: RequestId, result: Value, wait: Duration, ctx: &mut Context<Self>) {
        let Some(task) = result.pointer("/task/taskId").and_then(Value::as_str).map(str::to_owned) else {
            return self.finish(id, Ok(result));
        };
        // Its client left while the task was being made: no one will ever know of it.
        if self.requests.get(&id).is_none_or(|r| r.reply.is_closed()) {
            if let Some(request) = self.forget(&id) {
                request.reply.close();
            }
            return self.cancel_unshown(task);
        }
        let timer = Some(self.show_after(&id, wait, ctx));
        // A task that ends within the wait is shown at once.
        let ending = self.shared.tasks.clone().ended(task.clone());
        let of = task.clone();
        let ended = Some(ctx.spawn(ending.into_actor(self).map(move |(), act, ctx| act.unshown_task_ended(&of, ctx))));
        self.asking.insert(id, Pending { task, result, wait, timer, ended });
    }

    fn show_after(&self, id: &RequestId, wait: Duration, ctx: &mut Context<Self>) -> SpawnHandle {
        let id = id.clone();
        ctx.run_later(wait, move |act, ctx| act.waited(id, ctx))
    }

    fn waited(&mut self, id: RequestId, ctx: &mut Context<Self>) {
        let Some(pending) = self.asking.get_mut(&id) else { return };
        pending.timer = None;
        // A question still open while the call's client can still answer it: the wait
        // starts again once it is answered (or its task ends).
        let open = self.requests.get(&id).is_some_and(|r| !r.reply.is_closed());
        if open && self.asked.for_task(&pending.task) {
            return;
        }
        self.show_task(id, ctx);
    }

    /// `task` ended: a call waiting to show it shows it now (or, left by its client, is over).
    pub(super) fn unshown_task_ended(&mut self, task: &str, ctx: &mut Context<Self>) {
        if let Some(id) = self.asking.call_of(task) {
            self.show_task(id, ctx);
        }
    }

    /// A question of a task waiting to be shown has no call stream to go on (its client left
    /// before the question came): the call and its task are over.
    pub(super) fn question_without_its_call(&mut self, task: &str, ctx: &mut Context<Self>) {
        if let Some(id) = self.asking.call_of(task) {
            self.abandon_first(&id, ctx);
        }
    }

    /// Answers the call with its task; a call its client has left has its task cancelled.
    fn show_task(&mut self, id: RequestId, ctx: &mut Context<Self>) {
        let Some(pending) = self.asking.take(&id) else { return };
        for handle in [pending.timer, pending.ended].into_iter().flatten() {
            ctx.cancel_future(handle);
        }
        match self.requests.get(&id) {
            Some(request) if !request.reply.is_closed() => self.finish(id, Ok(pending.result)),
            _ => {
                if let Some(request) = self.forget(&id) {
                    request.reply.close();
                }
                self.cancel_unshown(pending.task);
            }
        }
    }

    /// One of `task`'s questions was answered or withdrawn: a call waiting to show it waits
    /// again from now.
    pub(super) fn answered_first(&mut self, task: &str, ctx: &mut Context<Self>) {
        let Some(id) = self.asking.call_of(task) else { return };
        let Some(wait) = self.asking.get_mut(&id).map(|p| p.wait) else { return };
        let timer = self.show_after(&id, wait, ctx);
        if let Some(old) = self.asking.get_mut(&id).and_then(|p| p.timer.replace(timer)) {
            ctx.cancel_future(old);
        }
    }

    /// The client cancelled request `id` before it was shown its task: the task is cancelled.
    /// False when the request holds no task unshown.
    pub(super) fn abandon_first(&mut self, id: &RequestId, ctx: &mut Context<Self>) -> bool {
        let Some(pending) = self.asking.take(id) else { return false };
        for handle in [pending.timer, pending.ended].into_iter().flatten() {
            ctx.cancel_future(handle);
        }
        if let Some(request) = self.forget(id) {
            request.reply.close();
        }
        self.cancel_unshown(pending.task);
        true
    }

    /// Cancels the tasks of the calls still waiting to show them (the session is ending).
    pub(super) fn abandon_all_first(&mut self) {
        for pending in self.asking.take_all() {
            self.cancel_unshown(pending.task);
        }
    }

    fn cancel_unshown(&self, task: String) {
        let (tasks, identity) = (self.shared.tasks.clone(), self.identity.clone());
        tracing::info!(session = %self.id, %task, "a task its client left before it was shown is cancelled");
        actix::spawn(async move {
            if let Err(e) = tasks.cancel(identity, task).await {
                tracing::debug!(error = %e, "an unshown task could not be cancelled");
            }
        });
    }
}
