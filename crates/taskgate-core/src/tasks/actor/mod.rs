//! [`TaskActor`]: one per live task. It owns the upstream work and its ttl (a deadline on the one
//! timer of [`super::expiries`]); status changes
//! go through the store's compare-and-set, checked by the one transition rule. When the task is
//! terminal it tells the [`super::TaskService`] (which wakes the `tasks/result` waiters) and
//! stops; the record stays in the store until its ttl ends.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

#[cfg(any(test, feature = "test-hooks"))]
use super::messages::Crash;
use super::messages::{Cancel, Expire, StoppedElsewhere};
use super::requestor_sessions::{InputHolder, TaskEnded};
use super::task_context::TaskContext;
use super::work::{abort_call, Call, CallState, Extras, Input, Owner, Remains, Restart, TaskStart, Unsent, Work};
use super::{not_found, settle_call, store_error};
use crate::progress::{Abandon, Finish, ProgressActor};
use crate::GatewayError;

use actix::prelude::*;
use serde_json::{json, Value};
use taskgate_protocol::mcp::methods;
use taskgate_protocol::tasks::TaskStatus;
use taskgate_protocol::{codes, ErrorObject, RequestId};
use taskgate_store::{StoreError, TaskOutcome, TaskRecord, Update};
use taskgate_upstream::{UpstreamError, UpstreamSession};

mod following;
mod inputs;

/// What a task actor shares with the rest of the task layer, its fellow actors known by their
/// addresses.
pub(crate) type TaskShared = TaskContext<Addr<TaskActor>>;

/// How long a task's end waits for its progress forwarder to pass on what it holds.
const FORWARDER_DRAIN: Duration = Duration::from_secs(1);

/// One task.
pub struct TaskActor {
    /// Shared with the service's tables of actors and calls.
    pub(crate) id: Arc<str>,
    shared: Arc<TaskShared>,
    owner: Owner,
    status: TaskStatus,
    /// Its status message and a wrapped call's progress token at the upstream.
    extras: Extras,
    /// When the task expires, in ms since the epoch (never: `None`; 0 is kept as 1, an
    /// instant as long past).
    expires_at: Option<std::num::NonZeroU64>,
    session: UpstreamSession,
    work: Work,
    progress: Option<Addr<ProgressActor>>,
    /// A wrapped task's running call and where its outcome lands.
    call: Option<Call>,
    /// Restarted from [`Remains`]: the work is already running.
    restarted: bool,
    /// `stopped` ran: dropping the actor is the normal end, not a crash.
    stopped_cleanly: bool,
    /// Input requests outstanding, in the order they came.
    inputs: Vec<Input>,
}

impl TaskActor {
    pub(crate) fn new(shared: Arc<TaskShared>, start: TaskStart) -> TaskActor {
        // One copy of the id for the task's entries in every table: the holdings' own.
        let id = shared.tasks.holdings.shared_id(&start.record.id).unwrap_or_else(|| start.record.id.as_str().into());
        let mut work = start.work;
        match &mut work {
            Work::Wrapped { unsent: Some(unsent), .. } => unsent.span = start.span,
            Work::Native(native) => native.span = start.span,
            Work::Wrapped { unsent: None, .. } => {}
        }
        let mut actor = TaskActor {
            id,
            shared,
            owner: Owner::new(start.owner, start.permit),
            status: start.record.status,
            extras: Extras::default(),
            expires_at: start.record.expires_at_ms().map(|at| std::num::NonZeroU64::new(at.max(1)).expect("not 0")),
            session: start.session,
            work,
            progress: start.progress,
            call: None,
            restarted: false,
            stopped_cleanly: false,
            inputs: Vec::new(),
        };
        actor.extras.set_status_message(start.record.status_message.as_deref());
        actor.extras.set_subject(start.subject);
        actor
    }

    /// An actor for a task whose previous actor stopped abnormally: its state comes from the
    /// store, its work and permit from what the old actor left.
    pub(crate) fn restarted(shared: Arc<TaskShared>, record: &TaskRecord, remains: Remains) -> TaskActor {
        let (owner, permit) = remains.owner.into_parts();
        let mut work = remains.work;
        if let Work::Native(native) = &mut work {
            // The old context's futures went with it.
            (native.running, native.fetching_result) = (None, false);
        }
        let start = TaskStart {
            record: record.clone(),
            owner,
            session: remains.session,
            work,
            progress: remains.progress,
            permit,
            span: None,
            subject: remains.subject,
        };
        let mut actor = TaskActor::new(shared, start);
        actor.call = remains.call;
        actor.inputs = remains.inputs;
        actor.restarted = true;
        actor
    }

    fn expires_at_ms(&self) -> Option<u64> {
        self.expires_at.map(std::num::NonZeroU64::get)
    }

    /// Settles the task with its wrapped call's outcome; or, when the upstream answered the
    /// call with a task of its own (a `CreateTaskResult`: a task, no `content`), follows it.
    fn call_ended(
        &mut self,
        joined: Result<Result<Value, UpstreamError>, tokio::task::JoinError>,
        ctx: &mut Context<Self>,
    ) {
        if let Ok(Ok(result)) = &joined {
            let made = result.get("content").is_none().then(|| result.get("task")).flatten();
            if let Some(up) = made.and_then(taskgate_protocol::tasks::TaskView::from_value) {
                return self.follow_upstream_task(up, ctx);
            }
        }
        let (status, message, outcome) = match joined {
            // Cut by the gateway's own shutdown (it stops the stdio upstreams): the task says so,
            // not that the upstream failed.
            Ok(Err(_)) | Err(_) if self.shared.stopping.load(Ordering::Relaxed) => {
                let why = format!(
                    "The gateway shut down while the task ran; its call to upstream '{}' ended with it. Run the tool again.",
                    self.session.upstream()
                );
                let error = ErrorObject::new(codes::UPSTREAM_UNAVAILABLE, why.clone());
                (TaskStatus::Failed, Some(why), TaskOutcome::Error(error))
            }
            Ok(outcome) => settle_call(outcome),
            // Only a bug ends a call this way (it is aborted only with its actor's context gone).
            Err(e) => {
                tracing::error!(task = %self.id, error = %e, "a wrapped task's upstream call ended abnormally");
                let error = GatewayError::Internal("the upstream call ended abnormally".into()).error_object();
                (TaskStatus::Failed, Some(format!("Tool call failed: {}", error.message)), TaskOutcome::Error(error))
            }
        };
        self.settle(status, message, Some(outcome), ctx);
    }

    /// Applies a status change through the store (compare-and-set against the status this actor
    /// last saw), then tells the requestor and, when terminal, wakes the waiters and stops.
    fn settle(
        &mut self,
        status: TaskStatus,
        message: Option<String>,
        outcome: Option<TaskOutcome>,
        ctx: &mut Context<Self>,
    ) {
        let (status, message, outcome) = self.within_budget(status, message, outcome);
        let store = self.shared.tasks.store().clone();
        let update = Update {
            status,
            status_message: message,
            outcome,
            upstream_task_id: None,
            upstream_session: None,
            now_ms: self.shared.clock.now_ms(),
        };
        let (id, expected) = (self.id.clone(), self.status);
        let (unwritten, metrics) = (self.shared.tasks.unwritten.clone(), self.shared.metrics.clone());
        // Tried again for as long as the store fails: the change is what the client was
        // promised. Waiting keeps status changes in order; the memory store answers at once.
        let change = super::unwritten::write_change(store, unwritten, metrics, id, expected, update);
        ctx.wait(change.into_actor(self).map(|result, act, ctx| act.settled(result, ctx)));
    }

    /// A result is held only within its tenant's share of result bytes and the gateway's
    /// `tasks.max_result_bytes_total`; one that does not fit makes the task `failed`, saying so
    /// (never a silent drop).
    fn within_budget(
        &self,
        status: TaskStatus,
        message: Option<String>,
        outcome: Option<TaskOutcome>,
    ) -> (TaskStatus, Option<String>, Option<TaskOutcome>) {
        let Some(held) = &outcome else { return (status, message, outcome) };
        let bytes = serde_json::to_vec(held).map_or(0, |v| v.len());
        let tenant = &self.owner.who().tenant;
        let share = self.shared.tenancy.policy(tenant).shares.result_bytes;
        let total = self.shared.config.tasks.max_result_bytes_total;
        match self.shared.tasks.holdings.hold_result(&self.id, tenant, self.expires_at_ms(), bytes, (share, total)) {
            Ok(()) => (status, message, outcome),
            Err(too_large) => {
                let why = match too_large {
                    super::TooLarge::Tenant { limit } => format!(
                        "the task's result ({bytes} bytes) does not fit: tenant \"{tenant}\" may hold {limit} bytes of results (limits.max_result_bytes, or its share of tasks.max_result_bytes_total)"
                    ),
                    super::TooLarge::Gateway { limit } => format!(
                        "the task's result ({bytes} bytes) does not fit: the gateway holds at most {limit} bytes of results (tasks.max_result_bytes_total)"
                    ),
                };
                self.shared.metrics.admission_rejected.with_label_values(&[tenant, "result_bytes"]).inc();
                tracing::warn!(target: "taskgate::audit", task = %self.id, %tenant, bytes, "task result refused: over the result byte budget");
                let error = taskgate_protocol::ErrorObject::new(taskgate_protocol::codes::LIMIT_EXCEEDED, why.clone());
                (TaskStatus::Failed, Some(why), Some(TaskOutcome::Error(error)))
            }
        }
    }

    fn settled(&mut self, result: Result<TaskRecord, StoreError>, ctx: &mut Context<Self>) {
        match result {
            Ok(record) => {
                let m = &self.shared.metrics;
                if record.status != self.status {
                    m.tasks.with_label_values(&[&self.owner.who().tenant, self.status.as_str()]).dec();
                    m.tasks.with_label_values(&[&self.owner.who().tenant, record.status.as_str()]).inc();
                }
                if record.status.is_terminal() {
                    let labels = [&*self.owner.who().tenant, self.session.upstream(), record.status.as_str()];
                    m.tasks_finished.with_label_values(&labels).inc();
                    let took = record.last_updated_at_ms.saturating_sub(record.created_at_ms) as f64 / 1000.0;
                    m.task_duration.with_label_values(&labels).observe(took);
                }
                self.status = record.status;
                self.extras.set_status_message(record.status_message.as_deref());
                if !record.status.is_terminal() {
                    self.announce(&record);
                    return;
                }
                // The task's place under its caps is free from the moment it is terminal, before
                // anyone hears of it, so a requestor told "done" may start another at once.
                self.owner.release();
                tracing::info!(target: "taskgate::audit", task = %self.id, tenant = %self.owner.who().tenant, principal = %self.owner.who().principal, status = %record.status, "task finished");
                // The last progress value goes out before the terminal status and the result;
                // none after.
                let progress = self.progress.take();
                // A native task's progress that arrived before its end is forwarded first: the
                // token's route goes, and the forwarder drains what it holds and ends.
                let forwarder = match &mut self.work {
                    Work::Native(native) => {
                        native.progress_route = None;
                        native.forwarder.take()
                    }
                    Work::Wrapped { .. } => None,
                };
                let flushed = async move {
                    if let Some(forwarder) = forwarder {
                        let _ = tokio::time::timeout(FORWARDER_DRAIN, forwarder).await;
                    }
                    if let Some(progress) = progress {
                        let _ = progress.send(Finish).await;
                    }
                };
                ctx.wait(flushed.into_actor(self).map(move |_, act, ctx| {
                    act.announce(&record);
                    act.shared.tasks.finished(&act.id);
                    ctx.stop();
                }));
            }
            Err(StoreError::Conflict { current }) => {
                // Someone else (a cancel) got there first; terminal stays terminal.
                self.status = current;
                if current.is_terminal() {
                    self.stop_work(ctx);
                    ctx.stop();
                }
            }
            Err(StoreError::NotFound) => {
                self.shared.tasks.finished(&self.id);
                self.stop_work(ctx);
                ctx.stop();
            }
            // Refused as a transition (a bug's sign): the task keeps the status it has.
            Err(e) => tracing::error!(task = %self.id, error = %e, "task status change refused"),
        }
    }

    /// notifications/tasks/status to the requestor's sessions, on every replica.
    fn announce(&self, record: &TaskRecord) {
        self.shared.tasks.announce(self.owner.who(), record.view().to_value());
    }

    /// Stops the upstream work here without telling the upstream (another replica follows it).
    fn drop_work(&mut self, ctx: &mut Context<Self>) {
        if let Some(handle) = match &mut self.work {
            Work::Native(native) => native.running.take(),
            Work::Wrapped { .. } => None,
        } {
            ctx.cancel_future(handle);
        }
        if let Some(call) = self.call.take() {
            abort_call(*call);
        }
        if let Some(progress) = self.progress.take() {
            let _ = progress.try_send(Abandon);
        }
    }

    /// Stops the upstream work: drops the running request and tells the upstream.
    fn stop_work(&mut self, ctx: &mut Context<Self>) {
        let session = self.session.clone();
        if let (Work::Wrapped { upstream_decides: true, upstream_id, .. }, Some(call)) = (&self.work, self.call.take())
        {
            // The upstream may be making the call a task: its answer says, and that task is
            // cancelled; an answer slower than a task's creation is a call still running,
            // cancelled as one.
            actix::spawn(self.for_creator(super::work::cancel_decided_call(*call, session, upstream_id.clone())));
            return self.drop_work(ctx);
        }
        self.drop_work(ctx);
        match &self.work {
            Work::Wrapped { upstream_id, .. } => {
                let params = json!({"requestId": upstream_id.to_value(), "reason": "The task was cancelled"});
                actix::spawn(self.for_creator(async move {
                    let _ = session.notify(methods::CANCELLED, Some(params)).await;
                }));
            }
            Work::Native(native) => {
                let params = json!({"taskId": native.upstream_task_id});
                actix::spawn(self.for_creator(async move {
                    let _ = session.request(methods::TASKS_CANCEL, Some(params)).await;
                }));
            }
        }
    }

    fn expire(&mut self, ctx: &mut Context<Self>) {
        let store = self.shared.tasks.store().clone();
        let id = self.id.clone();
        ctx.wait(async move { store.delete(&id).await }.into_actor(self).map(|deleted, act, ctx| {
            match deleted {
                Ok(Some(record)) => act.shared.tasks.deleted(&record),
                _ => act.shared.tasks.finished(&act.id),
            }
            act.owner.release();
            tracing::info!(target: "taskgate::audit", task = %act.id, tenant = %act.owner.who().tenant, principal = %act.owner.who().principal, "task ttl elapsed; task and result deleted");
            if !act.status.is_terminal() {
                act.stop_work(ctx);
            }
            ctx.stop();
        }));
    }
}

impl Actor for TaskActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.set_mailbox_capacity(64);
        if let Some(at) = self.expires_at_ms() {
            // On the one timer of every task's ttl ([`super::expiries`]): `Expire` comes then.
            let left = at.saturating_sub(self.shared.clock.now_ms());
            self.shared.tasks.expiries.add(&self.id, Duration::from_millis(left));
        }
        if self.restarted {
            // The work is already running (a wrapped call outside any actor, a native task at
            // the upstream): take an outcome that arrived meanwhile, or keep following it.
            match self.work {
                Work::Wrapped { .. } => {
                    ctx.spawn(AwaitCall);
                }
                Work::Native(_) => self.poll(ctx),
            }
            tracing::warn!(task = %self.id, tenant = %self.owner.who().tenant, "task actor restarted from the store");
            return;
        }
        match &mut self.work {
            Work::Wrapped { upstream_id, unsent, .. } => {
                self.shared.tasks.track_call(self.session.upstream(), upstream_id.clone(), &self.id);
                let session = self.session.clone();
                // The params move into the call: one copy per task, not two.
                let id = upstream_id.clone();
                let Unsent { params, span } = unsent.take().map_or(Unsent { params: Value::Null, span: None }, |u| *u);
                if self.progress.is_some() && params.get("task").is_some() {
                    // (Only a call the upstream decides about keeps its `task`.)
                    if let Some(token) = params.pointer("/_meta/progressToken").cloned() {
                        self.extras.set_upstream_token(token);
                    }
                }
                // Only a task with a progress token needs a channel for its call's notifications
                // (a live task costs less without one). The call runs outside the actor's
                // context (a task while it is sent, then, on stdio, the waiting call the actor
                // keeps), so a restarted actor still gets its outcome.
                let span = span.unwrap_or_else(tracing::Span::none);
                let creator = self.extras.subject().cloned();
                let call = match self.progress.clone() {
                    Some(progress) => futures_util::future::Either::Left(async move {
                        use crate::forwarded_call::{relay_call, ForwardedCall, ProgressEnds, ResultAs};
                        let call = relay_call(ForwardedCall {
                            session,
                            method: methods::TOOLS_CALL,
                            upstream_id: id,
                            params,
                            arguments: None,
                            reply: None,
                            progress: Some(progress),
                            progress_ends: ProgressEnds::Later,
                            relay: None,
                            result: ResultAs::Read,
                        });
                        taskgate_upstream::CallState::Done(call.await.map(taskgate_protocol::Payload::into_value))
                    }),
                    None => futures_util::future::Either::Right(session.into_call(
                        id,
                        methods::TOOLS_CALL,
                        Some(Box::new(params)),
                    )),
                };
                let call = tracing::Instrument::instrument(call, span);
                let sending = actix::spawn(taskgate_upstream::made_for(creator, call));
                self.call = Some(Box::new(CallState::Sending(sending)));
                ctx.spawn(AwaitCall);
            }
            Work::Native(_) => {
                self.forward_native_progress();
                self.schedule_poll(ctx);
            }
        }
        tracing::debug!(task = %self.id, tenant = %self.owner.who().tenant, upstream = self.session.upstream(), "task actor started");
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        // A panic in a handler drops the actor's context, and actix then stops the actor from
        // inside the unwinding: that is a crash, not an end. Nothing is released here; the
        // actor's `Drop` hands the work, waiters and permit to the Supervisor.
        if std::thread::panicking() {
            return;
        }
        self.stopped_cleanly = true;
        if let Some(call) = self.call.take() {
            abort_call(*call);
        }
        let store = self.shared.tasks.store().clone();
        if store.shared() && !self.inputs.is_empty() {
            let id = self.id.clone();
            actix::spawn(async move {
                let _ = store.remove_inputs(&id, &[]).await;
            });
        }
        // Requests still outstanding will never be answered: the sessions holding them let go.
        let mut told: Vec<&Arc<InputHolder>> = Vec::new();
        for input in &self.inputs {
            if !told.iter().any(|session| Arc::ptr_eq(session, &input.session)) {
                if let Some(ended) = input.session.ended.upgrade() {
                    ended.do_send(TaskEnded(self.id.to_string()));
                }
                told.push(&input.session);
            }
        }
        match &self.work {
            Work::Native(native) => {
                let native = (self.session.upstream().to_owned(), native.upstream_task_id.clone());
                self.shared.tasks.unregister(&self.id, Some(&native));
            }
            Work::Wrapped { upstream_id, .. } => {
                self.shared.tasks.unregister(&self.id, None);
                self.shared.tasks.forget_call(self.session.upstream(), upstream_id);
            }
        }
    }
}

impl Handler<Cancel> for TaskActor {
    // Atomic: no other message (the call's own completion) is handled while the cancel's
    // compare-and-set is in flight, so whichever of the two the store applies first, the
    // other sees it, and the cancel always gets its answer before the actor can stop.
    type Result = AtomicResponse<Self, Result<TaskRecord, GatewayError>>;

    fn handle(&mut self, _: Cancel, _: &mut Context<Self>) -> Self::Result {
        let store = self.shared.tasks.store().clone();
        let update = self.shared.tasks.cancel_update();
        let (id, expected) = (self.id.clone(), self.status);
        let change = async move { store.compare_and_set(&id, expected, update).await };
        AtomicResponse::new(Box::pin(change.into_actor(self).map(|result, act, ctx| match result {
            Ok(record) => {
                act.stop_work(ctx);
                act.settled(Ok(record.clone()), ctx);
                tracing::info!(target: "taskgate::audit", task = %act.id, tenant = %act.owner.who().tenant, principal = %act.owner.who().principal, "task cancelled");
                Ok(record)
            }
            Err(StoreError::Conflict { current })
            | Err(StoreError::Invalid(taskgate_protocol::tasks::InvalidTransition { from: current, .. })) => {
                Err(GatewayError::InvalidParams(format!("Cannot cancel task: already in terminal status '{current}'")))
            }
            Err(StoreError::NotFound) => Err(not_found()),
            Err(e) => Err(store_error(e)),
        })))
    }
}

impl Handler<Expire> for TaskActor {
    type Result = ();

    fn handle(&mut self, _: Expire, ctx: &mut Context<Self>) {
        self.expire(ctx);
    }
}

/// Waits in the actor's context for its wrapped call (the handle in [`TaskActor::call`]) and
/// settles the task with the outcome. The handle stays the actor's, not this future's, so an
/// actor that crashes hands it on ([`Remains`]) and the call is not made again.
struct AwaitCall;

impl ActorFuture<TaskActor> for AwaitCall {
    type Output = ();

    fn poll(
        self: std::pin::Pin<&mut Self>,
        act: &mut TaskActor,
        ctx: &mut Context<TaskActor>,
        task: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        use std::task::Poll;
        let ended = loop {
            let Some(call) = act.call.as_deref_mut() else { return Poll::Ready(()) };
            match call {
                CallState::Sending(handle) => match std::future::Future::poll(std::pin::Pin::new(handle), task) {
                    Poll::Pending => return Poll::Pending,
                    // Written to a stdio upstream: the call waits here, its task over.
                    Poll::Ready(Ok(taskgate_upstream::CallState::Waiting(waiting))) => {
                        *call = CallState::Waiting(waiting);
                    }
                    Poll::Ready(Ok(taskgate_upstream::CallState::Done(outcome))) => break Ok(outcome),
                    Poll::Ready(Err(e)) => break Err(e),
                },
                CallState::Waiting(waiting) => match std::future::Future::poll(std::pin::Pin::new(waiting), task) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(outcome) => break Ok(outcome.map(taskgate_protocol::Payload::into_value)),
                },
            }
        };
        act.call = None;
        act.call_ended(ended, ctx);
        Poll::Ready(())
    }
}

impl Handler<StoppedElsewhere> for TaskActor {
    type Result = ();

    fn handle(&mut self, msg: StoppedElsewhere, ctx: &mut Context<Self>) {
        self.owner.release();
        if msg.cancelled {
            self.stop_work(ctx);
        } else {
            self.drop_work(ctx);
        }
        tracing::info!(task = %self.id, cancelled = msg.cancelled, "task stopped here: it was settled or taken over elsewhere");
        ctx.stop();
    }
}

#[cfg(any(test, feature = "test-hooks"))]
impl Handler<Crash> for TaskActor {
    type Result = ();

    fn handle(&mut self, _: Crash, _: &mut Context<Self>) {
        panic!("task actor {} crashed on request (test hook)", self.id);
    }
}

impl Drop for TaskActor {
    /// An actor dropped without `stopped` has crashed (a panic unwound through it): what it
    /// held goes to the Supervisor, which restarts the task from the store.
    fn drop(&mut self) {
        if self.stopped_cleanly {
            return;
        }
        let Some(supervisor) = self.shared.supervisor.get() else { return };
        let who = self.owner.who().clone();
        let remains = Remains {
            id: std::mem::take(&mut self.id),
            owner: std::mem::replace(&mut self.owner, Owner::Released(who)),
            session: self.session.clone(),
            work: std::mem::replace(
                &mut self.work,
                Work::Wrapped { upstream_id: RequestId::Number(0), unsent: None, upstream_decides: false },
            ),
            progress: self.progress.take(),
            call: self.call.take(),
            inputs: std::mem::take(&mut self.inputs),
            subject: self.extras.subject().cloned(),
        };
        // Not a path a client drives: one message per crashed actor.
        supervisor.do_send(Restart(Box::new(remains)));
    }
}

#[cfg(test)]
mod tests {
    /// A live task's memory (BENCHMARKS.md, "Memory per live task"): tokio rounds a task's
    /// cell to 128 bytes, and the actor's context cell is 640 while the actor is at most 200
    /// bytes; a word more costs every live task 128 bytes.
    #[test]
    fn a_task_actor_stays_within_its_cell_size_class() {
        let size = std::mem::size_of::<super::TaskActor>();
        assert!(size <= 200, "TaskActor is {size} bytes");
    }
}
