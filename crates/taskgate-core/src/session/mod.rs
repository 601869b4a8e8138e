//! The [`SessionActor`]: one per client session. It dispatches the client's JSON-RPC messages,
//! owns the session's outbound streams (the GET stream and one per in-flight request), and
//! opens one upstream session per upstream it calls, declaring the client capabilities the gateway relays.
//!
//! Upstream work runs in futures spawned on the actor's context; their outcomes come back to
//! the actor as it finishes them, so a slow upstream never stalls the mailbox (invariant 2).
//!
//! This file holds the state and the dispatch by method; each family of methods has a file of
//! its own (`tools`, `task_calls`, `offerings`), as do the session's streams and life
//! (`lifecycle`), the relay of upstream requests (`relay`), what upstreams send on their own
//! (`events`), cancellation (`cancel`), what every session shares (`context`) and the session
//! table (`registry`).

mod across_replicas;
mod asked;
mod asking_first;
mod cancel;
pub(crate) mod describe;
mod early;
mod events;
mod in_flight;
mod lifecycle;
mod listing;
mod meta_tools;
mod offerings;
mod pooled;
pub(crate) mod registry;
mod relayed_requests;
mod replica_ties;
pub(crate) mod session_context;
pub(crate) mod shown;
mod streams;
mod task_calls;
mod tools;
mod unshown;
mod upstreams;

pub(crate) use across_replicas::end_at_upstreams;
pub(crate) use events::ClientNotification;
pub(crate) use lifecycle::{
    Close, CloseIfIdle, EndGetStream, EndpointReloaded, OpenStream, ShutDown, StreamOverflowed, CANCEL_AT_SHUTDOWN,
};

use std::sync::Arc;

use actix::prelude::*;
use serde_json::{json, Value};
use taskgate_protocol::mcp::{self, methods};
use taskgate_protocol::method::Method;
use taskgate_protocol::{Message as RpcMessage, Payload, RawArguments, RequestId};
use taskgate_upstream::{ClientIdentity, ProcessShare, UpstreamEvent, UpstreamSession};

use crate::outbound::{Frame, Outbound};

use crate::forwarded_call::UPSTREAM_EVENTS;
use crate::identity::Identity;
use crate::progress::Abandon;
use crate::router::ToolCatalog;
use crate::GatewayError;
use asked::{Asked, Relayed};
use early::Early;
pub use in_flight::TaskMode;
use in_flight::{InFlight, Requests};
use session_context::SessionContext;
use streams::Streams;
use upstreams::Upstreams;

/// One client session.
pub struct SessionActor {
    id: String,
    shared: Arc<SessionContext>,
    identity: Identity,
    client: ClientIdentity,
    /// The tool catalog of clients with this session's relayable capabilities.
    catalog: ToolCatalog,
    /// The upstream sessions it holds, and the state it keeps at them.
    upstreams: Upstreams,
    /// The GET stream, the upstreams' held for it, and what waits for a stream.
    streams: Streams,
    /// The client's requests in flight and their routes from the upstreams.
    requests: Requests,
    /// Requests upstreams sent that were relayed to the client and wait for its answer.
    asked: Asked,
    /// It serves 2026-07-28 requests (a pooled session): their clients list a task's input
    /// requests through `tasks/get`, from the store, so its `tasks/result` streams never relay
    /// those of tasks on other replicas.
    pub(crate) stateless: bool,
    /// It is a 2026-07-28 client's `subscriptions/listen`: it passes on what that client
    /// subscribed to, and the tools its identity activates at its endpoint (search mode).
    pub(crate) listens: bool,
    /// What upstreams say of tasks being created, held until the creation settles.
    early: Early,
    /// The calls whose tasks wait for their first questions before they are shown.
    asking: unshown::Unshown,
    /// Listing positions too long to hand the client as cursors, by number (bounded).
    stash: crate::offering_names::Stash,
    /// Its own address, held weakly, for the calls it runs to relay through: a strong address
    /// is a sender of its own to actix, made (and allocated) each time one is asked for.
    myself: Option<Arc<actix::WeakRecipient<crate::forwarded_call::RelayFromCall>>>,
    /// This actor, for what it tells itself after the message it handles (`ReleasePooled`).
    me: Option<actix::WeakAddr<SessionActor>>,
    /// Where the task actors whose input requests this session relays send the client's answers
    /// and their end: made with the first such request, one for all of them.
    input_holder: Option<Arc<crate::tasks::InputHolder>>,
    /// What ties it to its copies at other replicas (`across_replicas.rs`).
    ties: replica_ties::ReplicaTies,
    /// The endpoint it was opened at and the tools its client activated there.
    pub(crate) shown: shown::Shown,
}

impl SessionActor {
    /// `call`, its upstream requests made for request `id`'s own access token (what an
    /// upstream that exchanges callers' tokens exchanges), when it came with one.
    fn for_request<F: std::future::Future>(
        &self,
        id: &RequestId,
        call: F,
    ) -> impl std::future::Future<Output = F::Output> {
        taskgate_upstream::made_for(self.requests.get(id).and_then(|r| r.subject.clone()), call)
    }

    /// The span request `id`'s call to `upstream` runs in: a child of the client request's
    /// span, which names the tenant, principal, session and method, naming the upstream (one
    /// span and field written per call, not four fields again); one naming them all when the
    /// request came with no span.
    fn upstream_span(&self, id: &RequestId, method: &str, upstream: &str) -> tracing::Span {
        match self.requests.get(id).map(|r| &r.span).filter(|s| !s.is_none()) {
            Some(parent) => tracing::info_span!(parent: parent, "upstream_call", upstream = %upstream),
            None => tracing::info_span!(
                "upstream_call",
                session = %self.id,
                tenant = %self.identity.tenant,
                method,
                upstream = %upstream,
            ),
        }
    }

    pub(crate) fn new(
        id: String,
        shared: Arc<SessionContext>,
        identity: Identity,
        client: ClientIdentity,
        catalog: ToolCatalog,
    ) -> SessionActor {
        SessionActor {
            id,
            shared,
            identity,
            client,
            catalog,
            upstreams: Upstreams::new(),
            streams: Streams::new(),
            requests: Requests::new(),
            asked: Asked::new(),
            stateless: false,
            listens: false,
            early: Early::new(),
            asking: unshown::Unshown::default(),
            stash: Default::default(),
            myself: None,
            me: None,
            input_holder: None,
            ties: Default::default(),
            shown: Default::default(),
        }
    }

    fn upstream_session(&mut self, name: &str, ctx: &mut Context<Self>) -> Option<UpstreamSession> {
        if let Some(s) = self.upstreams.get(name) {
            return Some(s.clone());
        }
        let connector = self.shared.connectors.get(name)?.clone();
        // Most client sessions never receive an event: a small channel (see
        // `taskgate_upstream::event_channel`).
        let (tx, rx) = taskgate_upstream::event_channel(UPSTREAM_EVENTS);
        let upstream = name.to_owned();
        ctx.add_stream(crate::stream::event_stream(rx, move |event: Box<UpstreamEvent>| (upstream.clone(), *event)));
        let session = if self.may_share() && connector.shares_sessions(&self.client) {
            connector.open_shared(&self.share_key(), || self.client.clone(), tx)
        } else if !self.upstreams.is_private() && self.client.answers_requests() && connector.pools_sessions() {
            // A client that can be asked things takes a pooled session, its alone until it
            // holds nothing (`release_pooled`). One that can be asked nothing shares, or keeps
            // a session of its own, as `share_sessions` says.
            let (session, reused) = connector.open_pooled(&self.share_key(), &self.id, || self.client.clone(), tx);
            if reused && self.client.capabilities.get("roots").is_some() {
                // The upstream may hold the roots of the client session before: it asks again.
                let notify = session.clone();
                ctx.spawn(
                    async move {
                        let _ = notify.notify(mcp::methods::ROOTS_LIST_CHANGED, None).await;
                    }
                    .into_actor(self),
                );
            }
            session
        } else {
            self.own_session(&connector, tx, ctx)
        };
        if connector.acts_for_callers() {
            // Its requests carry a token exchanged for this session's principal's.
            session.on_behalf_of(self.shared.tenancy.subjects.caller(&self.identity, connector.exchange_issuer()));
        }
        self.streams.hold(name, &session);
        // Its stdio processes count against its tenant's share of the upstream's `max_processes`.
        let percent = self.shared.tenancy.policy(&self.identity.tenant).shares.percent;
        session.count_processes_against(ProcessShare { holder: self.identity.tenant.clone(), percent });
        self.upstreams.insert(name, session.clone());
        self.apply_level(name, &session, ctx);
        Some(session)
    }

    /// Whether this session's upstream sessions may be shared with other client sessions
    /// (`upstream[].share_sessions`): nothing can be asked of its client (an upstream may ask
    /// outside any request, and only this client could answer), and it keeps no state at the
    /// upstream (a log level, subscriptions).
    fn may_share(&self) -> bool {
        !self.upstreams.is_private() && !self.client.answers_requests()
    }

    /// Who may share an upstream session: one tenant's, one principal's client sessions,
    /// declaring the same client to it (capabilities and `clientInfo`, as it sees them).
    fn share_key(&self) -> String {
        let Identity { tenant, principal } = &self.identity;
        let ClientIdentity { capabilities, client_info, speaks_2025 } = &self.client;
        // Lengths first: no choice of names makes two identities one key.
        format!("{}:{tenant}{}:{principal}{speaks_2025}{capabilities}\n{client_info}", tenant.len(), principal.len())
    }

    /// The session is about to keep state at its upstreams: its shared upstream sessions are
    /// replaced by sessions of its own (calls in flight on the shared ones finish there).
    fn go_private(&mut self, ctx: &mut Context<Self>) {
        for name in self.upstreams.go_private().unwrap_or_default() {
            self.upstream_session(&name, ctx);
        }
    }

    /// Forgets a request and everything keyed by it (whichever side ends it first).
    fn forget(&mut self, id: &RequestId) -> Option<InFlight> {
        let request = self.requests.end(id)?;
        self.shared.live_requests.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        // A client that never listens (at any replica) has nothing to hold a pooled upstream
        // session for between its calls: what the upstream sends outside a call has nowhere to
        // go. (One that listens keeps it until its last GET stream ends: a question the upstream
        // asks on its own stream after a call returned reaches it. A stateless front door's
        // pooled session serves every call of an identity: its upstream sessions stay until it
        // idles.)
        if self.requests.is_empty() && !self.stateless && !self.streams.ever_listened() {
            self.release_pooled();
        }
        // Requests of a task on another replica were relayed for this tasks/result only: once
        // no one here waits on the task, their answers have nowhere to go.
        if let Some(task) = request.task.as_deref() {
            if self.requests.waiting_on(task).is_none() {
                self.asked.forget_replicas(task);
            }
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

    /// [`SessionActor::finish`] with a result that may be the upstream's own text, which goes
    /// to the client as it came (only the id is the client's).
    fn finish_payload(&mut self, id: RequestId, outcome: Result<Payload, GatewayError>) {
        match outcome {
            Ok(Payload::Raw(raw)) => {
                let Some(request) = self.forget(&id) else { return };
                let frame = Frame {
                    json: Payload::Raw(raw).response_json(&id),
                    response: true,
                    store_unavailable: false,
                    error: false,
                    pause: None,
                };
                let _ = request.reply.send_final_frame(frame);
            }
            Ok(Payload::Value(result)) => self.finish(id, Ok(result)),
            Err(e) => self.finish(id, Err(e)),
        }
    }

    /// Runs a task method's work in a spawned future and answers with its outcome.
    fn answer_with<F>(&mut self, id: RequestId, work: F, ctx: &mut Context<Self>)
    where
        F: std::future::Future<Output = Result<Value, GatewayError>> + 'static,
    {
        let work = self.for_request(&id, work);
        ctx.spawn(work.into_actor(self).map(move |outcome, act, _| act.finish(id, outcome)));
    }

    /// Lets go of the upstream sessions: each ends when no task still runs on it.
    fn release_upstreams(&mut self) {
        self.streams.let_all_go();
        self.upstreams.clear();
    }
}

impl Actor for SessionActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.set_mailbox_capacity(self.shared.config.server.session_mailbox);
        self.myself = Some(Arc::new(ctx.address().downgrade().recipient()));
        self.me = Some(ctx.address().downgrade());
        self.keep_record_while_busy(ctx);
        tracing::info!(session = %self.id, tenant = %self.identity.tenant, "session started");
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        self.abandon_all_first();
        let open: Vec<RequestId> = self.requests.ids();
        for id in open {
            if let Some(request) = self.forget(&id) {
                if let Some(progress) = request.progress {
                    let _ = progress.try_send(Abandon);
                }
            }
        }
        self.shared.sessions.forget(&self.id);
        self.leave_upstreams();
        self.release_upstreams();
        tracing::info!(session = %self.id, "session ended");
    }
}

/// A JSON-RPC request from the client. Messages about it, then its response, go to `reply`.
pub(crate) struct ClientRequest {
    pub id: RequestId,
    pub method: String,
    pub params: Option<Value>,
    /// A `tools/call`'s arguments as the client wrote them, apart from `params`.
    pub arguments: Option<RawArguments>,
    pub reply: Outbound,
    pub mode: TaskMode,
    /// The client request's span (the front door's `mcp_request`): what runs for the request
    /// upstream logs inside it.
    pub span: tracing::Span,
    /// The request's OAuth access token, while an upstream exchanges callers' tokens.
    pub subject: Option<taskgate_upstream::Subject>,
}

impl Message for ClientRequest {
    type Result = Result<(), GatewayError>;
}

impl Handler<ClientRequest> for SessionActor {
    type Result = Result<(), GatewayError>;

    fn handle(&mut self, msg: ClientRequest, ctx: &mut Context<Self>) -> Self::Result {
        let ClientRequest { id, method, mut params, arguments, reply, mode, span, subject } = msg;
        // Only a call passes its arguments on as written; any other method reads its params.
        let arguments = match arguments {
            Some(arguments) if method != methods::TOOLS_CALL => {
                arguments.restore(&mut params);
                None
            }
            arguments => arguments,
        };
        if self.requests.contains(&id) {
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
            for queued in self.streams.take_waiting(|q| &q.task == task) {
                let _ = reply.send_frame(queued.frame);
            }
        }
        let task_augmented = method == methods::TOOLS_CALL
            && mode == TaskMode::Requested
            && params.as_ref().is_some_and(|p| p.get("task").is_some());
        self.requests.admit(id.clone(), InFlight::new(reply, task, task_augmented, mode, span, subject));
        self.shared.live_requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // The table says what this revision serves (taskgate_protocol::method).
        match Method::named(&method).filter(|m| m.row().at_2025.is_some()) {
            Some(Method::Ping) => self.finish(id, Ok(json!({}))),
            Some(Method::ToolsList) => self.list_tools(id, params, ctx),
            Some(Method::ToolsCall) => self.call_tool(id, params, arguments, ctx),
            Some(Method::TasksGet) => self.get_task(id, params, ctx),
            Some(Method::TasksResult) => self.task_result(id, params, ctx),
            Some(Method::TasksList) => self.list_tasks(id, params, ctx),
            Some(Method::TasksCancel) => self.cancel_task(id, params, ctx),
            Some(Method::ResourcesList | Method::ResourcesTemplatesList | Method::PromptsList) => {
                self.list_offered(id, &method, params, ctx)
            }
            Some(m @ (Method::ResourcesRead | Method::ResourcesSubscribe | Method::ResourcesUnsubscribe)) => {
                self.resource_request(id, m.name(), params, ctx)
            }
            Some(Method::PromptsGet) => self.get_prompt(id, params, ctx),
            Some(Method::CompletionComplete) => self.complete(id, params, ctx),
            Some(Method::LoggingSetLevel) => self.set_level(id, params, ctx),
            Some(Method::Initialize) => self.finish(
                id,
                Err(GatewayError::InvalidRequest(
                    "this session is already initialized; send initialize without Mcp-Session-Id to start another"
                        .into(),
                )),
            ),
            Some(Method::TasksUpdate | Method::ServerDiscover | Method::SubscriptionsListen | Method::RootsList)
            | None => {
                let why = format!(
                    "{} (taskgate serves {} at protocol version {})",
                    crate::logs::Untrusted(&method),
                    taskgate_protocol::method::served_at_2025(),
                    mcp::LATEST_PROTOCOL_VERSION
                );
                self.finish(id, Err(GatewayError::MethodNotFound(why)))
            }
        }
        Ok(())
    }
}
