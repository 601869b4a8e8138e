//! `notifications/cancelled` from the client, and ending a request without a response.

use actix::prelude::*;
use serde_json::{json, Value};
use taskgate_protocol::mcp::methods;
use taskgate_protocol::RequestId;

use super::SessionActor;
use crate::progress::Abandon;

impl SessionActor {
    /// The request a `notifications/cancelled` names.
    pub(super) fn cancelled_request(&self, params: Option<&Value>) -> Option<RequestId> {
        params.and_then(|p| p.get("requestId")).and_then(RequestId::from_value)
    }

    /// notifications/cancelled from the client: forward to the one upstream that owns the
    /// request, with its id rewritten, and send no response for it.
    pub(super) fn cancel(&mut self, params: Option<Value>, ctx: &mut Context<Self>) {
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
                // A call not yet shown its task: the task is the call's, cancelled with it.
                if self.abandon_first(&id, ctx) {
                    return;
                }
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
    pub(super) fn abort_request(&mut self, id: &RequestId, notice: Value, ctx: &mut Context<Self>) {
        if let Some(cancel) = self.end_request(id, notice, ctx) {
            ctx.spawn(cancel.into_actor(self));
        }
    }

    /// Ends a request here ([`Self::abort_request`]) and returns the cancellation to send its
    /// upstream, when there is one to send.
    pub(super) fn end_request(
        &mut self,
        id: &RequestId,
        mut notice: Value,
        ctx: &mut Context<Self>,
    ) -> Option<impl std::future::Future<Output = ()> + 'static> {
        let request = self.forget(id)?;
        if let Some(handle) = request.running {
            ctx.cancel_future(handle);
        }
        if let Some(progress) = &request.progress {
            let _ = progress.try_send(Abandon);
        }
        request.reply.close();
        let (upstream, upstream_id) = request.upstream().cloned()?;
        if request.task_augmented {
            return None; // the task lives on; tasks/cancel stops it
        }
        self.shared.metrics.cancellations.with_label_values(&["forwarded", "none"]).inc();
        let session = self.upstreams.session(&upstream)?;
        notice["requestId"] = upstream_id.to_value();
        Some(taskgate_upstream::made_for(request.subject, async move {
            if let Err(e) = session.notify(methods::CANCELLED, Some(notice)).await {
                tracing::info!(%upstream, error = %e, "could not forward a cancellation");
            }
        }))
    }
}
