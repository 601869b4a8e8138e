//! Progress and cancellation through the gateway (basic/utilities/progress,
//! basic/utilities/cancellation): token rewriting, increasing values, coalescing, delivery for
//! calls and tasks, cancellation routing both ways, and no leaked state after many races.

use std::time::Duration;

use serde_json::{json, Value};
use taskgate_config::Config;
use taskgate_protocol::{Message, RequestId};
use taskgate_testkit::{config_with, DemoUpstream, McpClient, TestGateway};

const RELATED: &str = "io.modelcontextprotocol/related-task";

async fn within<F: std::future::Future>(event: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(60), event).await.expect("the awaited event did not happen in time")
}

fn progress_of(messages: &[&Message]) -> Vec<(Value, f64)> {
    messages
        .iter()
        .filter_map(|m| match m {
            Message::Notification { method, params: Some(p) } if method == "notifications/progress" => {
                Some((p["progressToken"].clone(), p["progress"].as_f64().unwrap()))
            }
            _ => None,
        })
        .collect()
}

fn gateway(demo: &DemoUpstream, min_interval_ms: u64) -> TestGateway {
    let mut config = config_with(vec![demo.upstream("demo")]);
    config.progress.min_interval_ms = min_interval_ms;
    TestGateway::start(config)
}

async fn call_with_token(c: &mut McpClient, tool: &str, args: Value, token: Value) -> taskgate_testkit::Reply {
    c.request("tools/call", Some(json!({"name": tool, "arguments": args, "_meta": {"progressToken": token}}))).await
}

/// Waits for the gateway to settle by round trips through a session (each ping is handled
/// after everything queued before it), a bounded number of times.
async fn settle(c: &mut McpClient, done: impl Fn() -> bool) {
    for _ in 0..2000 {
        if done() {
            return;
        }
        c.request("ping", None).await;
    }
    assert!(done(), "the gateway did not settle");
}

#[actix_rt::test]
async fn same_token_from_two_sessions_never_collides_upstream_and_comes_back_as_sent() {
    let demo = DemoUpstream::start();
    let gw = gateway(&demo, 0);
    let mut a = McpClient::new(&gw.url);
    a.initialize().await;
    let mut b = McpClient::new(&gw.url);
    b.initialize().await;
    for token in [json!("same"), json!(7)] {
        let (mut ca, mut cb, ta, tb) = (a.clone(), b.clone(), token.clone(), token.clone());
        let ra = actix_rt::spawn(async move {
            call_with_token(&mut ca, "demo__progress", json!({"values": [10, 20]}), ta).await
        });
        let rb = actix_rt::spawn(async move {
            call_with_token(&mut cb, "demo__progress", json!({"values": [30, 40]}), tb).await
        });
        let (ra, rb) = (ra.await.unwrap(), rb.await.unwrap());
        // Each client gets its own values under its own original token (integer stays integer).
        assert_eq!(progress_of(&ra.notifications()), [(token.clone(), 10.0), (token.clone(), 20.0)]);
        assert_eq!(progress_of(&rb.notifications()), [(token.clone(), 30.0), (token.clone(), 40.0)]);
        assert!(ra.outcome().is_ok() && rb.outcome().is_ok());
    }
    let seen = demo.demo.stats().progress_tokens;
    assert_eq!(seen.len(), 4);
    let mut distinct = seen.clone();
    distinct.sort_by_key(|t| t.to_string());
    distinct.dedup();
    assert_eq!(distinct.len(), 4, "upstream tokens are unique: {seen:?}");
    assert!(seen.iter().all(|t| t.as_str().is_some_and(|s| s.starts_with("tgp-"))), "{seen:?}");
    assert_eq!(gw.gateway.progress_stats().live.load(std::sync::atomic::Ordering::Relaxed), 0);
}

#[actix_rt::test]
async fn non_increasing_progress_is_dropped_and_counted() {
    let demo = DemoUpstream::start();
    let gw = gateway(&demo, 0);
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    let before = gw.gateway.progress_stats().dropped.load(std::sync::atomic::Ordering::Relaxed);
    let reply = call_with_token(&mut c, "demo__progress", json!({"values": [1, 3, 2, 3, 5.5]}), json!("t")).await;
    let values: Vec<f64> = progress_of(&reply.notifications()).into_iter().map(|(_, v)| v).collect();
    assert_eq!(values, [1.0, 3.0, 5.5]);
    let dropped = gw.gateway.progress_stats().dropped.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(dropped - before, 2);
    // total and message pass through.
    let reply = call_with_token(&mut c, "demo__slow", json!({"ms": 10, "steps": 2}), json!("m")).await;
    let Message::Notification { params: Some(p), .. } = reply.notifications()[0] else { panic!() };
    assert_eq!((p["total"].clone(), p["message"].clone()), (json!(2), json!("step 1 of 2")));
}

#[actix_rt::test]
async fn bursts_are_coalesced_and_the_last_value_before_completion_is_delivered() {
    let demo = DemoUpstream::start();
    let gw = gateway(&demo, 60_000);
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    let values: Vec<u32> = (1..=50).collect();
    let reply = call_with_token(&mut c, "demo__progress", json!({"values": values}), json!("burst")).await;
    let seen: Vec<f64> = progress_of(&reply.notifications()).into_iter().map(|(_, v)| v).collect();
    assert_eq!(seen, [1.0, 50.0], "the first at once, the rest coalesced into the last");
    assert!(reply.messages.last().unwrap().is_response());
    assert_eq!(gw.gateway.progress_stats().coalesced.load(std::sync::atomic::Ordering::Relaxed), 48);
}

#[actix_rt::test]
async fn task_progress_reaches_the_get_stream_then_the_status_with_the_original_token() {
    let demo = DemoUpstream::start();
    let gw = gateway(&demo, 0);
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    let mut stream = c.open_stream().await.unwrap();
    let created = c
        .request("tools/call", Some(json!({"name": "demo__progress", "arguments": {"values": [5, 6]}, "task": {}, "_meta": {"progressToken": 42}})))
        .await
        .outcome()
        .unwrap();
    let id = created["task"]["taskId"].as_str().unwrap().to_owned();
    let mut progress = Vec::new();
    loop {
        let m = within(stream.next()).await.unwrap();
        match &m {
            Message::Notification { method, params: Some(p) } if method == "notifications/progress" => {
                assert_eq!(p["progressToken"], 42);
                assert_eq!(p["_meta"][RELATED]["taskId"], id.as_str(), "task progress carries related-task");
                progress.push(p["progress"].as_f64().unwrap());
            }
            Message::Notification { method, params: Some(p) }
                if method == "notifications/tasks/status" && p["status"] == "completed" =>
            {
                break
            }
            _ => {}
        }
    }
    assert_eq!(progress, [5.0, 6.0], "every value before the terminal status, none after");
}

/// Reads a GET stream until the task's terminal status: the task's progress values seen on it.
async fn progress_until_completed(stream: &mut taskgate_testkit::SseReader, task_id: &str) -> Vec<f64> {
    let mut progress = Vec::new();
    loop {
        match within(stream.next()).await.expect("the stream ended before the task's status") {
            Message::Notification { method, params: Some(p) } if method == "notifications/progress" => {
                progress.push(p["progress"].as_f64().unwrap());
            }
            Message::Notification { method, params: Some(p) }
                if method == "notifications/tasks/status" && p["taskId"] == task_id && p["status"] == "completed" =>
            {
                return progress
            }
            _ => {}
        }
    }
}

/// A task's progress reaches the session that asked for the task, never another session of the
/// same requestor: that session's GET stream is not where its client looks for the task's
/// progress (the TypeScript SDK, whose progress tokens are request ids, credits it to a request
/// of its own). Both sessions still hear the task's status.
#[actix_rt::test]
async fn a_tasks_progress_reaches_only_the_session_that_asked_for_the_task() {
    let demo = DemoUpstream::start();
    let gw = gateway(&demo, 0);
    let (mut asker, mut other) = (McpClient::new(&gw.url), McpClient::new(&gw.url));
    asker.initialize().await;
    other.initialize().await;
    let mut asker_stream = asker.open_stream().await.unwrap();
    let mut other_stream = other.open_stream().await.unwrap();
    let params =
        json!({"name": "demo__progress", "arguments": {"values": [5, 6]}, "task": {}, "_meta": {"progressToken": 1}});
    let created = asker.request("tools/call", Some(params)).await.outcome().unwrap();
    let id = created["task"]["taskId"].as_str().unwrap().to_owned();
    assert_eq!(progress_until_completed(&mut asker_stream, &id).await, [5.0, 6.0]);
    assert_eq!(progress_until_completed(&mut other_stream, &id).await, Vec::<f64>::new(), "not on another session");
}

/// Once the session that asked for a task is gone, the task's progress reaches the session of the
/// same requestor that now follows the task with `tasks/result`, and only on that stream.
#[actix_rt::test]
async fn once_the_asking_session_is_gone_a_tasks_progress_reaches_the_session_following_the_task() {
    let demo = DemoUpstream::start();
    let gw = gateway(&demo, 0);
    let (mut asker, mut follower) = (McpClient::new(&gw.url), McpClient::new(&gw.url));
    asker.initialize().await;
    follower.initialize().await;
    let params = json!({"name": "demo__slow", "arguments": {"ms": 3000, "steps": 30}, "task": {}, "_meta": {"progressToken": "t"}});
    let created = asker.request("tools/call", Some(params)).await.outcome().unwrap();
    let id = created["task"]["taskId"].as_str().unwrap().to_owned();
    assert!(asker.delete().await.is_success());
    let mut result = follower.request_stream("tasks/result", Some(json!({"taskId": id}))).await;
    let mut messages = Vec::new();
    while let Some(m) = within(result.next()).await {
        messages.push(m);
    }
    let refs: Vec<&Message> = messages.iter().collect();
    let values = progress_of(&refs);
    assert!(!values.is_empty() && values.iter().all(|(token, _)| token == "t"), "{values:?}");
    assert_eq!(values.last(), Some(&(json!("t"), 30.0)), "the last value before the result: {values:?}");
    assert!(messages.last().unwrap().is_response());
}

#[actix_rt::test]
async fn task_progress_goes_on_an_open_tasks_result_stream_before_the_result() {
    let demo = DemoUpstream::start();
    let gw = gateway(&demo, 0);
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    let params = json!({"name": "demo__slow", "arguments": {"ms": 200, "steps": 4}, "task": {}, "_meta": {"progressToken": "s"}});
    let created = c.request("tools/call", Some(params)).await.outcome().unwrap();
    let id = created["task"]["taskId"].as_str().unwrap().to_owned();
    let mut result = c.request_stream("tasks/result", Some(json!({"taskId": id}))).await;
    let mut messages = Vec::new();
    while let Some(m) = within(result.next()).await {
        messages.push(m);
    }
    let refs: Vec<&Message> = messages.iter().collect();
    let values = progress_of(&refs);
    // No GET stream is open: the task's progress goes on its tasks/result stream, the last value
    // before the result.
    assert_eq!(values.last(), Some(&(json!("s"), 4.0)), "{values:?}");
    assert!(messages.last().unwrap().is_response());
}

#[actix_rt::test]
async fn a_native_tasks_progress_reaches_the_client_under_its_original_token() {
    let demo = DemoUpstream::start_with_tasks();
    let gw = gateway(&demo, 0);
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    let mut stream = c.open_stream().await.unwrap();
    let params = json!({"name": "demo__slow", "arguments": {"ms": 60, "steps": 3}, "task": {}, "_meta": {"progressToken": "native-tok"}});
    let created = c.request("tools/call", Some(params)).await.outcome().unwrap();
    let id = created["task"]["taskId"].as_str().unwrap().to_owned();
    let mut values = Vec::new();
    while values.last() != Some(&3.0) {
        if let Some(Message::Notification { method, params: Some(p) }) = within(stream.next()).await {
            if method == "notifications/progress" {
                assert_eq!(p["progressToken"], "native-tok");
                assert_eq!(p["_meta"][RELATED]["taskId"], id.as_str(), "our task id, never the upstream's");
                values.push(p["progress"].as_f64().unwrap());
            }
        }
    }
    assert_eq!(values, [1.0, 2.0, 3.0]);
    assert!(demo.demo.stats().progress_tokens.iter().all(|t| t != "native-tok"));
}

#[actix_rt::test]
async fn progress_after_completion_is_not_forwarded() {
    let demo = DemoUpstream::start();
    let gw = gateway(&demo, 0);
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    let mut stream = c.open_stream().await.unwrap();
    let dropped = || gw.gateway.progress_stats().dropped.load(std::sync::atomic::Ordering::Relaxed);
    let before = dropped();
    let reply = call_with_token(&mut c, "demo__late_progress", json!({}), json!("late")).await;
    assert!(reply.outcome().is_ok());
    // The upstream reports progress for the finished call when its next request arrives; the
    // gateway drops it, forwarding nothing.
    c.call("demo__echo", json!({"text": "next"})).await.unwrap();
    settle(&mut c, || dropped() > before).await;
    c.call("demo__toggle_extra", json!({})).await.unwrap();
    let next = within(stream.next()).await.unwrap();
    assert_eq!(next.method(), Some("notifications/tools/list_changed"), "nothing else came first: {next:?}");
}

#[actix_rt::test]
async fn a_cancelled_call_is_stopped_upstream_and_gets_no_response() {
    let demo = DemoUpstream::start();
    let other = DemoUpstream::start();
    let gw = TestGateway::start(config_with(vec![demo.upstream("demo"), other.upstream("other")]));
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    let body = json!({"jsonrpc": "2.0", "id": 42, "method": "tools/call", "params": {"name": "demo__wait", "arguments": {"gate": "never"}, "_meta": {"progressToken": "c"}}});
    let caller = c.clone();
    let call = actix_rt::spawn(async move { caller.post_raw(body.to_string(), &[]).await });
    within(demo.demo.wait_in_flight(|n| *n == 1)).await;
    let status =
        c.notify("notifications/cancelled", Some(json!({"requestId": 42, "reason": "user pressed stop"}))).await;
    assert_eq!(status, 202);
    // The one upstream that owns the request observes it; the other sees nothing.
    within(demo.demo.wait_in_flight(|n| *n == 0)).await;
    assert_eq!(demo.demo.stats().cancelled, 1);
    assert_eq!(other.demo.stats().calls, 0);
    // No response is sent: the stream ends without one.
    let reply = within(call).await.unwrap();
    assert!(reply.messages.iter().all(|m| !m.is_response()), "{reply:?}");
    settle(&mut c, || gw.gateway.live_requests() == 0).await;
    assert_eq!(gw.gateway.progress_stats().live.load(std::sync::atomic::Ordering::Relaxed), 0);
}

#[actix_rt::test]
async fn unknown_early_malformed_and_initialize_cancellations_are_ignored() {
    let demo = DemoUpstream::start();
    let gw = TestGateway::start(config_with(vec![demo.upstream("demo")]));
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    for params in
        [json!({"requestId": "never-sent"}), json!({"requestId": {"x": 1}}), json!({}), json!({"requestId": 1})]
    {
        assert_eq!(c.notify("notifications/cancelled", Some(params)).await, 202);
    }
    // Cancelled before it was sent: the request then runs normally.
    assert_eq!(c.notify("notifications/cancelled", Some(json!({"requestId": 99}))).await, 202);
    let reply = c.post_raw(json!({"jsonrpc": "2.0", "id": 99, "method": "tools/call", "params": {"name": "demo__echo", "arguments": {"text": "still"}}}).to_string(), &[]).await;
    assert_eq!(reply.outcome().unwrap()["content"][0]["text"], "still");
    assert_eq!(demo.demo.stats().cancelled, 0);
}

#[actix_rt::test]
async fn an_upstream_withdrawing_its_request_reaches_the_client_with_the_mapped_id() {
    let demo = DemoUpstream::start();
    let gw = TestGateway::start(config_with(vec![demo.upstream("demo")]));
    let mut c = McpClient::new(&gw.url);
    c.initialize_with("2025-11-25", json!({"elicitation": {"form": {}}})).await;
    let mut stream = c.open_stream().await.unwrap();
    // As a task, the upstream's request and its withdrawal both come on the GET stream.
    let created = c
        .request("tools/call", Some(json!({"name": "demo__ask", "arguments": {"withdraw": true}, "task": {}})))
        .await
        .outcome()
        .unwrap();
    assert!(created["task"]["taskId"].is_string());
    let asked = loop {
        if let Some(Message::Request { id, .. }) = within(stream.next()).await {
            break id;
        }
    };
    assert!(matches!(&asked, RequestId::String(s) if s.starts_with("taskgate-")));
    let params = loop {
        match within(stream.next()).await {
            Some(Message::Notification { method, params: Some(p) }) if method == "notifications/cancelled" => break p,
            _ => {}
        }
    };
    assert_eq!(RequestId::from_value(&params["requestId"]), Some(asked), "the id the client knows");
    assert_eq!(params["reason"], "no longer needed");
}

#[actix_rt::test]
async fn client_progress_on_a_relayed_request_reaches_its_upstream() {
    let demo = DemoUpstream::start();
    let gw = TestGateway::start(config_with(vec![demo.upstream("demo")]));
    let mut c = McpClient::new(&gw.url);
    c.initialize_with("2025-11-25", json!({"elicitation": {"form": {}}})).await;
    let mut stream =
        c.request_stream("tools/call", Some(json!({"name": "demo__ask", "arguments": {"question": "?"}}))).await;
    let Some(Message::Request { id: asked, params: Some(params), .. }) = within(stream.next()).await else { panic!() };
    let token = params["_meta"]["progressToken"].clone();
    assert_eq!(c.notify("notifications/progress", Some(json!({"progressToken": token, "progress": 1}))).await, 202);
    assert_eq!(
        c.post_message(&Message::response(asked, json!({"action": "accept", "content": {"answer": "ok"}})))
            .await
            .status,
        202
    );
    while within(stream.next()).await.is_some() {}
    let seen = demo.demo.stats().client_progress;
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0]["progressToken"], token);
}

#[actix_rt::test]
async fn ten_thousand_calls_with_random_cancellations_leave_nothing_behind() {
    let demo = DemoUpstream::start();
    let mut config = Config { upstreams: vec![demo.upstream("demo")], ..Config::default() };
    config.server.session_mailbox = 1024;
    let gw = TestGateway::start(config);
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    let mut seed: u64 = 0x5eed;
    let mut next = move || {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 33) % 100
    };
    let total = 10_000usize;
    let concurrency = 64;
    let (mut cancelled, mut answered) = (0usize, 0usize);
    let mut running = Vec::new();
    for i in 0..total {
        let roll = next();
        let id = 1_000_000 + i as i64;
        let (tool, args, token) = match roll {
            0..=49 => ("demo__echo", json!({"text": "x"}), None),
            50..=69 => ("demo__slow", json!({"ms": 2, "steps": 2}), Some(json!(format!("p{i}")))),
            _ => ("demo__slow", json!({"ms": 5, "steps": 1}), Some(json!(i))),
        };
        let mut params = json!({"name": tool, "arguments": args});
        if let Some(token) = token {
            params["_meta"] = json!({"progressToken": token});
        }
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}).to_string();
        let caller = c.clone();
        let cancel = roll >= 70;
        running.push(actix_rt::spawn(async move {
            let call = caller.post_raw(body, &[]);
            if cancel {
                let canceller = caller.clone();
                let cancel = async move {
                    canceller
                        .notify("notifications/cancelled", Some(json!({"requestId": id, "reason": "random"})))
                        .await
                };
                let (reply, status) = tokio::join!(call, cancel);
                assert_eq!(status, 202);
                reply
            } else {
                call.await
            }
        }));
        if running.len() >= concurrency {
            for handle in running.drain(..) {
                let reply = within(handle).await.unwrap();
                if reply.messages.iter().any(|m| m.is_response()) {
                    answered += 1;
                } else {
                    cancelled += 1;
                }
            }
        }
    }
    for handle in running.drain(..) {
        let reply = within(handle).await.unwrap();
        if reply.messages.iter().any(|m| m.is_response()) {
            answered += 1;
        } else {
            cancelled += 1;
        }
    }
    assert_eq!(answered + cancelled, total);
    assert!(answered >= total / 2, "answered {answered}");
    settle(&mut c, || {
        gw.gateway.live_requests() == 0
            && gw.gateway.progress_stats().live.load(std::sync::atomic::Ordering::Relaxed) == 0
    })
    .await;
    eprintln!("10k calls: {answered} answered, {cancelled} cancelled before their response");
}

#[actix_rt::test]
async fn notifications_cancelled_for_a_task_augmented_request_is_ignored() {
    let demo = DemoUpstream::start_with_tasks();
    let gw = TestGateway::start(config_with(vec![demo.upstream("demo")]));
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    let body = json!({"jsonrpc": "2.0", "id": 55, "method": "tools/call",
        "params": {"name": "demo__slow", "arguments": {"ms": 1, "hold_create": "create"}, "task": {}}});
    let caller = c.clone();
    let call = actix_rt::spawn(async move { caller.post_raw(body.to_string(), &[]).await });
    within(demo.demo.wait_in_flight(|n| *n == 1)).await;
    // Tasks are cancelled with tasks/cancel; this notification names a task-augmented request.
    assert_eq!(c.notify("notifications/cancelled", Some(json!({"requestId": 55}))).await, 202);
    assert_eq!(c.request("ping", None).await.status, 200);
    demo.demo.release("create");
    let reply = within(call).await.unwrap();
    let created = reply.outcome().expect("the CreateTaskResult is still sent");
    assert!(created["task"]["taskId"].is_string());
    assert_eq!(demo.demo.stats().cancelled, 0, "the upstream was not told to cancel");
}
