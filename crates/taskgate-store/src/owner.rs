//! [`Owner`]: whom a task or a client session belongs to.

use serde::{Deserialize, Serialize};

/// Who a task belongs to: the requestor's authorization context.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Owner {
    /// Tenant id.
    pub tenant: String,
    /// Principal within the tenant.
    pub principal: String,
}
