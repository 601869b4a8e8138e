//! The tasks extension's scenarios of the conformance suite (`tasks-*` of
//! `@modelcontextprotocol/conformance` 0.2.0-alpha.12, SEP-2663), compared check by check:
//! directly against a server that speaks the extension, then through the gateway following
//! that server's tasks, then through the gateway wrapping the same tools served plain.
//!
//! The server is the Rust SDK (`rmcp` 3.9, pinned) with the fixtures the scenarios call:
//! - `greet`: never a task, `Hello, {name}!`;
//! - `slow_compute`: a task sleeping `seconds`, settling `cancelled` when cancelled;
//! - `failing_job`: a task only (-32021 without the extension), a tool error after a second;
//! - `protocol_error_job`: a task that fails with a JSON-RPC error;
//! - `confirm_delete`: a task asking one question (`inputRequests`, answered by
//!   `tasks/update`);
//! - `multi_input`: a task asking two questions at once;
//! - `test_tool_with_task`: a task only; asks the user's name through `input_required` before
//!   the task exists, then makes the task.
//!
//! Served plain (no extension, for the gateway to wrap) the same tools answer in the call, and
//! the questions come as `input_required` results, answered by the call's retry.

use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ContentBlock, CreateTaskResult,
    InputRequest, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::task_manager::{TaskContext, TaskExit, TaskManager, TaskOptions};
use rmcp::{ErrorData as McpError, ServerHandler};
use serde_json::{json, Value};
use taskgate_config::{TaskSupportSetting, UpstreamConfig};
use taskgate_testkit::{config_with, DemoUpstream, McpClient, TestGateway};

use crate::conformance::{lost, passed, run, Suite};
use crate::modern::Client as ModernClient;
use crate::rmcp_server::{text, tool};
use crate::support::within;

/// The scenarios, each run on its own.
const SCENARIOS: [&str; 10] = [
    "tasks-lifecycle",
    "tasks-capability-negotiation",
    "tasks-wire-fields",
    "tasks-request-state-removal",
    "tasks-mrtr-input",
    "tasks-request-headers",
    "tasks-dispatch-and-envelope",
    "tasks-status-notifications",
    "tasks-required-task-error",
    "tasks-mrtr-composition",
];

type Job = std::pin::Pin<Box<dyn std::future::Future<Output = Result<CallToolResult, TaskExit>> + Send>>;

#[derive(Clone)]
struct Scenarios {
    tasks: TaskManager,
    /// Speaks the tasks extension; else every tool answers in its call.
    extension: bool,
}

/// A form elicitation asking for the boolean or string `field`.
fn question(message: &str, field: &str, kind: &str) -> Value {
    json!({"method": "elicitation/create", "params": {"mode": "form", "message": message,
        "requestedSchema": {"type": "object", "properties": {field: {"type": kind}}, "required": [field]}}})
}

/// What an answer to a form elicitation says, as text.
fn said(answer: &Value) -> String {
    match &answer["content"] {
        Value::Object(fields) => fields
            .values()
            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
            .collect::<Vec<_>>()
            .join(", "),
        _ => answer["action"].as_str().unwrap_or("no answer").to_owned(),
    }
}

async fn ask(ctx: &TaskContext, key: &str, request: Value) -> Result<Value, TaskExit> {
    let request: InputRequest = serde_json::from_value(request).expect("an input request");
    ctx.request_input(key, request).await
}

/// The questions of `asked` not answered in `answers`, as an `input_required` result; `None`
/// when every one is answered.
fn unanswered(asked: &[(&str, Value)], answers: &Value) -> Option<CallToolResponse> {
    let open: serde_json::Map<String, Value> =
        asked.iter().filter(|(key, _)| answers.get(key).is_none()).map(|(k, q)| ((*k).to_owned(), q.clone())).collect();
    if open.is_empty() {
        return None;
    }
    let result = json!({"resultType": "input_required", "inputRequests": open, "requestState": "asked"});
    Some(CallToolResponse::InputRequired(serde_json::from_value(result).expect("an input_required result")))
}

impl Scenarios {
    fn task(&self, job: impl FnOnce(TaskContext) -> Job + Send + 'static) -> CallToolResponse {
        let task = self.tasks.spawn(TaskOptions::new().with_poll_interval_ms(50), job);
        CallToolResponse::Task(CreateTaskResult::new(task))
    }

    fn requires_tasks() -> McpError {
        McpError::missing_required_client_capability(ClientCapabilities::builder().enable_tasks().build())
    }
}

async fn compute(seconds: f64, label: String) -> CallToolResult {
    tokio::time::sleep(Duration::from_secs_f64(seconds.clamp(0.0, 120.0))).await;
    text(format!("computed {label} in {seconds} s"))
}

async fn failing() -> CallToolResult {
    tokio::time::sleep(Duration::from_secs(1)).await;
    CallToolResult::error(vec![ContentBlock::text("the job failed")])
}

impl ServerHandler for Scenarios {
    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(vec![
            tool("greet", "Greets by name", json!({"name": {"type": "string"}})),
            tool(
                "slow_compute",
                "Computes for some seconds",
                json!({"seconds": {"type": "number"}, "label": {"type": "string"}}),
            ),
            tool("failing_job", "A job that fails", json!({})),
            tool("protocol_error_job", "A job that crashes", json!({})),
            tool("confirm_delete", "Deletes a file once confirmed", json!({"filename": {"type": "string"}})),
            tool("multi_input", "Asks two things at once", json!({})),
            tool("test_tool_with_task", "Asks a name, then works on it", json!({})),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let tasks =
            self.extension && context.client_capabilities().is_some_and(|c: ClientCapabilities| c.supports_tasks());
        let args = Value::Object(request.arguments.clone().unwrap_or_default());
        let answers =
            request.input_responses.as_ref().and_then(|r| serde_json::to_value(r).ok()).unwrap_or(Value::Null);
        match request.name.as_ref() {
            "greet" => Ok(text(format!("Hello, {}!", args["name"].as_str().unwrap_or("world"))).into()),
            "slow_compute" => {
                let (seconds, label) =
                    (args["seconds"].as_f64().unwrap_or(0.0), args["label"].as_str().unwrap_or("").to_owned());
                if tasks {
                    return Ok(self.task(move |ctx| {
                        Box::pin(async move {
                            tokio::select! {
                                _ = ctx.cancelled() => Err(TaskExit::Cancelled),
                                result = compute(seconds, label) => Ok(result),
                            }
                        })
                    }));
                }
                tokio::select! {
                    _ = context.ct.cancelled() => Err(McpError::internal_error("cancelled", None)),
                    result = compute(seconds, label) => Ok(result.into()),
                }
            }
            "failing_job" if self.extension && !tasks => Err(Self::requires_tasks()),
            "failing_job" if tasks => Ok(self.task(|_| Box::pin(async { Ok(failing().await) }))),
            "failing_job" => Ok(failing().await.into()),
            "protocol_error_job" if tasks => Ok(self
                .task(|_| Box::pin(async { Err(TaskExit::Error(McpError::internal_error("the job crashed", None))) }))),
            "protocol_error_job" => Err(McpError::internal_error("the job crashed", None)),
            "confirm_delete" => {
                let file = args["filename"].as_str().unwrap_or("the file").to_owned();
                let confirm = question(&format!("Delete {file}?"), "confirm", "boolean");
                let outcome = move |answer: &Value| match answer["content"]["confirm"] == true {
                    true => text(format!("deleted {file}")),
                    false => text(format!("kept {file}")),
                };
                if tasks {
                    return Ok(self
                        .task(move |ctx| Box::pin(async move { Ok(outcome(&ask(&ctx, "confirm", confirm).await?)) })));
                }
                Ok(unanswered(&[("confirm", confirm)], &answers).unwrap_or_else(|| outcome(&answers["confirm"]).into()))
            }
            "multi_input" => {
                let first = question("Your name?", "name", "string");
                let second = question("Go ahead?", "confirm", "boolean");
                let outcome = |a: &Value, b: &Value| text(format!("first: {}; second: {}", said(a), said(b)));
                if tasks {
                    return Ok(self.task(move |ctx| {
                        Box::pin(async move {
                            let (a, b) = tokio::join!(ask(&ctx, "first", first), ask(&ctx, "second", second));
                            Ok(outcome(&a?, &b?))
                        })
                    }));
                }
                let asked = [("first", first), ("second", second)];
                Ok(unanswered(&asked, &answers)
                    .unwrap_or_else(|| outcome(&answers["first"], &answers["second"]).into()))
            }
            "test_tool_with_task" if self.extension && !tasks => Err(Self::requires_tasks()),
            "test_tool_with_task" => {
                let asked = [("user_name", question("Your name?", "name", "string"))];
                if let Some(asking) = unanswered(&asked, &answers) {
                    return Ok(asking);
                }
                let greeting = format!("Hello, {}: the work is done", said(&answers["user_name"]));
                match tasks {
                    true => Ok(self.task(move |_| Box::pin(async move { Ok(text(greeting)) }))),
                    false => Ok(text(greeting).into()),
                }
            }
            other => Err(McpError::invalid_params(format!("unknown tool {other}"), None)),
        }
    }

    crate::rmcp_server::task_methods!();

    fn get_info(&self) -> ServerConfig {
        let capabilities = match self.extension {
            true => ServerCapabilities::builder().enable_tools().enable_tasks().build(),
            false => ServerCapabilities::builder().enable_tools().build(),
        };
        ServerConfig::new(capabilities)
    }
}

/// The scenarios' server on 127.0.0.1:0, speaking the extension or not: its URL.
async fn serve(extension: bool) -> String {
    let tasks = TaskManager::new();
    crate::rmcp_server::serve(move || Scenarios { tasks: tasks.clone(), extension }).await
}

/// The gateway wrapping the plain server's tools: those the scenarios expect to be tasks may
/// be, failing_job and test_tool_with_task must be, greet never is; test_tool_with_task asks
/// before its task exists, as the extension server's does.
fn wrapping(plain: String) -> UpstreamConfig {
    let support = [
        ("slow_compute", TaskSupportSetting::Optional),
        ("failing_job", TaskSupportSetting::Required),
        ("protocol_error_job", TaskSupportSetting::Optional),
        ("confirm_delete", TaskSupportSetting::Optional),
        ("multi_input", TaskSupportSetting::Optional),
        ("test_tool_with_task", TaskSupportSetting::Required),
    ];
    UpstreamConfig {
        prefix: false,
        task_support: TaskSupportSetting::Forbidden,
        tool_task_support: support.into_iter().map(|(tool, s)| (tool.to_owned(), s)).collect(),
        tool_first_input_wait_ms: [("test_tool_with_task".to_owned(), 2_000)].into(),
        ..UpstreamConfig::http("scenarios", plain)
    }
}

#[actix_rt::test]
async fn the_tasks_extensions_scenarios_pass_through_the_gateway_following_and_wrapping_as_directly() {
    let (extension, plain) = (serve(true).await, serve(false).await);
    let direct = run(&extension, Suite::Scenarios(&SCENARIOS)).await;
    assert_eq!(direct.len(), SCENARIOS.len(), "every scenario ran: {:?}", direct.keys());
    assert!(passed(&direct).len() >= 40, "{} checks passed directly: {direct:#?}", passed(&direct).len());

    let following = UpstreamConfig { prefix: false, ..UpstreamConfig::http("scenarios", extension) };
    let wrapping = wrapping(plain);
    for (mode, upstream) in [("following", following), ("wrapping", wrapping)] {
        let gw = TestGateway::start(config_with(vec![upstream]));
        let through = run(&gw.url, Suite::Scenarios(&SCENARIOS)).await;
        gw.stop().await;
        assert_eq!(lost(&direct, &through, false), Vec::<String>::new(), "through the gateway, {mode}");
    }
}

/// Waits until the gateway runs `count` tasks.
async fn running(gw: &TestGateway, count: usize) {
    within(async {
        while gw.gateway.live_tasks() != count {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

/// A tool the gateway wraps that asks before its task exists (`tool_first_input_wait_ms`): a
/// 2026-07-28 client is asked in its call, under the upstream's key and naming no task; its
/// retry is answered with the task (at once when it has ended), which carries the answer. A
/// call whose client leaves
/// during the wait has its task cancelled; one whose question is never answered (past
/// `server.input_wait_secs`) leaves no task running either.
#[actix_rt::test]
async fn a_wrapped_tool_asks_in_its_call_before_the_task_and_a_call_left_unanswered_leaves_no_task() {
    let mut upstream = wrapping(serve(false).await);
    // slow_compute asks nothing: named with a long wait, its call is still waiting when its
    // client leaves.
    upstream.tool_first_input_wait_ms.insert("slow_compute".into(), 60_000);
    // A wait far longer than the test's bound: a task that ends is shown at once, not after it.
    upstream.tool_first_input_wait_ms.insert("test_tool_with_task".into(), 60_000);
    let mut config = config_with(vec![upstream]);
    config.server.input_wait_secs = 60;
    config.server.first_message_wait_ms = 0;
    let clock = std::sync::Arc::new(taskgate_core::clock::ManualClock::new(1_764_066_600_000));
    let gw = TestGateway::start_with_clock(config, clock.clone());
    let c = ModernClient::over(McpClient::new(&gw.url));

    let asked = c.call("test_tool_with_task", json!({})).await;
    assert_eq!(asked["resultType"], "input_required", "{asked}");
    assert!(asked.get("taskId").is_none(), "{asked}");
    let request = &asked["inputRequests"]["user_name"];
    assert_eq!(request["method"], "elicitation/create", "{asked}");
    assert!(request.pointer("/params/_meta/io.modelcontextprotocol~1related-task").is_none(), "{asked}");
    let answers = json!({"user_name": {"action": "accept", "content": {"name": "Ada"}}});
    let retry = json!({"name": "test_tool_with_task", "arguments": {}, "inputResponses": answers,
        "requestState": asked["requestState"]});
    let created = within(c.ok("tools/call", retry)).await;
    assert_eq!(created["resultType"], "task", "{created}");
    assert!(created.get("requestState").is_none() && created.get("inputRequests").is_none(), "{created}");
    let task = created["taskId"].as_str().unwrap().to_owned();
    let done = c.poll(&task, |t| t["status"] == "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "Hello, Ada: the work is done", "{done}");
    running(&gw, 0).await;

    // The client leaves while its call waits to show a task that would compute for a minute:
    // the task is cancelled (a 2025-11-25 session of the same principal lists it). A second
    // later on the gateway's clock, so that tasks/list orders it after the first.
    clock.advance(1_000);
    let waiting = c.stream("tools/call", json!({"name": "slow_compute", "arguments": {"seconds": 60}})).await;
    running(&gw, 1).await;
    drop(waiting);
    running(&gw, 0).await;
    let mut legacy = McpClient::new(&gw.url);
    legacy.initialize().await;
    let listed = legacy.request("tasks/list", None).await.outcome().unwrap();
    let statuses: Vec<&Value> = listed["tasks"].as_array().unwrap().iter().map(|t| &t["status"]).collect();
    assert_eq!(statuses, [&json!("completed"), &json!("cancelled")], "{listed}");

    // Asked, and never answered: the question gets an error once the gateway gives the
    // exchange up, and no task is left running.
    let asked = c.call("test_tool_with_task", json!({})).await;
    assert_eq!(asked["resultType"], "input_required", "{asked}");
    assert_eq!(gw.gateway.live_tasks(), 1, "the call's task runs, not yet shown");
    clock.advance(60_000);
    gw.front.release_due().await;
    running(&gw, 0).await;
    gw.stop().await;
}

/// A wrapped call whose upstream withdraws its question after the client was asked it: the
/// task is shown once the wait passes with nothing outstanding, into the exchange waiting for
/// the client's retry; a client that never retries never sees it, so when the gateway gives
/// the exchange up (past `server.input_wait_secs`) the task is cancelled, and the upstream's
/// call with it.
#[actix_rt::test]
async fn a_task_shown_to_a_call_whose_client_never_retried_is_cancelled_with_the_exchange() {
    let demo = DemoUpstream::start();
    let upstream = UpstreamConfig {
        prefix: false,
        tool_task_support: [("ask".to_owned(), TaskSupportSetting::Optional)].into(),
        tool_first_input_wait_ms: [("ask".to_owned(), 50)].into(),
        ..demo.upstream("demo")
    };
    let mut config = config_with(vec![upstream]);
    // Real time: the task is shown (50 ms after the question is withdrawn) well before the
    // exchange is given up, and nothing outside says when it was shown.
    config.server.input_wait_secs = 1;
    config.server.first_message_wait_ms = 0;
    let gw = TestGateway::start(config);
    let c = ModernClient::over(McpClient::new(&gw.url));
    let asked = c.call("ask", json!({"question": "Which?", "withdraw": "withdrawn", "then_gate": "finished"})).await;
    assert_eq!(asked["resultType"], "input_required", "{asked}");
    running(&gw, 1).await;
    // The upstream withdraws its question and works on: the task is shown, and not seen.
    demo.demo.release("withdrawn");
    // Given up a second after the question: the task is cancelled, and the upstream's call.
    running(&gw, 0).await;
    within(demo.demo.wait_in_flight(|n| *n == 0)).await;
    assert_eq!(demo.demo.stats().cancelled, 1, "the upstream's call was cancelled");
    gw.stop().await;
}
