//! The messages a [`TaskActor`](super::TaskActor) takes: from the task service (`tasks/cancel`,
//! input requests and their answers), from the upstream (a native task's status), from the
//! ttl timer, from another replica.

use std::sync::Arc;

use actix::prelude::*;
use serde_json::Value;
use taskgate_protocol::tasks::UpstreamTask;
use taskgate_protocol::Message as RpcMessage;
use taskgate_store::TaskRecord;

use super::requestor_sessions::InputHolder;
use crate::GatewayError;

/// `tasks/cancel`: the task is `cancelled` before the answer is sent.
pub(crate) struct Cancel;

impl Message for Cancel {
    type Result = Result<TaskRecord, GatewayError>;
}

/// A native task's status as the upstream announced it (`notifications/tasks/status`).
pub(crate) struct UpstreamStatus(pub UpstreamTask);

impl Message for UpstreamStatus {
    type Result = ();
}

/// The upstream asked the requestor for input on behalf of this task (a relayed elicitation,
/// sampling or roots request): the task keeps its key and the session that relayed it, and a
/// wrapped task waits in `input_required`. With a shared store the request is written there
/// first, so `tasks/get` through any replica lists it (ext-tasks "Task Polling": all
/// outstanding input requests), and the other replicas are told.
pub(crate) struct InputRequested {
    /// The id the client knows the request by.
    pub key: String,
    /// `{method, params}`, as the client sees it.
    pub request: Value,
    /// The client session holding it, which takes the answer.
    pub session: Arc<InputHolder>,
}

impl Message for InputRequested {
    type Result = ();
}

/// The requestor answered one of the upstream's requests (or the upstream withdrew it): once
/// none is outstanding, a wrapped task is working again.
pub(crate) struct InputProvided {
    /// The request's key.
    pub key: String,
}

impl Message for InputProvided {
    type Result = ();
}

/// Answers to the task's input requests (JSON-RPC responses whose ids are their keys), given
/// through `tasks/update` or another replica: each goes to the session holding its request,
/// which passes it to the upstream. Keys not outstanding are ignored (ext-tasks "Task Update
/// Requests").
pub(crate) struct DeliverInputs(pub Vec<RpcMessage>);

impl Message for DeliverInputs {
    type Result = ();
}

/// The task's outstanding input requests, by key, in the order they came.
pub(crate) struct ListInputs;

impl Message for ListInputs {
    type Result = Vec<(String, Value)>;
}

/// The supervisor's sweep found the task expired.
pub(crate) struct Expire;

impl Message for Expire {
    type Result = ();
}

/// The task is no longer this actor's to run: it was cancelled through the store (on another
/// replica: `cancelled`, and the upstream is told), or another replica took it over.
pub(crate) struct StoppedElsewhere {
    /// Cancelled: stop the upstream work too.
    pub cancelled: bool,
}

impl Message for StoppedElsewhere {
    type Result = ();
}

/// A test hook: makes the actor panic, as a bug would, to exercise its restart.
#[cfg(any(test, feature = "test-hooks"))]
pub struct Crash;

#[cfg(any(test, feature = "test-hooks"))]
impl Message for Crash {
    type Result = ();
}
