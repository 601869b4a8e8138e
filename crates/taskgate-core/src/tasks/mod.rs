//! Tasks at the gateway (basic/utilities/tasks): the [`TaskService`] that owns task state, one
//! [`TaskActor`] per live task, the [`Supervisor`], the rules that decide whether a tool may run
//! as a task, the ttl granted, and how a tool call's outcome becomes a task status.

mod actor;
mod expiries;
mod holdings;
mod messages;
mod observed;
mod progress_board;
mod publisher;
mod recovery;
mod replicas;
mod requestor_sessions;
mod service;
mod state;
mod supervisor;
mod task_context;
mod unwritten;
mod work;

use serde_json::Value;
use taskgate_config::{EffectiveTaskLimits, TaskSupportSetting, UpstreamConfig};
use taskgate_protocol::mcp::TaskSupport;
use taskgate_protocol::tasks::TaskStatus;
use taskgate_protocol::{codes, ErrorObject};
use taskgate_store::{Owner, StoreError, TaskOutcome};
use taskgate_upstream::UpstreamError;

pub use actor::TaskActor;
pub(crate) use actor::TaskShared;
pub use holdings::{Held, Holdings, TooLarge};
#[cfg(any(test, feature = "test-hooks"))]
pub use messages::Crash;
pub(crate) use messages::{InputProvided, InputRequested, UpstreamStatus};
pub(crate) use observed::ObservedStore;
pub use progress_board::{LiveProgress, ProgressBoard};
pub(crate) use publisher::Publisher;
pub use recovery::Recovered;
pub(crate) use replicas::{keep_leases, listen, publish_loop};
pub(crate) use requestor_sessions::{InputHolder, RequestorSessions, TaskEnded};
pub use service::TaskService;
pub use supervisor::{ExpireSessions, Supervisor, Sweep};
pub(crate) use task_context::TaskContext;
pub use unwritten::Unwritten;
pub(crate) use work::{Native, TaskStart, Unsent, Work};

use crate::catalog::ToolEntry;
use crate::identity::Identity;
use crate::GatewayError;

/// Whether a federated tool may run as a task. A native upstream's own `execution.taskSupport`
/// passes through; for any other upstream the gateway wraps the call, as configured. A tool its
/// upstream does not list has no `execution` (forbidden): it is called plainly.
pub fn task_support(entry: &ToolEntry, upstream: Option<&UpstreamConfig>) -> TaskSupport {
    if entry.native || !entry.listed {
        return entry.tool.task_support;
    }
    let Some(upstream) = upstream else { return TaskSupport::Forbidden };
    let setting = upstream.tool_task_support.get(&entry.tool.name).copied().unwrap_or(upstream.task_support);
    match setting {
        TaskSupportSetting::Forbidden => TaskSupport::Forbidden,
        TaskSupportSetting::Optional => TaskSupport::Optional,
        TaskSupportSetting::Required => TaskSupport::Required,
    }
}

/// The ttl granted for a requested one under the requestor's tenant's limits
/// (basic/utilities/tasks "TTL and Resource Management": receivers MAY override it, and MUST
/// report the actual one). `None` is unlimited.
pub fn granted_ttl(requested: Option<u64>, limits: &EffectiveTaskLimits) -> Option<u64> {
    let ttl = requested.or(limits.default_ttl_ms)?.max(limits.min_ttl_ms);
    Some(limits.max_ttl_ms.map_or(ttl, |max| ttl.min(max)))
}

/// The store's owner for an identity.
pub fn owner(identity: &Identity) -> Owner {
    Owner { tenant: identity.tenant.to_string(), principal: identity.principal.to_string() }
}

/// The one answer for a task id that is unknown, expired, or someone else's: the same text, so
/// a task id reveals nothing to another requestor.
pub fn not_found() -> GatewayError {
    GatewayError::InvalidParams("Failed to retrieve task: Task not found".into())
}

/// The outcome stored for a task cancelled before it produced a result.
pub(crate) fn cancelled_outcome() -> TaskOutcome {
    TaskOutcome::Error(ErrorObject::new(
        codes::INVALID_PARAMS,
        "Task was cancelled before it completed; it has no result",
    ))
}

/// How a `tools/call` outcome settles a task: `isError: true` and JSON-RPC errors fail it (with a
/// status message), success completes it; the outcome is what the call itself returned.
pub(crate) fn settle_call(outcome: Result<Value, UpstreamError>) -> (TaskStatus, Option<String>, TaskOutcome) {
    match outcome {
        Ok(result) if result.get("isError") == Some(&Value::Bool(true)) => {
            let text = result
                .get("content")
                .and_then(Value::as_array)
                .and_then(|c| c.iter().find_map(|b| b.get("text").and_then(Value::as_str)))
                .unwrap_or("the tool reported an error");
            (TaskStatus::Failed, Some(format!("Tool execution failed: {text}")), TaskOutcome::Result(result))
        }
        Ok(result) => (TaskStatus::Completed, None, TaskOutcome::Result(result)),
        Err(e) => {
            let error = GatewayError::Upstream(e).error_object();
            (TaskStatus::Failed, Some(format!("Tool call failed: {}", error.message)), TaskOutcome::Error(error))
        }
    }
}

/// A store failure as the client sees it.
pub(crate) fn store_error(e: StoreError) -> GatewayError {
    match e {
        StoreError::NotFound => not_found(),
        StoreError::Unavailable(why) => GatewayError::StoreUnavailable(why),
        StoreError::Failed(why) => GatewayError::StoreFailed(why),
        e => GatewayError::Internal(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::BTreeMap;
    use taskgate_protocol::mcp::ToolView;

    fn entry(native: bool, support: &str) -> ToolEntry {
        let tool = ToolView::from_value(json!({"name": "t", "execution": {"taskSupport": support}})).unwrap();
        ToolEntry { upstream: "u".into(), tool, native, listed: true }
    }

    #[test]
    fn native_tools_keep_their_own_task_support_and_wrapped_ones_follow_config() {
        let mut up = UpstreamConfig::http("u", "http://127.0.0.1:1/mcp");
        assert_eq!(task_support(&entry(true, "required"), Some(&up)), TaskSupport::Required);
        assert_eq!(task_support(&entry(true, "forbidden"), Some(&up)), TaskSupport::Forbidden);
        assert_eq!(task_support(&entry(false, "forbidden"), Some(&up)), TaskSupport::Optional);
        up.task_support = TaskSupportSetting::Forbidden;
        up.tool_task_support = BTreeMap::from([("t".to_string(), TaskSupportSetting::Required)]);
        assert_eq!(task_support(&entry(false, "forbidden"), Some(&up)), TaskSupport::Required);
    }

    #[test]
    fn ttl_is_defaulted_and_capped_unless_unlimited() {
        use taskgate_config::{TasksConfig, TenantLimits};
        let mut c = TasksConfig { default_ttl_ms: 1000, max_ttl_ms: 5000, ..TasksConfig::default() };
        let none = TenantLimits::default();
        assert_eq!(granted_ttl(None, &none.tasks(&c)), Some(1000));
        assert_eq!(granted_ttl(Some(3000), &none.tasks(&c)), Some(3000));
        assert_eq!(granted_ttl(Some(9_000_000), &none.tasks(&c)), Some(5000));
        // A tenant's own cap and default apply over the gateway's.
        let tenant = TenantLimits { max_ttl_ms: Some(2000), default_ttl_ms: Some(1500), ..TenantLimits::default() };
        assert_eq!(granted_ttl(None, &tenant.tasks(&c)), Some(1500));
        assert_eq!(granted_ttl(Some(3000), &tenant.tasks(&c)), Some(2000));
        c.unlimited_ttl = true;
        assert_eq!(granted_ttl(None, &none.tasks(&c)), None);
        assert_eq!(granted_ttl(Some(9_000_000), &none.tasks(&c)), Some(9_000_000));
        assert_eq!(granted_ttl(Some(9_000_000), &tenant.tasks(&c)), Some(2000));
    }

    #[test]
    fn call_outcomes_settle_tasks() {
        let (s, m, _) = settle_call(Ok(json!({"content": [{"type": "text", "text": "bad"}], "isError": true})));
        assert_eq!((s, m.as_deref()), (TaskStatus::Failed, Some("Tool execution failed: bad")));
        assert_eq!(settle_call(Ok(json!({"content": []}))).0, TaskStatus::Completed);
        let error = ErrorObject::new(-32000, "nope");
        let (s, _, o) = settle_call(Err(UpstreamError::Rpc { upstream: "u".into(), error: Box::new(error.clone()) }));
        assert_eq!((s, o), (TaskStatus::Failed, TaskOutcome::Error(error)));
    }
}
