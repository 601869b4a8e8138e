//! Sessions every replica serves (a shared store): a session of `initialize` is recorded in
//! the store before its id reaches the client; a replica that receives a request of a session
//! it does not hold loads it from the record (no `initialize`: the client never knows), and
//! serves it from then on as its own. The record expires when no replica has served the
//! session for `server.session_idle_timeout_secs`; each replica serving it pushes the expiry
//! back at most every eighth of that time. DELETE through any replica ends it everywhere.
//!
//! A record is found by the session id and answers only its owner: an id presented with other
//! credentials is "not found", exactly as one that never existed (the id is a random v4 UUID,
//! so none is guessed; docs/sessions.md, "Why records and not sealed ids").

use std::sync::atomic::Ordering;
use std::sync::Arc;

use taskgate_protocol::mcp;
use taskgate_store::{SessionChange, SessionRecord, StoreEvent};
use taskgate_upstream::ClientIdentity;

use super::client_sessions::Placed;
use super::handle::SessionHandle;
use super::Gateway;
use crate::identity::Identity;
use crate::session::registry::SessionEntry;
use crate::session::{Close, SessionActor};
use crate::GatewayError;

impl Gateway {
    /// The session `id` of `identity`: held here, or (a shared store) loaded from its record.
    pub async fn find_session(&self, id: &str, identity: &Identity) -> Result<SessionHandle, GatewayError> {
        match self.session(id, identity) {
            // Boxed: the load's state would otherwise make every request's future larger.
            Err(GatewayError::SessionNotFound) if self.shared.tasks.store().shared() => {
                Box::pin(self.load_session(id, identity)).await
            }
            found => found,
        }
    }

    /// The record of a new session.
    pub(super) fn session_record(&self, identity: &Identity, version: &str, client: &ClientIdentity) -> SessionRecord {
        SessionRecord {
            owner: crate::tasks::owner(identity),
            protocol_version: version.to_owned(),
            capabilities: client.capabilities.clone(),
            client_info: client.client_info.clone(),
            created_ms: self.shared.clock.now_ms(),
            log_level: None,
            subscriptions: Vec::new(),
            upstream_sessions: Default::default(),
            stream: None,
            profile: None,
            activated: Vec::new(),
        }
    }

    /// Keeps a new session's record. While the store is unreachable the session is this
    /// replica's alone (another answers 503 naming the store, so its client retries rather than
    /// starting again), and its record is written at its first request here once the store
    /// answers. Any other failure ends the session.
    pub(super) async fn record_new_session(&self, id: &str, record: SessionRecord) -> Result<(), GatewayError> {
        let keep_ms = SessionActor::keep_ms(&self.shared.config);
        match self.shared.tasks.store().put_session(id, &record, keep_ms).await {
            Ok(()) => Ok(()),
            Err(taskgate_store::StoreError::Unavailable(why)) => {
                tracing::warn!(session = %id, error = %why, "the session could not be recorded; this replica serves it alone until the store is back");
                let entry = self.sessions.entry(id);
                if let Some(recorded) = entry.as_ref().and_then(|e| e.record.as_ref()) {
                    *recorded.pending.lock() = Some(record);
                }
                Ok(())
            }
            Err(e) => {
                if let Some(entry) = self.sessions.remove(id) {
                    entry.addr.do_send(Close);
                }
                Err(crate::tasks::store_error(e))
            }
        }
    }

    /// Loads a session another replica created (or this one, before it let it go).
    async fn load_session(&self, id: &str, identity: &Identity) -> Result<SessionHandle, GatewayError> {
        let store = self.shared.tasks.store();
        let record = store.session(id).await.map_err(crate::tasks::store_error)?;
        let Some(record) = record else { return Err(GatewayError::SessionNotFound) };
        if record.owner != crate::tasks::owner(identity) {
            // Another principal's session: told exactly what an unknown id is told. Logged
            // without the id or the owner.
            if let Some(suppressed) = crate::logs::limiter().allow("foreign_session") {
                tracing::info!(target: "taskgate::audit", tenant = %identity.tenant, principal = %identity.principal, suppressed, "a session id of another principal was presented; answered 404");
            }
            return Err(GatewayError::SessionNotFound);
        }
        let params = serde_json::json!({
            "protocolVersion": record.protocol_version,
            "capabilities": record.capabilities,
            "clientInfo": record.client_info,
        });
        let catalog = self.catalog_ready(Some(&params)).await;
        // Session records are kept for 2025-11-25 sessions only.
        let client = ClientIdentity {
            capabilities: record.capabilities.clone(),
            client_info: record.client_info.clone(),
            speaks_2025: true,
        };
        // The revision it negotiated, as this replica knows it (the record came from one).
        let version = mcp::negotiate_version(&record.protocol_version).to_owned();
        // At the endpoint it was opened at: a session of a profile the tenant no longer has is
        // over.
        let Some(endpoint) = self.shared.tenancy.policy(&identity.tenant).endpoint(record.profile.as_deref()) else {
            return Err(GatewayError::SessionNotFound);
        };
        let placed = Placed { id: id.to_owned(), identity: identity.clone(), version, client, endpoint };
        let stream_known = record.stream.is_some();
        self.place_session(placed, catalog, super::client_sessions::SessionKind::V2025, Some(record)).await?;
        if !stream_known {
            // The client may have opened its GET stream while this copy was made: read again,
            // now that the copy hears the other replicas.
            crate::tasks::RequestorSessions::changed(&*self.sessions, id);
        }
        tracing::info!(session = %id, tenant = %identity.tenant, "session loaded from the store (created at another replica, or let go here)");
        self.shared.metrics.sessions_loaded.with_label_values(&[&identity.tenant]).inc();
        self.session(id, identity)
    }

    /// A request of a recorded session: its record's expiry is pushed back when an eighth of
    /// the idle timeout has passed since this replica last did. A record gone meanwhile (the
    /// session ended through a replica whose word did not arrive, or idled out everywhere)
    /// ends the session here.
    pub(super) fn keep_recorded(&self, id: &str, entry: &Arc<SessionEntry>, now_ms: u64) {
        let Some(recorded) = &entry.record else { return };
        let keep_ms = SessionActor::keep_ms(&self.shared.config);
        let (store, sessions) = (self.shared.tasks.store().clone(), self.sessions.clone());
        // A pending record is tried again at each request, one try at a time.
        if let Some(record) = recorded.pending.lock().clone() {
            if recorded.writing.swap(true, Ordering::Relaxed) {
                return;
            }
            let (entry, id) = (entry.clone(), id.to_owned());
            actix::spawn(async move {
                let written = store.put_session(&id, &record, keep_ms).await.is_ok();
                if let Some(recorded) = &entry.record {
                    if written {
                        tracing::info!(session = %id, "the session is recorded: every replica serves it");
                        recorded.pending.lock().take();
                    }
                    recorded.writing.store(false, Ordering::Relaxed);
                }
            });
            return;
        }
        let last = recorded.touched_ms.load(Ordering::Relaxed);
        if now_ms.saturating_sub(last) < keep_ms / 8
            || recorded.touched_ms.compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed).is_err()
        {
            return;
        }
        let id = id.to_owned();
        actix::spawn(async move {
            match store.change_session(&id, SessionChange::Touch, keep_ms).await {
                Ok(true) => {}
                Ok(false) => {
                    tracing::info!(session = %id, "the session's record is gone (ended or idled out everywhere); it ends here");
                    if let Some(entry) = sessions.remove(&id) {
                        entry.addr.do_send(Close);
                    }
                }
                Err(e) => tracing::debug!(session = %id, error = %e, "the session's record could not be kept"),
            }
        });
    }

    /// Ends a session (DELETE): here, in the store and at every replica serving it.
    pub async fn end_session(&self, id: &str, identity: &Identity) -> Result<(), GatewayError> {
        let store = self.shared.tasks.store();
        // In one process, or a session this replica alone serves (a 2026-07-28 client's listen
        // session has no record): ended here.
        let local = !store.shared() || self.sessions.entry(id).is_some_and(|e| e.record.is_none());
        if local {
            let handle = self.session(id, identity)?;
            self.sessions.remove(id);
            let _ = handle.entry.addr.send(Close).await;
            return Ok(());
        }
        let here = self.session(id, identity).ok();
        if here.is_none() {
            // Its owner's, or not found.
            let record = store.session(id).await.map_err(crate::tasks::store_error)?;
            let Some(record) = record.filter(|r| r.owner == crate::tasks::owner(identity)) else {
                return Err(GatewayError::SessionNotFound);
            };
            // No copy here to end them: its own upstream sessions end from here.
            let client = ClientIdentity {
                capabilities: record.capabilities,
                client_info: record.client_info,
                speaks_2025: true,
            };
            let sessions = record
                .upstream_sessions
                .into_iter()
                .map(|(name, r)| {
                    (
                        name,
                        taskgate_upstream::SessionResume {
                            session_id: r.session_id,
                            protocol_version: r.protocol_version,
                        },
                    )
                })
                .collect();
            crate::session::end_at_upstreams(&self.shared.connectors, &client, sessions);
        }
        store.delete_session(id).await.map_err(crate::tasks::store_error)?;
        self.shared.tasks.publish(StoreEvent::SessionEnded { session: id.to_owned() });
        if let Some(handle) = here {
            self.sessions.remove(id);
            let _ = handle.entry.addr.send(Close).await;
        }
        Ok(())
    }
}
