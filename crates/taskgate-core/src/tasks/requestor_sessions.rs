//! What the task layer tells client sessions, through a port the session layer implements: the
//! task layer names no session type.
//!
//! - [`RequestorSessions`]: the sessions of a task's requestor on this replica, where its status,
//!   progress and input requests go, and the idle ones the Supervisor closes;
//! - [`InputHolder`]: the one session holding an input request of a task, which takes the
//!   client's answer and lets go when the task ends ([`TaskEnded`]).

use std::sync::Arc;

use actix::prelude::*;
use actix::WeakRecipient;
use futures_util::future::BoxFuture;
use serde_json::Value;
use taskgate_protocol::Message as RpcMessage;

use crate::forwarded_call::ClientResponse;
use crate::identity::Identity;

/// The client sessions of this replica, as the task layer reaches them.
pub(crate) trait RequestorSessions: Send + Sync {
    /// `notifications/tasks/status` for `task` to each session of `owner` (their GET streams).
    fn task_status(&self, owner: &Identity, task: &Value);

    /// A task's `notifications/progress`, to the session `requester` that requested the task when
    /// it is here (its `tasks/result` stream for the task, else its GET stream), else to the
    /// sessions of `owner` that follow the task with an open `tasks/result` stream. False when
    /// no session took it.
    fn task_progress(
        &self,
        owner: &Identity,
        task_id: &str,
        requester: Option<&str>,
        notification: &RpcMessage,
    ) -> bool;

    /// A task of `owner` running on another replica has a new input request in the store.
    fn remote_inputs(&self, owner: &Identity, task_id: &str);

    /// A message another replica made for the GET stream of session `id`, when its client
    /// holds that stream here.
    fn to_stream(&self, id: &str, message: String);

    /// A client's message for session `id` that the replica receiving it could not place (an
    /// answer to a request relayed here, a cancellation of a request running here).
    fn client_said(&self, id: &str, message: String);

    /// The client ended session `id` through another replica.
    fn ended(&self, id: &str);

    /// Session `id`'s log level or subscriptions changed through another replica.
    fn changed(&self, id: &str);

    /// A 2026-07-28 client of `owner` activated tools at the endpoint of `profile` through
    /// another replica: its listen streams here are told its tool list changed.
    fn activated_elsewhere(&self, owner: &Identity, profile: Option<&str>);

    /// The client of session `id` opened (`open`) or ended its GET stream at `replica`.
    fn stream_at(&self, id: &str, replica: String, open: bool);

    /// Tells the sessions idle since `cutoff_ms` that hold upstream sessions to let them go when
    /// they hold nothing there (`server.upstream_release_secs`).
    fn release_idle(&self, cutoff_ms: u64, now_ms: u64);

    /// Closes the sessions idle since `cutoff_ms` (no request since, nothing in flight, no GET
    /// stream open); resolves when they have answered.
    fn close_idle(self: Arc<Self>, cutoff_ms: u64) -> BoxFuture<'static, ()>;
}

/// The client session holding a task's input requests. A session makes one, shared by every
/// request it holds (a task's inputs keep a pointer each, and tell a session once by comparing
/// pointers); held weakly, it never keeps an ended session alive.
pub(crate) struct InputHolder {
    /// Told when the task ends: its requests will never be answered.
    pub ended: WeakRecipient<TaskEnded>,
    /// Takes the client's answer to the request.
    pub answer: WeakRecipient<ClientResponse>,
}

/// A task ended with input requests this session holds: they will never be answered, and
/// must not reach a stream opened later.
pub(crate) struct TaskEnded(pub String);

impl Message for TaskEnded {
    type Result = ();
}
