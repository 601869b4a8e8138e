//! Requests an upstream sends to the client (elicitation, sampling, roots): relayed with a
//! gateway id on the right stream, their answers and progress routed back. (One upstream call
//! with everything it sends before its result is `crate::forwarded_call`.)

use std::sync::Arc;

use actix::prelude::*;
use serde_json::{json, Value};
use taskgate_protocol::mcp::methods;
use taskgate_protocol::{mcp, ErrorObject, Message as RpcMessage, RequestId};
use taskgate_upstream::UpstreamSession;

use super::asked::{Asker, Relayed};
use super::streams::Waiting;
use super::SessionActor;
use crate::forwarded_call::{ClientResponse, RelayFromCall};
use crate::outbound::{Frame, Outbound};
use crate::tasks::{InputHolder, InputProvided, InputRequested};
use crate::GatewayError;

impl SessionActor {
    /// A relayed request of a task was answered or withdrawn: the task's actor forgets it.
    fn input_settled(&self, task: Option<&str>, gateway_id: &RequestId) {
        if let (Some(actor), RequestId::String(key)) = (task.and_then(|t| self.shared.tasks.actor(t)), gateway_id) {
            let _ = actor.try_send(InputProvided { key: key.clone() });
        }
    }

    /// The stream a message about `related` (an upstream-local id) should go on: the client
    /// request's stream when it is still open, otherwise the GET stream.
    pub(super) fn stream_for(&self, upstream: &str, related: Option<&RequestId>) -> Option<Outbound> {
        related
            .and_then(|r| self.requests.for_upstream(upstream, r))
            .map(|r| r.reply.clone())
            .filter(|s| !s.is_closed())
            .or_else(|| self.streams.open_get())
    }

    /// The task a message from an upstream belongs to, if any: it arrived on the stream of a
    /// request made for a task, or its related-task `_meta` names a native upstream task. That
    /// `_meta` is rewritten to the gateway's task id, or removed when it names no task of ours:
    /// an upstream's task id never reaches a client (invariant 5).
    pub(super) fn task_of(
        &self,
        upstream: &str,
        related: Option<&RequestId>,
        params: &mut Option<Value>,
    ) -> Option<String> {
        let by_call = related.and_then(|r| self.shared.tasks.task_of_call(upstream, r));
        let named = mcp::related_task_id(params.as_ref()).map(str::to_owned);
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
    pub(super) fn relay_request(
        &mut self,
        upstream: String,
        id: RequestId,
        method: String,
        mut params: Option<Value>,
        related: Option<RequestId>,
        ctx: &mut Context<Self>,
    ) {
        // Sent outside any request's stream (stdio, an upstream GET stream) and naming no task,
        // while exactly one request of this session that may ask is at that upstream (the
        // client's own call, or a wrapped task's): it belongs to that request.
        let names_task = mcp::related_task(params.as_ref()).is_some();
        let related = match related {
            None if !names_task => self.upstreams.get(&upstream).and_then(UpstreamSession::sole_call_in_flight),
            related => related,
        };
        let input_key = taskgate_protocol::revision_2026::take_input_key(&mut params);
        let task = self.task_of(&upstream, related.as_ref(), &mut params);
        // A task asking in the call that makes it is unknown to the client yet: its questions
        // are the call's own.
        let in_its_call = task.as_deref().is_some_and(|t| self.asking.holds_task(t));
        if in_its_call {
            if let Some(Value::Object(meta)) = params.as_mut().and_then(|p| p.get_mut("_meta")) {
                meta.remove(mcp::meta::RELATED_TASK);
            }
        }
        if let (true, true, Some(key)) = (self.stateless, task.is_none() || in_its_call, input_key) {
            // A 2026-07-28 client's call is asked under the upstream's key (its front door
            // takes it out again).
            taskgate_protocol::revision_2026::put_input_key(&mut params, key);
        }
        let relayed_token = mcp::progress_token(params.as_ref()).cloned();
        let task_stream =
            task.as_ref().and_then(|t| self.requests.waiting_on(t).map(|r| r.reply.clone()).filter(|s| !s.is_closed()));
        let call_gone = in_its_call && task_stream.is_none();
        let stream = task_stream.or_else(|| self.stream_for(&upstream, related.as_ref()));
        let Some(session) = self.upstreams.session(&upstream) else { return };
        let refuse = |code: i64, why: String| {
            let reply = RpcMessage::error(Some(id.clone()), ErrorObject::new(code, why));
            async move {
                let _ = session.respond(reply).await;
            }
        };
        if call_gone {
            // Its call's client left before the question came: nothing can answer it, and the
            // call and its task, never shown, are over.
            self.question_without_its_call(task.as_deref().unwrap_or_default(), ctx);
            let why = "the call that asked has ended (its client left)".to_owned();
            ctx.spawn(refuse(taskgate_protocol::codes::INTERNAL_ERROR, why).into_actor(self));
            return;
        }
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
        if !self.asked.has_room() {
            let why = format!("the client has {} unanswered requests", super::asked::MAX_ASKED);
            ctx.spawn(refuse(internal, why).into_actor(self));
            return;
        }
        let gateway_id = self.asked.next_id();
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
            // A stateless client reads a task's requests from its actor (tasks/get's
            // inputRequests), never from a stream.
            (None, Some(_)) if self.stateless => {}
            // A task's request waits for the client to look (tasks/result or a GET stream):
            // the task is input_required meanwhile.
            (None, Some(task)) if self.streams.may_wait() => {
                let waiting = Waiting { task: task.clone(), id: Some(gateway_id.clone()), frame: Frame::new(&message) };
                if self.streams.wait(waiting, self.shared.config.server.session_buffer_bytes).is_err() {
                    let why = "the client has too much waiting for it (server.session_buffer_bytes)".to_owned();
                    ctx.spawn(refuse(internal, why).into_actor(self));
                    return;
                }
            }
            // The client's GET stream is at another replica: the request goes there, and the
            // answer comes back here.
            (None, _) if self.to_stream_elsewhere(&message) => {}
            (None, _) => {
                let why = format!("the client has no open stream on which to receive {method}");
                ctx.spawn(refuse(internal, why).into_actor(self));
                return;
            }
        }
        // A question asked in its task's call is the call's own: the task, not shown yet, does
        // not list it (nor announce input_required, nor store it for other replicas).
        if let Some(actor) = task.as_ref().filter(|_| !in_its_call).and_then(|t| self.shared.tasks.actor(t)) {
            let RpcMessage::Request { method, params, .. } = message else { unreachable!("built as a request above") };
            let request = json!({ "method": method, "params": params.unwrap_or_else(|| json!({})) });
            let key = gateway_id.to_value().as_str().unwrap_or_default().to_owned();
            let weak = ctx.address().downgrade();
            let holder = self.input_holder.get_or_insert_with(|| {
                Arc::new(InputHolder { ended: weak.clone().recipient(), answer: weak.recipient() })
            });
            let _ = actor.try_send(InputRequested { key, request, session: holder.clone() });
        }
        let progress_token = relayed_token;
        let asker = Asker::Upstream { upstream, id };
        self.asked.sent(gateway_id, Relayed { asker, task, progress_token, stream: used });
    }

    /// Whether the client's progress names a request relayed here.
    pub(super) fn relays_progress(&self, params: Option<&Value>) -> bool {
        let token = params.and_then(|p| p.get("progressToken"));
        token.is_some_and(|t| self.asked.with_progress_token(t).is_some())
    }

    /// Progress the client reports on a request an upstream sent it: back to that upstream.
    pub(super) fn client_progress(&mut self, params: Option<Value>, ctx: &mut Context<Self>) {
        let token = params.as_ref().and_then(|p| p.get("progressToken"));
        let owner = token.and_then(|t| self.asked.with_progress_token(t));
        let Some(Asker::Upstream { upstream, .. }) = owner.map(|r| &r.asker) else {
            tracing::debug!(session = %self.id, "client progress for no relayed request ignored");
            return;
        };
        if let Some(session) = self.upstreams.session(upstream) {
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
    pub(super) fn upstream_cancelled(&mut self, upstream: &str, params: Option<Value>, ctx: &mut Context<Self>) {
        let Some(upstream_id) = params.as_ref().and_then(|p| p.get("requestId")).and_then(RequestId::from_value) else {
            return;
        };
        let asker = Asker::Upstream { upstream: upstream.to_owned(), id: upstream_id };
        let Some(gateway_id) = self.asked.id_of(&asker) else {
            tracing::debug!(session = %self.id, %upstream, "upstream cancelled a request the client never saw");
            return;
        };
        let relayed = self.asked.answered(&gateway_id).expect("found above");
        self.input_settled(relayed.task.as_deref(), &gateway_id);
        if let Some(task) = relayed.task.as_deref() {
            self.answered_first(task, ctx);
        }
        let mut forwarded = params.unwrap_or_else(|| json!({}));
        forwarded["requestId"] = gateway_id.to_value();
        let stream = relayed.stream.filter(|s| !s.is_closed()).or_else(|| self.streams.open_get());
        match stream {
            Some(stream) => {
                let _ = stream.send(&RpcMessage::notification(methods::CANCELLED, Some(forwarded)));
            }
            None => {
                let notice = RpcMessage::notification(methods::CANCELLED, Some(forwarded));
                if self.streams.take_waiting(|q| q.id.as_ref() == Some(&gateway_id)).is_empty() {
                    // Sent to the GET stream at another replica, if any.
                    self.to_stream_elsewhere(&notice);
                }
            }
        }
    }
}

impl Handler<ClientResponse> for SessionActor {
    type Result = Result<(), GatewayError>;

    fn handle(&mut self, ClientResponse(message, subject): ClientResponse, ctx: &mut Context<Self>) -> Self::Result {
        // Relayed by another replica serving the session: it goes there.
        if message.id().is_some_and(|id| !self.asked.contains(id) && super::across_replicas::relay_id(id))
            && self.client_elsewhere(&message)
        {
            return Ok(());
        }
        self.client_response(message, subject, ctx)
    }
}

impl SessionActor {
    /// The client's answer to a request relayed to it: to whoever asked.
    pub(super) fn client_response(
        &mut self,
        message: RpcMessage,
        subject: Option<taskgate_upstream::Subject>,
        ctx: &mut Context<Self>,
    ) -> Result<(), GatewayError> {
        let Some(id) = message.id().cloned() else {
            return Err(GatewayError::InvalidRequest("a response needs the id of the request it answers".into()));
        };
        let Some(Relayed { asker, task, .. }) = self.asked.answered(&id) else {
            return Err(GatewayError::InvalidRequest(format!(
                "no request with id {id} is waiting for a response in this session"
            )));
        };
        // The same answer, under the id its asker knows the request by.
        let readdressed = |id: RequestId| match message {
            RpcMessage::Response { result, .. } => RpcMessage::response(id, result),
            RpcMessage::Error { error, .. } => RpcMessage::error(Some(id), error),
            _ => unreachable!("ClientResponse carries responses"),
        };
        let (upstream, mapped) = match asker {
            Asker::Upstream { upstream, id } => (upstream, readdressed(id)),
            // The task runs on another replica: the answer goes there, under the request's key.
            Asker::Replica { key } => {
                let Some(task) = task else { return Ok(()) };
                let mapped = readdressed(RequestId::String(key));
                let tasks = self.shared.tasks.clone();
                ctx.spawn(async move { tasks.deliver_inputs(&task, vec![mapped]).await }.into_actor(self));
                return Ok(());
            }
        };
        self.input_settled(task.as_deref(), &id);
        if let Some(task) = task.as_deref() {
            self.answered_first(task, ctx);
        }
        // Answered without the client reading it here (through another replica, or the tasks
        // extension): it must not reach a stream opened later.
        self.streams.take_waiting(|q| q.id.as_ref() == Some(&id));
        if let Some(session) = self.upstreams.session(&upstream) {
            // Sent with the token the answer came with.
            ctx.spawn(
                taskgate_upstream::made_for(subject, async move {
                    if let Err(e) = session.respond(mapped).await {
                        tracing::info!(error = %e, "could not deliver a client response upstream");
                    }
                })
                .into_actor(self),
            );
        }
        Ok(())
    }
}

impl Handler<RelayFromCall> for SessionActor {
    type Result = ();

    fn handle(&mut self, RelayFromCall { upstream, request, related }: RelayFromCall, ctx: &mut Context<Self>) {
        if let RpcMessage::Request { id, method, params } = request {
            self.relay_request(upstream, id, method, params, Some(related), ctx);
        }
    }
}
