//! Section 14: the latency the gateway adds, whatever worker thread a client's connection lands
//! on. The gateway runs with its default workers (one per core), started again and again; each
//! time a load generator in a process of its own (`--load-gen`), with one keep-alive
//! connection per target, calls the demo upstream directly, through nginx and through the
//! gateway, one call each in turn (paired), and the added p50 is each path's p50 less the
//! direct one's.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::harness::{call, connect, ms, percentile, start_demo, start_gateway, start_nginx};
use crate::plan::Plan;

pub(crate) async fn spread(plan: &Plan, bin: &Path) -> Result<()> {
    println!("## 14. Added latency over separate starts (default workers, a load-generator process)");
    println!();
    let (starts, calls) = if plan.quick { (2, 100) } else { (10, 2000) };
    let (_demo, demo_url) = start_demo(bin).await?;
    let upstream_addr = demo_url.trim_start_matches("http://").trim_end_matches("/mcp").to_owned();
    let Some((_nginx, nginx_url)) = start_nginx(&upstream_addr).await? else {
        println!("- nginx is not installed (apt-get install -y nginx): section skipped.");
        println!();
        return Ok(());
    };
    let workers = std::env::var("TASKGATE_BENCH_WORKERS").unwrap_or_else(|_| "0".into());
    let upstream =
        format!("workers = {workers}\n[[upstream]]\nname = \"demo\"\ntransport = \"http\"\nurl = \"{demo_url}\"\n");
    println!("| start | taskgate added p50 | nginx added p50 | ratio |");
    println!("| --- | --- | --- | --- |");
    let (mut gateway_added, mut nginx_added) = (Vec::new(), Vec::new());
    for start in 1..=starts {
        let (gateway, gateway_url) = start_gateway(bin, &upstream).await?;
        let p50 =
            load_generator(&[(&demo_url, "echo"), (&nginx_url, "echo"), (&gateway_url, "demo__echo")], calls).await?;
        let (d, n, g) = (p50[0], p50[1], p50[2]);
        let (added_g, added_n) = (g.saturating_sub(d), n.saturating_sub(d).max(Duration::from_micros(1)));
        println!(
            "| {start} | {} | {} | {:.2} |",
            ms(added_g),
            ms(added_n),
            added_g.as_secs_f64() / added_n.as_secs_f64()
        );
        gateway_added.push(added_g);
        nginx_added.push(added_n);
        gateway.terminate().await;
    }
    let (g_min, g_max) = (*gateway_added.iter().min().unwrap(), *gateway_added.iter().max().unwrap());
    let g_median = percentile(&mut gateway_added, 0.5);
    let n_median = percentile(&mut nginx_added, 0.5);
    let spread = (g_max - g_min).as_secs_f64() / g_median.as_secs_f64().max(1e-9);
    let ratio = g_median.as_secs_f64() / n_median.as_secs_f64().max(1e-9);
    println!();
    println!(
        "- taskgate's added p50 over {starts} starts: {} to {}, median {}: spread (max - min) / median {:.2} (target < 0.2: {})",
        ms(g_min),
        ms(g_max),
        ms(g_median),
        spread,
        crate::harness::verdict(spread < 0.2)
    );
    println!(
        "- median added p50, taskgate / nginx: {} / {} = {:.2} (target ≤ 1.5: {})",
        ms(g_median),
        ms(n_median),
        ratio,
        crate::harness::verdict(ratio <= 1.5)
    );
    println!("- {calls} calls per path per start, after 50 warm-up calls, paired round by round");
    println!();
    Ok(())
}

/// Runs this program as the load generator (`--load-gen`): the p50 of each target.
async fn load_generator(targets: &[(&str, &str)], calls: usize) -> Result<Vec<Duration>> {
    let mut command = tokio::process::Command::new(std::env::current_exe()?);
    command.arg("--load-gen").arg(calls.to_string());
    for (url, tool) in targets {
        command.arg(url).arg(tool);
    }
    let out = command.kill_on_drop(true).output().await?;
    if !out.status.success() {
        bail!("the load generator failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let answer: Value = serde_json::from_slice(&out.stdout).context("the load generator's JSON")?;
    let p50 = answer["p50_us"].as_array().context("p50_us")?;
    Ok(p50.iter().map(|v| Duration::from_micros(v.as_u64().unwrap_or(0))).collect())
}

/// The load generator (`taskgate-bench --load-gen N URL TOOL [URL TOOL]…`): one client and one
/// keep-alive connection per target, 50 warm-up calls each, then N rounds of one call to each
/// target in turn; prints `{"p50_us": [...]}`.
pub(crate) async fn generate(args: &[String]) -> Result<()> {
    let calls: usize = args.first().and_then(|n| n.parse().ok()).context("--load-gen N URL TOOL [URL TOOL]…")?;
    let pairs: Vec<(&String, &String)> = args[1..].chunks(2).filter_map(|p| Some((p.first()?, p.get(1)?))).collect();
    let mut clients = Vec::new();
    for (url, tool) in &pairs {
        clients.push((connect(url).await?, tool.as_str()));
    }
    for _ in 0..50 {
        for (client, tool) in &clients {
            call(client, tool).await?;
        }
    }
    let mut samples: Vec<Vec<Duration>> = vec![Vec::with_capacity(calls); clients.len()];
    for _ in 0..calls {
        for (i, (client, tool)) in clients.iter().enumerate() {
            let started = Instant::now();
            call(client, tool).await?;
            samples[i].push(started.elapsed());
        }
    }
    let p50: Vec<u64> = samples.iter_mut().map(|s| percentile(s, 0.5).as_micros() as u64).collect();
    println!("{}", serde_json::json!({ "p50_us": p50 }));
    Ok(())
}
