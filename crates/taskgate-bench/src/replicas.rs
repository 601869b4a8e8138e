//! Section 13, replicas: a 2025-11-25 session served by any replica (Redis). Two gateways share
//! a Redis; a session is made at one (A).
//!
//! - Latency: sequential `tools/call`s of that one session, interleaved call by call, through A,
//!   through B (which loaded the session from Redis on its first request) and straight to the
//!   upstream: B's added p50 against A's (target ≤ 1.3).
//! - Redis commands per session request at A and at B, from Redis's own count (`INFO
//!   commandstats`) over a run of requests to one replica alone.
//! - Memory: N sessions made at A: Redis's `used_memory` growth per session.

use std::path::Path;
use std::time::Duration;

use crate::harness::{call, interleaved, ms, percentile, start_demo, start_gateway, verdict};
use crate::plan::Plan;
use crate::stores::{redis_info, redis_installed, redis_used_memory};
use anyhow::{bail, Result};
use futures_util::future::join_all;
use taskgate_store::testing::RedisServer;
use taskgate_testkit::McpClient;

/// Commands Redis has run in all (every `cmdstat_*` line's `calls`).
fn redis_commands(port: u16) -> Result<u64> {
    let stats = redis_info(port, "commandstats")?;
    Ok(stats
        .lines()
        .filter_map(|l| l.strip_prefix("cmdstat_"))
        .filter_map(|l| l.split_once("calls=")?.1.split(',').next()?.parse::<u64>().ok())
        .sum())
}

/// Redis commands per call of `client`, over `n` sequential calls (the `INFO` that reads the
/// count is one command, taken out).
async fn commands_per_call(port: u16, client: &McpClient, n: usize) -> Result<f64> {
    let before = redis_commands(port)?;
    for _ in 0..n {
        call(client, "demo__echo").await?;
    }
    let after = redis_commands(port)?;
    Ok(after.saturating_sub(before).saturating_sub(1) as f64 / n as f64)
}

pub async fn replicas(plan: &Plan, bin: &Path) -> Result<()> {
    println!("## 13. Replicas: one session served by any replica (Redis)");
    println!();
    if !redis_installed() {
        println!("- skipped: redis-server is not installed (apt-get install -y redis-server)");
        println!();
        return Ok(());
    }
    let redis = RedisServer::start();
    let (_demo, demo_url) = start_demo(bin).await?;
    let sessions = if plan.quick { 200 } else { 10_000 };
    let config = format!(
        "max_sessions = {}\n[[upstream]]\nname = \"demo\"\ntransport = \"http\"\nurl = \"{demo_url}\"\n\
         [store]\nbackend = \"redis\"\nurl = \"{}\"\n",
        sessions + 100,
        redis.url
    );
    let (_a, url_a) = start_gateway(bin, &config).await?;
    let (_b, url_b) = start_gateway(bin, &config).await?;
    let mut at_a = McpClient::new(&url_a);
    at_a.initialize().await;
    let mut at_b = at_a.clone();
    at_b.url = url_b.clone();
    let mut direct = McpClient::new(&demo_url);
    direct.initialize().await;
    // B loads the session on its first request.
    call(&at_b, "demo__echo").await?;
    call(&at_a, "demo__echo").await?;

    let n = plan.sequential;
    let paths = [(&at_a, "demo__echo"), (&at_b, "demo__echo"), (&direct, "echo")];
    let [mut a, mut b, mut straight] = interleaved(paths, n).await?;
    let (p50_a, p50_b, p50_direct) = (percentile(&mut a, 0.5), percentile(&mut b, 0.5), percentile(&mut straight, 0.5));
    let added = |p: Duration| p.saturating_sub(p50_direct).as_secs_f64();
    let ratio = added(p50_b) / added(p50_a).max(1e-9);

    let counted = n.min(500);
    let per_a = commands_per_call(redis.port, &at_a, counted).await?;
    let per_b = commands_per_call(redis.port, &at_b, counted).await?;

    // N sessions made at A (their records), concurrency at a time.
    let before = redis_used_memory(redis.port)?;
    // One HTTP client for them all (making one reads the system's certificates).
    let template = McpClient::new(&url_a);
    let mut made = 0;
    while made < sessions {
        let batch = plan.concurrency.min(sessions - made);
        let opened = join_all((0..batch).map(|_| {
            let mut client = template.clone();
            async move {
                client.initialize().await;
                client.session.is_some()
            }
        }))
        .await;
        if opened.iter().any(|ok| !ok) {
            bail!("a session could not be made");
        }
        made += batch;
    }
    let per_session = redis_used_memory(redis.port)?.saturating_sub(before) as f64 / sessions as f64;

    println!("| measure | value |");
    println!("| --- | --- |");
    println!("| `tools/call` p50, through A (made the session) | {} |", ms(p50_a));
    println!("| `tools/call` p50, through B (loaded it from Redis) | {} |", ms(p50_b));
    println!("| `tools/call` p50, straight to the upstream | {} |", ms(p50_direct));
    println!("| Redis commands per session request, at A / at B | {per_a:.3} / {per_b:.3} |");
    println!("| Redis memory per session, {sessions} sessions | {per_session:.0} B |");
    println!();
    println!("- added p50, B / A: {ratio:.2} (target ≤ 1.3: {})", verdict(ratio <= 1.3));
    println!(
        "- {n} calls per path, interleaved; Redis commands counted over {counted} calls to one replica; \
         a session's expiry is pushed back once per eighth of its idle timeout per replica"
    );
    println!();
    Ok(())
}
