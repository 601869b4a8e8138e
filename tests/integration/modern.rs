//! MCP 2026-07-28 clients at the front door (stateless requests, `server/discover`, the
//! standard headers, MRTR, `subscriptions/listen`) and the tasks extension, beside 2025-11-25
//! sessions on the same endpoint, through the real gateway to the real demo upstream.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use serde_json::{json, Value};
use taskgate_config::TaskSupportSetting;
use taskgate_protocol::Message;
use taskgate_testkit::{config_with, DemoUpstream, McpClient, Reply, TestGateway};

const V: &str = "2026-07-28";
const TASKS: &str = "io.modelcontextprotocol/tasks";

async fn within<F: std::future::Future>(event: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(60), event).await.expect("the awaited event did not happen in time")
}

/// A stateless client: every request carries its version and capabilities.
pub(crate) struct Client {
    http: McpClient,
    capabilities: Value,
    next: AtomicI64,
}

impl Client {
    pub(crate) fn new(url: &str, capabilities: Value) -> Client {
        Client { http: McpClient::new(url), capabilities, next: AtomicI64::new(1) }
    }

    fn with_tasks(url: &str) -> Client {
        Client::over(McpClient::new(url))
    }

    /// A client declaring elicitation and the tasks extension, over `http` (its credentials).
    pub(crate) fn over(http: McpClient) -> Client {
        Client::declaring(http, json!({"elicitation": {"form": {}}, "extensions": {TASKS: {}}}))
    }

    /// A client declaring `capabilities`, over `http` (its credentials).
    pub(crate) fn declaring(http: McpClient, capabilities: Value) -> Client {
        Client { http, capabilities, next: AtomicI64::new(1) }
    }

    fn params(&self, mut params: Value) -> Value {
        let meta = params.as_object_mut().unwrap().entry("_meta").or_insert_with(|| json!({}));
        meta["io.modelcontextprotocol/protocolVersion"] = json!(V);
        meta["io.modelcontextprotocol/clientCapabilities"] = self.capabilities.clone();
        meta["io.modelcontextprotocol/clientInfo"] = json!({"name": "modern-test", "version": "1"});
        params
    }

    /// Sends a request with the standard headers (streamable-http "Standard Request Headers").
    pub(crate) async fn send(&self, method: &str, params: Value) -> Reply {
        self.send_raw(method, self.params(params), &[]).await
    }

    /// Sends a request with the standard headers and `extra` ones (replacing any of the same
    /// name; "" drops one).
    pub(crate) async fn send_with(&self, method: &str, params: Value, extra: &[(&str, &str)]) -> Reply {
        self.send_raw(method, self.params(params), extra).await
    }

    /// Sends params as given, with the standard headers unless `extra` replaces them ("" drops one).
    async fn send_raw(&self, method: &str, params: Value, extra: &[(&str, &str)]) -> Reply {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let name =
            ["name", "uri", "taskId"].iter().find_map(|k| params.get(*k).and_then(Value::as_str)).map(str::to_owned);
        let body = Message::request(taskgate_protocol::RequestId::Number(id), method, Some(params)).to_json();
        let mut headers = vec![("mcp-protocol-version", V), ("mcp-method", method)];
        if let Some(name) = name.as_deref().filter(|_| taskgate_protocol::revision_2026::name_source(method).is_some())
        {
            headers.push(("mcp-name", name));
        }
        headers.extend_from_slice(extra);
        self.http.post_raw(body, &headers).await
    }

    /// Sends a request and returns its response stream, to read while it is open
    /// (`subscriptions/listen`, a call in progress).
    pub(crate) async fn stream(&self, method: &str, params: Value) -> taskgate_testkit::SseReader {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let name = ["name", "uri", "taskId"]
            .iter()
            .find_map(|k| params.get(*k).and_then(Value::as_str))
            .filter(|_| taskgate_protocol::revision_2026::name_source(method).is_some())
            .unwrap_or_default()
            .to_owned();
        let body =
            Message::request(taskgate_protocol::RequestId::Number(id), method, Some(self.params(params))).to_json();
        let mut request = reqwest::Client::new()
            .post(&self.http.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", V);
        if let Some(token) = &self.http.bearer {
            request = request.bearer_auth(token);
        }
        if !name.is_empty() {
            request = request.header("mcp-name", name);
        }
        let response = request.header("mcp-method", method).body(body).send().await.unwrap();
        taskgate_testkit::SseReader::from_response(response)
    }

    pub(crate) async fn ok(&self, method: &str, params: Value) -> Value {
        let reply = self.send(method, params).await;
        assert_eq!(reply.status, 200, "{reply:?}");
        reply.outcome().unwrap_or_else(|e| panic!("{method}: {e:?}"))
    }

    pub(crate) async fn call(&self, tool: &str, arguments: Value) -> Value {
        self.ok("tools/call", json!({"name": tool, "arguments": arguments})).await
    }

    /// Polls tasks/get until the task leaves `working` and `input_required`'s absence… until
    /// `done` says so (a bounded number of round trips).
    pub(crate) async fn poll(&self, task: &str, done: impl Fn(&Value) -> bool) -> Value {
        for _ in 0..5000 {
            let got = self.ok("tasks/get", json!({"taskId": task})).await;
            if done(&got) {
                return got;
            }
        }
        panic!("task {task} never reached the awaited state");
    }
}

fn gateway(demo: &DemoUpstream) -> TestGateway {
    TestGateway::start(config_with(vec![demo.upstream("demo")]))
}

fn error_of(reply: &Reply) -> (u16, i64, Value) {
    let e = reply.outcome().expect_err("an error");
    (reply.status.as_u16(), e.code, e.data.unwrap_or(Value::Null))
}

#[actix_rt::test]
async fn a_2026_client_discovers_and_calls_statelessly_beside_a_2025_session() {
    let demo = DemoUpstream::start();
    let gw = gateway(&demo);
    let client = Client::new(&gw.url, json!({}));
    // server/discover: versions, capabilities with the tasks extension, identity, caching.
    let reply = client.send("server/discover", json!({})).await;
    assert_eq!(reply.status, 200);
    assert!(reply.headers.get("mcp-session-id").is_none(), "no session is minted");
    let discovered = reply.outcome().unwrap();
    assert_eq!(discovered["resultType"], "complete");
    assert_eq!(discovered["supportedVersions"][0], V);
    assert!(discovered["supportedVersions"].as_array().unwrap().contains(&json!("2025-11-25")));
    assert_eq!(discovered["capabilities"]["extensions"][TASKS], json!({}));
    assert_eq!(discovered["capabilities"]["tools"]["listChanged"], true);
    assert_eq!(discovered["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "taskgate");
    assert_eq!((discovered["ttlMs"].as_u64(), discovered["cacheScope"].as_str()), (Some(0), Some("private")));
    // tools/list with the caching fields; tools/call answered as one JSON object.
    let listed = client.ok("tools/list", json!({})).await;
    assert_eq!((listed["resultType"].as_str(), listed["cacheScope"].as_str()), (Some("complete"), Some("private")));
    assert!(listed["tools"].as_array().unwrap().iter().any(|t| t["name"] == "demo__echo"));
    let before = demo.demo.stats().initializes;
    let reply = client.send("tools/call", json!({"name": "demo__echo", "arguments": {"text": "hi"}})).await;
    assert!(!reply.sse, "a quick result is one JSON object");
    let result = reply.outcome().unwrap();
    assert_eq!(result["resultType"], "complete");
    assert_eq!(result["content"][0]["text"], "hi");
    assert_eq!(result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "taskgate");
    // Stateless requests share a pooled session: more calls open no more upstream sessions.
    for i in 0..5 {
        assert_eq!(
            client.call("demo__echo", json!({"text": format!("{i}")})).await["content"][0]["text"],
            format!("{i}")
        );
    }
    assert!(demo.demo.stats().initializes <= before + 1, "one upstream session for all the stateless calls");
    // The per-request _meta is the gateway's: it does not reach the 2025 upstream.
    assert_eq!(demo.demo.stats().last_client_info["name"], "modern-test");
    // A clientInfo without a name (the field is optional and unchecked per request) is served.
    let nameless = Client::new(&gw.url, json!({"roots": {}}));
    let mut params = nameless.params(json!({"name": "demo__echo", "arguments": {"text": "anon"}}));
    params["_meta"]["io.modelcontextprotocol/clientInfo"] = json!({"version": 3});
    let reply = nameless.send_raw("tools/call", params, &[]).await;
    assert_eq!(reply.outcome().unwrap()["content"][0]["text"], "anon", "{reply:?}");
    // A 2025-11-25 session on the same endpoint works as before.
    let mut legacy = McpClient::new(&gw.url);
    assert_eq!(legacy.initialize().await["protocolVersion"], "2025-11-25");
    assert_eq!(legacy.call("demo__echo", json!({"text": "old"})).await.unwrap()["content"][0]["text"], "old");
}

#[actix_rt::test]
async fn requests_are_validated_as_2026_07_28_requires() {
    let demo = DemoUpstream::start();
    let gw = gateway(&demo);
    let client = Client::new(&gw.url, json!({}));
    let call = |text: &str| json!({"name": "demo__echo", "arguments": {"text": text}});
    // streamable-http "Server Validation": -32020 with 400.
    for (extra, why) in [
        (vec![("mcp-protocol-version", "")], "no MCP-Protocol-Version"),
        (vec![("mcp-protocol-version", "2025-11-25")], "version header differs from _meta"),
        (vec![("mcp-method", "")], "no Mcp-Method"),
        (vec![("mcp-method", "tools/list")], "Mcp-Method differs"),
        (vec![("mcp-name", "")], "no Mcp-Name"),
        (vec![("mcp-name", "demo__add")], "Mcp-Name differs"),
        (vec![("mcp-name", "=?base64?!!?=")], "Mcp-Name not Base64"),
    ] {
        let reply = client.send_raw("tools/call", client.params(call("x")), &extra).await;
        assert_eq!((error_of(&reply).0, error_of(&reply).1), (400, -32020), "{why}");
    }
    // An encoded Mcp-Name is decoded before the comparison.
    let reply =
        client.send_raw("tools/call", client.params(call("b64")), &[("mcp-name", "=?base64?ZGVtb19fZWNobw==?=")]).await;
    assert_eq!(reply.outcome().unwrap()["content"][0]["text"], "b64");
    // basic "`_meta`": a missing required field is -32602 with 400.
    let no_caps =
        json!({"name": "demo__echo", "arguments": {}, "_meta": {"io.modelcontextprotocol/protocolVersion": V}});
    assert_eq!(error_of(&client.send_raw("tools/call", no_caps, &[]).await).0, 400);
    let reply = client.send_raw("tools/call", json!({"name": "demo__echo"}), &[]).await;
    assert_eq!((error_of(&reply).0, error_of(&reply).1), (400, -32602), "the 2026 header without _meta");
    // basic/versioning: an unsupported version is -32022 with the supported ones.
    let old = json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "1900-01-01", "io.modelcontextprotocol/clientCapabilities": {}}});
    let reply = client.send_raw("server/discover", old, &[("mcp-protocol-version", "1900-01-01")]).await;
    let (status, code, data) = error_of(&reply);
    assert_eq!((status, code, data["requested"].as_str()), (400, -32022, Some("1900-01-01")));
    assert!(data["supported"].as_array().unwrap().contains(&json!(V)));
    // A method this revision does not have: 404 and -32601.
    for removed in ["ping", "logging/setLevel", "tasks/list", "tasks/result", "resources/subscribe"] {
        let reply = client.send(removed, json!({"level": "info", "taskId": "x", "uri": "x"})).await;
        assert_eq!((error_of(&reply).0, error_of(&reply).1), (404, -32601), "{removed}");
    }
    // ext-tasks: the task methods and taskIds need the extension declared: -32021 with 400.
    let reply = client.send("tasks/get", json!({"taskId": "nope"})).await;
    let (status, code, data) = error_of(&reply);
    assert_eq!((status, code), (400, -32021));
    assert_eq!(data["requiredCapabilities"]["extensions"][TASKS], json!({}));
    let reply = client.send("subscriptions/listen", json!({"notifications": {"taskIds": ["x"]}})).await;
    assert_eq!((error_of(&reply).0, error_of(&reply).1), (400, -32021));
    // A client response POSTed statelessly is refused; a notification is accepted and ignored.
    let response = json!({"jsonrpc": "2.0", "id": 1, "result": {}}).to_string();
    assert_eq!(client.http.post_raw(response, &[("mcp-protocol-version", V)]).await.status, 400);
    let note = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": client.params(json!({"requestId": 1}))});
    assert_eq!(client.http.post_raw(note.to_string(), &[("mcp-protocol-version", V)]).await.status, 202);
}

#[actix_rt::test]
async fn progress_comes_back_with_the_clients_token_and_logs_only_at_the_requests_level() {
    let demo = DemoUpstream::start();
    let gw = gateway(&demo);
    let a = Client::new(&gw.url, json!({}));
    // Two requests of one identity with the same token share the pooled session: each gets
    // its own progress, with the token it sent.
    let params = |values: Value| json!({"name": "demo__progress", "arguments": {"values": values}, "_meta": {"progressToken": "same"}});
    let (one, two) =
        tokio::join!(a.send("tools/call", params(json!([1, 2]))), a.send("tools/call", params(json!([5]))));
    for (reply, expected) in [(one, vec![1.0, 2.0]), (two, vec![5.0])] {
        let progress: Vec<f64> = reply
            .notifications()
            .iter()
            .filter_map(|m| match m {
                Message::Notification { method, params: Some(p) } if method == "notifications/progress" => {
                    assert_eq!(p["progressToken"], "same");
                    p["progress"].as_f64()
                }
                _ => None,
            })
            .collect();
        assert_eq!(progress, expected, "{reply:?}");
        assert_eq!(reply.outcome().unwrap()["resultType"], "complete");
    }
    // server/utilities/logging: no log messages without a level; those at or above it with one.
    let chatter = |level: Option<&str>| {
        let mut p = json!({"name": "demo__chatter", "arguments": {"count": 2, "bytes": 4}});
        if let Some(level) = level {
            p["_meta"] = json!({"io.modelcontextprotocol/logLevel": level});
        }
        p
    };
    let logs = |reply: &Reply| reply.notifications().len();
    assert_eq!(logs(&a.send("tools/call", chatter(None)).await), 0);
    assert_eq!(logs(&a.send("tools/call", chatter(Some("error"))).await), 0);
    let reply = a.send("tools/call", chatter(Some("debug"))).await;
    assert_eq!(logs(&reply), 2, "{reply:?}");
}

#[actix_rt::test]
async fn closing_the_response_stream_cancels_the_upstream_request() {
    let demo = DemoUpstream::start();
    let gw = gateway(&demo);
    let client = Client::new(&gw.url, json!({}));
    let params = client.params(json!({"name": "demo__wait", "arguments": {"gate": "never"}}));
    let body = Message::request(taskgate_protocol::RequestId::Number(1), "tools/call", Some(params)).to_json();
    let response = reqwest::Client::new()
        .post(&gw.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", V)
        .header("mcp-method", "tools/call")
        .header("mcp-name", "demo__wait")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["content-type"], "text/event-stream", "a call still running is streamed");
    within(demo.demo.wait_in_flight(|n| *n == 1)).await;
    // basic/patterns/cancellation: closing the stream is the cancellation; the gateway tells
    // the 2025 upstream with notifications/cancelled.
    drop(response);
    let stats = demo.demo.clone();
    within(demo.demo.wait_in_flight(|_| stats.stats().cancelled >= 1)).await;
    assert_eq!(demo.demo.stats().cancelled, 1);
}

/// basic/patterns/mrtr "Supported Requests": only `tools/call`, `prompts/get` and
/// `resources/read` may answer `input_required`. An upstream that asks during another request
/// (here `completion/complete`) is answered on the client's behalf with an error, and the
/// client gets the request's own result.
#[actix_rt::test]
async fn an_upstream_asking_during_a_request_without_input_required_is_refused_for_the_client() {
    let demo = DemoUpstream::start();
    let gw = gateway(&demo);
    let client = Client::new(&gw.url, json!({"elicitation": {"form": {}}}));
    let complete = |value: &str| json!({"ref": {"type": "ref/prompt", "name": "demo__greet"}, "argument": {"name": "name", "value": value}});
    let plain = client.ok("completion/complete", complete("A")).await;
    assert_eq!(plain["resultType"], "complete", "{plain}");
    let asked = client.ok("completion/complete", complete("?ask")).await;
    assert_eq!(asked["resultType"], "complete", "{asked}");
    assert!(asked.get("inputRequests").is_none(), "{asked}");
    assert_eq!(asked["completion"]["values"], json!(["refused -32601"]), "{asked}");
}

#[actix_rt::test]
async fn an_upstream_elicitation_becomes_input_required_and_the_retry_answers_it() {
    let demo = DemoUpstream::start();
    let gw = gateway(&demo);
    let client = Client::new(&gw.url, json!({"elicitation": {"form": {}}}));
    let ask = json!({"name": "demo__ask", "arguments": {"question": "Name?"}});
    let first = client.call("demo__ask", json!({"question": "Name?"})).await;
    assert_eq!(first["resultType"], "input_required", "{first}");
    let requests = first["inputRequests"].as_object().unwrap();
    assert_eq!(requests.len(), 1);
    let (key, request) = requests.iter().next().unwrap();
    assert_eq!(request["method"], "elicitation/create");
    assert_eq!(request["params"]["message"], "Name?");
    let state = first["requestState"].as_str().unwrap().to_owned();
    // A forged or altered state, or one for other params, is refused and resumes nothing.
    let mut retry = ask.clone();
    retry["inputResponses"] = json!({ key: {"action": "accept", "content": {"answer": "Ada"}} });
    for bad in [format!("{state}x"), "forged".to_owned()] {
        let mut r = retry.clone();
        r["requestState"] = json!(bad);
        assert_eq!(client.send("tools/call", r).await.outcome().unwrap_err().code, -32602);
    }
    let mut other = retry.clone();
    other["arguments"] = json!({"question": "Other?"});
    other["requestState"] = json!(state);
    assert_eq!(client.send("tools/call", other).await.outcome().unwrap_err().code, -32602);
    // The retry: the answer reaches the waiting upstream request, and the call completes.
    retry["requestState"] = json!(state);
    let done = client.ok("tools/call", retry.clone()).await;
    assert_eq!(done["resultType"], "complete");
    assert_eq!(done["content"][0]["text"], "answer: Ada");
    // The state is single use.
    let again = client.send("tools/call", retry).await;
    assert_eq!(again.outcome().unwrap_err().code, -32602);
    // A client that did not declare elicitation is never asked (the upstream is refused).
    let plain = Client::new(&gw.url, json!({}));
    let refused = plain.send("tools/call", json!({"name": "demo__ask", "arguments": {"question": "?"}})).await;
    assert_eq!(refused.outcome().unwrap_err().code, -32601, "{refused:?}");
}

#[actix_rt::test]
async fn a_retry_that_never_comes_releases_the_upstream_request() {
    let demo = DemoUpstream::start();
    let mut config = config_with(vec![demo.upstream("demo")]);
    config.server.input_wait_secs = 60;
    let clock = std::sync::Arc::new(taskgate_core::clock::ManualClock::new(1_764_066_600_000));
    let gw = TestGateway::start_with_clock(config, clock.clone());
    let client = Client::new(&gw.url, json!({"elicitation": {"form": {}}}));
    let first = client.call("demo__ask", json!({"question": "anyone?"})).await;
    assert_eq!(first["resultType"], "input_required");
    within(demo.demo.wait_in_flight(|n| *n == 1)).await;
    // Not yet due: nothing is released.
    clock.advance(59_000);
    gw.front.release_due().await;
    assert_eq!(demo.demo.in_flight(), 1);
    // server.input_wait_secs later the upstream's question gets an error, and its call ends.
    clock.advance(1_000);
    gw.front.release_due().await;
    within(demo.demo.wait_in_flight(|n| *n == 0)).await;
    let mut retry = json!({"name": "demo__ask", "arguments": {"question": "anyone?"}});
    retry["requestState"] = first["requestState"].clone();
    retry["inputResponses"] = json!({});
    assert_eq!(client.send("tools/call", retry).await.outcome().unwrap_err().code, -32602);
}

#[actix_rt::test]
async fn the_tasks_extension_gets_tasks_polled_updated_and_cancelled_from_the_one_task_store() {
    let demo = DemoUpstream::start();
    let mut upstream = demo.upstream("demo");
    upstream.tool_task_support.insert("echo".into(), TaskSupportSetting::Forbidden);
    upstream.tool_task_support.insert("add".into(), TaskSupportSetting::Required);
    let gw = TestGateway::start(config_with(vec![upstream]));
    let client = Client::with_tasks(&gw.url);
    // ext-tasks "Task Creation": resultType task with the flat task fields.
    let created = client.call("demo__wait", json!({"gate": "g1"})).await;
    assert_eq!(created["resultType"], "task", "{created}");
    let task = created["taskId"].as_str().unwrap().to_owned();
    assert_eq!(created["status"], "working");
    assert!(created.get("ttlMs").is_some() && created.get("task").is_none(), "{created}");
    let working = client.ok("tasks/get", json!({"taskId": task})).await;
    assert_eq!((working["resultType"].as_str(), working["status"].as_str()), (Some("complete"), Some("working")));
    demo.demo.release("g1");
    let done = client.poll(&task, |t| t["status"] == "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "gate g1 opened", "{done}");
    // A tool error is completed with the result (failed is for JSON-RPC errors only).
    let failing = client.call("demo__fail", json!({"message": "no"})).await;
    let failed = client.poll(failing["taskId"].as_str().unwrap(), |t| t["status"] != "working").await;
    assert_eq!((failed["status"].as_str(), failed["result"]["isError"].as_bool()), (Some("completed"), Some(true)));
    let erring = client.call("demo__error", json!({"code": -32050, "message": "bad"})).await;
    let errored = client.poll(erring["taskId"].as_str().unwrap(), |t| t["status"] != "working").await;
    assert_eq!((errored["status"].as_str(), errored["error"]["code"].as_i64()), (Some("failed"), Some(-32050)));
    // Input during a task: tasks/get lists the request (each time), tasks/update answers it.
    let asking = client.call("demo__ask", json!({"question": "Colour?"})).await;
    let asking = asking["taskId"].as_str().unwrap().to_owned();
    let waiting = client.poll(&asking, |t| t["status"] == "input_required").await;
    let (key, request) =
        waiting["inputRequests"].as_object().unwrap().iter().next().map(|(k, v)| (k.clone(), v.clone())).unwrap();
    assert_eq!(request["method"], "elicitation/create");
    let again = client.ok("tasks/get", json!({"taskId": asking})).await;
    assert_eq!(again["inputRequests"][&key], request, "outstanding requests are listed on every poll");
    let ack = client.ok("tasks/update", json!({"taskId": asking, "inputResponses": {key.clone(): {"action": "accept", "content": {"answer": "red"}}, "unknown": {}}})).await;
    assert_eq!(
        ack,
        json!({"resultType": "complete", "_meta": {"io.modelcontextprotocol/serverInfo": ack["_meta"]["io.modelcontextprotocol/serverInfo"]}})
    );
    let answered = client.poll(&asking, |t| t["status"] == "completed").await;
    assert_eq!(answered["result"]["content"][0]["text"], "answer: red");
    // tasks/cancel: an empty acknowledgement, then the task is cancelled.
    let doomed = client.call("demo__wait", json!({"gate": "never"})).await;
    let doomed = doomed["taskId"].as_str().unwrap().to_owned();
    let ack = client.ok("tasks/cancel", json!({"taskId": doomed})).await;
    assert_eq!(ack["resultType"], "complete");
    assert_eq!(client.poll(&doomed, |t| t["status"] != "working").await["status"], "cancelled");
    // A task that already ended is acknowledged too (cancellation is cooperative): completed,
    // failed or cancelled, it stays as it is.
    for ended in [&task, erring["taskId"].as_str().unwrap(), &doomed] {
        let before = client.ok("tasks/get", json!({"taskId": ended})).await["status"].clone();
        let ack = client.ok("tasks/cancel", json!({"taskId": ended})).await;
        assert_eq!(ack["resultType"], "complete", "{ack}");
        assert!(ack.get("status").is_none() && ack.get("taskId").is_none(), "an empty result: {ack}");
        assert_eq!(client.ok("tasks/get", json!({"taskId": ended})).await["status"], before);
    }
    // Unknown ids: -32602.
    for method in ["tasks/get", "tasks/update", "tasks/cancel"] {
        let reply = client.send(method, json!({"taskId": "no-such-task", "inputResponses": {}})).await;
        assert_eq!(reply.outcome().unwrap_err().code, -32602, "{method}");
    }
    // The gateway decides: a tool that must not run as a task answers plainly; a tool that
    // must is refused to a client without the extension; a client without it never gets one.
    assert_eq!(client.call("demo__echo", json!({"text": "plain"})).await["resultType"], "complete");
    let plain = Client::new(&gw.url, json!({}));
    assert_eq!(plain.call("demo__wait", json!({"gate": "g1"})).await["resultType"], "complete");
    let reply = plain.send("tools/call", json!({"name": "demo__add", "arguments": {"a": 1, "b": 2}})).await;
    assert_eq!((error_of(&reply).0, error_of(&reply).1), (400, -32021));
    // One task store for both revisions: a 2025 session's task is read by the 2026 client of
    // the same identity, and the other way round.
    let mut legacy = McpClient::new(&gw.url);
    legacy.initialize().await;
    let made = legacy
        .request("tools/call", Some(json!({"name": "demo__wait", "arguments": {"gate": "g2"}, "task": {}})))
        .await;
    let old_task = made.outcome().unwrap()["task"]["taskId"].as_str().unwrap().to_owned();
    demo.demo.release("g2");
    let seen = client.poll(&old_task, |t| t["status"] == "completed").await;
    assert_eq!(seen["result"]["content"][0]["text"], "gate g2 opened");
    let from_2025 = legacy.request("tasks/get", Some(json!({"taskId": task}))).await.outcome().unwrap();
    assert_eq!(from_2025["status"], "completed");
}

/// The next notification on a listen that is not a tool list change (the gateway may announce
/// one twice: by the upstream, and after it re-lists its catalog; a listener refetches either
/// way).
async fn next_other_than_a_tool_change(stream: &mut taskgate_testkit::SseReader) -> (String, Value) {
    loop {
        let Some(Message::Notification { method, params: Some(p) }) = stream.next().await else { panic!("no change") };
        if method != "notifications/tools/list_changed" {
            return (method, p);
        }
    }
}

#[actix_rt::test]
async fn subscriptions_listen_delivers_the_changes_a_client_opted_in_to() {
    let demo = DemoUpstream::start();
    let gw = gateway(&demo);
    let client = Client::new(&gw.url, json!({}));
    let listed = client.ok("resources/list", json!({})).await;
    let counter = listed["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["uri"].as_str().unwrap().ends_with("demo://counter"))
        .map(|r| r["uri"].as_str().unwrap().to_owned())
        .expect("the demo's counter resource");
    let params =
        client.params(json!({"notifications": {"toolsListChanged": true, "promptsListChanged": true, "resourcesListChanged": true, "resourceSubscriptions": [counter]}}));
    let body =
        Message::request(taskgate_protocol::RequestId::String("sub-1".into()), "subscriptions/listen", Some(params))
            .to_json();
    let response = reqwest::Client::new()
        .post(&gw.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", V)
        .header("mcp-method", "subscriptions/listen")
        .body(body)
        .send()
        .await
        .unwrap();
    let mut stream = taskgate_testkit::SseReader::from_response(response);
    // The acknowledgment comes first, with the subscription id and what is honoured.
    let Some(Message::Notification { method, params: Some(ack) }) = stream.next().await else { panic!("no ack") };
    assert_eq!(method, "notifications/subscriptions/acknowledged");
    assert_eq!(ack["_meta"]["io.modelcontextprotocol/subscriptionId"], "sub-1");
    assert_eq!(ack["notifications"]["toolsListChanged"], true);
    assert_eq!(ack["notifications"]["resourceSubscriptions"], json!([counter]));
    // Changes arrive tagged; nothing else does.
    client.call("demo__touch", json!({})).await;
    let Some(Message::Notification { method, params: Some(p) }) = stream.next().await else { panic!("no update") };
    assert_eq!((method.as_str(), p["uri"].as_str()), ("notifications/resources/updated", Some(counter.as_str())));
    assert_eq!(p["_meta"]["io.modelcontextprotocol/subscriptionId"], "sub-1");
    client.call("demo__toggle_extra", json!({})).await;
    let Some(Message::Notification { method, params: Some(p) }) = stream.next().await else { panic!("no change") };
    assert_eq!(method, "notifications/tools/list_changed");
    assert_eq!(p["_meta"]["io.modelcontextprotocol/subscriptionId"], "sub-1");
    // A prompt list change (the upstream session for prompts was opened by the listen itself).
    assert_eq!(ack["notifications"]["promptsListChanged"], true);
    client.call("demo__toggle_prompt", json!({})).await;
    let (method, p) = next_other_than_a_tool_change(&mut stream).await;
    assert_eq!(method, "notifications/prompts/list_changed");
    assert_eq!(p["_meta"]["io.modelcontextprotocol/subscriptionId"], "sub-1");
    // A resource list change.
    assert_eq!(ack["notifications"]["resourcesListChanged"], true);
    client.call("demo__toggle_resource", json!({})).await;
    let (method, p) = next_other_than_a_tool_change(&mut stream).await;
    assert_eq!(method, "notifications/resources/list_changed");
    assert_eq!(p["_meta"]["io.modelcontextprotocol/subscriptionId"], "sub-1");
    // "Graceful Closure": when the gateway ends the subscription (here, it shuts down), the
    // listen request gets its result, tagged, and the stream ends.
    gw.gateway.shutdown().await;
    let result = loop {
        match stream.next().await.expect("the listen ended without its result") {
            Message::Notification { .. } => continue,
            other => break other,
        }
    };
    let Message::Response { id, result } = result else { panic!("not a result: {result:?}") };
    assert_eq!(id, taskgate_protocol::RequestId::String("sub-1".into()));
    assert_eq!(result["resultType"], "complete", "{result}");
    assert_eq!(result["_meta"]["io.modelcontextprotocol/subscriptionId"], "sub-1");
    assert!(stream.next().await.is_none(), "the stream ends after the result");
}
