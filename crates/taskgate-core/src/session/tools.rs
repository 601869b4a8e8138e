//! `tools/list` and `tools/call`: the federated listing, tool-level task negotiation, and plain
//! calls relayed with their progress and notifications.

use std::sync::Arc;

use actix::prelude::*;
use serde_json::{json, Value};
use taskgate_protocol::mcp::{methods, TaskSupport};
use taskgate_protocol::{mcp, RawArguments, RequestId};
use taskgate_upstream::UpstreamSession;

use super::session_context::SessionContext;
use super::task_calls::{Admitted, Adopted, TaskRun};
use super::{SessionActor, TaskMode};
use crate::catalog::ToolEntry;
use crate::forwarded_call::{relay_call, ForwardedCall, ProgressEnds, ResultAs};
use crate::outbound::Outbound;
use crate::progress::{ProgressActor, ProgressTarget};
use crate::router::{EnsureCatalog, ToolCatalog, UpstreamFailure};
use crate::{tasks, GatewayError};

impl SessionActor {
    /// A call; `arguments`, when the front door kept them as the client wrote them (an object,
    /// checked), are not in `params`.
    pub(super) fn call_tool(
        &mut self,
        id: RequestId,
        params: Option<Value>,
        arguments: Option<RawArguments>,
        ctx: &mut Context<Self>,
    ) {
        let view = match mcp::ToolCallView::from_params(params.as_ref()) {
            Ok(view) => mcp::ToolCallView { arguments, ..view },
            Err(why) => return self.finish(id, Err(GatewayError::InvalidParams(why))),
        };
        let name = view.name.clone();
        // A tool of an upstream the tenant does not see, or one its tool rules leave out, is
        // unknown to it, exactly like one that does not exist.
        if self.shown.endpoint.is_meta_tool(&name) {
            return self.meta_tool(id, params, view, ctx);
        }
        let policy = self.shared.tenancy.policy(&self.identity.tenant);
        let endpoint = self.shown.endpoint.clone();
        let resolved = self
            .catalog
            .catalog
            .read()
            .resolve(&name)
            .filter(|e| policy.serves_at(&endpoint, &e.upstream, &name))
            .cloned();
        match resolved {
            Some(entry) => self.dispatch_call(id, params, view, entry, ctx),
            None => {
                // Not listed: the catalog may not be loaded yet, or the upstream may be down.
                let router = self.shared.router.clone();
                let ToolCatalog { caps, catalog } = self.catalog.clone();
                let apps = mcp::declares_ui(&self.client.capabilities);
                let lookup = async move {
                    let _ = router.send(EnsureCatalog(caps)).await;
                    let owner = {
                        let catalog = catalog.read();
                        if let Some(entry) =
                            catalog.resolve(&name).filter(|e| policy.serves_at(&endpoint, &e.upstream, &name))
                        {
                            return Ok(entry.clone());
                        }
                        // An MCP App's View calls its server's tools by the names the server
                        // gave them: one that a single prefixed upstream has is that one.
                        if apps {
                            let mut found = catalog.by_original_name(&name, |exposed, e| {
                                policy.serves_at(&endpoint, &e.upstream, exposed)
                            });
                            match found.len() {
                                0 => {}
                                1 => return Ok(found.remove(0).1),
                                _ => {
                                    let names: Vec<String> = found.into_iter().map(|(n, _)| n).collect();
                                    return Err(GatewayError::InvalidParams(format!(
                                        "Unknown tool: {name}; several upstreams have a tool of that name, call one of {}",
                                        names.join(", ")
                                    )));
                                }
                            }
                        }
                        catalog.owner_of_unlisted(&name, |u| policy.serves_at(&endpoint, u, &name))
                    };
                    let Some((upstream, own)) = owner else {
                        return Err(GatewayError::InvalidParams(format!("Unknown tool: {name}")));
                    };
                    if let Ok(Some(failure)) = router.send(UpstreamFailure(upstream.clone())).await {
                        return Err(GatewayError::Upstream(failure));
                    }
                    // Not listed, but the name is its upstream's: the upstream answers it, as
                    // it would directly (a plain call; it says if it does not know the tool).
                    let tool = mcp::ToolView::from_value(json!({ "name": own })).expect("an object with a name");
                    Ok(Arc::new(ToolEntry { upstream, tool, native: false, listed: false }))
                };
                ctx.spawn(lookup.into_actor(self).map(move |found, act, ctx| match found {
                    Ok(entry) => act.dispatch_call(id, params, view, entry, ctx),
                    Err(e) => act.finish(id, Err(e)),
                }));
            }
        }
    }

    /// Applies tool-level task negotiation (basic/utilities/tasks "Tool-Level Negotiation"), then
    /// runs the call plainly, as a native upstream task, or as a task the gateway wraps.
    pub(super) fn dispatch_call(
        &mut self,
        id: RequestId,
        params: Option<Value>,
        view: mcp::ToolCallView,
        entry: Arc<ToolEntry>,
        ctx: &mut Context<Self>,
    ) {
        if !self.requests.contains(&id) {
            return; // cancelled while the tool was being resolved
        }
        // ext-apps, Visibility: a tool for apps only is called from an app, which only a host
        // declaring MCP Apps runs.
        if crate::offering_names::app_only(&entry.tool.raw) && !mcp::declares_ui(&self.client.capabilities) {
            let message = format!(
                "tool {} is for MCP Apps only (_meta.ui.visibility has no \"model\"); a client that declares the {} extension calls it from an app",
                view.name,
                mcp::UI_EXTENSION
            );
            let e = match self.stateless {
                true => GatewayError::MissingClientCapability {
                    message,
                    required: json!({ "extensions": { mcp::UI_EXTENSION: { "mimeTypes": ["text/html;profile=mcp-app"] } } }),
                },
                false => GatewayError::InvalidParams(message),
            };
            return self.finish(id, Err(e));
        }
        let upstream_config = self.shared.connectors.get(&entry.upstream).map(|c| c.config());
        let support = tasks::task_support(&entry, upstream_config);
        let first_input_wait = upstream_config
            .and_then(|c| c.tool_first_input_wait_ms.get(&entry.tool.name))
            .filter(|ms| **ms > 0)
            .map(|ms| std::time::Duration::from_millis(*ms));
        let mcp::ToolCallView { name, task: requested, arguments } = view;
        let mode = self.requests.get(&id).map(|r| r.mode).unwrap_or_default();
        // ext-tasks: "the server decides". For an upstream that speaks the extension, that is the
        // upstream: a client that can take a task sends it a call declaring the extension, and
        // gets the upstream's answer, a task or not.
        // A tool its upstream does not list is called plainly: never a task, not even one the
        // upstream would decide on.
        let upstream_decides = entry.listed && self.speaks_tasks_extension(&entry.upstream);
        let decided = upstream_decides && mode == (TaskMode::GatewayDecides { accepts: true });
        let path = call_path(mode, support, entry.listed, decided, requested);
        let requested = match path {
            CallPath::Task(ttl) => Some(ttl),
            _ => None,
        };
        if let (TaskMode::GatewayDecides { .. }, Some(request)) = (mode, self.requests.get_mut(&id)) {
            request.task_augmented = requested.is_some();
        }
        let mut params = params;
        if let (TaskMode::GatewayDecides { .. }, Some(Value::Object(p))) = (mode, params.as_mut()) {
            p.remove("task");
        }
        // A task keeps its params as a tree (in its record, for its call and a restart): the
        // arguments go back in. A plain call passes them on as written.
        let arguments = match arguments {
            Some(arguments) if requested.is_some() => {
                arguments.restore(&mut params);
                None
            }
            arguments => arguments,
        };
        let Some(session) = self.upstream_session(&entry.upstream, ctx) else {
            let e = GatewayError::Internal(format!("upstream '{}' has no connector", entry.upstream));
            return self.finish(id, Err(e));
        };
        let mut upstream_params = params.unwrap_or_else(|| json!({}));
        upstream_params["name"] = Value::from(entry.tool.name.clone());
        if upstream_decides && mode == (TaskMode::GatewayDecides { accepts: false }) {
            // A 2026-07-28 client that declares no tasks extension gets the upstream's own
            // answer: a tool that must be a task is refused -32021 (ext-tasks "Required
            // Capabilities"), not run as a task the gateway waits on for it.
            upstream_params["task"] = Value::Bool(false);
        }
        // A client that asked for a task has the gateway's at once; at an upstream that speaks
        // the extension, the call declares it, and the gateway's task follows whatever the
        // upstream makes of it.
        let run = match (upstream_decides, entry.native) {
            (true, _) => TaskRun::UpstreamDecides,
            (false, true) => TaskRun::Native,
            (false, false) => TaskRun::Wrapped,
        };
        // A tool the gateway wraps may ask first, in the call that makes its task, a client
        // that takes its task from the call's answer (asking_first.rs).
        let ask_first = match (run, mode) {
            (TaskRun::Wrapped, TaskMode::GatewayDecides { accepts: true }) => first_input_wait,
            _ => None,
        };
        match path {
            CallPath::Refused(refusal) => self.finish(id, Err(refusal.error(&name))),
            CallPath::Decided => self.forward_decided_call(id, (upstream_params, arguments), entry, session, ctx),
            CallPath::Task(ttl) => {
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
                            let admitted = Admitted { record, run, permit: Some(permit), ask_first };
                            self.start_task(id, upstream_params, admitted, session, ctx)
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
                    Ok(()) => act.start_task(
                        id,
                        upstream_params,
                        Admitted { record, run, permit: None, ask_first },
                        session,
                        ctx,
                    ),
                    Err(e) => {
                        act.shared.tasks.holdings.release(&record.id);
                        act.finish(id, Err(e))
                    }
                }));
            }
            CallPath::Plain => {
                let unlisted = (!entry.listed).then(|| Unlisted { own: entry.tool.name.clone(), exposed: name });
                let target = Target { upstream: entry.upstream.clone(), unlisted };
                self.forward_call(id, upstream_params, arguments, target, session, ctx)
            }
        }
    }

    /// Whether an upstream speaks the tasks extension (its capabilities as listed) to this
    /// session: a 2025-11-25 client's sessions of a dual-era upstream speak 2025-11-25.
    fn speaks_tasks_extension(&self, upstream: &str) -> bool {
        if !self.shared.connectors.get(upstream).is_some_and(|c| c.speaks_2026_to(&self.client)) {
            return false;
        }
        let catalog = self.shared.catalog.read();
        catalog
            .capabilities(upstream)
            .and_then(|c| c.get("extensions"))
            .is_some_and(|e| e.get(taskgate_protocol::revision_2026::TASKS_EXTENSION).is_some())
    }

    /// A call the upstream decides about, for a client that can take a task: sent declaring
    /// the tasks extension, as a plain call (its progress on the request's stream, cancelled
    /// like one). An answer at once is the client's; a task the upstream makes becomes the
    /// gateway's task following it, admitted under the caps then.
    fn forward_decided_call(
        &mut self,
        id: RequestId,
        (mut params, arguments): (Value, Option<RawArguments>),
        entry: Arc<ToolEntry>,
        session: UpstreamSession,
        ctx: &mut Context<Self>,
    ) {
        params["task"] = json!({});
        let upstream_id = session.next_request_id();
        self.requests.sent(&id, &entry.upstream, &upstream_id);
        let reply = self.requests.get(&id).map(|r| r.reply.clone()).expect("checked by the caller");
        let progress = self.request_progress(&mut params, &reply);
        if let Some(request) = self.requests.get_mut(&id) {
            request.progress = progress.clone();
        }
        let span = self.upstream_span(&id, methods::TOOLS_CALL, &entry.upstream);
        let caller = session.clone();
        let relay = self.myself.clone();
        let call = async move {
            let outcome = relay_call(ForwardedCall {
                session: caller.clone(),
                method: methods::TOOLS_CALL,
                upstream_id,
                params,
                arguments,
                reply: Some(reply),
                progress,
                progress_ends: ProgressEnds::WithTheCall,
                relay,
                result: ResultAs::Read,
            })
            .await;
            let resume = match &outcome {
                Ok(_) => caller.resume_point().await,
                Err(_) => None,
            };
            (outcome, resume)
        };
        let call = self.for_request(&id, tracing::Instrument::instrument(call, span));
        let finished = id.clone();
        let handle = ctx.spawn(call.into_actor(self).map(move |(outcome, resume), act, ctx| {
            let result = match outcome {
                Ok(payload) => payload.into_value(),
                Err(e) => return act.finish(finished, Err(GatewayError::from(e))),
            };
            if !result.get("task").is_some_and(Value::is_object) {
                return act.finish(finished, Ok(result));
            }
            act.adopt_decided_task(finished, result, resume, entry, session, ctx);
        }));
        if let Some(request) = self.requests.get_mut(&id) {
            request.running = Some(handle);
        }
    }

    /// The upstream made a task of a call it decided about: admitted as the gateway's task
    /// following it, or, over a cap, cancelled at the upstream and refused.
    fn adopt_decided_task(
        &mut self,
        id: RequestId,
        result: Value,
        resume: Option<taskgate_upstream::SessionResume>,
        entry: Arc<ToolEntry>,
        session: UpstreamSession,
        ctx: &mut Context<Self>,
    ) {
        let refuse = {
            let (upstream_task, session, id) = (result.pointer("/task/taskId").cloned(), session.clone(), id.clone());
            let subject = self.requests.get(&id).and_then(|r| r.subject.clone());
            move |act: &mut Self, e: GatewayError| {
                if let Some(task_id) = upstream_task {
                    actix::spawn(taskgate_upstream::made_for(subject, async move {
                        let _ = session.request(methods::TASKS_CANCEL, Some(json!({ "taskId": task_id }))).await;
                    }));
                }
                act.finish(id, Err(e));
            }
        };
        let record = self.new_task(&entry, None);
        let share = self.shared.tenancy.policy(&self.identity.tenant).shares.tasks;
        if let Err(e) = self.shared.tasks.admit_holding(&record, share) {
            return refuse(self, e);
        }
        let caps = self.shared.tenancy.caps(&self.identity.tenant);
        let uncapped = caps.tenant.is_none() && caps.principal.is_none();
        if !self.shared.tasks.store().shared() || uncapped {
            match self.admit_task() {
                Ok(permit) => {
                    self.early.creating(&entry.upstream);
                    let adopted = Adopted { result, resume, route: None, progress: None, permit: Some(permit) };
                    self.adopt_upstream_task(id, record, adopted, session, ctx)
                }
                Err(e) => {
                    self.shared.tasks.holdings.release(&record.id);
                    refuse(self, e)
                }
            }
            return;
        }
        // Replicas share the caps: a place is reserved in the store, as for any task.
        let hold_ms = session_timeout_ms(&self.shared, &entry.upstream);
        let reserve = self.shared.tasks.clone().reserve(self.identity.clone(), record.id.clone(), caps, hold_ms);
        ctx.spawn(reserve.into_actor(self).map(move |admitted, act, ctx| match admitted {
            Ok(()) => {
                act.early.creating(&entry.upstream);
                let adopted = Adopted { result, resume, route: None, progress: None, permit: None };
                act.adopt_upstream_task(id, record, adopted, session, ctx)
            }
            Err(e) => {
                act.shared.tasks.holdings.release(&record.id);
                refuse(act, e)
            }
        }));
    }

    pub(super) fn forward_call(
        &mut self,
        id: RequestId,
        params: Value,
        arguments: Option<RawArguments>,
        target: Target,
        session: UpstreamSession,
        ctx: &mut Context<Self>,
    ) {
        let Target { upstream, unlisted } = target;
        let upstream_id = session.next_request_id();
        self.requests.sent(&id, &upstream, &upstream_id);
        let upstream_name = upstream;
        let reply = self.requests.get(&id).map(|r| r.reply.clone()).expect("checked by the caller");
        let mut params = params;
        let progress = self.request_progress(&mut params, &reply);
        if let Some(request) = self.requests.get_mut(&id) {
            request.progress = progress.clone();
        }
        let span = self.upstream_span(&id, methods::TOOLS_CALL, &upstream_name);
        let call = tracing::Instrument::instrument(
            relay_call(ForwardedCall {
                session,
                method: methods::TOOLS_CALL,
                upstream_id,
                params,
                arguments,
                reply: Some(reply),
                progress,
                progress_ends: ProgressEnds::WithTheCall,
                relay: self.myself.clone(),
                // The result is the upstream's to shape: it goes to the client as it came.
                result: ResultAs::Passed,
            }),
            span,
        );
        let call = self.for_request(&id, call);
        let finished = id.clone();
        let handle = ctx.spawn(call.into_actor(self).map(move |outcome, act, _| {
            let outcome = outcome.map_err(|e| match &unlisted {
                Some(unlisted) => unlisted.refusal(e),
                None => GatewayError::from(e),
            });
            act.finish_payload(finished, outcome)
        }));
        if let Some(request) = self.requests.get_mut(&id) {
            request.running = Some(handle);
        }
    }

    /// A progress actor for a plain call's token, which is replaced upstream by a fresh one.
    pub(super) fn request_progress(&self, params: &mut Value, reply: &Outbound) -> Option<Addr<ProgressActor>> {
        let token = mcp::progress_token(Some(params)).cloned()?;
        Some(self.start_progress(token, params, ProgressTarget::Request(reply.clone())))
    }

    pub(super) fn start_progress(
        &self,
        client_token: Value,
        params: &mut Value,
        target: ProgressTarget,
    ) -> Addr<ProgressActor> {
        let upstream_token = self.shared.progress.issue_token();
        params["_meta"]["progressToken"] = Value::from(upstream_token);
        let min_interval = std::time::Duration::from_millis(self.shared.config.progress.min_interval_ms);
        ProgressActor::new(client_token, target, min_interval, self.shared.progress.clone()).start()
    }
}

/// How long a task's reservation under the caps holds before its creation: the upstream's
/// response time limit, and a minute more.
pub(super) fn session_timeout_ms(shared: &SessionContext, upstream: &str) -> u64 {
    let secs = shared.connectors.get(upstream).map_or(300, |c| c.config().timeout_secs);
    secs.saturating_add(60).saturating_mul(1000)
}

/// Where a plain call goes.
pub(super) struct Target {
    /// The upstream's name.
    pub upstream: String,
    /// Set for a tool its upstream does not list.
    pub unlisted: Option<Unlisted>,
}

/// A call of a tool its upstream does not list ([`crate::catalog::Catalog::owner_of_unlisted`]).
pub(super) struct Unlisted {
    /// The tool's own name at its upstream.
    pub own: String,
    /// The name the client called.
    pub exposed: String,
}

impl Unlisted {
    /// The upstream's refusal of the call as the client gets it: an upstream's protocol error
    /// saying it does not know the tool (server/tools "Error Handling": -32602 "Unknown tool")
    /// is answered in the gateway's own words, as for a tool no upstream has or one the
    /// tenant's tool rules leave out. (An upstream that answers an unknown tool with a tool
    /// error, `isError`, is passed on as it came.)
    fn refusal(&self, error: taskgate_upstream::UpstreamError) -> GatewayError {
        let unknown = |message: &str| {
            let message = message.to_ascii_lowercase();
            message.contains(&self.own.to_ascii_lowercase())
                && (message.contains("unknown") || message.contains("not found"))
        };
        match &error {
            taskgate_upstream::UpstreamError::Rpc { error: e, .. }
                if e.code == taskgate_protocol::codes::INVALID_PARAMS && unknown(&e.message) =>
            {
                GatewayError::InvalidParams(format!("Unknown tool: {}", self.exposed))
            }
            _ => GatewayError::from(error),
        }
    }
}

/// What a `tools/call` becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CallPath {
    /// The gateway's task, with the ttl the client asked for (if it named one).
    Task(Option<u64>),
    /// Sent declaring the tasks extension to an upstream that decides whether it is a task.
    Decided,
    /// A plain call.
    Plain,
    /// Refused.
    Refused(Refusal),
}

/// Why a `tools/call` is refused before it reaches an upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    /// The tool runs only as a task, and the client cannot take one.
    NeedsTasksExtension,
    /// A task asked of a tool that does not support one.
    Forbidden,
    /// A plain call of a tool that runs only as a task.
    Required,
    /// A task asked of a tool its upstream does not list.
    Unknown,
}

impl Refusal {
    fn error(self, name: &str) -> GatewayError {
        match self {
            // ext-tasks "Capability Negotiation": a request the server cannot serve without a
            // task, from a client that did not declare the extension, MUST get -32021.
            Refusal::NeedsTasksExtension => GatewayError::MissingClientCapability {
                message: format!("tool {name} runs only as a task; declare the tasks extension"),
                required: json!({ "extensions": { taskgate_protocol::revision_2026::TASKS_EXTENSION: {} } }),
            },
            // basic/utilities/tasks "Tool-Level Negotiation": "forbidden" (or absent): the tool
            // MUST NOT be invoked as a task; -32601.
            Refusal::Forbidden => GatewayError::MethodNotFound(format!(
                "tool {name} does not support task-augmented execution (execution.taskSupport is \"forbidden\")"
            )),
            // "required": servers MUST return -32601 when the client does not use a task.
            Refusal::Required => GatewayError::MethodNotFound(format!(
                "tool {name} requires task-augmented execution: add \"task\": {{}} to the params"
            )),
            // Exactly as a tool no upstream has.
            Refusal::Unknown => GatewayError::InvalidParams(format!("Unknown tool: {name}")),
        }
    }
}

/// Tool-level task negotiation (basic/utilities/tasks "Tool-Level Negotiation"; ext-tasks
/// "the server decides"): what a call of a tool with `support` becomes, given who decides
/// (`mode`), whether its upstream lists it, whether an upstream that speaks the extension
/// decides for a client that can take a task (`decided`), and the client's `task` param.
fn call_path(
    mode: TaskMode,
    support: TaskSupport,
    listed: bool,
    decided: bool,
    requested: Option<Option<u64>>,
) -> CallPath {
    let requested = match (mode, support) {
        (TaskMode::Requested, _) => requested,
        // Under the extension the client sends no `task`: the upstream decides, whatever the
        // tool's support says.
        (TaskMode::GatewayDecides { accepts: true }, _) if decided => return CallPath::Decided,
        (TaskMode::GatewayDecides { accepts: true }, TaskSupport::Forbidden) => None,
        (TaskMode::GatewayDecides { accepts: true }, _) => Some(None),
        (TaskMode::GatewayDecides { accepts: false }, TaskSupport::Required) => {
            return CallPath::Refused(Refusal::NeedsTasksExtension)
        }
        (TaskMode::GatewayDecides { accepts: false }, _) => None,
    };
    match (requested, support) {
        (Some(_), _) if !listed => CallPath::Refused(Refusal::Unknown),
        (Some(_), TaskSupport::Forbidden) => CallPath::Refused(Refusal::Forbidden),
        (None, TaskSupport::Required) => CallPath::Refused(Refusal::Required),
        (Some(ttl), _) => CallPath::Task(ttl),
        (None, _) => CallPath::Plain,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUPPORTS: [TaskSupport; 3] = [TaskSupport::Forbidden, TaskSupport::Optional, TaskSupport::Required];

    #[test]
    fn under_the_extension_the_upstream_decides_whatever_the_tools_support() {
        let accepts = TaskMode::GatewayDecides { accepts: true };
        for support in SUPPORTS {
            // A client of the extension never sends `task`; one it sent all the same is ignored.
            for requested in [None, Some(None), Some(Some(5))] {
                assert_eq!(call_path(accepts, support, true, true, requested), CallPath::Decided, "{support:?}");
            }
        }
        // Where the gateway decides, it makes a task of every tool that may be one.
        assert_eq!(call_path(accepts, TaskSupport::Required, true, false, None), CallPath::Task(None));
        assert_eq!(call_path(accepts, TaskSupport::Optional, true, false, None), CallPath::Task(None));
        assert_eq!(call_path(accepts, TaskSupport::Forbidden, true, false, None), CallPath::Plain);
    }

    #[test]
    fn a_client_that_cannot_take_a_task_is_refused_only_a_tool_that_must_be_one() {
        let cannot = TaskMode::GatewayDecides { accepts: false };
        let refused = CallPath::Refused(Refusal::NeedsTasksExtension);
        assert_eq!(call_path(cannot, TaskSupport::Required, true, false, None), refused);
        for support in [TaskSupport::Forbidden, TaskSupport::Optional] {
            assert_eq!(call_path(cannot, support, true, false, Some(None)), CallPath::Plain, "{support:?}");
        }
    }

    #[test]
    fn a_2025_client_asks_for_a_task_and_the_tools_support_holds_it_to_its_answer() {
        let asks = TaskMode::Requested;
        for (support, plain, task) in [
            (TaskSupport::Forbidden, CallPath::Plain, CallPath::Refused(Refusal::Forbidden)),
            (TaskSupport::Optional, CallPath::Plain, CallPath::Task(Some(5))),
            (TaskSupport::Required, CallPath::Refused(Refusal::Required), CallPath::Task(Some(5))),
        ] {
            assert_eq!(call_path(asks, support, true, false, None), plain, "{support:?}");
            assert_eq!(call_path(asks, support, true, false, Some(Some(5))), task, "{support:?}");
        }
        // A tool its upstream does not list is never a task.
        assert_eq!(
            call_path(asks, TaskSupport::Forbidden, false, false, Some(None)),
            CallPath::Refused(Refusal::Unknown)
        );
        assert_eq!(call_path(asks, TaskSupport::Forbidden, false, false, None), CallPath::Plain);
    }
}
