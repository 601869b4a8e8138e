//! Section 8, revisions: a 2026-07-28 stateless `tools/call` against a 2025-11-25 session call, through
//! the same gateway to the same upstream, interleaved call by call. The stateless request
//! carries its version, capabilities and client info in `_meta` and the standard headers, and is
//! served by a pooled session; the target is that this costs at most 10% more added latency.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::harness::{call, connect, ms, percentile, start_demo, start_gateway, verdict};
use crate::plan::Plan;
use actix_web::web::Bytes;
use anyhow::{bail, Result};
use serde_json::json;
use taskgate_testkit::McpClient;

/// One 2026-07-28 `tools/call`, as a stateless client sends it; checks it succeeded.
pub async fn stateless_call(client: &McpClient, tool: &str) -> Result<()> {
    stateless_post(client, &stateless_body(tool), tool).await
}

/// The body of a 2026-07-28 `tools/call` of `tool`, with the per-request `_meta`.
fn stateless_body(tool: &str) -> Bytes {
    let body = json!({
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": tool,
            "arguments": {"text": "x"},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "taskgate-bench", "version": "1"},
            },
        },
    });
    Bytes::from(body.to_string())
}

/// The body of a 2025-11-25 `tools/call` of `tool`.
fn session_body(tool: &str) -> Bytes {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": {"text": "x"}}});
    Bytes::from(body.to_string())
}

async fn stateless_post(client: &McpClient, body: &Bytes, tool: &str) -> Result<()> {
    let headers = [("mcp-protocol-version", "2026-07-28"), ("mcp-method", "tools/call"), ("mcp-name", tool)];
    let reply = client.post_raw(body.clone(), &headers).await;
    match reply.outcome() {
        Ok(result) if result["resultType"] == "complete" => Ok(()),
        other => bail!("a stateless {tool} failed: {other:?}"),
    }
}

async fn session_post(client: &McpClient, body: &Bytes, tool: &str) -> Result<()> {
    let reply = client.post_raw(body.clone(), &[]).await;
    match reply.outcome() {
        Ok(_) => Ok(()),
        other => bail!("{tool} in a session failed: {other:?}"),
    }
}

/// Sequential latencies of the three paths, call by call in turn (the order rotating each
/// round), so that the machine's noise falls on all three alike: the bodies are built once,
/// outside the timing, so that what is timed is the round trip (the client's own work is the
/// same for both kinds but for the 2026 request's larger body and headers).
async fn interleaved(
    direct: &McpClient,
    session: &McpClient,
    stateless: &McpClient,
    n: usize,
) -> Result<[Vec<Duration>; 3]> {
    let (session_body, stateless_body) = (session_body("demo__echo"), stateless_body("demo__echo"));
    let direct_body = Bytes::from(
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "x"}}})
            .to_string(),
    );
    let mut samples: [Vec<Duration>; 3] = Default::default();
    for round in 0..n {
        for turn in 0..3 {
            let path = (round + turn) % 3;
            let started = Instant::now();
            match path {
                0 => session_post(direct, &direct_body, "echo").await?,
                1 => session_post(session, &session_body, "demo__echo").await?,
                _ => stateless_post(stateless, &stateless_body, "demo__echo").await?,
            }
            samples[path].push(started.elapsed());
        }
    }
    Ok(samples)
}

pub async fn revisions(plan: &Plan, bin: &Path) -> Result<()> {
    println!("## 8. Revisions: a 2026-07-28 stateless tools/call vs a 2025-11-25 session call");
    println!();
    let (_demo, demo_url) = start_demo(bin).await?;
    let (_gateway, gateway_url) =
        start_gateway(bin, &format!("[[upstream]]\nname = \"demo\"\ntransport = \"http\"\nurl = \"{demo_url}\"\n"))
            .await?;
    let direct = connect(&demo_url).await?;
    let session = connect(&gateway_url).await?;
    let stateless = McpClient::new(&gateway_url);
    for _ in 0..20 {
        call(&direct, "echo").await?;
        call(&session, "demo__echo").await?;
        stateless_call(&stateless, "demo__echo").await?;
    }
    let [mut d, mut s, mut m] = interleaved(&direct, &session, &stateless, plan.sequential).await?;
    let (d50, d99) = (percentile(&mut d, 0.5), percentile(&mut d, 0.99));
    let (s50, s99) = (percentile(&mut s, 0.5), percentile(&mut s, 0.99));
    let (m50, m99) = (percentile(&mut m, 0.5), percentile(&mut m, 0.99));
    let session_rps =
        crate::harness::throughput(&session, "demo__echo", plan.concurrent_total, plan.concurrency).await?;
    let stateless_rps = crate::harness::throughput_of(plan.concurrent_total, plan.concurrency, || {
        stateless_call(&stateless, "demo__echo")
    })
    .await?;
    println!("| path | p50 | p99 | throughput at {} clients |", plan.concurrency);
    println!("| --- | --- | --- | --- |");
    println!("| direct to the upstream (2025-11-25 session) | {} | {} | |", ms(d50), ms(d99));
    println!("| through taskgate, 2025-11-25 session | {} | {} | {:.0} req/s |", ms(s50), ms(s99), session_rps);
    println!("| through taskgate, 2026-07-28 stateless | {} | {} | {:.0} req/s |", ms(m50), ms(m99), stateless_rps);
    let added = |through: Duration| through.saturating_sub(d50).max(Duration::from_micros(1));
    let ratio = added(m50).as_secs_f64() / added(s50).as_secs_f64();
    println!();
    println!(
        "- added p50 latency: 2026 stateless {} vs 2025 session {}: ratio {:.2} (target ≤ 1.1: {})",
        ms(added(m50)),
        ms(added(s50)),
        ratio,
        verdict(ratio <= 1.1)
    );
    println!(
        "- end-to-end p50: 2026 / 2025 = {:.2}; throughput 2026 / 2025 = {:.2}",
        m50.as_secs_f64() / s50.as_secs_f64(),
        stateless_rps / session_rps
    );
    println!();
    Ok(())
}
