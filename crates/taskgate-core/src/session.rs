//! The [`SessionActor`]: one per client session. It dispatches the client's JSON-RPC messages,
//! owns the session's outbound streams (the GET stream and one per in-flight request), and
//! opens one upstream session per upstream it calls, declaring the client's own capabilities.
//!
//! Upstream work runs in futures spawned on the actor's context; their outcomes come back to
//! the actor as it finishes them, so a slow upstream never stalls the mailbox (invariant 2).

use std::collections::HashMap;
use std::sync::Arc;

use actix::prelude::*;
use serde_json::{json, Value};
use taskgate_protocol::mcp::{self, methods};
use taskgate_protocol::{ErrorObject, Message as RpcMessage, RequestId};
use taskgate_upstream::{ClientIdentity, UpstreamEvent, UpstreamSession};
use tokio::sync::mpsc;

use crate::outbound::{Frame, Outbound};

use serde_json::Map;
use taskgate_protocol::mcp::TaskSupport;
use taskgate_protocol::tasks::{self as wire_tasks, TaskStatus, TaskView};
use taskgate_store::{TaskOutcome, TaskRecord};

use crate::catalog::{Page, ToolEntry};
use crate::gateway::Shared;
use crate::progress::{Abandon, Finish, Progress, ProgressActor, ProgressTarget};
use crate::registry::Identity;
use crate::router::{EnsureCatalog, RefreshUpstream, UpstreamFailure};
use crate::stream::receiver_stream;
use crate::tasks::{self, InputProvided, InputRequested, TaskService, TaskStart, UpstreamStatus, Work};
use crate::GatewayError;

/// Events buffered from one upstream session before its reader waits for this actor.
const UPSTREAM_EVENTS: usize = 256;
/// Upstream requests relayed to the client and not yet answered, per session.
const MAX_RELAYED: usize = 1024;
/// Upstream messages held while a native task creation is in flight, per session.
const MAX_HELD: usize = 256;
/// Task-related messages queued for a client with no open stream, per session.
const MAX_QUEUED: usize = 256;

/// One client session.
pub struct SessionActor {
    id: String,
    shared: Arc<Shared>,
    identity: Identity,
    client: ClientIdentity,
    upstreams: HashMap<String, UpstreamSession>,
    /// The standalone GET stream, when the client has one open.
    get_stream: Option<Outbound>,
    /// In-flight client requests by the client's id.
    requests: HashMap<RequestId, InFlight>,
    /// (upstream, upstream-local id) → the client's id, for routing what an upstream sends.
    by_upstream: HashMap<(String, RequestId), RequestId>,
    /// Requests an upstream sent that were relayed to the client: gateway id → (upstream, its
    /// id, the task it is for).
    relayed: HashMap<RequestId, Relayed>,
    next_relay: u64,
    /// Native task creations in flight, by upstream.
    native_creating: HashMap<String, usize>,
    /// Upstream messages held until a native task creation settles.
    held: Vec<(String, UpstreamEvent)>,
    /// Task-related messages for the client while it has no stream open: delivered on the next
    /// `tasks/result` for that task, or the next GET stream.
    queued: Vec<Queued>,
    /// The bytes in `queued` (bounded by `server.session_buffer_bytes`).
    queued_bytes: usize,
}

/// A message waiting for a stream: the task it is about, the request id it carries (a relayed
/// request), and the message as it will be sent.
struct Queued {
    task: String,
    id: Option<RequestId>,
    frame: Frame,
}

struct InFlight {
    reply: Outbound,
    upstream: Option<(String, RequestId)>,
    /// For `tasks/result`: the task waited on (requests for that task go on this stream).
    task: Option<String>,
    /// A task-augmented request: `notifications/cancelled` does not apply (tasks/cancel does).
    task_augmented: bool,
    /// The running upstream call, stopped on cancellation.
    running: Option<SpawnHandle>,
    /// The request's progress token's actor.
    progress: Option<Addr<ProgressActor>>,
}

/// A request an upstream sent that was relayed to the client.
struct Relayed {
    upstream: String,
    upstream_id: RequestId,
    task: Option<String>,
    /// The progress token in the upstream's request: client progress naming it goes back there.
    progress_token: Option<Value>,
    /// The stream it went on (empty while queued): its cancellation follows it there.
    stream: Option<Outbound>,
}

impl SessionActor {
    pub(crate) fn new(id: String, shared: Arc<Shared>, identity: Identity, client: ClientIdentity) -> SessionActor {
        SessionActor {
            id,
            shared,
            identity,
            client,
            upstreams: HashMap::new(),
            get_stream: None,
            requests: HashMap::new(),
            by_upstream: HashMap::new(),
            relayed: HashMap::new(),
            next_relay: 1,
            native_creating: HashMap::new(),
            held: Vec::new(),
            queued: Vec::new(),
            queued_bytes: 0,
        }
    }

    fn upstream_session(&mut self, name: &str, ctx: &mut Context<Self>) -> Option<UpstreamSession> {
        if let Some(s) = self.upstreams.get(name) {
            return Some(s.clone());
        }
        let connector = self.shared.connectors.get(name)?.clone();
        let (tx, rx) = mpsc::channel(UPSTREAM_EVENTS);
        let upstream = name.to_owned();
        ctx.add_stream(receiver_stream(rx, move |event| (upstream.clone(), event)));
        let session = connector.open(self.client.clone(), tx);
        self.upstreams.insert(name.to_owned(), session.clone());
        Some(session)
    }

    /// Forgets a request and everything keyed by it (whichever side ends it first).
    fn forget(&mut self, id: &RequestId) -> Option<InFlight> {
        let request = self.requests.remove(id)?;
        self.shared.live_requests.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        if let Some(key) = &request.upstream {
            self.by_upstream.remove(key);
        }
        Some(request)
    }

    /// Sends the final message for a client request and forgets the request.
    fn finish(&mut self, id: RequestId, outcome: Result<Value, GatewayError>) {
        let Some(request) = self.forget(&id) else {
            return; // cancelled by the client: no response is sent (basic/utilities/cancellation)
        };
        let message = match outcome {
            Ok(result) => RpcMessage::response(id, result),
            Err(e) => {
                tracing::debug!(session = %self.id, reason = e.reason(), error = %crate::logs::Untrusted(&e.to_string()), "request failed");
                RpcMessage::error(Some(id), e.error_object())
            }
        };
        // The stream ends with its response, whatever else still holds it (a relayed request
        // the upstream never saw answered).
        let _ = request.reply.send_final(&message);
    }

    fn list_tools(&mut self, id: RequestId, params: Option<Value>, ctx: &mut Context<Self>) {
        let cursor = match mcp::cursor(params.as_ref()) {
            Ok(c) => c.map(str::to_owned),
            Err(e) => return self.finish(id, Err(GatewayError::InvalidParams(e))),
        };
        let router = self.shared.router.clone();
        let shared = self.shared.clone();
        let policy = self.shared.tenancy.policy(&self.identity.tenant);
        let listing = async move {
            let _ = router.send(EnsureCatalog).await;
            let support =
                |e: &ToolEntry| tasks::task_support(e, shared.connectors.get(&e.upstream).map(|c| c.config()));
            let visible = |e: &ToolEntry| policy.sees(&e.upstream);
            let size = shared.config.federation.page_size;
            let page = shared.catalog.read().page(cursor.as_deref(), size, visible, support);
            page.map_err(GatewayError::InvalidParams)
        };
        ctx.spawn(listing.into_actor(self).map(move |page, act, _| {
            act.finish(
                id,
                page.map(|Page { tools, next_cursor }| {
                    let mut result = json!({ "tools": tools });
                    if let Some(next) = next_cursor {
                        result["nextCursor"] = Value::from(next);
                    }
                    result
                }),
            )
        }));
    }

    fn call_tool(&mut self, id: RequestId, params: Option<Value>, ctx: &mut Context<Self>) {
        let Some(name) = params.as_ref().and_then(|p| p.get("name")).and_then(Value::as_str).map(str::to_owned) else {
            return self
                .finish(id, Err(GatewayError::InvalidParams("tools/call needs params with a string \"name\"".into())));
        };
        if let Some(args) = params.as_ref().and_then(|p| p.get("arguments")) {
            if !args.is_object() {
                return self
                    .finish(id, Err(GatewayError::InvalidParams("tools/call \"arguments\" must be an object".into())));
            }
        }
        if let Err(why) = wire_tasks::requested_task(params.as_ref()) {
            return self.finish(id, Err(GatewayError::InvalidParams(why)));
        }
        // A tool of an upstream the tenant does not see is unknown to it, exactly like one that
        // does not exist.
        let policy = self.shared.tenancy.policy(&self.identity.tenant);
        let resolved = self.shared.catalog.read().resolve(&name).filter(|e| policy.sees(&e.upstream)).cloned();
        match resolved {
            Some(entry) => self.dispatch_call(id, params, entry, ctx),
            None => {
                // Not listed: the catalog may not be loaded yet, or the upstream may be down.
                let router = self.shared.router.clone();
                let shared = self.shared.clone();
                let lookup = async move {
                    let _ = router.send(EnsureCatalog).await;
                    let owner = {
                        let catalog = shared.catalog.read();
                        if let Some(entry) = catalog.resolve(&name).filter(|e| policy.sees(&e.upstream)) {
                            return Ok(entry.clone());
                        }
                        catalog.upstream_by_prefix(&name).filter(|u| policy.sees(u)).map(str::to_owned)
                    };
                    if let Some(upstream) = owner {
                        if let Ok(Some(failure)) = router.send(UpstreamFailure(upstream)).await {
                            return Err(GatewayError::Upstream(failure));
                        }
                    }
                    Err(GatewayError::InvalidParams(format!("Unknown tool: {name}")))
                };
                ctx.spawn(lookup.into_actor(self).map(move |found, act, ctx| match found {
                    Ok(entry) => act.dispatch_call(id, params, entry, ctx),
                    Err(e) => act.finish(id, Err(e)),
                }));
            }
        }
    }

    /// Applies tool-level task negotiation (basic/utilities/tasks "Tool-Level Negotiation"), then
    /// runs the call plainly, as a native upstream task, or as a task the gateway wraps.
    fn dispatch_call(&mut self, id: RequestId, params: Option<Value>, entry: ToolEntry, ctx: &mut Context<Self>) {
        if !self.requests.contains_key(&id) {
            return; // cancelled while the tool was being resolved
        }
        let upstream_config = self.shared.connectors.get(&entry.upstream).map(|c| c.config());
        let support = tasks::task_support(&entry, upstream_config);
        let requested = wire_tasks::requested_task(params.as_ref()).unwrap_or(None);
        let name = params.as_ref().and_then(|p| p.get("name")).and_then(Value::as_str).unwrap_or_default().to_owned();
        let Some(session) = self.upstream_session(&entry.upstream, ctx) else {
            let e = GatewayError::Internal(format!("upstream '{}' has no connector", entry.upstream));
            return self.finish(id, Err(e));
        };
        let mut upstream_params = params.unwrap_or_else(|| json!({}));
        upstream_params["name"] = Value::from(entry.tool.name.clone());
        match (requested, support) {
            // "forbidden" (or absent): the tool MUST NOT be invoked as a task; -32601.
            (Some(_), TaskSupport::Forbidden) => {
                let why = format!(
                    "tool {name} does not support task-augmented execution (execution.taskSupport is \"forbidden\")"
                );
                self.finish(id, Err(GatewayError::MethodNotFound(why)))
            }
            // "required": servers MUST return -32601 when the client does not use a task.
            (None, TaskSupport::Required) => {
                let why = format!("tool {name} requires task-augmented execution: add \"task\": {{}} to the params");
                self.finish(id, Err(GatewayError::MethodNotFound(why)))
            }
            (Some(ttl), _) => {
                let record = self.new_task(&entry, ttl);
                // The tenant's share of the tasks held, before anything reaches the upstream.
                let share = self.shared.tenancy.policy(&self.identity.tenant).shares.tasks;
                if let Err(e) = self.shared.tasks.admit_holding(&record, share) {
                    return self.finish(id, Err(e));
                }
                let caps = self.shared.tenancy.caps(&self.identity.tenant);
                let uncapped = caps.tenant.is_none() && caps.principal.is_none();
                if !self.shared.tasks.store().shared() || uncapped {
                    // The Supervisor's caps: over one, a clear error and no task (nothing
                    // reaches the upstream).
                    match self.admit_task() {
                        Ok(permit) => {
                            self.start_task(id, upstream_params, record, entry.native, session, Some(permit), ctx)
                        }
                        Err(e) => {
                            self.shared.tasks.holdings.release(&record.id);
                            self.finish(id, Err(e))
                        }
                    }
                    return;
                }
                // Replicas share the caps: a place is reserved in the store first (a tenant
                // without caps needs none; its live tasks are counted all the same).
                let hold_ms = session_timeout_ms(&self.shared, &entry.upstream);
                let reserve =
                    self.shared.tasks.clone().reserve(self.identity.clone(), record.id.clone(), caps, hold_ms);
                ctx.spawn(reserve.into_actor(self).map(move |admitted, act, ctx| match admitted {
                    Ok(()) => act.start_task(id, upstream_params, record, entry.native, session, None, ctx),
                    Err(e) => {
                        act.shared.tasks.holdings.release(&record.id);
                        act.finish(id, Err(e))
                    }
                }));
            }
            (None, _) => self.forward_call(id, upstream_params, entry.upstream, session, ctx),
        }
    }

    /// Runs an admitted task: as a native upstream task, or wrapped by the gateway.
    #[allow(clippy::too_many_arguments)]
    fn start_task(
        &mut self,
        id: RequestId,
        mut upstream_params: Value,
        record: TaskRecord,
        native: bool,
        session: UpstreamSession,
        permit: Option<crate::tenants::TaskPermit>,
        ctx: &mut Context<Self>,
    ) {
        if !self.requests.contains_key(&id) {
            // Cancelled while it was being admitted: its reservation goes back.
            self.shared.tasks.release(&record);
            return;
        }
        if native {
            let progress = self.task_progress(&record.id, &mut upstream_params);
            return self.start_native_task(id, upstream_params, record, (progress, permit), session, ctx);
        }
        if let Value::Object(p) = &mut upstream_params {
            p.remove("task");
        }
        let progress = self.task_progress(&record.id, &mut upstream_params).map(|(actor, _)| actor);
        let work = Work::Wrapped { upstream_id: session.next_request_id(), params: upstream_params };
        let start = TaskStart { record, owner: self.identity.clone(), session, work, progress, permit };
        self.create_task(id, start, Map::new(), ctx);
    }

    /// One more task for this requestor under its tenant's caps.
    fn admit_task(&self) -> Result<crate::tenants::TaskPermit, GatewayError> {
        self.shared.tenancy.admit_task(&self.identity).map_err(|cap| {
            let reason = cap.label();
            self.shared.metrics.admission_rejected.with_label_values(&[&self.identity.tenant, reason]).inc();
            tracing::info!(target: "taskgate::audit", tenant = %self.identity.tenant, principal = %self.identity.principal, reason, "task refused at admission");
            cap.error(&self.identity)
        })
    }

    fn new_task(&self, entry: &ToolEntry, requested_ttl: Option<u64>) -> TaskRecord {
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
    /// upstream work finishes).
    fn create_task(&mut self, id: RequestId, start: TaskStart, extra: Map<String, Value>, ctx: &mut Context<Self>) {
        let native_upstream = matches!(start.work, Work::Native { .. }).then(|| start.record.upstream.clone());
        let progress = start.progress.clone();
        let create = TaskService::create(self.shared.clone(), start);
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
            act.finish(id, created);
        }));
    }

    /// The upstream runs tasks itself: forward the task-augmented call, keep our own task id and
    /// follow the upstream's.
    fn start_native_task(
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
        *self.native_creating.entry(upstream.clone()).or_default() += 1;
        // The task's progress token stays valid for its whole lifetime: route it from now on.
        let route = progress.as_ref().map(|(actor, token)| {
            let (sink, notes) = mpsc::channel(UPSTREAM_EVENTS);
            (session.route_progress(token, sink), notes, actor.clone())
        });
        let caller = session.clone();
        let call = async move {
            let result = caller.request(methods::TOOLS_CALL, Some(params)).await;
            // Stored with the task, so that another gateway process can follow it again.
            (result, caller.resume_point().await)
        };
        ctx.spawn(call.into_actor(self).map(move |(result, resume), act, ctx| {
            let abandon = |progress: &Option<(Addr<ProgressActor>, Value)>| {
                if let Some((actor, _)) = progress {
                    let _ = actor.try_send(Abandon);
                }
                // No task: its place under the caps goes back.
                act.shared.tasks.release(&record);
            };
            let result = match result {
                Ok(result) => result,
                Err(e) => {
                    abandon(&progress);
                    act.native_created(&upstream, ctx);
                    return act.finish(id, Err(GatewayError::Upstream(e)));
                }
            };
            let Some(up) = result.get("task").and_then(TaskView::from_value) else {
                abandon(&progress);
                act.native_created(&upstream, ctx);
                let e = taskgate_upstream::UpstreamError::Protocol {
                    upstream: upstream.clone(),
                    reason: "it answered a task-augmented tools/call without a valid task".into(),
                };
                return act.finish(id, Err(GatewayError::Upstream(e)));
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
            record.upstream_session = resume.map(|r| taskgate_store::UpstreamSessionRef {
                session_id: r.session_id,
                protocol_version: r.protocol_version,
            });
            let poll = std::time::Duration::from_millis(poll_ms);
            let (progress_route, actor) = match route {
                Some((guard, notes, actor)) => (Some((guard, notes)), Some(actor)),
                None => (None, None),
            };
            let work = Work::Native { upstream_task_id: up.task_id, poll, progress_route };
            let start = TaskStart { record, owner: act.identity.clone(), session, work, progress: actor, permit };
            act.create_task(id, start, extra, ctx);
        }));
    }

    fn forward_call(
        &mut self,
        id: RequestId,
        params: Value,
        upstream: String,
        session: UpstreamSession,
        ctx: &mut Context<Self>,
    ) {
        let upstream_id = session.next_request_id();
        if let Some(request) = self.requests.get_mut(&id) {
            request.upstream = Some((upstream.clone(), upstream_id.clone()));
        }
        let upstream_name = upstream.clone();
        self.by_upstream.insert((upstream, upstream_id.clone()), id.clone());
        let reply = self.requests.get(&id).map(|r| r.reply.clone()).expect("checked by the caller");
        let mut params = params;
        let progress = self.request_progress(&mut params, &reply);
        if let Some(request) = self.requests.get_mut(&id) {
            request.progress = progress.clone();
        }
        let span = tracing::info_span!(
            "upstream_call",
            session = %self.id,
            tenant = %self.identity.tenant,
            method = methods::TOOLS_CALL,
            upstream = %upstream_name,
        );
        let call = tracing::Instrument::instrument(
            relay_call(session, upstream_id, params, Some(reply), progress, true, Some(ctx.address())),
            span,
        );
        let finished = id.clone();
        let handle = ctx.spawn(
            call.into_actor(self).map(move |outcome, act, _| act.finish(finished, outcome.map_err(GatewayError::from))),
        );
        if let Some(request) = self.requests.get_mut(&id) {
            request.running = Some(handle);
        }
    }

    /// A progress actor for a plain call's token, which is replaced upstream by a fresh one.
    fn request_progress(&self, params: &mut Value, reply: &Outbound) -> Option<Addr<ProgressActor>> {
        let token = params.pointer("/_meta/progressToken").cloned()?;
        Some(self.start_progress(token, params, ProgressTarget::Request(reply.clone())))
    }

    /// A progress actor for a task's token (valid for the task's lifetime), and the upstream
    /// token that replaces it.
    fn task_progress(&self, task_id: &str, params: &mut Value) -> Option<(Addr<ProgressActor>, Value)> {
        let token = params.pointer("/_meta/progressToken").cloned()?;
        let target = ProgressTarget::Task {
            task_id: task_id.to_owned(),
            owner: self.identity.clone(),
            tasks: self.shared.tasks.clone(),
        };
        let actor = self.start_progress(token, params, target);
        let upstream = params.pointer("/_meta/progressToken").cloned().unwrap_or(Value::Null);
        Some((actor, upstream))
    }

    fn start_progress(&self, client_token: Value, params: &mut Value, target: ProgressTarget) -> Addr<ProgressActor> {
        let upstream_token = self.shared.progress.issue_token();
        params["_meta"]["progressToken"] = Value::from(upstream_token);
        let min_interval = std::time::Duration::from_millis(self.shared.config.progress.min_interval_ms);
        ProgressActor::new(client_token, target, min_interval, self.shared.progress.clone()).start()
    }

    /// Runs a task method's work in a spawned future and answers with its outcome.
    fn answer_with<F>(&mut self, id: RequestId, work: F, ctx: &mut Context<Self>)
    where
        F: std::future::Future<Output = Result<Value, GatewayError>> + 'static,
    {
        ctx.spawn(work.into_actor(self).map(move |outcome, act, _| act.finish(id, outcome)));
    }

    fn get_task(&mut self, id: RequestId, params: Option<Value>, ctx: &mut Context<Self>) {
        match task_id_param(params.as_ref(), methods::TASKS_GET) {
            Ok(task_id) => self.answer_with(id, self.shared.tasks.clone().get(self.identity.clone(), task_id), ctx),
            Err(e) => self.finish(id, Err(e)),
        }
    }

    fn task_result(&mut self, id: RequestId, params: Option<Value>, ctx: &mut Context<Self>) {
        let task_id = match task_id_param(params.as_ref(), methods::TASKS_RESULT) {
            Ok(t) => t,
            Err(e) => return self.finish(id, Err(e)),
        };
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

    fn list_tasks(&mut self, id: RequestId, params: Option<Value>, ctx: &mut Context<Self>) {
        match mcp::cursor(params.as_ref()) {
            Ok(cursor) => {
                let list = self.shared.tasks.clone().list(self.identity.clone(), cursor.map(str::to_owned));
                self.answer_with(id, list, ctx)
            }
            Err(e) => self.finish(id, Err(GatewayError::InvalidParams(e))),
        }
    }

    fn cancel_task(&mut self, id: RequestId, params: Option<Value>, ctx: &mut Context<Self>) {
        match task_id_param(params.as_ref(), methods::TASKS_CANCEL) {
            Ok(task_id) => self.answer_with(id, self.shared.tasks.clone().cancel(self.identity.clone(), task_id), ctx),
            Err(e) => self.finish(id, Err(e)),
        }
    }

    /// notifications/cancelled from the client: forward to the one upstream that owns the
    /// request, with its id rewritten, and send no response for it.
    fn cancel(&mut self, params: Option<Value>, ctx: &mut Context<Self>) {
        let cancellations = self.shared.metrics.cancellations.clone();
        cancellations.with_label_values(&["received", "none"]).inc();
        let ignored = |reason: &str| cancellations.with_label_values(&["ignored", reason]).inc();
        let Some(id) = params.as_ref().and_then(|p| p.get("requestId")).and_then(RequestId::from_value) else {
            tracing::info!(session = %self.id, "ignored notifications/cancelled without a valid requestId");
            ignored("malformed");
            return;
        };
        match self.requests.get(&id) {
            None => {
                if let Some(suppressed) = crate::logs::limiter().allow("cancel_ignored") {
                    tracing::info!(session = %self.id, request = %crate::logs::Untrusted(&id.to_string()), suppressed, "ignored notifications/cancelled for an unknown or finished request (or initialize)");
                }
                ignored("unknown_request");
                return;
            }
            Some(request) if request.task_augmented => {
                // basic/utilities/cancellation: task-augmented requests use tasks/cancel.
                tracing::info!(session = %self.id, request = %crate::logs::Untrusted(&id.to_string()), "ignored notifications/cancelled for a task-augmented request; use tasks/cancel");
                ignored("task_augmented");
                return;
            }
            Some(_) => {}
        }
        let reason = params.as_ref().and_then(|p| p.get("reason")).and_then(Value::as_str).unwrap_or("none given");
        tracing::info!(session = %self.id, request = %crate::logs::Untrusted(&id.to_string()), reason = %crate::logs::Untrusted(reason), "client cancelled a request");
        self.abort_request(&id, params.unwrap_or_else(|| json!({})), ctx);
    }

    /// Ends a request without a response: its work stops, and its upstream request (if any) is
    /// cancelled with `notice` (the params of `notifications/cancelled`, its id rewritten).
    fn abort_request(&mut self, id: &RequestId, mut notice: Value, ctx: &mut Context<Self>) {
        let Some(request) = self.forget(id) else { return };
        if let Some(handle) = request.running {
            ctx.cancel_future(handle);
        }
        if let Some(progress) = request.progress {
            let _ = progress.try_send(Abandon);
        }
        request.reply.close();
        let Some((upstream, upstream_id)) = request.upstream else { return };
        if request.task_augmented {
            return; // the task lives on; tasks/cancel stops it
        }
        self.shared.metrics.cancellations.with_label_values(&["forwarded", "none"]).inc();
        if let Some(session) = self.upstreams.get(&upstream).cloned() {
            notice["requestId"] = upstream_id.to_value();
            let notify = async move { session.notify(methods::CANCELLED, Some(notice)).await };
            ctx.spawn(notify.into_actor(self).map(move |sent, _, _| {
                if let Err(e) = sent {
                    tracing::info!(%upstream, error = %e, "could not forward a cancellation");
                }
            }));
        }
    }

    /// The stream a message about `related` (an upstream-local id) should go on: the client
    /// request's stream when it is still open, otherwise the GET stream.
    fn stream_for(&self, upstream: &str, related: Option<&RequestId>) -> Option<Outbound> {
        related
            .and_then(|r| self.by_upstream.get(&(upstream.to_owned(), r.clone())))
            .and_then(|client_id| self.requests.get(client_id))
            .map(|r| r.reply.clone())
            .filter(|s| !s.is_closed())
            .or_else(|| self.get_stream.clone().filter(|s| !s.is_closed()))
    }

    /// The task a message from an upstream belongs to, if any: it arrived on the stream of a
    /// request made for a task, or its related-task `_meta` names a native upstream task. That
    /// `_meta` is rewritten to the gateway's task id, or removed when it names no task of ours:
    /// an upstream's task id never reaches a client (invariant 5).
    fn task_of(&self, upstream: &str, related: Option<&RequestId>, params: &mut Option<Value>) -> Option<String> {
        let by_call = related.and_then(|r| self.shared.tasks.task_of_call(&(upstream.to_owned(), r.clone())));
        let named = params
            .as_ref()
            .and_then(|p| p.pointer("/_meta/io.modelcontextprotocol~1related-task/taskId"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let by_meta =
            named.and_then(|upstream_task| self.shared.tasks.native_task(&(upstream.to_owned(), upstream_task)));
        let task = by_call.or(by_meta);
        if let Some(Value::Object(p)) = params {
            match &task {
                // Messages related to a task MUST carry its related-task _meta.
                Some(task) => {
                    let meta = p.entry("_meta").or_insert_with(|| json!({}));
                    meta[mcp::meta::RELATED_TASK] = json!({ "taskId": task });
                }
                None => {
                    if let Some(Value::Object(meta)) = p.get_mut("_meta") {
                        meta.remove(mcp::meta::RELATED_TASK);
                    }
                }
            }
        } else if let (Some(task), None) = (&task, params.as_ref()) {
            *params = Some(json!({ "_meta": { mcp::meta::RELATED_TASK: { "taskId": task } } }));
        }
        task
    }

    /// Relays a request an upstream sent (elicitation, sampling, roots) to the client with a
    /// gateway-issued id: on the stream of the request it belongs to, or of a `tasks/result`
    /// waiting on its task, or else the GET stream.
    #[allow(clippy::too_many_arguments)]
    fn relay_request(
        &mut self,
        upstream: String,
        id: RequestId,
        method: String,
        mut params: Option<Value>,
        related: Option<RequestId>,
        ctx: &mut Context<Self>,
    ) {
        let task = self.task_of(&upstream, related.as_ref(), &mut params);
        let relayed_token = params.as_ref().and_then(|p| p.pointer("/_meta/progressToken")).cloned();
        let task_stream = task.as_ref().and_then(|t| {
            self.requests
                .values()
                .find(|r| r.task.as_ref() == Some(t))
                .map(|r| r.reply.clone())
                .filter(|s| !s.is_closed())
        });
        let stream = task_stream.or_else(|| self.stream_for(&upstream, related.as_ref()));
        let Some(session) = self.upstreams.get(&upstream).cloned() else { return };
        let refuse = |code: i64, why: String| {
            let reply = RpcMessage::error(Some(id.clone()), ErrorObject::new(code, why));
            async move {
                let _ = session.respond(reply).await;
            }
        };
        // A request for a capability the client did not declare is answered on its behalf
        // (basic/lifecycle "Capability Negotiation": both parties respect what was negotiated).
        if let Some(capability) = mcp::client_capability_for(&method) {
            if self.client.capabilities.get(capability).is_none() {
                let why = format!("the client did not declare the {capability} capability; {method} was not relayed");
                ctx.spawn(refuse(taskgate_protocol::codes::METHOD_NOT_FOUND, why).into_actor(self));
                return;
            }
        }
        let internal = taskgate_protocol::codes::INTERNAL_ERROR;
        if self.relayed.len() >= MAX_RELAYED {
            ctx.spawn(refuse(internal, format!("the client has {MAX_RELAYED} unanswered requests")).into_actor(self));
            return;
        }
        let gateway_id = RequestId::String(format!("taskgate-{}", self.next_relay));
        let message = RpcMessage::request(gateway_id.clone(), method.clone(), params);
        let used = stream.clone();
        match (stream, &task) {
            (Some(stream), _) => {
                if let Err(refused) = stream.send(&message) {
                    let why = match refused {
                        crate::outbound::Refused::Full => {
                            "the client's stream is full (it reads slower than it is sent)"
                        }
                        _ => "the client's stream has ended (it stopped reading, or went away)",
                    };
                    ctx.spawn(refuse(internal, why.into()).into_actor(self));
                    return;
                }
            }
            // A task's request waits for the client to look (tasks/result or a GET stream):
            // the task is input_required meanwhile.
            (None, Some(task)) if self.queued.len() < MAX_QUEUED => {
                let frame = Frame::new(&message);
                if self.queued_bytes + frame.json.len() > self.shared.config.server.session_buffer_bytes {
                    let why = "the client has too much waiting for it (server.session_buffer_bytes)".to_owned();
                    ctx.spawn(refuse(internal, why).into_actor(self));
                    return;
                }
                self.queued_bytes += frame.json.len();
                self.queued.push(Queued { task: task.clone(), id: Some(gateway_id.clone()), frame });
            }
            (None, _) => {
                let why = format!("the client has no open stream on which to receive {method}");
                ctx.spawn(refuse(internal, why).into_actor(self));
                return;
            }
        }
        self.next_relay += 1;
        if let Some(actor) = task.as_ref().and_then(|t| self.shared.tasks.actor(t)) {
            let _ = actor.try_send(InputRequested);
        }
        let progress_token = relayed_token;
        self.relayed.insert(gateway_id, Relayed { upstream, upstream_id: id, task, progress_token, stream: used });
    }

    /// Something an upstream sent on its own. A message naming an upstream task not known yet,
    /// while a native task creation on that upstream is in flight, is held until it settles:
    /// the upstream may speak of its task before its `CreateTaskResult` reaches us.
    fn on_upstream_event(&mut self, upstream: String, event: UpstreamEvent, ctx: &mut Context<Self>) {
        if self.native_creating.get(&upstream).is_some_and(|n| *n > 0) && self.names_unknown_task(&upstream, &event) {
            if self.held.len() < MAX_HELD {
                self.held.push((upstream, event));
            } else {
                tracing::warn!(session = %self.id, %upstream, "too many held upstream messages; one dropped");
            }
            return;
        }
        match event {
            UpstreamEvent::Notification { method, params, .. } if method == methods::TASKS_STATUS => {
                // It names the upstream's task id: never forwarded, only fed to our task's actor.
                if let Some(up) = params.as_ref().and_then(TaskView::from_value) {
                    let task = self.shared.tasks.native_task(&(upstream, up.task_id.clone()));
                    if let Some(actor) = task.and_then(|t| self.shared.tasks.actor(&t)) {
                        let _ = actor.try_send(UpstreamStatus(up));
                    }
                }
            }
            UpstreamEvent::Request { id, method, params, related } => {
                self.relay_request(upstream, id, method, params, related, ctx)
            }
            UpstreamEvent::Notification { method, .. } if method == methods::TOOLS_LIST_CHANGED => {
                if self.shared.router.try_send(RefreshUpstream(upstream)).is_err() {
                    tracing::warn!("the router's queue is full; a tools/list_changed was not handled");
                }
            }
            UpstreamEvent::Notification { method, params, .. } if method == methods::CANCELLED => {
                self.upstream_cancelled(&upstream, params);
            }
            UpstreamEvent::Notification { method, .. } if method == methods::PROGRESS => {
                // Progress of live requests reaches them through their own call; this names
                // no live request, so it is not forwarded (nothing after completion).
                tracing::debug!(session = %self.id, %upstream, "progress for no live request dropped");
                self.shared.progress.count(crate::progress::Outcome::Dropped);
            }
            UpstreamEvent::Notification { method, mut params, related } => {
                self.task_of(&upstream, related.as_ref(), &mut params);
                match self.stream_for(&upstream, related.as_ref()) {
                    Some(stream) => {
                        if stream.send(&RpcMessage::notification(method, params)).is_err() {
                            tracing::debug!(session = %self.id, %upstream, "client stream full; notification dropped");
                        }
                    }
                    None => {
                        tracing::debug!(session = %self.id, %upstream, %method, "no open client stream; notification dropped")
                    }
                }
            }
        }
    }

    fn names_unknown_task(&self, upstream: &str, event: &UpstreamEvent) -> bool {
        let params = match event {
            UpstreamEvent::Notification { params, .. } | UpstreamEvent::Request { params, .. } => params,
        };
        let named = params
            .as_ref()
            .and_then(|p| p.pointer("/_meta/io.modelcontextprotocol~1related-task/taskId"))
            .and_then(Value::as_str);
        named.is_some_and(|t| !self.shared.tasks.knows_native(&(upstream.to_owned(), t.to_owned())))
    }

    /// A native task creation on `upstream` settled: replay what was held for it.
    fn native_created(&mut self, upstream: &str, ctx: &mut Context<Self>) {
        if let Some(n) = self.native_creating.get_mut(upstream) {
            *n = n.saturating_sub(1);
        }
        for (upstream, event) in std::mem::take(&mut self.held) {
            self.on_upstream_event(upstream, event, ctx);
        }
    }

    /// Progress the client reports on a request an upstream sent it: back to that upstream.
    fn client_progress(&mut self, params: Option<Value>, ctx: &mut Context<Self>) {
        let token = params.as_ref().and_then(|p| p.get("progressToken"));
        let owner = token.and_then(|t| self.relayed.values().find(|r| r.progress_token.as_ref() == Some(t)));
        let Some(upstream) = owner.map(|r| r.upstream.clone()) else {
            tracing::debug!(session = %self.id, "client progress for no relayed request ignored");
            return;
        };
        if let Some(session) = self.upstreams.get(&upstream).cloned() {
            ctx.spawn(
                async move {
                    let _ = session.notify(methods::PROGRESS, params).await;
                }
                .into_actor(self),
            );
        }
    }

    /// An upstream cancelled a request it had sent through the gateway: tell the client, with
    /// the id the client knows.
    fn upstream_cancelled(&mut self, upstream: &str, params: Option<Value>) {
        let Some(upstream_id) = params.as_ref().and_then(|p| p.get("requestId")).and_then(RequestId::from_value) else {
            return;
        };
        let gateway_id = self
            .relayed
            .iter()
            .find(|(_, r)| r.upstream == upstream && r.upstream_id == upstream_id)
            .map(|(g, _)| g.clone());
        let Some(gateway_id) = gateway_id else {
            tracing::debug!(session = %self.id, %upstream, "upstream cancelled a request the client never saw");
            return;
        };
        let relayed = self.relayed.remove(&gateway_id).expect("found above");
        let mut forwarded = params.unwrap_or_else(|| json!({}));
        forwarded["requestId"] = gateway_id.to_value();
        let stream =
            relayed.stream.filter(|s| !s.is_closed()).or_else(|| self.get_stream.clone().filter(|s| !s.is_closed()));
        match stream {
            Some(stream) => {
                let _ = stream.send(&RpcMessage::notification(methods::CANCELLED, Some(forwarded)));
            }
            None => {
                self.unqueue(|q| q.id.as_ref() == Some(&gateway_id));
            }
        }
    }

    /// Takes the queued messages that `which` selects, in order.
    fn unqueue(&mut self, which: impl Fn(&Queued) -> bool) -> Vec<Queued> {
        let (taken, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.queued).into_iter().partition(|q| which(q));
        self.queued = rest;
        self.queued_bytes = self.queued.iter().map(|q| q.frame.json.len()).sum();
        taken
    }

    /// Lets go of the upstream sessions: each ends when no task still runs on it.
    fn release_upstreams(&mut self) {
        self.upstreams.clear();
    }
}

/// Runs an upstream `tools/call`, forwarding the notifications that belong to it, all before
/// the result: progress to its [`ProgressActor`] (awaited, so order holds), anything else to
/// the client's stream for the request. With `finish`, the progress actor delivers what it has
/// pending and stops before the result is returned.
pub(crate) async fn relay_call(
    session: UpstreamSession,
    upstream_id: RequestId,
    params: Value,
    reply: Option<Outbound>,
    progress: Option<Addr<ProgressActor>>,
    finish: bool,
    relay: Option<Addr<SessionActor>>,
) -> Result<Value, taskgate_upstream::UpstreamError> {
    let (related, mut notes) = mpsc::channel(UPSTREAM_EVENTS);
    let call = session.request_routed(upstream_id.clone(), methods::TOOLS_CALL, Some(params), Some(related));
    tokio::pin!(call);
    let forward = |note: RpcMessage| {
        let progress = progress.clone();
        let reply = reply.clone();
        let (relay, session, related) = (relay.clone(), session.clone(), upstream_id.clone());
        async move {
            match (note, &progress) {
                // A request the upstream sent on the call's stream: relayed (awaited) before
                // anything after it, so the client sees it before the response.
                (request @ RpcMessage::Request { .. }, _) => match relay {
                    Some(session_actor) => {
                        let upstream = session.upstream().to_owned();
                        let _ = session_actor.send(RelayFromCall { upstream, request, related }).await;
                    }
                    None => session.hand_over(request, related).await,
                },
                (RpcMessage::Notification { method, params: Some(params) }, Some(actor))
                    if method == methods::PROGRESS =>
                {
                    let _ = actor.send(Progress(params)).await;
                }
                (RpcMessage::Notification { method, .. }, _) if method == methods::PROGRESS => {}
                (note, _) => {
                    // A client that stopped reading overflows its stream: the session is told
                    // and cancels the call.
                    if let Some(reply) = &reply {
                        if reply.send(&note).is_err() {
                            tracing::debug!("client stream overflowed or closed; a notification was dropped");
                        }
                    }
                }
            }
        }
    };
    // The call first: its timeout must fire on time even while the upstream floods
    // notifications. What it sent before its response is already queued and goes first.
    let outcome = loop {
        tokio::select! {
            biased;
            outcome = &mut call => {
                while let Ok(note) = notes.try_recv() {
                    forward(note).await;
                }
                break outcome;
            }
            Some(note) = notes.recv() => forward(note).await,
        }
    };
    if let (true, Some(actor)) = (finish, &progress) {
        let _ = actor.send(Finish).await;
    }
    outcome
}

/// `params.taskId` of a task method; the method parameter is the source of truth (any
/// related-task `_meta` in the request is ignored).
fn task_id_param(params: Option<&Value>, method: &str) -> Result<String, GatewayError> {
    match params.and_then(|p| p.get("taskId")) {
        Some(Value::String(id)) => Ok(id.clone()),
        Some(other) => Err(GatewayError::InvalidParams(format!("{method}: \"taskId\" must be a string, got {other}"))),
        None => Err(GatewayError::InvalidParams(format!("{method} needs params {{\"taskId\": string}}"))),
    }
}

impl Actor for SessionActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.set_mailbox_capacity(self.shared.config.server.session_mailbox);
        tracing::info!(session = %self.id, tenant = %self.identity.tenant, "session started");
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        let open: Vec<RequestId> = self.requests.keys().cloned().collect();
        for id in open {
            if let Some(request) = self.forget(&id) {
                if let Some(progress) = request.progress {
                    let _ = progress.try_send(Abandon);
                }
            }
        }
        self.shared.sessions.remove(&self.id);
        self.release_upstreams();
        tracing::info!(session = %self.id, "session ended");
    }
}

/// A JSON-RPC request from the client. Messages about it, then its response, go to `reply`.
pub(crate) struct ClientRequest {
    pub id: RequestId,
    pub method: String,
    pub params: Option<Value>,
    pub reply: Outbound,
}

impl Message for ClientRequest {
    type Result = Result<(), GatewayError>;
}

impl Handler<ClientRequest> for SessionActor {
    type Result = Result<(), GatewayError>;

    fn handle(&mut self, msg: ClientRequest, ctx: &mut Context<Self>) -> Self::Result {
        let ClientRequest { id, method, params, reply } = msg;
        if self.requests.contains_key(&id) {
            return Err(GatewayError::InvalidRequest(format!(
                "request id {id} is already in use by a request in progress in this session"
            )));
        }
        let max = self.shared.config.server.session_mailbox;
        if self.requests.len() >= max {
            self.shared
                .metrics
                .admission_rejected
                .with_label_values(&[&self.identity.tenant, "session_requests"])
                .inc();
            return Err(GatewayError::Overloaded(format!("this session already has {max} requests in progress")));
        }
        let task = (method == methods::TASKS_RESULT)
            .then(|| params.as_ref().and_then(|p| p.get("taskId")).and_then(Value::as_str).map(str::to_owned))
            .flatten();
        if let Some(task) = &task {
            // Deliver what waited for this task's requestor on this tasks/result stream.
            for queued in self.unqueue(|q| &q.task == task) {
                let _ = reply.send_frame(queued.frame);
            }
        }
        let task_augmented = method == methods::TOOLS_CALL && params.as_ref().is_some_and(|p| p.get("task").is_some());
        self.requests.insert(
            id.clone(),
            InFlight { reply, upstream: None, task, task_augmented, running: None, progress: None },
        );
        self.shared.live_requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        match method.as_str() {
            methods::PING => self.finish(id, Ok(json!({}))),
            methods::TOOLS_LIST => self.list_tools(id, params, ctx),
            methods::TOOLS_CALL => self.call_tool(id, params, ctx),
            methods::TASKS_GET => self.get_task(id, params, ctx),
            methods::TASKS_RESULT => self.task_result(id, params, ctx),
            methods::TASKS_LIST => self.list_tasks(id, params, ctx),
            methods::TASKS_CANCEL => self.cancel_task(id, params, ctx),
            methods::INITIALIZE => self.finish(
                id,
                Err(GatewayError::InvalidRequest(
                    "this session is already initialized; send initialize without Mcp-Session-Id to start another"
                        .into(),
                )),
            ),
            other => {
                let why =
                    format!("{other} (taskgate federates tools: it serves initialize, ping, tools/* and tasks/*)");
                self.finish(id, Err(GatewayError::MethodNotFound(why)))
            }
        }
        Ok(())
    }
}

/// A JSON-RPC notification from the client.
pub(crate) struct ClientNotification {
    pub method: String,
    pub params: Option<Value>,
}

impl Message for ClientNotification {
    type Result = ();
}

impl Handler<ClientNotification> for SessionActor {
    type Result = ();

    fn handle(&mut self, msg: ClientNotification, ctx: &mut Context<Self>) {
        match msg.method.as_str() {
            methods::INITIALIZED => {}
            methods::CANCELLED => self.cancel(msg.params, ctx),
            methods::PROGRESS => self.client_progress(msg.params, ctx),
            "notifications/roots/list_changed" => {
                for session in self.upstreams.values() {
                    let (session, params) = (session.clone(), msg.params.clone());
                    ctx.spawn(
                        async move {
                            let _ = session.notify("notifications/roots/list_changed", params).await;
                        }
                        .into_actor(self),
                    );
                }
            }
            other => {
                tracing::debug!(session = %self.id, method = %crate::logs::Untrusted(other), "client notification ignored")
            }
        }
    }
}

/// The client's response to a request an upstream sent through the gateway.
pub(crate) struct ClientResponse(pub RpcMessage);

impl Message for ClientResponse {
    type Result = Result<(), GatewayError>;
}

impl Handler<ClientResponse> for SessionActor {
    type Result = Result<(), GatewayError>;

    fn handle(&mut self, ClientResponse(message): ClientResponse, ctx: &mut Context<Self>) -> Self::Result {
        let Some(id) = message.id().cloned() else {
            return Err(GatewayError::InvalidRequest("a response needs the id of the request it answers".into()));
        };
        let Some(Relayed { upstream, upstream_id, task, .. }) = self.relayed.remove(&id) else {
            return Err(GatewayError::InvalidRequest(format!(
                "no request with id {id} is waiting for a response in this session"
            )));
        };
        let mapped = match message {
            RpcMessage::Response { result, .. } => RpcMessage::response(upstream_id, result),
            RpcMessage::Error { error, .. } => RpcMessage::error(Some(upstream_id), error),
            _ => unreachable!("ClientResponse carries responses"),
        };
        if let Some(actor) = task.as_ref().and_then(|t| self.shared.tasks.actor(t)) {
            let _ = actor.try_send(InputProvided);
        }
        if let Some(session) = self.upstreams.get(&upstream).cloned() {
            ctx.spawn(
                async move {
                    if let Err(e) = session.respond(mapped).await {
                        tracing::info!(error = %e, "could not deliver a client response upstream");
                    }
                }
                .into_actor(self),
            );
        }
        Ok(())
    }
}

/// The client opened its GET stream.
pub(crate) struct OpenStream(pub Outbound);

impl Message for OpenStream {
    type Result = Result<(), GatewayError>;
}

impl Handler<OpenStream> for SessionActor {
    type Result = Result<(), GatewayError>;

    fn handle(&mut self, OpenStream(tx): OpenStream, _: &mut Context<Self>) -> Self::Result {
        // One GET stream at a time, so no message is sent on two streams (basic/transports
        // "Multiple Connections"). A new one replaces the old at once, taking over what it had
        // not delivered: a client whose connection dropped reconnects without waiting for the
        // gateway to notice the dead one.
        if let Some(old) = self.get_stream.take() {
            tx.take_over(&old);
        }
        for queued in self.unqueue(|_| true) {
            let _ = tx.send_frame(queued.frame);
        }
        self.get_stream = Some(tx);
        Ok(())
    }
}

/// A request an upstream sent on the response stream of a call of this session.
pub(crate) struct RelayFromCall {
    pub upstream: String,
    pub request: RpcMessage,
    /// The call's upstream-local id.
    pub related: RequestId,
}

impl Message for RelayFromCall {
    type Result = ();
}

impl Handler<RelayFromCall> for SessionActor {
    type Result = ();

    fn handle(&mut self, RelayFromCall { upstream, request, related }: RelayFromCall, ctx: &mut Context<Self>) {
        if let RpcMessage::Request { id, method, params } = request {
            self.relay_request(upstream, id, method, params, Some(related), ctx);
        }
    }
}

/// A stream of this session overflowed: its client stopped reading (the request's, or the GET
/// stream when `None`).
pub(crate) struct StreamOverflowed(pub Option<RequestId>);

impl Message for StreamOverflowed {
    type Result = ();
}

impl Handler<StreamOverflowed> for SessionActor {
    type Result = ();

    fn handle(&mut self, StreamOverflowed(request): StreamOverflowed, ctx: &mut Context<Self>) {
        let tenant = &self.identity.tenant;
        match request {
            // The id may name a newer request by now: only the overflowed stream's is stopped.
            Some(id) if self.requests.get(&id).is_some_and(|r| r.reply.overflowed()) => {
                tracing::warn!(session = %self.id, %tenant, request = %crate::logs::Untrusted(&id.to_string()), "the client stopped reading a reply stream and its budget ran out; the request is cancelled");
                let notice = json!({ "reason": "the client stopped reading its response stream" });
                self.abort_request(&id, notice, ctx);
            }
            Some(_) => {}
            None => {
                if self.get_stream.as_ref().is_some_and(Outbound::overflowed) {
                    tracing::warn!(session = %self.id, %tenant, "the client stopped reading its GET stream and its budget ran out; the stream is closed");
                    self.get_stream = None;
                }
            }
        }
    }
}

/// The gateway is shutting down: the GET stream ends now.
pub(crate) struct EndGetStream;

impl Message for EndGetStream {
    type Result = ();
}

impl Handler<EndGetStream> for SessionActor {
    type Result = ();

    fn handle(&mut self, _: EndGetStream, _: &mut Context<Self>) {
        if let Some(stream) = self.get_stream.take() {
            stream.close();
        }
    }
}

/// The Supervisor found the session idle: it closes unless a request came in since, one is in
/// flight, or its GET stream is open. Answers whether it closed.
pub(crate) struct CloseIfIdle {
    pub cutoff_ms: u64,
    pub last_seen_ms: Arc<std::sync::atomic::AtomicU64>,
}

impl Message for CloseIfIdle {
    type Result = bool;
}

impl Handler<CloseIfIdle> for SessionActor {
    type Result = bool;

    fn handle(&mut self, msg: CloseIfIdle, ctx: &mut Context<Self>) -> bool {
        let seen = msg.last_seen_ms.load(std::sync::atomic::Ordering::Relaxed);
        let streaming = self.get_stream.as_ref().is_some_and(|s| !s.is_closed());
        if seen >= msg.cutoff_ms || streaming || !self.requests.is_empty() || !self.relayed.is_empty() {
            return false;
        }
        ctx.stop();
        true
    }
}

/// The client ended the session (DELETE) or the gateway is shutting it down.
pub(crate) struct Close;

impl Message for Close {
    type Result = ();
}

impl Handler<Close> for SessionActor {
    type Result = ();

    fn handle(&mut self, _: Close, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}

/// The federated tool list changed.
pub(crate) struct ToolsChanged;

impl Message for ToolsChanged {
    type Result = ();
}

impl Handler<ToolsChanged> for SessionActor {
    type Result = ();

    fn handle(&mut self, _: ToolsChanged, _: &mut Context<Self>) {
        if let Some(stream) = &self.get_stream {
            let _ = stream.send(&RpcMessage::notification(methods::TOOLS_LIST_CHANGED, None));
        }
    }
}

/// Progress of a task of this session's requestor: on the task's `tasks/result` stream when
/// one is open here, else the GET stream (one stream, never both).
pub(crate) struct TaskProgress {
    pub task_id: String,
    pub notification: RpcMessage,
}

impl Message for TaskProgress {
    type Result = ();
}

impl Handler<TaskProgress> for SessionActor {
    type Result = ();

    fn handle(&mut self, TaskProgress { task_id, notification }: TaskProgress, _: &mut Context<Self>) {
        let stream = self
            .requests
            .values()
            .find(|r| r.task.as_deref() == Some(task_id.as_str()))
            .map(|r| r.reply.clone())
            .filter(|s| !s.is_closed())
            .or_else(|| self.get_stream.clone().filter(|s| !s.is_closed()));
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
        if let Some(stream) = self.get_stream.as_ref().filter(|s| !s.is_closed()) {
            let _ = stream.send(&RpcMessage::notification(methods::TASKS_STATUS, Some(task)));
        }
    }
}

impl StreamHandler<(String, UpstreamEvent)> for SessionActor {
    fn handle(&mut self, (upstream, event): (String, UpstreamEvent), ctx: &mut Context<Self>) {
        self.on_upstream_event(upstream, event, ctx);
    }

    fn finished(&mut self, _: &mut Context<Self>) {
        // An upstream session's event stream ends when it closes; the actor lives on.
    }
}

/// How long a task's reservation under the caps holds before its creation: the upstream's
/// response time limit, and a minute more.
fn session_timeout_ms(shared: &Shared, upstream: &str) -> u64 {
    let secs = shared.connectors.get(upstream).map_or(300, |c| c.config().timeout_secs);
    secs.saturating_add(60).saturating_mul(1000)
}
