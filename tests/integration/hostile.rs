//! Hostile clients and faulty upstreams: every resource a client can make the gateway
//! hold is bounded in bytes and time, bad identifiers and JSON are refused, and what an upstream
//! gets wrong is answered as its mistake.

use serde_json::{json, Value};
use taskgate_testkit::{config_with, DemoUpstream, McpClient, TestGateway};

use crate::support::within;

fn error_code(reply: &taskgate_testkit::Reply) -> i64 {
    reply.outcome().expect_err("an error response").code
}

/// A request whose reply is not read (the response is held open).
async fn post_unread(c: &McpClient, id: u64, method: &str, params: Value) -> reqwest::Response {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    reqwest::Client::new().post(&c.url).headers(c.headers()).body(body.to_string()).send().await.unwrap()
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
async fn a_client_that_reads_nothing_for_the_stall_time_is_dropped_and_its_call_cancelled() {
    let demo = DemoUpstream::start();
    let mut config = config_with(vec![demo.upstream("demo")]);
    config.server.stream_buffer_bytes = 64 * 1024;
    config.server.session_buffer_bytes = 256 * 1024;
    config.server.stream_stall_secs = 1;
    let gw = TestGateway::start(config);
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    // Log messages about the call without end, then it would wait forever: only the client's
    // stall ends it.
    let unread =
        call_without_reading(&c, 7, "demo__chatter", json!({"count": 1_000_000, "bytes": 1000, "gate": "never"})).await;
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

/// The value of one series in the metrics text.
fn series(metrics: &str, name: &str) -> u64 {
    metrics.lines().find_map(|l| l.strip_prefix(name)).and_then(|v| v.trim().parse().ok()).unwrap_or(0)
}

#[actix_rt::test]
async fn a_client_that_reads_keeps_its_call_through_a_burst_of_short_log_messages_and_drops_are_counted() {
    let demo = DemoUpstream::start();
    let gw = TestGateway::start(config_with(vec![demo.upstream("demo")]));
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    c.request("logging/setLevel", Some(json!({"level": "debug"}))).await.outcome().unwrap();
    let dropped = r#"taskgate_client_stream_messages_dropped_total{stream="request",tenant="anonymous"}"#;
    for round in 0..3 {
        let before = series(&gw.gateway.render_metrics().await, dropped);
        // 5,000 log messages far faster than one socket write each: the client reads as fast
        // as it can, and must get its response.
        let mut stream = c
            .request_stream(
                "tools/call",
                Some(json!({"name": "demo__chatter", "arguments": {"count": 5000, "bytes": 10}})),
            )
            .await;
        let mut notes = 0u64;
        let response = loop {
            match within(stream.next()).await.expect("the stream ended without a response") {
                taskgate_protocol::Message::Notification { .. } => notes += 1,
                other => break other,
            }
        };
        assert!(response.is_response(), "round {round}: {response:?}");
        assert!(within(stream.next()).await.is_none());
        drop(stream);
        // Every message is either delivered or counted as dropped: none is lost silently.
        within(async {
            while series(&gw.gateway.render_metrics().await, dropped) - before + notes != 5000 {
                tokio::task::yield_now().await;
            }
        })
        .await;
    }
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
async fn duplicate_keys_and_by_position_params_are_refused_and_an_unsupported_version_is_400() {
    let demo = DemoUpstream::start();
    let gw = TestGateway::start(config_with(vec![demo.upstream("demo")]));
    let mut c = McpClient::new(&gw.url);
    c.initialize_with("2025-03-26", json!({})).await;
    let dup = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"demo__echo","name":"demo__add","arguments":{}}}"#;
    let r = c.post_raw(dup, &[("mcp-protocol-version", "2025-03-26")]).await;
    assert_eq!(error_code(&r), -32700);
    assert!(r.outcome().unwrap_err().message.contains("duplicate key"));
    // Inside a call's arguments too (which the gateway passes on as written), at any depth,
    // and the arguments themselves twice.
    for dup in [
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"demo__echo","arguments":{"text":"a","text":"b"}}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"demo__echo","arguments":{"x":[{"k":1,"k":2}]}}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"demo__echo","arguments":{},"arguments":{}}}"#,
    ] {
        let r = c.post_raw(dup, &[("mcp-protocol-version", "2025-03-26")]).await;
        assert_eq!(error_code(&r), -32700, "{dup}");
        assert!(r.outcome().unwrap_err().message.contains("duplicate key"), "{dup}");
    }
    let r = c
        .post_raw(r#"{"jsonrpc":"2.0","id":2,"method":"ping","params":[]}"#, &[("mcp-protocol-version", "2025-03-26")])
        .await;
    assert_eq!(error_code(&r), -32600);
    // basic/transports "Protocol Version Header": an unsupported version is 400; another
    // supported one than the negotiated one is served (at the negotiated version).
    let r = c.post_raw(r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#, &[("mcp-protocol-version", "2024-10-07")]).await;
    assert_eq!(r.status, 400);
    let r = c.post_raw(r#"{"jsonrpc":"2.0","id":5,"method":"ping"}"#, &[("mcp-protocol-version", "2025-11-25")]).await;
    assert_eq!(r.outcome().unwrap(), json!({}));
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

/// Calls `demo__chatter` with a flood of progress notifications and no end through `upstream`
/// (4 s timeout): the timeout error must come within 10% of the timeout.
async fn the_timeout_fires_during_a_flood(mut upstream: taskgate_config::UpstreamConfig) {
    upstream.timeout_secs = 4;
    let gw = TestGateway::start(config_with(vec![upstream]));
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    let started = std::time::Instant::now();
    let mut stream = c
        .request_stream(
            "tools/call",
            Some(json!({"name": "demo__chatter", "arguments": {"count": 1_000_000, "bytes": 10, "gate": "never"},
                        "_meta": {"progressToken": "flood"}})),
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
    let took = started.elapsed();
    assert!(error.message.contains("did not answer within 4s"), "{error:?}");
    assert!(notes > 0);
    // The flood must not hold the timeout back (the relay polled the notifications first, so a
    // flood from a reader task starved the timeout).
    assert!(took < std::time::Duration::from_millis(4400), "{took:?} for a 4 s timeout");
}

#[actix_rt::test]
async fn the_upstream_timeout_fires_on_time_while_an_http_upstream_floods_notifications() {
    let demo = DemoUpstream::start();
    the_timeout_fires_during_a_flood(demo.upstream("demo")).await;
}

#[actix_rt::test]
async fn the_upstream_timeout_fires_on_time_while_a_stdio_upstream_floods_notifications() {
    // Over stdio a reader task feeds the call's progress, so a flood never pauses while the
    // relay awaits the progress actor for each notification.
    the_timeout_fires_during_a_flood(taskgate_testkit::stdio_demo_upstream("demo")).await;
}

/// A fake server that floods a call with 1 KB log messages (or progress) as fast as its
/// transport takes them and never answers (`tests/interop/python/flood_server.py`).
struct FloodServer {
    child: std::process::Child,
    url: String,
}

impl FloodServer {
    fn script() -> String {
        taskgate_testkit::interop_dir().join("python/flood_server.py").display().to_string()
    }

    fn http() -> FloodServer {
        use std::io::BufRead;
        let mut child = std::process::Command::new("python3")
            .args([Self::script().as_str(), "--http"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3 runs");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let port = line.trim().strip_prefix("listening on ").expect("the port").to_owned();
        FloodServer { child, url: format!("http://127.0.0.1:{port}/mcp") }
    }

    fn stdio(name: &str) -> taskgate_config::UpstreamConfig {
        taskgate_config::UpstreamConfig::stdio(name, "python3", vec![Self::script()])
    }
}

impl Drop for FloodServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Calls the flood server's tool through `upstream` (4 s timeout), reading the call's stream
/// and the session's GET stream: the timeout error comes within 10% of the timeout.
async fn the_deadline_holds_against_a_flooding_server(mut upstream: taskgate_config::UpstreamConfig, kind: &str) {
    upstream.timeout_secs = 4;
    let gw = TestGateway::start(config_with(vec![upstream]));
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    c.request("logging/setLevel", Some(json!({"level": "debug"}))).await.outcome().unwrap();
    let mut events = c.open_stream().await.expect("a GET stream");
    let drain = actix_rt::spawn(async move {
        let mut n = 0u64;
        while events.next().await.is_some() {
            n += 1;
        }
        n
    });
    let started = std::time::Instant::now();
    let mut stream = c
        .request_stream(
            "tools/call",
            Some(json!({"name": "flood__flood", "arguments": {"kind": kind}, "_meta": {"progressToken": "f"}})),
        )
        .await;
    let error = loop {
        match within(stream.next()).await.expect("the stream ended without a response") {
            taskgate_protocol::Message::Notification { .. } => {}
            taskgate_protocol::Message::Error { error, .. } => break error,
            other => panic!("expected the timeout error, got {other:?}"),
        }
    };
    let took = started.elapsed();
    assert!(error.message.contains("did not answer within 4s"), "{error:?}");
    assert!(took < std::time::Duration::from_millis(4400), "{kind}: {took:?} for a 4 s timeout");
    drop(c);
    drain.abort();
}

#[actix_rt::test]
async fn the_deadline_holds_against_an_http_server_flooding_log_messages() {
    let server = FloodServer::http();
    the_deadline_holds_against_a_flooding_server(taskgate_config::UpstreamConfig::http("flood", &server.url), "log")
        .await;
}

#[actix_rt::test]
async fn the_deadline_holds_against_an_http_server_flooding_progress() {
    let server = FloodServer::http();
    the_deadline_holds_against_a_flooding_server(
        taskgate_config::UpstreamConfig::http("flood", &server.url),
        "progress",
    )
    .await;
}

#[actix_rt::test]
async fn the_deadline_holds_against_a_stdio_server_flooding_log_messages() {
    the_deadline_holds_against_a_flooding_server(FloodServer::stdio("flood"), "log").await;
}

#[actix_rt::test]
async fn the_deadline_holds_against_a_stdio_server_flooding_progress() {
    the_deadline_holds_against_a_flooding_server(FloodServer::stdio("flood"), "progress").await;
}

#[actix_rt::test]
async fn a_result_over_the_byte_budget_fails_its_task_saying_so() {
    let demo = DemoUpstream::start();
    let mut config = config_with(vec![demo.upstream("demo")]);
    config.tasks.max_result_bytes_total = 300_000;
    let gw = TestGateway::start(config);
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    let fits = crate::support::create(&mut c, "demo__blob", json!({"bytes": 200_000})).await;
    let result = within(crate::support::method(&mut c, "tasks/result", &fits)).await.unwrap();
    assert_eq!(result["content"][0]["text"].as_str().unwrap().len(), 200_000);
    let metrics = gw.gateway.render_metrics().await;
    let held: f64 = metrics
        .lines()
        .find(|l| l.starts_with(r#"taskgate_task_result_bytes{tenant="anonymous"}"#))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .expect("result bytes held");
    assert!((200_000.0..210_000.0).contains(&held), "{held}");
    // The next one does not fit: failed, saying why, and tasks/result says it too.
    let over = crate::support::create(&mut c, "demo__blob", json!({"bytes": 200_000})).await;
    let error = within(crate::support::method(&mut c, "tasks/result", &over)).await.unwrap_err();
    assert_eq!(error.code, taskgate_protocol::codes::LIMIT_EXCEEDED);
    assert!(error.message.contains("does not fit") && error.message.contains("max_result_bytes_total"), "{error:?}");
    let task = crate::support::method(&mut c, "tasks/get", &over).await.unwrap();
    assert_eq!(task["status"], "failed");
    assert!(task["statusMessage"].as_str().unwrap().contains("does not fit"));
    // A small result still fits beside the first.
    let small = crate::support::create(&mut c, "demo__echo", json!({"text": "small"})).await;
    assert!(within(crate::support::method(&mut c, "tasks/result", &small)).await.is_ok());
}

#[actix_rt::test]
async fn one_tenant_cannot_take_all_of_a_gateway_wide_pool() {
    use taskgate_config::{ApiKeyConfig, TenantConfig};
    let demo = DemoUpstream::start();
    let mut config = config_with(vec![demo.upstream("demo")]);
    config.server.max_sessions = 4;
    config.server.max_streams = 8;
    config.tasks.max_tasks = 4;
    // Two tenants: the anonymous one, and "team" with a key. Each may take half of each pool.
    let anonymous = TenantConfig { anonymous: true, ..TenantConfig::new("open") };
    let mut team = TenantConfig::new("team");
    team.api_keys
        .push(ApiKeyConfig { principal: "ci".into(), sha256: taskgate_core::tenants::hash_key("team-key-000000001") });
    config.tenants = vec![anonymous, team];
    let gw = TestGateway::start(config);
    let mut open = Vec::new();
    for _ in 0..2 {
        let mut c = McpClient::new(&gw.url);
        c.initialize().await;
        open.push(c);
    }
    let mut third = McpClient::new(&gw.url);
    let refused = third.try_initialize().await;
    assert_eq!(refused.status, 429, "the anonymous tenant has its share of sessions");
    let mut keyed = McpClient::with_bearer(&gw.url, "team-key-000000001");
    keyed.initialize().await;
    // Tasks held: two for the anonymous tenant, then its share is spent; the team's is not.
    for _ in 0..2 {
        let task = crate::support::create(&mut open[0], "demo__echo", json!({"text": "x"})).await;
        // Its upstream call has happened once its result is in.
        within(crate::support::method(&mut open[0], "tasks/result", &task)).await.unwrap();
    }
    let calls = demo.demo.stats().calls;
    let over = open[0]
        .request("tools/call", Some(json!({"name": "demo__echo", "arguments": {"text": "x"}, "task": {}})))
        .await;
    assert_eq!(demo.demo.stats().calls, calls, "nothing reached the upstream");
    let error = over.outcome().unwrap_err();
    assert_eq!(error.code, taskgate_protocol::codes::LIMIT_EXCEEDED, "{error:?}");
    assert!(error.message.contains("share"), "{error:?}");
    crate::support::create(&mut keyed, "demo__echo", json!({"text": "team"})).await;
    // Open streams: four for the anonymous tenant (its half of 8), then 429; the team opens its own.
    let mut streams = Vec::new();
    for c in &open {
        streams.push(c.open_stream().await.expect("a GET stream"));
    }
    let mut held = Vec::new();
    for (i, c) in open.iter().enumerate() {
        held.push(
            post_unread(c, 100 + i as u64, "tools/call", json!({"name": "demo__wait", "arguments": {"gate": "hold"}}))
                .await,
        );
    }
    assert_eq!(post_unread(&open[1], 200, "ping", json!({})).await.status(), 429);
    assert!(keyed.open_stream().await.is_ok(), "the other tenant's share is untouched");
    demo.demo.release("hold");
    drop((held, streams));
}

#[actix_rt::test]
async fn a_twelve_megabyte_sse_event_is_relayed_in_linear_time() {
    // The demo upstream answers on SSE and writes a large event in 8 KiB HTTP chunks; the
    // gateway used to rescan the event's buffer on every chunk (quadratic: 5.9 s of CPU for
    // 12 MB in a release build; 24 s in this debug one, against 0.7 s with the linear scan).
    let demo = DemoUpstream::start();
    let mut upstream = demo.upstream("demo");
    upstream.max_message_bytes = 32 << 20;
    let gw = TestGateway::start(config_with(vec![upstream]));
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    let started = std::time::Instant::now();
    let result = c.call("demo__blob", json!({"bytes": 12_000_000})).await.unwrap();
    assert_eq!(result["content"][0]["text"].as_str().unwrap().len(), 12_000_000);
    // A bound with ten times the linear time as headroom, a third of the quadratic time.
    assert!(started.elapsed() < std::time::Duration::from_secs(8), "{:?}", started.elapsed());
    // Another client is served at once afterwards (nothing was left blocking a worker).
    let mut other = McpClient::new(&gw.url);
    other.initialize().await;
    assert_eq!(other.request("ping", None).await.outcome().unwrap(), json!({}));
}
