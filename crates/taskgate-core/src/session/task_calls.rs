//! Task-augmented calls (wrapped or native) and the `tasks/*` methods; task progress and
//! status notifications for this session's requestor.

use actix::prelude::*;
use serde_json::{json, Map, Value};
use taskgate_protocol::mcp::methods;
use taskgate_protocol::tasks::{TaskStatus, TaskView};
use taskgate_protocol::{mcp, tasks as wire_tasks, Message as RpcMessage, RequestId};
use taskgate_store::{TaskOutcome, TaskRecord};
use taskgate_upstream::UpstreamSession;

use super::asked::Asker;
use super::SessionActor;
use crate::catalog::ToolEntry;
use crate::forwarded_call::UPSTREAM_EVENTS;
use crate::outbound::Outbound;
use crate::progress::{Abandon, ProgressActor, ProgressTarget};
use crate::tasks::{TaskEnded, TaskService, TaskStart, Work};
use crate::{tasks, GatewayError};

impl SessionActor {
    /// Runs an admitted task: as a native upstream task, wrapped by the gateway, or as the
    /// gateway's task following what an upstream that speaks the tasks extension decides.
    pub(super) fn start_task(
        &mut self,
        id: RequestId,
        mut upstream_params: Value,
        admitted: Admitted,
        session: UpstreamSession,
        ctx: &mut Context<Self>,
    ) {
        let Admitted { record, run, permit, ask_first } = admitted;
        if !self.requests.contains(&id) {
            // Cancelled while it was being admitted: its reservation goes back.
            self.shared.tasks.release(&record);
            return;
        }
        match run {
            TaskRun::Native => {
                let progress = self.task_progress(&record.id, &mut upstream_params);
                return self.start_native_task(id, upstream_params, record, (progress, permit), session, ctx);
            }
            // The call keeps its `task`: the upstream session declares the extension for it, and
            // a task the upstream makes comes back for the task's actor to follow.
            TaskRun::UpstreamDecides => upstream_params["task"] = json!({}),
            TaskRun::Wrapped => {
                if let Value::Object(p) = &mut upstream_params {
                    p.remove("task");
                }
            }
        }
        let progress = self.task_progress(&record.id, &mut upstream_params).map(|(actor, _)| actor);
        let upstream_decides = run == TaskRun::UpstreamDecides;
        let unsent = crate::tasks::Unsent::new(upstream_params);
        let work = Work::Wrapped { upstream_id: session.next_request_id(), unsent, upstream_decides };
        let span = self.task_span(&id, &record);
        let subject = self.task_subject(&id, &session);
        if ask_first.is_some() {
            self.ask_first(&id, &record.id);
        }
        let start = TaskStart { record, owner: self.identity.clone(), session, work, progress, permit, span, subject };
        self.create_task(id, start, (Map::new(), ask_first), ctx);
    }

    /// The access token of the request that creates a task, when the task's upstream exchanges
    /// callers' tokens: the task's later exchanges start from it.
    fn task_subject(&self, id: &RequestId, session: &UpstreamSession) -> Option<taskgate_upstream::Subject> {
        session.acts_for_caller().then(|| self.requests.get(id).and_then(|r| r.subject.clone())).flatten()
    }

    /// The span of a new task's upstream call, when traces are exported: a child of the request
    /// that creates it, which is told the task's id.
    fn task_span(&self, id: &RequestId, record: &TaskRecord) -> Option<tracing::Span> {
        if !taskgate_upstream::trace_context::enabled() {
            return None;
        }
        let parent = self.requests.get(id).map(|r| r.span.clone()).unwrap_or_else(tracing::Span::none);
        parent.record("task", record.id.as_str());
        let span = tracing::info_span!(parent: &parent, "task_call", task = %record.id, upstream = %record.upstream, tool = %record.tool);
        Some(span)
    }

    /// One more task for this requestor under its tenant's caps.
    pub(super) fn admit_task(&self) -> Result<crate::tenants::TaskPermit, GatewayError> {
        self.shared.tenancy.admit_task(&self.identity).map_err(|cap| {
            let reason = cap.label();
            self.shared.metrics.admission_rejected.with_label_values(&[&self.identity.tenant, reason]).inc();
            tracing::info!(target: "taskgate::audit", tenant = %self.identity.tenant, principal = %self.identity.principal, reason, "task refused at admission");
            cap.error(&self.identity)
        })
    }

    pub(super) fn new_task(&self, entry: &ToolEntry, requested_ttl: Option<u64>) -> TaskRecord {
        let now = self.shared.clock.now_ms();
        let limits = self.shared.tenancy.policy(&self.identity.tenant).tasks.clone();
        let config = &limits;
        TaskRecord {
            // Task ids: v4 UUIDs from the OS CSPRNG, unique among all tasks (basic/utilities/tasks).
            id: uuid::Uuid::new_v4().to_string(),
            owner: tasks::owner(&self.identity),
            status: TaskStatus::Working, // tasks MUST begin in `working`
            status_message: None,
            created_at_ms: now,
            last_updated_at_ms: now,
            ttl_ms: tasks::granted_ttl(requested_ttl, config),
            poll_interval_ms: config.poll_interval_ms,
            upstream: entry.upstream.clone(),
            tool: entry.tool.name.clone(),
            upstream_task_id: None,
            upstream_session: None,
            replica: Some(self.shared.replica.clone()),
            outcome: None,
        }
    }

    /// Stores the task durably, starts its actor, and answers `CreateTaskResult` (before the
    /// upstream work finishes), with `extra` beside the task; a task that may ask first is
    /// shown after its wait (`asking_first.rs`).
    pub(super) fn create_task(
        &mut self,
        id: RequestId,
        start: TaskStart,
        (extra, ask_first): (Map<String, Value>, Option<std::time::Duration>),
        ctx: &mut Context<Self>,
    ) {
        let native_upstream = matches!(start.work, Work::Native(_)).then(|| start.record.upstream.clone());
        let progress = start.progress.clone();
        let create = TaskService::create(self.shared.task_context.clone(), start);
        ctx.spawn(create.into_actor(self).map(move |created, act, ctx| {
            if let Some(upstream) = native_upstream {
                act.native_created(&upstream, ctx);
            }
            let created = created.map(|record| {
                let mut result = extra;
                result.insert("task".into(), record.view().to_value());
                Value::Object(result)
            });
            if created.is_err() {
                if let Some(progress) = &progress {
                    let _ = progress.try_send(Abandon);
                }
            }
            match (created, ask_first) {
                (Ok(result), Some(wait)) => act.hold_task(id, result, wait, ctx),
                (created, _) => act.finish(id, created),
            }
        }));
    }

    /// The upstream runs tasks itself: forward the task-augmented call, keep our own task id and
    /// follow the upstream's.
    pub(super) fn start_native_task(
        &mut self,
        id: RequestId,
        mut params: Value,
        record: TaskRecord,
        (progress, permit): (Option<(Addr<ProgressActor>, Value)>, Option<crate::tenants::TaskPermit>),
        session: UpstreamSession,
        ctx: &mut Context<Self>,
    ) {
        params["task"] = record.ttl_ms.map_or_else(|| json!({}), |ttl| json!({ "ttl": ttl }));
        let upstream = record.upstream.clone();
        self.early.creating(&upstream);
        // The task's progress token stays valid for its whole lifetime: route it from now on.
        let route = progress.as_ref().map(|(_, token)| {
            let (sink, notes) = taskgate_upstream::channel(UPSTREAM_EVENTS);
            (session.route_progress(token, sink), notes)
        });
        let caller = session.clone();
        let call = self.for_request(&id, async move {
            let result = caller.request(methods::TOOLS_CALL, Some(params)).await;
            // Stored with the task, so that another gateway process can follow it again.
            (result, caller.resume_point().await)
        });
        ctx.spawn(call.into_actor(self).map(move |(result, resume), act, ctx| match result {
            Ok(result) => {
                let adopted = Adopted { result, resume, route, progress, permit };
                act.adopt_upstream_task(id, record, adopted, session, ctx)
            }
            Err(e) => {
                if let Some((actor, _)) = &progress {
                    let _ = actor.try_send(Abandon);
                }
                // No task: its place under the caps goes back.
                act.shared.tasks.release(&record);
                act.native_created(&upstream, ctx);
                act.finish(id, Err(GatewayError::Upstream(e)))
            }
        }));
    }

    /// The upstream answered a call with a task of its own (`result` holds its
    /// `CreateTaskResult`): the gateway's task `record` follows it under the gateway's id, and
    /// the client gets that task. A creation counted in `early` ends here.
    pub(super) fn adopt_upstream_task(
        &mut self,
        id: RequestId,
        record: TaskRecord,
        adopted: Adopted,
        session: UpstreamSession,
        ctx: &mut Context<Self>,
    ) {
        let Adopted { result, resume, route, progress, permit } = adopted;
        let Some(up) = result.get("task").and_then(TaskView::from_value) else {
            if let Some((actor, _)) = &progress {
                let _ = actor.try_send(Abandon);
            }
            self.shared.tasks.release(&record);
            self.native_created(&record.upstream, ctx);
            let e = taskgate_upstream::UpstreamError::Protocol {
                upstream: record.upstream.clone(),
                reason: "it answered a task-augmented tools/call without a valid task".into(),
            };
            return self.finish(id, Err(GatewayError::Upstream(e)));
        };
        // Everything else in the CreateTaskResult (model-immediate-response…) passes through,
        // except what names the upstream's task.
        let mut extra = match result {
            Value::Object(o) => o,
            _ => Map::new(),
        };
        extra.remove("task");
        if let Some(Value::Object(m)) = extra.get_mut("_meta") {
            m.remove(mcp::meta::RELATED_TASK);
        }
        let poll_ms = up.poll_interval_ms.unwrap_or(record.poll_interval_ms);
        let mut record = record;
        record.upstream_task_id = Some(up.task_id.clone());
        // The upstream's first word on its task is the client's too.
        if up.status_message.is_some() {
            record.status_message = up.status_message.clone();
        }
        record.upstream_session = resume.map(|r| taskgate_store::UpstreamSessionRef {
            session_id: r.session_id,
            protocol_version: r.protocol_version,
        });
        let poll = std::time::Duration::from_millis(poll_ms);
        let work = crate::tasks::Native::work(up.task_id, poll, route);
        let progress = progress.map(|(actor, _)| actor);
        let span = self.task_span(&id, &record);
        let subject = self.task_subject(&id, &session);
        let start = TaskStart { record, owner: self.identity.clone(), session, work, progress, permit, span, subject };
        self.create_task(id, start, (extra, None), ctx);
    }

    /// A progress actor for a task's token (valid for the task's lifetime), and the upstream
    /// token that replaces it.
    pub(super) fn task_progress(&self, task_id: &str, params: &mut Value) -> Option<(Addr<ProgressActor>, Value)> {
        let token = mcp::progress_token(Some(params)).cloned()?;
        let target = ProgressTarget::Task {
            task_id: task_id.to_owned(),
            owner: self.identity.clone(),
            requester: self.id.as_str().into(),
            tasks: self.shared.tasks.clone(),
        };
        let actor = self.start_progress(token, params, target);
        let upstream = mcp::progress_token(Some(params)).cloned().unwrap_or(Value::Null);
        Some((actor, upstream))
    }

    pub(super) fn get_task(&mut self, id: RequestId, params: Option<Value>, ctx: &mut Context<Self>) {
        match task_id_param(params.as_ref(), methods::TASKS_GET) {
            Ok(task_id) => self.answer_with(id, self.shared.tasks.clone().get(self.identity.clone(), task_id), ctx),
            Err(e) => self.finish(id, Err(e)),
        }
    }

    pub(super) fn task_result(&mut self, id: RequestId, params: Option<Value>, ctx: &mut Context<Self>) {
        let task_id = match task_id_param(params.as_ref(), methods::TASKS_RESULT) {
            Ok(t) => t,
            Err(e) => return self.finish(id, Err(e)),
        };
        if !self.stateless && self.shared.tasks.store().shared() && self.shared.tasks.actor(&task_id).is_none() {
            self.relay_remote_inputs(task_id.clone(), ctx);
        }
        let outcome = self.shared.tasks.clone().result(self.identity.clone(), task_id.clone());
        let wait = async move {
            match outcome.await? {
                // The response MUST carry io.modelcontextprotocol/related-task.
                TaskOutcome::Result(result) => Ok(wire_tasks::with_related_task(result, &task_id)),
                // A JSON-RPC error is returned exactly as the request would have returned it.
                TaskOutcome::Error(error) => Err(GatewayError::Rpc(Box::new(error))),
            }
        };
        self.answer_with(id, wait, ctx);
    }

    pub(super) fn list_tasks(&mut self, id: RequestId, params: Option<Value>, ctx: &mut Context<Self>) {
        match mcp::cursor(params.as_ref()) {
            Ok(cursor) => {
                let list = self.shared.tasks.clone().list(self.identity.clone(), cursor.map(str::to_owned));
                self.answer_with(id, list, ctx)
            }
            Err(e) => self.finish(id, Err(GatewayError::InvalidParams(e))),
        }
    }

    pub(super) fn cancel_task(&mut self, id: RequestId, params: Option<Value>, ctx: &mut Context<Self>) {
        match task_id_param(params.as_ref(), methods::TASKS_CANCEL) {
            Ok(task_id) => self.answer_with(id, self.shared.tasks.clone().cancel(self.identity.clone(), task_id), ctx),
            Err(e) => self.finish(id, Err(e)),
        }
    }
}

/// How an admitted task runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TaskRun {
    /// The upstream runs tasks (2025-11-25): the gateway's task follows the one it creates.
    Native,
    /// The gateway runs the call in the background.
    Wrapped,
    /// The upstream speaks the tasks extension and decides: the gateway's task exists at once,
    /// and follows the upstream's task if it makes one, or takes its answer.
    UpstreamDecides,
}

/// A task admitted under the caps, to start: its record, how it runs, its place under the caps
/// (none when a place was reserved in the store).
pub(super) struct Admitted {
    pub record: TaskRecord,
    pub run: TaskRun,
    pub permit: Option<crate::tenants::TaskPermit>,
    /// A wrapped task that may ask first in the call that makes it: how long the call waits
    /// before it is shown the task (`asking_first.rs`).
    pub ask_first: Option<std::time::Duration>,
}

/// A task the upstream made, for the gateway's task to follow: its `CreateTaskResult`, where its
/// session resumes, its progress route, its progress actor (with the upstream's token) and its
/// place under the caps.
pub(super) struct Adopted {
    pub result: Value,
    pub resume: Option<taskgate_upstream::SessionResume>,
    pub route: Option<ProgressRouting>,
    pub progress: Option<(Addr<ProgressActor>, Value)>,
    pub permit: Option<crate::tenants::TaskPermit>,
}

/// A native task's progress, routed by its token at the upstream session, until the task's
/// actor forwards it.
pub(super) type ProgressRouting = (taskgate_upstream::ProgressRoute, taskgate_upstream::Receiver<RpcMessage>);

/// `params.taskId` of a task method; the method parameter is the source of truth (any
/// related-task `_meta` in the request is ignored).
pub(super) fn task_id_param(params: Option<&Value>, method: &str) -> Result<String, GatewayError> {
    match params.and_then(|p| p.get("taskId")) {
        Some(Value::String(id)) => Ok(id.clone()),
        Some(other) => Err(GatewayError::InvalidParams(format!("{method}: \"taskId\" must be a string, got {other}"))),
        None => Err(GatewayError::InvalidParams(format!("{method} needs params {{\"taskId\": string}}"))),
    }
}

/// Progress of a task of this session's requestor: on the task's `tasks/result` stream when
/// one is open here, else, in the session that requested the task, the GET stream (one stream,
/// never both). A session that did not request it only relays it on a `tasks/result` stream:
/// another session's GET stream is not where a client looks for its task's progress.
pub(crate) struct TaskProgress {
    pub task_id: String,
    pub notification: RpcMessage,
    /// This session requested the task.
    pub requester: bool,
}

impl Message for TaskProgress {
    type Result = ();
}

impl Handler<TaskProgress> for SessionActor {
    type Result = ();

    fn handle(&mut self, TaskProgress { task_id, notification, requester }: TaskProgress, _: &mut Context<Self>) {
        let stream = self
            .requests
            .waiting_on(&task_id)
            .map(|r| r.reply.clone())
            .filter(|s| !s.is_closed())
            .or_else(|| self.streams.open_get().filter(|_| requester));
        if let Some(stream) = stream {
            let _ = stream.send(&notification);
        }
    }
}

/// A task of this session's requestor changed status: `notifications/tasks/status` on the GET
/// stream (without related-task `_meta`: the task id is in the params).
pub(crate) struct TaskStatusChanged(pub Value);

impl Message for TaskStatusChanged {
    type Result = ();
}

impl Handler<TaskStatusChanged> for SessionActor {
    type Result = ();

    fn handle(&mut self, TaskStatusChanged(task): TaskStatusChanged, _: &mut Context<Self>) {
        if let Some(stream) = self.streams.open_get() {
            let _ = stream.send(&RpcMessage::notification(methods::TASKS_STATUS, Some(task)));
        }
    }
}

impl Handler<TaskEnded> for SessionActor {
    type Result = ();

    fn handle(&mut self, TaskEnded(task_id): TaskEnded, ctx: &mut Context<Self>) {
        self.asked.forget_task(&task_id);
        self.streams.take_waiting(|q| q.task == task_id);
        self.unshown_task_ended(&task_id, ctx);
    }
}

/// A task of this session's requestor that runs on another replica has a new input request in
/// the shared store.
pub(crate) struct RemoteInputs(pub String);

impl Message for RemoteInputs {
    type Result = ();
}

impl Handler<RemoteInputs> for SessionActor {
    type Result = ();

    fn handle(&mut self, RemoteInputs(task_id): RemoteInputs, ctx: &mut Context<Self>) {
        if !self.stateless && self.shared.tasks.actor(&task_id).is_none() && self.task_stream(&task_id).is_some() {
            self.relay_remote_inputs(task_id, ctx);
        }
    }
}

impl SessionActor {
    /// This session's open `tasks/result` stream for a task.
    fn task_stream(&self, task_id: &str) -> Option<Outbound> {
        self.requests.waiting_on(task_id).map(|r| r.reply.clone()).filter(|s| !s.is_closed())
    }

    /// Relays on the task's open `tasks/result` stream the input requests of a task running on
    /// another replica, read from the shared store, each once, under an id of this session's
    /// (basic/utilities/tasks "Input Required Status": the receiver delivers them on the
    /// tasks/result stream). The answers go back to that replica ([`Asker::Replica`]).
    pub(super) fn relay_remote_inputs(&mut self, task_id: String, ctx: &mut Context<Self>) {
        let (tasks, identity, id) = (self.shared.tasks.clone(), self.identity.clone(), task_id.clone());
        let read = async move { tasks.input_requests(&identity, &id).await };
        ctx.spawn(read.into_actor(self).map(move |inputs, act, _| {
            let inputs = match inputs {
                Ok(inputs) => inputs,
                Err(e) => {
                    tracing::debug!(session = %act.id, task = %task_id, error = %e, "a task's input requests could not be read");
                    return;
                }
            };
            let Some(stream) = act.task_stream(&task_id) else { return };
            for (key, request) in inputs {
                let asker = Asker::Replica { key };
                if act.asked.has(&asker, &task_id) {
                    continue;
                }
                let Some(method) = request.get("method").and_then(Value::as_str) else { continue };
                // Only what the client declared it can answer (basic/lifecycle "Capability
                // Negotiation"); the replica running the task keeps the request listed.
                if mcp::client_capability_for(method).is_some_and(|c| act.client.capabilities.get(c).is_none()) {
                    continue;
                }
                if !act.asked.has_room() {
                    tracing::info!(session = %act.id, "too many unanswered requests; a task's input request waits");
                    return;
                }
                let gateway_id = act.asked.next_id();
                let message = RpcMessage::request(gateway_id.clone(), method.to_owned(), request.get("params").cloned());
                if stream.send(&message).is_err() {
                    return;
                }
                let relayed =
                    super::Relayed { asker, task: Some(task_id.clone()), progress_token: None, stream: Some(stream.clone()) };
                act.asked.sent(gateway_id, relayed);
            }
        }));
    }
}
