//! What a task holds while it is live: the work that runs it upstream ([`Work`]: a wrapped call
//! or a native task followed), its owner and place under the caps, its call, its input
//! requests, and what an actor that crashed leaves for its restart ([`Remains`]).

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use serde_json::{json, Value};
use taskgate_protocol::mcp::methods;
use taskgate_protocol::RequestId;
use taskgate_store::{TaskOutcome, TaskRecord};
use taskgate_upstream::{UpstreamSession, WaitingCall};

use super::requestor_sessions::InputHolder;
use crate::identity::Identity;
use crate::progress::ProgressActor;
use crate::tenants::TaskPermit;

/// What runs the task upstream.
pub(crate) enum Work {
    /// A plain `tools/call` the gateway runs in the background.
    Wrapped {
        /// The upstream-local id of the call, for `notifications/cancelled`.
        upstream_id: RequestId,
        /// The call until it is sent. (Boxed, as the route below: an actor keeps its `work`
        /// for its task's life.)
        unsent: Option<Box<Unsent>>,
        /// The call declares the tasks extension to an upstream that speaks it: the upstream
        /// may answer with a task of its own, which the gateway's task then follows.
        upstream_decides: bool,
    },
    /// A task the upstream runs; the gateway follows it. (Boxed with what following it takes:
    /// a wrapped task, the common kind, carries none of it.)
    Native(Box<Native>),
}

/// A wrapped task's call before it is sent.
pub(crate) struct Unsent {
    /// The upstream's tool name and arguments, no `task`.
    pub(crate) params: Value,
    /// The span the call runs in, when traces are exported. (Kept here, not in the actor,
    /// whose cell a word more moves up a size class: 128 bytes a live task.)
    pub(crate) span: Option<tracing::Span>,
}

impl Unsent {
    pub(crate) fn new(params: Value) -> Option<Box<Unsent>> {
        Some(Box::new(Unsent { params, span: None }))
    }
}

/// A task the upstream runs, and the state of following it.
pub(crate) struct Native {
    /// The upstream's task id.
    pub(crate) upstream_task_id: String,
    /// How often to poll it.
    pub(crate) poll: Duration,
    /// The task's progress token route at the upstream, and the notes it receives.
    pub(crate) progress_route:
        Option<(taskgate_upstream::ProgressRoute, taskgate_upstream::Receiver<taskgate_protocol::Message>)>,
    /// The `tasks/result` call in flight, in the actor's context.
    pub(crate) running: Option<SpawnHandle>,
    pub(crate) fetching_result: bool,
    /// The result, fetched while the task was `input_required`, kept until the upstream
    /// reports the terminal status it goes with.
    pub(crate) fetched: Option<Box<TaskOutcome>>,
    pub(crate) poll_failures: u32,
    /// The progress forwarder (from the token's route to the task's progress actor).
    pub(crate) forwarder: Option<tokio::task::JoinHandle<()>>,
    /// The task's span, when traces are exported: it ends with the task's actor.
    pub(crate) span: Option<tracing::Span>,
}

impl Native {
    /// The work of following a task the upstream runs.
    pub(crate) fn work(
        upstream_task_id: String,
        poll: Duration,
        progress_route: Option<(
            taskgate_upstream::ProgressRoute,
            taskgate_upstream::Receiver<taskgate_protocol::Message>,
        )>,
    ) -> Work {
        Work::Native(Box::new(Native {
            upstream_task_id,
            poll,
            progress_route,
            running: None,
            fetching_result: false,
            fetched: None,
            poll_failures: 0,
            forwarder: None,
            span: None,
        }))
    }
}

/// What few task actors hold, in one box made only when one of them is: a status message, and
/// a wrapped call's progress token at the upstream (kept while the upstream may still make the
/// call a task of its own, whose progress then comes under the same token). A word less in the
/// actor keeps its cell a size class (128 bytes) smaller.
#[derive(Default)]
pub(crate) struct Extras(Option<Box<ExtraFields>>);

#[derive(Default)]
struct ExtraFields {
    status_message: Option<Box<str>>,
    upstream_token: Option<Value>,
    /// The access token of the request that created the task, while its upstream exchanges
    /// callers' tokens: what its later exchanges start from.
    subject: Option<taskgate_upstream::Subject>,
}

impl Extras {
    pub(crate) fn status_message(&self) -> Option<&str> {
        self.0.as_ref().and_then(|extras| extras.status_message.as_deref())
    }

    pub(crate) fn set_status_message(&mut self, message: Option<&str>) {
        match (&mut self.0, message) {
            (Some(extras), message) => extras.status_message = message.map(Into::into),
            (None, Some(message)) => {
                self.0 = Some(Box::new(ExtraFields { status_message: Some(message.into()), ..ExtraFields::default() }));
            }
            (None, None) => {}
        }
        self.drop_if_empty();
    }

    pub(crate) fn set_upstream_token(&mut self, token: Value) {
        self.0.get_or_insert_with(Box::default).upstream_token = Some(token);
    }

    pub(crate) fn take_upstream_token(&mut self) -> Option<Value> {
        let token = self.0.as_mut()?.upstream_token.take();
        self.drop_if_empty();
        token
    }

    pub(crate) fn subject(&self) -> Option<&taskgate_upstream::Subject> {
        self.0.as_ref().and_then(|extras| extras.subject.as_ref())
    }

    pub(crate) fn set_subject(&mut self, subject: Option<taskgate_upstream::Subject>) {
        if subject.is_some() {
            self.0.get_or_insert_with(Box::default).subject = subject;
        }
    }

    fn drop_if_empty(&mut self) {
        if self.0.as_ref().is_some_and(|extras| {
            extras.status_message.is_none() && extras.upstream_token.is_none() && extras.subject.is_none()
        }) {
            self.0 = None;
        }
    }
}

/// Whose task it is, and its place under the tenant's concurrency caps while it holds one
/// (the permit names the owner: one copy of the identity, not two).
pub(crate) enum Owner {
    Holding(TaskPermit),
    Released(Identity),
}

impl Owner {
    pub(crate) fn new(owner: Identity, permit: Option<TaskPermit>) -> Owner {
        match permit {
            Some(permit) => Owner::Holding(permit),
            None => Owner::Released(owner),
        }
    }

    pub(crate) fn who(&self) -> &Identity {
        match self {
            Owner::Holding(permit) => permit.who(),
            Owner::Released(who) => who,
        }
    }

    /// Gives the task's place under the caps back.
    pub(crate) fn release(&mut self) {
        if let Owner::Holding(permit) = self {
            *self = Owner::Released(permit.who().clone());
        }
    }

    pub(crate) fn into_parts(self) -> (Identity, Option<TaskPermit>) {
        match self {
            Owner::Holding(permit) => (permit.who().clone(), Some(permit)),
            Owner::Released(who) => (who, None),
        }
    }
}

/// Everything a new task actor needs.
pub(crate) struct TaskStart {
    pub record: TaskRecord,
    pub owner: Identity,
    pub session: UpstreamSession,
    pub work: Work,
    /// The task's progress token's actor, if the request had a token.
    pub progress: Option<Addr<ProgressActor>>,
    /// The task's place under its tenant's concurrency caps, given back when it ends.
    pub permit: Option<TaskPermit>,
    /// The span its upstream call runs in, when traces are exported (a child of the request
    /// that created it); the actor keeps it with its work.
    pub span: Option<tracing::Span>,
    /// The access token of the request that created it, when its upstream exchanges callers'
    /// tokens.
    pub subject: Option<taskgate_upstream::Subject>,
}

/// A wrapped task's upstream call, outside the actor's context so that it survives the
/// actor's restart (the actor that holds it then polls it, `AwaitCall`): a task of its own
/// while it is being sent (and for its whole life over HTTP, where the answer comes on the
/// request's own response, and when it relays progress), then, once written to a stdio
/// upstream, the call waiting for its answer with no task of its own ([`WaitingCall`]). One
/// word in the actor.
pub(crate) type Call = Box<CallState>;

pub(crate) enum CallState {
    Sending(tokio::task::JoinHandle<taskgate_upstream::CallState>),
    Waiting(WaitingCall<'static>),
}

/// Stops a call: its task is aborted, or its waiting state dropped (which gives back its
/// pending entry, its place in flight and its member's).
pub(crate) fn abort_call(call: CallState) {
    if let CallState::Sending(handle) = call {
        handle.abort();
    }
}

/// What a task actor that stopped abnormally leaves for the Supervisor to restart it with.
pub(crate) struct Remains {
    pub id: Arc<str>,
    pub owner: Owner,
    pub session: UpstreamSession,
    pub work: Work,
    pub progress: Option<Addr<ProgressActor>>,
    pub call: Option<Call>,
    pub inputs: Vec<Input>,
    pub subject: Option<taskgate_upstream::Subject>,
}

/// A task actor stopped abnormally; restart its task from the store.
pub(crate) struct Restart(pub Box<Remains>);

impl Message for Restart {
    type Result = ();
}

/// An input request of a task not answered yet.
pub(crate) struct Input {
    /// The id the client knows it by.
    pub(crate) key: String,
    /// `{method, params}`.
    pub(crate) request: Value,
    /// The client session holding it, which takes the answer.
    pub(crate) session: Arc<InputHolder>,
}

/// How long a cancelled call the upstream decides about may take to end once told.
const DECIDED_CANCEL_WAIT: Duration = Duration::from_secs(10);
/// How long an answer already on its way (the task the upstream made) is waited for before the
/// upstream is told: over HTTP telling it closes the call's stream, and an answer not read by
/// then is lost with it.
const ANSWER_ON_ITS_WAY: Duration = Duration::from_millis(50);

/// Cancels a call whose upstream decides whether it is a task (it speaks the tasks extension).
/// An answer already on its way is waited for [`ANSWER_ON_ITS_WAY`]; then the upstream is told
/// (2026-07-28 over HTTP: the call's stream closes; over stdio: `notifications/cancelled` names
/// it) and the call ends with what has already come. A task the answer says the upstream made
/// is cancelled with `tasks/cancel`; a call with no end [`DECIDED_CANCEL_WAIT`] after it was
/// told is dropped.
pub(crate) async fn cancel_decided_call(call: CallState, session: UpstreamSession, upstream_id: RequestId) {
    let abort = match &call {
        CallState::Sending(handle) => Some(handle.abort_handle()),
        CallState::Waiting(_) => None,
    };
    let outcome = async move {
        match call {
            CallState::Sending(handle) => match handle.await {
                Ok(taskgate_upstream::CallState::Done(outcome)) => outcome.ok(),
                Ok(taskgate_upstream::CallState::Waiting(waiting)) => {
                    waiting.await.ok().map(taskgate_protocol::Payload::into_value)
                }
                Err(_) => None,
            },
            CallState::Waiting(waiting) => waiting.await.ok().map(taskgate_protocol::Payload::into_value),
        }
    };
    tokio::pin!(outcome);
    let answered = match tokio::time::timeout(ANSWER_ON_ITS_WAY, &mut outcome).await {
        Ok(answered) => answered,
        Err(_) => {
            let params = json!({"requestId": upstream_id.to_value(), "reason": "The task was cancelled"});
            let _ = session.notify(methods::CANCELLED, Some(params)).await;
            match tokio::time::timeout(DECIDED_CANCEL_WAIT, &mut outcome).await {
                Ok(answered) => answered,
                Err(_) => {
                    if let Some(abort) = abort {
                        abort.abort();
                    }
                    None
                }
            }
        }
    };
    let made = answered.as_ref().and_then(|r| r.get("content").is_none().then(|| r.get("task")).flatten());
    if let Some(up) = made.and_then(taskgate_protocol::tasks::TaskView::from_value) {
        let _ = session.request(methods::TASKS_CANCEL, Some(json!({ "taskId": up.task_id }))).await;
    }
}

#[cfg(test)]
mod tests {
    use super::Extras;
    use serde_json::json;

    #[test]
    fn a_task_s_rare_fields_are_boxed_only_while_one_is_there() {
        let mut extras = Extras::default();
        extras.set_status_message(None);
        assert!(extras.0.is_none(), "nothing to hold, no box");
        extras.set_status_message(Some("working"));
        extras.set_upstream_token(json!("t-1"));
        assert_eq!(extras.status_message(), Some("working"));
        extras.set_status_message(None);
        assert!(extras.0.is_some(), "the token is still held");
        assert_eq!(extras.take_upstream_token(), Some(json!("t-1")));
        assert_eq!(extras.take_upstream_token(), None);
        assert!(extras.0.is_none(), "both gone, the box too");
    }
}
