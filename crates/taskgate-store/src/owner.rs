//! [`Owner`]: whom a task or a client session belongs to; [`UpstreamSessionRef`]: an upstream
//! session another process can continue.

use serde::{Deserialize, Serialize};

/// Who a task belongs to: the requestor's authorization context.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Owner {
    /// Tenant id.
    pub tenant: String,
    /// Principal within the tenant.
    pub principal: String,
}

/// What is needed to follow a native task again after the gateway restarts: the upstream
/// session it was created in (an HTTP upstream keeps a session across our restart; a stdio
/// upstream's process ends with us, so its tasks cannot be followed again).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UpstreamSessionRef {
    /// The upstream's `Mcp-Session-Id`.
    pub session_id: String,
    /// The protocol version negotiated in it.
    pub protocol_version: String,
}
