//! Who decides whether a call becomes a task, in front of an upstream that speaks the tasks
//! extension (the Rust SDK `rmcp` 3.9, tests/integration/rmcp_server.rs): the extension says
//! "the server decides", and for such an upstream that is the upstream.
//!
//! - A 2025-11-25 client that asks for a task has the gateway's task at once, whatever the
//!   upstream then does: the task follows the upstream's task when it makes one, or takes its
//!   answer; progress reaches the client for the whole call and `tasks/cancel` stops it.
//! - A 2026-07-28 client that declares the extension gets the upstream's answer: an answer at
//!   once stays one (its progress on the request's stream), a task stays a task (the gateway's
//!   id); an upstream asking for input before it decides reaches the client as
//!   `input_required`; a legacy `params.task` changes nothing.

use serde_json::{json, Value};
use taskgate_config::UpstreamConfig;
use taskgate_protocol::Message;
use taskgate_testkit::McpClient;

use crate::modern::Client as ModernClient;
use crate::modern_upstreams::gateway;
use crate::rmcp_server::RmcpTaskServer;
use crate::support::{self, within};

const TASKS: &str = "io.modelcontextprotocol/tasks";

fn text_of(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_default()
}

/// A 2025-11-25 client's task of `rt__slow` with progress token `token`, working, and the
/// first progress the upstream reports for it (it has the call).
async fn slow_task(c: &mut McpClient, events: &mut taskgate_testkit::SseReader, token: &str) -> (String, Value) {
    let params = json!({"name": "rt__slow", "arguments": {}, "task": {}, "_meta": {"progressToken": token}});
    let created = c.request("tools/call", Some(params)).await.outcome().unwrap();
    assert_eq!(created["task"]["status"], "working");
    let id = created["task"]["taskId"].as_str().unwrap().to_owned();
    let progress = within(async {
        loop {
            match events.next().await.expect("the GET stream ended") {
                Message::Notification { method, params: Some(p) } if method == "notifications/progress" => return p,
                _ => continue,
            }
        }
    })
    .await;
    (id, progress)
}

#[actix_rt::test]
async fn a_2025_client_asking_for_a_task_has_it_at_once_whatever_the_upstream_decides() {
    let rt = RmcpTaskServer::start().await;
    let gw = gateway(vec![UpstreamConfig::http("rt", rt.url.clone())]);
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    let mut events = c.open_stream().await.expect("the GET stream opens");

    // `slow` answers only once its gate opens, and never as a task: the client's task is
    // there before (the gate is still closed when it is). Its progress reaches the session that
    // asked, naming the client's token and the task.
    let (id, progress) = slow_task(&mut c, &mut events, "s1").await;
    assert_eq!((&progress["progressToken"], progress["progress"].as_f64()), (&json!("s1"), Some(1.0)));
    assert_eq!(progress["_meta"]["io.modelcontextprotocol/related-task"]["taskId"], id.as_str());
    assert_eq!(support::method(&mut c, "tasks/get", &id).await.unwrap()["status"], "working");
    rt.observed.slow_gate.notify_one();
    let result = within(support::method(&mut c, "tasks/result", &id)).await.unwrap();
    assert_eq!(text_of(&result), "slow: done");
    assert_eq!(support::method(&mut c, "tasks/get", &id).await.unwrap()["status"], "completed");
    assert_eq!(rt.observed.ids.lock().len(), 0, "the upstream made no task: it answered");

    // `echo` with the extension declared is a task the upstream completes at once: followed.
    let echoed = support::create(&mut c, "rt__echo", json!({"text": "hi"})).await;
    assert_eq!(text_of(&within(support::method(&mut c, "tasks/result", &echoed)).await.unwrap()), "hi");
    // `work` is a task that waits: cancelled through the gateway's task, the upstream's too.
    let working = support::create(&mut c, "rt__work", json!({})).await;
    assert_eq!(support::method(&mut c, "tasks/cancel", &working).await.unwrap()["status"], "cancelled");
    within(rt.observed.cancelled(1)).await;
    let upstream_ids = rt.observed.ids.lock().clone();
    assert_eq!(upstream_ids.len(), 2, "echo and work");
    let listed = c.request("tasks/list", None).await.outcome().unwrap().to_string();
    assert!(upstream_ids.iter().all(|up| !listed.contains(up.as_str())), "the upstream's ids never show");
}

#[actix_rt::test]
async fn a_2026_client_gets_the_upstreams_own_decision() {
    let rt = RmcpTaskServer::start().await;
    let gw = gateway(vec![UpstreamConfig::http("rt", rt.url.clone())]);
    let client = ModernClient::new(&gw.url, json!({"elicitation": {"form": {}}, "extensions": {TASKS: {}}}));

    // An answer at once stays one, with its progress on the request's stream.
    let params = json!({"name": "rt__progress", "arguments": {"values": [1, 2]}, "_meta": {"progressToken": "p"}});
    let reply = client.send("tools/call", params).await;
    let result = reply.outcome().unwrap();
    assert_eq!((result["resultType"].as_str(), text_of(&result)), (Some("complete"), "reported 2 values"));
    let values: Vec<f64> = reply
        .notifications()
        .into_iter()
        .filter_map(|m| match m {
            Message::Notification { method, params: Some(p) } if method == "notifications/progress" => {
                p["progress"].as_f64()
            }
            _ => None,
        })
        .collect();
    assert_eq!(values, [1.0, 2.0]);
    // A legacy `params.task` (with the Mcp-Method header the client always sends) changes
    // nothing: the extension's call, the upstream's decision.
    let legacy = json!({"name": "rt__progress", "arguments": {"values": [3]}, "task": {"ttl": 60000}});
    let result = client.ok("tools/call", legacy).await;
    assert_eq!((result["resultType"].as_str(), text_of(&result)), (Some("complete"), "reported 1 values"));
    assert_eq!(rt.observed.ids.lock().len(), 0, "no task was made, by either side");

    // A task stays a task, under the gateway's id.
    let task = client.call("rt__echo", json!({"text": "hi"})).await;
    assert_eq!(task["resultType"], "task", "{task}");
    let id = task["taskId"].as_str().unwrap().to_owned();
    let done = client.poll(&id, |t| t["status"] == "completed").await;
    assert_eq!(text_of(&done["result"]), "hi");
    assert!(!rt.observed.ids.lock().contains(&id), "the gateway's own id");

    // The upstream asks for input before it decides: the client gets `input_required`, and
    // its retry gets the upstream's decision (a task: it declared the extension).
    let first = client.call("rt__confirm", json!({})).await;
    assert_eq!(first["resultType"], "input_required", "{first}");
    let (key, request) = first["inputRequests"].as_object().unwrap().iter().next().unwrap();
    assert_eq!(request["params"]["message"], "Your name first?");
    let retry = json!({"name": "rt__confirm", "arguments": {}, "requestState": first["requestState"],
        "inputResponses": {key.clone(): {"action": "accept", "content": {"answer": "Ada"}}}});
    let task = client.ok("tools/call", retry).await;
    assert_eq!(task["resultType"], "task", "{task}");
    let done = client.poll(task["taskId"].as_str().unwrap(), |t| t["status"] == "completed").await;
    assert_eq!(text_of(&done["result"]), "confirmed: Ada");
}

#[actix_rt::test]
async fn a_call_the_upstream_answers_at_once_is_cancelled_like_any_call() {
    let rt = RmcpTaskServer::start().await;
    let gw = gateway(vec![UpstreamConfig::http("rt", rt.url.clone())]);
    // A 2026-07-28 client with the extension: `slow` is a plain call, and closing its stream
    // cancels it at the upstream.
    let client = ModernClient::new(&gw.url, json!({"extensions": {TASKS: {}}}));
    let mut stream =
        client.stream("tools/call", json!({"name": "rt__slow", "arguments": {}, "_meta": {"progressToken": 7}})).await;
    let first = within(stream.next()).await;
    let first = first.unwrap_or_else(|| panic!("the call's stream carries its progress: {}", stream.is_sse()));
    assert!(matches!(&first, Message::Notification { method, .. } if method == "notifications/progress"), "{first:?}");
    drop(stream);
    within(rt.observed.abandoned(1)).await;
}

/// `tasks/cancel` of a task whose call the upstream has not answered yet reaches the upstream
/// at once: an answer already on its way (a task it made) is waited for a moment, then the
/// call's stream closes, not after the seconds an upstream may take to say what it decided.
#[actix_rt::test]
async fn cancelling_a_task_whose_call_is_still_out_reaches_the_upstream_at_once() {
    let rt = RmcpTaskServer::start().await;
    let gw = gateway(vec![UpstreamConfig::http("rt", rt.url.clone())]);
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    let mut events = c.open_stream().await.expect("the GET stream opens");
    // `slow` runs inline at the upstream until its gate opens: the task's call is still out
    // (its first progress says the upstream has it).
    let (id, _) = slow_task(&mut c, &mut events, "c1").await;
    assert_eq!(support::method(&mut c, "tasks/cancel", &id).await.unwrap()["status"], "cancelled");
    // Told at once: well within the 10 s the gateway gives a told upstream to end the call.
    let told = tokio::time::timeout(std::time::Duration::from_secs(3), rt.observed.abandoned(1)).await;
    assert!(told.is_ok(), "the upstream was not told of the cancellation within 3 s");
    assert_eq!(rt.observed.ids.lock().len(), 0, "the upstream made no task");
}
