//! MCP 2026-07-28 upstreams behind the gateway: the revision is detected (or pinned),
//! requests go stateless with `_meta` and the standard headers, `input_required` becomes the
//! client's own requests, the tasks extension is followed as a native task, and cancellation
//! closes the request's stream. Each peer is compared with the same client talking to it
//! directly.

use serde_json::{json, Value};
use taskgate_config::{UpstreamConfig, UpstreamProtocol};
use taskgate_protocol::Message;
use taskgate_testkit::{config_with, McpClient, TestGateway};

use crate::interop::run_ts_client_with;
use crate::interop_modern::Reference;
use crate::modern::Client as ModernClient;
use crate::rmcp_server::RmcpTaskServer;
use crate::support::{self, within};

/// The gateway in front of `upstreams`, relaying every progress value.
pub(crate) fn gateway(upstreams: Vec<UpstreamConfig>) -> TestGateway {
    let mut config = config_with(upstreams);
    config.progress.min_interval_ms = 0;
    TestGateway::start(config)
}

/// A client's summary without its tool list (the gateway's names are namespaced).
pub(crate) fn comparable(summary: &Value) -> Value {
    let mut summary = summary.clone();
    summary.as_object_mut().unwrap().remove("tools");
    summary
}

/// The TypeScript SDK v2 client, pinned to 2026-07-28 and in auto mode, sees the gateway in
/// front of a 2026-only TypeScript v2 server (`legacy: 'reject'`) as it sees that server:
/// tools, progress, an elicitation through MRTR at both hops, and an abort that reaches it.
#[actix_rt::test]
async fn a_2026_only_upstream_serves_the_typescript_v2_client_as_it_serves_it_directly() {
    let mut reference = Reference::start().await;
    let gw = gateway(vec![UpstreamConfig::http("modern", reference.url.clone())]);
    let mut cancelled = 0;
    for mode in ["pin", "auto"] {
        let direct = run_ts_client_with("modern-client.mjs", &[&reference.url, mode]).await;
        cancelled += 1;
        reference.cancelled(cancelled).await;
        let through = run_ts_client_with("modern-client.mjs", &[&gw.url, mode]).await;
        cancelled += 1;
        reference.cancelled(cancelled).await;
        assert_eq!(direct["ask"][0]["text"], "answer: Ada", "{mode}: {direct}");
        assert_eq!(comparable(&through), comparable(&direct), "{mode}: through the gateway vs directly");
        let tools: Vec<&str> = through["tools"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
        assert!(tools.contains(&"modern__echo"), "{tools:?}");
    }
}

/// The TypeScript SDK 1.32 client (2025-11-25) gets the same through the gateway from the
/// 2026-only server as from the demo (a 2025-11-25 upstream with the same tools): progress,
/// the upstream's MRTR elicitation as a real `elicitation/create` answered by its handler, a
/// task (wrapped: the upstream has no tasks extension), and an abort that reaches the server.
#[actix_rt::test]
async fn a_2025_client_gets_from_a_2026_upstream_what_it_gets_from_a_2025_one() {
    let mut reference = Reference::start().await;
    let demo = taskgate_testkit::DemoUpstream::start();
    let modern = gateway(vec![UpstreamConfig::http("modern", reference.url.clone())]);
    let legacy = gateway(vec![demo.upstream("demo")]);
    let through_legacy = run_ts_client_with("legacy-client.mjs", &[&legacy.url]).await;
    let through_modern = run_ts_client_with("legacy-client.mjs", &[&modern.url]).await;
    reference.cancelled(1).await;
    assert_eq!(through_modern["ask"][0]["text"], "answer: Ada", "{through_modern}");
    assert_eq!(through_modern["progress"]["values"], json!([1, 2, 3]), "{through_modern}");
    assert_eq!(through_modern["task"]["result"][0]["text"], "in a task", "{through_modern}");
    assert_eq!(through_modern["aborted"], "rejected: McpError", "{through_modern}");
    // How many status polls the SDK makes before the result depends on timing: compare the ends.
    let mut summaries = [through_modern, through_legacy];
    for summary in &mut summaries {
        let events = summary["task"]["events"].as_array().unwrap().clone();
        assert_eq!(events.first(), Some(&json!("taskCreated")), "{summary}");
        assert_eq!(events.last(), Some(&json!("result")), "{summary}");
        summary["task"].as_object_mut().unwrap().remove("events");
    }
    assert_eq!(summaries[0], summaries[1], "a 2026 upstream vs a 2025 one, through the gateway");
}

fn text_of(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_default()
}

fn progress_values(reply: &taskgate_testkit::Reply, token: &str) -> Vec<f64> {
    reply
        .notifications()
        .iter()
        .filter_map(|n| match n {
            Message::Notification { method, params: Some(p) } if method == "notifications/progress" => {
                assert_eq!(p["progressToken"], token, "{p}");
                p["progress"].as_f64()
            }
            _ => None,
        })
        .collect()
}

/// No upstream task id ever reaches a client: `seen` holds none of `upstream_ids`.
fn assert_no_upstream_ids(seen: &Value, upstream_ids: &[String]) {
    let text = seen.to_string();
    for id in upstream_ids {
        assert!(!text.contains(id.as_str()), "the upstream's task id {id} reached the client: {text}");
    }
}

/// A 2025-11-25 client in front of an `rmcp` 3.9 server with the tasks extension: its tools are
/// native task tools; a plain call is answered plainly (progress included) and a tool that runs
/// only as a task is waited for; a task-augmented call is the upstream's task under a gateway
/// id, polled, its result fetched, its input request relayed as `elicitation/create` on the
/// `tasks/result` stream and answered through `tasks/update`, and cancelled with `tasks/cancel`.
#[actix_rt::test]
async fn a_2025_client_gets_a_tasks_extension_upstreams_tasks_as_native_tasks() {
    let rt = RmcpTaskServer::start().await;
    let gw = gateway(vec![UpstreamConfig::http("rt", rt.url.clone())]);
    let mut c = McpClient::new(&gw.url);
    let init = c.initialize_with("2025-11-25", json!({"elicitation": {"form": {}}})).await;
    assert!(init["capabilities"]["tasks"]["requests"]["tools"]["call"].is_object(), "{init}");
    let tools = c.request("tools/list", None).await.outcome().unwrap();
    let work = tools["tools"].as_array().unwrap().iter().find(|t| t["name"] == "rt__work").expect("rt__work listed");
    assert_eq!(work["execution"]["taskSupport"], "optional", "{work}");

    // Plain calls.
    assert_eq!(text_of(&c.call("rt__echo", json!({"text": "hi"})).await.unwrap()), "hi");
    let reply = c
        .request(
            "tools/call",
            Some(json!({"name": "rt__progress", "arguments": {"values": [1, 2, 3]}, "_meta": {"progressToken": "p1"}})),
        )
        .await;
    assert_eq!(text_of(&reply.outcome().unwrap()), "reported 3 values");
    assert_eq!(progress_values(&reply, "p1"), [1.0, 2.0, 3.0]);
    // A tool the upstream runs only as a task, called plainly: the gateway declares the
    // extension, follows the task and answers with its result.
    assert_eq!(text_of(&c.call("rt__only_task", json!({"text": "x"})).await.unwrap()), "task: x");

    // A task, polled and completed.
    let id = support::create(&mut c, "rt__work", json!({})).await;
    assert_eq!(support::method(&mut c, "tasks/get", &id).await.unwrap()["status"], "working");
    rt.observed.gate.notify_one();
    let result = within(support::method(&mut c, "tasks/result", &id)).await.unwrap();
    assert_eq!(text_of(&result), "the gate opened");
    assert_eq!(result["_meta"]["io.modelcontextprotocol/related-task"]["taskId"], id.as_str());
    assert_eq!(support::method(&mut c, "tasks/get", &id).await.unwrap()["status"], "completed");

    // A task cancelled: the upstream's task is cancelled too.
    let cancelled = support::create(&mut c, "rt__work", json!({})).await;
    let answer = support::method(&mut c, "tasks/cancel", &cancelled).await.unwrap();
    assert_eq!(answer["status"], "cancelled", "{answer}");
    within(rt.observed.cancelled(1)).await;

    // A task asking for input: on the tasks/result stream, answered there.
    let asking = support::create(&mut c, "rt__ask", json!({})).await;
    let mut stream = c.request_stream("tasks/result", Some(json!({"taskId": asking}))).await;
    let question = within(async {
        loop {
            match stream.next().await.expect("the tasks/result stream ended") {
                m @ Message::Request { .. } => return m,
                _ => continue,
            }
        }
    })
    .await;
    let Message::Request { id: asked, method, params: Some(params) } = question else { panic!() };
    assert_eq!(method, "elicitation/create");
    assert_eq!(params["message"], "Your name?");
    assert_eq!(params["_meta"]["io.modelcontextprotocol/related-task"]["taskId"], asking.as_str());
    let reply = Message::response(asked, json!({"action": "accept", "content": {"answer": "Ada"}}));
    assert_eq!(c.post_message(&reply).await.status, 202);
    let outcome = within(async {
        loop {
            match stream.next().await.expect("the tasks/result stream ended") {
                Message::Response { result, .. } => return result,
                Message::Error { error, .. } => panic!("tasks/result failed: {error:?}"),
                _ => continue,
            }
        }
    })
    .await;
    assert_eq!(text_of(&outcome), "answer: Ada");

    // A task-augmented call the upstream answers at once (rmcp's progress tool never makes a
    // task): the gateway's task completes with that result.
    let at_once = support::create(&mut c, "rt__progress", json!({"values": [5]})).await;
    let result_at_once = within(support::method(&mut c, "tasks/result", &at_once)).await.unwrap();
    assert_eq!(text_of(&result_at_once), "reported 1 values");
    assert_eq!(support::method(&mut c, "tasks/get", &at_once).await.unwrap()["status"], "completed");

    // Every task listed is the gateway's; the upstream's ids never show.
    let listed = c.request("tasks/list", None).await.outcome().unwrap();
    for id in [&id, &cancelled, &asking] {
        assert!(listed.to_string().contains(id.as_str()), "{listed}");
    }
    let upstream_ids = rt.observed.ids.lock().clone();
    assert_eq!(upstream_ids.len(), 4, "only_task, work twice and ask, nothing else, made a task: {upstream_ids:?}");
    assert_no_upstream_ids(&listed, &upstream_ids);
    assert_no_upstream_ids(&result, &upstream_ids);
}

/// A 2026-07-28 client declaring the tasks extension in front of the same `rmcp` server: its
/// calls become tasks (`resultType: "task"`) under gateway ids, `tasks/get` inlines results and
/// input requests, `tasks/update` answers them and `tasks/cancel` reaches the upstream task; a
/// client without the extension gets plain results, progress included, even from a tool the
/// upstream runs only as a task.
/// The TypeScript SDK 1.32 client's own tasks API in front of the rmcp server's tasks
/// extension: the upstream's tasks are 2025-11-25 tasks to it (`callToolStream` sees them
/// created and completed, answers the task's question with its elicitation handler), progress
/// arrives on a plain call, and `tasks/cancel` reaches the upstream's task.
#[actix_rt::test]
async fn the_typescript_sdk_1_32_drives_a_tasks_extension_upstreams_tasks_as_its_own() {
    let rt = RmcpTaskServer::start().await;
    let gw = gateway(vec![UpstreamConfig::http("rt", rt.url.clone())]);
    let out = run_ts_client_with("extension-task-client.mjs", &[&gw.url]).await;
    within(rt.observed.cancelled(1)).await;
    let text = |t: &str| json!([{"type": "text", "text": t}]);
    assert_eq!(out["version"], "2025-11-25", "{out}");
    assert!(out["taskCapability"]["requests"]["tools"]["call"].is_object(), "{out}");
    // How many status polls the SDK makes before the result depends on timing: the ends count.
    for (seen, result) in [(&out["echo"], "in a task"), (&out["ask"], "answer: Ada")] {
        let events = seen["events"].as_array().unwrap();
        assert_eq!((events.first(), events.last()), (Some(&json!("taskCreated")), Some(&json!("result"))), "{out}");
        assert_eq!(seen["result"], text(result), "{out}");
    }
    assert_eq!(out["asked"], json!(["Your name?"]), "{out}");
    assert_eq!(out["progress"], json!({"values": [1, 2, 3], "content": text("reported 3 values")}), "{out}");
    assert_eq!(
        (&out["created"], &out["cancelled"], &out["afterCancel"]),
        (&json!("working"), &json!("cancelled"), &json!("cancelled"))
    );
}

/// The TypeScript SDK v2 client, pinned to 2026-07-28 and declaring no tasks extension (the SDK
/// has no tasks API), sees the gateway in front of the rmcp server as it sees that server:
/// plain results, progress, and a tool the server runs only as a task refused -32021 (ext-tasks
/// "Required Capabilities": the refusal names the extension the client could declare).
#[actix_rt::test]
async fn the_typescript_v2_client_gets_a_tasks_extension_upstreams_tools_through_the_gateway() {
    let rt = RmcpTaskServer::start().await;
    let gw = gateway(vec![UpstreamConfig::http("rt", rt.url.clone())]);
    let direct = run_ts_client_with("modern-client.mjs", &[&rt.url, "pin"]).await;
    let through = run_ts_client_with("modern-client.mjs", &[&gw.url, "pin"]).await;
    assert_eq!(direct["progress"]["values"], json!([1, 2, 3]), "{direct}");
    assert_eq!((&direct["ask"], &direct["asked"]), (&json!({"error": -32021}), &json!([])), "{direct}");
    assert_eq!(comparable(&through), comparable(&direct), "through the gateway vs directly");
}

#[actix_rt::test]
async fn a_2026_client_gets_a_tasks_extension_upstreams_tasks_as_extension_tasks() {
    let rt = RmcpTaskServer::start().await;
    let gw = gateway(vec![UpstreamConfig::http("rt", rt.url.clone())]);
    let c = ModernClient::over(McpClient::new(&gw.url));
    let created = c.call("rt__work", json!({})).await;
    assert_eq!(created["resultType"], "task", "{created}");
    let id = created["taskId"].as_str().unwrap().to_owned();
    assert_eq!(c.ok("tasks/get", json!({"taskId": id})).await["status"], "working");
    rt.observed.gate.notify_one();
    let done = c.poll(&id, |t| t["status"] == "completed").await;
    assert_eq!(text_of(&done["result"]), "the gate opened", "{done}");

    let cancelled = c.call("rt__work", json!({})).await["taskId"].as_str().unwrap().to_owned();
    c.ok("tasks/cancel", json!({"taskId": cancelled})).await;
    within(rt.observed.cancelled(1)).await;
    let gone = c.poll(&cancelled, |t| t["status"] == "cancelled").await;
    assert!(gone.get("result").is_none(), "{gone}");

    let asking = c.call("rt__ask", json!({})).await["taskId"].as_str().unwrap().to_owned();
    let waiting = c.poll(&asking, |t| t["status"] == "input_required").await;
    let (key, request) = waiting["inputRequests"].as_object().unwrap().iter().next().expect("an input request");
    assert_eq!(request["method"], "elicitation/create", "{waiting}");
    assert_eq!(request["params"]["message"], "Your name?");
    let answers = json!({ key.clone(): {"action": "accept", "content": {"answer": "Ada"}} });
    c.ok("tasks/update", json!({"taskId": asking, "inputResponses": answers})).await;
    let answered = c.poll(&asking, |t| t["status"] == "completed").await;
    assert_eq!(text_of(&answered["result"]), "answer: Ada", "{answered}");
    let upstream_ids = rt.observed.ids.lock().clone();
    assert_no_upstream_ids(&json!([created, done, waiting, answered]), &upstream_ids);

    // Without the extension: plain results; a tool the upstream runs only as a task is
    // refused as the upstream refuses it, -32021 naming the extension (ext-tasks "Required
    // Capabilities").
    let plain = ModernClient::new(&gw.url, json!({}));
    assert_eq!(text_of(&plain.call("rt__echo", json!({"text": "hi"})).await), "hi");
    let refused = plain.send("tools/call", json!({"name": "rt__only_task", "arguments": {"text": "y"}})).await;
    let refused = refused.outcome().expect_err("refused");
    assert_eq!(refused.code, -32021, "{refused:?}");
    let required = refused.data.as_ref().and_then(|d| d.pointer("/requiredCapabilities/extensions")).cloned();
    assert!(required.is_some_and(|x| x.get("io.modelcontextprotocol/tasks").is_some()), "{refused:?}");
    let reply = plain
        .send(
            "tools/call",
            json!({"name": "rt__progress", "arguments": {"values": [1, 2]}, "_meta": {"progressToken": "p2"}}),
        )
        .await;
    assert_eq!(text_of(&reply.outcome().unwrap()), "reported 2 values");
    assert_eq!(progress_values(&reply, "p2"), [1.0, 2.0]);
}

/// Tasks on a 2026 upstream without the tasks extension are the gateway's own (wrapped), for a
/// client of either revision: created, polled, their MRTR question asked of the client (in
/// `tasks/get` for a 2026 client, on the `tasks/result` stream for a 2025 one) and answered in
/// the upstream's retry, and cancelled by closing the upstream request's stream.
#[actix_rt::test]
async fn wrapped_tasks_on_a_2026_upstream_ask_and_cancel_for_clients_of_both_revisions() {
    let mut reference = Reference::start().await;
    let gw = gateway(vec![UpstreamConfig::http("modern", reference.url.clone())]);

    let mut legacy = McpClient::new(&gw.url);
    legacy.initialize_with("2025-11-25", json!({"elicitation": {"form": {}}})).await;
    let id = support::create(&mut legacy, "modern__chatter", json!({"count": 1, "gate": "never"})).await;
    within(reference.started(1)).await;
    let cancelled = support::method(&mut legacy, "tasks/cancel", &id).await.unwrap();
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    within(reference.cancelled(1)).await;

    let c = ModernClient::over(McpClient::new(&gw.url));
    let echo = c.call("modern__echo", json!({"text": "hi"})).await;
    assert_eq!(echo["resultType"], "task", "{echo}");
    let done = c.poll(echo["taskId"].as_str().unwrap(), |t| t["status"] == "completed").await;
    assert_eq!(text_of(&done["result"]), "hi");
    let asking = c.call("modern__ask", json!({"question": "Name?"})).await["taskId"].as_str().unwrap().to_owned();
    let waiting = c.poll(&asking, |t| t["status"] == "input_required").await;
    let (key, request) = waiting["inputRequests"].as_object().unwrap().iter().next().expect("an input request");
    assert_eq!(request["method"], "elicitation/create", "{waiting}");
    assert_eq!(request["params"]["message"], "Name?");
    let answers = json!({ key.clone(): {"action": "accept", "content": {"answer": "Ada"}} });
    c.ok("tasks/update", json!({"taskId": asking, "inputResponses": answers})).await;
    let answered = c.poll(&asking, |t| t["status"] == "completed").await;
    assert_eq!(text_of(&answered["result"]), "answer: Ada", "{answered}");
    let chatter = c.call("modern__chatter", json!({"count": 1, "gate": "never"})).await;
    let chatter = chatter["taskId"].as_str().unwrap().to_owned();
    within(reference.started(2)).await;
    c.ok("tasks/cancel", json!({"taskId": chatter})).await;
    within(reference.cancelled(2)).await;
    assert_eq!(c.ok("tasks/get", json!({"taskId": chatter})).await["status"], "cancelled");
}

/// `upstream[].protocol` pins the revision: pinned to 2026-07-28, a legacy upstream is refused
/// with an error saying so (never initialized behind the pin's back); pinned to 2025-11-25, a
/// 2026-only upstream is asked to `initialize` and its refusal names the upstream; `auto`
/// finds each.
#[actix_rt::test]
async fn the_revision_is_detected_or_pinned_per_upstream() {
    let reference = Reference::start().await;
    let demo = taskgate_testkit::DemoUpstream::start();
    let pinned = |mut u: UpstreamConfig, p: UpstreamProtocol| {
        u.protocol = p;
        u
    };
    let gw = gateway(vec![
        pinned(demo.upstream("legacy_as_modern"), UpstreamProtocol::V2026),
        pinned(UpstreamConfig::http("modern_as_legacy", reference.url.clone()), UpstreamProtocol::V2025),
        UpstreamConfig::http("modern", reference.url.clone()),
        demo.upstream("legacy"),
    ]);
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    let names = c.tool_names().await;
    assert!(names.contains(&"modern__echo".to_owned()) && names.contains(&"legacy__echo".to_owned()), "{names:?}");
    assert!(
        !names.iter().any(|n| n.starts_with("legacy_as_modern__") || n.starts_with("modern_as_legacy__")),
        "{names:?}"
    );
    let refused = c.call("legacy_as_modern__echo", json!({"text": "x"})).await.unwrap_err();
    assert!(refused.message.contains("2026-07-28") && refused.message.contains("legacy"), "{refused:?}");
    let refused = c.call("modern_as_legacy__echo", json!({"text": "x"})).await.unwrap_err();
    assert!(refused.message.contains("modern_as_legacy"), "{refused:?}");
    assert_eq!(text_of(&c.call("modern__echo", json!({"text": "a"})).await.unwrap()), "a");
    assert_eq!(text_of(&c.call("legacy__echo", json!({"text": "b"})).await.unwrap()), "b");
    // `share_sessions = "auto"`: client sessions share a 2026 upstream's sessions (it keeps
    // none), never a 2025 one's. c's session was the one that tried the 2026 upstream's
    // 2025-11-25 side for 2025-11-25 clients (it has none): c keeps it; d shares.
    let mut d = McpClient::new(&gw.url);
    d.initialize().await;
    assert_eq!(text_of(&d.call("modern__echo", json!({"text": "c"})).await.unwrap()), "c");
    assert_eq!(text_of(&d.call("legacy__echo", json!({"text": "d"})).await.unwrap()), "d");
    let held = |upstream: &str, shared: &str| {
        gw.gateway.metrics().upstream_sessions.with_label_values(&[upstream, shared]).get()
    };
    assert_eq!((held("modern", "true"), held("modern", "false")), (1, 2), "d's; the catalog's and c's");
    assert_eq!((held("legacy", "true"), held("legacy", "false")), (0, 3), "the catalog's, c's, d's");
}

/// streamable-http "Custom Headers from Tool Parameters": the gateway, as a client of a 2026
/// upstream, mirrors a tool's `x-mcp-header` parameter into `Mcp-Param-{Name}`, Base64 in the
/// sentinel when the value is not plain ASCII; the upstream's SDK accepts the call.
#[actix_rt::test]
async fn x_mcp_header_parameters_are_mirrored_into_headers_for_a_2026_upstream() {
    let mut reference = Reference::start().await;
    let gw = gateway(vec![UpstreamConfig::http("modern", reference.url.clone())]);
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    assert_eq!(text_of(&c.call("modern__region", json!({"region": "us-west1"})).await.unwrap()), "us-west1");
    assert_eq!(within(reference.region_header()).await, "us-west1");
    assert_eq!(text_of(&c.call("modern__region", json!({"region": "Zürich "})).await.unwrap()), "Zürich ");
    assert_eq!(within(reference.region_header()).await, "=?base64?WsO8cmljaCA=?=");
}

/// A task of a 2026 upstream with the tasks extension survives the gateway's crash: the real
/// `taskgate serve` is killed with SIGKILL and started again on the same data directory, and
/// the task is followed again (a 2026-07-28 upstream has no session to resume) to its result.
#[actix_rt::test]
async fn a_tasks_extension_upstreams_task_is_followed_again_after_a_gateway_restart() {
    let rt = RmcpTaskServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("taskgate.toml");
    let data = dir.path().join("data");
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[store]\npath = {:?}\n\
         [[upstream]]\nname = \"rt\"\ntransport = \"http\"\nurl = \"{}\"\n",
        data.display().to_string(),
        rt.url
    );
    std::fs::write(&file, text).unwrap();
    let mut gw = taskgate_testkit::ServedGateway::start(&file).await;
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    // The gateway's task exists at once; the upstream's, once its answer to the call is in.
    let id = support::create(&mut c, "rt__work", json!({})).await;
    within(gw.log_line("a task of its own; following it")).await;
    assert_eq!(support::method(&mut c, "tasks/get", &id).await.unwrap()["status"], "working");
    gw.kill().await;

    let gw = taskgate_testkit::ServedGateway::start(&file).await;
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    assert_eq!(support::method(&mut c, "tasks/get", &id).await.unwrap()["status"], "working");
    rt.observed.gate.notify_one();
    let result = within(support::method(&mut c, "tasks/result", &id)).await.unwrap();
    assert_eq!(text_of(&result), "the gate opened");
    assert_eq!(rt.observed.ids.lock().len(), 1, "the upstream task was followed, not created again");
}

/// One URL in front of one upstream and then another, as when an upstream is redeployed with
/// another revision: each HTTP request goes to the current target, streamed both ways, and
/// the connections to the gateway stay open across a switch.
struct Switch {
    url: String,
    target: std::sync::Arc<parking_lot::Mutex<String>>,
    /// Every request body it passed on, in order.
    bodies: std::sync::Arc<parking_lot::Mutex<Vec<Value>>>,
    _server: actix_web::dev::ServerHandle,
}

impl Switch {
    fn start(target: &str) -> Switch {
        use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
        let target = std::sync::Arc::new(parking_lot::Mutex::new(target.to_owned()));
        let shared = target.clone();
        let bodies = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
        let recorded = bodies.clone();
        let client = reqwest::Client::new();
        let forward = move |req: HttpRequest, body: web::Bytes| {
            let (url, client) = (shared.lock().clone(), client.clone());
            if let Ok(value) = serde_json::from_slice::<Value>(&body) {
                recorded.lock().push(value);
            }
            async move {
                let method = reqwest::Method::from_bytes(req.method().as_str().as_bytes()).unwrap();
                let mut out = client.request(method, url).body(body.to_vec());
                for (name, value) in req.headers() {
                    if !matches!(name.as_str(), "host" | "content-length" | "connection") {
                        out = out.header(name.as_str(), value.as_bytes());
                    }
                }
                match out.send().await {
                    Ok(response) => {
                        let status = actix_web::http::StatusCode::from_u16(response.status().as_u16()).unwrap();
                        let mut back = HttpResponse::build(status);
                        for (name, value) in response.headers() {
                            if !matches!(name.as_str(), "content-length" | "transfer-encoding" | "connection") {
                                back.insert_header((name.as_str(), value.as_bytes()));
                            }
                        }
                        back.streaming(response.bytes_stream())
                    }
                    Err(e) => HttpResponse::BadGateway().body(e.to_string()),
                }
            }
        };
        let server = HttpServer::new(move || App::new().default_service(web::to(forward.clone())))
            .workers(1)
            .bind("127.0.0.1:0")
            .unwrap();
        let port = server.addrs()[0].port();
        let server = server.run();
        let handle = server.handle();
        actix_rt::spawn(server);
        Switch { url: format!("http://127.0.0.1:{port}/mcp"), target, bodies, _server: handle }
    }

    fn to(&self, target: &str) {
        *self.target.lock() = target.to_owned();
    }

    /// The `_meta` of the last `tools/call` the upstream received.
    fn last_call_meta(&self) -> Option<Value> {
        let bodies = self.bodies.lock();
        let call = bodies.iter().rev().find(|b| b["method"] == "tools/call")?;
        call["params"].get("_meta").cloned()
    }
}

/// basic "Per-request protocol fields": the version, capabilities and client info a 2026-07-28
/// client sends in `_meta` are the gateway's to read and do not reach the upstream; the rest of
/// its `_meta` does (a vendor key, the per-request log level). A 2025-11-25 session's request
/// that happens to carry one of those keys (without the version, so it is not a 2026 request)
/// goes on with them, as the client sent them.
#[actix_rt::test]
async fn per_request_fields_stop_at_the_gateway_and_the_rest_of_meta_goes_on() {
    let demo = taskgate_testkit::DemoUpstream::start();
    let switch = Switch::start(&demo.http.url);
    let gw = gateway(vec![UpstreamConfig::http("up", switch.url.clone())]);
    let modern = ModernClient::new(&gw.url, json!({}));
    let meta = json!({"vendor/k": 1, "io.modelcontextprotocol/logLevel": "error"});
    let reply = modern.send("tools/call", json!({"name": "up__echo", "arguments": {"text": "x"}, "_meta": meta})).await;
    assert_eq!(reply.outcome().unwrap()["resultType"], "complete");
    assert_eq!(switch.last_call_meta(), Some(meta));
    // Only the gateway's fields: no _meta at all upstream.
    let reply = modern.send("tools/call", json!({"name": "up__echo", "arguments": {"text": "y"}})).await;
    assert_eq!(reply.outcome().unwrap()["resultType"], "complete");
    assert_eq!(switch.last_call_meta(), None);

    let mut session = McpClient::new(&gw.url);
    session.initialize().await;
    let sent = json!({"vendor/k": 2, "io.modelcontextprotocol/clientCapabilities": {"sampling": {}}});
    let reply = session
        .request("tools/call", Some(json!({"name": "up__echo", "arguments": {"text": "z"}, "_meta": sent})))
        .await;
    assert_eq!(text_of(&reply.outcome().unwrap()), "z");
    assert_eq!(switch.last_call_meta(), Some(sent));
}

/// basic/versioning "Backward Compatibility": the revision found for an upstream is cached,
/// and probed again when the cached assumption fails. An upstream redeployed from 2025-11-25
/// to 2026-07-28 (a 2026-only server) and back at the same URL keeps serving: the sessions
/// opened before and after each move get their calls answered, the refused request going
/// again, once, in the revision found.
#[actix_rt::test]
async fn an_upstream_that_changes_its_revision_is_probed_again_and_keeps_serving() {
    let reference = Reference::start().await;
    let demo = taskgate_testkit::DemoUpstream::start();
    let switch = Switch::start(&demo.http.url);
    let gw = gateway(vec![UpstreamConfig::http("moving", switch.url.clone())]);
    let echo = |c: &mut McpClient, text: &'static str| {
        let mut c = c.clone();
        async move { c.call("moving__echo", json!({"text": text})).await.map(|r| text_of(&r).to_owned()) }
    };
    let mut before = McpClient::new(&gw.url);
    before.initialize().await;
    assert_eq!(echo(&mut before, "legacy").await.unwrap(), "legacy");

    // To 2026-07-28 only: the open session's next call is refused with -32022, probed, and sent
    // statelessly; a new session connects the modern way at once.
    switch.to(&reference.url);
    assert_eq!(echo(&mut before, "moved").await.unwrap(), "moved");
    let mut after = McpClient::new(&gw.url);
    after.initialize().await;
    assert_eq!(echo(&mut after, "modern").await.unwrap(), "modern");

    // Back to 2025-11-25: a stateless request is refused as a legacy server refuses one; the
    // probe says legacy, and the session initializes.
    switch.to(&demo.http.url);
    assert_eq!(echo(&mut before, "back").await.unwrap(), "back");
    assert_eq!(echo(&mut after, "again").await.unwrap(), "again");
    let mut last = McpClient::new(&gw.url);
    last.initialize().await;
    assert_eq!(echo(&mut last, "legacy again").await.unwrap(), "legacy again");
}

/// The era a `tests/interop/dual-server.mjs` reported for its next tool call.
async fn next_call_era(events: &mut tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>) -> Value {
    let read = async {
        while let Some(line) = events.next_line().await.unwrap() {
            let event: Value = serde_json::from_str(&line).unwrap();
            if event.get("call").is_some() {
                return event;
            }
        }
        panic!("the dual-era server exited");
    };
    within(read).await
}

/// A 2025-11-25 client asking the user through `ask`: the elicitation comes on the call's
/// stream, is answered, and the call completes with the answer.
async fn ask_as_a_2025_client(gw: &TestGateway) {
    let mut c = McpClient::new(&gw.url);
    c.initialize_with("2025-11-25", json!({"elicitation": {"form": {}}})).await;
    let mut stream =
        c.request_stream("tools/call", Some(json!({"name": "dual__ask", "arguments": {"question": "Name?"}}))).await;
    let Some(Message::Request { id, method, params }) = stream.next().await else {
        panic!("no request on the call's stream")
    };
    assert_eq!((method.as_str(), params.as_ref().unwrap()["message"].as_str()), ("elicitation/create", Some("Name?")));
    let answer = Message::response(id, json!({"action": "accept", "content": {"answer": "Ada"}}));
    assert!(c.post_message(&answer).await.status.is_success());
    let done = loop {
        match stream.next().await {
            Some(Message::Response { result, .. }) => break result,
            Some(Message::Notification { .. }) => continue,
            other => panic!("the call ended with {other:?}"),
        }
    };
    assert_eq!(text_of(&done), "answer: Ada", "{done}");
}

/// basic/versioning "Backward Compatibility" (a dual-era server selects its behaviour from how
/// the client opens): in front of a server that serves 2025-11-25 sessions and 2026-07-28
/// requests on one endpoint, each client is served in its own revision, so nothing it could do
/// directly is lost in translation: a 2025-11-25 client's call runs in the upstream's own
/// 2025-11-25 session (its elicitation a real request on the call's stream), a 2026-07-28
/// client's in 2026-07-28 (`input_required`). A server whose 2025-11-25 side keeps no sessions
/// (the v2 SDK's stateless serving) cannot take an answer to what it asks there: 2025-11-25
/// clients are served through its 2026-07-28 side, translated, and are asked all the same.
#[actix_rt::test]
async fn a_dual_era_upstream_serves_each_client_in_its_own_revision() {
    let (_server, url, mut events) = crate::interop::start_node_server_with("dual-server.mjs", &[]).await;
    let gw = gateway(vec![UpstreamConfig::http("dual", url)]);
    ask_as_a_2025_client(&gw).await;
    assert_eq!(next_call_era(&mut events).await, json!({"era": "2025-11-25", "call": "ask"}));
    let modern = ModernClient::new(&gw.url, json!({"elicitation": {"form": {}}}));
    let first = modern.call("dual__ask", json!({"question": "Name?"})).await;
    assert_eq!(next_call_era(&mut events).await, json!({"era": "2026-07-28", "call": "ask"}));
    assert_eq!(first["resultType"], "input_required", "{first}");
    assert!(first["inputRequests"]["answer"].is_object(), "the upstream's own key: {first}");
    // Known now: the next 2025-11-25 client goes straight to the 2025-11-25 side.
    ask_as_a_2025_client(&gw).await;
    assert_eq!(next_call_era(&mut events).await, json!({"era": "2025-11-25", "call": "ask"}));

    let (_server, url, mut events) =
        crate::interop::start_node_server_with("dual-server.mjs", &[("LEGACY_SIDE", "stateless")]).await;
    let gw = gateway(vec![UpstreamConfig::http("dual", url)]);
    for _ in 0..2 {
        ask_as_a_2025_client(&gw).await;
        // The answer goes in the retry of the 2026-07-28 call.
        assert_eq!(next_call_era(&mut events).await, json!({"era": "2026-07-28", "call": "ask"}));
        assert_eq!(next_call_era(&mut events).await, json!({"era": "2026-07-28", "call": "ask"}));
    }
}

/// basic/patterns/mrtr at the upstream: a 2026-07-28 server in transition asks, as a request
/// on a call's own stream, what it should ask with `input_required` (the conformance suite's
/// reference server does for its 2025-11-25 fixtures; so does the demo's dual-era side). The
/// gateway relays the question to a 2026-07-28 client as `input_required` and the retry's
/// answer back as the response the upstream waits for, over HTTP and stdio; a 2026-only server
/// asks with `input_required` itself, and its client is asked the same way.
#[actix_rt::test]
async fn a_2026_upstream_asking_on_the_calls_stream_is_answered_through_input_required() {
    use taskgate_demo::Revisions;
    for (revisions, mode) in [(Revisions::Both, "both"), (Revisions::Modern, "2026-07-28")] {
        let demo = taskgate_testkit::DemoUpstream::start_conformance_at(revisions);
        let args = ["demo-upstream", "--stdio", "--conformance", "--revision", mode].map(String::from).to_vec();
        let stdio = UpstreamConfig::stdio("demo", taskgate_testkit::taskgate_bin().display().to_string(), args);
        for upstream in [demo.upstream("demo"), stdio] {
            let transport = if upstream.url.is_none() { "stdio" } else { "http" };
            let gw = gateway(vec![UpstreamConfig { prefix: false, ..upstream }]);
            let c = ModernClient::new(&gw.url, json!({"elicitation": {"form": {}}}));
            let asked = c.call("test_elicitation", json!({"message": "Who are you?"})).await;
            assert_eq!(asked["resultType"], "input_required", "{mode}, {transport}: {asked}");
            let questions = asked["inputRequests"].as_object().unwrap();
            assert_eq!(questions.len(), 1, "{asked}");
            let (key, question) = questions.iter().next().unwrap();
            // The dual-era side's question came as a request on the stream (shown under the
            // gateway's id for it); the 2026-only server's as its own input request, under its key.
            assert_eq!(key == "elicitation-1", revisions == Revisions::Modern, "{mode}, {transport}: {asked}");
            assert_eq!(question["method"], "elicitation/create", "{asked}");
            assert_eq!(question["params"]["message"], "Who are you?", "{asked}");
            let answer = json!({"action": "accept", "content": {"username": "ada", "email": "ada@example.com"}});
            let retry = json!({"name": "test_elicitation", "arguments": {"message": "Who are you?"},
                "inputResponses": {key.as_str(): answer}, "requestState": asked["requestState"]});
            let done = within(c.ok("tools/call", retry)).await;
            let text = text_of(&done);
            assert!(
                text.starts_with("User response: action=accept") && text.contains("ada@example.com"),
                "{mode}, {transport}: {done}"
            );
            gw.stop().await;
        }
    }
}

/// streamable-http "Server Behavior for Custom Headers" at the front door: a 2026-07-28
/// call's `Mcp-Param-*` headers must match the arguments its tool annotates with
/// `x-mcp-header` (400 and -32020: different, missing while the argument has a value, sent for
/// one with none, sent twice, malformed Base64), checked for the tool the call reaches: one
/// the tenant's rules leave out stays an unknown tool, whatever the headers say.
#[actix_rt::test]
async fn mcp_param_headers_are_checked_for_the_tool_a_call_reaches() {
    use taskgate_config::ToolRules;
    let demo = taskgate_testkit::DemoUpstream::start_conformance_at(taskgate_demo::Revisions::Modern);
    let mut config = config_with(vec![UpstreamConfig { prefix: false, ..demo.upstream("demo") }]);
    let mut acme = crate::tenants::tenant("acme", &[("ci", "acme-param-headers-00001")]);
    acme.tools = Some(ToolRules { deny: vec!["test_header_param".into()], ..Default::default() });
    config.tenants = vec![acme, crate::tenants::tenant("globex", &[("ci", "globex-param-headers-001")])];
    let gw = TestGateway::start(config);
    let globex = ModernClient::declaring(McpClient::with_bearer(&gw.url, "globex-param-headers-001"), json!({}));
    let call = |region: Value| json!({"name": "test_header_param", "arguments": {"region": region}});

    let served = globex
        .send_with("tools/call", call(json!("eu west")), &[("mcp-param-region", "=?base64?ZXUgd2VzdA==?=")])
        .await;
    assert_eq!(served.status, 200, "{served:?}");
    assert_eq!(text_of(&served.outcome().unwrap()), "Region: eu west");
    let refused = |reply: taskgate_testkit::Reply, case: &str| {
        assert_eq!(reply.status, 400, "{case}: {reply:?}");
        assert_eq!(reply.outcome().unwrap_err().code, -32020, "{case}");
    };
    refused(globex.send_with("tools/call", call(json!("eu")), &[("mcp-param-region", "us")]).await, "different");
    refused(globex.send_with("tools/call", call(json!("eu")), &[]).await, "missing");
    let absent = json!({"name": "test_header_param", "arguments": {}});
    refused(globex.send_with("tools/call", absent, &[("mcp-param-region", "eu")]).await, "for no value");
    refused(
        globex.send_with("tools/call", call(json!("Hello")), &[("mcp-param-region", "=?base64?SGVsbG8?=")]).await,
        "unpadded",
    );
    // Sent twice, even with the right value.
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "test_header_param",
        "arguments": {"region": "eu"}, "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}}}});
    let twice = reqwest::Client::new()
        .post(&gw.url)
        .bearer_auth("globex-param-headers-001")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "test_header_param")
        .header("mcp-param-region", "eu")
        .header("mcp-param-region", "eu")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(twice.status(), 400);
    assert_eq!(twice.json::<Value>().await.unwrap()["error"]["code"], -32020);

    // The tool acme's rules leave out is unknown to it, headers or not: nothing says it exists.
    let acme = ModernClient::declaring(McpClient::with_bearer(&gw.url, "acme-param-headers-00001"), json!({}));
    for headers in [&[("mcp-param-region", "us")][..], &[][..]] {
        let reply = acme.send_with("tools/call", call(json!("eu")), headers).await;
        let e = reply.outcome().unwrap_err();
        assert_eq!((e.code, e.message.as_str()), (-32602, "Unknown tool: test_header_param"), "{e:?}");
    }
    gw.stop().await;

    // An MCP App's View calls a prefixed upstream's tool by the name its server gave it: the
    // headers are checked against that tool's annotations too.
    let gw = TestGateway::start(config_with(vec![demo.upstream("demo")]));
    let ui = json!({"extensions": {"io.modelcontextprotocol/ui": {"mimeTypes": ["text/html;profile=mcp-app"]}}});
    let app = ModernClient::declaring(McpClient::new(&gw.url), ui);
    let served = app.send_with("tools/call", call(json!("eu")), &[("mcp-param-region", "eu")]).await;
    assert_eq!(served.status, 200, "{served:?}");
    assert_eq!(text_of(&served.outcome().unwrap()), "Region: eu");
    refused(app.send_with("tools/call", call(json!("eu")), &[("mcp-param-region", "us")]).await, "app, different");
    refused(app.send_with("tools/call", call(json!("eu")), &[]).await, "app, missing");
    gw.stop().await;
}

/// basic/patterns/cancellation at 2026-07-28 over HTTP: a client cancels by closing its
/// response stream. Through the gateway, a 2026-07-28 client that leaves a call reaches a
/// 2026-07-28 upstream (2026-only and dual-era) as a closed stream, and the upstream's call is
/// cancelled. A client asked a question that a dual-era server put on the call's stream, and
/// that never retries, has the question answered with an error once the gateway gives the
/// exchange up (`server.input_wait_secs`): the upstream's call ends too.
#[actix_rt::test]
async fn a_2026_client_leaving_a_call_ends_it_at_a_2026_upstream() {
    use taskgate_demo::Revisions;
    for revisions in [Revisions::Modern, Revisions::Both] {
        let demo = taskgate_testkit::DemoUpstream::start_conformance_at(revisions);
        let mut config = config_with(vec![UpstreamConfig { prefix: false, ..demo.upstream("demo") }]);
        config.server.input_wait_secs = 60;
        let clock = std::sync::Arc::new(taskgate_core::clock::ManualClock::new(1_764_066_600_000));
        let gw = TestGateway::start_with_clock(config, clock.clone());
        let c = ModernClient::new(&gw.url, json!({"elicitation": {"form": {}}}));
        let waiting = c.stream("tools/call", json!({"name": "wait", "arguments": {"gate": "never"}})).await;
        within(demo.demo.wait_in_flight(|n| *n == 1)).await;
        drop(waiting);
        within(demo.demo.wait_in_flight(|n| *n == 0)).await;
        assert_eq!(demo.demo.stats().cancelled, 1, "{revisions:?}");
        if revisions == Revisions::Both {
            let asked = c.call("test_elicitation", json!({"message": "Who?"})).await;
            assert_eq!(asked["resultType"], "input_required", "{asked}");
            within(demo.demo.wait_in_flight(|n| *n == 1)).await;
            // The question waits until the gateway gives the exchange up.
            gw.front.release_due().await;
            assert_eq!(demo.demo.in_flight(), 1, "{revisions:?}");
            clock.advance(60_000);
            gw.front.release_due().await;
            within(demo.demo.wait_in_flight(|n| *n == 0)).await;
        }
        gw.stop().await;
    }
}
