use std::time::Duration;

use taskgate_protocol::ErrorObject;

/// Why a request to an upstream did not produce a result.
#[derive(Debug, Clone, thiserror::Error)]
pub enum UpstreamError {
    /// The upstream answered with a JSON-RPC error; it passes to the client unchanged.
    #[error("upstream '{upstream}' returned an error: {error}")]
    Rpc {
        /// The upstream's name.
        upstream: String,
        /// The error as the upstream sent it.
        error: Box<ErrorObject>,
    },
    /// The upstream could not be reached, or its process could not be started or exited.
    #[error("upstream '{upstream}' is unavailable: {reason}")]
    Unavailable {
        /// The upstream's name.
        upstream: String,
        /// What happened.
        reason: String,
    },
    /// The upstream answered with something that is not valid MCP.
    #[error("upstream '{upstream}' sent an invalid response: {reason}")]
    Protocol {
        /// The upstream's name.
        upstream: String,
        /// What was wrong.
        reason: String,
    },
    /// No response within the upstream's timeout.
    #[error("upstream '{upstream}' did not answer within {}s", after.as_secs())]
    Timeout {
        /// The upstream's name.
        upstream: String,
        /// The timeout.
        after: Duration,
    },
    /// A bound of this upstream is reached (stdio processes).
    #[error("upstream '{upstream}' is at its limit: {reason}")]
    Overloaded {
        /// The upstream's name.
        upstream: String,
        /// Which limit.
        reason: String,
    },
}

impl UpstreamError {
    /// A low-cardinality label for logs and metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            UpstreamError::Rpc { .. } => "rpc_error",
            UpstreamError::Unavailable { .. } => "unavailable",
            UpstreamError::Protocol { .. } => "protocol",
            UpstreamError::Timeout { .. } => "timeout",
            UpstreamError::Overloaded { .. } => "overloaded",
        }
    }
}
