//! `taskgate tasks list|get|result|cancel`: the tasks a server holds for the caller.

use std::process::ExitCode;
use std::time::Duration;

use serde_json::{json, Value};
use taskgate_protocol::mcp::methods;

use super::progress::Progress;
use super::{connect, explain, ServerArgs};

#[derive(clap::Subcommand)]
pub enum TasksCommand {
    /// Lists the caller's tasks, every page (`tasks/list` is a 2025-11-25 method: auto speaks
    /// that revision).
    List {
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Shows one task.
    Get {
        #[command(flatten)]
        server: ServerArgs,
        task_id: String,
    },
    /// Waits for a task's result (its progress and status shown meanwhile) and prints it.
    Result {
        #[command(flatten)]
        server: ServerArgs,
        task_id: String,
    },
    /// Cancels a task.
    Cancel {
        #[command(flatten)]
        server: ServerArgs,
        task_id: String,
    },
}

/// The most pages `list` reads (a server that never ends its listing).
const MAX_PAGES: usize = 1000;

pub async fn run(command: TasksCommand) -> anyhow::Result<ExitCode> {
    match command {
        TasksCommand::List { mut server } => {
            if server.revision == taskgate_config::UpstreamProtocol::Auto {
                server.revision = taskgate_config::UpstreamProtocol::V2025;
            }
            let server = connect(&server).await?;
            let mut tasks = Vec::new();
            let mut cursor: Option<String> = None;
            for _ in 0..MAX_PAGES {
                let params = cursor.as_ref().map(|c| json!({"cursor": c}));
                let page = server.session.request(methods::TASKS_LIST, params).await.map_err(explain)?;
                tasks.extend(page.get("tasks").and_then(Value::as_array).cloned().unwrap_or_default());
                match page.get("nextCursor").and_then(Value::as_str) {
                    Some(next) => cursor = Some(next.to_owned()),
                    None => break,
                }
            }
            if server.json {
                println!("{}", serde_json::to_string_pretty(&tasks).unwrap_or_default());
            } else {
                for task in &tasks {
                    println!("{}", line(task));
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        TasksCommand::Get { server, task_id } => {
            let server = connect(&server).await?;
            let task =
                server.session.request(methods::TASKS_GET, Some(json!({"taskId": task_id}))).await.map_err(explain)?;
            if server.json {
                println!("{}", serde_json::to_string_pretty(&task).unwrap_or_default());
            } else {
                println!("{}", line(&task));
            }
            Ok(ExitCode::SUCCESS)
        }
        TasksCommand::Result { server, task_id } => {
            let mut server = connect(&server).await?;
            let task =
                server.session.request(methods::TASKS_GET, Some(json!({"taskId": task_id}))).await.map_err(explain)?;
            let mut progress = Progress::new(&task_id);
            progress.status(&task);
            let every = Duration::from_millis(task.get("pollInterval").and_then(Value::as_u64).unwrap_or(1000));
            super::call::follow(
                &mut server,
                &task_id,
                progress,
                every.clamp(Duration::from_millis(200), Duration::from_secs(5)),
            )
            .await
        }
        TasksCommand::Cancel { server, task_id } => {
            let server = connect(&server).await?;
            let task = server
                .session
                .request(methods::TASKS_CANCEL, Some(json!({"taskId": task_id})))
                .await
                .map_err(explain)?;
            if server.json {
                println!("{}", serde_json::to_string_pretty(&task).unwrap_or_default());
            } else {
                println!("{}", line(&task));
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// One task on one line: id, status, times, message.
fn line(task: &Value) -> String {
    let field = |name: &str| super::printable(task.get(name).and_then(Value::as_str).unwrap_or("-"));
    let mut line = format!("{}  {:<14}  created {}", field("taskId"), field("status"), field("createdAt"));
    if let Some(message) = task.get("statusMessage").and_then(Value::as_str) {
        line.push_str("  ");
        line.push_str(&super::printable(message).replace('\n', " "));
    }
    line
}
