//! The real `taskgate serve` binary under an operator's and an attacker's hands:
//! SIGTERM drains, descriptors are bounded, log lines cannot be forged or flooded, and a client
//! that stops reading holds a bounded amount of memory.

use std::path::PathBuf;

use serde_json::json;
use taskgate_testkit::{stdio_demo_upstream, DemoUpstream, McpClient, ServedGateway};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{create, within};

/// Writes a config with the demo upstream over HTTP (in this process) and the stdio demo, the
/// memory store, and `extra` TOML lines appended to `[server]`.
fn config(dir: &tempfile::TempDir, demo: &DemoUpstream, server: &str) -> PathBuf {
    let stdio = stdio_demo_upstream("local");
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n{server}\n[logging]\nlevel = \"info\"\n[store]\nbackend = \"memory\"\n\
         [[upstream]]\nname = \"demo\"\ntransport = \"http\"\nurl = \"{}\"\n\
         [[upstream]]\nname = \"local\"\ntransport = \"stdio\"\ncommand = {:?}\nargs = [\"demo-upstream\", \"--stdio\"]\n",
        demo.http.url,
        stdio.command.unwrap(),
    );
    let file = dir.path().join("taskgate.toml");
    std::fs::write(&file, text).unwrap();
    file
}

fn result_of(message: &taskgate_protocol::Message) -> serde_json::Value {
    match message {
        taskgate_protocol::Message::Response { result, .. } => result.clone(),
        other => panic!("expected a result, got {other:?}"),
    }
}

async fn status(url: &str) -> u16 {
    reqwest::get(url).await.map_or(0, |r| r.status().as_u16())
}

#[actix_rt::test]
async fn sigterm_lets_requests_in_flight_finish_then_ends_streams_and_stdio_children() {
    let demo = DemoUpstream::start();
    let dir = tempfile::tempdir().unwrap();
    let file = config(&dir, &demo, "admin_listen = \"127.0.0.1:0\"\nshutdown_grace_secs = 30");
    let mut gw = ServedGateway::start(&file).await;
    let admin = gw.admin.clone().expect("the admin listener's address");
    let mut caller = McpClient::new(&gw.url);
    caller.initialize().await;
    let mut waiter = McpClient::new(&gw.url);
    waiter.initialize().await;
    let mut watcher = McpClient::new(&gw.url);
    watcher.initialize().await;
    let mut late = McpClient::new(&gw.url);
    late.initialize().await;
    // A stdio task is running (its child process exists), a call is in flight, a tasks/result
    // waits, a GET stream is open.
    let task = create(&mut waiter, "local__slow", json!({"ms": 1500, "steps": 1})).await;
    let children = gw.children();
    assert!(!children.is_empty(), "the stdio upstream runs");
    let mut result = waiter.request_stream("tasks/result", Some(json!({"taskId": task}))).await;
    let mut call = caller
        .request_stream("tools/call", Some(json!({"name": "demo__slow", "arguments": {"ms": 1500, "steps": 1}})))
        .await;
    within(demo.demo.wait_in_flight(|n| *n == 1)).await;
    let mut stream = watcher.open_stream().await.expect("GET stream");

    gw.terminate();
    // The GET stream ends at once, /readyz turns 503, new requests are refused with 503.
    assert!(within(stream.next()).await.is_none(), "the GET stream ends");
    assert_eq!(status(&format!("{admin}/readyz")).await, 503);
    let refused = late.request("ping", None).await;
    assert_eq!(refused.status, 503);
    assert!(refused.outcome().unwrap_err().message.contains("shutting down"));
    // What was in flight finishes.
    let done = within(call.next()).await.expect("the call's response");
    assert_eq!(result_of(&done)["content"][0]["text"], "slept 1500 ms");
    let fetched = within(result.next()).await.expect("the task's result");
    assert_eq!(result_of(&fetched)["content"][0]["text"], "slept 1500 ms");
    let exit = gw.exited().await;
    assert!(exit.success(), "{exit}");
    for child in children {
        // The child exited (and was reaped) before the gateway did.
        assert!(!std::path::Path::new(&format!("/proc/{child}")).exists(), "stdio child {child} outlived the gateway");
    }
}

#[actix_rt::test]
async fn trickled_bodies_time_out_and_connections_stay_below_the_open_file_limit() {
    let demo = DemoUpstream::start();
    let dir = tempfile::tempdir().unwrap();
    // One source may hold every connection here (this is about the listener's own bound).
    let file = config(
        &dir,
        &demo,
        "admin_listen = \"127.0.0.1:0\"\nbody_timeout_ms = 2000\nworkers = 2\nmax_connections_per_peer = 100000",
    );
    // With 256 descriptors, 300 connections would exhaust them without a cap.
    let gw = ServedGateway::start_with_open_files(&file, 256).await;
    let admin = gw.admin.clone().unwrap();
    let addr = gw.url.trim_start_matches("http://").trim_end_matches("/mcp").to_owned();
    let mut trickling = Vec::new();
    for _ in 0..300 {
        let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let head = "POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
                    Accept: application/json, text/event-stream\r\nContent-Length: 1000\r\n\r\n{";
        let _ = s.write_all(head.as_bytes()).await;
        trickling.push(s);
    }
    // The admin listener still answers: descriptors are left for it.
    assert_eq!(status(&format!("{admin}/healthz")).await, 200);
    assert!(gw.open_files() < 256, "{} open files", gw.open_files());
    // A trickled body gets 408 once its time is up, and its connection closes.
    let mut first = trickling.remove(0);
    let mut answer = Vec::new();
    within(first.read_to_end(&mut answer)).await.unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer:.200}");
    assert!(answer.contains("body_timeout_ms"), "{answer:.400}");
    // Once they are gone, everyone is served again.
    drop(trickling);
    let mut c = McpClient::new(&gw.url);
    within(c.initialize()).await;
    assert_eq!(c.call("demo__echo", json!({"text": "served"})).await.unwrap()["content"][0]["text"], "served");
}

#[actix_rt::test]
async fn client_strings_cannot_forge_or_flood_log_lines() {
    let demo = DemoUpstream::start();
    let dir = tempfile::tempdir().unwrap();
    let file = config(&dir, &demo, "");
    let mut gw = ServedGateway::start(&file).await;
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    let forged = "x\nINFO taskgate::audit: task created task=forged tenant=victim";
    c.request("tasks/get", Some(json!({"taskId": forged}))).await;
    let line = gw.log_line("task look-up failed").await;
    assert!(line.contains(r"x\nINFO taskgate::audit: task created task=forged"), "{line}");
    // A burst of failed look-ups is logged in part, each id cut to 128 bytes.
    let started = std::time::Instant::now();
    let long_id = "y".repeat(250);
    for _ in 0..100 {
        c.request("tasks/get", Some(json!({"taskId": long_id}))).await;
    }
    let elapsed = started.elapsed().as_secs();
    // A sentinel after the burst: every line of the burst is read before it.
    McpClient::new(&gw.url).initialize().await;
    gw.log_line("session started").await;
    let failures: Vec<&String> = gw.seen.iter().filter(|l| l.contains("task look-up failed")).collect();
    let bound = taskgate_core::logs::LINES_PER_SECOND as usize * (elapsed as usize + 2);
    assert!(failures.len() <= bound, "{} lines in {elapsed} s", failures.len());
    assert!(failures.iter().all(|l| l.len() < 1024 && !l.contains(&long_id)), "ids are cut");
    assert!(!gw.seen.iter().any(|l| l.starts_with("INFO taskgate::audit: task created")), "no forged line");
}

#[actix_rt::test]
async fn clients_that_never_read_hold_a_bounded_amount_of_memory() {
    let demo = DemoUpstream::start();
    let dir = tempfile::tempdir().unwrap();
    // A client that reads nothing for 1 s while notifications for it are dropped has stopped.
    let file = config(&dir, &demo, "stream_stall_secs = 1");
    let gw = ServedGateway::start(&file).await;
    let mut warm = McpClient::new(&gw.url);
    warm.initialize().await;
    warm.call("demo__chatter", json!({"count": 20, "bytes": 100_000})).await.unwrap();
    let before = gw.rss_bytes();
    // Three clients each ask for endless 100 KB notifications and never read a byte of them.
    let mut unread = Vec::new();
    for id in 0..3 {
        let mut c = McpClient::new(&gw.url);
        c.initialize().await;
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "demo__chatter", "arguments": {"count": 1_000_000, "bytes": 100_000, "gate": "never"}}});
        let r = reqwest::Client::new().post(&c.url).headers(c.headers()).body(body.to_string()).send().await.unwrap();
        unread.push((c, r));
    }
    let stats = demo.demo.clone();
    within(demo.demo.wait_in_flight(|_| stats.stats().cancelled >= 3)).await;
    let after = gw.rss_bytes();
    let ratio = after as f64 / before as f64;
    eprintln!("RSS before {before} after {after} ({ratio:.2}x)");
    assert!(ratio < 2.0, "RSS grew {ratio:.2}x ({before} → {after} bytes)");
}

/// The next message of a stream that must be an error saying the gateway is shutting down.
async fn shutting_down_error(stream: &mut taskgate_testkit::SseReader) -> taskgate_protocol::ErrorObject {
    loop {
        match within(stream.next()).await.expect("the stream ended without a response") {
            taskgate_protocol::Message::Notification { .. } => continue,
            taskgate_protocol::Message::Error { error, .. } => {
                assert_eq!(error.code, -32002, "{error:?}");
                assert_eq!(error.data.as_ref().unwrap()["reason"], "shutting_down", "{error:?}");
                return error;
            }
            other => panic!("expected the shutting-down error, got {other:?}"),
        }
    }
}

#[actix_rt::test]
async fn when_the_grace_runs_out_every_request_in_flight_gets_an_error_saying_the_gateway_is_shutting_down() {
    let demo = DemoUpstream::start();
    let dir = tempfile::tempdir().unwrap();
    let file = config(&dir, &demo, "shutdown_grace_secs = 1");
    let mut gw = ServedGateway::start(&file).await;
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    // A call that never ends, a tasks/result waiter on a wrapped task of the stdio upstream, and
    // a 2026-07-28 stateless call.
    let mut call =
        c.request_stream("tools/call", Some(json!({"name": "demo__wait", "arguments": {"gate": "never"}}))).await;
    let task = create(&mut c, "local__wait", json!({"gate": "never"})).await;
    let mut waiter = c.request_stream("tasks/result", Some(json!({"taskId": task}))).await;
    let modern = crate::modern::Client::new(&gw.url, json!({}));
    let mut stateless =
        modern.stream("tools/call", json!({"name": "demo__wait", "arguments": {"gate": "never"}})).await;
    within(demo.demo.wait_in_flight(|n| *n == 2)).await;
    gw.terminate();
    let error = shutting_down_error(&mut call).await;
    assert!(error.message.contains("shutting down") && error.message.contains("shutdown_grace_secs"), "{error:?}");
    let error = shutting_down_error(&mut waiter).await;
    assert!(error.message.contains(&task) && error.message.contains("tasks/result"), "{error:?}");
    shutting_down_error(&mut stateless).await;
    assert!(within(gw.exited()).await.success());
    // The calls were cancelled upstream, not left running.
    let stats = demo.demo.clone();
    within(demo.demo.wait_in_flight(|_| stats.stats().cancelled >= 2)).await;
}

#[actix_rt::test]
async fn a_second_signal_ends_the_grace_and_streams_still_in_flight_end_cleanly() {
    let demo = DemoUpstream::start();
    let dir = tempfile::tempdir().unwrap();
    // A grace far longer than the test's bound: only the second signal can end it in time.
    let file = config(&dir, &demo, "shutdown_grace_secs = 600");
    let mut gw = ServedGateway::start(&file).await;
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    let mut call =
        c.request_stream("tools/call", Some(json!({"name": "demo__wait", "arguments": {"gate": "never"}}))).await;
    within(demo.demo.wait_in_flight(|n| *n == 1)).await;
    gw.terminate();
    gw.log_line("shutting down").await;
    gw.terminate();
    // The request still in flight is told why it ends, then its stream ends.
    shutting_down_error(&mut call).await;
    assert!(within(call.next()).await.is_none(), "the stream ends after the error");
    let exit = gw.exited().await;
    assert!(exit.success(), "{exit}");
    // Plain text in a file: no colour codes when stderr is not a terminal.
    assert!(gw.seen.iter().all(|l| !l.contains('\u{1b}')), "{:?}", gw.seen.first());
}

/// The malloc settings of the environment a process started with, from /proc: its
/// `GLIBC_TUNABLES` and the gateway's mark of having run itself again.
fn environment(pid: u32) -> Vec<String> {
    let raw = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    // Every process here has a PATH: an empty read is a process that has gone.
    assert!(!raw.is_empty(), "process {pid} has no environment to read");
    raw.split(|b| *b == 0)
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .filter(|v| v.starts_with("GLIBC_TUNABLES=") || v.starts_with("TASKGATE_MALLOC_TUNED="))
        .collect()
}

/// Serves one stdio call, so its upstream processes exist; returns their environments.
async fn stdio_environments(gw: &ServedGateway) -> Vec<Vec<String>> {
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    assert_eq!(c.call("local__echo", json!({"text": "env"})).await.unwrap()["content"][0]["text"], "env");
    // The processes that serve it now (one answered this call).
    let children = gw.children();
    assert!(!children.is_empty(), "no stdio upstream process");
    children.into_iter().map(environment).collect()
}

/// Memory after a burst of tasks: `serve` runs itself again, once, with glibc's
/// tunables set (glibc reads them only as a process starts), keeping its pid; its stdio
/// upstreams start with the environment the operator gave it; and an operator's own
/// `GLIBC_TUNABLES`, even empty, is kept as it is.
#[actix_rt::test]
async fn serve_runs_with_glibcs_tunables_unless_the_operator_sets_them_and_its_children_get_the_operators_environment()
{
    let tunables = format!("GLIBC_TUNABLES={}", taskgate_config::defaults::GLIBC_TUNABLES);
    let demo = DemoUpstream::start();
    let dir = tempfile::tempdir().unwrap();
    let file = config(&dir, &demo, "");

    let gw = ServedGateway::start(&file).await;
    // The process the test started (same pid) now runs the program again with the tunables.
    assert_eq!(environment(gw.pid()), [tunables.clone(), "TASKGATE_MALLOC_TUNED=1".to_owned()]);
    for child in stdio_environments(&gw).await {
        assert!(child.is_empty(), "a stdio upstream inherited the gateway's tunables: {child:?}");
    }
    drop(gw);

    // A stray mark in the operator's environment, without the tunables, is not taken for them.
    let stray = ServedGateway::start_with_env(&file, &[("TASKGATE_MALLOC_TUNED", "1")]).await;
    assert_eq!(environment(stray.pid()), [tunables.clone(), "TASKGATE_MALLOC_TUNED=1".to_owned()]);
    drop(stray);

    let mut gw = ServedGateway::start_with_env(&file, &[("GLIBC_TUNABLES", "")]).await;
    // Not run again: the operator's empty setting and no mark.
    assert_eq!(environment(gw.pid()), ["GLIBC_TUNABLES="]);
    gw.log_line("the operator's GLIBC_TUNABLES kept").await;
    for child in stdio_environments(&gw).await {
        assert_eq!(child, ["GLIBC_TUNABLES="], "the operator's setting reaches the upstream");
    }
}

/// Starts a gateway with `store` (TOML lines of `[store]`), fills it with 600 task results of
/// 100 KB, and returns the growth of its resident memory and the result bytes it counts.
async fn memory_for_results(store: &str) -> (u64, u64) {
    let demo = DemoUpstream::start();
    let dir = tempfile::tempdir().unwrap();
    let store = store.replace("DATA", &dir.path().join("data").display().to_string());
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[store]\n{store}\n\
         [[upstream]]\nname = \"demo\"\ntransport = \"http\"\nurl = \"{}\"\n",
        demo.http.url
    );
    let file = dir.path().join("taskgate.toml");
    std::fs::write(&file, text).unwrap();
    let gw = ServedGateway::start(&file).await;
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    // Warm: what any gateway allocates for its first results is not theirs.
    for _ in 0..20 {
        create(&mut c, "demo__blob", json!({"bytes": 100_000})).await;
    }
    let metrics = gw.url.replace("/mcp", "/metrics");
    let counted = || async {
        let text = reqwest::get(&metrics).await.unwrap().text().await.unwrap();
        let held = text.lines().filter(|l| l.starts_with("taskgate_task_result_bytes{"));
        held.filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok()).sum::<u64>()
    };
    let (rss, held) = (gw.rss_bytes(), counted().await);
    for _ in 0..600 {
        let id = create(&mut c, "demo__blob", json!({"bytes": 100_000})).await;
        let _ = crate::support::method(&mut c, "tasks/get", &id).await;
    }
    let grown = (gw.rss_bytes().saturating_sub(rss), counted().await - held);
    gw.kill().await;
    grown
}

#[actix_rt::test]
async fn task_results_cost_no_more_memory_than_the_budget_counts() {
    // In memory, results are held as values: within 1.2 times the bytes the budget counts.
    let (grown, counted) = memory_for_results("backend = \"memory\"").await;
    assert!(counted >= 60_000_000, "{counted}");
    let ratio = grown as f64 / counted as f64;
    assert!(ratio < 1.2, "memory store: RSS grew {grown} bytes for {counted} counted ({ratio:.2}x)");
    // In the file store they are on disk: memory is the page cache, bounded by store.cache_mib
    // (redb keeps up to about twice it, its read cache and its write buffer), however many
    // results are held.
    let (grown, counted) = memory_for_results("path = \"DATA\"\ncache_mib = 16").await;
    assert!(counted >= 60_000_000, "{counted}");
    assert!(grown < 48 << 20, "file store: RSS grew {grown} bytes for {counted} counted, with a 16 MiB cache");
}
