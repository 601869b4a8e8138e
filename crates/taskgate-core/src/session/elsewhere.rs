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
//! - what the client changed (its log level, its subscriptions) is in the record; the copies
//!   read it again (`SessionChanged`). Subscriptions are held at the upstreams by the copy
//!   holding the GET stream, where their updates go (any copy takes a `resources/subscribe`;
//!   updates reaching a copy without the stream are dropped, as the holder has its own).

use super::*;
use crate::offerings as names;
use taskgate_store::{SessionChange, StoreEvent};

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
    /// `initialize` (a pooled session serving stateless requests is this replica's own).
    pub(super) fn replicated(&self) -> bool {
        !self.stateless && self.shared.tasks.store().shared()
    }

    /// A session loaded from its record (another replica created it): the level its client set
    /// applies to the upstream sessions it opens, which are its own, and continue those the
    /// record names. Its subscriptions are taken when its client's GET stream opens here.
    pub(crate) fn restore(
        &mut self,
        log_level: Option<String>,
        upstreams: std::collections::BTreeMap<String, taskgate_store::UpstreamSessionRef>,
    ) {
        self.private |= log_level.is_some();
        self.log_level = log_level;
        for (name, r) in upstreams {
            let resume =
                taskgate_upstream::SessionResume { session_id: r.session_id, protocol_version: r.protocol_version };
            self.copies.upstream_refs.insert(name, resume);
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

    /// A message for the client's GET stream, which is not open here: to the replica holding
    /// it. Whether it went (false: no other replica holds the stream).
    pub(super) fn to_stream_elsewhere(&self, message: &RpcMessage) -> bool {
        if !self.replicated() || self.copies.stream_at.is_none() {
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
                    Ok(true) => tasks.publish(StoreEvent::SessionChanged { session: id }),
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
            .copies
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
                ctx.spawn(connecting.into_actor(self).map(move |point, act, ctx| {
                    let Some(point) = point else { return };
                    act.copies.upstream_refs.insert(name.clone(), point.clone());
                    let bound = taskgate_store::UpstreamSessionRef {
                        session_id: point.session_id,
                        protocol_version: point.protocol_version,
                    };
                    act.record_change(SessionChange::Upstream(name, bound), ctx);
                }));
                session
            }
        };
        session.keep_at_upstream(true);
        session
    }

    /// The session stops here: the upstream sessions it kept at their upstreams for the other
    /// replicas (it idled out here, or this replica shuts down) end there too when no replica
    /// serves the session any more (its record is gone).
    pub(super) fn leave_upstreams(&mut self) {
        if !self.replicated() || self.copies.upstream_refs.is_empty() {
            return;
        }
        let kept: Vec<UpstreamSession> = self.upstreams.drain().map(|(_, s)| s).collect();
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
            self.copies.stream_at = None;
            self.shared.tasks.publish(StoreEvent::SessionStream { session: self.id.clone(), open: true });
            self.read_record(ctx);
        }
    }

    /// The client's last GET stream here ended: the other copies learn no replica holds one
    /// (unless another has opened one since, which they heard of first).
    pub(super) fn stream_gone(&mut self) {
        if self.replicated() && self.copies.stream_at.is_none() {
            self.shared.tasks.publish(StoreEvent::SessionStream { session: self.id.clone(), open: false });
        }
    }

    /// Reads the session's record and applies it: the log level, and (holding the GET
    /// stream) the subscriptions.
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
            if record.log_level.is_some() && record.log_level != act.log_level {
                act.go_private(ctx);
                act.log_level = record.log_level;
                let open: Vec<(String, UpstreamSession)> =
                    act.upstreams.iter().map(|(n, s)| (n.clone(), s.clone())).collect();
                for (name, session) in open {
                    act.apply_level(&name, &session, ctx);
                }
            }
            if act.get_stream.as_ref().is_some_and(|s| !s.is_closed()) {
                let wanted: std::collections::BTreeSet<String> = record.subscriptions.into_iter().collect();
                let add: Vec<String> = wanted.difference(&act.copies.held_subscriptions).cloned().collect();
                let drop: Vec<String> = act.copies.held_subscriptions.difference(&wanted).cloned().collect();
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
        if self.copies.confirmed.is_empty() || !json.contains(methods::RESOURCES_UPDATED) {
            return false;
        }
        let Ok(message) = serde_json::from_str::<Value>(json) else { return false };
        let uri = message.pointer("/params/uri").and_then(Value::as_str);
        uri.is_some_and(|uri| self.copies.confirmed.contains(uri))
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
            self.subscribed = true;
            self.copies.held_subscriptions.insert(uri.clone());
        } else {
            self.copies.held_subscriptions.remove(&uri);
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
            if subscribe && taken && act.copies.held_subscriptions.contains(&uri) {
                act.copies.confirmed.insert(uri);
            } else if !subscribe {
                act.copies.confirmed.remove(&uri);
            }
        }));
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
                if let Some(stream) = self.get_stream.as_ref().filter(|s| !s.is_closed()) {
                    let frame = crate::outbound::Frame { json, response: false, store_unavailable: false };
                    if stream.send_frame(frame).is_err() {
                        tracing::debug!(session = %self.id, "client stream full; a message from another replica dropped");
                    }
                }
            }
            FromElsewhere::Client(text) => match RpcMessage::from_slice(text.as_bytes()).ok().and_then(Result::ok) {
                Some(response @ (RpcMessage::Response { .. } | RpcMessage::Error { .. })) => {
                    // Not relayed here either: the request was withdrawn, or is unknown.
                    if let Some(id) = response.id() {
                        if self.relayed.contains_key(id) {
                            let _ = self.client_response(response, ctx);
                        }
                    }
                }
                Some(RpcMessage::Notification { method, params })
                    if method == methods::CANCELLED
                        && self
                            .cancelled_request(params.as_ref())
                            .is_some_and(|id| self.requests.contains_key(&id)) =>
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
                self.copies.stream_at = Some(replica);
                if let Some(stream) = self.get_stream.take() {
                    stream.close();
                }
            }
            FromElsewhere::StreamAt(replica, false) => {
                if self.copies.stream_at.as_ref().is_some_and(|at| *at == replica || at == "?") {
                    self.copies.stream_at = None;
                }
            }
            FromElsewhere::Changed => self.read_record(ctx),
        }
    }
}
