//! Who an upstream session speaks for, and how another gateway process continues a session.

use serde_json::{json, Value};

/// What an upstream session declares about its client in `initialize`.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientIdentity {
    /// Capabilities declared upstream (mirrors the gateway client's own).
    pub capabilities: Value,
    /// `clientInfo` sent upstream.
    pub client_info: Value,
    /// The client speaks 2025-11-25 to the gateway. An upstream that speaks 2026-07-28 and also
    /// answers `initialize` (a dual-era server, basic/versioning "Backward Compatibility") is
    /// spoken to in 2025-11-25 for it, so that nothing the client could do with the upstream
    /// directly (being asked on a call's stream, subscriptions, sessions) is lost in
    /// translation.
    pub legacy: bool,
}

impl ClientIdentity {
    /// Whether the client can be asked things (elicitation, sampling, roots): an upstream may
    /// ask on its GET stream, so a session of such a client keeps that stream open.
    pub fn answers_requests(&self) -> bool {
        ["elicitation", "sampling", "roots"].iter().any(|c| self.capabilities.get(c).is_some())
    }

    /// The gateway itself as a client with no optional capabilities (used for the catalog).
    pub fn gateway() -> ClientIdentity {
        ClientIdentity {
            capabilities: json!({}),
            client_info: json!({"name": "taskgate", "version": env!("CARGO_PKG_VERSION")}),
            legacy: false,
        }
    }
}

/// Whom an upstream session's requests are made for, for an upstream that is called with each
/// caller's own identity (`[upstream.oauth] grant = "token_exchange"`).
#[derive(Clone)]
pub struct Caller {
    /// Who: one name per principal of any tenant (tokens exchanged for it are kept under it).
    pub key: std::sync::Arc<str>,
    /// The caller's current OAuth access token, to exchange (`None`: it has none that is
    /// still valid).
    pub subject: std::sync::Arc<dyn Fn() -> Option<String> + Send + Sync>,
}

impl std::fmt::Debug for Caller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caller").field("key", &self.key).finish_non_exhaustive()
    }
}

/// An upstream HTTP session, as another gateway process can continue it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionResume {
    /// The upstream's `Mcp-Session-Id`.
    pub session_id: String,
    /// The protocol version negotiated in it.
    pub protocol_version: String,
}
