//! Upstream sessions shared by client sessions (`upstream[].share_sessions`): the
//! client sessions of one tenant, principal and declared client that can be asked nothing use
//! one upstream session; each request's progress, log messages, cancellation and result reach
//! only the client that made it, and what the upstream announces to the session reaches every
//! sharing client. A client that sets a log level or subscribes gets a session of its own; a
//! client that can be asked things never shares.

use serde_json::{json, Value};
use taskgate_config::{ShareSessions, UpstreamConfig};
use taskgate_core::tenants::hash_key;
use taskgate_protocol::Message;
use taskgate_testkit::{config_with, DemoUpstream, McpClient, TestGateway};

use crate::support::within;

/// The demo upstream, its sessions shared, kept `idle` seconds after their last client.
fn shared(demo: &DemoUpstream, idle: u64) -> UpstreamConfig {
    UpstreamConfig { share_sessions: ShareSessions::Always, shared_idle_secs: idle, ..demo.upstream("demo") }
}

fn gateway(upstream: UpstreamConfig) -> TestGateway {
    let mut config = config_with(vec![upstream]);
    config.progress.min_interval_ms = 0;
    TestGateway::start(config)
}

fn sessions(gw: &TestGateway, shared: &str) -> i64 {
    gw.gateway.metrics().upstream_sessions.with_label_values(&["demo", shared]).get()
}

fn of_method<'a>(messages: &[&'a Message], wanted: &str) -> Vec<&'a Value> {
    messages
        .iter()
        .filter_map(|m| match m {
            Message::Notification { method, params: Some(p) } if method == wanted => Some(p),
            _ => None,
        })
        .collect()
}

async fn call_with_token(c: &McpClient, id: i64, tool: &str, args: Value, token: &str) -> taskgate_testkit::Reply {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": tool, "arguments": args, "_meta": {"progressToken": token}}});
    c.post_raw(body.to_string(), &[]).await
}

/// Two clients sharing the demo's session, each having made one call.
async fn two_sharing_clients() -> (DemoUpstream, TestGateway, McpClient, McpClient) {
    let demo = DemoUpstream::start();
    let gw = gateway(shared(&demo, 60));
    let (mut a, mut b) = (McpClient::new(&gw.url), McpClient::new(&gw.url));
    a.initialize().await;
    b.initialize().await;
    a.call("demo__echo", json!({"text": "a"})).await.unwrap();
    b.call("demo__echo", json!({"text": "b"})).await.unwrap();
    (demo, gw, a, b)
}

/// Waits until the catalog session's GET stream and the shared session's (open for the
/// clients' own) are open.
async fn both_listening(gw: &TestGateway) {
    let open = async {
        while gw.gateway.metrics().upstream_streams.with_label_values(&["demo"]).get() != 2 {
            tokio::task::yield_now().await;
        }
    };
    within(open).await;
}

#[actix_rt::test]
async fn client_sessions_share_one_upstream_session_and_each_gets_only_its_own() {
    let demo = DemoUpstream::start();
    let gw = gateway(shared(&demo, 0));
    let (mut a, mut b) = (McpClient::new(&gw.url), McpClient::new(&gw.url));
    a.initialize().await;
    b.initialize().await;
    a.tool_names().await; // the catalog's own session is open
    let before = demo.demo.stats().initializes;
    a.call("demo__echo", json!({"text": "a"})).await.unwrap();
    assert_eq!(b.call("demo__echo", json!({"text": "b"})).await.unwrap()["content"][0]["text"], "b");
    assert_eq!(demo.demo.stats().initializes, before + 1, "one upstream session for both");
    assert_eq!(sessions(&gw, "true"), 1);

    // Progress and log messages of concurrent calls under the same token: each its own.
    let (ca, cb) = (a.clone(), b.clone());
    let ra =
        actix_rt::spawn(
            async move { call_with_token(&ca, 7, "demo__progress", json!({"values": [10, 20]}), "same").await },
        );
    let rb = actix_rt::spawn(async move {
        call_with_token(&cb, 7, "demo__progress", json!({"values": [30, 40, 50]}), "same").await
    });
    let (ra, rb) = (ra.await.unwrap(), rb.await.unwrap());
    let values = |r: &taskgate_testkit::Reply| -> Vec<(Value, f64)> {
        of_method(&r.notifications(), "notifications/progress")
            .iter()
            .map(|p| (p["progressToken"].clone(), p["progress"].as_f64().unwrap()))
            .collect()
    };
    assert_eq!(values(&ra), [(json!("same"), 10.0), (json!("same"), 20.0)]);
    assert_eq!(values(&rb), [(json!("same"), 30.0), (json!("same"), 40.0), (json!("same"), 50.0)]);
    let (ca, cb) = (a.clone(), b.clone());
    let la = actix_rt::spawn(async move {
        ca.clone()
            .request("tools/call", Some(json!({"name": "demo__chatter", "arguments": {"count": 2, "bytes": 3}})))
            .await
    });
    let lb = actix_rt::spawn(async move {
        cb.clone()
            .request("tools/call", Some(json!({"name": "demo__chatter", "arguments": {"count": 5, "bytes": 3}})))
            .await
    });
    let (la, lb) = (la.await.unwrap(), lb.await.unwrap());
    assert_eq!(of_method(&la.notifications(), "notifications/message").len(), 2);
    assert_eq!(of_method(&lb.notifications(), "notifications/message").len(), 5);

    // A cancellation stops the one call it names; the other client's call goes on.
    let (ca, cb) = (a.clone(), b.clone());
    let wa = actix_rt::spawn(async move { call_with_token(&ca, 42, "demo__wait", json!({"gate": "a"}), "wa").await });
    let wb = actix_rt::spawn(async move { call_with_token(&cb, 42, "demo__wait", json!({"gate": "b"}), "wb").await });
    within(demo.demo.wait_in_flight(|n| *n == 2)).await;
    let cancelled = demo.demo.stats().cancelled;
    assert_eq!(a.notify("notifications/cancelled", Some(json!({"requestId": 42}))).await, 202);
    within(demo.demo.wait_in_flight(|n| *n == 1)).await;
    assert_eq!(demo.demo.stats().cancelled, cancelled + 1);
    demo.demo.release("b");
    assert!(wb.await.unwrap().outcome().is_ok(), "b's call is not the one cancelled");
    let wa = wa.await.unwrap();
    assert!(wa.messages.iter().all(|m| !m.is_response()), "a cancelled call gets no response: {wa:?}");
    assert_eq!(demo.demo.stats().initializes, before + 1, "still the one upstream session");

    // The session ends with its last client (shared_idle_secs = 0), not with the first.
    let open = demo.http.sessions();
    assert_eq!(a.delete().await, 200);
    assert_eq!(b.call("demo__echo", json!({"text": "still"})).await.unwrap()["content"][0]["text"], "still");
    assert_eq!(demo.http.sessions(), open);
    assert_eq!(b.delete().await, 200);
    within(demo.http.wait_sessions(|n| *n < open)).await;
    assert_eq!(sessions(&gw, "true"), 0);
}

#[actix_rt::test]
async fn what_the_upstream_announces_reaches_every_sharing_client() {
    let (demo, gw, mut a, b) = two_sharing_clients().await;
    let mut streams = [a.open_stream().await.unwrap(), b.open_stream().await.unwrap()];
    both_listening(&gw).await;
    a.call("demo__toggle_resource", json!({})).await.unwrap();
    for stream in &mut streams {
        loop {
            match within(stream.next()).await.expect("the GET stream ended") {
                Message::Notification { method, .. } if method == "notifications/resources/list_changed" => break,
                _ => continue,
            }
        }
    }
    assert_eq!(sessions(&gw, "true"), 1);
    // Idle, a shared session outlives its clients for the next one.
    let initializes = demo.demo.stats().initializes;
    assert_eq!(a.delete().await, 200);
    assert_eq!(b.delete().await, 200);
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    c.call("demo__echo", json!({"text": "c"})).await.unwrap();
    assert_eq!(demo.demo.stats().initializes, initializes, "the idle shared session was reused");
}

#[actix_rt::test]
async fn a_log_level_or_a_subscription_takes_a_client_off_the_shared_session() {
    let demo = DemoUpstream::start();
    let gw = gateway(shared(&demo, 60));
    let (mut a, mut b, mut c) = (McpClient::new(&gw.url), McpClient::new(&gw.url), McpClient::new(&gw.url));
    for client in [&mut a, &mut b, &mut c] {
        client.initialize().await;
        client.call("demo__echo", json!({"text": "x"})).await.unwrap();
    }
    let before = demo.demo.stats().initializes;
    assert_eq!(sessions(&gw, "true"), 1);
    // a sets a level: it alone gets a session of its own, which takes the level.
    a.request("logging/setLevel", Some(json!({"level": "error"}))).await.outcome().unwrap();
    assert_eq!(demo.demo.stats().initializes, before + 1);
    assert_eq!(demo.demo.stats().log_levels, ["error"]);
    let chatter = json!({"name": "demo__chatter", "arguments": {"count": 2, "bytes": 3}});
    let quiet = a.request("tools/call", Some(chatter.clone())).await;
    let loud = b.request("tools/call", Some(chatter.clone())).await;
    assert_eq!(of_method(&quiet.notifications(), "notifications/message").len(), 0, "a's level holds at a's session");
    assert_eq!(of_method(&loud.notifications(), "notifications/message").len(), 2, "b's session has no level");
    // c subscribes: a session of its own as well.
    let listed = c.request("resources/list", None).await.outcome().unwrap();
    let counter = listed["resources"].as_array().unwrap().iter().find(|r| r["name"] == "counter").expect("the counter");
    c.request("resources/subscribe", Some(json!({"uri": counter["uri"]}))).await.outcome().unwrap();
    assert_eq!(demo.demo.stats().initializes, before + 2);
    assert_eq!(sessions(&gw, "false"), 3, "a's, c's and the catalog's");
    assert_eq!(sessions(&gw, "true"), 1, "b's, still shared");
}

#[actix_rt::test]
async fn tenants_principals_and_clients_that_can_be_asked_never_share() {
    let demo = DemoUpstream::start();
    let mut config = config_with(vec![shared(&demo, 60)]);
    let mut acme = taskgate_config::TenantConfig::new("acme");
    for (principal, key) in [("alice", "acme-alice-key-0001"), ("bob", "acme-bob-key-00001")] {
        acme.api_keys.push(taskgate_config::ApiKeyConfig { principal: principal.into(), sha256: hash_key(key) });
    }
    let mut globex = taskgate_config::TenantConfig::new("globex");
    globex
        .api_keys
        .push(taskgate_config::ApiKeyConfig { principal: "alice".into(), sha256: hash_key("globex-alice-key-1") });
    config.tenants = vec![acme, globex];
    let gw = TestGateway::start(config);
    let mut first = McpClient::with_bearer(&gw.url, "acme-alice-key-0001");
    first.initialize().await;
    first.call("demo__echo", json!({"text": "x"})).await.unwrap();
    let before = demo.demo.stats().initializes;
    // The same tenant and principal, declaring the same client: shared.
    let mut same = McpClient::with_bearer(&gw.url, "acme-alice-key-0001");
    same.initialize().await;
    same.call("demo__echo", json!({"text": "x"})).await.unwrap();
    assert_eq!(demo.demo.stats().initializes, before);
    // Another principal, another tenant, a client that can be asked things: each its own.
    let mut bob = McpClient::with_bearer(&gw.url, "acme-bob-key-00001");
    bob.initialize().await;
    bob.call("demo__echo", json!({"text": "x"})).await.unwrap();
    let mut other_tenant = McpClient::with_bearer(&gw.url, "globex-alice-key-1");
    other_tenant.initialize().await;
    other_tenant.call("demo__echo", json!({"text": "x"})).await.unwrap();
    let mut asks = McpClient::with_bearer(&gw.url, "acme-alice-key-0001");
    asks.initialize_with("2025-11-25", json!({"elicitation": {"form": {}}})).await;
    asks.call("demo__echo", json!({"text": "x"})).await.unwrap();
    // (And the catalog session listing tools for clients declaring elicitation.)
    assert_eq!(demo.demo.stats().initializes, before + 4);
    assert_eq!(sessions(&gw, "true"), 3, "alice's and bob's at acme, alice's at globex");
    assert_eq!(demo.demo.stats().last_client_capabilities, json!({"elicitation": {"form": {}}}));
}

/// A wrapped task's call runs on its own (no client request waits on its stream): what the
/// upstream sends about it is routed by the call, to the member of the client that created the
/// task, never to another sharing client.
#[actix_rt::test]
async fn what_a_task_hears_reaches_the_client_that_created_it_only() {
    let (_demo, gw, mut a, mut b) = two_sharing_clients().await;
    let (mut ga, mut gb) = (a.open_stream().await.unwrap(), b.open_stream().await.unwrap());
    both_listening(&gw).await;
    let task = crate::support::create(&mut a, "demo__chatter", json!({"count": 2, "bytes": 3})).await;
    let result = crate::support::method(&mut a, "tasks/result", &task).await.unwrap();
    assert_eq!(result["content"][0]["text"], "sent 2 messages");
    let mut logs = 0;
    while logs < 2 {
        if let Some(Message::Notification { method, params: Some(p) }) = within(ga.next()).await {
            if method == "notifications/message" {
                assert_eq!(p["_meta"]["io.modelcontextprotocol/related-task"]["taskId"], task.as_str());
                logs += 1;
            }
        }
    }
    // b hears the next announcement to the session, and nothing of a's task before it (the
    // session's messages reach the gateway in order).
    b.call("demo__toggle_resource", json!({})).await.unwrap();
    loop {
        match within(gb.next()).await.expect("b's GET stream ended") {
            Message::Notification { method, .. } if method == "notifications/resources/list_changed" => break,
            Message::Notification { method, .. } if method == "notifications/message" => {
                panic!("b heard a's task")
            }
            _ => continue,
        }
    }
}

/// A request an upstream sends in a shared session (here an elicitation the demo sends whatever
/// its client declared) is refused by the gateway at once: none of the sharing clients can
/// answer it, and it must not reach another client; the other client's call goes on.
#[actix_rt::test]
async fn a_request_from_the_upstream_in_a_shared_session_is_refused_and_reaches_no_client() {
    let (demo, gw, mut a, b) = two_sharing_clients().await;
    let mut listening = b.open_stream().await.unwrap();
    both_listening(&gw).await;
    let refused = a.call("demo__ask", json!({"question": "shared?"})).await.unwrap_err();
    assert_eq!(refused.code, -32601, "{refused:?}");
    assert!(refused.message.contains("elicitation/create was not relayed"), "{}", refused.message);
    assert_eq!(sessions(&gw, "true"), 1);
    // b saw nothing of it: the next thing on its stream is the next announcement.
    a.call("demo__toggle_resource", json!({})).await.unwrap();
    loop {
        match within(listening.next()).await.expect("b's GET stream ended") {
            Message::Notification { method, .. } if method == "notifications/resources/list_changed" => break,
            Message::Request { method, .. } => panic!("b was asked {method}"),
            _ => continue,
        }
    }
    drop(demo);
}
