//! A task's input requests (a relayed elicitation, sampling or roots request made for the task):
//! kept with the session holding each, in the store when replicas share it, answered through
//! the task, and let go when the task ends.

use crate::forwarded_call::ClientResponse;
use crate::tasks::messages::{DeliverInputs, InputProvided, InputRequested, ListInputs};
use crate::tasks::work::{Input, Work};
use actix::prelude::*;
use taskgate_protocol::tasks::TaskStatus;
use taskgate_protocol::RequestId;

use super::TaskActor;

/// How long a task's input request is kept in a shared store when the task has no ttl.
const INPUT_KEEP_MS: u64 = 24 * 60 * 60 * 1000;

impl Handler<InputRequested> for TaskActor {
    type Result = ();

    fn handle(&mut self, InputRequested { key, request, session }: InputRequested, ctx: &mut Context<Self>) {
        let store = self.shared.tasks.store().clone();
        self.inputs.retain(|i| i.key != key);
        if self.inputs.len() >= MAX_INPUTS {
            // Never answered through the task (its session still holds it for a stream).
            tracing::warn!(task = %self.id, "a task has {MAX_INPUTS} input requests outstanding; another is not listed");
            return self.wait_for_input(ctx);
        }
        self.inputs.push(Input { key: key.clone(), request: request.clone(), session });
        if !store.shared() {
            return self.wait_for_input(ctx);
        }
        let keep = match self.expires_at_ms() {
            Some(at) => at.saturating_sub(self.shared.clock.now_ms()).max(1),
            None => INPUT_KEEP_MS,
        };
        let id = self.id.clone();
        let put = async move { store.put_input(&id, &key, &request, keep).await };
        // Stored before the status says input_required, so any replica that sees the status
        // lists the request. (The status change is made once the write is done: waits queued
        // in one handler run last first.)
        ctx.wait(put.into_actor(self).map(|written, act, ctx| {
            match written {
                Ok(()) => act.shared.tasks.input_stored(act.owner.who(), &act.id),
                Err(e) => tracing::warn!(task = %act.id, error = %e, "a task's input request could not be stored; only this replica lists it"),
            }
            act.wait_for_input(ctx);
        }));
    }
}

impl TaskActor {
    /// A task with an input request outstanding waits in `input_required` (a native upstream
    /// reports its own status too, which says when it is working again).
    fn wait_for_input(&mut self, ctx: &mut Context<Self>) {
        if self.status == TaskStatus::Working && !self.inputs.is_empty() {
            self.settle(TaskStatus::InputRequired, Some("Waiting for input from the client".into()), None, ctx);
        }
    }
}

/// Input requests a task holds at once (each is also bounded by its session's relay limits).
const MAX_INPUTS: usize = 256;

impl Handler<InputProvided> for TaskActor {
    type Result = ();

    fn handle(&mut self, InputProvided { key }: InputProvided, ctx: &mut Context<Self>) {
        self.input_answered(key, ctx);
    }
}

impl TaskActor {
    /// An input request is answered (or withdrawn): no longer listed, and a wrapped task
    /// waiting on it alone is working again.
    fn input_answered(&mut self, key: String, ctx: &mut Context<Self>) {
        if !self.inputs.iter().any(|i| i.key == key) {
            return;
        }
        self.inputs.retain(|i| i.key != key);
        let store = self.shared.tasks.store().clone();
        if store.shared() {
            let id = self.id.clone();
            actix::spawn(async move {
                if let Err(e) = store.remove_inputs(&id, &[key]).await {
                    tracing::debug!(task = %id, error = %e, "an answered input request stays listed until the task ends");
                }
            });
        }
        if matches!(self.work, Work::Wrapped { .. })
            && self.status == TaskStatus::InputRequired
            && self.inputs.is_empty()
        {
            self.settle(TaskStatus::Working, None, None, ctx);
        }
    }
}

impl Handler<DeliverInputs> for TaskActor {
    type Result = ();

    fn handle(&mut self, DeliverInputs(responses): DeliverInputs, ctx: &mut Context<Self>) {
        for response in responses {
            let Some(RequestId::String(key)) = response.id().cloned() else { continue };
            let Some(Input { session, .. }) = self.inputs.iter().find(|i| i.key == key) else {
                tracing::debug!(task = %self.id, "an answer to an input request not outstanding was ignored");
                continue;
            };
            if session
                .answer
                .upgrade()
                .is_none_or(|answer| answer.try_send(ClientResponse(response, self.extras.subject().cloned())).is_err())
            {
                tracing::info!(task = %self.id, "the session holding an input request is gone; its answer was dropped");
                continue;
            }
            // ext-tasks "Task Update Requests": an answered request is no longer listed from
            // the acknowledgment on (a tasks/get after it is handled after this; the shared
            // store's copy is removed before the acknowledgment, in `deliver_inputs`).
            self.input_answered(key, ctx);
        }
    }
}

impl Handler<ListInputs> for TaskActor {
    type Result = MessageResult<ListInputs>;

    fn handle(&mut self, _: ListInputs, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.inputs.iter().map(|i| (i.key.clone(), i.request.clone())).collect())
    }
}
