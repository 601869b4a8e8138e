//! `taskgate call URL TOOL --arg k=v`: calls a tool and prints its result, with a progress bar
//! fed by the server's progress notifications. With `--task`, the call becomes a task whose
//! status is shown until it ends. Ctrl-C cancels: `notifications/cancelled` for a call,
//! `tasks/cancel` for a task.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use serde_json::{json, Map, Value};
use taskgate_protocol::mcp::methods;
use taskgate_protocol::Message;
use taskgate_upstream::{Receiver, UpstreamError, UpstreamEvent};

use super::progress::Progress;
use super::{connect, explain, is_tool_error, print_result, Server, ServerArgs};

/// Exit status after Ctrl-C (128 + SIGINT), as shells report it.
const INTERRUPTED: u8 = 130;
/// The longest wait between two `tasks/get`, whatever the task suggests.
const MAX_POLL: Duration = Duration::from_secs(5);
/// The shortest.
const MIN_POLL: Duration = Duration::from_millis(200);
/// How long a poll, a cancellation, or a task's creation after Ctrl-C may take.
const BRIEF: Duration = Duration::from_secs(5);

/// Ctrl-C (SIGINT), listened for once for the whole command: one that comes between two waits
/// is kept for the next.
pub fn interrupts() -> anyhow::Result<tokio::signal::unix::Signal> {
    Ok(tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?)
}

#[derive(clap::Args)]
pub struct CallArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    /// The tool to call (for the gateway, `<upstream>__<tool>` unless names are bare).
    pub tool: String,
    /// An argument, KEY=VALUE; VALUE is read as JSON when it is JSON (42, true, {"a":1}),
    /// else as text. Repeat for more.
    #[arg(long = "arg", value_name = "KEY=VALUE")]
    pub args: Vec<String>,
    /// All arguments as one JSON object (the --arg pairs are added to it).
    #[arg(long, value_name = "JSON")]
    pub arguments: Option<String>,
    /// Run the call as a task and show its status until it ends.
    #[arg(long)]
    pub task: bool,
    /// The task's time to live, in milliseconds (with --task).
    #[arg(long, requires = "task")]
    pub ttl: Option<u64>,
}

/// The call's arguments from `--arguments` and `--arg`.
pub fn arguments(whole: Option<&str>, pairs: &[String]) -> anyhow::Result<Map<String, Value>> {
    let mut arguments = match whole {
        Some(text) => match serde_json::from_str::<Value>(text).context("--arguments is not JSON")? {
            Value::Object(map) => map,
            _ => anyhow::bail!("--arguments must be a JSON object"),
        },
        None => Map::new(),
    };
    for pair in pairs {
        let (key, value) = pair.split_once('=').with_context(|| format!("--arg {pair:?}: KEY=VALUE"))?;
        let value = serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.to_owned()));
        arguments.insert(key.to_owned(), value);
    }
    Ok(arguments)
}

pub async fn run(args: CallArgs) -> anyhow::Result<ExitCode> {
    let arguments = arguments(args.arguments.as_deref(), &args.args)?;
    let mut server = connect(&args.server).await?;
    let id = server.session.next_request_id();
    let token = format!("taskgate-cli-{id}");
    let mut params = json!({"name": args.tool, "arguments": arguments, "_meta": {"progressToken": token}});
    if args.task {
        params["task"] = match args.ttl {
            Some(ttl) => json!({"ttl": ttl}),
            None => json!({}),
        };
    }
    let mut progress = Progress::new(&args.tool);
    let mut interrupt = interrupts()?;
    let (related_tx, mut related) = taskgate_upstream::channel(256);
    let session = server.session.clone();
    let call = session.request_routed(id.clone(), methods::TOOLS_CALL, Some(params), Some(related_tx));
    tokio::pin!(call);
    let outcome = loop {
        tokio::select! {
            outcome = &mut call => break outcome,
            Some(message) = related.recv() => show(&mut progress, &message),
            Some(event) = server.events.recv() => shown_event(&mut progress, &event),
            _ = interrupt.recv() => {
                progress.finish();
                if !args.task {
                    let cancel = json!({"requestId": id.to_value(), "reason": "cancelled at the terminal (Ctrl-C)"});
                    let _ = tokio::time::timeout(BRIEF, session.notify(methods::CANCELLED, Some(cancel))).await;
                    eprintln!("cancelled");
                    return Ok(ExitCode::from(INTERRUPTED));
                }
                // The task may be made already: its creation is waited for (briefly, or until
                // a second Ctrl-C), and what it made is cancelled.
                let created = tokio::select! {
                    created = tokio::time::timeout(BRIEF, &mut call) => created.ok().and_then(Result::ok),
                    _ = interrupt.recv() => None,
                };
                match created.as_ref().and_then(|r| r.pointer("/task/taskId")).and_then(Value::as_str) {
                    Some(task_id) => cancel_task(&session, task_id).await,
                    None => eprintln!("cancelled"),
                }
                return Ok(ExitCode::from(INTERRUPTED));
            }
        }
    };
    // What was sent about the call before its result (its last progress) is shown first.
    while let Some(message) = related.try_recv() {
        show(&mut progress, &message);
    }
    let result = match outcome {
        Ok(result) => result,
        Err(e) => {
            progress.finish();
            return Err(explain(e));
        }
    };
    if !args.task {
        progress.finish();
        print_result(&result, server.json);
        return Ok(exit_of(&result));
    }
    let Some(task) = result.get("task").cloned() else {
        // A server that does not run this tool as a task answers the call itself.
        progress.finish();
        eprintln!("the server ran the call without a task");
        print_result(&result, server.json);
        return Ok(exit_of(&result));
    };
    let task_id = task.get("taskId").and_then(Value::as_str).context("the task has no taskId")?.to_owned();
    progress.status(&task);
    follow(&mut server, &task_id, progress, poll_interval(&task)).await
}

fn exit_of(result: &Value) -> ExitCode {
    if is_tool_error(result) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn poll_interval(task: &Value) -> Duration {
    let ms = task.get("pollInterval").and_then(Value::as_u64).unwrap_or(1000);
    Duration::from_millis(ms).clamp(MIN_POLL, MAX_POLL)
}

/// Progress in a message about the call (or the task), and what the server logs about it.
fn show(progress: &mut Progress, message: &Message) {
    if let Message::Notification { method, params: Some(params) } = message {
        match method.as_str() {
            methods::PROGRESS => progress.update(params),
            methods::TASKS_STATUS => progress.status(params),
            _ => {}
        }
    }
}

/// The same, sent on the session's own stream (a task's progress when no request waits on it).
fn shown_event(progress: &mut Progress, event: &UpstreamEvent) {
    if let UpstreamEvent::Notification { method, params: Some(params), .. } = event {
        match method.as_str() {
            methods::PROGRESS => progress.update(params),
            methods::TASKS_STATUS => progress.status(params),
            _ => {}
        }
    }
}

/// Follows a task until it ends: its result (`tasks/result`, with its progress on that
/// stream) while its status is polled every `every`; Ctrl-C cancels it (`tasks/cancel`).
pub async fn follow(
    server: &mut Server,
    task_id: &str,
    mut progress: Progress,
    every: Duration,
) -> anyhow::Result<ExitCode> {
    let mut interrupt = interrupts()?;
    let session = server.session.clone();
    let (related_tx, mut related): (_, Receiver<Message>) = taskgate_upstream::channel(256);
    let id = session.next_request_id();
    let result = session.request_routed(id, methods::TASKS_RESULT, Some(json!({"taskId": task_id})), Some(related_tx));
    tokio::pin!(result);
    let mut poll = tokio::time::interval(every);
    poll.tick().await;
    let outcome = loop {
        tokio::select! {
            outcome = &mut result => break outcome,
            Some(message) = related.recv() => show(&mut progress, &message),
            Some(event) = server.events.recv() => shown_event(&mut progress, &event),
            _ = poll.tick() => {
                // Bounded: Ctrl-C is looked at again soon whatever the server does.
                let got = tokio::time::timeout(BRIEF, session.request(methods::TASKS_GET, Some(json!({"taskId": task_id}))));
                if let Ok(Ok(task)) = got.await {
                    progress.status(&task);
                }
            }
            _ = interrupt.recv() => {
                progress.finish();
                cancel_task(&session, task_id).await;
                return Ok(ExitCode::from(INTERRUPTED));
            }
        }
    };
    while let Some(message) = related.try_recv() {
        show(&mut progress, &message);
    }
    progress.finish();
    match outcome {
        Ok(result) => {
            print_result(&result, server.json);
            Ok(exit_of(&result))
        }
        // A cancelled task: said so (whoever cancelled it). Its result is the error the server
        // gives a cancelled task: a 2026-07-28 task's status, or taskgate's 2025-11-25 answer.
        Err(UpstreamError::Rpc { error, .. })
            if error.message.starts_with("the task was cancelled")
                || error.message.starts_with("Task was cancelled before it completed") =>
        {
            eprintln!("task {task_id} was cancelled ({})", super::printable(&error.message));
            Ok(ExitCode::FAILURE)
        }
        // A failed task's result is the error it ended with.
        Err(UpstreamError::Rpc { error, .. }) => {
            eprintln!("task {task_id} ended with an error {}: {}", error.code, super::printable(&error.message));
            Ok(ExitCode::FAILURE)
        }
        Err(e) => Err(explain(e)),
    }
}

/// `tasks/cancel`, bounded, and what came of it.
async fn cancel_task(session: &taskgate_upstream::UpstreamSession, task_id: &str) {
    let cancel = session.request(methods::TASKS_CANCEL, Some(json!({"taskId": task_id})));
    match tokio::time::timeout(BRIEF, cancel).await {
        Ok(Ok(task)) => {
            eprintln!("task {task_id} {}", task.get("status").and_then(Value::as_str).unwrap_or("cancelled"))
        }
        Ok(Err(e)) => eprintln!("task {task_id} could not be cancelled: {}", explain(e)),
        Err(_) => eprintln!("task {task_id}: the server did not answer tasks/cancel within {} s", BRIEF.as_secs()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_json_when_they_are_json_and_text_otherwise() {
        let pairs =
            ["n=42".to_owned(), "flag=true".to_owned(), "text=hello world".to_owned(), "obj={\"a\":1}".to_owned()];
        let args = arguments(Some(r#"{"base": 1, "n": 0}"#), &pairs).unwrap();
        assert_eq!(
            Value::Object(args),
            json!({"base": 1, "n": 42, "flag": true, "text": "hello world", "obj": {"a": 1}})
        );
        assert!(arguments(None, &["novalue".to_owned()]).is_err());
        assert!(arguments(Some("[1]"), &[]).is_err());
    }
}
