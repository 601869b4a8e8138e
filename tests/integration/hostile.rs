//! Hostile clients and faulty upstreams (issue 12): every resource a client can make the gateway
//! hold is bounded in bytes and time, bad identifiers and JSON are refused, and what an upstream
//! gets wrong is answered as its mistake.

use serde_json::{json, Value};
use taskgate_testkit::{config_with, DemoUpstream, McpClient, TestGateway};

use crate::support::within;

fn error_code(reply: &taskgate_testkit::Reply) -> i64 {
    reply.outcome().expect_err("an error response").code
}

/// A `tools/call` whose SSE reply is never read: the response is held open, unread.
async fn call_without_reading(c: &McpClient, id: u64, name: &str, arguments: Value) -> reqwest::Response {
    let body =
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": arguments}});
    let response =
        reqwest::Client::new().post(&c.url).headers(c.headers()).body(body.to_string()).send().await.unwrap();
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    response
}

#[actix_rt::test]
async fn a_client_that_stops_reading_is_dropped_at_its_byte_budget_and_its_call_cancelled() {
    let demo = DemoUpstream::start();
    let mut config = config_with(vec![demo.upstream("demo")]);
    config.server.stream_buffer_bytes = 64 * 1024;
    config.server.session_buffer_bytes = 256 * 1024;
    let gw = TestGateway::start(config);
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    // 200 MB of log messages about the call, then it would wait forever: only the budget ends it.
    let unread =
        call_without_reading(&c, 7, "demo__chatter", json!({"count": 2000, "bytes": 100_000, "gate": "never"})).await;
    let stats = demo.demo.clone();
    within(demo.demo.wait_in_flight(|_| stats.stats().cancelled >= 1)).await;
    assert_eq!(demo.demo.stats().cancelled, 1, "the call was cancelled upstream");
    let metrics = gw.gateway.render_metrics().await;
    assert!(
        metrics.contains(r#"taskgate_client_streams_dropped_total{stream="request",tenant="anonymous"} 1"#),
        "{metrics}"
    );
    // Nothing is left queued for it, and the session serves its next request.
    assert!(metrics.contains("taskgate_client_stream_bytes 0"), "{metrics}");
    assert_eq!(c.call("demo__echo", json!({"text": "still here"})).await.unwrap()["content"][0]["text"], "still here");
    drop(unread);
}

#[actix_rt::test]
async fn the_reply_stream_ends_with_the_response_when_an_upstream_request_is_left_unanswered() {
    let demo = DemoUpstream::start();
    let gw = TestGateway::start(config_with(vec![demo.upstream("demo")]));
    let mut c = McpClient::new(&gw.url);
    c.initialize_with("2025-11-25", json!({"elicitation": {}})).await;
    let mut stream =
        c.request_stream("tools/call", Some(json!({"name": "demo__ask", "arguments": {"wait": false}}))).await;
    let asked = within(stream.next()).await.expect("the elicitation request");
    assert_eq!(asked.method(), Some("elicitation/create"));
    let response = within(stream.next()).await.expect("the response");
    assert!(response.is_response(), "{response:?}");
    assert!(within(stream.next()).await.is_none(), "the stream ends with the response");
}

#[actix_rt::test]
async fn a_server_request_for_a_capability_the_client_did_not_declare_is_refused_for_it() {
    let demo = DemoUpstream::start();
    let gw = TestGateway::start(config_with(vec![demo.upstream("demo")]));
    let mut c = McpClient::new(&gw.url);
    c.initialize_with("2025-11-25", json!({})).await;
    let mut stream =
        c.request_stream("tools/call", Some(json!({"name": "demo__ask", "arguments": {"question": "?"}}))).await;
    // The client sees no elicitation; the upstream got -32601 on its behalf and failed the call.
    let only = within(stream.next()).await.expect("the response");
    let error = match only {
        taskgate_protocol::Message::Error { error, .. } => error,
        other => panic!("expected the call's error, got {other:?}"),
    };
    assert_eq!(error.code, -32601, "{error:?}");
    assert!(error.message.contains("elicitation"), "{}", error.message);
    assert!(within(stream.next()).await.is_none());
}

#[actix_rt::test]
async fn client_chosen_identifiers_are_bounded_and_typed() {
    let demo = DemoUpstream::start();
    let gw = TestGateway::start(config_with(vec![demo.upstream("demo")]));
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    let long = "t".repeat(taskgate_protocol::mcp::MAX_ID_BYTES + 1);
    let fits = "t".repeat(taskgate_protocol::mcp::MAX_ID_BYTES);
    let call =
        |token: Value| json!({"name": "demo__echo", "arguments": {"text": "x"}, "_meta": {"progressToken": token}});
    for token in [Value::Null, json!(true), json!(1.5), json!({}), json!([1]), json!(long)] {
        let r = c.request("tools/call", Some(call(token.clone()))).await;
        assert_eq!(error_code(&r), -32602, "progress token {token:.40}");
    }
    for token in [json!(fits), json!(7), json!("ok")] {
        assert!(c.request("tools/call", Some(call(token))).await.outcome().is_ok());
    }
    for method in ["tasks/get", "tasks/result", "tasks/cancel"] {
        let r = c.request(method, Some(json!({"taskId": long}))).await;
        assert_eq!(error_code(&r), -32602, "{method}");
    }
    for method in ["tools/list", "tasks/list"] {
        let r = c.request(method, Some(json!({"cursor": long}))).await;
        assert_eq!(error_code(&r), -32602, "{method}");
    }
    // A request id too long to echo: refused with a null id.
    let r = c.post_raw(json!({"jsonrpc": "2.0", "id": long, "method": "ping"}).to_string(), &[]).await;
    match r.response() {
        taskgate_protocol::Message::Error { id, error } => {
            assert_eq!((id, error.code), (&None, -32602));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(c.request("ping", None).await.outcome().unwrap(), json!({}));
}

#[actix_rt::test]
async fn duplicate_keys_by_position_params_and_a_version_other_than_the_negotiated_one_are_refused() {
    let demo = DemoUpstream::start();
    let gw = TestGateway::start(config_with(vec![demo.upstream("demo")]));
    let mut c = McpClient::new(&gw.url);
    c.initialize_with("2025-03-26", json!({})).await;
    let dup = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"demo__echo","name":"demo__add","arguments":{}}}"#;
    let r = c.post_raw(dup, &[("mcp-protocol-version", "2025-03-26")]).await;
    assert_eq!(error_code(&r), -32700);
    assert!(r.outcome().unwrap_err().message.contains("duplicate key"));
    let r = c
        .post_raw(r#"{"jsonrpc":"2.0","id":2,"method":"ping","params":[]}"#, &[("mcp-protocol-version", "2025-03-26")])
        .await;
    assert_eq!(error_code(&r), -32600);
    // basic/transports "Protocol Version Header": a version this session did not negotiate is 400.
    let r = c.post_raw(r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#, &[("mcp-protocol-version", "2025-11-25")]).await;
    assert_eq!(r.status, 400);
    let r = c.post_raw(r#"{"jsonrpc":"2.0","id":4,"method":"ping"}"#, &[("mcp-protocol-version", "2025-03-26")]).await;
    assert_eq!(r.outcome().unwrap(), json!({}));
}

#[actix_rt::test]
async fn an_upstream_result_that_is_not_an_object_is_the_upstreams_error() {
    let demo = DemoUpstream::start();
    let gw = TestGateway::start(config_with(vec![demo.upstream("demo")]));
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    let error = c.call("demo__broken", json!({})).await.unwrap_err();
    assert_eq!(error.code, -32001, "{error:?}");
    assert!(error.message.contains("not an object"), "{}", error.message);
}

#[actix_rt::test]
async fn a_ttl_below_the_minimum_is_raised_to_it() {
    let demo = DemoUpstream::start();
    let gw = TestGateway::start(config_with(vec![demo.upstream("demo")]));
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    for asked in [0, 50] {
        let created = c
            .request(
                "tools/call",
                Some(json!({"name": "demo__echo", "arguments": {"text": "x"}, "task": {"ttl": asked}})),
            )
            .await;
        let ttl = created.outcome().unwrap()["task"]["ttl"].as_u64().unwrap();
        assert_eq!(ttl, taskgate_config::defaults::MIN_TTL_MS, "asked {asked}");
    }
}

#[actix_rt::test]
async fn the_upstream_timeout_fires_on_time_while_the_upstream_floods_notifications() {
    let demo = DemoUpstream::start();
    let mut upstream = demo.upstream("demo");
    upstream.timeout_secs = 1;
    let gw = TestGateway::start(config_with(vec![upstream]));
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    let started = std::time::Instant::now();
    let mut stream = c
        .request_stream(
            "tools/call",
            Some(json!({"name": "demo__chatter", "arguments": {"count": 1_000_000, "bytes": 10, "gate": "never"}})),
        )
        .await;
    let mut notes = 0;
    let error = loop {
        match within(stream.next()).await.expect("the stream ended without a response") {
            taskgate_protocol::Message::Notification { .. } => notes += 1,
            taskgate_protocol::Message::Error { error, .. } => break error,
            other => panic!("expected the timeout error, got {other:?}"),
        }
    };
    assert!(error.message.contains("did not answer within 1s"), "{error:?}");
    assert!(notes > 0);
    // A bound, not a timing: the flood must not hold the 1 s timeout back (it fired after 2-3x
    // its time before).
    assert!(started.elapsed() < std::time::Duration::from_secs(4), "{:?}", started.elapsed());
}
