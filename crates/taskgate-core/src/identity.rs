//! [`Identity`]: who is calling, the tenant and the principal within it.

use std::sync::Arc;

/// The tenant every request belongs to when no `[[tenant]]` is configured.
pub const IMPLICIT_TENANT: &str = "anonymous";

/// Who is calling: the tenant and the principal within it, from the request's credentials.
/// Sessions and tasks are bound to it. Shared text: every request, task and permit of a
/// session holds a copy, and a copy costs no allocation.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Identity {
    /// The tenant id.
    pub tenant: Arc<str>,
    /// The principal (user or service) within the tenant.
    pub principal: Arc<str>,
}

impl Identity {
    /// The identity of unauthenticated local use.
    pub fn anonymous() -> Identity {
        Identity { tenant: "anonymous".into(), principal: "anonymous".into() }
    }
}
