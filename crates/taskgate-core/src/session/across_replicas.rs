//! A session that several replicas serve (a shared store): any replica loads it from its
//! record, and each serves the requests that reach it. What ties the copies together:
//!
//! - one GET stream: the replica where the client opens it tells the others, whose streams
//!   end (`SessionStream`); what an upstream sends on its own to a copy without the stream
//!   goes to the replica holding it (`SessionMessage`);
//! - a client's message about a request of another replica (the answer to a request relayed
//!   there, a cancellation, progress) goes to it (`SessionClient`);
//! - its own sessions at HTTP upstreams are recorded, and every copy continues them (a copy
//!   letting one go leaves it at the upstream; the session ended ends it there);
//! - what the client changed (its log level, its subscriptions, the tools it activated in
//!   search mode) is in the record; the copies read it again (`SessionChanged`).
//!   Subscriptions are held at the upstreams by the copy holding the GET stream, where their
//!   updates go (any copy takes a `resources/subscribe`; a copy without the stream passes its
//!   updates on, and the holder drops those of the URIs its own subscriptions deliver).

use actix::prelude::*;
use serde_json::{json, Value};
use taskgate_protocol::mcp::methods;
use taskgate_protocol::{Message as RpcMessage, RequestId};
use taskgate_store::{SessionChange, StoreEvent};
use taskgate_upstream::UpstreamSession;

use super::SessionActor;
use crate::offering_names as names;

/// Whether `id` is one the gateway gives requests it relays to clients (`SessionActor::relay_id`):
/// an answer under another id is about no request of any replica, and is not published.
pub(super) fn relay_id(id: &RequestId) -> bool {
    matches!(id, RequestId::String(s) if s.len() <= 64 && s.starts_with("taskgate-"))
}

/// The longest resource URI a session's record keeps.
const MAX_RECORDED_URI: usize = 2048;

/// What another replica tells this copy of the session.
pub(crate) enum FromElsewhere {
    /// A message for the GET stream.
    Stream(String),
    /// A client's message (JSON text) about a request of this replica.
    Client(String),
    /// The client opened (`true`) or closed its GET stream at that replica.
    StreamAt(String, bool),
    /// Its log level or subscriptions changed: the record is read again.
    Changed,
}

impl Message for FromElsewhere {
    type Result = ();
}

impl SessionActor {
    /// Whether other replicas serve this session too: a shared store, and a session of
    /// `initialize` (a pooled session serving stateless requests, and a 2026-07-28 client's
    /// listen session, are this replica's own).
    pub(super) fn replicated(&self) -> bool {
        !self.stateless && !self.listens && self.shared.tasks.store().shared()
    }

    /// A session loaded from its record (another replica created it): the level its client set
    /// applies to the upstream sessions it opens, which are its own, and continue those the
    /// record names. Its subscriptions are taken when its client's GET stream opens here.
    pub(crate) fn restore(&mut self, record: taskgate_store::SessionRecord) {
        self.upstreams.set_level(record.log_level);
        // The replica holding the client's GET stream, as recorded.
        if record.stream.is_some() {
            self.streams.listens_elsewhere();
        }
        self.ties.stream_at = record.stream;
        let _ = self.shown.activate(record.activated.iter().map(String::as_str));
        for (name, r) in record.upstream_sessions {
            let resume =
                taskgate_upstream::SessionResume { session_id: r.session_id, protocol_version: r.protocol_version };
            self.ties.upstream_refs.insert(name, resume);
        }
    }

    /// How long the record outlives the session's last request at any replica.
    pub(crate) fn keep_ms(config: &taskgate_config::Config) -> u64 {
        match config.server.session_idle_timeout_secs {
            // Sessions never idle out: the record stays a day past its last use.
            0 => 24 * 60 * 60 * 1000,
            secs => secs.saturating_mul(1000),
        }
    }

    /// A copy that holds something (a GET stream, a request in flight) keeps the record alive
    /// without requests: every eighth of the idle timeout it pushes the expiry back.
    pub(super) fn keep_record_while_busy(&self, ctx: &mut Context<Self>) {
        if !self.replicated() {
            return;
        }
        let keep_ms = Self::keep_ms(&self.shared.config);
        ctx.run_interval(std::time::Duration::from_millis(keep_ms / 8), move |act, ctx| {
            if act.holds_nothing() {
                return;
            }
            let (tasks, id) = (act.shared.tasks.clone(), act.id.clone());
            ctx.spawn(
                async move {
                    if let Err(e) = tasks.store().change_session(&id, SessionChange::Touch, keep_ms).await {
                        tracing::debug!(session = %id, error = %e, "the session's record could not be kept");
                    }
                }
                .into_actor(act),
            );
        });
    }

    /// A message for the client's GET stream, which is not open here: to the replica holding
    /// it. Whether it went (false: no other replica holds the stream).
    pub(super) fn to_stream_elsewhere(&self, message: &RpcMessage) -> bool {
        if !self.replicated() || self.ties.stream_at.is_none() {
            return false;
        }
        let message = crate::outbound::Frame::new(message).json;
        self.shared.tasks.publish(StoreEvent::SessionMessage { session: self.id.clone(), message });
        true
    }

    /// A client's message that no request here is about: to the replica it is about. Whether
    /// it went.
    pub(super) fn client_elsewhere(&self, message: &RpcMessage) -> bool {
        if !self.replicated() {
            return false;
        }
        let message = crate::outbound::Frame::new(message).json;
        self.shared.tasks.publish(StoreEvent::SessionClient { session: self.id.clone(), message });
        true
    }

    /// The client subscribed to `uri` through this copy: recorded for the others (within
    /// bounds: at most `MAX_SUBSCRIPTIONS`, each URI at most 2 KiB; beyond, it is this copy's
    /// alone).
    pub(super) fn subscribed_here(&mut self, uri: &str, ctx: &mut Context<Self>) {
        let held = &mut self.ties.held_subscriptions;
        if uri.len() > MAX_RECORDED_URI || (held.len() >= taskgate_store::MAX_SUBSCRIPTIONS && !held.contains(uri)) {
            return;
        }
        held.insert(uri.to_owned());
        self.record_change(SessionChange::Subscribe(uri.to_owned()), ctx);
    }

    /// The client unsubscribed from `uri` through this copy.
    pub(super) fn unsubscribed_here(&mut self, uri: &str, ctx: &mut Context<Self>) {
        if self.ties.held_subscriptions.remove(uri) {
            self.ties.confirmed.remove(uri);
            self.record_change(SessionChange::Unsubscribe(uri.to_owned()), ctx);
        }
    }

    /// Records what the client changed for every replica serving the session.
    pub(super) fn record_change(&self, change: SessionChange, ctx: &mut Context<Self>) {
        if !self.replicated() {
            return;
        }
        let (tasks, id) = (self.shared.tasks.clone(), self.id.clone());
        let keep_ms = Self::keep_ms(&self.shared.config);
        ctx.spawn(
            async move {
                match tasks.store().change_session(&id, change, keep_ms).await {
                    Ok(true) => {
                        tasks.publish(StoreEvent::SessionChanged { session: id });
                    }
                    Ok(false) => tracing::debug!(session = %id, "a change to a session no longer recorded"),
                    Err(e) => tracing::warn!(session = %id, error = %e, "a session change was not recorded"),
                }
            }
            .into_actor(self),
        );
    }

    /// A session of its own at `connector`'s upstream. For a session other replicas serve too,
    /// at an HTTP upstream: the one recorded for it is continued (whichever replica opened it),
    /// or the one opened here is recorded once the upstream has given its id; either stays at
    /// the upstream when this copy lets it go.
    pub(super) fn own_session(
        &mut self,
        connector: &taskgate_upstream::Connector,
        events: taskgate_upstream::EventSender,
        ctx: &mut Context<Self>,
    ) -> UpstreamSession {
        let http = connector.config().transport == taskgate_config::Transport::Http;
        if !self.replicated() || !http {
            return connector.open(self.client.clone(), events);
        }
        let name = connector.name().to_owned();
        let caller = connector
            .acts_for_callers()
            .then(|| self.shared.tenancy.subjects.caller(&self.identity, connector.exchange_issuer()));
        let resumed = self
            .ties
            .upstream_refs
            .get(&name)
            .and_then(|resume| connector.resume(self.client.clone(), events.clone(), resume, caller));
        let session = match resumed {
            Some(session) => session,
            None => {
                let session = connector.open(self.client.clone(), events);
                let opened = session.clone();
                let connecting = async move {
                    opened.server_capabilities().await.ok()?;
                    opened.resume_point().await.filter(|r| !r.session_id.is_empty())
                };
                let (tasks, id) = (self.shared.tasks.clone(), self.id.clone());
                let keep_ms = Self::keep_ms(&self.shared.config);
                // Bound in the record unless another copy bound one first: then that one is
                // what the copies continue, and this one ends when this copy lets it go.
                let binding = async move {
                    let point = connecting.await?;
                    let bound = taskgate_store::UpstreamSessionRef {
                        session_id: point.session_id.clone(),
                        protocol_version: point.protocol_version.clone(),
                    };
                    let store = tasks.store();
                    store
                        .change_session(&id, SessionChange::Upstream(name.clone(), bound.clone()), keep_ms)
                        .await
                        .ok()?;
                    let record = store.session(&id).await.ok()??;
                    let winner = record.upstream_sessions.get(&name)?.clone();
                    Some((name, winner.clone(), winner == bound))
                };
                ctx.spawn(binding.into_actor(self).map(|bound, act, _| {
                    let Some((name, winner, ours)) = bound else { return };
                    if !ours {
                        if let Some(mine) = act.upstreams.get(&name) {
                            mine.keep_at_upstream(false);
                        }
                    }
                    let resume = taskgate_upstream::SessionResume {
                        session_id: winner.session_id,
                        protocol_version: winner.protocol_version,
                    };
                    act.ties.upstream_refs.insert(name, resume);
                }));
                session
            }
        };
        session.keep_at_upstream(true);
        session
    }

    /// The session ended for good: its own upstream sessions end at their upstreams, those it
    /// holds and those recorded it does not hold (let go here, or opened by another copy).
    pub(super) fn end_upstream_sessions(&mut self) {
        for session in self.upstreams.values() {
            session.keep_at_upstream(false);
        }
        let recorded: Vec<(String, taskgate_upstream::SessionResume)> = self
            .ties
            .upstream_refs
            .iter()
            .filter(|(name, _)| !self.upstreams.get(name).is_some_and(|s| !s.is_shared() && !s.is_pooled()))
            .map(|(n, r)| (n.clone(), r.clone()))
            .collect();
        end_at_upstreams(&self.shared.connectors, &self.client, recorded);
    }

    /// The session stops here: the upstream sessions it kept at their upstreams for the other
    /// replicas (it idled out here, or this replica shuts down) end there too when no replica
    /// serves the session any more (its record is gone).
    pub(super) fn leave_upstreams(&mut self) {
        if !self.replicated() || self.ties.upstream_refs.is_empty() {
            return;
        }
        let kept: Vec<UpstreamSession> = self.upstreams.drain();
        let (tasks, id) = (self.shared.tasks.clone(), self.id.clone());
        actix::spawn(async move {
            if let Ok(None) = tasks.store().session(&id).await {
                for session in &kept {
                    session.keep_at_upstream(false);
                }
            }
            drop(kept);
        });
    }

    /// The client opened its GET stream here: the other replicas' end, and this copy takes
    /// the recorded subscriptions.
    pub(super) fn stream_here(&mut self, ctx: &mut Context<Self>) {
        if self.replicated() {
            self.ties.stream_at = None;
            self.announce_stream(true, ctx);
            self.read_record(ctx);
        }
    }

    /// Records where the client's GET stream is (or that it ended here), then tells the other
    /// copies: in that order, a copy loaded meanwhile either reads it or hears it (it reads
    /// its record again once it is in the table).
    fn announce_stream(&self, open: bool, ctx: &mut Context<Self>) {
        let (tasks, id, replica) = (self.shared.tasks.clone(), self.id.clone(), self.shared.replica.clone());
        let keep_ms = Self::keep_ms(&self.shared.config);
        let change = if open { SessionChange::StreamAt(replica) } else { SessionChange::StreamGone(replica) };
        ctx.spawn(
            async move {
                if let Err(e) = tasks.store().change_session(&id, change, keep_ms).await {
                    tracing::debug!(session = %id, error = %e, "where the GET stream is was not recorded");
                }
                tasks.publish(StoreEvent::SessionStream { session: id, open });
            }
            .into_actor(self),
        );
    }

    /// The client's last GET stream here ended: the other copies learn no replica holds one
    /// (unless another has opened one since, which they heard of first).
    pub(super) fn stream_gone(&mut self, ctx: &mut Context<Self>) {
        if self.replicated() && self.ties.stream_at.is_none() {
            self.announce_stream(false, ctx);
        }
    }

    /// Reads the session's record and applies it: the log level, the tools activated, and
    /// (holding the GET stream) the subscriptions.
    fn read_record(&mut self, ctx: &mut Context<Self>) {
        let (tasks, id) = (self.shared.tasks.clone(), self.id.clone());
        ctx.spawn(async move { tasks.store().session(&id).await }.into_actor(self).map(|read, act, ctx| {
            let record = match read {
                Ok(Some(record)) => record,
                Ok(None) => return,
                Err(e) => {
                    return tracing::warn!(session = %act.id, error = %e, "the session's record could not be read")
                }
            };
            // Where the GET stream is, if this copy has not heard (a stream is cleared only by
            // what it hears: a record read may be older than that).
            let elsewhere = record.stream.filter(|at| *at != act.shared.replica);
            if act.ties.stream_at.is_none() && act.streams.get().is_none() && elsewhere.is_some() {
                act.streams.listens_elsewhere();
                act.ties.stream_at = elsewhere;
            }
            // Tools the client activated through another copy.
            let _ = act.shown.activate(record.activated.iter().map(String::as_str));
            if record.log_level.is_some() && record.log_level.as_deref() != act.upstreams.log_level() {
                act.go_private(ctx);
                act.upstreams.set_level(record.log_level);
                let open: Vec<(String, UpstreamSession)> =
                    act.upstreams.iter().map(|(n, s)| (n.clone(), s.clone())).collect();
                for (name, session) in open {
                    act.apply_level(&name, &session, ctx);
                }
            }
            if act.streams.open_get().is_some() {
                let wanted: std::collections::BTreeSet<String> = record.subscriptions.into_iter().collect();
                let add: Vec<String> = wanted.difference(&act.ties.held_subscriptions).cloned().collect();
                let drop: Vec<String> = act.ties.held_subscriptions.difference(&wanted).cloned().collect();
                for uri in add {
                    act.hold_subscription(uri, true, ctx);
                }
                for uri in drop {
                    act.hold_subscription(uri, false, ctx);
                }
            }
        }));
    }

    /// Whether a message from another copy is a resource update this copy's own subscription
    /// delivers.
    fn updates_held(&self, json: &str) -> bool {
        if self.ties.confirmed.is_empty() || !json.contains(methods::RESOURCES_UPDATED) {
            return false;
        }
        let Ok(message) = serde_json::from_str::<Value>(json) else { return false };
        let uri = message.pointer("/params/uri").and_then(Value::as_str);
        uri.is_some_and(|uri| self.ties.confirmed.contains(uri))
    }

    /// Subscribes (or unsubscribes) this copy's upstream session to a resource the client
    /// subscribed to through another replica.
    fn hold_subscription(&mut self, uri: String, subscribe: bool, ctx: &mut Context<Self>) {
        let method = if subscribe { methods::RESOURCES_SUBSCRIBE } else { methods::RESOURCES_UNSUBSCRIBE };
        let routes = names::route_uri(self.shared.catalog.read().naming(), &uri);
        let attempts =
            super::offerings::retarget(Some(&json!({ "uri": uri })), self.candidates("resources", routes), "/uri");
        if subscribe {
            self.go_private(ctx);
            self.upstreams.subscribe();
            self.ties.held_subscriptions.insert(uri.clone());
        } else {
            self.ties.held_subscriptions.remove(&uri);
        }
        let sessions: Vec<(UpstreamSession, Value)> = attempts
            .into_iter()
            .filter_map(|(upstream, params)| Some((self.upstream_session(&upstream, ctx)?, params)))
            .collect();
        let id = self.id.clone();
        let taking = async move {
            // The first upstream that takes it holds it (as a client's own request).
            for (session, params) in sessions {
                if session.request(method, Some(params)).await.is_ok() {
                    return true;
                }
            }
            tracing::info!(session = %id, %method, "no upstream took a subscription made through another replica");
            false
        };
        ctx.spawn(taking.into_actor(self).map(move |taken, act, _| {
            if subscribe && taken && act.ties.held_subscriptions.contains(&uri) {
                act.ties.confirmed.insert(uri);
            } else if !subscribe {
                act.ties.confirmed.remove(&uri);
            }
        }));
    }
}

/// Ends these sessions at their (HTTP) upstreams: each is continued without `initialize` and
/// let go at once, which ends it there (DELETE).
pub(crate) fn end_at_upstreams(
    connectors: &foldhash::HashMap<String, taskgate_upstream::Connector>,
    client: &taskgate_upstream::ClientIdentity,
    sessions: Vec<(String, taskgate_upstream::SessionResume)>,
) {
    for (name, resume) in sessions {
        let Some(connector) = connectors.get(&name) else { continue };
        let (events, _) = taskgate_upstream::event_channel(1);
        if let Some(session) = connector.resume(client.clone(), events, &resume, None) {
            session.keep_at_upstream(false);
            drop(session);
        }
    }
}

impl Handler<FromElsewhere> for SessionActor {
    type Result = ();

    fn handle(&mut self, message: FromElsewhere, ctx: &mut Context<Self>) {
        match message {
            FromElsewhere::Stream(json) => {
                if self.updates_held(&json) {
                    return; // this copy's own subscription delivers it
                }
                if let Some(stream) = self.streams.open_get() {
                    let frame = crate::outbound::Frame {
                        json,
                        response: false,
                        store_unavailable: false,
                        error: false,
                        pause: None,
                    };
                    if stream.send_frame(frame).is_err() {
                        tracing::debug!(session = %self.id, "client stream full; a message from another replica dropped");
                    }
                }
            }
            FromElsewhere::Client(text) => match RpcMessage::from_slice(text.as_bytes()).ok().and_then(Result::ok) {
                Some(response @ (RpcMessage::Response { .. } | RpcMessage::Error { .. })) => {
                    // Not relayed here either: the request was withdrawn, or is unknown.
                    if let Some(id) = response.id() {
                        if self.asked.contains(id) {
                            let _ = self.client_response(response, None, ctx);
                        }
                    }
                }
                Some(RpcMessage::Notification { method, params })
                    if method == methods::CANCELLED
                        && self.cancelled_request(params.as_ref()).is_some_and(|id| self.requests.contains(&id)) =>
                {
                    self.cancel(params, ctx)
                }
                Some(RpcMessage::Notification { method, params })
                    if method == methods::PROGRESS && self.relays_progress(params.as_ref()) =>
                {
                    self.client_progress(params, ctx)
                }
                _ => {}
            },
            FromElsewhere::StreamAt(replica, true) => {
                self.ties.stream_at = Some(replica);
                self.streams.listens_elsewhere();
                if let Some(stream) = self.streams.take_get() {
                    stream.close();
                }
            }
            FromElsewhere::StreamAt(replica, false) => {
                if self.ties.stream_at.as_ref().is_some_and(|at| *at == replica) {
                    self.ties.stream_at = None;
                }
            }
            FromElsewhere::Changed => self.read_record(ctx),
        }
    }
}
