//! Upstream sessions: lazily opened per client session with the client's capabilities,
//! re-initialized when expired, bounded stdio processes, and dead upstreams.

use serde_json::json;
use taskgate_config::UpstreamConfig;
use taskgate_testkit::{config_with, stdio_demo_upstream, DemoUpstream, McpClient, TestGateway};

#[actix_rt::test]
async fn one_upstream_session_per_client_session_declaring_the_clients_capabilities() {
    let demo = DemoUpstream::start();
    let gw = TestGateway::start(config_with(vec![demo.upstream("demo")]));
    let mut c = McpClient::new(&gw.url);
    let caps = json!({"elicitation": {"form": {}}, "roots": {"listChanged": true}});
    c.initialize_with("2025-11-25", caps.clone()).await;
    c.tool_names().await; // the catalog session is the gateway's own
    let before = demo.demo.stats().initializes;
    c.call("demo__echo", json!({"text": "1"})).await.unwrap();
    c.call("demo__echo", json!({"text": "2"})).await.unwrap();
    let stats = demo.demo.stats();
    assert_eq!(stats.initializes, before + 1, "opened lazily, once");
    assert_eq!(stats.last_client_capabilities, caps);
    assert_eq!(stats.last_client_info["name"], "taskgate-tests");
    let mut d = McpClient::new(&gw.url);
    d.initialize().await;
    d.call("demo__echo", json!({"text": "3"})).await.unwrap();
    assert_eq!(demo.demo.stats().initializes, before + 2, "another client session, another upstream session");
    // Ending the client session ends its upstream session (DELETE upstream).
    let sessions = demo.http.sessions();
    assert_eq!(c.delete().await, 200);
    within(demo.http.wait_sessions(|n| *n < sessions)).await;
}

/// Bounds a wait on an event so that a bug fails the test instead of hanging it.
async fn within<F: std::future::Future>(event: F) -> F::Output {
    tokio::time::timeout(std::time::Duration::from_secs(30), event)
        .await
        .expect("the awaited event did not happen within 30 s")
}

#[actix_rt::test]
async fn an_expired_upstream_session_is_reinitialized_transparently() {
    let demo = DemoUpstream::start();
    let gw = TestGateway::start(config_with(vec![demo.upstream("demo")]));
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    c.call("demo__echo", json!({"text": "before"})).await.unwrap();
    let before = demo.demo.stats().initializes;
    demo.http.expire_sessions();
    assert_eq!(c.call("demo__echo", json!({"text": "after"})).await.unwrap()["content"][0]["text"], "after");
    assert_eq!(demo.demo.stats().initializes, before + 1);
}

#[actix_rt::test]
async fn a_down_upstream_gives_an_error_naming_it_and_the_session_keeps_working() {
    let demo = DemoUpstream::start();
    let dead = DemoUpstream::start();
    let dead_config = dead.upstream("dead");
    dead.http.stop().await;
    let gw = TestGateway::start(config_with(vec![
        demo.upstream("demo"),
        dead_config,
        UpstreamConfig::http("never", "http://127.0.0.1:1/mcp"),
    ]));
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    // The listing has the live upstream's tools; the dead ones are left out.
    let names = c.tool_names().await;
    assert!(names.iter().all(|n| n.starts_with("demo__")), "{names:?}");
    assert_eq!(names.len(), 16);
    for name in ["dead__echo", "never__echo"] {
        let error = c.call(name, json!({"text": "x"})).await.unwrap_err();
        assert_eq!(error.code, -32001, "{error:?}");
        let upstream = name.split("__").next().unwrap();
        assert!(error.message.contains(&format!("'{upstream}'")), "{}", error.message);
        assert_eq!(error.data.unwrap()["upstream"], upstream);
    }
    assert_eq!(c.call("demo__echo", json!({"text": "fine"})).await.unwrap()["content"][0]["text"], "fine");
}

#[actix_rt::test]
async fn an_upstream_that_dies_mid_call_fails_that_call_only() {
    let demo = DemoUpstream::start();
    let other = DemoUpstream::start();
    let gw = TestGateway::start(config_with(vec![demo.upstream("demo"), other.upstream("other")]));
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    let mut caller = c.clone();
    let call = actix_rt::spawn(async move { caller.call("demo__wait", json!({"gate": "never"})).await });
    within(demo.demo.wait_in_flight(|n| *n == 1)).await;
    demo.http.stop().await;
    let error = call.await.unwrap().unwrap_err();
    assert_eq!(error.code, -32001);
    assert!(error.message.contains("'demo'"), "{}", error.message);
    assert_eq!(c.call("other__echo", json!({"text": "alive"})).await.unwrap()["content"][0]["text"], "alive");
}

#[actix_rt::test]
async fn stdio_processes_are_bounded_per_upstream() {
    let mut local = stdio_demo_upstream("local");
    local.max_processes = 2; // one is the catalog's own session
    let gw = TestGateway::start(config_with(vec![local]));
    let mut a = McpClient::new(&gw.url);
    a.initialize().await;
    a.tool_names().await;
    assert_eq!(a.call("local__echo", json!({"text": "a"})).await.unwrap()["content"][0]["text"], "a");
    let mut b = McpClient::new(&gw.url);
    b.initialize().await;
    let error = b.call("local__echo", json!({"text": "b"})).await.unwrap_err();
    assert_eq!(error.code, -32002);
    assert!(error.message.contains("'local'") && error.message.contains("max_processes"), "{}", error.message);
    // a's session keeps its process.
    assert_eq!(a.call("local__echo", json!({"text": "again"})).await.unwrap()["content"][0]["text"], "again");
}

#[actix_rt::test]
async fn a_stdio_upstream_that_cannot_start_is_reported_by_name() {
    let gw = TestGateway::start(config_with(vec![UpstreamConfig::stdio("broken", "/nonexistent/mcp-server", vec![])]));
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    assert!(c.tool_names().await.is_empty());
    let error = c.call("broken__anything", json!({})).await.unwrap_err();
    assert_eq!(error.code, -32001);
    assert!(
        error.message.contains("'broken'") && error.message.contains("/nonexistent/mcp-server"),
        "{}",
        error.message
    );
}
