//! The Streamable HTTP front door (basic/transports, basic/lifecycle) and every kind of bad
//! input: each gets a clear error and the session keeps working.

use serde_json::{json, Value};
use taskgate_protocol::Message;
use taskgate_testkit::{config_with, DemoUpstream, McpClient, TestGateway};

use crate::support::within;

fn gateway_with_demo() -> (DemoUpstream, TestGateway) {
    let demo = DemoUpstream::start();
    let gateway = TestGateway::start(config_with(vec![demo.upstream("demo")]));
    (demo, gateway)
}

fn error_code(reply: &taskgate_testkit::Reply) -> i64 {
    reply.outcome().expect_err("an error response").code
}

#[actix_rt::test]
async fn initialize_issues_a_random_session_and_negotiates_the_version() {
    let (_demo, gw) = gateway_with_demo();
    let mut a = McpClient::new(&gw.url);
    let result = a.initialize().await;
    assert_eq!(result["protocolVersion"], "2025-11-25");
    assert_eq!(result["capabilities"]["tools"]["listChanged"], true);
    assert_eq!(result["serverInfo"]["name"], "taskgate");
    let mut b = McpClient::new(&gw.url);
    b.initialize().await;
    let (sa, sb) = (a.session.clone().unwrap(), b.session.clone().unwrap());
    assert_ne!(sa, sb);
    // Visible ASCII only (0x21..=0x7E), and long enough to be unguessable (a v4 UUID).
    assert!(sa.bytes().all(|c| (0x21..=0x7e).contains(&c)) && sa.len() >= 32, "{sa}");

    for (asked, got) in [
        ("2025-06-18", "2025-06-18"),
        ("2025-03-26", "2025-03-26"),
        ("2024-11-05", "2025-11-25"),
        ("9.9", "2025-11-25"),
    ] {
        let mut c = McpClient::new(&gw.url);
        let result = c.initialize_with(asked, json!({})).await;
        assert_eq!(result["protocolVersion"], got, "client asked for {asked}");
    }
    assert_eq!(gw.gateway.session_count(), 6);
}

#[actix_rt::test]
async fn ping_and_notifications_and_quick_methods_answer_json() {
    let (_demo, gw) = gateway_with_demo();
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    let ping = c.request("ping", None).await;
    assert_eq!(ping.status, 200);
    assert!(!ping.sse);
    assert_eq!(ping.outcome().unwrap(), json!({}));
    // Notifications and responses get 202 with no body.
    let accepted = c.post_raw(r#"{"jsonrpc":"2.0","method":"notifications/something"}"#, &[]).await;
    assert_eq!(accepted.status, 202);
    assert!(accepted.messages.is_empty());
}

#[actix_rt::test]
async fn tools_call_answers_json_when_the_response_comes_first_and_sse_when_anything_precedes_it() {
    let (_demo, gw) = gateway_with_demo();
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    let body = Message::request(
        taskgate_protocol::RequestId::Number(9),
        "tools/call",
        Some(json!({"name":"demo__echo","arguments":{"text":"x"}})),
    )
    .to_json();
    // Accepting both: one JSON object when the response is the first thing to send.
    let both = c.post_raw(body.clone(), &[]).await;
    assert!(!both.sse);
    assert_eq!(both.headers["content-type"], "application/json");
    assert_eq!(both.outcome().unwrap()["content"][0]["text"], "x");
    // A stream as soon as anything comes before it (progress here).
    let progress = Message::request(
        taskgate_protocol::RequestId::Number(10),
        "tools/call",
        Some(json!({"name":"demo__progress","arguments":{"values":[1,2]},"_meta":{"progressToken":"p"}})),
    )
    .to_json();
    let streamed = c.post_raw(progress, &[]).await;
    assert!(streamed.sse);
    assert_eq!(streamed.headers["content-type"], "text/event-stream");
    assert_eq!(streamed.notifications().len(), 2, "{streamed:?}");
    assert!(streamed.outcome().is_ok());
    let json_only = c.post_raw(body.clone(), &[("accept", "application/json")]).await;
    assert!(!json_only.sse);
    assert_eq!(json_only.outcome().unwrap()["content"][0]["text"], "x");
    let sse_only = c.post_raw(body.clone(), &[("accept", "text/event-stream")]).await;
    assert!(sse_only.sse);
    // A quick method answers with SSE too when JSON is not acceptable.
    let ping = c.post_raw(r#"{"jsonrpc":"2.0","id":"p","method":"ping"}"#, &[("accept", "text/event-stream")]).await;
    assert!(ping.sse);
    assert_eq!(ping.outcome().unwrap(), json!({}));
    // A client that ranks SSE first (listed first at the same weight, or weighted higher) gets a
    // stream for quick methods and calls alike; one that ranks JSON first gets JSON.
    let list = r#"{"jsonrpc":"2.0","id":"l","method":"tools/list"}"#;
    for accept in ["text/event-stream, application/json", "application/json;q=0.5, text/event-stream"] {
        let listed = c.post_raw(list, &[("accept", accept)]).await;
        assert!(listed.sse, "{accept}");
        assert_eq!(listed.headers["content-type"], "text/event-stream");
        assert!(listed.outcome().unwrap()["tools"].as_array().is_some_and(|t| !t.is_empty()));
        let called = c.post_raw(body.clone(), &[("accept", accept)]).await;
        assert!(called.sse, "{accept}");
        assert_eq!(called.outcome().unwrap()["content"][0]["text"], "x");
    }
    let listed = c.post_raw(list, &[("accept", "text/event-stream;q=0.5, application/json")]).await;
    assert!(!listed.sse);
    assert_eq!(listed.headers["content-type"], "application/json");
}

#[actix_rt::test]
async fn every_bad_input_gets_a_clear_error_and_the_session_keeps_working() {
    let (_demo, gw) = gateway_with_demo();
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;

    // Malformed JSON → 400, -32700.
    let r = c.post_raw("{not json", &[]).await;
    assert_eq!((r.status.as_u16(), error_code(&r)), (400, -32700));
    // JSON that is not a JSON-RPC message → 400, -32600, saying why.
    for (body, says) in [
        (r#"{"id":1,"method":"ping"}"#, "jsonrpc"),
        (r#"{"jsonrpc":"2.0","id":{"x":1},"method":"ping"}"#, "\"id\""),
        (r#""hello""#, "object"),
        // MCP params are always an object (JSON-RPC's by-position params are not MCP).
        (r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":[1]}"#, "object"),
    ] {
        let r = c.post_raw(body, &[]).await;
        assert_eq!((r.status.as_u16(), error_code(&r)), (400, -32600), "{body}");
        assert!(r.outcome().unwrap_err().message.contains(says), "{body}: {:?}", r.outcome());
    }
    // A batch → 400 with a message that says batches are not supported.
    let r = c.post_raw(r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#, &[]).await;
    assert_eq!((r.status.as_u16(), error_code(&r)), (400, -32600));
    assert!(r.outcome().unwrap_err().message.contains("batches are not supported"));
    // Unknown method → -32601 in a 200 JSON-RPC response.
    let r = c.request("sampling/createMessage", None).await;
    assert_eq!((r.status.as_u16(), error_code(&r)), (200, -32601));
    let r = c.request("no/such/method", None).await;
    assert_eq!(error_code(&r), -32601);
    // Bad params → -32602.
    for params in
        [json!({}), json!({"name": 5}), json!({"name": "demo__echo", "arguments": [1]}), json!({"name": "nope"})]
    {
        let r = c.request("tools/call", Some(params.clone())).await;
        assert_eq!(error_code(&r), -32602, "{params}");
    }
    let r = c.request("tools/list", Some(json!({"cursor": 7}))).await;
    assert_eq!(error_code(&r), -32602);
    let r = c.request("tools/list", Some(json!({"cursor": "garbage"}))).await;
    assert_eq!(error_code(&r), -32602);
    // Wrong Content-Type → 415.
    let r = c.post_raw(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#, &[("content-type", "text/plain")]).await;
    assert_eq!((r.status.as_u16(), error_code(&r)), (415, -32600));
    // Accept that allows neither JSON nor SSE → 406.
    let r = c.post_raw(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#, &[("accept", "text/html")]).await;
    assert_eq!(r.status, 406);
    // Unsupported MCP-Protocol-Version → 400.
    let r = c.post_raw(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#, &[("mcp-protocol-version", "1999-01-01")]).await;
    assert_eq!(r.status, 400);
    assert!(r.outcome().unwrap_err().message.contains("MCP-Protocol-Version"));
    // No session id on a non-initialize request → 400.
    let r = c.post_raw(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#, &[("mcp-session-id", "")]).await;
    assert_eq!(r.status, 400);
    // Unknown session → 404.
    let r = c.post_raw(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#, &[("mcp-session-id", "no-such-session")]).await;
    assert_eq!(r.status, 404);
    // initialize with a session id → 400.
    let r = c.post_raw(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#, &[]).await;
    assert_eq!(r.status, 400);
    // initialize with bad params → -32602 and no session.
    let r = c
        .post_raw(
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}"#,
            &[("mcp-session-id", "")],
        )
        .await;
    assert_eq!((r.status.as_u16(), error_code(&r)), (200, -32602));
    assert!(r.headers.get("mcp-session-id").is_none());
    // A disallowed Origin → 403, on every method.
    let r = c.post_raw(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#, &[("origin", "http://evil.example")]).await;
    assert_eq!(r.status, 403);
    // JSON-RPC 2.0: the error carries the request's id, which could be read.
    assert_eq!(
        r.messages[0].id().map(|id| id.to_value()),
        Some(serde_json::json!(1)),
        "the 403 body answers the request"
    );
    let allowed =
        c.post_raw(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#, &[("origin", "http://localhost:5173")]).await;
    assert_eq!(allowed.status, 200);
    // A response to nothing → 400.
    let r = c.post_raw(r#"{"jsonrpc":"2.0","id":"nobody","result":{}}"#, &[]).await;
    assert_eq!(r.status, 400);

    // After all of that the session still works.
    assert_eq!(c.call("demo__echo", json!({"text": "still here"})).await.unwrap()["content"][0]["text"], "still here");
}

#[actix_rt::test]
async fn body_over_the_limit_gets_413() {
    let demo = DemoUpstream::start();
    let mut config = config_with(vec![demo.upstream("demo")]);
    config.server.max_body_bytes = 4096;
    let gw = TestGateway::start(config);
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    let big = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"demo__echo","arguments":{"text":"x".repeat(5000)}}}).to_string();
    let r = c.post_raw(big, &[]).await;
    assert_eq!(r.status, 413);
    assert!(r.outcome().unwrap_err().message.contains("4096"));
    // Chunked bodies without Content-Length are cut off too.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> = vec![Ok(vec![b' '; 3000]), Ok(vec![b' '; 3000])];
    let r = c.post_raw(reqwest::Body::wrap_stream(futures_util::stream::iter(chunks)), &[]).await;
    assert_eq!(r.status, 413);
    assert_eq!(c.call("demo__echo", json!({"text": "ok"})).await.unwrap()["content"][0]["text"], "ok");
}

#[actix_rt::test]
async fn get_stream_delete_and_other_http_methods() {
    let (_demo, gw) = gateway_with_demo();
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    let mut first = c.open_stream().await.expect("GET stream");
    // A second GET replaces the first at once (one GET stream per session, so no message goes
    // on two): the first ends, the second carries what follows.
    let mut second = c.open_stream().await.expect("a second GET replaces the first");
    // (A list_changed from the catalog's first load may have come before.)
    while let Some(m) = crate::support::within(first.next()).await {
        assert_eq!(m.method(), Some("notifications/tools/list_changed"), "the replaced stream ends");
    }
    c.call("demo__toggle_extra", json!({})).await.unwrap();
    let changed = crate::support::within(second.next()).await.expect("list_changed on the new stream");
    assert_eq!(changed.method(), Some("notifications/tools/list_changed"));
    // A client that closes its stream reopens it at once (no 409 while the gateway has not
    // noticed the closed connection yet).
    drop(second);
    let stream = c.open_stream().await.expect("reopened at once");
    drop(stream);
    // PUT → 405 with Allow.
    let r = reqwest::Client::new().put(&gw.url).send().await.unwrap();
    assert_eq!(r.status(), 405);
    assert_eq!(r.headers()["allow"], "GET, POST, DELETE");
    // DELETE ends the session; afterwards it is 404 for every method.
    assert_eq!(c.delete().await, 200);
    let r = c.request("ping", None).await;
    assert_eq!(r.status, 404);
    assert_eq!(c.open_stream().await.err(), Some(reqwest::StatusCode::NOT_FOUND));
    assert_eq!(c.delete().await, 404);
    // A fresh initialize works after the 404 (basic/transports "Session Management" 4).
    c.session = None;
    c.initialize().await;
    assert_eq!(c.request("ping", None).await.outcome().unwrap(), Value::Object(Default::default()));
}

#[actix_rt::test]
async fn max_sessions_is_enforced_with_503() {
    let demo = DemoUpstream::start();
    let mut config = config_with(vec![demo.upstream("demo")]);
    config.server.max_sessions = 2;
    let gw = TestGateway::start(config);
    let mut a = McpClient::new(&gw.url);
    a.initialize().await;
    let mut b = McpClient::new(&gw.url);
    b.initialize().await;
    let c = McpClient::new(&gw.url);
    let r = c.post_raw(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}"#, &[]).await;
    assert_eq!(r.status, 503);
    assert!(r.outcome().unwrap_err().message.contains("max_sessions"));
    assert_eq!(a.delete().await, 200);
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
}

#[actix_rt::test]
async fn a_call_whose_response_is_not_first_within_the_wait_is_streamed_before_it_ends() {
    let demo = DemoUpstream::start();
    let mut config = config_with(vec![demo.upstream("demo")]);
    // 0: the stream starts at once unless the response is already there (the default, a
    // second, would be waited out here).
    config.server.first_message_wait_ms = 0;
    let gw = TestGateway::start(config);
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    // The reply's headers arrive while the upstream still holds the call: an SSE stream (a JSON
    // answer could not exist before the gate opens).
    let mut stream =
        within(c.request_stream("tools/call", Some(json!({"name": "demo__wait", "arguments": {"gate": "late"}}))))
            .await;
    assert!(stream.is_sse());
    within(demo.demo.wait_in_flight(|n| *n == 1)).await;
    demo.demo.release("late");
    let response = within(stream.next()).await.expect("the response");
    assert!(response.is_response(), "{response:?}");
    assert!(within(stream.next()).await.is_none());
}
