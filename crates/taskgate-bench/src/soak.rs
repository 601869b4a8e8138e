//! Section 7, the soak: polite clients keep polling while everything hostile happens at once, for
//! a bounded time. One tenant floods, one client never reads its streams, some clients send
//! their bodies a byte a second, and the upstream is killed and restarted every few seconds.
//! Printed: errors the polite clients saw (target 0), peak RSS over the baseline, open
//! descriptors, and whether every in-flight gauge returned to 0 afterwards.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::harness::{free_port, metric, spawn_until, start_gateway, verdict, Process};
use crate::plan::Plan;
use anyhow::{Context, Result};
use serde_json::json;
use taskgate_testkit::McpClient;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

const FLOOD_KEY: &str = "soak-flood-key-0000001";

/// Starts the demo upstream on `port` (the same port after every restart).
async fn demo_on(bin: &Path, port: u16) -> Result<Process> {
    let mut command = Command::new(bin);
    command.args(["demo-upstream", "--listen", &format!("127.0.0.1:{port}")]);
    Ok(spawn_until(command, "listening on").await?.0)
}

/// Raises this process's open-file limit: a thousand clients hold a thousand sockets.
fn raise_open_files() {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit only read and write the struct given.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

fn open_files(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// Posts one JSON-RPC message with the session's headers; the reply's status, session header
/// and body.
async fn post(
    http: &reqwest::Client,
    url: &str,
    session: Option<&str>,
    bearer: Option<&str>,
    body: serde_json::Value,
) -> Option<(u16, Option<String>, String)> {
    let mut request = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .body(body.to_string());
    if let Some(s) = session {
        request = request.header("mcp-session-id", s);
    }
    if let Some(b) = bearer {
        request = request.header("authorization", format!("Bearer {b}"));
    }
    let response = request.send().await.ok()?;
    let status = response.status().as_u16();
    let session = response.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_owned);
    Some((status, session, response.text().await.ok()?))
}

fn initialize() -> serde_json::Value {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "soak", "version": "1"}}})
}

/// One polite client: a session and a finished task it polls at 10 Hz; counts every error.
async fn polite(
    http: reqwest::Client,
    url: String,
    stop: Arc<AtomicBool>,
    errors: Arc<AtomicU64>,
    polls: Arc<AtomicU64>,
) {
    let Some((200, Some(session), _)) = post(&http, &url, None, None, initialize()).await else {
        errors.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "demo__echo", "arguments": {"text": "polite"}, "task": {}}});
    let created = post(&http, &url, Some(&session), None, call).await;
    let task = created.as_ref().and_then(|(_, _, body)| {
        let data = body.lines().find_map(|l| l.strip_prefix("data: ")).unwrap_or(body);
        serde_json::from_str::<serde_json::Value>(data).ok()?["result"]["task"]["taskId"].as_str().map(str::to_owned)
    });
    let Some(task) = task else {
        errors.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let mut id = 1000;
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        id += 1;
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tasks/get", "params": {"taskId": task}});
        let ok = matches!(post(&http, &url, Some(&session), None, body).await, Some((200, _, text)) if text.contains("\"result\""));
        polls.fetch_add(1, Ordering::Relaxed);
        if !ok {
            errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The flooding tenant: calls as fast as it can (its rate limit answers most with 429).
async fn flood(http: reqwest::Client, url: String, stop: Arc<AtomicBool>, sent: Arc<AtomicU64>) {
    let session = post(&http, &url, None, Some(FLOOD_KEY), initialize()).await.and_then(|(_, s, _)| s);
    let mut id = 0;
    while !stop.load(Ordering::Relaxed) {
        id += 1;
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "demo__echo", "arguments": {"text": "flood"}}});
        let _ = post(&http, &url, session.as_deref(), Some(FLOOD_KEY), body).await;
        sent.fetch_add(1, Ordering::Relaxed);
    }
}

/// A client that asks for endless notifications and never reads them, again and again.
async fn never_reads(http: reqwest::Client, url: String, stop: Arc<AtomicBool>) {
    let session = post(&http, &url, None, None, initialize()).await.and_then(|(_, s, _)| s).unwrap_or_default();
    let mut held = Vec::new();
    let mut id = 0;
    while !stop.load(Ordering::Relaxed) {
        id += 1;
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "demo__chatter", "arguments": {"count": 100_000, "bytes": 10_000, "gate": "never"}}});
        let sent = http
            .post(&url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-session-id", &session)
            .body(body.to_string())
            .send()
            .await;
        if let Ok(r) = sent {
            held.push(r);
        }
        if held.len() > 4 {
            held.remove(0);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A connection that sends its body one byte a second.
async fn trickle(addr: String, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut s) = tokio::net::TcpStream::connect(&addr).await else { return };
        let head = "POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
                    Accept: application/json, text/event-stream\r\nContent-Length: 100000\r\n\r\n";
        if s.write_all(head.as_bytes()).await.is_err() {
            continue;
        }
        while !stop.load(Ordering::Relaxed) && s.write_all(b" ").await.is_ok() {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

pub(crate) async fn soak(plan: &Plan, bin: &Path) -> Result<()> {
    let (mut clients, mut seconds, restart_every, tricklers) =
        if plan.quick { (50, 4, Duration::from_millis(1500), 5) } else { (1000, 60, Duration::from_secs(4), 50) };
    // TASKGATE_SOAK_SECONDS and TASKGATE_SOAK_CLIENTS change the run; TASKGATE_SOAK_SKIP leaves out
    // hostile parts (flood, never, trickle, restart) to find what costs what.
    if let Some(s) = std::env::var("TASKGATE_SOAK_SECONDS").ok().and_then(|s| s.parse().ok()) {
        seconds = s;
    }
    if let Some(n) = std::env::var("TASKGATE_SOAK_CLIENTS").ok().and_then(|s| s.parse().ok()) {
        clients = n;
    }
    println!("## 7. Soak: {clients} polite clients at 10 Hz for {seconds} s, with hostile ones and a dying upstream");
    println!();
    raise_open_files();
    let port = free_port()?;
    let mut demo = demo_on(bin, port).await?;
    let hash = {
        let out = std::process::Command::new(bin).args(["hash-key", FLOOD_KEY]).output().context("hash-key")?;
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    // The leading keys go into start_gateway's [server] section.
    let config = format!(
        "body_timeout_ms = 2000\nmax_streams = 20000\nmax_sessions = 4000\nstream_stall_secs = 2\n\n\
         [store]\nbackend = \"memory\"\n\
         [[upstream]]\nname = \"demo\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:{port}/mcp\"\ntimeout_secs = 5\n\
         [[tenant]]\nid = \"polite\"\nanonymous = true\nlimits = {{ share_percent = 90 }}\n\
         [[tenant]]\nid = \"flood\"\nlimits = {{ rate = {{ per_second = 50.0, burst = 50 }}, share_percent = 10 }}\n\
         [[tenant.api_key]]\nprincipal = \"flood\"\nsha256 = \"{hash}\"\n"
    );
    let (gateway, url) = start_gateway(bin, &config).await?;
    let pid = gateway.pid();
    let addr = url.trim_start_matches("http://").trim_end_matches("/mcp").to_owned();
    // Baseline: after one warm-up session.
    let mut warm = McpClient::new(&url);
    warm.initialize().await;
    let baseline = gateway.rss();

    let stop = Arc::new(AtomicBool::new(false));
    let (errors, polls, flooded) =
        (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    // One HTTP client for all (building one loads the TLS roots: tens of milliseconds each).
    let http = reqwest::Client::builder().timeout(Duration::from_secs(30)).pool_max_idle_per_host(4096).build()?;
    let mut tasks = Vec::new();
    for _ in 0..clients {
        tasks.push(actix_rt::spawn(polite(http.clone(), url.clone(), stop.clone(), errors.clone(), polls.clone())));
    }
    let skip = std::env::var("TASKGATE_SOAK_SKIP").unwrap_or_default();
    for _ in 0..if skip.contains("flood") { 0 } else { 8 } {
        tasks.push(actix_rt::spawn(flood(http.clone(), url.clone(), stop.clone(), flooded.clone())));
    }
    if !skip.contains("never") {
        tasks.push(actix_rt::spawn(never_reads(http.clone(), url.clone(), stop.clone())));
    }
    for _ in 0..if skip.contains("trickle") { 0 } else { tricklers } {
        tasks.push(actix_rt::spawn(trickle(addr.clone(), stop.clone())));
    }
    let started = Instant::now();
    let (mut peak_rss, mut peak_fds, mut restarts) = (baseline, 0, 0);
    let mut last_restart = Instant::now();
    while started.elapsed() < Duration::from_secs(seconds) {
        tokio::time::sleep(Duration::from_millis(250)).await;
        peak_rss = peak_rss.max(gateway.rss());
        peak_fds = peak_fds.max(open_files(pid));
        if last_restart.elapsed() >= restart_every && !skip.contains("restart") {
            // Killed (and reaped, so its port is free), then back on the same port.
            let _ = demo.child.kill().await;
            demo = demo_on(bin, port).await?;
            restarts += 1;
            last_restart = Instant::now();
        }
    }
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(40), task).await;
    }
    // Everything in flight must drain: the gauges go back to 0.
    let gauges = ["taskgate_requests_in_progress", "taskgate_client_stream_bytes", "taskgate_task_result_waiters"];
    let settle = Instant::now();
    let mut returned = false;
    while settle.elapsed() < Duration::from_secs(15) {
        let mut all = 0.0;
        for g in gauges {
            all += metric(&url, g).await;
        }
        if all == 0.0 {
            returned = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let end_fds = open_files(pid);
    let end_rss = gateway.rss();
    let dropped = metric(&url, "taskgate_client_streams_dropped_total").await;
    let limited = metric(&url, "taskgate_rate_limited_total").await;
    let errors = errors.load(Ordering::Relaxed);
    println!("| figure | value | target |");
    println!("| --- | --- | --- |");
    println!("| polls by polite clients | {} | |", polls.load(Ordering::Relaxed));
    println!("| errors seen by polite clients | {errors} | 0 ({}) |", verdict(errors == 0));
    println!("| flood requests sent / refused with 429 | {} / {limited} | |", flooded.load(Ordering::Relaxed));
    println!("| streams dropped for not reading | {dropped} | ≥ 1 |");
    println!("| upstream restarts | {restarts} | |");
    println!(
        "| peak RSS over baseline | {:.2}× ({} → {} MiB) | bounded |",
        peak_rss as f64 / baseline.max(1) as f64,
        baseline >> 20,
        peak_rss >> 20
    );
    println!("| RSS after the clients left | {} MiB | |", end_rss >> 20);
    println!("| open descriptors: peak / after | {peak_fds} / {end_fds} | below the limit |");
    println!("| in-flight gauges back to 0 | {} | yes ({}) |", if returned { "yes" } else { "no" }, verdict(returned));
    println!();
    gateway.terminate().await;
    drop(demo);
    Ok(())
}
