//! The shapes of the operator's listings: which tasks, a page of them, what a store is.

use serde::Serialize;
use taskgate_protocol::tasks::TaskStatus;

use crate::session_records::SessionRecord;

/// Which tasks to list: each field set must match.
#[derive(Debug, Clone, Default)]
pub struct TaskFilter {
    pub tenant: Option<String>,
    pub principal: Option<String>,
    pub status: Option<TaskStatus>,
    pub upstream: Option<String>,
}

/// One page of a listing, and the cursor of the next one (none at the end). A page may hold
/// fewer items than asked while a next cursor follows (a Redis scan).
#[derive(Debug, Clone)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next_cursor: Option<String>,
}

/// A session record and its id.
pub type SessionEntry = (String, SessionRecord);

/// What a store is and holds.
#[derive(Debug, Clone, Serialize)]
pub struct StoreInfo {
    /// `memory`, `file` or `redis`.
    pub backend: &'static str,
    /// Where it is (a path, or a Redis address without credentials).
    pub location: String,
    /// Whether other replicas share it.
    pub shared: bool,
    /// Tasks held.
    pub tasks: usize,
    /// Leases on running tasks (a shared store): held, and lapsed (their replica stopped
    /// renewing; the next claim hands them to a live replica).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leases: Option<Leases>,
}

/// Leases on running tasks.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Leases {
    pub held: u64,
    pub lapsed: u64,
}
