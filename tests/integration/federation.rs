//! Tool federation (server/tools, server/utilities/pagination): merged catalog, names,
//! collisions, cursors, list_changed, and calls routed to the owning upstream.

use serde_json::json;
use taskgate_protocol::Message;
use taskgate_testkit::{config_with, stdio_demo_upstream, DemoUpstream, McpClient, TestGateway};

const DEMO_TOOLS: [&str; 16] = [
    "add",
    "ask",
    "blob",
    "broken",
    "chatter",
    "echo",
    "error",
    "fail",
    "late_progress",
    "progress",
    "slow",
    "toggle_extra",
    "toggle_prompt",
    "toggle_resource",
    "touch",
    "wait",
];

#[actix_rt::test]
async fn tools_list_merges_upstreams_in_a_deterministic_prefixed_order() {
    let a = DemoUpstream::start();
    let b = DemoUpstream::start();
    let gw =
        TestGateway::start(config_with(vec![b.upstream("beta"), a.upstream("alpha"), stdio_demo_upstream("local")]));
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    let names = c.tool_names().await;
    let mut expected: Vec<String> =
        ["alpha", "beta", "local"].iter().flat_map(|u| DEMO_TOOLS.iter().map(move |t| format!("{u}__{t}"))).collect();
    expected.sort();
    assert_eq!(names, expected);
    // Same order for another session.
    let mut d = McpClient::new(&gw.url);
    d.initialize().await;
    assert_eq!(d.tool_names().await, expected);
    // Tool objects keep everything but the name, and gain the task support the gateway offers.
    let result = c.request("tools/list", None).await.outcome().unwrap();
    let add = result["tools"].as_array().unwrap().iter().find(|t| t["name"] == "alpha__add").unwrap().clone();
    let mut original = a.demo.tools().into_iter().find(|t| t["name"] == "add").unwrap();
    original["name"] = json!("alpha__add");
    original["execution"] = json!({"taskSupport": "optional"});
    assert_eq!(add, original);
}

#[actix_rt::test]
async fn pagination_walks_every_tool_once_with_opaque_cursors() {
    let a = DemoUpstream::start();
    let b = DemoUpstream::start();
    let mut config = config_with(vec![a.upstream("a"), b.upstream("b")]);
    config.federation.page_size = 3;
    let gw = TestGateway::start(config);
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    let first = c.request("tools/list", None).await.outcome().unwrap();
    assert_eq!(first["tools"].as_array().unwrap().len(), 3);
    let cursor = first["nextCursor"].as_str().unwrap();
    assert!(!cursor.contains("a__"), "cursors are opaque: {cursor}");
    let names = c.tool_names().await;
    assert_eq!(names.len(), 2 * DEMO_TOOLS.len());
    let mut dedup = names.clone();
    dedup.dedup();
    assert_eq!(dedup, names);
    // A cursor from nowhere is -32602.
    let bad = c.request("tools/list", Some(json!({"cursor": "dG9vbHM6"}))).await;
    assert!(bad.outcome().is_ok(), "an empty position is a valid cursor of ours");
    let bad = c.request("tools/list", Some(json!({"cursor": "not a cursor"}))).await;
    assert_eq!(bad.outcome().unwrap_err().code, -32602);
}

#[actix_rt::test]
async fn unprefixed_upstreams_and_collisions_naming_both() {
    let a = DemoUpstream::start();
    let b = DemoUpstream::start();
    let mut first = a.upstream("first");
    first.prefix = false;
    let mut second = b.upstream("second");
    second.prefix = false;
    let gw = TestGateway::start(config_with(vec![first, second]));
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    // Each name once; the first upstream in the configuration keeps it.
    let names = c.tool_names().await;
    assert_eq!(names, DEMO_TOOLS.iter().map(|t| t.to_string()).collect::<Vec<_>>());
    c.call("echo", json!({"text": "who"})).await.unwrap();
    assert_eq!(a.demo.stats().calls, 1);
    assert_eq!(b.demo.stats().calls, 0);
    let collisions = gw.gateway.collisions();
    assert_eq!(collisions.len(), DEMO_TOOLS.len());
    let text = collisions[0].to_string();
    assert!(text.contains("'first'") && text.contains("'second'"), "{text}");
}

#[actix_rt::test]
async fn calls_return_the_upstream_result_or_error_unchanged() {
    let demo = DemoUpstream::start();
    let gw = TestGateway::start(config_with(vec![demo.upstream("demo")]));
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    let mut direct = McpClient::new(&demo.http.url);
    direct.initialize().await;
    for (tool, args) in
        [("add", json!({"a": 2, "b": 40})), ("echo", json!({"text": "héllo"})), ("fail", json!({"message": "nope"}))]
    {
        let through = c.call(&format!("demo__{tool}"), args.clone()).await;
        assert_eq!(through, direct.call(tool, args).await, "{tool}");
    }
    let failed = c.call("demo__fail", json!({})).await.unwrap();
    assert_eq!(failed["isError"], true);
    let error = c.call("demo__error", json!({"code": -32042, "message": "needs a URL"})).await.unwrap_err();
    assert_eq!((error.code, error.message.as_str()), (-32042, "needs a URL"));
    assert_eq!(error.data, Some(json!({"tool": "error"})));
    // Unknown fields in params and _meta reach the upstream untouched (invariant 5).
    let reply = c
        .request(
            "tools/call",
            Some(json!({"name": "demo__echo", "arguments": {"text": "m"}, "x-extra": 1, "_meta": {"vendor/key": [1]}})),
        )
        .await;
    assert_eq!(reply.outcome().unwrap()["content"][0]["text"], "m");
}

#[actix_rt::test]
async fn progress_of_a_plain_call_arrives_on_its_sse_stream_before_the_result() {
    let demo = DemoUpstream::start();
    let mut config = config_with(vec![demo.upstream("demo"), stdio_demo_upstream("local")]);
    config.progress.min_interval_ms = 0; // relay every value (coalescing has its own test)
    let gw = TestGateway::start(config);
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    for tool in ["demo__slow", "local__slow"] {
        let reply = c
            .request(
                "tools/call",
                Some(json!({"name": tool, "arguments": {"ms": 30, "steps": 3}, "_meta": {"progressToken": "tok"}})),
            )
            .await;
        assert!(reply.sse);
        let progress: Vec<_> = reply
            .notifications()
            .iter()
            .map(|m| match m {
                Message::Notification { params, .. } => params.as_ref().unwrap()["progress"].as_u64().unwrap(),
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(progress, [1, 2, 3], "{tool}");
        assert!(reply.messages.last().unwrap().is_response());
    }
}

#[actix_rt::test]
async fn list_changed_refreshes_the_catalog_and_reaches_clients() {
    let demo = DemoUpstream::start();
    let gw = TestGateway::start(config_with(vec![demo.upstream("demo")]));
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    assert!(!c.tool_names().await.contains(&"demo__extra".to_string()));
    let mut stream = c.open_stream().await.unwrap();
    c.call("demo__toggle_extra", json!({})).await.unwrap();
    // The upstream announces the change; the gateway relists it, then tells the client.
    let note = stream.next().await.expect("list_changed");
    assert_eq!(note.method(), Some("notifications/tools/list_changed"));
    assert!(c.tool_names().await.contains(&"demo__extra".to_string()));
    assert_eq!(c.call("demo__extra", json!({})).await.unwrap()["content"][0]["text"], "extra");
}
