//! Interop at 2026-07-28 with the official v2 SDK clients, each run twice: against a 2026-07-28
//! server built with the TypeScript SDK v2 (`tests/interop/modern-server.mjs`), and through the
//! gateway to the demo (a 2025-11-25 upstream). The client must see the same thing both times:
//! the revision it settles on, tools, progress, an elicitation answered through MRTR by its own
//! handler, and a cancellation that reaches the server doing the work.

use std::time::Duration;

use serde_json::{json, Value};
use taskgate_testkit::{config_with, interop_dir, DemoUpstream, TestGateway};
use tokio::io::{BufReader, Lines};
use tokio::process::{Child, ChildStdout};

use crate::interop::{run_client, run_ts_client_with, start_node_server_with_output};

/// The TypeScript SDK v2 reference server, with the lines it prints as calls are cancelled.
pub struct Reference {
    _child: Child,
    pub url: String,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Reference {
    pub async fn start() -> Reference {
        let (child, url, lines) = start_node_server_with_output("modern-server.mjs").await;
        Reference { _child: child, url, lines }
    }

    /// Waits until the server says it has seen `count` cancelled calls.
    pub async fn cancelled(&mut self, count: u64) {
        self.seen("cancelled", count).await
    }

    /// Waits until `count` chatter calls have reached their gate (they are in flight there).
    pub async fn started(&mut self, count: u64) {
        self.seen("started", count).await
    }

    /// The next `Mcp-Param-Region` header value the server received.
    pub async fn region_header(&mut self) -> String {
        let wait = async {
            while let Some(line) = self.lines.next_line().await.unwrap() {
                if let Some(v) = serde_json::from_str::<Value>(&line).unwrap()["regionHeader"].as_str() {
                    return v.to_owned();
                }
            }
            panic!("the reference server exited");
        };
        tokio::time::timeout(Duration::from_secs(60), wait).await.expect("a request with the header arrived")
    }

    async fn seen(&mut self, what: &str, count: u64) {
        let wait = async {
            while let Some(line) = self.lines.next_line().await.unwrap() {
                if serde_json::from_str::<Value>(&line).unwrap()[what].as_u64() >= Some(count) {
                    return;
                }
            }
            panic!("the reference server exited");
        };
        tokio::time::timeout(Duration::from_secs(60), wait)
            .await
            .expect("the cancellation reached the reference server");
    }
}

/// The gateway in front of the demo, relaying every progress value (no coalescing, so that the
/// client sees exactly what the reference server sends).
fn gateway(demo: &DemoUpstream) -> TestGateway {
    let mut config = config_with(vec![demo.upstream("demo")]);
    config.progress.min_interval_ms = 0;
    TestGateway::start(config)
}

/// What must be equal directly and through the gateway: the summary without the tool list
/// (the gateway's has more tools, namespaced) and the listen acknowledgment (which depends on
/// what the server declares), which are checked on their own.
fn comparable(summary: &Value) -> Value {
    let mut summary = summary.clone();
    let object = summary.as_object_mut().unwrap();
    object.remove("tools");
    object.remove("listen");
    summary
}

fn assert_tools(direct: &Value, through: &Value) {
    let through: Vec<&str> = through["tools"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    // `region` is the reference's tool for header mirroring (modern_upstreams.rs); the demo has none.
    for tool in direct["tools"].as_array().unwrap().iter().filter(|t| *t != "region") {
        let namespaced = format!("demo__{}", tool.as_str().unwrap());
        assert!(through.contains(&namespaced.as_str()), "{namespaced} is not listed through the gateway: {through:?}");
    }
}

async fn cancellations_at(demo: &DemoUpstream, count: u64) {
    let stats = demo.demo.clone();
    tokio::time::timeout(Duration::from_secs(60), demo.demo.wait_in_flight(|_| stats.stats().cancelled >= count))
        .await
        .expect("the cancellation reached the upstream as notifications/cancelled");
}

/// `@modelcontextprotocol/client` 2.4 (pinned in tests/interop/package.json), pinned to
/// 2026-07-28 and in auto mode; its AbortSignal cancels the call.
#[actix_rt::test]
async fn the_typescript_v2_client_sees_the_gateway_as_it_sees_a_2026_server_pinned_and_in_auto_mode() {
    let mut reference = Reference::start().await;
    let demo = DemoUpstream::start();
    let gw = gateway(&demo);
    for (n, mode) in [(1, "pin"), (2, "auto")] {
        let direct = run_ts_client_with("modern-client.mjs", &[&reference.url, mode]).await;
        reference.cancelled(n).await;
        let through = run_ts_client_with("modern-client.mjs", &[&gw.url, mode]).await;
        cancellations_at(&demo, n).await;
        assert_eq!(direct["version"], "2026-07-28", "{mode}: {direct}");
        assert_eq!(direct["progress"]["values"], json!([1, 2, 3]), "{mode}: {direct}");
        assert_eq!(direct["ask"][0]["text"], "answer: Ada", "{mode}: {direct}");
        assert_eq!(direct["aborted"], "rejected: SdkError", "{mode}: {direct}");
        assert_eq!(comparable(&through), comparable(&direct), "{mode}: through the gateway vs directly");
        assert_tools(&direct, &through);
    }
}

/// Runs the Python SDK client (mcp 2.3.0, pinned in tests/interop/python/requirements.txt and
/// installed by tests/interop/install) and returns the JSON it printed last.
pub async fn run_python_client(url: &str, mode: &str) -> Value {
    let python = interop_dir().join(".venv/bin/python");
    assert!(python.exists(), "the Python SDK is not installed: run tests/interop/install");
    let mut command = tokio::process::Command::new(python);
    command.arg("python/modern_client.py").args([url, mode]);
    run_client(command).await
}

/// Python `mcp` 2.3.0, pinned to 2026-07-28 and in auto mode; cancelling its task cancels the
/// call, and `Client.listen` gets its acknowledgment.
#[actix_rt::test]
async fn the_python_v2_client_sees_the_gateway_as_it_sees_a_2026_server_pinned_and_in_auto_mode() {
    let mut reference = Reference::start().await;
    let demo = DemoUpstream::start();
    let gw = gateway(&demo);
    for (n, mode) in [(1, "pin"), (2, "auto")] {
        let direct = run_python_client(&reference.url, mode).await;
        reference.cancelled(n).await;
        let through = run_python_client(&gw.url, mode).await;
        cancellations_at(&demo, n).await;
        assert_eq!(direct["version"], "2026-07-28", "{mode}: {direct}");
        assert_eq!(direct["progress"]["values"], json!([1.0, 2.0, 3.0]), "{mode}: {direct}");
        assert_eq!(direct["ask"][0]["text"], "answer: Ada", "{mode}: {direct}");
        assert_eq!(direct["aborted"], "cancelled", "{mode}: {direct}");
        assert_eq!(comparable(&through), comparable(&direct), "{mode}: through the gateway vs directly");
        assert_tools(&direct, &through);
        // The gateway relays tools/list_changed (the reference server declares no listChanged).
        assert_eq!(through["listen"], json!({"toolsListChanged": true}), "{mode}: {through}");
        assert_eq!(direct["listen"], json!({"toolsListChanged": false}), "{mode}: {direct}");
    }
}
