//! Sections 4 and 5: progress coalescing and relaying, and cancellation reaching the upstream.

use crate::harness::{connect, metric, start_demo, start_gateway, verdict};
use crate::plan::Plan;
use anyhow::Result;
use futures_util::future::join_all;
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

pub(crate) async fn progress_run(
    bin: &Path,
    demo_url: &str,
    min_interval_ms: u64,
    values: usize,
) -> Result<(f64, usize, bool)> {
    let config = format!(
        "[progress]\nmin_interval_ms = {min_interval_ms}\n\n[[upstream]]\nname = \"demo\"\ntransport = \"http\"\nurl = \"{demo_url}\"\n"
    );
    let (_gateway, url) = start_gateway(bin, &config).await?;
    let mut client = connect(&url).await?;
    let list: Vec<usize> = (1..=values).collect();
    let started = Instant::now();
    let reply = client
        .request(
            "tools/call",
            Some(json!({"name": "demo__progress", "arguments": {"values": list}, "_meta": {"progressToken": "bench"}})),
        )
        .await;
    let elapsed = started.elapsed().as_secs_f64();
    let progress: Vec<f64> = reply
        .notifications()
        .iter()
        .filter_map(|m| match m {
            taskgate_protocol::Message::Notification { params: Some(p), .. } => p["progress"].as_f64(),
            _ => None,
        })
        .collect();
    let last_delivered = progress.last().copied() == Some(values as f64);
    Ok((values as f64 / elapsed, progress.len(), last_delivered))
}

pub(crate) async fn progress(plan: &Plan, bin: &Path) -> Result<()> {
    println!("## 4. Progress: {} notifications from one upstream call, one session", plan.progress_values);
    println!();
    let (_demo, demo_url) = start_demo(bin).await?;
    let (off_rate, off_count, off_last) = progress_run(bin, &demo_url, 0, plan.progress_values).await?;
    let (on_rate, on_count, on_last) = progress_run(bin, &demo_url, 50, plan.progress_values).await?;
    println!(
        "| coalescing | upstream notifications handled per second | delivered to the client | final value delivered |"
    );
    println!("| --- | --- | --- | --- |");
    println!("| off (min_interval_ms = 0) | {off_rate:.0}/s | {off_count} | {off_last} |");
    println!("| on (min_interval_ms = 50) | {on_rate:.0}/s | {on_count} | {on_last} |");
    println!();
    println!("- final value never lost: {}", verdict(off_last && on_last));
    println!();
    Ok(())
}

pub(crate) async fn cancellation(plan: &Plan, bin: &Path) -> Result<()> {
    println!("## 5. Cancellation: {} cancels racing responses", plan.cancellations);
    println!();
    let (_demo, demo_url) = start_demo(bin).await?;
    let (_gateway, url) =
        start_gateway(bin, &format!("[[upstream]]\nname = \"demo\"\ntransport = \"http\"\nurl = \"{demo_url}\"\n"))
            .await?;
    let client = connect(&url).await?;
    let started = Instant::now();
    let mut answered = 0usize;
    let mut sent = 0usize;
    while sent < plan.cancellations {
        let batch = plan.concurrency.min(plan.cancellations - sent);
        let calls = (0..batch).map(|i| {
            let id = (sent + i) as i64 + 1_000_000;
            let c = client.clone();
            async move {
                let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                    "params": {"name": "demo__slow", "arguments": {"ms": 2, "steps": 1}, "_meta": {"progressToken": id}}})
                .to_string();
                let cancel = c.notify("notifications/cancelled", Some(json!({"requestId": id, "reason": "bench"})));
                let (reply, _) = tokio::join!(c.post_raw(body, &[]), cancel);
                reply.messages.iter().any(|m| m.is_response())
            }
        });
        answered += join_all(calls).await.into_iter().filter(|a| *a).count();
        sent += batch;
    }
    let elapsed = started.elapsed();
    let mut in_progress = f64::NAN;
    let mut tokens = f64::NAN;
    for _ in 0..100 {
        in_progress = metric(&url, "taskgate_requests_in_progress").await;
        tokens = metric(&url, "taskgate_progress_actors").await;
        if in_progress == 0.0 && tokens == 0.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!("| measure | value |");
    println!("| --- | --- |");
    println!("| calls, each cancelled at once | {} in {:.1} s |", plan.cancellations, elapsed.as_secs_f64());
    println!("| answered before the cancel arrived | {answered} |");
    println!("| cancelled (no response) | {} |", plan.cancellations - answered);
    println!("| requests in progress / live progress tokens afterwards | {in_progress} / {tokens} |");
    println!();
    println!("- live-request count back to zero: {}", verdict(in_progress == 0.0 && tokens == 0.0));
    println!();
    Ok(())
}
