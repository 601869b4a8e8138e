//! Tasks (basic/utilities/tasks): statuses, the one function that decides which status
//! transitions are allowed (architecture invariant 7), the `Task` wire object, and the
//! RFC 3339 timestamps tasks carry.

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

/// A task's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// The request is being processed.
    Working,
    /// The receiver needs input from the requestor.
    InputRequired,
    /// Completed successfully; the result is available.
    Completed,
    /// Did not complete successfully (including a tool result with `isError: true`).
    Failed,
    /// Cancelled before completion.
    Cancelled,
}

impl TaskStatus {
    /// Every status, for exhaustive tests.
    pub const ALL: [TaskStatus; 5] = [
        TaskStatus::Working,
        TaskStatus::InputRequired,
        TaskStatus::Completed,
        TaskStatus::Failed,
        TaskStatus::Cancelled,
    ];

    /// `completed`, `failed` and `cancelled` are terminal.
    pub fn is_terminal(self) -> bool {
        matches!(self, TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled)
    }

    /// The wire value.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Working => "working",
            TaskStatus::InputRequired => "input_required",
            TaskStatus::Completed => "completed",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
        }
    }

    /// Reads a wire value.
    pub fn parse(s: &str) -> Option<TaskStatus> {
        TaskStatus::ALL.into_iter().find(|t| t.as_str() == s)
    }
}

impl std::fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refused status change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidTransition {
    /// The current status.
    pub from: TaskStatus,
    /// The requested status.
    pub to: TaskStatus,
}

impl std::fmt::Display for InvalidTransition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.from.is_terminal() {
            write!(f, "the task is already in terminal status '{}'", self.from)
        } else {
            write!(f, "a task cannot move from '{}' to '{}'", self.from, self.to)
        }
    }
}

/// basic/utilities/tasks "Task Status Lifecycle": from `working` to `input_required` or a
/// terminal status; from `input_required` to `working` or a terminal status; terminal statuses
/// MUST NOT change. Staying in the same non-terminal status is allowed (a message update).
pub fn transition(from: TaskStatus, to: TaskStatus) -> Result<(), InvalidTransition> {
    use TaskStatus::*;
    match (from, to) {
        (Working | InputRequired, Working | InputRequired | Completed | Failed | Cancelled) => Ok(()),
        _ => Err(InvalidTransition { from, to }),
    }
}

/// The `Task` object of `CreateTaskResult`, `tasks/get`, `tasks/list`, `tasks/cancel` and
/// `notifications/tasks/status`.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskView {
    /// The task id.
    pub task_id: String,
    /// Current status.
    pub status: TaskStatus,
    /// A human-readable message about the status.
    pub status_message: Option<String>,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_at_ms: u64,
    /// Last update, milliseconds since the Unix epoch.
    pub last_updated_at_ms: u64,
    /// Retention from creation in milliseconds; `None` is unlimited (`null` on the wire).
    pub ttl_ms: Option<u64>,
    /// Suggested polling interval in milliseconds.
    pub poll_interval_ms: Option<u64>,
}

impl TaskView {
    /// The wire object. `ttl` is always present (a number, or `null` for unlimited).
    pub fn to_value(&self) -> Value {
        let mut o = Map::new();
        o.insert("taskId".into(), json!(self.task_id));
        o.insert("status".into(), json!(self.status.as_str()));
        if let Some(m) = &self.status_message {
            o.insert("statusMessage".into(), json!(m));
        }
        o.insert("createdAt".into(), json!(rfc3339(self.created_at_ms)));
        o.insert("lastUpdatedAt".into(), json!(rfc3339(self.last_updated_at_ms)));
        o.insert("ttl".into(), self.ttl_ms.map_or(Value::Null, Value::from));
        if let Some(p) = self.poll_interval_ms {
            o.insert("pollInterval".into(), json!(p));
        }
        Value::Object(o)
    }

    /// Reads a task object from an upstream (its ids and times are the upstream's).
    pub fn from_value(v: &Value) -> Option<UpstreamTask> {
        Some(UpstreamTask {
            task_id: v.get("taskId")?.as_str()?.to_owned(),
            status: TaskStatus::parse(v.get("status")?.as_str()?)?,
            status_message: v.get("statusMessage").and_then(Value::as_str).map(str::to_owned),
            poll_interval_ms: v.get("pollInterval").and_then(Value::as_u64),
        })
    }
}

/// What the gateway reads of an upstream's task.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamTask {
    /// The upstream's task id (never shown to clients).
    pub task_id: String,
    /// Its status.
    pub status: TaskStatus,
    /// Its status message.
    pub status_message: Option<String>,
    /// Its suggested polling interval.
    pub poll_interval_ms: Option<u64>,
}

/// `{"io.modelcontextprotocol/related-task": {"taskId": id}}` merged into a result's `_meta`.
pub fn with_related_task(mut result: Value, task_id: &str) -> Value {
    if let Value::Object(o) = &mut result {
        let meta = o.entry("_meta").or_insert_with(|| json!({}));
        if let Value::Object(meta) = meta {
            meta.insert(crate::mcp::meta::RELATED_TASK.into(), json!({ "taskId": task_id }));
        }
    }
    result
}

/// Formats milliseconds since the Unix epoch as RFC 3339 / ISO 8601 UTC, e.g.
/// `2025-11-25T10:30:00.123Z`.
pub fn rfc3339(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z", rem / 3600, rem % 3600 / 60, rem % 60, ms % 1000)
}

/// Howard Hinnant's days-to-civil algorithm (proleptic Gregorian calendar).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use TaskStatus::*;

    #[test]
    fn transitions_follow_the_lifecycle_for_every_pair() {
        for from in TaskStatus::ALL {
            for to in TaskStatus::ALL {
                let allowed = match from {
                    Working | InputRequired => true,
                    Completed | Failed | Cancelled => false,
                };
                assert_eq!(transition(from, to).is_ok(), allowed, "{from} -> {to}");
            }
        }
        assert!(transition(Completed, Cancelled).unwrap_err().to_string().contains("terminal status 'completed'"));
    }

    #[test]
    fn status_wire_values_round_trip() {
        for s in TaskStatus::ALL {
            assert_eq!(TaskStatus::parse(s.as_str()), Some(s));
            assert_eq!(serde_json::to_value(s).unwrap(), json!(s.as_str()));
        }
        assert_eq!(TaskStatus::parse("done"), None);
    }

    #[test]
    fn timestamps_are_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_764_066_600_123), "2025-11-25T10:30:00.123Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn task_objects_carry_every_required_field() {
        let view = TaskView {
            task_id: "t".into(),
            status: Working,
            status_message: None,
            created_at_ms: 0,
            last_updated_at_ms: 1,
            ttl_ms: None,
            poll_interval_ms: Some(500),
        };
        let v = view.to_value();
        assert_eq!(v["ttl"], Value::Null);
        assert_eq!(v["createdAt"], "1970-01-01T00:00:00.000Z");
        assert_eq!(v["pollInterval"], 500);
        let up = TaskView::from_value(&json!({"taskId":"u","status":"input_required","pollInterval":5})).unwrap();
        assert_eq!((up.status, up.poll_interval_ms), (InputRequired, Some(5)));
    }

    #[test]
    fn requested_task_and_related_meta() {
        use crate::mcp::requested_task;
        assert_eq!(requested_task(Some(&json!({}))), Ok(None));
        assert_eq!(requested_task(Some(&json!({"task": {}}))), Ok(Some(None)));
        assert_eq!(requested_task(Some(&json!({"task": {"ttl": 5}}))), Ok(Some(Some(5))));
        assert!(requested_task(Some(&json!({"task": {"ttl": -1}}))).is_err());
        assert!(requested_task(Some(&json!({"task": true}))).is_err());
        let r = with_related_task(json!({"content": [], "_meta": {"keep": 1}}), "t1");
        assert_eq!(r["_meta"], json!({"keep": 1, "io.modelcontextprotocol/related-task": {"taskId": "t1"}}));
    }
}
