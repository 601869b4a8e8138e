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
    pub speaks_2025: bool,
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
            speaks_2025: false,
        }
    }
}

/// Whom an upstream session's requests are made for, for an upstream that is called with each
/// caller's own identity (`[upstream.oauth] grant = "token_exchange"`).
#[derive(Clone)]
pub struct Caller {
    /// Who: one name per principal of any tenant (tokens exchanged for it are kept under it).
    pub key: std::sync::Arc<str>,
    /// The caller's latest OAuth access token, to exchange for what the session sends on its
    /// own (its GET stream, its notifications) and for a request made for no client request
    /// (`None`: it has none that is still valid).
    pub subject: std::sync::Arc<dyn Fn() -> Option<String> + Send + Sync>,
    /// Whether the caller's tokens are of the authorization server that exchanges them: a
    /// request's own [`Subject`] is exchanged only then (no other server's token is sent
    /// there).
    pub issued: bool,
}

/// The OAuth access token of the client request an upstream request is made for (or of the
/// request that created the task it is made for): what a token exchange starts from, never
/// another token of the same caller. Never logged.
#[derive(Clone, PartialEq, Eq)]
pub struct Subject {
    /// The access token.
    pub token: std::sync::Arc<str>,
    /// When it expires (seconds since the epoch), if it says.
    pub expires_secs: Option<u64>,
}

impl Subject {
    /// Whether it has expired at `now_secs`.
    pub fn expired(&self, now_secs: u64) -> bool {
        self.expires_secs.is_some_and(|exp| exp <= now_secs)
    }
}

impl std::fmt::Debug for Subject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subject").field("expires_secs", &self.expires_secs).finish_non_exhaustive()
    }
}

tokio::task_local! {
    /// The subject of the requests made while a future given to [`for_subject`] runs.
    static SUBJECT: Option<Subject>;
}

/// Runs `future` with the upstream requests it makes made for `subject` (`None`: for a client
/// request without an OAuth access token, which has nothing to exchange).
pub fn for_subject<F: std::future::Future>(
    subject: Option<Subject>,
    future: F,
) -> impl std::future::Future<Output = F::Output> {
    SUBJECT.scope(subject, future)
}

/// Runs `future` with its upstream requests made for `subject` when there is one; otherwise
/// as its context has them made.
pub fn made_for<F: std::future::Future>(
    subject: Option<Subject>,
    future: F,
) -> futures_util::future::Either<impl std::future::Future<Output = F::Output>, F> {
    match subject {
        Some(subject) => futures_util::future::Either::Left(for_subject(Some(subject), future)),
        None => futures_util::future::Either::Right(future),
    }
}

/// The subject the running future's requests are made for: `None` outside [`for_subject`],
/// `Some(None)` inside it for a request without a token.
pub fn current_subject() -> Option<Option<Subject>> {
    SUBJECT.try_with(Clone::clone).ok()
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
