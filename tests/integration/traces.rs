//! Traces over OTLP, received by a real OpenTelemetry receiver (Arize Phoenix, from PyPI,
//! started on loopback by the test): a span per client request and per upstream call, with
//! tenant, method, tool, upstream and task; the client's W3C `traceparent` (a header, or
//! `_meta`) is their parent, and the upstream call's span is the parent the upstream is given,
//! in its headers and in `_meta`, so one trace crosses the gateway. Off by default.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use taskgate_testkit::{
    config_with, interop_dir, stdio_demo_upstream, taskgate_bin, DemoUpstream, McpClient, ServedGateway, TestGateway,
};

use crate::support::{free_port, within};

/// Arize Phoenix serving OTLP/HTTP and its REST API on a free loopback port, its data in a
/// directory of its own; stopped when dropped.
struct Phoenix {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Phoenix {
    async fn start() -> Phoenix {
        let dir = tempfile::tempdir().unwrap();
        let (port, grpc) = (free_port(), free_port());
        let child = Command::new(interop_dir().join(".venv-otel/bin/phoenix"))
            .arg("serve")
            .env("PHOENIX_WORKING_DIR", dir.path())
            .env("PHOENIX_HOST", "127.0.0.1")
            .env("PHOENIX_PORT", port.to_string())
            .env("PHOENIX_GRPC_PORT", grpc.to_string())
            .env("PHOENIX_TELEMETRY_ENABLED", "false")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("Phoenix is installed (tests/interop/install makes tests/interop/.venv-otel)");
        let mut phoenix = Phoenix { child, url: format!("http://127.0.0.1:{port}"), _dir: dir };
        let http = reqwest::Client::new();
        // Phoenix's first start reads a large Python tree from a cold disk cache: 38 s on an
        // idle two-core machine, 10 s once cached. Its bound is its own; its exit ends the wait.
        let ready = tokio::time::timeout(Duration::from_secs(180), async {
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            loop {
                tick.tick().await;
                if let Some(status) = phoenix.child.try_wait().unwrap() {
                    panic!("Phoenix exited before it was ready: {status}");
                }
                let health = http.get(format!("{}/healthz", phoenix.url)).send().await;
                if health.is_ok_and(|r| r.status().is_success()) {
                    break;
                }
            }
        });
        ready.await.expect("Phoenix answered /healthz within 180 s");
        phoenix
    }

    /// Every span received, as Phoenix' REST API gives them.
    async fn spans(&self) -> Vec<Value> {
        let url = format!("{}/v1/projects/default/spans?limit=1000", self.url);
        let body = reqwest::get(url).await.unwrap().bytes().await.unwrap();
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        body["data"].as_array().cloned().unwrap_or_default()
    }

    /// Waits until `done` holds of the spans received.
    async fn until(&self, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        within(async {
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            loop {
                tick.tick().await;
                let spans = self.spans().await;
                if done(&spans) {
                    return spans;
                }
            }
        })
        .await
    }
}

impl Drop for Phoenix {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn attribute<'a>(span: &'a Value, name: &str) -> Option<&'a str> {
    span["attributes"][name].as_str()
}

fn trace_id(span: &Value) -> &str {
    span["context"]["trace_id"].as_str().unwrap_or_default()
}

fn span_id(span: &Value) -> &str {
    span["context"]["span_id"].as_str().unwrap_or_default()
}

/// The parts of a `traceparent`: (trace id, parent span id).
fn parts(traceparent: &str) -> (&str, &str) {
    let mut parts = traceparent.split('-').skip(1);
    (parts.next().unwrap(), parts.next().unwrap())
}

const CLIENT_A: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const CLIENT_B: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
const CLIENT_C: &str = "00-5b8efff798038103d269b633813fc60c-eee19b7ec3c1b174-01";

#[actix_rt::test]
async fn a_trace_crosses_the_gateway_from_the_client_to_the_upstream() {
    let phoenix = Phoenix::start().await;
    let demo = DemoUpstream::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("taskgate.toml");
    let local = stdio_demo_upstream("local");
    std::fs::write(
        &file,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n[store]\npath = \"{}\"\n[traces]\notlp_endpoint = \"{}/v1/traces\"\n\
             [[upstream]]\nname = \"demo\"\ntransport = \"http\"\nurl = \"{}\"\n\
             [[upstream]]\nname = \"local\"\ntransport = \"stdio\"\ncommand = \"{}\"\nargs = [\"demo-upstream\", \"--stdio\"]\n",
            dir.path().join("data").display(),
            phoenix.url,
            demo.http.url,
            local.command.unwrap()
        ),
    )
    .unwrap();
    let _bin = taskgate_bin();
    // Batches go every 100 ms (the SDK's standard variable), not every 5 s.
    let gw = ServedGateway::start_with_env(&file, &[("OTEL_BSP_SCHEDULE_DELAY", "100")]).await;
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    let traced = |mut headers: reqwest::header::HeaderMap, traceparent: &str| {
        headers.insert("traceparent", traceparent.parse().unwrap());
        headers
    };
    // A: the client's traceparent in a header, an HTTP upstream.
    let call = json!({"jsonrpc": "2.0", "id": 10, "method": "tools/call", "params": {"name": "demo__echo", "arguments": {"text": "a"}}});
    let r =
        reqwest::Client::new().post(&gw.url).headers(traced(c.headers(), CLIENT_A)).json(&call).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("\"a\""));
    // B: in `_meta`, a stdio upstream.
    let reply = c
        .request(
            "tools/call",
            Some(json!({"name": "local__echo", "arguments": {"text": "b"}, "_meta": {"traceparent": CLIENT_B}})),
        )
        .await;
    reply.outcome().unwrap();
    // C: a task (the gateway wraps the call), its result asked for later.
    let created = json!({"jsonrpc": "2.0", "id": 11, "method": "tools/call", "params": {"name": "demo__echo", "arguments": {"text": "c"}, "task": {}}});
    let r = reqwest::Client::new()
        .post(&gw.url)
        .headers(traced(c.headers(), CLIENT_C))
        .json(&created)
        .send()
        .await
        .unwrap();
    let body = r.text().await.unwrap();
    let task = body.split("\"taskId\":\"").nth(1).and_then(|t| t.split('"').next()).unwrap().to_owned();
    c.request("tasks/result", Some(json!({"taskId": task}))).await.outcome().unwrap();

    let (a_trace, a_parent) = parts(CLIENT_A);
    let (b_trace, b_parent) = parts(CLIENT_B);
    let (c_trace, _) = parts(CLIENT_C);
    let spans = phoenix
        .until(|spans| {
            [a_trace, b_trace, c_trace].iter().all(|t| spans.iter().filter(|s| trace_id(s) == *t).count() >= 2)
        })
        .await;
    let of = |trace: &str, name: &str| -> Value {
        spans
            .iter()
            .find(|s| trace_id(s) == trace && s["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {name} in {trace}: {spans:?}"))
    };

    // A: request span under the client's span, upstream call span under it, with the fields.
    let request = of(a_trace, "mcp_request");
    assert_eq!(request["parent_id"], a_parent);
    assert_eq!((attribute(&request, "tenant"), attribute(&request, "method")), (Some("anonymous"), Some("tools/call")));
    assert_eq!(attribute(&request, "tool"), Some("demo__echo"));
    let upstream = of(a_trace, "upstream_call");
    assert_eq!(upstream["parent_id"], span_id(&request));
    assert_eq!(attribute(&upstream, "upstream"), Some("demo"));
    // The upstream was told the upstream call's span, in its header and in `_meta`.
    let stats = demo.demo.stats();
    let sent = stats.header_traceparents.iter().find(|t| parts(t).0 == a_trace).expect("a traceparent header upstream");
    assert_eq!(parts(sent).1, span_id(&upstream));
    assert!(stats.meta_traceparents.contains(sent), "{:?}", stats.meta_traceparents);

    // B: from `_meta`, to a stdio upstream (its request carries it in `_meta`).
    let request = of(b_trace, "mcp_request");
    assert_eq!(request["parent_id"], b_parent);
    assert_eq!(attribute(&of(b_trace, "upstream_call"), "upstream"), Some("local"));

    // C: the request names the task it created; the task's own call is its child, and reaches
    // the upstream in the same trace.
    let request = of(c_trace, "mcp_request");
    assert_eq!(attribute(&request, "task"), Some(task.as_str()));
    let task_call = of(c_trace, "task_call");
    assert_eq!(task_call["parent_id"], span_id(&request));
    assert_eq!((attribute(&task_call, "task"), attribute(&task_call, "tool")), (Some(task.as_str()), Some("echo")));
    assert!(stats.header_traceparents.iter().any(|t| parts(t) == (c_trace, span_id(&task_call))), "{stats:?}");
    // The later tasks/result names the task too (a trace of its own: no traceparent came).
    assert!(
        spans.iter().any(|s| s["name"] == "mcp_request"
            && attribute(s, "method") == Some("tasks/result")
            && attribute(s, "task") == Some(task.as_str())),
        "{spans:?}"
    );
}

/// Without `[traces]`, nothing is passed on: upstreams see no trace context.
#[actix_rt::test]
async fn without_an_endpoint_no_trace_context_is_passed_on() {
    let demo = DemoUpstream::start();
    let gw = TestGateway::start(config_with(vec![demo.upstream("demo")]));
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    let call = json!({"jsonrpc": "2.0", "id": 10, "method": "tools/call", "params": {"name": "demo__echo", "arguments": {"text": "a"}}});
    let mut headers = c.headers();
    headers.insert("traceparent", CLIENT_A.parse().unwrap());
    assert_eq!(reqwest::Client::new().post(&gw.url).headers(headers).json(&call).send().await.unwrap().status(), 200);
    let stats = demo.demo.stats();
    assert_eq!(stats.calls, 1);
    assert!(stats.header_traceparents.is_empty() && stats.meta_traceparents.is_empty(), "{stats:?}");
}
