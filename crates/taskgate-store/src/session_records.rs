//! Client sessions any replica can serve: what a 2025-11-25 session is once `initialize` has
//! run, kept where every replica sharing the store reads it.
//!
//! A record holds what the session's owner, revision and client declared (fixed at
//! `initialize`), and what the client changed since (its log level, its subscriptions). What
//! a session has in flight (requests, streams, relayed requests) is the business of the
//! replica serving it; what one replica's work produces for a stream held by another travels
//! as [`crate::StoreEvent`]s.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use std::collections::BTreeMap;

use crate::owner::{Owner, UpstreamSessionRef};

/// Subscriptions a record keeps per session, at most (a session's subscriptions beyond are
/// served by the replica that took them, not recorded; at Redis its upstream sessions count
/// against the bound too, one per upstream).
pub const MAX_SUBSCRIPTIONS: usize = 1024;

/// Tools one session may activate in search mode (`use_tools`), at most.
pub const MAX_ACTIVATED: usize = 256;

/// One client session, as any replica loads it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionRecord {
    /// Whose session: a request with other credentials is told it does not exist.
    pub owner: Owner,
    /// The revision `initialize` negotiated.
    pub protocol_version: String,
    /// The client capabilities the gateway relays to upstreams.
    pub capabilities: Value,
    /// The client's `clientInfo`.
    pub client_info: Value,
    /// When it was created (ms, the gateway's clock).
    pub created_ms: u64,
    /// The level the client set with `logging/setLevel`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_level: Option<String>,
    /// The resources it subscribed to (their URIs as the client knows them), sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subscriptions: Vec<String>,
    /// Its own sessions at HTTP upstreams, by upstream: any replica serving it continues them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub upstream_sessions: BTreeMap<String, UpstreamSessionRef>,
    /// The replica holding the client's GET stream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<String>,
    /// The profile whose endpoint (`/mcp/<profile>`) it was opened at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// The tools the client activated in search mode (the gateway's names), sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub activated: Vec<String>,
}

/// A change to a session's record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionChange {
    /// Nothing but its expiry pushed back.
    Touch,
    /// `logging/setLevel`.
    Level(String),
    /// `resources/subscribe` of this URI.
    Subscribe(String),
    /// `resources/unsubscribe` of this URI.
    Unsubscribe(String),
    /// Its own session at an HTTP upstream (by the upstream's name).
    Upstream(String, UpstreamSessionRef),
    /// The client opened its GET stream at this replica.
    StreamAt(String),
    /// The client's GET stream at this replica ended (unless another holds one by now).
    StreamGone(String),
    /// `use_tools` activated these tools (the gateway's names; the record keeps at most
    /// [`MAX_ACTIVATED`]).
    Activate(Vec<String>),
}

impl SessionRecord {
    /// Applies a change (what a store without scripts does in place).
    pub fn apply(&mut self, change: &SessionChange) {
        match change {
            SessionChange::Touch => {}
            SessionChange::Level(level) => self.log_level = Some(level.clone()),
            SessionChange::Subscribe(uri) => {
                if let Err(at) = self.subscriptions.binary_search(uri) {
                    if self.subscriptions.len() < MAX_SUBSCRIPTIONS {
                        self.subscriptions.insert(at, uri.clone());
                    }
                }
            }
            SessionChange::Unsubscribe(uri) => {
                if let Ok(at) = self.subscriptions.binary_search(uri) {
                    self.subscriptions.remove(at);
                }
            }
            SessionChange::Upstream(name, session) => {
                self.upstream_sessions.entry(name.clone()).or_insert_with(|| session.clone());
            }
            SessionChange::StreamAt(replica) => self.stream = Some(replica.clone()),
            SessionChange::StreamGone(replica) => {
                if self.stream.as_ref() == Some(replica) {
                    self.stream = None;
                }
            }
            SessionChange::Activate(names) => {
                for name in names {
                    if let Err(at) = self.activated.binary_search(name) {
                        if self.activated.len() < MAX_ACTIVATED {
                            self.activated.insert(at, name.clone());
                        }
                    }
                }
            }
        }
    }
}
