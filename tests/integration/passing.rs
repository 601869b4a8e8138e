//! Results passed through: a plain `tools/call`'s result reaches the client as the text the
//! upstream wrote (numbers beyond a double's precision, their spelling, key order, escapes),
//! over HTTP (a JSON reply and an SSE one) and over stdio; a result written on several lines is
//! read and written again on one (an SSE event's `data:` line cannot hold it as it is); a
//! result that is not an object stays the upstream's error. A plain call's arguments reach the
//! upstream as the client wrote them, likewise, over HTTP and stdio and from a client of either
//! revision; a task's call, which keeps its params as a tree, sends the same arguments read.

use serde_json::{json, Value};
use taskgate_config::{UpstreamConfig, UpstreamProtocol};
use taskgate_protocol::Message;
use taskgate_testkit::{config_with, McpClient, TestGateway};

/// A result a tree would not write back the same: an integer no double holds, `1.50`, keys out
/// of order, escapes a writer would turn into UTF-8.
const RESULT: &str = r#"{"content":[{"type":"text","text":"exact \"q\""}],"structuredContent":{"z":1,"big":123456789012345678901234567890,"price":1.50,"esc":"\u00e9\ud83d\ude00"}}"#;

/// The same kind of result on several lines, as a pretty-printing server writes it.
const PRETTY: &str = "{\n  \"content\": [\n    {\"type\": \"text\", \"text\": \"pretty\"}\n  ]\n}";

const TOOLS: &str = r#"{"tools":[{"name":"exact","inputSchema":{"type":"object"}}]}"#;
const INITIALIZED: &str =
    r#"{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"canned","version":"1"}}"#;

/// The reply body an upstream writes for a request: the response text, written by hand.
fn response(id: &Value, result: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#)
}

/// A 2025-11-25 Streamable HTTP server whose replies are written by hand: `tools/call` answers
/// `RESULT` as JSON (`{"shape": "json"}`), on an SSE stream after a log message about the call
/// (`"sse"`), or `PRETTY` as JSON (`"pretty"`). Returns its URL.
async fn canned_http_upstream() -> String {
    crate::support::raw_http_server(|head, body| crate::support::Answer::Reply(answer(head, body))).await
}

/// One HTTP reply of [`canned_http_upstream`].
pub(crate) fn answer(head: &str, body: &[u8]) -> String {
    let reply = |status: &str, headers: &str, body: &str| {
        format!("HTTP/1.1 {status}\r\n{headers}content-length: {}\r\n\r\n{body}", body.len())
    };
    if head.starts_with("get ") {
        return reply("405 Method Not Allowed", "", "");
    }
    if head.starts_with("delete ") {
        return reply("200 OK", "", "");
    }
    let request: Value = serde_json::from_slice(body).unwrap_or_default();
    let Some(id) = request.get("id") else { return reply("202 Accepted", "", "") };
    let json = "content-type: application/json\r\n";
    match request["method"].as_str().unwrap_or_default() {
        "initialize" => reply("200 OK", &format!("{json}mcp-session-id: canned-1\r\n"), &response(id, INITIALIZED)),
        "tools/list" => reply("200 OK", json, &response(id, TOOLS)),
        "tools/call" => match request["params"]["arguments"]["shape"].as_str().unwrap_or_default() {
            "sse" => {
                let log =
                    r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"working"}}"#;
                let events =
                    format!("event: message\ndata: {log}\n\nevent: message\ndata: {}\n\n", response(id, RESULT));
                reply("200 OK", "content-type: text/event-stream\r\n", &events)
            }
            "pretty" => reply("200 OK", json, &response(id, PRETTY)),
            _ => reply("200 OK", json, &response(id, RESULT)),
        },
        _ => reply("200 OK", json, &response(id, "{}")),
    }
}

/// A 2025-11-25 stdio server whose lines are written by hand (`tools/call` answers `RESULT`).
fn canned_stdio_upstream(name: &str) -> UpstreamConfig {
    let script = format!(
        r#"
import json, sys
for line in sys.stdin:
    if not line.strip():
        continue
    m = json.loads(line)
    if "id" not in m or "method" not in m:
        continue
    r = {{"initialize": {initialized}, "tools/list": {tools}, "tools/call": {result}}}.get(m["method"], "{{}}")
    if m["method"] == "tools/call" and m["params"].get("arguments", {{}}).get("echo"):
        # The request's line as it came, as the call's text.
        r = json.dumps({{"content": [{{"type": "text", "text": line.rstrip("\n")}}]}})
    sys.stdout.write('{{"jsonrpc":"2.0","id":%s,"result":%s}}\n' % (json.dumps(m["id"]), r))
    sys.stdout.flush()
"#,
        // JSON string literals are Python string literals too.
        initialized = Value::from(INITIALIZED),
        tools = Value::from(TOOLS),
        result = Value::from(RESULT),
    );
    let mut upstream = UpstreamConfig::stdio(name, "python3", vec!["-c".into(), script]);
    upstream.protocol = UpstreamProtocol::V2025;
    upstream
}

/// POSTs a `tools/call` and returns the response as the client received it: the body of a
/// JSON reply, or the `data:` line of an SSE reply's last event (each event checked to be one
/// message on one line).
async fn call_text(c: &McpClient, accept: &str, arguments: Value) -> String {
    call_text_written(c, accept, &arguments.to_string()).await
}

/// [`call_text`] with `arguments` sent as written.
async fn call_text_written(c: &McpClient, accept: &str, arguments: &str) -> String {
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{{"name":"canned__exact","arguments":{arguments}}}}}"#
    );
    let mut headers = c.headers();
    headers.insert("accept", accept.parse().unwrap());
    let response = reqwest::Client::new().post(&c.url).headers(headers).body(body).send().await.unwrap();
    let sse = response.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream");
    let text = response.text().await.unwrap();
    if !sse {
        return text;
    }
    // (The stream's priming event has empty data.)
    let lines: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("data: ")).filter(|l| !l.is_empty()).collect();
    for line in &lines {
        assert!(Message::from_slice(line.as_bytes()).unwrap().is_ok(), "each event is one message: {line}");
    }
    lines.last().expect("an event").to_string()
}

fn sent_as_written(text: &str) {
    assert_eq!(
        text,
        format!(r#"{{"jsonrpc":"2.0","id":9,"result":{RESULT}}}"#),
        "the upstream's text, the client's id"
    );
}

#[actix_rt::test]
async fn an_http_upstreams_result_reaches_the_client_as_the_upstream_wrote_it() {
    let url = canned_http_upstream().await;
    let mut upstream = UpstreamConfig::http("canned", &url);
    upstream.protocol = UpstreamProtocol::V2025;
    let gw = TestGateway::start(config_with(vec![upstream]));
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    // Answered as JSON, and on a stream after a notification, to a client taking either.
    sent_as_written(&call_text(&c, "application/json, text/event-stream", json!({"shape": "json"})).await);
    sent_as_written(&call_text(&c, "application/json, text/event-stream", json!({"shape": "sse"})).await);
    sent_as_written(&call_text(&c, "text/event-stream", json!({"shape": "sse"})).await);
    // A result on several lines is read and written on one: the SSE event stays one message.
    let pretty = call_text(&c, "text/event-stream", json!({"shape": "pretty"})).await;
    let Message::Response { result, .. } = Message::from_slice(pretty.as_bytes()).unwrap().unwrap() else {
        panic!("a response: {pretty}")
    };
    assert_eq!(result, json!({"content": [{"type": "text", "text": "pretty"}]}));
    // What the test client reads of it is the same result.
    let read = c.call("canned__exact", json!({"shape": "json"})).await.unwrap();
    assert_eq!(read["structuredContent"]["esc"], "é😀");
    assert_eq!(read["content"][0]["text"], "exact \"q\"");
}

/// A 2026-07-28 client's stateless `tools/call` with `arguments` (JSON text, sent as written)
/// and the client capabilities it declares, its reply body as received.
async fn call_text_2026(url: &str, arguments: &str, capabilities: Value) -> String {
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "passing-test", "version": "1"},
    });
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{{"name":"canned__exact","arguments":{arguments},"_meta":{meta}}}}}"#
    );
    let response = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "canned__exact")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response.text().await.unwrap()
}

#[actix_rt::test]
async fn a_2026_client_gets_the_upstreams_members_as_written_with_its_revisions_fields() {
    let url = canned_http_upstream().await;
    let mut upstream = UpstreamConfig::http("canned", &url);
    upstream.protocol = UpstreamProtocol::V2025;
    let gw = TestGateway::start(config_with(vec![upstream]));
    let text = call_text_2026(&gw.url, r#"{"shape":"sse"}"#, json!({})).await;
    // The 2026-07-28 result's top level is the gateway's (resultType); each member's text is
    // the upstream's.
    let structured =
        r#""structuredContent":{"z":1,"big":123456789012345678901234567890,"price":1.50,"esc":"\u00e9\ud83d\ude00"}"#;
    assert!(text.contains(structured), "{text}");
    assert!(text.contains(r#""content":[{"type":"text","text":"exact \"q\""}]"#), "{text}");
    assert!(text.contains(r#""resultType":"complete""#), "{text}");
    assert!(text.contains(r#""id":4"#), "{text}");
}

#[actix_rt::test]
async fn a_stdio_upstreams_result_reaches_the_client_as_the_upstream_wrote_it() {
    let gw = TestGateway::start(config_with(vec![canned_stdio_upstream("canned")]));
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    sent_as_written(&call_text(&c, "application/json, text/event-stream", json!({})).await);
    sent_as_written(&call_text(&c, "text/event-stream", json!({})).await);
}

/// Arguments a tree would not write back the same: `1.50`, an integer no double holds, escapes
/// a writer would turn into UTF-8, spaces between tokens.
const ARGUMENTS: &str =
    r#"{"shape":"json", "price":1.50,"big":123456789012345678901234567890,"esc":"\u00e9\ud83d\ude00","q":"a \"b\""}"#;

/// The `tools/call` requests a [`canned_http_upstream`] got, as their bodies' text.
type Seen = std::sync::Arc<parking_lot::Mutex<Vec<String>>>;

/// [`canned_http_upstream`], keeping the body of each `tools/call` it gets.
async fn recording_http_upstream() -> (String, Seen) {
    let seen = Seen::default();
    let kept = seen.clone();
    let url = crate::support::raw_http_server(move |head, body| {
        let text = String::from_utf8_lossy(body).into_owned();
        if text.contains(r#""method":"tools/call""#) {
            kept.lock().push(text);
        }
        crate::support::Answer::Reply(answer(head, body))
    })
    .await;
    (url, seen)
}

/// The arguments of the last `tools/call` the upstream got, as their text there.
fn last_arguments(seen: &Seen) -> String {
    let last = seen.lock().last().cloned().expect("a tools/call reached the upstream");
    let start = last.find(r#""arguments":"#).expect("arguments") + r#""arguments":"#.len();
    // One value, the rest of the message after it.
    let mut values = serde_json::Deserializer::from_str(&last[start..]).into_iter::<&serde_json::value::RawValue>();
    values.next().expect("a value").unwrap().get().to_owned()
}

/// A gateway in front of a [`recording_http_upstream`] (2025-11-25), and a client with a session.
async fn gateway_before_a_recording_upstream() -> (TestGateway, McpClient, Seen) {
    let (url, seen) = recording_http_upstream().await;
    let mut upstream = UpstreamConfig::http("canned", &url);
    upstream.protocol = UpstreamProtocol::V2025;
    let gw = TestGateway::start(config_with(vec![upstream]));
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    (gw, c, seen)
}

#[actix_rt::test]
async fn a_calls_arguments_reach_an_http_upstream_as_the_client_wrote_them() {
    let (gw, mut c, seen) = gateway_before_a_recording_upstream().await;
    // A 2025-11-25 session's call, answered as JSON and as SSE.
    for accept in ["application/json, text/event-stream", "text/event-stream"] {
        sent_as_written(&call_text_written(&c, accept, ARGUMENTS).await);
        assert_eq!(last_arguments(&seen), ARGUMENTS);
    }
    // A 2026-07-28 client's stateless call.
    let text = call_text_2026(&gw.url, ARGUMENTS, json!({})).await;
    assert!(text.contains(r#""resultType":"complete""#), "{text}");
    assert_eq!(last_arguments(&seen), ARGUMENTS);
    // One that may be asked for input: its arguments are read for the digest that binds a
    // requestState to the request, and reach the upstream the same, read.
    let read: Value = serde_json::from_str(ARGUMENTS).unwrap();
    call_text_2026(&gw.url, ARGUMENTS, json!({"elicitation": {}})).await;
    assert_eq!(serde_json::from_str::<Value>(&last_arguments(&seen)).unwrap(), read);
    // A task's call keeps its params as a tree for the task's life: the same arguments, read.
    let params = json!({"name": "canned__exact", "arguments": read, "task": {}});
    let created = c.request("tools/call", Some(params)).await.outcome().unwrap();
    let task = created["task"]["taskId"].as_str().unwrap().to_owned();
    let result = c.request("tasks/result", Some(json!({"taskId": task}))).await.outcome().unwrap();
    assert_eq!(result["structuredContent"]["z"], 1);
    let sent = last_arguments(&seen);
    assert_ne!(sent, ARGUMENTS);
    assert_eq!(serde_json::from_str::<Value>(&sent).unwrap(), read);
}

#[actix_rt::test]
async fn a_calls_arguments_reach_a_stdio_upstream_as_the_client_wrote_them() {
    let gw = TestGateway::start(config_with(vec![canned_stdio_upstream("canned")]));
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    let arguments = ARGUMENTS.replace(r#""shape":"json""#, r#""echo":true"#);
    let call = format!(
        r#"{{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{{"name":"canned__exact","arguments":{arguments}}}}}"#
    );
    let result = c.post_raw(call, &[]).await.outcome().unwrap();
    // The line the process read, whole: one message, its arguments as written.
    let line = result["content"][0]["text"].as_str().unwrap();
    assert!(Message::from_slice(line.as_bytes()).unwrap().is_ok(), "{line}");
    assert!(line.contains(&format!(r#""arguments":{arguments}"#)), "{line}");
}

/// A body is read into a buffer that takes at most 1 MiB of its announced length at once: a
/// call larger still arrives whole, announced or chunked, and its arguments reach the upstream
/// as they were sent.
#[actix_rt::test]
async fn a_call_larger_than_what_the_front_door_takes_at_once_reaches_the_upstream_whole() {
    let (_gw, c, seen) = gateway_before_a_recording_upstream().await;
    let text: String = (0..(3 << 19)).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
    let arguments = format!(r#"{{"shape":"json","text":"{text}"}}"#);
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{{"name":"canned__exact","arguments":{arguments}}}}}"#
    );
    let r = c.post_raw(body.clone(), &[]).await;
    assert_eq!(r.outcome().unwrap()["structuredContent"]["z"], 1, "announced");
    assert_eq!(last_arguments(&seen), arguments);
    seen.lock().clear();
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        body.into_bytes().chunks(100_000).map(|c| Ok(c.to_vec())).collect();
    let r = c.post_raw(reqwest::Body::wrap_stream(futures_util::stream::iter(chunks)), &[]).await;
    assert_eq!(r.outcome().unwrap()["structuredContent"]["z"], 1, "chunked");
    assert_eq!(last_arguments(&seen), arguments);
}
