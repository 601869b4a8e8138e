//! Why credentials are refused: the reasons, as the client reads them in a 401 body and as
//! metrics label them.

/// Why a request's credentials were refused. The text goes to the client in the 401 body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No `Authorization` header and no anonymous tenant.
    #[error("send Authorization: Bearer <API key or JWT>")]
    Missing,
    /// The header is not `Bearer <token>`.
    #[error("the Authorization header must be \"Bearer <API key or JWT>\"")]
    Malformed,
    /// An API key no tenant has.
    #[error("the API key is not valid")]
    UnknownKey,
    /// A JWT that does not verify or whose claims are refused.
    #[error("the bearer token is not valid: {0}")]
    Token(&'static str),
    /// An access token signed by a key of its authorization server that the gateway does not
    /// hold (yet): the keys are to be read again, then the token checked again.
    #[error("the bearer token is not valid: its authorization server's signing key is not known")]
    KeysNeeded(String),
    /// An opaque token no API key matches, which an authorization server is to be asked about
    /// (token introspection), then the token checked again.
    #[error("the bearer token is not valid: it is to be introspected")]
    IntrospectionNeeded,
    /// A valid access token without a scope it needs (403 `insufficient_scope`).
    #[error("the access token lacks the scope {0:?}")]
    Scope(String),
}

impl AuthError {
    /// A low-cardinality label for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            AuthError::Missing => "missing",
            AuthError::Malformed => "malformed",
            AuthError::UnknownKey => "unknown_key",
            AuthError::Token("it has expired") => "token_expired",
            AuthError::Token(_) | AuthError::KeysNeeded(_) | AuthError::IntrospectionNeeded => "invalid_token",
            AuthError::Scope(_) => "insufficient_scope",
        }
    }
}

/// Why a token more than one tenant would take is refused.
pub(super) const MORE_THAN_ONE_TENANT: &str =
    "more than one tenant would take it; the authorization server must name its tenant";
