//! MCP 2026-07-28 upstreams behind the gateway (issue 15): the revision is detected (or pinned),
//! requests go stateless with `_meta` and the standard headers, `input_required` becomes the
//! client's own requests, the tasks extension is followed as a native task, and cancellation
//! closes the request's stream. Each peer is compared with the same client talking to it
//! directly.

use std::time::Duration;

use serde_json::{json, Value};
use taskgate_config::{UpstreamConfig, UpstreamProtocol};
use taskgate_testkit::{config_with, TestGateway};

use crate::interop::run_ts_client_with;
use crate::interop_modern::Reference;

/// The gateway in front of `upstreams`, relaying every progress value.
fn gateway(upstreams: Vec<UpstreamConfig>) -> TestGateway {
    let mut config = config_with(upstreams);
    config.progress.min_interval_ms = 0;
    TestGateway::start(config)
}

fn comparable(summary: &Value) -> Value {
    let mut summary = summary.clone();
    summary.as_object_mut().unwrap().remove("tools");
    summary
}

/// The TypeScript SDK v2 client, pinned to 2026-07-28 and in auto mode, sees the gateway in
/// front of a 2026-only TypeScript v2 server (`legacy: 'reject'`) as it sees that server:
/// tools, progress, an elicitation through MRTR at both hops, and an abort that reaches it.
#[actix_rt::test]
async fn a_2026_only_upstream_serves_the_typescript_v2_client_as_it_serves_it_directly() {
    let mut reference = Reference::start().await;
    let gw = gateway(vec![UpstreamConfig::http("modern", reference.url.clone())]);
    let mut cancelled = 0;
    for mode in ["pin", "auto"] {
        let direct = run_ts_client_with("modern-client.mjs", &[&reference.url, mode]).await;
        cancelled += 1;
        reference.cancelled(cancelled).await;
        let through = run_ts_client_with("modern-client.mjs", &[&gw.url, mode]).await;
        cancelled += 1;
        reference.cancelled(cancelled).await;
        assert_eq!(direct["ask"][0]["text"], "answer: Ada", "{mode}: {direct}");
        assert_eq!(comparable(&through), comparable(&direct), "{mode}: through the gateway vs directly");
        let tools: Vec<&str> = through["tools"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
        assert!(tools.contains(&"modern__echo"), "{tools:?}");
    }
    let _ = Duration::ZERO;
    let _ = UpstreamProtocol::Auto;
}

/// The TypeScript SDK 1.32 client (2025-11-25) gets the same through the gateway from the
/// 2026-only server as from the demo (a 2025-11-25 upstream with the same tools): progress,
/// the upstream's MRTR elicitation as a real `elicitation/create` answered by its handler, a
/// task (wrapped: the upstream has no tasks extension), and an abort that reaches the server.
#[actix_rt::test]
async fn a_2025_client_gets_from_a_2026_upstream_what_it_gets_from_a_2025_one() {
    let mut reference = Reference::start().await;
    let demo = taskgate_testkit::DemoUpstream::start();
    let modern = gateway(vec![UpstreamConfig::http("modern", reference.url.clone())]);
    let legacy = gateway(vec![demo.upstream("demo")]);
    let through_legacy = run_ts_client_with("legacy-client.mjs", &[&legacy.url]).await;
    let through_modern = run_ts_client_with("legacy-client.mjs", &[&modern.url]).await;
    reference.cancelled(1).await;
    assert_eq!(through_modern["ask"][0]["text"], "answer: Ada", "{through_modern}");
    assert_eq!(through_modern["progress"]["values"], json!([1, 2, 3]), "{through_modern}");
    assert_eq!(through_modern["task"]["result"][0]["text"], "in a task", "{through_modern}");
    assert_eq!(through_modern["aborted"], "rejected: McpError", "{through_modern}");
    assert_eq!(through_modern, through_legacy, "a 2026 upstream vs a 2025 one, through the gateway");
}
