//! Helpers shared by the tests that drive tasks across processes (restart.rs, replicas.rs).

use std::time::Duration;

use serde_json::{json, Value};
use taskgate_protocol::ErrorObject;
use taskgate_testkit::McpClient;

/// Bounds a wait on an event so that a bug fails the test instead of hanging it.
pub async fn within<F: std::future::Future>(event: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(30), event).await.expect("the awaited event did not happen within 30 s")
}

/// Creates a task of `tool` (ttl ten minutes) and returns its id.
pub async fn create(c: &mut McpClient, tool: &str, args: Value) -> String {
    let created =
        c.request("tools/call", Some(json!({"name": tool, "arguments": args, "task": {"ttl": 600_000}}))).await;
    created.outcome().expect("CreateTaskResult")["task"]["taskId"].as_str().unwrap().to_owned()
}

/// A task method (`tasks/get`, `tasks/result`, `tasks/cancel`) on one task.
pub async fn method(c: &mut McpClient, name: &str, task_id: &str) -> Result<Value, ErrorObject> {
    c.request(name, Some(json!({"taskId": task_id}))).await.outcome()
}
