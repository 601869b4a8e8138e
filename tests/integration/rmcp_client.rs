//! Interop with the Rust SDK (`rmcp` 3.9.0, pinned in Cargo.toml) as a 2026-07-28 client with
//! the tasks extension: `server/discover`, a wrapped task and a native 2025 task driven through
//! `tasks/get`, `tasks/update` and `tasks/cancel`, MRTR answered by the client's own handler,
//! and auto mode falling back to a 2025-11-25 session when the client prefers it.

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, ClientConfig, ElicitRequestParams, ElicitResult,
    GetTaskParams, GetTaskResult, ProgressNotificationParam, ProtocolVersion, TaskPayload, TaskStatus,
    UpdateTaskParams,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, NotificationContext, RequestContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientHandler, ErrorData, RoleClient};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use taskgate_testkit::{config_with, DemoUpstream, TestGateway};

use crate::support::within;

/// The client's side: it declares elicitation (and, when asked, the tasks extension), answers
/// every form with `{"answer": "teal"}` and counts progress notifications.
#[derive(Clone)]
struct Handler {
    tasks: bool,
    elicited: Arc<AtomicUsize>,
    progress: Arc<AtomicUsize>,
}

impl Handler {
    fn new(tasks: bool) -> Handler {
        Handler { tasks, elicited: Arc::default(), progress: Arc::default() }
    }
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = json!({"elicitation": {"form": {}}});
        if self.tasks {
            capabilities["extensions"] = json!({"io.modelcontextprotocol/tasks": {}});
        }
        serde_json::from_value(json!({
            "protocolVersion": "2026-07-28",
            "capabilities": capabilities,
            "clientInfo": {"name": "rmcp-interop", "version": "3.9.0"},
        }))
        .expect("a client config")
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        assert!(matches!(request, ElicitRequestParams::FormElicitationParams { .. }), "{request:?}");
        self.elicited.fetch_add(1, Ordering::SeqCst);
        Ok(serde_json::from_value(json!({"action": "accept", "content": {"answer": "teal"}})).unwrap())
    }

    async fn on_progress(&self, _params: ProgressNotificationParam, _context: NotificationContext<RoleClient>) {
        self.progress.fetch_add(1, Ordering::SeqCst);
    }
}

async fn connect(url: &str, handler: Handler, lifecycle: ClientLifecycleMode) -> RunningService<RoleClient, Handler> {
    let transport = StreamableHttpClientTransport::from_uri(url.to_owned());
    within(handler.serve_with_lifecycle(transport, lifecycle)).await.expect("the client connects")
}

fn pinned() -> ClientLifecycleMode {
    ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] }
}

fn call(name: &str, arguments: Value) -> CallToolRequestParams {
    serde_json::from_value(json!({"name": name, "arguments": arguments})).unwrap()
}

/// Polls `tasks/get` until `done` holds (a bounded number of round trips, no sleeping).
async fn poll(
    client: &RunningService<RoleClient, Handler>,
    task: &str,
    done: impl Fn(&GetTaskResult) -> bool,
) -> GetTaskResult {
    for _ in 0..5000 {
        let got = within(client.get_task(GetTaskParams::new(task))).await.expect("tasks/get");
        assert_eq!(got.task.task.task_id, task);
        if done(&got) {
            return got;
        }
    }
    panic!("task {task} never reached the awaited state");
}

fn text_of(result: &serde_json::Map<String, Value>) -> String {
    result["content"][0]["text"].as_str().unwrap_or_default().to_owned()
}

async fn start_task(client: &RunningService<RoleClient, Handler>, name: &str, arguments: Value) -> String {
    match within(client.call_tool_once(call(name, arguments))).await.expect("tools/call") {
        CallToolResponse::Task(created) => {
            assert_eq!(created.task.status, TaskStatus::Working);
            assert!(!created.task.created_at.is_empty() && !created.task.last_updated_at.is_empty());
            created.task.task_id
        }
        other => panic!("{name}: expected a task, got {other:?}"),
    }
}

#[actix_rt::test]
async fn the_rust_sdk_drives_wrapped_and_native_tasks_through_the_tasks_extension() {
    let plain = DemoUpstream::start();
    let native = DemoUpstream::start_with_tasks();
    let gw = TestGateway::start(config_with(vec![plain.upstream("wrapped"), native.upstream("native")]));
    let handler = Handler::new(true);
    let client = connect(&gw.url, handler.clone(), pinned()).await;
    // server/discover: the negotiated revision and the extension.
    let discovered = client.peer_info().expect("the server's info");
    assert_eq!(discovered.protocol_version, ProtocolVersion::V_2026_07_28);
    assert!(discovered.capabilities.supports_tasks(), "{:?}", discovered.capabilities);
    let tools = within(client.list_all_tools()).await.expect("tools/list");
    assert!(tools.iter().any(|t| t.name == "native__wait") && tools.iter().any(|t| t.name == "wrapped__ask"));

    // A wrapped task (the upstream has no tasks): working, then completed with the result inlined.
    let wrapped = start_task(&client, "wrapped__wait", json!({"gate": "w1"})).await;
    let got = within(client.get_task(GetTaskParams::new(&wrapped))).await.unwrap();
    assert_eq!(got.task.status(), TaskStatus::Working);
    plain.demo.release("w1");
    let done = poll(&client, &wrapped, |t| t.task.status().is_terminal()).await;
    match &done.task.payload {
        TaskPayload::Completed { result } => assert_eq!(text_of(result), "gate w1 opened"),
        other => panic!("{other:?}"),
    }

    // A wrapped task that needs input: tasks/get lists the request, tasks/update answers it.
    let asking = start_task(&client, "wrapped__ask", json!({"question": "Colour?"})).await;
    let waiting = poll(&client, &asking, |t| t.task.status() == TaskStatus::InputRequired).await;
    let TaskPayload::InputRequired { input_requests } = &waiting.task.payload else { unreachable!() };
    let key = input_requests.keys().next().expect("one input request").clone();
    let answer = json!({"action": "accept", "content": {"answer": "violet"}});
    within(client.update_task(UpdateTaskParams::new(&asking, [(key, answer)].into()))).await.expect("tasks/update");
    let answered = poll(&client, &asking, |t| t.task.status().is_terminal()).await;
    match &answered.task.payload {
        TaskPayload::Completed { result } => assert_eq!(text_of(result), "answer: violet"),
        other => panic!("{other:?}"),
    }

    // A native 2025-11-25 task at the upstream: the client sees the gateway's task, polls it
    // to its result, and cancels another one, which reaches the upstream's own task.
    let native_task = start_task(&client, "native__wait", json!({"gate": "n1"})).await;
    native.demo.release("n1");
    let done = poll(&client, &native_task, |t| t.task.status().is_terminal()).await;
    match &done.task.payload {
        TaskPayload::Completed { result } => assert_eq!(text_of(result), "gate n1 opened"),
        other => panic!("{other:?}"),
    }
    assert_eq!(native.demo.stats().tasks_created, 1, "the upstream ran it as its own task");
    let doomed = start_task(&client, "native__wait", json!({"gate": "never"})).await;
    within(client.cancel_task(CancelTaskParams::new(&doomed))).await.expect("tasks/cancel");
    let cancelled = poll(&client, &doomed, |t| t.task.status().is_terminal()).await;
    assert_eq!(cancelled.task.status(), TaskStatus::Cancelled);
    // The forward to the upstream is asynchronous: poll its own view, bounded in round trips.
    within(async {
        while native.demo.stats().tasks_cancelled == 0 {
            let _ = client.get_task(GetTaskParams::new(&doomed)).await;
        }
    })
    .await;

    // Unknown task ids are errors, not empty successes.
    assert!(within(client.get_task(GetTaskParams::new("no-such-task"))).await.is_err());
    assert!(within(client.cancel_task(CancelTaskParams::new("no-such-task"))).await.is_err());
    assert_eq!(handler.elicited.load(Ordering::SeqCst), 0, "input during a task goes through tasks/update");
    within(client.cancel()).await.unwrap();
}

/// The 2026-07-28 client with the tasks extension (rmcp) in front of the TypeScript SDK 1.32's
/// native 2025-11-25 tasks (`task-server.mjs`): the gateway's task id, polled to the result
/// inlined in `tasks/get`, and a cancelled one that the upstream reports cancelled.
#[actix_rt::test]
async fn the_rust_sdk_drives_the_typescript_sdks_native_tasks_through_the_tasks_extension() {
    let (_server, url) = crate::interop::start_ts_task_server().await;
    let gw = TestGateway::start(config_with(vec![taskgate_config::UpstreamConfig::http("ts", url)]));
    let client = connect(&gw.url, Handler::new(true), pinned()).await;
    let task = start_task(&client, "ts__delay", json!({"ms": 1})).await;
    let done = poll(&client, &task, |t| t.task.status().is_terminal()).await;
    match &done.task.payload {
        TaskPayload::Completed { result } => assert_eq!(text_of(result), "waited 1 ms"),
        other => panic!("{other:?}"),
    }
    // An hour's task, cancelled: the upstream's own task is cancelled, as tasks/get says.
    let doomed = start_task(&client, "ts__delay", json!({"ms": 3_600_000})).await;
    within(client.cancel_task(CancelTaskParams::new(&doomed))).await.expect("tasks/cancel");
    let after = poll(&client, &doomed, |t| t.task.status().is_terminal()).await;
    assert_eq!(after.task.status(), TaskStatus::Cancelled);
    within(client.cancel()).await.unwrap();
}

#[actix_rt::test]
async fn the_rust_sdk_without_the_extension_gets_plain_results_and_answers_mrtr_with_its_handler() {
    let demo = DemoUpstream::start();
    let gw = TestGateway::start(config_with(vec![demo.upstream("demo")]));
    let handler = Handler::new(false);
    let client = connect(&gw.url, handler.clone(), pinned()).await;
    // No extension, no task: the call runs to its result in the one request.
    let result = within(client.call_tool(call("demo__slow", json!({"steps": 3})))).await.expect("tools/call");
    assert_eq!(result.is_error, Some(false));
    // An upstream elicitation becomes input_required; rmcp's MRTR loop asks the handler and retries.
    let result = within(client.call_tool(call("demo__ask", json!({"question": "Colour?"})))).await.expect("MRTR");
    assert_eq!(result.content[0].as_text().map(|t| t.text.as_str()), Some("answer: teal"));
    assert_eq!(handler.elicited.load(Ordering::SeqCst), 1);

    // A client that prefers the older revision gets a 2025-11-25 session on the same endpoint.
    let legacy = connect(&gw.url, Handler::new(false), ClientLifecycleMode::Initialize).await;
    assert_eq!(legacy.peer_info().unwrap().protocol_version, ProtocolVersion::V_2025_11_25);
    let echoed = within(legacy.call_tool(call("demo__echo", json!({"text": "legacy"})))).await.unwrap();
    assert_eq!(echoed.content[0].as_text().map(|t| t.text.as_str()), Some("legacy"));

    // Pinned and in auto mode, the client sees the gateway as it sees a 2026-07-28 server built
    // with the TypeScript SDK v2.
    let reference = crate::interop_modern::Reference::start().await;
    let auto = || ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        legacy_version: Some(ProtocolVersion::V_2025_11_25),
    };
    for (mode, lifecycle) in [("pin", pinned as fn() -> ClientLifecycleMode), ("auto", auto)] {
        let direct = summary(&reference.url, "", lifecycle()).await;
        let through = summary(&gw.url, "demo__", lifecycle()).await;
        assert_eq!(direct, json!({"version": "2026-07-28", "echo": "hi", "ask": "answer: teal", "elicited": 1}));
        assert_eq!(through, direct, "{mode}: through the gateway vs directly");
    }
}

/// What a plain client sees of a server: the revision, an echo, and an MRTR round.
async fn summary(url: &str, prefix: &str, lifecycle: ClientLifecycleMode) -> Value {
    let handler = Handler::new(false);
    let client = connect(url, handler.clone(), lifecycle).await;
    let text = |r: rmcp::model::CallToolResult| r.content[0].as_text().map(|t| t.text.clone());
    let echo = within(client.call_tool(call(&format!("{prefix}echo"), json!({"text": "hi"})))).await.unwrap();
    let ask = within(client.call_tool(call(&format!("{prefix}ask"), json!({"question": "Colour?"})))).await.unwrap();
    let summary = json!({
        "version": client.peer_info().unwrap().protocol_version.to_string(),
        "echo": text(echo),
        "ask": text(ask),
        "elicited": handler.elicited.load(Ordering::SeqCst),
    });
    within(client.cancel()).await.unwrap();
    summary
}
