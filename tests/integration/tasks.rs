//! Tasks at the gateway (basic/utilities/tasks): wrapped and native tasks, every method, ttl and
//! expiry, cancellation races, waiters and dead upstreams (isolation between requestors is in
//! tenants.rs).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use taskgate_config::{Config, TaskSupportSetting};
use taskgate_core::clock::ManualClock;
use taskgate_protocol::{ErrorObject, RequestId};
use taskgate_testkit::{config_with, DemoUpstream, McpClient, TestGateway};

const RELATED: &str = "io.modelcontextprotocol/related-task";

/// Bounds a wait on an event so that a bug fails the test instead of hanging it.
async fn within<F: std::future::Future>(event: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(30), event).await.expect("the awaited event did not happen within 30 s")
}

async fn create(c: &mut McpClient, tool: &str, args: Value, task: Value) -> Result<Value, ErrorObject> {
    c.request("tools/call", Some(json!({"name": tool, "arguments": args, "task": task}))).await.outcome()
}

async fn task_id(c: &mut McpClient, tool: &str, args: Value) -> String {
    let created = create(c, tool, args, json!({})).await.expect("CreateTaskResult");
    created["task"]["taskId"].as_str().unwrap().to_owned()
}

async fn method(c: &mut McpClient, name: &str, task_id: &str) -> Result<Value, ErrorObject> {
    c.request(name, Some(json!({"taskId": task_id}))).await.outcome()
}

/// A gateway with a wrapped upstream ("plain") and a native one ("native").
async fn setup() -> (DemoUpstream, DemoUpstream, TestGateway, McpClient) {
    setup_with(Config::default()).await
}

async fn setup_with(config: Config) -> (DemoUpstream, DemoUpstream, TestGateway, McpClient) {
    let plain = DemoUpstream::start();
    let native = DemoUpstream::start_with_tasks();
    let config = Config { upstreams: vec![plain.upstream("plain"), native.upstream("native")], ..config };
    let gw = TestGateway::start(config);
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    (plain, native, gw, c)
}

#[actix_rt::test]
async fn capabilities_and_task_support_in_the_catalog() {
    let (_p, _n, gw, _) = setup().await;
    let mut c = McpClient::new(&gw.url);
    let init = c.initialize().await;
    assert_eq!(init["capabilities"]["tasks"], json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}));
    let tools = c.request("tools/list", None).await.outcome().unwrap();
    let support = |name: &str| {
        let tool =
            tools["tools"].as_array().unwrap().iter().find(|t| t["name"] == name).unwrap_or_else(|| panic!("{name}"));
        tool.pointer("/execution/taskSupport").and_then(Value::as_str).map(str::to_owned)
    };
    // Wrapped: the gateway offers "optional" by default.
    assert_eq!(support("plain__echo").as_deref(), Some("optional"));
    // Native: the upstream's own values pass through (absent means forbidden).
    assert_eq!(support("native__slow").as_deref(), Some("optional"));
    assert_eq!(support("native__job").as_deref(), Some("required"));
    assert_eq!(support("native__echo"), None);
}

#[actix_rt::test]
async fn a_wrapped_task_is_created_before_the_upstream_finishes_then_completes() {
    let (plain, _n, _gw, mut c) = setup().await;
    let created = create(&mut c, "plain__wait", json!({"gate": "g1"}), json!({"ttl": 60_000})).await.unwrap();
    let task = &created["task"];
    let id = task["taskId"].as_str().unwrap().to_owned();
    assert_eq!(uuid_version(&id), Some('4'), "{id}");
    assert_eq!(task["status"], "working");
    assert_eq!(task["ttl"], 60_000);
    assert!(task["pollInterval"].as_u64().unwrap() > 0);
    for key in ["createdAt", "lastUpdatedAt"] {
        assert!(task[key].as_str().unwrap().ends_with('Z'), "{key} is RFC 3339: {}", task[key]);
    }
    // The upstream is still working on it.
    within(plain.demo.wait_in_flight(|n| *n == 1)).await;
    assert_eq!(method(&mut c, "tasks/get", &id).await.unwrap()["status"], "working");
    plain.demo.release("g1");
    let result = method(&mut c, "tasks/result", &id).await.unwrap();
    assert_eq!(result["content"][0]["text"], "gate g1 opened");
    assert_eq!(result["_meta"][RELATED], json!({"taskId": id}));
    let got = method(&mut c, "tasks/get", &id).await.unwrap();
    assert_eq!(got["status"], "completed");
    assert!(got.get("_meta").is_none(), "tasks/get SHOULD NOT carry related-task _meta");
    // tasks/result again returns the same result.
    assert_eq!(method(&mut c, "tasks/result", &id).await.unwrap(), result);
}

fn uuid_version(id: &str) -> Option<char> {
    let parts: Vec<&str> = id.split('-').collect();
    (parts.len() == 5 && id.len() == 36).then(|| parts[2].chars().next()).flatten()
}

#[actix_rt::test]
async fn wrapped_tool_errors_fail_the_task_and_results_are_returned_exactly() {
    let (_p, _n, _gw, mut c) = setup().await;
    let failed = task_id(&mut c, "plain__fail", json!({"message": "disk full"})).await;
    let result = method(&mut c, "tasks/result", &failed).await.unwrap();
    assert_eq!((result["isError"].clone(), result["content"][0]["text"].clone()), (json!(true), json!("disk full")));
    let got = method(&mut c, "tasks/get", &failed).await.unwrap();
    assert_eq!(got["status"], "failed");
    assert!(got["statusMessage"].as_str().unwrap().contains("disk full"));

    let errored = task_id(&mut c, "plain__error", json!({"code": -32042, "message": "needs consent"})).await;
    let error = method(&mut c, "tasks/result", &errored).await.unwrap_err();
    // The same JSON-RPC error the plain call returns.
    let plain = c.call("plain__error", json!({"code": -32042, "message": "needs consent"})).await.unwrap_err();
    assert_eq!(error, plain);
    assert_eq!(method(&mut c, "tasks/get", &errored).await.unwrap()["status"], "failed");
}

#[actix_rt::test]
async fn a_native_task_keeps_the_gateways_own_id_and_passes_immediate_response() {
    let (_p, native, _gw, mut c) = setup().await;
    let created = create(&mut c, "native__slow", json!({"ms": 20, "steps": 1}), json!({"ttl": 30_000})).await.unwrap();
    let id = created["task"]["taskId"].as_str().unwrap().to_owned();
    assert!(!id.starts_with("demo-task-"), "the upstream's task id is never exposed: {id}");
    assert_eq!(created["_meta"]["io.modelcontextprotocol/model-immediate-response"], "The demo task is running.");
    assert!(created["_meta"].get(RELATED).is_none());
    let result = method(&mut c, "tasks/result", &id).await.unwrap();
    assert_eq!(result["content"][0]["text"], "slept 20 ms");
    assert_eq!(result["_meta"][RELATED], json!({"taskId": id}));
    assert!(!result.to_string().contains("demo-task-"));
    assert_eq!(method(&mut c, "tasks/get", &id).await.unwrap()["status"], "completed");
    assert_eq!(native.demo.stats().tasks_created, 1);
    // A required tool works only as a task.
    let job = task_id(&mut c, "native__job", json!({"ms": 10})).await;
    assert_eq!(method(&mut c, "tasks/result", &job).await.unwrap()["content"][0]["text"], "slept 10 ms");
}

#[actix_rt::test]
async fn tool_level_negotiation_gives_minus_32601() {
    let mut config = Config::default();
    let plain = DemoUpstream::start();
    let native = DemoUpstream::start_with_tasks();
    let mut wrapped = plain.upstream("plain");
    wrapped.tool_task_support.insert("echo".into(), TaskSupportSetting::Forbidden);
    wrapped.tool_task_support.insert("slow".into(), TaskSupportSetting::Required);
    config.upstreams = vec![wrapped, native.upstream("native")];
    let gw = TestGateway::start(config);
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    for (tool, as_task) in
        [("native__job", false), ("native__echo", true), ("plain__echo", true), ("plain__slow", false)]
    {
        let task = if as_task { json!({}) } else { Value::Null };
        let mut params = json!({"name": tool, "arguments": {}});
        if as_task {
            params["task"] = task;
        }
        let error = c.request("tools/call", Some(params)).await.outcome().unwrap_err();
        assert_eq!(error.code, -32601, "{tool} as_task={as_task}: {error:?}");
    }
    // The configured override leaves the rest optional.
    assert!(create(&mut c, "plain__add", json!({"a": 1, "b": 2}), json!({})).await.is_ok());
    assert_eq!(native.demo.stats().tasks_created, 0);
}

#[actix_rt::test]
async fn cancel_stops_the_upstream_work_and_terminal_tasks_cannot_be_cancelled() {
    let (plain, native, _gw, mut c) = setup().await;
    let id = task_id(&mut c, "plain__wait", json!({"gate": "never"})).await;
    within(plain.demo.wait_in_flight(|n| *n == 1)).await;
    let cancelled = method(&mut c, "tasks/cancel", &id).await.unwrap();
    assert_eq!(cancelled["status"], "cancelled");
    assert_eq!(cancelled["taskId"], id.as_str());
    // The upstream observed the cancellation (notifications/cancelled for its request).
    within(plain.demo.wait_in_flight(|n| *n == 0)).await;
    assert_eq!(plain.demo.stats().cancelled, 1);
    assert_eq!(method(&mut c, "tasks/get", &id).await.unwrap()["status"], "cancelled");
    let again = method(&mut c, "tasks/cancel", &id).await.unwrap_err();
    assert_eq!(again.code, -32602);
    assert!(again.message.contains("terminal status 'cancelled'"), "{}", again.message);
    assert!(method(&mut c, "tasks/result", &id).await.is_err(), "a cancelled task has no result");

    let done = task_id(&mut c, "plain__echo", json!({"text": "x"})).await;
    method(&mut c, "tasks/result", &done).await.unwrap();
    let refused = method(&mut c, "tasks/cancel", &done).await.unwrap_err();
    assert_eq!(refused.code, -32602);
    assert!(refused.message.contains("'completed'"));

    // Native: tasks/cancel reaches the upstream.
    let id = task_id(&mut c, "native__wait", json!({"gate": "never"})).await;
    assert_eq!(method(&mut c, "tasks/cancel", &id).await.unwrap()["status"], "cancelled");
    let stats = || native.demo.stats().tasks_cancelled;
    // The forward is asynchronous: poll the upstream's own view, bounded in time.
    crate::support::within(async {
        while stats() != 1 {
            let _ = c.request("ping", None).await;
        }
    })
    .await;
    assert_eq!(stats(), 1);
}

#[actix_rt::test]
async fn cancel_racing_completion_ends_in_one_consistent_terminal_status() {
    let (plain, _n, _gw, mut c) = setup().await;
    for round in 0..15 {
        let gate = format!("race{round}");
        let id = task_id(&mut c, "plain__wait", json!({"gate": gate})).await;
        let mut canceller = c.clone();
        let cancel_id = id.clone();
        let cancel = actix_rt::spawn(async move { method(&mut canceller, "tasks/cancel", &cancel_id).await });
        plain.demo.release(&gate);
        let cancel = cancel.await.unwrap();
        let status = method(&mut c, "tasks/get", &id).await.unwrap()["status"].as_str().unwrap().to_owned();
        match cancel {
            Ok(task) => {
                assert_eq!(task["status"], "cancelled");
                assert_eq!(status, "cancelled", "once cancelled it stays cancelled (round {round})");
            }
            Err(e) => {
                assert_eq!(e.code, -32602);
                assert!(e.message.contains("'completed'"), "{}", e.message);
                assert_eq!(status, "completed");
            }
        }
    }
}

#[actix_rt::test]
async fn two_waiters_get_the_same_result_and_other_sessions_of_the_requestor_can_wait() {
    let (plain, _n, gw, mut c) = setup().await;
    let id = task_id(&mut c, "plain__wait", json!({"gate": "two"})).await;
    let mut other = McpClient::new(&gw.url);
    other.initialize().await; // same (anonymous) requestor, another session
    let (mut a, mut b) = (c.clone(), other.clone());
    let (ida, idb) = (id.clone(), id.clone());
    let first = actix_rt::spawn(async move { method(&mut a, "tasks/result", &ida).await });
    let second = actix_rt::spawn(async move { method(&mut b, "tasks/result", &idb).await });
    // Both are blocked until the task is terminal.
    assert_eq!(method(&mut c, "tasks/get", &id).await.unwrap()["status"], "working");
    plain.demo.release("two");
    let (first, second) = (first.await.unwrap().unwrap(), second.await.unwrap().unwrap());
    assert_eq!(first, second);
    assert_eq!(first["_meta"][RELATED]["taskId"], id.as_str());
}

#[actix_rt::test]
async fn tasks_outlive_the_session_that_created_them() {
    let (plain, _n, gw, mut c) = setup().await;
    let id = task_id(&mut c, "plain__wait", json!({"gate": "later"})).await;
    within(plain.demo.wait_in_flight(|n| *n == 1)).await;
    assert_eq!(c.delete().await, 200);
    plain.demo.release("later");
    let mut other = McpClient::new(&gw.url);
    other.initialize().await;
    assert_eq!(method(&mut other, "tasks/result", &id).await.unwrap()["content"][0]["text"], "gate later opened");
}

#[actix_rt::test]
async fn tasks_list_pages_the_requestors_tasks_and_rejects_bad_cursors() {
    let mut config = Config::default();
    config.tasks.page_size = 2;
    let (_p, _n, _gw, mut c) = setup_with(config).await;
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(task_id(&mut c, "plain__echo", json!({"text": i.to_string()})).await);
    }
    let mut listed = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let params = cursor.as_ref().map(|c| json!({"cursor": c}));
        let page = c.request("tasks/list", params).await.outcome().unwrap();
        let tasks = page["tasks"].as_array().unwrap();
        assert!(tasks.len() <= 2);
        for t in tasks {
            assert!(t.get("_meta").is_none());
            listed.push(t["taskId"].as_str().unwrap().to_owned());
        }
        match page.get("nextCursor").and_then(Value::as_str) {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    let mut sorted_ids = ids.clone();
    sorted_ids.sort();
    listed.sort();
    assert_eq!(listed, sorted_ids);
    let bad = c.request("tasks/list", Some(json!({"cursor": "not-ours"}))).await.outcome().unwrap_err();
    assert_eq!(bad.code, -32602);
}

#[actix_rt::test]
async fn bad_task_params_and_unknown_ids_get_minus_32602() {
    let (_p, _n, _gw, mut c) = setup().await;
    for name in ["tasks/get", "tasks/result", "tasks/cancel"] {
        let missing = c.request(name, Some(json!({}))).await.outcome().unwrap_err();
        assert_eq!(missing.code, -32602, "{name}");
        let wrong = c.request(name, Some(json!({"taskId": 7}))).await.outcome().unwrap_err();
        assert_eq!(wrong.code, -32602, "{name}");
        let unknown = method(&mut c, name, "00000000-0000-4000-8000-000000000000").await.unwrap_err();
        assert_eq!(
            (unknown.code, unknown.message.as_str()),
            (-32602, "Failed to retrieve task: Task not found"),
            "{name}"
        );
    }
    for task in [json!("soon"), json!({"ttl": "long"}), json!({"ttl": -5})] {
        let error = create(&mut c, "plain__echo", json!({"text": "x"}), task.clone()).await.unwrap_err();
        assert_eq!(error.code, -32602, "{task}");
    }
    // The taskId param is the source of truth; related-task _meta in the request is ignored.
    let id = task_id(&mut c, "plain__echo", json!({"text": "x"})).await;
    let got = c.request("tasks/get", Some(json!({"taskId": id, "_meta": {RELATED: {"taskId": "other"}}}))).await;
    assert_eq!(got.outcome().unwrap()["taskId"], id.as_str());
}

#[actix_rt::test]
async fn ttl_is_defaulted_capped_and_expired_tasks_are_deleted() {
    let clock = Arc::new(ManualClock::new(1_764_066_600_000));
    let plain = DemoUpstream::start();
    let mut config = config_with(vec![plain.upstream("plain")]);
    config.tasks.default_ttl_ms = 5_000;
    config.tasks.max_ttl_ms = 10_000;
    let gw = TestGateway::start_with_clock(config, clock.clone());
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    let defaulted = create(&mut c, "plain__echo", json!({"text": "d"}), json!({})).await.unwrap();
    assert_eq!(defaulted["task"]["ttl"], 5_000);
    assert_eq!(defaulted["task"]["createdAt"], "2025-11-25T10:30:00.000Z");
    let capped = create(&mut c, "plain__echo", json!({"text": "c"}), json!({"ttl": 9_000_000})).await.unwrap();
    assert_eq!(capped["task"]["ttl"], 10_000);
    let short = defaulted["task"]["taskId"].as_str().unwrap().to_owned();
    let long = capped["task"]["taskId"].as_str().unwrap().to_owned();
    method(&mut c, "tasks/result", &short).await.unwrap();
    method(&mut c, "tasks/result", &long).await.unwrap();

    clock.advance(5_000);
    gw.gateway.sweep_expired().await;
    let gone = method(&mut c, "tasks/get", &short).await.unwrap_err();
    assert_eq!((gone.code, gone.message.as_str()), (-32602, "Failed to retrieve task: Task not found"));
    assert!(method(&mut c, "tasks/result", &short).await.is_err());
    assert_eq!(method(&mut c, "tasks/get", &long).await.unwrap()["status"], "completed");
    let listed = c.request("tasks/list", None).await.outcome().unwrap();
    assert_eq!(listed["tasks"].as_array().unwrap().len(), 1);
    clock.advance(5_000);
    gw.gateway.sweep_expired().await;
    assert_eq!(gw.gateway.stored_tasks(), 0);
}

#[actix_rt::test]
async fn a_working_task_whose_ttl_ends_is_deleted_and_its_waiters_told() {
    let plain = DemoUpstream::start();
    let mut config = config_with(vec![plain.upstream("plain")]);
    config.tasks.max_ttl_ms = 200;
    config.tasks.default_ttl_ms = 200;
    let gw = TestGateway::start(config);
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    let id = task_id(&mut c, "plain__wait", json!({"gate": "never"})).await;
    // tasks/result blocks until the task's own ttl timer deletes it.
    let error = within(method(&mut c, "tasks/result", &id)).await.unwrap_err();
    assert_eq!(error.code, -32602);
    assert_eq!(method(&mut c, "tasks/get", &id).await.unwrap_err().code, -32602);
    // The upstream work was stopped too.
    within(plain.demo.wait_in_flight(|n| *n == 0)).await;
    assert_eq!(gw.gateway.live_tasks(), 0);
}

#[actix_rt::test]
async fn an_upstream_dying_mid_task_fails_the_task_with_an_error_naming_it() {
    let (plain, _n, _gw, mut c) = setup().await;
    let id = task_id(&mut c, "plain__wait", json!({"gate": "never"})).await;
    within(plain.demo.wait_in_flight(|n| *n == 1)).await;
    plain.http.stop().await;
    let error = method(&mut c, "tasks/result", &id).await.unwrap_err();
    assert_eq!(error.code, -32001);
    assert!(error.message.contains("'plain'"), "{}", error.message);
    let got = method(&mut c, "tasks/get", &id).await.unwrap();
    assert_eq!(got["status"], "failed");
    assert!(got["statusMessage"].as_str().unwrap().contains("plain"));
}

#[actix_rt::test]
async fn status_notifications_reach_the_requestors_get_stream() {
    let (_p, _n, _gw, mut c) = setup().await;
    let mut stream = c.open_stream().await.unwrap();
    let id = task_id(&mut c, "plain__echo", json!({"text": "n"})).await;
    // Other notifications (a catalog refresh) may come first.
    let note = loop {
        let note = stream.next().await.unwrap();
        if note.method() == Some("notifications/tasks/status") {
            break note;
        }
    };
    let taskgate_protocol::Message::Notification { params: Some(params), .. } = note else { panic!() };
    assert_eq!((params["taskId"].as_str(), params["status"].as_str()), (Some(id.as_str()), Some("completed")));
    assert!(params.get("_meta").is_none(), "SHOULD NOT include related-task _meta");
}

/// Reads messages until one satisfies `want`, returning it.
async fn next_matching(
    stream: &mut taskgate_testkit::SseReader,
    want: impl Fn(&taskgate_protocol::Message) -> bool,
) -> taskgate_protocol::Message {
    loop {
        let message = stream.next().await.expect("the stream ended");
        if want(&message) {
            return message;
        }
    }
}

fn is_request(m: &taskgate_protocol::Message) -> bool {
    matches!(m, taskgate_protocol::Message::Request { .. })
}

fn is_status(status: &'static str) -> impl Fn(&taskgate_protocol::Message) -> bool {
    move |m| match m {
        taskgate_protocol::Message::Notification { method, params: Some(p) } => {
            method == "notifications/tasks/status" && p["status"] == status
        }
        _ => false,
    }
}

/// A wrapped task whose tool asks the client: the question reaches the client's GET stream
/// tagged with the gateway's task id, the task shows input_required meanwhile, and the answer
/// completes it.
async fn wrapped_task_asks(c: &mut McpClient, tool: &str) {
    let mut stream = c.open_stream().await.unwrap();
    let id = task_id(c, tool, json!({"question": "Your name?"})).await;
    // No tasks/result is open: the elicitation comes on the GET stream, tagged with our task.
    let taskgate_protocol::Message::Request { id: asked, method: asked_method, params: Some(params) } =
        next_matching(&mut stream, is_request).await
    else {
        panic!()
    };
    assert_eq!(asked_method, "elicitation/create");
    assert_eq!(params["message"], "Your name?");
    assert_eq!(params["_meta"][RELATED], json!({"taskId": id}));
    assert!(matches!(&asked, RequestId::String(s) if s.starts_with("taskgate-")), "a gateway-issued id: {asked:?}");
    next_matching(&mut stream, is_status("input_required")).await;
    assert_eq!(method_status(c, &id).await, "input_required");
    let answer = taskgate_protocol::Message::response(asked, json!({"action": "accept", "content": {"answer": "Ada"}}));
    assert_eq!(c.post_message(&answer).await.status, 202);
    let result = method(c, "tasks/result", &id).await.unwrap();
    assert_eq!(result["content"][0]["text"], "answer: Ada");
    assert_eq!(method_status(c, &id).await, "completed");
}

#[actix_rt::test]
async fn a_wrapped_task_relays_elicitation_with_its_task_id_and_waits_in_input_required() {
    let (_p, _n, gw, _) = setup().await;
    let mut c = McpClient::new(&gw.url);
    c.initialize_with("2025-11-25", json!({"elicitation": {"form": {}}})).await;
    wrapped_task_asks(&mut c, "plain__ask").await;
}

#[actix_rt::test]
async fn a_wrapped_task_on_a_stdio_upstream_relays_elicitation_as_over_http() {
    // A stdio upstream has no GET stream and no per-request stream: everything it sends comes
    // on its stdout, and a request it sends while the session has one call in flight there
    // belongs to that call (here the task's), whether or not its process was already running.
    let gw = TestGateway::start(config_with(vec![taskgate_testkit::stdio_demo_upstream("local")]));
    let mut c = McpClient::new(&gw.url);
    c.initialize_with("2025-11-25", json!({"elicitation": {"form": {}}})).await;
    wrapped_task_asks(&mut c, "local__ask").await;
    // And again on the warm process.
    wrapped_task_asks(&mut c, "local__ask").await;
}

/// A gateway in front of the stdio demo and a client (which can be asked, its GET stream open)
/// with a wrapped `local__ask` task whose question has reached it: the task's call is written
/// and waits for the process's answer. Returns the task id and the question's id.
async fn stdio_task_asking(question: &str) -> (TestGateway, McpClient, taskgate_testkit::SseReader, String, RequestId) {
    let gw = TestGateway::start(config_with(vec![taskgate_testkit::stdio_demo_upstream("local")]));
    let mut c = McpClient::new(&gw.url);
    c.initialize_with("2025-11-25", json!({"elicitation": {"form": {}}})).await;
    let mut stream = c.open_stream().await.unwrap();
    let id = task_id(&mut c, "local__ask", json!({"question": question})).await;
    let taskgate_protocol::Message::Request { id: asked, .. } = next_matching(&mut stream, is_request).await else {
        panic!()
    };
    (gw, c, stream, id, asked)
}

/// A wrapped task's call on a stdio upstream waits, once written, with no task of its own, in
/// its actor: an actor that crashes meanwhile hands it on, and the restarted one gets the answer.
#[actix_rt::test]
async fn a_wrapped_stdio_call_waiting_through_its_actors_crash_gets_its_answer() {
    let (gw, mut c, _stream, id, asked) = stdio_task_asking("Still there?").await;
    assert!(gw.gateway.crash_task_actor(&id).await);
    within(async {
        while !gw.gateway.task_actor_alive(&id) {
            c.request("ping", None).await;
        }
    })
    .await;
    let answer = taskgate_protocol::Message::response(asked, json!({"action": "accept", "content": {"answer": "yes"}}));
    assert_eq!(c.post_message(&answer).await.status, 202);
    let result = within(method(&mut c, "tasks/result", &id)).await.unwrap();
    assert_eq!(result["content"][0]["text"], "answer: yes");
    assert_eq!(method_status(&mut c, &id).await, "completed");
}

/// A cancelled wrapped task's waiting stdio call lets go of what it held: the next task's call
/// is again the one call in flight its question belongs to.
#[actix_rt::test]
async fn a_cancelled_wrapped_stdio_call_leaves_nothing_waiting() {
    let (_gw, mut c, _stream, id, _asked) = stdio_task_asking("Cancel me?").await;
    let cancelled = method(&mut c, "tasks/cancel", &id).await.unwrap();
    assert_eq!(cancelled["status"], "cancelled");
    // Had the cancelled call kept its place in flight, two calls would be in flight and this
    // task's question would belong to neither.
    wrapped_task_asks(&mut c, "local__ask").await;
}

async fn method_status(c: &mut McpClient, id: &str) -> String {
    method(c, "tasks/get", id).await.unwrap()["status"].as_str().unwrap().to_owned()
}

/// A wrapped task whose tool asks the client, which has no GET stream: the question waits for,
/// and goes on, the task's tasks/result stream.
async fn task_result_stream_asks(c: &mut McpClient, tool: &str) {
    let id = task_id(c, tool, json!({"question": "Colour?"})).await;
    let mut result_stream = c.request_stream("tasks/result", Some(json!({"taskId": id}))).await;
    let taskgate_protocol::Message::Request { id: asked, params: Some(params), .. } =
        next_matching(&mut result_stream, is_request).await
    else {
        panic!()
    };
    assert_eq!(params["_meta"][RELATED]["taskId"], id.as_str());
    let answer =
        taskgate_protocol::Message::response(asked, json!({"action": "accept", "content": {"answer": "teal"}}));
    assert_eq!(c.post_message(&answer).await.status, 202);
    let taskgate_protocol::Message::Response { result, .. } =
        next_matching(&mut result_stream, |m| m.is_response()).await
    else {
        panic!("tasks/result answered with an error")
    };
    assert_eq!(result["content"][0]["text"], "answer: teal");
    assert_eq!(result["_meta"][RELATED]["taskId"], id.as_str());
}

#[actix_rt::test]
async fn requests_for_a_task_go_on_its_open_tasks_result_stream() {
    let (_p, _n, gw, _) = setup().await;
    let mut c = McpClient::new(&gw.url);
    c.initialize_with("2025-11-25", json!({"elicitation": {"form": {}}})).await;
    task_result_stream_asks(&mut c, "plain__ask").await;
    // The same over stdio, with no GET stream at all.
    let gw = TestGateway::start(config_with(vec![taskgate_testkit::stdio_demo_upstream("local")]));
    let mut c = McpClient::new(&gw.url);
    c.initialize_with("2025-11-25", json!({"elicitation": {"form": {}}})).await;
    task_result_stream_asks(&mut c, "local__ask").await;
}

/// A task that ends while its input request waits for the client takes the request back: it
/// never reaches a stream the client opens later (it would be about a task that is over).
#[actix_rt::test]
async fn an_input_request_of_a_task_that_ended_never_reaches_a_later_stream() {
    let (_p, _n, gw, _) = setup().await;
    let mut c = McpClient::new(&gw.url);
    c.initialize_with("2025-11-25", json!({"elicitation": {"form": {}}})).await;
    // No stream is open: the question waits in the session, the task in input_required.
    let id = task_id(&mut c, "plain__ask", json!({"question": "Colour?"})).await;
    within(async { while method(&mut c, "tasks/get", &id).await.unwrap()["status"] != "input_required" {} }).await;
    assert_eq!(method(&mut c, "tasks/cancel", &id).await.unwrap()["status"], "cancelled");
    within(async {
        while gw.gateway.task_actor_alive(&id) {
            tokio::task::yield_now().await;
        }
    })
    .await;
    // A GET stream opened now gets first what waits in the session: not the old question,
    // only the next task's.
    let mut stream = c.open_stream().await.unwrap();
    let next = task_id(&mut c, "plain__ask", json!({"question": "Size?"})).await;
    let taskgate_protocol::Message::Request { params: Some(params), .. } = next_matching(&mut stream, is_request).await
    else {
        panic!()
    };
    assert_eq!(params["message"], "Size?", "{params}");
    assert_eq!(params["_meta"][RELATED]["taskId"], next.as_str());
}

#[actix_rt::test]
async fn a_native_tasks_elicitation_reaches_the_client_under_the_gateways_task_id() {
    let (_p, native, gw, _) = setup().await;
    let mut c = McpClient::new(&gw.url);
    c.initialize_with("2025-11-25", json!({"elicitation": {"form": {}}})).await;
    let mut stream = c.open_stream().await.unwrap();
    let id = task_id(&mut c, "native__ask", json!({"question": "Size?"})).await;
    let taskgate_protocol::Message::Request { id: asked, params: Some(params), .. } =
        next_matching(&mut stream, is_request).await
    else {
        panic!()
    };
    // The upstream tagged it with its own task id; the client sees only ours.
    assert_eq!(params["_meta"][RELATED], json!({"taskId": id}));
    assert!(!params.to_string().contains("demo-task-"));
    // The gateway mirrors the upstream's input_required.
    next_matching(&mut stream, is_status("input_required")).await;
    let answer = taskgate_protocol::Message::response(asked, json!({"action": "accept", "content": {"answer": "L"}}));
    assert_eq!(c.post_message(&answer).await.status, 202);
    let result = method(&mut c, "tasks/result", &id).await.unwrap();
    assert_eq!(result["content"][0]["text"], "answer: L");
    assert_eq!(native.demo.stats().tasks_created, 1);
}

#[actix_rt::test]
async fn a_native_tasks_first_status_message_reaches_the_client() {
    let native = DemoUpstream::start_with_tasks();
    let gw = TestGateway::start(taskgate_testkit::config_with(vec![native.upstream("native")]));
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    let created = c
        .request("tools/call", Some(json!({"name": "native__slow", "arguments": {"ms": 10}, "task": {}})))
        .await
        .outcome()
        .unwrap();
    assert_eq!(created["task"]["statusMessage"], "The demo tool is running.", "{created}");
}

#[actix_rt::test]
async fn another_sessions_request_at_the_same_upstream_is_never_taken_for_a_task() {
    // Each upstream session numbers its own requests: session A's wrapped task and session B's
    // plain call may carry the same number at the same upstream. B's elicitation must reach B
    // untagged, and A's task must not go input_required for it.
    let (plain, _n, gw, _) = setup().await;
    let mut a = McpClient::new(&gw.url);
    a.initialize_with("2025-11-25", json!({"elicitation": {"form": {}}})).await;
    let task = task_id(&mut a, "plain__wait", json!({"gate": "other-session"})).await;
    plain.demo.wait_in_flight(|n| *n == 1).await;
    let mut b = McpClient::new(&gw.url);
    b.initialize_with("2025-11-25", json!({"elicitation": {"form": {}}})).await;
    let mut call =
        b.request_stream("tools/call", Some(json!({"name": "plain__ask", "arguments": {"question": "B?"}}))).await;
    let taskgate_protocol::Message::Request { id: asked, params: Some(params), .. } =
        next_matching(&mut call, is_request).await
    else {
        panic!()
    };
    assert_eq!(params["_meta"].get(RELATED), None, "B's question tagged with a task: {params}");
    assert_eq!(method_status(&mut a, &task).await, "working");
    let answer = taskgate_protocol::Message::response(asked, json!({"action": "accept", "content": {"answer": "b"}}));
    assert_eq!(b.post_message(&answer).await.status, 202);
    let taskgate_protocol::Message::Response { result, .. } = next_matching(&mut call, |m| m.is_response()).await
    else {
        panic!("the call failed")
    };
    assert_eq!(result["content"][0]["text"], "answer: b");
    plain.demo.release("other-session");
    assert_eq!(method(&mut a, "tasks/result", &task).await.unwrap()["content"][0]["text"], "gate other-session opened");
}
