//! Upstream sessions: lazily opened per client session with the client's capabilities,
//! re-initialized when expired, bounded stdio processes, dead upstreams, redirects (not
//! followed) and the environment's proxy.

use serde_json::json;
use taskgate_config::UpstreamConfig;
use taskgate_testkit::{config_with, stdio_demo_upstream, DemoUpstream, McpClient, TestGateway};

use crate::support::within;

/// Waits (bounded) until `upstream` runs `n` stdio processes: a process ends in its own time once
/// its session lets it go.
async fn processes_become(gw: &TestGateway, upstream: &str, n: usize) {
    within(async {
        while gw.gateway.upstream_processes(upstream) != Some(n) {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await;
}

#[actix_rt::test]
async fn one_upstream_session_per_client_session_declaring_the_clients_capabilities() {
    let demo = DemoUpstream::start();
    // `never`: each client session has upstream sessions of its own (no pool).
    let mut upstream = demo.upstream("demo");
    upstream.share_sessions = taskgate_config::ShareSessions::Never;
    let gw = TestGateway::start(config_with(vec![upstream]));
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
    // a listens on its GET stream: it holds its upstream session, and so its process.
    let _listening = a.open_stream().await.unwrap();
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

/// The gateway in front of `demo` with one tool catalog (no variant per capability set, so
/// the only catalog session is the base one), the upstream's settings as `tune` sets them.
fn one_catalog_gateway(demo: &DemoUpstream, tune: impl FnOnce(&mut UpstreamConfig)) -> TestGateway {
    let mut upstream = demo.upstream("demo");
    tune(&mut upstream);
    let mut config = config_with(vec![upstream]);
    config.federation.max_tool_catalogs = 1;
    TestGateway::start(config)
}

/// Waits until the gateway holds `n` GET streams open to the demo (its own count, exported as
/// `taskgate_upstream_streams`; the demo, an actix server, notices a closed stream only when
/// it next writes to it).
async fn open_streams(gw: &TestGateway, n: i64, when: &str) {
    let streams = || gw.gateway.metrics().upstream_streams.with_label_values(&["demo"]).get();
    until(|| streams() == n, &format!("{when}: {n} GET streams open to the upstream")).await;
}

/// Waits (a bounded time) until `done` holds.
async fn until(done: impl Fn() -> bool, what: &str) {
    let wait = async {
        while !done() {
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(30), wait)
        .await
        .unwrap_or_else(|_| panic!("{what}: not in time"));
}

/// The stream's next message (a bounded wait; the stream must not end).
async fn next_message(stream: &mut taskgate_testkit::SseReader) -> taskgate_protocol::Message {
    within(stream.next()).await.expect("the stream ended early")
}

/// streamable-http "Listening for Messages from the Server": an upstream session's GET stream
/// is open only while something can receive what it carries. The gateway's catalog session
/// always listens (list changes); a client session that cannot be asked anything listens only
/// while its client has its own GET stream open, and what comes reaches it; one that can be
/// asked (elicitation, sampling, roots) always listens. With `stream_idle_secs = 0`, an
/// unneeded stream closes as soon as nothing needs it.
#[actix_rt::test]
async fn an_upstream_get_stream_is_open_only_while_something_can_receive_what_it_carries() {
    let demo = DemoUpstream::start();
    let gw = one_catalog_gateway(&demo, |u| {
        u.stream_idle_secs = 0;
        // Each client session's own upstream session (pooled ones are let go between calls).
        u.share_sessions = taskgate_config::ShareSessions::Never;
    });
    let mut plain = McpClient::new(&gw.url);
    plain.initialize().await;
    plain.call("demo__echo", json!({"text": "x"})).await.unwrap();
    open_streams(&gw, 1, "a plain session").await; // the catalog session's only

    let mut get = plain.open_stream().await.expect("the GET stream opens");
    open_streams(&gw, 2, "the client listening").await;
    // What the upstream sends there reaches the client: a list change.
    plain.call("demo__toggle_extra", json!({})).await.unwrap();
    while !matches!(next_message(&mut get).await, taskgate_protocol::Message::Notification { method, .. } if method == "notifications/tools/list_changed")
    {
    }
    drop(get);
    open_streams(&gw, 1, "the client no longer listening").await;

    let mut asking = McpClient::new(&gw.url);
    asking.initialize_with("2025-11-25", json!({"elicitation": {}})).await;
    asking.call("demo__echo", json!({"text": "y"})).await.unwrap();
    open_streams(&gw, 2, "a session that can be asked").await;
    // More plain sessions hold none.
    for _ in 0..3 {
        let mut other = McpClient::new(&gw.url);
        other.initialize().await;
        other.call("demo__echo", json!({"text": "z"})).await.unwrap();
    }
    assert_eq!(gw.gateway.metrics().upstream_streams.with_label_values(&["demo"]).get(), 2);
}

/// `upstream[].max_connections` bounds the connections to an HTTP upstream, all its sessions
/// together: with 2, the catalog session's GET stream holds one and requests share the other.
/// A second client's call waits (counted in `taskgate_upstream_connection_waits_total`) and
/// does not reach the upstream until the first call's connection is free; then it goes.
#[actix_rt::test]
async fn upstream_connections_are_bounded_and_a_request_waits_for_one() {
    let demo = DemoUpstream::start();
    let gw = one_catalog_gateway(&demo, |u| u.max_connections = 2);
    let metrics = gw.gateway.metrics();
    let in_use = || metrics.upstream_connections.with_label_values(&["demo"]).get();
    let waits = || metrics.upstream_connection_waits.with_label_values(&["demo"]).get();
    let mut first = McpClient::new(&gw.url);
    first.initialize().await;
    let mut second = McpClient::new(&gw.url);
    second.initialize().await;
    second.call("demo__echo", json!({"text": "warm"})).await.unwrap();
    open_streams(&gw, 1, "the catalog's GET stream").await;

    let held = actix_rt::spawn(async move { first.call("demo__wait", json!({"gate": "first"})).await });
    until(|| demo.demo.in_flight() == 1, "the first call at the upstream").await;
    assert_eq!(in_use(), 2, "the GET stream and the first call");
    let before = waits();
    let queued = actix_rt::spawn(async move { second.call("demo__wait", json!({"gate": "second"})).await });
    until(|| waits() == before + 1, "the second call waiting for a connection").await;
    assert_eq!(demo.demo.stats().calls, 2, "the warm-up and the first call only");

    demo.demo.release("first");
    assert_eq!(held.await.unwrap().unwrap()["content"][0]["text"], "gate first opened");
    until(|| demo.demo.stats().calls == 3, "the second call at the upstream").await;
    demo.demo.release("second");
    assert_eq!(queued.await.unwrap().unwrap()["content"][0]["text"], "gate second opened");
    until(|| in_use() == 1, "only the GET stream in use").await;
}

/// A request holding the last connection can still be answered: the client's answer to the
/// upstream's elicitation goes back outside the bound (with `max_connections = 2`, the
/// catalog's GET stream holds one and the call the other).
#[actix_rt::test]
async fn an_answer_to_the_upstream_is_not_held_back_by_the_connection_bound() {
    let demo = DemoUpstream::start();
    let gw = one_catalog_gateway(&demo, |u| u.max_connections = 2);
    let mut c = McpClient::new(&gw.url);
    c.initialize_with("2025-11-25", json!({"elicitation": {"form": {}}})).await;
    let mut call =
        c.request_stream("tools/call", Some(json!({"name": "demo__ask", "arguments": {"question": "Name?"}}))).await;
    let asked = loop {
        match next_message(&mut call).await {
            taskgate_protocol::Message::Request { id, method, .. } if method == "elicitation/create" => break id,
            _ => continue,
        }
    };
    assert_eq!(gw.gateway.metrics().upstream_connections.with_label_values(&["demo"]).get(), 2);
    let answer = json!({"action": "accept", "content": {"answer": "Ada"}});
    assert_eq!(c.post_message(&taskgate_protocol::Message::response(asked, answer)).await.status.as_u16(), 202);
    let result = loop {
        if let taskgate_protocol::Message::Response { result, .. } = next_message(&mut call).await {
            break result;
        }
    };
    assert!(result["content"][0]["text"].as_str().unwrap_or_default().contains("Ada"), "{result}");
}

/// A server that answers every request with `307 Temporary Redirect` to `location`, having read
/// the request whole; returns its MCP endpoint URL and how many requests it answered.
async fn redirecting_server(location: String) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let answered = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = answered.clone();
    let url = crate::support::raw_http_server(move |_, _| {
        count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        crate::support::Answer::Reply(format!(
            "HTTP/1.1 307 Temporary Redirect\r\nlocation: {location}\r\ncontent-length: 0\r\n\r\n"
        ))
    })
    .await;
    (url, answered)
}

#[actix_rt::test]
async fn an_upstream_redirect_is_not_followed_and_the_call_fails_naming_it() {
    // The redirect points at a working upstream: following it would make the call succeed
    // (and send the configured headers to wherever the redirect names).
    let demo = DemoUpstream::start();
    let (moved_url, answered) = redirecting_server(demo.http.url.clone()).await;
    let gw = TestGateway::start(config_with(vec![demo.upstream("demo"), UpstreamConfig::http("moved", &moved_url)]));
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    let before = demo.demo.stats().initializes;
    let error = c.call("moved__echo", json!({"text": "x"})).await.unwrap_err();
    assert!(error.message.contains("'moved'"), "{}", error.message);
    assert!(error.message.contains("307"), "{}", error.message);
    assert!(answered.load(std::sync::atomic::Ordering::SeqCst) >= 1);
    // Nothing reached the upstream the redirect named.
    assert_eq!(demo.demo.stats().initializes, before);
    assert_eq!(c.call("demo__echo", json!({"text": "fine"})).await.unwrap()["content"][0]["text"], "fine");
}

/// A forward proxy: it pipes each connection to the host its first request names (in absolute
/// form, as a client sends it to a proxy), and reports each first request line.
async fn forward_proxy() -> (String, tokio::sync::mpsc::UnboundedReceiver<String>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut seen = Vec::new();
                let mut buf = [0u8; 4096];
                let line = loop {
                    if let Some(end) = seen.windows(2).position(|w| w == b"\r\n") {
                        break String::from_utf8_lossy(&seen[..end]).into_owned();
                    }
                    match client.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                };
                let _ = tx.send(line.clone());
                // "POST http://HOST:PORT/mcp HTTP/1.1": the origin server is HOST:PORT.
                let Some(host) = line.split(' ').nth(1).and_then(|t| t.strip_prefix("http://")) else { return };
                let host = host.split('/').next().unwrap_or_default().to_owned();
                let Ok(mut origin) = tokio::net::TcpStream::connect(host).await else { return };
                if origin.write_all(&seen).await.is_err() {
                    return;
                }
                let _ = tokio::io::copy_bidirectional(&mut client, &mut origin).await;
            });
        }
    });
    (url, rx)
}

/// An upstream the environment sends through a proxy (HTTP_PROXY) is reached through it, the
/// real `taskgate serve` reading its environment as deployed.
#[actix_rt::test]
async fn an_upstream_behind_the_environments_proxy_is_reached_through_it() {
    let demo = DemoUpstream::start();
    let (proxy, mut requests) = forward_proxy().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("taskgate.toml");
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[store]\npath = {:?}\n\
         [[upstream]]\nname = \"demo\"\ntransport = \"http\"\nurl = \"{}\"\n",
        dir.path().join("data").display().to_string(),
        demo.http.url
    );
    std::fs::write(&file, text).unwrap();
    let env = [("HTTP_PROXY", proxy.as_str()), ("http_proxy", proxy.as_str()), ("NO_PROXY", ""), ("no_proxy", "")];
    let gw = taskgate_testkit::ServedGateway::start_with_env(&file, &env).await;
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    assert_eq!(c.call("demo__echo", json!({"text": "via"})).await.unwrap()["content"][0]["text"], "via");
    // The gateway's requests went to the proxy, in the absolute form a proxy is sent.
    let first = within(requests.recv()).await.expect("a request through the proxy");
    assert_eq!(first, format!("POST {} HTTP/1.1", demo.http.url), "{first}");
}

/// An upstream that takes calls and notifications and answers neither (it answers
/// `initialize` and `tools/list`); reports each call's arrival and when the gateway closes the
/// connection a cancellation came on.
async fn silent_upstream() -> (String, tokio::sync::mpsc::UnboundedReceiver<&'static str>) {
    use crate::support::Answer;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let url = crate::support::raw_http_server(move |head, body| {
        let reply = |status: &str, headers: &str, body: &str| {
            Answer::Reply(format!("HTTP/1.1 {status}\r\n{headers}content-length: {}\r\n\r\n{body}", body.len()))
        };
        if head.starts_with("get ") {
            return reply("405 Method Not Allowed", "", "");
        }
        let request: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
        let json = "content-type: application/json\r\n";
        let respond = |result: &str| format!(r#"{{"jsonrpc":"2.0","id":{},"result":{result}}}"#, request["id"]);
        match request["method"].as_str().unwrap_or_default() {
            "initialize" => reply(
                "200 OK",
                &format!("{json}mcp-session-id: silent-1\r\n"),
                &respond(r#"{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"silent","version":"1"}}"#),
            ),
            "tools/list" => reply("200 OK", json, &respond(r#"{"tools":[{"name":"hang","inputSchema":{"type":"object"}}]}"#)),
            "tools/call" => {
                let _ = tx.send("call");
                Answer::Hold(Box::new(|| {}))
            }
            "notifications/cancelled" => {
                let tx = tx.clone();
                Answer::Hold(Box::new(move || {
                    let _ = tx.send("cancel closed");
                }))
            }
            _ if request.get("id").is_none() => reply("202 Accepted", "", ""),
            _ => reply("200 OK", json, &respond("{}")),
        }
    })
    .await;
    (url, rx)
}

#[actix_rt::test]
async fn a_message_the_upstream_never_accepts_is_given_up_after_the_timeout() {
    // A client's cancellation reaches the upstream as a notification POSTed on its own
    // connection; an upstream that never answers it must not hold that connection (and the
    // task sending it) for ever.
    let (url, mut seen) = silent_upstream().await;
    let mut upstream = UpstreamConfig::http("silent", &url);
    upstream.protocol = taskgate_config::UpstreamProtocol::V2025;
    upstream.timeout_secs = 1;
    let gw = TestGateway::start(config_with(vec![upstream]));
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    let caller = c.clone();
    let call = tokio::spawn(async move {
        let body = json!({"jsonrpc": "2.0", "id": 77, "method": "tools/call", "params": {"name": "silent__hang", "arguments": {}}});
        caller.post_raw(body.to_string(), &[]).await
    });
    assert_eq!(within(seen.recv()).await, Some("call"));
    let cancel = json!({"requestId": 77, "reason": "changed my mind"});
    assert_eq!(c.notify("notifications/cancelled", Some(cancel)).await, 202);
    // Closed by the gateway once its timeout passed (before the bound, never).
    assert_eq!(within(seen.recv()).await, Some("cancel closed"));
    call.abort();
}

/// A client session that holds nothing at its upstreams lets its upstream sessions go after
/// `server.upstream_release_secs` without a request, and with them their stdio processes; its
/// next call opens them again. A session with a GET stream open keeps its own.
#[actix_rt::test]
async fn an_idle_session_lets_its_stdio_processes_go_and_gets_them_back_on_its_next_call() {
    // `never`: upstream sessions of its own, held until the session is idle (a pooled one
    // goes back to its pool as soon as the session holds nothing).
    let mut local = stdio_demo_upstream("local");
    local.share_sessions = taskgate_config::ShareSessions::Never;
    let mut config = config_with(vec![local]);
    config.server.upstream_release_secs = 60;
    let clock = std::sync::Arc::new(taskgate_core::clock::ManualClock::new(1_000_000));
    let gw = TestGateway::start_with_clock(config, clock.clone());
    let (mut idle, mut watching) = (McpClient::new(&gw.url), McpClient::new(&gw.url));
    idle.initialize().await;
    watching.initialize().await;
    let _stream = watching.open_stream().await.unwrap();
    for client in [&mut idle, &mut watching] {
        assert_eq!(client.call("local__echo", json!({"text": "x"})).await.unwrap()["content"][0]["text"], "x");
    }
    // The catalog's process and one per client session.
    processes_become(&gw, "local", 3).await;

    clock.advance(59_000);
    gw.gateway.expire_idle_sessions().await;
    processes_become(&gw, "local", 3).await;
    clock.advance(2_000);
    gw.gateway.expire_idle_sessions().await;
    processes_become(&gw, "local", 2).await;
    let released = gw.gateway.render_metrics().await;
    assert!(released.contains("taskgate_upstream_sessions_released_total{tenant=\"anonymous\"} 1"), "{released}");

    // The session goes on: its next call opens its upstream session again.
    assert_eq!(idle.call("local__echo", json!({"text": "again"})).await.unwrap()["content"][0]["text"], "again");
    processes_become(&gw, "local", 3).await;
    assert!(watching.request("ping", None).await.outcome().is_ok());
}

/// A stdio upstream's processes are shared fairly between tenants: one tenant's sessions take at
/// most its share of `max_processes` (`server.tenant_share_percent`), so another tenant still gets
/// one, and the refusal names the share.
#[actix_rt::test]
async fn one_tenants_sessions_take_at_most_its_share_of_a_stdio_upstreams_processes() {
    let mut local = stdio_demo_upstream("local");
    local.max_processes = 4;
    // Sessions of their own, which idle clients keep (pooled ones would go back between calls).
    local.share_sessions = taskgate_config::ShareSessions::Never;
    let mut config = config_with(vec![local]);
    config.server.tenant_share_percent = 50;
    let mut tenants = Vec::new();
    for (id, key) in [("acme", "acme-process-key-0001"), ("globex", "globex-process-key-01")] {
        let mut tenant = taskgate_config::TenantConfig::new(id);
        let sha256 = taskgate_core::tenants::hash_key(key);
        tenant.api_keys.push(taskgate_config::ApiKeyConfig { principal: format!("{id}-ci"), sha256 });
        tenants.push(tenant);
    }
    config.tenants = tenants;
    let gw = TestGateway::start(config);
    let mut acme = Vec::new();
    for _ in 0..3 {
        let mut client = McpClient::with_bearer(&gw.url, "acme-process-key-0001");
        client.initialize().await;
        acme.push(client);
    }
    for client in &mut acme[..2] {
        assert!(client.call("local__echo", json!({"text": "x"})).await.is_ok());
    }
    let refused = acme[2].call("local__echo", json!({"text": "x"})).await.unwrap_err();
    assert!(refused.message.contains("tenant \"acme\" runs its share of 2 of its 4 processes"), "{refused:?}");
    // The catalog's process, acme's two: globex still gets one.
    let mut globex = McpClient::with_bearer(&gw.url, "globex-process-key-01");
    globex.initialize().await;
    assert_eq!(globex.call("local__echo", json!({"text": "mine"})).await.unwrap()["content"][0]["text"], "mine");
    processes_become(&gw, "local", 4).await;
}
