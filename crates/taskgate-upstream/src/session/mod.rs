//! [`UpstreamSession`]: one MCP session with an upstream, opened lazily on first use.
//!
//! - this file: the session's state and what it does besides requests (notifications, answers
//!   to the upstream's requests, progress routes, stream holds, closing), and the pump that
//!   moves what the upstream sends on its own to the session's owner;
//! - [`calls`]: requests, from the caller's call to the outcome (timeouts, retries after a 404
//!   or a revision change, a legacy stdio call waiting for its answer);
//! - [`connect`]: connecting: the revision probe, `initialize`, a 2026-07-28 session's state;
//! - [`in_flight`]: the calls in flight during which the upstream may ask the client something.

mod calls;
mod connect;
mod in_flight;
mod revision_2025;

pub use calls::{CallState, WaitingCall};

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use serde_json::{json, Value};
use taskgate_protocol::mcp::methods;
use taskgate_protocol::{ErrorObject, Message, RequestId};
use tokio::sync::{mpsc, watch};

use crate::endpoint::{Endpoint, ProcessShare};
use crate::events::UpstreamEvent;
use crate::identity::{ClientIdentity, SessionResume};
use crate::revision_2026::State2026;
use crate::routes::{Incoming, Listening, ProgressRoute, Routes, StreamHold};
use crate::shared::{Member, Owners};
use crate::transport::Channel;
use crate::wire::ChannelError;
use crate::UpstreamError;
use in_flight::InFlight;

/// Messages buffered from an upstream before its reader waits for the owner.
pub(crate) const INCOMING_BUFFER: usize = 256;

/// How long a new session waits for its GET stream to open before its first request.
const GET_STREAM_WAIT: Duration = Duration::from_secs(2);

/// The next request id of any upstream session of this process.
static NEXT_REQUEST_ID: AtomicI64 = AtomicI64::new(1);

/// One MCP session with an upstream. Cheap to clone; all clones are the same session, which
/// ends (DELETE, or the process is stopped) when the last clone is dropped or on [`Self::close`].
/// A handle from [`Connector::open_shared`](crate::Connector::open_shared) is one client session's member in a shared session:
/// the member leaves when its last clone is dropped, and the session ends after it is idle.
#[derive(Clone)]
pub struct UpstreamSession {
    pub(crate) inner: Arc<SessionInner>,
    pub(crate) member: Option<Arc<Member>>,
}

pub(crate) struct SessionInner {
    /// What the sessions of its upstream share: configuration, connections, processes.
    pub(crate) endpoint: Arc<Endpoint>,
    pub(crate) identity: ClientIdentity,
    /// The GET stream is always open (the client can be asked things).
    pub(crate) listen_always: bool,
    /// How many [`StreamHold`]s keep the GET stream open.
    pub(crate) holds: Arc<watch::Sender<usize>>,
    /// Who receives what the upstream sends on its own: one client session, or the members of a
    /// shared session. (Events are boxed: a channel allocates its first block of 32 slots at
    /// once, and an event is 144 bytes; most sessions never get one.)
    pub(crate) events: Owners,
    /// Requests in flight that may have the upstream ask the client something meanwhile.
    pub(crate) calls: parking_lot::Mutex<InFlight>,
    /// The live connection; the async mutex serialises (re-)initialization.
    pub(crate) state: tokio::sync::Mutex<Option<Arc<Ready>>>,
    pub(crate) closed: watch::Sender<bool>,
    pub(crate) routes: Arc<Routes>,
    /// Whom its processes count against, once told ([`UpstreamSession::count_processes_against`]).
    pub(crate) process_share: std::sync::OnceLock<ProcessShare>,
    /// Whom its requests are made for, once told ([`UpstreamSession::on_behalf_of`]).
    pub(crate) caller: std::sync::OnceLock<crate::Caller>,
    /// When the last holder lets it go, it stays at the upstream (no DELETE): another gateway
    /// process continues it ([`UpstreamSession::keep_at_upstream`]).
    pub(crate) kept: std::sync::atomic::AtomicBool,
}

/// An initialized connection (legacy), or a modern upstream's channel and what the session
/// keeps for it.
pub(crate) struct Ready {
    pub(crate) channel: Channel,
    /// Shared by the sessions of a connector while the upstream declares the same (see
    /// [`Endpoint::shared_capabilities`]).
    pub(crate) server_capabilities: Arc<Value>,
    pub(crate) state_2026: Option<Arc<State2026>>,
}

/// A hold on an [`UpstreamSession`] that does not keep it open.
#[derive(Clone)]
pub struct WeakUpstreamSession {
    inner: Weak<SessionInner>,
    member: Option<Weak<Member>>,
}

impl WeakUpstreamSession {
    /// The session, while something else holds it (a member: while something holds the member).
    pub fn upgrade(&self) -> Option<UpstreamSession> {
        let member = match &self.member {
            Some(member) => Some(member.upgrade()?),
            None => None,
        };
        self.inner.upgrade().map(|inner| UpstreamSession { inner, member })
    }
}

impl UpstreamSession {
    /// A hold that does not keep the session open.
    pub fn downgrade(&self) -> WeakUpstreamSession {
        WeakUpstreamSession { inner: Arc::downgrade(&self.inner), member: self.member.as_ref().map(Arc::downgrade) }
    }

    /// Counts the stdio processes this session starts against `share` (its holder's part of the
    /// upstream's `max_processes`); told once, before its first request.
    pub fn count_processes_against(&self, share: ProcessShare) {
        let _ = self.inner.process_share.set(share);
    }

    /// Makes this session's requests for `caller`: an upstream called with each caller's own
    /// identity (token exchange) gets a token exchanged for the caller's. Told once, before its
    /// first request; a session never told makes the gateway's own requests. A session is
    /// only ever one principal's (the sharing key of shared and pooled sessions holds it).
    pub fn on_behalf_of(&self, caller: crate::Caller) {
        let _ = self.inner.caller.set(caller);
    }

    /// Whether its requests are made for a caller, with a token exchanged for the caller's.
    pub fn acts_for_caller(&self) -> bool {
        self.inner.caller.get().is_some()
    }

    /// Whether this is a member of a session shared by client sessions.
    pub fn is_shared(&self) -> bool {
        self.member.is_some()
    }

    /// Whether this is a pooled session ([`crate::Connector::open_pooled`]): this client
    /// session's alone until it lets it go.
    pub fn is_pooled(&self) -> bool {
        matches!(&self.inner.events, Owners::Shared(members) if members.exclusive)
    }

    /// Whether another handle than this one holds this session's member (a task's, a call's).
    pub fn member_held_elsewhere(&self) -> bool {
        self.member.as_ref().is_some_and(|member| Arc::strong_count(member) > 1)
    }

    /// The upstream's name.
    pub fn upstream(&self) -> &str {
        self.inner.endpoint.name()
    }

    /// A fresh request id, for callers that must know it before sending (to route a
    /// cancellation later). Ids are unique across every upstream session of the process, not
    /// only within this one: (upstream, id) names one request, so that what an upstream sends
    /// about a request (an elicitation for a task's call) is never taken for another session's.
    pub fn next_request_id(&self) -> RequestId {
        RequestId::Number(NEXT_REQUEST_ID.fetch_add(1, Ordering::Relaxed))
    }

    /// The one request in flight in this session during which the upstream may ask the client
    /// something (`tools/call`, `tasks/result`, `prompts/get`, `resources/read`,
    /// `completion/complete`), if exactly one is. A request the upstream sends on no request's
    /// stream (stdio has none; an HTTP server may use its GET stream) then belongs to it.
    pub fn sole_call_in_flight(&self) -> Option<RequestId> {
        self.inner.sole_call()
    }

    /// Routes the upstream's progress notifications naming `token` to `sink` until the returned
    /// guard is dropped.
    pub fn route_progress(&self, token: &Value, sink: crate::Sender<Message>) -> ProgressRoute {
        let key = token.to_string();
        self.inner.routes.by_token.lock().insert(key.clone(), sink);
        ProgressRoute { routes: self.inner.routes.clone(), key, _listening: self.hold_stream() }
    }

    /// Keeps the session's GET stream open (opening it if it is not) until the hold is dropped:
    /// something can receive what the upstream sends there.
    pub fn hold_stream(&self) -> StreamHold {
        self.inner.holds.send_modify(|n| *n += 1);
        StreamHold { holds: self.inner.holds.clone() }
    }

    /// Keeps the session's GET stream open for as long as the session lives (a catalog
    /// session, which learns of list changes there).
    pub fn keep_listening(&self) {
        self.inner.holds.send_modify(|n| *n += 1);
    }

    pub(crate) fn listening(&self) -> Listening {
        Listening { always: self.inner.listen_always, holds: self.inner.holds.subscribe() }
    }

    /// Hands a request the upstream sent on a request's own stream (it arrived with that
    /// request's notifications, see [`Self::request_routed`]) to the session's owner as an
    /// [`UpstreamEvent::Request`] related to `related`, as if it had come on its own.
    pub async fn hand_over(&self, request: Message, related: RequestId) {
        if let Message::Request { id, method, params } = request {
            let event = UpstreamEvent::Request { id, method, params, related: Some(related) };
            self.to_owner(event).await;
        }
    }

    /// Gives what the upstream sent on its own to the session's owner. A request in a shared
    /// session is refused here: its clients declared none of roots, sampling and elicitation
    /// (the core shares no other session), so none of them could answer it, and a request
    /// meant for one client must not reach another. A pooled session's request goes to the
    /// one client session holding it; with none, it is refused.
    pub(crate) async fn to_owner(&self, event: UpstreamEvent) {
        if let (Owners::Shared(members), UpstreamEvent::Request { id, method, .. }) = (&self.inner.events, &event) {
            if members.exclusive && !members.is_idle() {
                self.inner.events.deliver(event).await;
                return;
            }
            let why = match members.exclusive {
                true => format!("{method} was not relayed: no client session holds this upstream session now"),
                false => format!(
                    "{method} was not relayed: the client shares this session with others and declared no capability to answer requests"
                ),
            };
            let refusal =
                Message::error(Some(id.clone()), ErrorObject::new(taskgate_protocol::codes::METHOD_NOT_FOUND, why));
            if let Err(e) = self.respond(refusal).await {
                tracing::debug!(upstream = self.upstream(), error = %e, "could not refuse an upstream request");
            }
            return;
        }
        self.inner.events.deliver(event).await;
    }

    /// Answers a request the upstream sent (an [`UpstreamEvent::Request`]).
    pub async fn respond(&self, response: Message) -> Result<(), UpstreamError> {
        let ready = self.current().await.ok_or_else(|| UpstreamError::Unavailable {
            upstream: self.upstream().into(),
            reason: "the session that sent the request has ended".into(),
        })?;
        if let Some(state) = &ready.state_2026 {
            // The answer to an input request of a modern upstream's: it goes into the retry.
            if response.id().is_some_and(|id| state.is_asking(id)) {
                return match state.answer(response) {
                    true => Ok(()),
                    false => Err(UpstreamError::Unavailable {
                        upstream: self.upstream().into(),
                        reason: "the request it answers is no longer waiting".into(),
                    }),
                };
            }
            // The answer to a request a server in transition sent on a call's stream (not an
            // input request of the gateway's): posted to it, as to a 2025-11-25 server.
        }
        ready.channel.send(&response).await.map_err(|e| self.expired_twice(e))
    }

    /// Whether the session stays at the upstream when its last holder lets it go (no DELETE):
    /// other gateway processes continue it. Only an HTTP session can be kept; its GET stream
    /// ends all the same.
    pub fn keep_at_upstream(&self, keep: bool) {
        self.inner.kept.store(keep, std::sync::atomic::Ordering::Relaxed);
    }

    /// What another gateway process needs to continue this session ([`Connector::resume`](crate::Connector::resume)):
    /// for an HTTP upstream that has given a session id; `None` otherwise.
    pub async fn resume_point(&self) -> Option<SessionResume> {
        let ready = self.current().await?;
        match &ready.channel {
            Channel::Http(_) if ready.state_2026.is_some() => Some(SessionResume {
                session_id: String::new(),
                protocol_version: taskgate_protocol::revision_2026::PROTOCOL_VERSION.into(),
            }),
            Channel::Http(http) => http.resume_point(),
            Channel::Stdio(_) => None,
        }
    }

    /// The upstream's capabilities from `initialize`, initializing first if needed.
    pub async fn server_capabilities(&self) -> Result<Value, UpstreamError> {
        Ok(Value::clone(&self.ready().await?.server_capabilities))
    }

    /// Ends the session: HTTP DELETE, or closing the process's stdin and then killing it. (A
    /// member of a shared session only leaves it, when dropped.)
    pub async fn close(&self) {
        if self.member.is_some() {
            return;
        }
        self.inner.closed.send_replace(true);
        let ready = self.inner.state.lock().await.take();
        if let Some(ready) = ready {
            ready.channel.shutdown().await;
        }
    }

    /// Tells the upstream's observer (metrics) about one exchange with the upstream.
    pub(super) fn observe<T>(&self, method: &str, started: std::time::Instant, outcome: &Result<T, UpstreamError>) {
        if let Some(observer) = &self.inner.endpoint.observer {
            let error = outcome.as_ref().err().map(UpstreamError::reason);
            observer.observe(self.upstream(), method, started.elapsed(), error);
        }
    }

    pub(super) fn expired_twice(&self, e: ChannelError) -> UpstreamError {
        match e {
            ChannelError::Failed(e) => e,
            ChannelError::Expired => UpstreamError::Protocol {
                upstream: self.upstream().into(),
                reason: "the upstream rejected a session it had just created (HTTP 404)".into(),
            },
        }
    }

    async fn current(&self) -> Option<Arc<Ready>> {
        self.inner.state.lock().await.clone()
    }
}

impl SessionInner {
    fn sole_call(&self) -> Option<RequestId> {
        self.calls.lock().sole()
    }
}

/// The last holder of a session is gone (the client session ended and no task still runs on
/// it): end it at the upstream too. A stdio process is stopped by dropping its channel.
impl Drop for SessionInner {
    fn drop(&mut self) {
        if let Some(observer) = &self.endpoint.observer {
            observer.session(
                self.endpoint.name(),
                matches!(&self.events, Owners::Shared(members) if !members.exclusive),
                false,
            );
        }
        self.closed.send_replace(true);
        let ready = self.state.try_lock().ok().and_then(|mut state| state.take());
        let kept = self.kept.load(std::sync::atomic::Ordering::Relaxed);
        if let (Some(ready), Ok(runtime), false) = (ready, tokio::runtime::Handle::try_current(), kept) {
            runtime.spawn(async move { ready.channel.shutdown().await });
        }
    }
}

/// Moves what the upstream sends on its own to the session's owner; answers pings itself.
pub(crate) async fn pump(session: Weak<SessionInner>, mut incoming: mpsc::Receiver<Box<Incoming>>) {
    while let Some(boxed) = incoming.recv().await {
        let Incoming { message, related } = *boxed;
        let Some(inner) = session.upgrade() else { return };
        let event = match message {
            Message::Request { id, method, .. } if method == methods::PING => {
                let session = UpstreamSession { inner, member: None };
                // Boxed: this task lives as long as its session, and its state is as large as
                // the largest future it awaits; pings are rare.
                if let Err(e) = Box::pin(session.respond(Message::response(id, json!({})))).await {
                    tracing::debug!(upstream = session.upstream(), error = %e, "could not answer an upstream ping");
                }
                continue;
            }
            Message::Request { id, method, params } => UpstreamEvent::Request { id, method, params, related },
            Message::Notification { .. } => match crate::revision_2026::from_listen(message) {
                Some(Message::Notification { method, params }) => {
                    UpstreamEvent::Notification { method, params, related }
                }
                _ => continue, // a listen acknowledgment
            },
            other => {
                tracing::warn!(upstream = inner.endpoint.name(), id = ?other.id(), "upstream sent a response to no pending request; dropped");
                continue;
            }
        };
        if matches!((&event, &inner.events), (UpstreamEvent::Request { .. }, Owners::Shared(_))) {
            // Boxed, as the ping's answer: rare, and this task lives as long as its session.
            Box::pin(UpstreamSession { inner, member: None }.to_owner(event)).await;
            continue;
        }
        let events = inner.events.clone();
        drop(inner);
        if !events.deliver(event).await {
            return;
        }
    }
}
