//! [`ProgressBoard`]: the last progress of each live task that reports any, here or (a shared
//! store) at another replica, for the operator's view. An entry goes when its task ends, or
//! (its end never heard of: a lost event, a replica that died) once it is [`STALE`].

use std::time::{Duration, Instant};

use foldhash::HashMap;
use parking_lot::Mutex;
use serde::Serialize;
use serde_json::Value;

/// At most this many tasks' progress is kept; more are left out of the view.
const MAX_ENTRIES: usize = 65_536;
/// A progress message is cut to this many characters.
const MAX_MESSAGE_CHARS: usize = 200;
/// An entry not updated for this long is dropped.
pub const STALE: Duration = Duration::from_secs(3600);

/// A task's last progress.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LiveProgress {
    pub progress: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The last progress of live tasks.
#[derive(Default)]
pub struct ProgressBoard {
    entries: Mutex<HashMap<String, (LiveProgress, Instant)>>,
}

impl ProgressBoard {
    /// Keeps what a `notifications/progress`'s params say of `task_id`.
    pub fn record(&self, task_id: &str, params: &Value) {
        let Some(progress) = params.get("progress").and_then(Value::as_f64) else { return };
        let total = params.get("total").and_then(Value::as_f64);
        let message =
            params.get("message").and_then(Value::as_str).map(|m| m.chars().take(MAX_MESSAGE_CHARS).collect());
        let now = Instant::now();
        let mut entries = self.entries.lock();
        if entries.len() >= MAX_ENTRIES && !entries.contains_key(task_id) {
            entries.retain(|_, (_, at)| now.duration_since(*at) < STALE);
            if entries.len() >= MAX_ENTRIES {
                return;
            }
        }
        entries.insert(task_id.to_owned(), (LiveProgress { progress, total, message }, now));
    }

    /// Drops the entries not updated for [`STALE`] (the Supervisor's sweep).
    pub fn prune(&self) {
        let now = Instant::now();
        let mut entries = self.entries.lock();
        entries.retain(|_, (_, at)| now.duration_since(*at) < STALE);
        if entries.is_empty() {
            entries.shrink_to_fit();
        }
    }

    /// The task ended: its progress goes.
    pub fn forget(&self, task_id: &str) {
        let mut entries = self.entries.lock();
        if entries.remove(task_id).is_some() && entries.is_empty() {
            entries.shrink_to_fit();
        }
    }

    /// A task's last progress.
    pub fn of(&self, task_id: &str) -> Option<LiveProgress> {
        self.entries.lock().get(task_id).map(|(progress, _)| progress.clone())
    }

    /// How many tasks have progress kept.
    pub fn len(&self) -> usize {
        self.entries.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_last_progress_is_kept_until_the_task_ends() {
        let board = ProgressBoard::default();
        board.record("t", &json!({"progressToken": 1, "progress": 2, "total": 10, "message": "x".repeat(500)}));
        board.record("t", &json!({"progressToken": 1, "progress": 3, "total": 10}));
        board.record("u", &json!({"progressToken": 1, "progress": "not a number"}));
        assert_eq!(board.of("t"), Some(LiveProgress { progress: 3.0, total: Some(10.0), message: None }));
        assert_eq!(board.of("u"), None);
        board.record("m", &json!({"progress": 1, "message": "x".repeat(500)}));
        assert_eq!(board.of("m").unwrap().message.unwrap().len(), MAX_MESSAGE_CHARS);
        board.forget("t");
        board.forget("m");
        assert!(board.is_empty());
    }
}
