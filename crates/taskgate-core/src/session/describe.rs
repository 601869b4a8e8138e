//! What a session holds, for the operator's view: its client, its streams and requests, and
//! the upstream sessions it holds.

use actix::{Handler, Message};
use serde::Serialize;
use serde_json::Value;

use super::SessionActor;

/// Asks a session what it holds.
pub struct Describe;

impl Message for Describe {
    type Result = Described;
}

/// What a session holds now.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Described {
    /// The client's `clientInfo` (name and version), as the client sent it.
    pub client_info: Value,
    /// The client has its GET stream open here.
    pub get_stream: bool,
    /// Client requests in flight (each with its response stream).
    pub requests: usize,
    /// Requests upstreams sent that wait for the client's answer.
    pub relayed: usize,
    /// Its upstream sessions, by upstream.
    pub upstream_sessions: Vec<HeldUpstream>,
    /// The level the client set with `logging/setLevel`.
    pub log_level: Option<String>,
}

/// One upstream session a client session holds.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HeldUpstream {
    pub upstream: String,
    /// Client sessions share it (`share_sessions`), or one of a pool (2026-07-28 clients).
    pub shared: bool,
}

impl Handler<Describe> for SessionActor {
    type Result = actix::MessageResult<Describe>;

    fn handle(&mut self, _: Describe, _: &mut Self::Context) -> Self::Result {
        let mut upstream_sessions: Vec<HeldUpstream> = self
            .upstreams
            .iter()
            .map(|(name, s)| HeldUpstream { upstream: name.clone(), shared: s.is_shared() || s.is_pooled() })
            .collect();
        upstream_sessions.sort_by(|a, b| a.upstream.cmp(&b.upstream));
        let client_info = self.client.client_info.clone();
        actix::MessageResult(Described {
            client_info,
            get_stream: self.streams.get().is_some(),
            requests: self.requests.len(),
            relayed: self.asked.len(),
            upstream_sessions,
            log_level: self.upstreams.log_level().map(str::to_owned),
        })
    }
}
