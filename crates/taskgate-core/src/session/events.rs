//! What an upstream sends on its own (routed to tasks, streams or the router) and the client's
//! notifications.

use actix::prelude::*;
use serde_json::Value;
use taskgate_protocol::mcp::methods;
use taskgate_protocol::tasks::TaskView;
use taskgate_protocol::{mcp, Message as RpcMessage};
use taskgate_upstream::UpstreamEvent;

use super::SessionActor;
use crate::forwarded_call::tag_log;
use crate::router::RefreshUpstream;
use crate::tasks::UpstreamStatus;

impl SessionActor {
    /// Something an upstream sent on its own. A message naming an upstream task not known yet,
    /// while a native task creation on that upstream is in flight, is held until it settles:
    /// the upstream may speak of its task before its `CreateTaskResult` reaches us.
    pub(super) fn on_upstream_event(&mut self, upstream: String, event: UpstreamEvent, ctx: &mut Context<Self>) {
        if self.early.is_creating(&upstream) && self.names_unknown_task(&upstream, &event) {
            let name = upstream.clone();
            if !self.early.hold(upstream, event) {
                tracing::warn!(session = %self.id, upstream = %name, "too many held upstream messages; one dropped");
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
                self.upstream_cancelled(&upstream, params, ctx);
            }
            UpstreamEvent::Notification { method, .. } if method == methods::PROGRESS => {
                // Progress of live requests reaches them through their own call; this names
                // no live request, so it is not forwarded (nothing after completion).
                tracing::debug!(session = %self.id, %upstream, "progress for no live request dropped");
                self.shared.progress.count(crate::progress::Outcome::Dropped);
            }
            UpstreamEvent::Notification { method, mut params, related } => {
                self.task_of(&upstream, related.as_ref(), &mut params);
                if method == methods::RESOURCES_UPDATED {
                    // The URI the client subscribed to is the exposed one.
                    let naming = self.naming_of(&upstream);
                    if let Some(Value::String(uri)) = params.as_mut().and_then(|p| p.get_mut("uri")) {
                        *uri = crate::offering_names::expose_uri(&naming, uri);
                    }
                }
                tag_log(&upstream, &method, &mut params);
                match self.stream_for(&upstream, related.as_ref()) {
                    Some(stream) => {
                        if stream.send(&RpcMessage::notification(method, params)).is_err() {
                            tracing::debug!(session = %self.id, %upstream, "client stream full; notification dropped");
                        }
                    }
                    None => {
                        // To the copy of the session holding the GET stream, if another does.
                        let notification = RpcMessage::notification(method, params);
                        if !self.to_stream_elsewhere(&notification) {
                            tracing::debug!(session = %self.id, %upstream, "no open client stream; notification dropped")
                        }
                    }
                }
            }
        }
    }

    pub(super) fn names_unknown_task(&self, upstream: &str, event: &UpstreamEvent) -> bool {
        let params = match event {
            UpstreamEvent::Notification { params, .. } | UpstreamEvent::Request { params, .. } => params,
        };
        let named = mcp::related_task_id(params.as_ref());
        named.is_some_and(|t| !self.shared.tasks.knows_native(&(upstream.to_owned(), t.to_owned())))
    }

    /// A native task creation on `upstream` settled: replay what was held for it.
    pub(super) fn native_created(&mut self, upstream: &str, ctx: &mut Context<Self>) {
        for (upstream, event) in self.early.created(upstream) {
            self.on_upstream_event(upstream, event, ctx);
        }
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
            // About a request of another replica serving the session: it goes there.
            methods::CANCELLED
                if self.cancelled_request(msg.params.as_ref()).is_some_and(|id| !self.requests.contains(&id))
                    && self.client_elsewhere(&RpcMessage::notification(msg.method.clone(), msg.params.clone())) => {}
            methods::PROGRESS
                if !self.relays_progress(msg.params.as_ref())
                    && self.client_elsewhere(&RpcMessage::notification(msg.method.clone(), msg.params.clone())) => {}
            methods::CANCELLED => self.cancel(msg.params, ctx),
            methods::PROGRESS => self.client_progress(msg.params, ctx),
            // client/roots "Root List Changes": every upstream session of the client hears it.
            methods::ROOTS_LIST_CHANGED => {
                for session in self.upstreams.values() {
                    let (session, params) = (session.clone(), msg.params.clone());
                    ctx.spawn(
                        async move {
                            let _ = session.notify(methods::ROOTS_LIST_CHANGED, params).await;
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

impl StreamHandler<(String, UpstreamEvent)> for SessionActor {
    fn handle(&mut self, (upstream, event): (String, UpstreamEvent), ctx: &mut Context<Self>) {
        self.on_upstream_event(upstream, event, ctx);
    }

    fn finished(&mut self, _: &mut Context<Self>) {
        // An upstream session's event stream ends when it closes; the actor lives on.
    }
}
