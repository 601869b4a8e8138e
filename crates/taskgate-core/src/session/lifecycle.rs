//! A client session's streams and life: its GET stream opened, replaced, overflowed or ended,
//! the session closed (idle, ended by the client, at shutdown), the tools of its catalog
//! changed, and its endpoint reloaded.

use crate::outbound::Outbound;
use crate::GatewayError;
use actix::prelude::*;
use serde_json::json;
use std::sync::Arc;
use taskgate_protocol::mcp::methods;
use taskgate_protocol::{Message as RpcMessage, RequestId};

use super::SessionActor;
use taskgate_store::StoreEvent;

/// The client opened its GET stream. The answer is held with the stream's receiver: the
/// session learns when the stream's response ends.
pub(crate) struct OpenStream(pub Outbound);

impl Message for OpenStream {
    type Result = Result<ClientStreamGuard, GatewayError>;
}

/// Held while a client GET stream's response lives; tells the session when it ends.
pub(crate) struct ClientStreamGuard(Addr<SessionActor>);

impl Drop for ClientStreamGuard {
    fn drop(&mut self) {
        self.0.do_send(ClientStreamEnded);
    }
}

/// A client GET stream's response ended.
struct ClientStreamEnded;

impl Message for ClientStreamEnded {
    type Result = ();
}

impl Handler<ClientStreamEnded> for SessionActor {
    type Result = ();

    fn handle(&mut self, _: ClientStreamEnded, ctx: &mut Context<Self>) {
        if self.streams.ended() {
            // Nothing receives what the upstreams' GET streams carry: they may close.
            self.stream_gone(ctx);
            self.release_pooled();
        }
    }
}

impl Handler<OpenStream> for SessionActor {
    type Result = Result<ClientStreamGuard, GatewayError>;

    fn handle(&mut self, OpenStream(tx): OpenStream, ctx: &mut Context<Self>) -> Self::Result {
        // One GET stream at a time, so no message is sent on two streams (basic/transports
        // "Multiple Connections"). A new one replaces the old at once, taking over what it had
        // not delivered: a client whose connection dropped reconnects without waiting for the
        // gateway to notice the dead one.
        self.streams.opened(tx, self.upstreams.iter());
        self.stream_here(ctx);
        Ok(ClientStreamGuard(ctx.address()))
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
                tracing::warn!(session = %self.id, %tenant, request = %crate::logs::Untrusted(&id.to_string()), "the client read nothing of a reply stream for server.stream_stall_secs while messages for it were dropped; the request is cancelled");
                let notice = json!({ "reason": "the client stopped reading its response stream" });
                self.abort_request(&id, notice, ctx);
            }
            Some(_) => {}
            None => {
                if self.streams.get().is_some_and(Outbound::overflowed) {
                    tracing::warn!(session = %self.id, %tenant, "the client read nothing of its GET stream for server.stream_stall_secs while messages for it were dropped; the stream is closed");
                    self.streams.take_get();
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
        if let Some(stream) = self.streams.take_get() {
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
        let streaming = self.streams.open_get().is_some();
        if seen >= msg.cutoff_ms || streaming || !self.requests.is_empty() || !self.asked.is_empty() {
            return false;
        }
        ctx.stop();
        true
    }
}

/// The session has had no request since `cutoff_ms` (`server.upstream_release_secs`): it lets its
/// upstream sessions go, and with them their stdio processes, unless it holds something there (a
/// request in flight, a GET stream, a subscription, an upstream request waiting for its client).
/// Its next call opens them again (the log level it set is applied again); a task running on one
/// keeps it until the task ends.
pub(crate) struct ReleaseUpstreams {
    pub cutoff_ms: u64,
    pub last_seen_ms: Arc<std::sync::atomic::AtomicU64>,
    /// Only the session of this upstream (one whose process places are all taken); `None`:
    /// every one.
    pub only: Option<String>,
}

impl Message for ReleaseUpstreams {
    type Result = ();
}

impl Handler<ReleaseUpstreams> for SessionActor {
    type Result = ();

    fn handle(&mut self, msg: ReleaseUpstreams, _: &mut Context<Self>) {
        let seen = msg.last_seen_ms.load(std::sync::atomic::Ordering::Relaxed);
        if seen >= msg.cutoff_ms || !self.holds_nothing() || self.upstreams.is_empty() {
            return;
        }
        if let Some(upstream) = &msg.only {
            if self.upstreams.remove(upstream).is_some() {
                tracing::debug!(session = %self.id, %upstream, "idle session lets its upstream session go for a new process");
                self.streams.let_go(upstream);
                self.shared.metrics.upstream_sessions_released.with_label_values(&[&self.identity.tenant]).inc();
            }
            return;
        }
        tracing::debug!(session = %self.id, upstreams = self.upstreams.len(), "idle session lets its upstream sessions go");
        self.shared
            .metrics
            .upstream_sessions_released
            .with_label_values(&[&self.identity.tenant])
            .inc_by(self.upstreams.len() as u64);
        self.streams.let_all_go();
        self.upstreams.clear();
    }
}

/// The gateway's shutdown grace ran out with requests of this session still in flight: each
/// gets an error response saying so (a `tasks/result` waiter, what becomes of its task), its
/// upstream call is cancelled, and the session ends.
pub(crate) struct ShutDown;

impl Message for ShutDown {
    type Result = ();
}

impl Handler<ShutDown> for SessionActor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: ShutDown, ctx: &mut Context<Self>) -> ResponseFuture<()> {
        let ids: Vec<RequestId> = self.requests.ids();
        let mut cancels = Vec::new();
        for id in ids {
            let Some(request) = self.requests.get(&id) else { continue };
            // A call whose task was never shown is cancelled like a plain request (its task
            // with it): the client knows no task to ask for.
            let task = request.task.as_ref().filter(|t| !self.asking.holds_task(t));
            let why = match task {
                Some(task) => format!(
                    "the gateway is shutting down before task {task} finished; ask tasks/get or tasks/result for it \
                     again once the gateway is back (or from another replica): a task whose upstream call ran in \
                     this process ends failed and says so, a task its upstream runs goes on"
                ),
                None => "the gateway is shutting down and this request did not finish within its shutdown grace \
                         (server.shutdown_grace_secs); it was cancelled upstream: send it again (another replica, \
                         or this one after its restart)"
                    .to_owned(),
            };
            let error = GatewayError::ShuttingDown(why).error_object();
            let _ = request.reply.send_final(&RpcMessage::error(Some(id.clone()), error));
            let notice = json!({ "reason": "the gateway is shutting down" });
            cancels.extend(self.end_request(&id, notice, ctx));
        }
        ctx.stop();
        // The cancellations go out after the session has ended (this future is the caller's,
        // not the session's), each bounded so that a dead upstream cannot hold the exit.
        Box::pin(async move {
            let sent = futures_util::future::join_all(cancels);
            let _ = tokio::time::timeout(CANCEL_AT_SHUTDOWN, sent).await;
        })
    }
}

/// How long the cancellations of the requests cut short by a shutdown may take to go out.
pub(crate) const CANCEL_AT_SHUTDOWN: std::time::Duration = std::time::Duration::from_secs(2);

/// The client ended the session (DELETE) or the gateway is shutting it down.
pub(crate) struct Close;

impl Message for Close {
    type Result = ();
}

impl Handler<Close> for SessionActor {
    type Result = ();

    fn handle(&mut self, _: Close, ctx: &mut Context<Self>) {
        // Ended for good: its own upstream sessions end at their upstreams too.
        self.end_upstream_sessions();
        ctx.stop();
    }
}

/// The tools of the catalog of these client capabilities changed (see [`crate::router`]).
pub(crate) struct ToolsChanged(pub crate::router::Caps);

impl Message for ToolsChanged {
    type Result = ();
}

impl Handler<ToolsChanged> for SessionActor {
    type Result = ();

    fn handle(&mut self, ToolsChanged(caps): ToolsChanged, _: &mut Context<Self>) {
        // Only a change in this session's own catalog changes what it lists.
        if caps != self.catalog.caps {
            return;
        }
        if let Some(stream) = self.streams.get() {
            let _ = stream.send(&RpcMessage::notification(methods::TOOLS_LIST_CHANGED, None));
        }
    }
}

/// The configuration was reloaded (or the session was placed while a reload ran): the session
/// serves its endpoint as it is now (a profile's tools, renames and search mode), and its client
/// is told its tool list changed when the profile did (basic/server/tools "List Changed
/// Notification"). A session whose profile was removed ends as a `DELETE` ends it, everywhere:
/// each request in flight is answered with an error saying why and cancelled upstream, its own
/// upstream sessions end, and its client's next request is told it does not exist, so it
/// initializes again (basic/transports "Session Management").
pub(crate) struct EndpointReloaded;

impl Message for EndpointReloaded {
    type Result = ();
}

impl Handler<EndpointReloaded> for SessionActor {
    type Result = ();

    fn handle(&mut self, _: EndpointReloaded, ctx: &mut Context<Self>) {
        let policy = self.shared.tenancy.policy(&self.identity.tenant);
        let was = &self.shown.endpoint;
        let Some(now) = policy.endpoint(was.profile_name()) else {
            let profile = was.profile_name().unwrap_or_default().to_owned();
            tracing::info!(session = %self.id, %profile, "the session's profile was removed; the session ends");
            return self.end_without_profile(&profile, ctx);
        };
        let config = |e: &crate::tenants::profiles::Endpoint| e.profile.as_ref().map(|p| p.config.clone());
        let changed = now.search != was.search || config(&now) != config(was);
        self.shown.endpoint = now;
        if changed {
            if let Some(stream) = self.streams.get() {
                let _ = stream.send(&RpcMessage::notification(methods::TOOLS_LIST_CHANGED, None));
            }
        }
    }
}

impl SessionActor {
    fn end_without_profile(&mut self, profile: &str, ctx: &mut Context<Self>) {
        let why = format!(
            "the endpoint /mcp/{profile} was removed from the gateway's configuration and this session has ended; \
             initialize again at an endpoint that serves you"
        );
        let mut cancels = Vec::new();
        for id in self.requests.ids() {
            let Some(request) = self.requests.get(&id) else { continue };
            // A task the client was shown goes on: it is its principal's, at any endpoint.
            let task = request.task.as_ref().filter(|t| !self.asking.holds_task(t));
            let why = match task {
                Some(task) => {
                    format!("{why}; task {task} goes on: ask tasks/get or tasks/result for it at another endpoint")
                }
                None => why.clone(),
            };
            let error = GatewayError::InvalidRequest(why.clone()).error_object();
            let _ = request.reply.send_final(&RpcMessage::error(Some(id.clone()), error));
            cancels.extend(self.end_request(&id, json!({ "reason": why }), ctx));
        }
        self.shared.sessions.forget(&self.id);
        if self.replicated() {
            // No replica serves it any more (as after a DELETE).
            let (tasks, id) = (self.shared.tasks.clone(), self.id.clone());
            actix::spawn(async move {
                if let Err(e) = tasks.store().delete_session(&id).await {
                    tracing::warn!(session = %id, error = %e, "the record of a session whose profile was removed was not deleted");
                }
                tasks.publish(StoreEvent::SessionEnded { session: id });
            });
        }
        self.end_upstream_sessions();
        ctx.stop();
        actix::spawn(async move {
            let _ = tokio::time::timeout(CANCEL_AT_SHUTDOWN, futures_util::future::join_all(cancels)).await;
        });
    }
}
