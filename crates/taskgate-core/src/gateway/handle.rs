//! [`SessionHandle`]: how the front door reaches one client session: its messages delivered to
//! the session's mailbox with a bounded wait (invariant 3), its replies and GET stream opened
//! under the pool of client streams.

use crate::forwarded_call::ClientResponse;
use crate::metrics::Metrics;
use crate::outbound::{Limits, Outbound, OutboundReceiver, StreamEvent};
use crate::session::registry::SessionEntry;
use crate::session::{ClientNotification, ClientRequest, OpenStream, SessionActor, StreamOverflowed};
use crate::stream_pool::StreamPool;
use crate::GatewayError;
use actix::prelude::*;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use taskgate_protocol::{Message as RpcMessage, RequestId};

/// How long a message may wait for room in a session's mailbox before the client gets 503.
const MAILBOX_WAIT: Duration = Duration::from_secs(2);

/// A client session, as the front door sees it.
#[derive(Clone)]
pub struct SessionHandle {
    /// The session's entry in the registry (its actor, identity, version and budget), shared.
    pub(super) entry: Arc<SessionEntry>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) limits: Limits,
    /// The pool of client streams, the tenant's share of it, and its size.
    pub(super) streams: (Arc<StreamPool>, usize, usize),
}

impl SessionHandle {
    /// The tenant's share of the gateway's client streams, and how many it has in all.
    pub fn stream_share(&self) -> (usize, usize) {
        (self.streams.1, self.streams.2)
    }

    /// The protocol version negotiated at initialize.
    pub fn protocol_version(&self) -> &str {
        &self.entry.protocol_version
    }

    /// The profile whose endpoint it was opened at (`None`: the tenant's own, `/mcp`): a
    /// request for it at another endpoint is told it does not exist.
    pub fn profile(&self) -> Option<&str> {
        self.entry.profile.as_deref()
    }

    /// Its tool catalog: what its client may be shown and call, and search.
    pub fn tool_catalog(&self) -> crate::router::ToolCatalog {
        self.entry.catalog.clone()
    }

    async fn deliver<M>(&self, message: M) -> Result<M::Result, GatewayError>
    where
        M: Message + Send + 'static,
        M::Result: Send,
        SessionActor: Handler<M>,
    {
        match tokio::time::timeout(MAILBOX_WAIT, self.entry.addr.send(message)).await {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(MailboxError::Closed)) => Err(GatewayError::SessionNotFound),
            Ok(Err(MailboxError::Timeout)) | Err(_) => {
                self.metrics.mailbox_full.with_label_values(&["session_mailbox"]).inc();
                Err(GatewayError::Overloaded(
                    "the session's queue is full (server.session_mailbox); retry later".into(),
                ))
            }
        }
    }

    /// A stream bounded by the session's budgets; when its client stops reading and it
    /// overflows, the drop is counted and the session told.
    fn outbound(
        &self,
        stream: &'static str,
        request: Option<RequestId>,
    ) -> Result<(Outbound, OutboundReceiver), GatewayError> {
        let (pool, share, max) = &self.streams;
        let tenant = &self.entry.identity.tenant;
        let place = pool.take(tenant, *share, *max).inspect_err(|_| {
            self.metrics.admission_rejected.with_label_values(&[tenant, "tenant_max_streams"]).inc();
        })?;
        // The actor held weakly: a strong address is a sender of its own to actix (made, and
        // allocated, per clone), needed only when the stream overflows.
        let (addr, metrics, tenant) = (self.entry.addr.downgrade(), self.metrics.clone(), tenant.clone());
        let on_event = move |event| match event {
            StreamEvent::Overflowed => {
                metrics.streams_dropped.with_label_values(&[&tenant, stream]).inc();
                if let Some(addr) = addr.upgrade() {
                    addr.do_send(StreamOverflowed(request.clone()));
                }
            }
            StreamEvent::Dropped(n) => {
                metrics.stream_messages_dropped.with_label_values(&[&tenant, stream]).inc_by(n as u64);
            }
        };
        let (tx, mut rx) = crate::outbound::channel(self.limits, self.entry.budget.clone(), Box::new(on_event));
        rx.hold(Box::new(place));
        Ok((tx, rx))
    }

    /// Sends a request. The receiver yields messages about it, then its response, then ends.
    pub async fn request(
        &self,
        id: RequestId,
        method: String,
        params: Option<Value>,
    ) -> Result<OutboundReceiver, GatewayError> {
        self.request_with(id, method, params, None, crate::TaskMode::Requested).await
    }

    /// [`SessionHandle::request`] with a `tools/call`'s arguments as the client wrote them,
    /// apart from `params` ([`Message::from_slice_front`](taskgate_protocol::Message)): they go
    /// so to a 2025-11-25 upstream.
    pub async fn request_passing(
        &self,
        id: RequestId,
        method: String,
        params: Option<Value>,
        arguments: Option<taskgate_protocol::RawArguments>,
    ) -> Result<OutboundReceiver, GatewayError> {
        self.request_with(id, method, params, arguments, crate::TaskMode::Requested).await
    }

    /// [`SessionHandle::request_passing`], saying who decides whether a `tools/call` becomes
    /// a task.
    pub async fn request_with(
        &self,
        id: RequestId,
        method: String,
        params: Option<Value>,
        arguments: Option<taskgate_protocol::RawArguments>,
        mode: crate::TaskMode,
    ) -> Result<OutboundReceiver, GatewayError> {
        let (reply, rx) = self.outbound("request", Some(id.clone()))?;
        let span = tracing::Span::current();
        let subject = taskgate_upstream::current_subject().flatten();
        self.deliver(ClientRequest { id, method, params, arguments, reply, mode, span, subject }).await??;
        Ok(rx)
    }

    /// Delivers a notification.
    pub async fn notify(&self, method: String, params: Option<Value>) -> Result<(), GatewayError> {
        self.deliver(ClientNotification { method, params }).await
    }

    /// Delivers the client's response to a request relayed from an upstream.
    pub async fn respond(&self, response: RpcMessage) -> Result<(), GatewayError> {
        self.deliver(ClientResponse(response, taskgate_upstream::current_subject().flatten())).await?
    }

    /// Opens the session's GET stream.
    pub async fn open_stream(&self) -> Result<OutboundReceiver, GatewayError> {
        let (tx, mut rx) = self.outbound("get", None)?;
        let guard = self.deliver(OpenStream(tx)).await??;
        rx.hold(Box::new(guard));
        Ok(rx)
    }
}
