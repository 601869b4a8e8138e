//! Section 3: memory per live task and after every task expired, against a floor built from
//! the same libraries.

use crate::harness::{call, connect, metric, ms, percentile, start_gateway, stop_profiled, verdict};
use crate::plan::Plan;
use anyhow::{bail, Context, Result};
use futures_util::future::join_all;
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};
use taskgate_testkit::McpClient;

pub(crate) async fn task_scale(plan: &Plan, bin: &Path) -> Result<()> {
    println!("## 3. Task scale: {} wrapped tasks on a slow upstream", plan.tasks);
    println!();
    let ttl_ms: u64 = if plan.quick { 5_000 } else { 30_000 };
    // The memory store: this section measures the gateway's own cost per task; section 6
    // measures each store's.
    let config = format!(
        "[store]\nbackend = \"memory\"\n[tasks]\ndefault_ttl_ms = {ttl_ms}\nmax_ttl_ms = {ttl_ms}\nmax_tasks = {}\nsweep_interval_ms = 500\n\n\
         [[upstream]]\nname = \"local\"\ntransport = \"stdio\"\ncommand = \"{}\"\nargs = [\"demo-upstream\", \"--stdio\"]\n",
        plan.tasks * 2,
        bin.display()
    );
    let (gateway, url) = start_gateway(bin, &config).await?;
    let mut client = connect(&url).await?;
    // Plain calls first, as many at a time as the tasks will be created, so the stdio process,
    // every lazy structure and the client's connections exist before the baseline: the
    // connections stay open after the tasks expire and are not the tasks' memory.
    for result in join_all((0..plan.concurrency).map(|_| call(&client, "local__echo"))).await {
        result?;
    }
    let baseline = gateway.rss();
    // Creation latency must not depend on the upstream: compare a tool that never finishes
    // (`wait`) with one that finishes at once (`echo`).
    let create = |c: McpClient, tool: &'static str| async move {
        let mut c = c;
        let started = Instant::now();
        let reply = c
            .request("tools/call", Some(json!({"name": tool, "arguments": {"gate": "never", "text": "x"}, "task": {}})))
            .await;
        let elapsed = started.elapsed();
        (elapsed, reply.outcome().is_ok())
    };
    // Creation latency, one at a time, alternating the two tools so noise hits both alike.
    let (mut instant, mut slow) = (Vec::new(), Vec::new());
    for _ in 0..200.min(plan.tasks / 2) {
        for (tool, samples) in [("local__echo", &mut instant), ("local__wait", &mut slow)] {
            let (took, ok) = create(client.clone(), tool).await;
            if !ok {
                bail!("creating a {tool} task failed");
            }
            samples.push(took);
        }
    }
    // Then the rest of the live tasks, many at a time, for the memory figures.
    let started = Instant::now();
    let mut created = slow.len();
    while created < plan.tasks {
        let batch = plan.concurrency.min(plan.tasks - created);
        let results = join_all((0..batch).map(|_| create(client.clone(), "local__wait"))).await;
        if results.iter().any(|(_, ok)| !ok) {
            bail!("creating task {created} failed");
        }
        created += batch;
    }
    let creating = started.elapsed();
    let live = gateway.rss();
    let live_actors = metric(&url, "taskgate_task_actors").await;
    let (s50, s99) = (percentile(&mut slow, 0.5), percentile(&mut slow, 0.99));
    let (i50, i99) = (percentile(&mut instant, 0.5), percentile(&mut instant, 0.99));
    let per_task = live.saturating_sub(baseline) as f64 / plan.tasks as f64;
    println!("| measure | value |");
    println!("| --- | --- |");
    let bulk = plan.tasks - slow.len();
    println!(
        "| tasks created | {} ({} of them {} at a time in {:.1} s, {:.0}/s); {} task actors live |",
        plan.tasks,
        bulk,
        plan.concurrency,
        creating.as_secs_f64(),
        bulk as f64 / creating.as_secs_f64(),
        live_actors
    );
    println!("| CreateTaskResult p50 / p99, upstream never finishes (`wait`) | {} / {} |", ms(s50), ms(s99));
    println!("| CreateTaskResult p50 / p99, upstream finishes at once (`echo`) | {} / {} |", ms(i50), ms(i99));
    println!(
        "| gateway RSS: baseline / with the tasks live | {:.1} MiB / {:.1} MiB |",
        baseline as f64 / 1048576.0,
        live as f64 / 1048576.0
    );
    println!("| resident memory per live task | {:.0} bytes |", per_task);
    // Wait for every task to expire (their ttl), then measure again.
    let deadline = Instant::now() + Duration::from_millis(ttl_ms) + Duration::from_secs(60);
    loop {
        let held = metric(&url, "taskgate_tasks").await;
        let actors = metric(&url, "taskgate_task_actors").await;
        if held == 0.0 && actors == 0.0 {
            break;
        }
        if Instant::now() > deadline {
            bail!("tasks did not expire: {held} held, {actors} actors");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // The Supervisor gives freed memory back at its next sweep once nothing is held (a
    // benchmark may wait; tests may not): two sweep intervals.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let _ = client.request("ping", None).await;
    let after = gateway.rss();
    // A second round of the same size: if the memory is reused rather than leaked, the peak
    // does not grow.
    let mut created = 0usize;
    while created < plan.tasks {
        let batch = plan.concurrency.min(plan.tasks - created);
        let results = join_all((0..batch).map(|_| create(client.clone(), "local__wait"))).await;
        if results.iter().any(|(_, ok)| !ok) {
            bail!("creating task {created} of the second round failed");
        }
        created += batch;
    }
    let second_peak = gateway.rss();
    let after_ratio = after as f64 / baseline as f64;
    println!(
        "| gateway RSS after they all expired | {:.1} MiB ({:.2}× baseline) |",
        after as f64 / 1048576.0,
        after_ratio
    );
    println!(
        "| gateway RSS with a second round of {} live tasks | {:.1} MiB (first round: {:.1} MiB) |",
        plan.tasks,
        second_peak as f64 / 1048576.0,
        live as f64 / 1048576.0
    );
    println!();
    let p50_ratio = s50.as_secs_f64() / i50.as_secs_f64().max(1e-9);
    println!("- creation latency independent of the upstream: p50 wait/echo = {:.2} (≈1 expected)", p50_ratio);
    println!("- memory per live task: {:.0} B (target ≤ 2048 B: {})", per_task, verdict(per_task <= 2048.0));
    match task_floor(plan.tasks).await {
        Ok((record, actor, call)) => println!(
            "- the floor in DESIGN's shape, the same libraries and none of the gateway's logic ({} tasks in a process of its own): the store's record {record:.0} B, + an actor with a ttl timer {actor:.0} B, + a call waiting for its answer {call:.0} B = {:.0} B a task",
            plan.tasks,
            record + actor + call
        ),
        Err(e) => println!("- the floor could not be measured: {e:#}"),
    }
    println!("- memory after expiry: {:.2}× baseline (target ≤ 1.1: {})", after_ratio, verdict(after_ratio <= 1.1));
    println!();
    stop_profiled(gateway).await;
    Ok(())
}

/// Runs `taskgate-bench --task-floor n` and reads its three figures (bytes per task).
pub(crate) async fn task_floor(n: usize) -> Result<(f64, f64, f64)> {
    let exe = std::env::current_exe()?;
    let out = tokio::process::Command::new(exe).arg("--task-floor").arg(n.to_string()).output().await?;
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |name: &str| -> Result<f64> {
        text.split_whitespace()
            .find_map(|f| f.strip_prefix(name)?.strip_prefix('=')?.parse().ok())
            .with_context(|| format!("--task-floor printed {text:?} ({})", String::from_utf8_lossy(&out.stderr)))
    };
    Ok((field("record")?, field("actor")?, field("call")?))
}
