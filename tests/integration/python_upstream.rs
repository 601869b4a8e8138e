//! The Python SDK (`mcp` 2.3.0, pinned) as a 2026-07-28 upstream, over Streamable HTTP and over
//! stdio (tests/interop/python/modern_server.py): each client, of either revision, gets through
//! the gateway what it gets from the server directly (elicitation, sampling and roots through
//! MRTR, or as real requests to a 2025 client); tool-list changes and resource updates
//! arrive through the gateway's `subscriptions/listen` streams; the log level of a 2025 session
//! (`logging/setLevel`) and of a 2026 request (`_meta` logLevel) reach the server, which filters
//! by it; `/readyz` reaches it without `ping`.

use std::collections::HashMap;
use std::process::Stdio;

use serde_json::{json, Value};
use taskgate_config::UpstreamConfig;
use taskgate_protocol::Message;
use taskgate_testkit::{config_with, interop_dir, McpClient, TestGateway};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;
use tokio::sync::mpsc;

use crate::interop::run_ts_client_with;
use crate::interop_modern::run_python_client;
use crate::modern::Client as ModernClient;
use crate::modern_upstreams::{comparable, gateway};
use crate::support::{notified, within};

fn python() -> std::path::PathBuf {
    let python = interop_dir().join(".venv/bin/python");
    assert!(python.exists(), "the Python SDK is not installed: run tests/interop/install");
    python
}

fn script() -> String {
    interop_dir().join("python/modern_server.py").display().to_string()
}

/// What the Python server reports: the events of every process of it, counted.
pub struct PythonEvents {
    lines: mpsc::UnboundedReceiver<Value>,
    counts: HashMap<String, u64>,
}

impl PythonEvents {
    /// Waits until `count` events named `event` have been reported in all.
    pub async fn seen(&mut self, event: &str, count: u64) {
        while self.counts.get(event).copied().unwrap_or(0) < count {
            self.next().await;
        }
    }

    /// Waits for the next event named `event` for which `wanted` holds.
    async fn seen_where(&mut self, event: &str, wanted: impl Fn(&Value) -> bool) {
        loop {
            let line = self.next().await;
            if line["event"] == event && wanted(&line) {
                return;
            }
        }
    }

    async fn next(&mut self) -> Value {
        let line = within(self.lines.recv()).await.expect("the Python server reports its events");
        if let Some(name) = line["event"].as_str() {
            *self.counts.entry(name.to_owned()).or_default() += 1;
        }
        line
    }
}

/// The Python server over Streamable HTTP on a free loopback port.
pub struct PythonServer {
    _child: Child,
    pub url: String,
    pub events: PythonEvents,
}

impl PythonServer {
    pub async fn start() -> PythonServer {
        let mut child = tokio::process::Command::new(python())
            .args([&script(), "http"])
            .current_dir(interop_dir())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the Python server starts");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = within(lines.next_line()).await.unwrap().expect("the server prints its port");
        let port = serde_json::from_str::<Value>(&first).unwrap()["port"].as_u64().unwrap();
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let _ = tx.send(serde_json::from_str(&line).unwrap_or(Value::Null));
            }
        });
        let events = PythonEvents { lines: rx, counts: HashMap::new() };
        PythonServer { _child: child, url: format!("http://127.0.0.1:{port}/mcp"), events }
    }
}

/// The Python server as a stdio upstream named `name`: the gateway starts its processes, each of
/// which reports its events to a loopback listener of the test's.
pub async fn stdio_upstream(name: &str) -> (UpstreamConfig, PythonEvents) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut lines = BufReader::new(socket).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    let _ = tx.send(serde_json::from_str(&line).unwrap_or(Value::Null));
                }
            });
        }
    });
    let upstream = UpstreamConfig::stdio(name, python().display().to_string(), vec![script(), "stdio".into(), address]);
    (upstream, PythonEvents { lines: rx, counts: HashMap::new() })
}

fn assert_namespaced(direct: &Value, through: &Value, prefix: &str) {
    let names = |s: &Value| -> Vec<String> {
        s["tools"].as_array().unwrap().iter().filter_map(Value::as_str).map(str::to_owned).collect()
    };
    let expected: Vec<String> = names(direct).iter().map(|n| format!("{prefix}__{n}")).collect();
    assert_eq!(names(through), expected, "the server's tools, namespaced");
}

/// The Python SDK's client (pinned to 2026-07-28 and in auto mode) and the TypeScript v2
/// client (pinned) get through the gateway what they get from the Python server directly:
/// tools, progress, an elicitation through MRTR at both hops, a cancelled call that reaches the
/// server, and a `subscriptions/listen` acknowledgment.
#[actix_rt::test]
async fn a_python_2026_server_serves_clients_through_the_gateway_as_it_serves_them_directly() {
    let mut server = PythonServer::start().await;
    // Pinned to 2026-07-28: every client through the gateway is served by the server's
    // 2026-07-28 side (a 2025-11-25 client translated), which this test compares with the
    // server served directly.
    let pinned = UpstreamConfig {
        protocol: taskgate_config::UpstreamProtocol::V2026,
        ..UpstreamConfig::http("py", server.url.clone())
    };
    let gw = gateway(vec![pinned]);
    let mut cancelled = 0;
    for mode in ["pin", "auto"] {
        let direct = run_python_client(&server.url, mode).await;
        cancelled += 1;
        server.events.seen("cancelled", cancelled).await;
        let through = run_python_client(&gw.url, mode).await;
        cancelled += 1;
        server.events.seen("cancelled", cancelled).await;
        assert_eq!(direct["version"], "2026-07-28", "{mode}: {direct}");
        assert_eq!(direct["ask"][0]["text"], "answer: Ada", "{mode}: {direct}");
        assert_eq!(direct["aborted"], "cancelled", "{mode}: {direct}");
        assert_eq!(comparable(&through), comparable(&direct), "python {mode}: through the gateway vs directly");
        assert_namespaced(&direct, &through, "py");
    }
    let direct = run_ts_client_with("modern-client.mjs", &[&server.url, "pin"]).await;
    cancelled += 1;
    server.events.seen("cancelled", cancelled).await;
    let through = run_ts_client_with("modern-client.mjs", &[&gw.url, "pin"]).await;
    cancelled += 1;
    server.events.seen("cancelled", cancelled).await;
    assert_eq!(direct["progress"]["values"], json!([1, 2, 3]), "{direct}");
    assert_eq!(comparable(&through), comparable(&direct), "typescript v2: through the gateway vs directly");

    // The TypeScript SDK 1.32 client (2025-11-25): the Python server serves it directly at
    // 2025-11-25 too (it is dual-era), with no tasks; through the gateway its task is a wrapped
    // task, with the same result.
    let mut direct = run_ts_client_with("legacy-client.mjs", &[&server.url]).await;
    cancelled += 1;
    server.events.seen("cancelled", cancelled).await;
    let mut through = run_ts_client_with("legacy-client.mjs", &[&gw.url]).await;
    cancelled += 1;
    server.events.seen("cancelled", cancelled).await;
    assert_eq!(direct["ask"][0]["text"], "answer: Ada", "{direct}");
    for summary in [&mut direct, &mut through] {
        let task = summary.as_object_mut().unwrap().remove("task").unwrap();
        assert_eq!(task["result"][0]["text"], "in a task", "{task}");
        assert_eq!(task["events"].as_array().unwrap().last(), Some(&json!("result")), "{task}");
    }
    assert_eq!(comparable(&through), comparable(&direct), "typescript 1.32: through the gateway vs directly");
}

/// basic/transports/stdio with 2026-07-28: the gateway probes the process with
/// `server/discover`, stamps each request's `_meta`, cancels by `notifications/cancelled`, and
/// opens its `subscriptions/listen` stream over stdio. The Python client through the gateway to
/// the stdio server gets what it gets from the same server over HTTP directly; the TypeScript
/// SDK 1.32 client (2025-11-25) gets progress, an elicitation, a task and an abort.
#[actix_rt::test]
async fn a_2026_upstream_over_stdio_serves_clients_of_both_revisions() {
    let mut direct_server = PythonServer::start().await;
    let (upstream, mut events) = stdio_upstream("pystdio").await;
    let gw = gateway(vec![upstream]);
    let direct = run_python_client(&direct_server.url, "pin").await;
    direct_server.events.seen("cancelled", 1).await;
    let through = run_python_client(&gw.url, "pin").await;
    events.seen("cancelled", 1).await;
    assert_eq!(direct["aborted"], "cancelled", "{direct}");
    assert_eq!(comparable(&through), comparable(&direct), "through the gateway over stdio vs directly over HTTP");
    assert_namespaced(&direct, &through, "pystdio");

    let legacy = run_ts_client_with("legacy-client.mjs", &[&gw.url]).await;
    events.seen("cancelled", 2).await;
    assert_eq!(legacy["progress"]["values"], json!([1, 2, 3]), "{legacy}");
    assert_eq!(legacy["ask"][0]["text"], "answer: Ada", "{legacy}");
    assert_eq!(legacy["task"]["result"][0]["text"], "in a task", "{legacy}");
    assert_eq!(legacy["aborted"], "rejected: McpError", "{legacy}");
    // The gateway's listen streams reached the processes (the catalog's and the clients').
    events.seen("listening", 1).await;
}

fn text_of(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_default()
}

/// basic/patterns/subscriptions: a tool the Python server adds at run time is announced on
/// the gateway's `subscriptions/listen` stream; the gateway lists the upstream again and tells
/// its clients, a 2025 session on its GET stream and a 2026 client on its own listen stream,
/// and the next `tools/list` has the tool, which can be called.
#[actix_rt::test]
async fn a_2026_upstreams_tool_list_change_refreshes_the_catalog_for_clients_of_both_revisions() {
    let server = PythonServer::start().await;
    let gw = gateway(vec![UpstreamConfig::http("py", server.url.clone())]);
    let mut session = McpClient::new(&gw.url);
    session.initialize().await;
    assert!(!session.tool_names().await.contains(&"py__grown".to_owned()));
    let mut get = session.open_stream().await.expect("the GET stream opens");
    let modern = ModernClient::new(&gw.url, json!({}));
    let mut listen = modern.stream("subscriptions/listen", json!({"notifications": {"toolsListChanged": true}})).await;
    notified(&mut listen, "notifications/subscriptions/acknowledged").await;

    assert_eq!(text_of(&session.call("py__grow", json!({"name": "grown"})).await.unwrap()), "added grown");
    notified(&mut get, "notifications/tools/list_changed").await;
    notified(&mut listen, "notifications/tools/list_changed").await;
    assert!(session.tool_names().await.contains(&"py__grown".to_owned()));
    assert_eq!(text_of(&session.call("py__grown", json!({"text": "new"})).await.unwrap()), "new");
    assert_eq!(text_of(&modern.call("py__grown", json!({"text": "newer"})).await), "newer");
}

/// A 2025 session's `resources/subscribe` becomes the `resourceSubscriptions` filter of the
/// gateway's listen stream at the 2026 upstream, over HTTP and over stdio; the upstream's
/// update arrives as `notifications/resources/updated` on the session's GET stream.
#[actix_rt::test]
async fn a_resource_subscription_at_a_2026_upstream_brings_its_updates_over_http_and_stdio() {
    let mut server = PythonServer::start().await;
    let (stdio, mut stdio_events) = stdio_upstream("stdiopy").await;
    // Pinned to 2026-07-28: the Python server's 2025-11-25 side, which would serve these
    // 2025-11-25 sessions otherwise, has no `resources/subscribe` (-32601, as directly).
    let pin = |u: UpstreamConfig| UpstreamConfig { protocol: taskgate_config::UpstreamProtocol::V2026, ..u };
    let gw = gateway(vec![pin(UpstreamConfig::http("py", server.url.clone())), pin(stdio)]);
    for (prefix, events) in [("py", &mut server.events), ("stdiopy", &mut stdio_events)] {
        let mut session = McpClient::new(&gw.url);
        session.initialize().await;
        session.call(&format!("{prefix}__echo"), json!({"text": "x"})).await.unwrap();
        let mut get = session.open_stream().await.expect("the GET stream opens");
        // The gateway's name for the upstream's memo://note.
        let uri = format!("taskgate://{prefix}/memo://note");
        let reply = session.request("resources/subscribe", Some(json!({"uri": uri}))).await;
        reply.outcome().unwrap_or_else(|e| panic!("{prefix}: {e:?}"));
        // The listen stream is opened again with the upstream's URI in its filter.
        events.seen_where("listening", |e| e["uris"] == json!(["memo://note"])).await;
        session.call(&format!("{prefix}__touch"), json!({})).await.unwrap();
        let updated = notified(&mut get, "notifications/resources/updated").await;
        assert_eq!(updated["uri"], uri, "{prefix}");
    }
}

/// server/utilities/logging: a 2025 session's `logging/setLevel` goes to the 2026 upstream as
/// each request's `_meta` logLevel, and a 2026 client's own logLevel goes with its request;
/// the Python server sends only the messages at or above it (and none without a level).
#[actix_rt::test]
async fn the_log_level_of_either_revision_reaches_a_2026_upstream() {
    let server = PythonServer::start().await;
    // Pinned to 2026-07-28, so that the 2025-11-25 session's level is translated (its own
    // 2025-11-25 side, which it would get otherwise, sends every level until `setLevel`).
    let upstream = UpstreamConfig {
        protocol: taskgate_config::UpstreamProtocol::V2026,
        ..UpstreamConfig::http("py", server.url.clone())
    };
    let gw = gateway(vec![upstream]);
    let levels = |messages: Vec<&Message>| -> Vec<String> {
        messages
            .iter()
            .filter_map(|m| match m {
                Message::Notification { method, params: Some(p) } if method == "notifications/message" => {
                    p["level"].as_str().map(str::to_owned)
                }
                _ => None,
            })
            .collect()
    };
    let mut session = McpClient::new(&gw.url);
    session.initialize().await;
    let call = json!({"name": "py__log", "arguments": {}});
    let reply = session.request("tools/call", Some(call.clone())).await;
    assert_eq!(levels(reply.notifications()), Vec::<String>::new(), "no level set: no messages");
    session.request("logging/setLevel", Some(json!({"level": "warning"}))).await.outcome().unwrap();
    let reply = session.request("tools/call", Some(call.clone())).await;
    assert_eq!(levels(reply.notifications()), ["warning", "error"]);

    let modern = ModernClient::new(&gw.url, json!({}));
    let with_level = |level: &str| {
        let mut p = call.clone();
        p["_meta"] = json!({"io.modelcontextprotocol/logLevel": level});
        p
    };
    let reply = modern.send("tools/call", call.clone()).await;
    assert_eq!(levels(reply.notifications()), Vec::<String>::new(), "{reply:?}");
    let reply = modern.send("tools/call", with_level("info")).await;
    assert_eq!(levels(reply.notifications()), ["info", "warning", "error"], "{reply:?}");
    let reply = modern.send("tools/call", with_level("error")).await;
    assert_eq!(levels(reply.notifications()), ["error"], "{reply:?}");
}

/// `/readyz` asks each upstream whether it is alive; `ping` is gone in 2026-07-28, so a 2026
/// upstream is asked with `server/discover`, which the Python server (over HTTP and stdio) and
/// the 2026-only TypeScript server answer.
#[actix_rt::test]
async fn readiness_reaches_2026_upstreams_without_ping() {
    let server = PythonServer::start().await;
    let reference = crate::interop_modern::Reference::start().await;
    let (stdio, _events) = stdio_upstream("pystdio").await;
    let gw = gateway(vec![
        UpstreamConfig::http("py", server.url.clone()),
        UpstreamConfig::http("ts", reference.url.clone()),
        stdio,
    ]);
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    // A loaded machine may still be starting the Python process when initialize is answered
    // (its catalog wait is bounded): readiness is read until it has been probed.
    let reachable = |body: &Value, name: &str| {
        let upstream = body["upstreams"].as_array().unwrap().iter().find(|u| u["name"] == name).unwrap().clone();
        (upstream["reachable"] == true || !upstream["error"].is_null(), upstream)
    };
    let body = crate::support::within(async {
        loop {
            let ready = reqwest::get(format!("http://{}/readyz", gw.addr)).await.unwrap();
            let body: Value = serde_json::from_str(&ready.text().await.unwrap()).unwrap();
            if ["py", "ts", "pystdio"].iter().all(|name| reachable(&body, name).0) {
                return body;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await;
    for name in ["py", "ts", "pystdio"] {
        let (_, upstream) = reachable(&body, name);
        assert_eq!(upstream["reachable"], true, "{upstream}");
    }
    let ready = reqwest::get(format!("http://{}/readyz", gw.addr)).await.unwrap();
    assert_eq!(ready.status(), 200);
}

/// basic/patterns/mrtr toward a 2025 client: the Python server's `input_required` asking for a
/// sampling and for the client's roots becomes real `sampling/createMessage` and `roots/list`
/// requests on the call's stream; the client's answers go back in the upstream's retry, over
/// HTTP and over stdio.
#[actix_rt::test]
async fn a_2026_upstreams_sampling_and_roots_requests_reach_a_2025_client_as_its_own() {
    let server = PythonServer::start().await;
    let (stdio, _events) = stdio_upstream("stdiopy").await;
    let gw = gateway(vec![UpstreamConfig::http("py", server.url.clone()), stdio]);
    let mut c = McpClient::new(&gw.url);
    c.initialize_with("2025-11-25", json!({"sampling": {}, "roots": {"listChanged": true}})).await;
    for prefix in ["py", "stdiopy"] {
        let mut call = c
            .request_stream(
                "tools/call",
                Some(json!({"name": format!("{prefix}__summarize"), "arguments": {"topic": "MCP"}})),
            )
            .await;
        let Some(Message::Request { id, method, params }) = within(call.next()).await else {
            panic!("{prefix}: no request")
        };
        assert_eq!(method, "sampling/createMessage", "{prefix}");
        let params = params.unwrap();
        assert_eq!(params["messages"][0]["content"]["text"], "Summarize MCP", "{prefix}: {params}");
        let sampled = json!({"role": "assistant", "content": {"type": "text", "text": "a protocol"}, "model": "m"});
        assert_eq!(c.post_message(&Message::response(id, sampled)).await.status.as_u16(), 202);
        let Some(Message::Response { result, .. }) = within(call.next()).await else { panic!("{prefix}: no result") };
        assert_eq!(text_of(&result), "summary: a protocol", "{prefix}");

        let mut call =
            c.request_stream("tools/call", Some(json!({"name": format!("{prefix}__roots"), "arguments": {}}))).await;
        let Some(Message::Request { id, method, .. }) = within(call.next()).await else {
            panic!("{prefix}: no request")
        };
        assert_eq!(method, "roots/list", "{prefix}");
        let roots = json!({"roots": [{"uri": "file:///work/project", "name": "project"}]});
        assert_eq!(c.post_message(&Message::response(id, roots)).await.status.as_u16(), 202);
        let Some(Message::Response { result, .. }) = within(call.next()).await else { panic!("{prefix}: no result") };
        assert_eq!(text_of(&result), "roots: file:///work/project", "{prefix}");
    }
}

/// A 2026 upstream's `subscriptions/listen` stream takes the place of the GET stream, and is
/// open on the same terms: the catalog session's always (list changes), a client session's
/// only while its client can receive what it carries (here, while its GET stream is open).
#[actix_rt::test]
async fn a_2026_upstreams_listen_stream_is_open_only_while_something_can_receive_it() {
    let server = PythonServer::start().await;
    let mut upstream = UpstreamConfig::http("py", server.url.clone());
    upstream.stream_idle_secs = 0;
    let mut config = config_with(vec![upstream]);
    config.federation.max_tool_catalogs = 1;
    let gw = TestGateway::start(config);
    let streams = || gw.gateway.metrics().upstream_streams.with_label_values(&["py"]).get();
    let until = |n: i64, what: &'static str| {
        let streams = &streams;
        async move {
            let wait = async {
                while streams() != n {
                    tokio::task::yield_now().await;
                }
            };
            if tokio::time::timeout(std::time::Duration::from_secs(30), wait).await.is_err() {
                panic!("{what}: {} listen streams open to the upstream, not {n}", streams());
            }
        }
    };
    let mut plain = McpClient::new(&gw.url);
    plain.initialize().await;
    assert_eq!(text_of(&plain.call("py__echo", json!({"text": "x"})).await.unwrap()), "x");
    until(1, "a plain session").await;
    let mut get = plain.open_stream().await.expect("the GET stream opens");
    until(2, "the client listening").await;
    // What the stream carries reaches the client.
    plain.call("py__grow", json!({"name": "sprout"})).await.unwrap();
    notified(&mut get, "notifications/tools/list_changed").await;
    drop(get);
    until(1, "the client no longer listening").await;
}
