//! Native tasks in the demo server (basic/utilities/tasks as a receiver), when it is built with
//! [`crate::DemoServer::with_tasks`]: task-augmented `tools/call` runs the tool in the background,
//! and `tasks/get`, `tasks/result`, `tasks/list`, `tasks/cancel` work on its own task ids.

use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use taskgate_protocol::tasks::{self, TaskStatus, TaskView};
use taskgate_protocol::ErrorObject;
use tokio::sync::watch;

/// One demo task.
pub(crate) struct DemoTask {
    pub view: TaskView,
    pub outcome: Option<Result<Value, ErrorObject>>,
    pub changed: watch::Sender<TaskStatus>,
    /// The connection that created it, to stop its execution on cancel.
    pub connection: u64,
}

/// The demo server's tasks.
#[derive(Default)]
pub(crate) struct DemoTasks {
    pub by_id: HashMap<String, DemoTask>,
    pub order: Vec<String>,
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

impl DemoTasks {
    pub fn create(&mut self, ttl: Option<u64>, connection: u64) -> TaskView {
        let now = now_ms();
        let view = TaskView {
            task_id: format!("demo-task-{}", uuid::Uuid::new_v4()),
            status: TaskStatus::Working,
            status_message: Some("The demo tool is running.".into()),
            created_at_ms: now,
            last_updated_at_ms: now,
            ttl_ms: ttl.or(Some(60_000)),
            poll_interval_ms: Some(50),
        };
        let (changed, _) = watch::channel(TaskStatus::Working);
        self.order.push(view.task_id.clone());
        self.by_id.insert(view.task_id.clone(), DemoTask { view: view.clone(), outcome: None, changed, connection });
        view
    }

    /// Settles a task unless it is already terminal; returns its view when it changed.
    pub fn settle(
        &mut self,
        id: &str,
        status: TaskStatus,
        message: Option<String>,
        outcome: Option<Result<Value, ErrorObject>>,
    ) -> Option<TaskView> {
        let task = self.by_id.get_mut(id)?;
        tasks::transition(task.view.status, status).ok()?;
        task.view.status = status;
        task.view.status_message = message;
        task.view.last_updated_at_ms = now_ms();
        if outcome.is_some() {
            task.outcome = outcome;
        }
        task.changed.send_replace(status);
        Some(task.view.clone())
    }

    pub fn list(&self) -> Value {
        let tasks: Vec<Value> =
            self.order.iter().filter_map(|id| self.by_id.get(id)).map(|t| t.view.to_value()).collect();
        json!({ "tasks": tasks })
    }
}
