//! Section 11, one-shot clients: as many CLI runs as a day of scripts makes, each a new client
//! session that declares `roots` and `elicitation` (as real hosts do), opens its GET stream,
//! makes one call to a stdio upstream and goes away without DELETE, a few at a time: how long
//! they take, whether any fails, how many processes the upstream is run in, and what the
//! sessions left behind cost the gateway.

use std::path::Path;
use std::time::Instant;

use crate::harness::{start_gateway, verdict};
use crate::plan::Plan;
use anyhow::Result;
use futures_util::future::join_all;
use serde_json::json;
use taskgate_testkit::McpClient;

/// Clients at once.
const AT_ONCE: usize = 8;

/// Child processes of `pid` now.
fn children(pid: u32) -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else { return 0 };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter(|stat| {
            // pid (comm) state ppid …: the fields after the command's closing parenthesis.
            let fields: Vec<&str> =
                stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("").split_whitespace().collect();
            fields.get(1).is_some_and(|ppid| *ppid == pid.to_string())
        })
        .count()
}

/// One client's run: initialize, GET stream, one call, gone. Whether the call succeeded.
async fn one_shot(pool: &McpClient, text: String) -> bool {
    let mut client = McpClient::sharing_connections(pool);
    let askable = json!({"roots": {"listChanged": true}, "elicitation": {"form": {}}});
    client.initialize_with("2025-11-25", askable).await;
    let Ok(_listening) = client.open_stream().await else { return false };
    let reply = client.request("tools/call", Some(json!({"name": "local__echo", "arguments": {"text": text}}))).await;
    reply.outcome().is_ok_and(|r| r["content"][0]["text"] == text)
}

pub async fn one_shot_clients(plan: &Plan, bin: &Path) -> Result<()> {
    let count = if plan.quick { 40 } else { 1000 };
    let pool_size = 2 + AT_ONCE;
    println!("## 11. One-shot clients: {count} CLI runs, {AT_ONCE} at a time, one stdio upstream");
    println!();
    let config = format!(
        "max_sessions = {}\n[[upstream]]\nname = \"local\"\ntransport = \"stdio\"\ncommand = \"{}\"\nargs = [\"demo-upstream\", \"--stdio\"]\nmax_processes = {pool_size}\n",
        count + 16,
        bin.display()
    );
    let (gateway, url) = start_gateway(bin, &config).await?;
    let pool = McpClient::new(&url);
    one_shot(&pool, "warm".into()).await;
    let rss_before = gateway.rss();
    let started = Instant::now();
    let (mut failures, mut most) = (0, 0);
    for batch in 0..count / AT_ONCE {
        let runs = join_all((0..AT_ONCE).map(|i| one_shot(&pool, format!("run {batch}-{i}")))).await;
        failures += runs.iter().filter(|ok| !**ok).count();
        most = most.max(children(gateway.pid()));
    }
    let elapsed = started.elapsed();
    let rss_after = gateway.rss();
    let mib = |b: u64| b as f64 / 1048576.0;
    println!("| measure | value |");
    println!("| --- | --- |");
    println!("| time for {count} runs | {:.1} s |", elapsed.as_secs_f64());
    println!("| failed runs | {failures} |");
    println!("| processes of the upstream, at most (pool: `max_processes = {pool_size}`) | {most} |");
    println!(
        "| gateway RSS, before and after (the {count} sessions stay, holding nothing) | {:.1} → {:.1} MiB |",
        mib(rss_before),
        mib(rss_after)
    );
    println!();
    println!(
        "- target: {count} runs within 5 minutes with no failure and no more processes than the pool: {}",
        verdict(elapsed.as_secs() < 300 && failures == 0 && most <= pool_size)
    );
    println!();
    crate::harness::stop_profiled(gateway).await;
    Ok(())
}
