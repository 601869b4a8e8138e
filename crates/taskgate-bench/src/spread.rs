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
    let Some((nginx, nginx_url)) = start_nginx(&upstream_addr).await? else {
        println!("- nginx is not installed (apt-get install -y nginx): section skipped.");
        println!();
        return Ok(());
    };
    // The stack alone: actix-web and hyper forwarding bytes, no MCP work (sections 1 and 9).
    let (_bare, bare_url) = crate::bare::start(&demo_url, &[], crate::bare::Front::Actix).await?;
    let workers = std::env::var("TASKGATE_BENCH_WORKERS").unwrap_or_else(|_| "0".into());
    let upstream =
        format!("workers = {workers}\n[[upstream]]\nname = \"demo\"\ntransport = \"http\"\nurl = \"{demo_url}\"\n");
    println!("| start | taskgate added p50 | the stack alone | nginx added p50 | taskgate / nginx |");
    println!("| --- | --- | --- | --- | --- |");
    let (mut gateway_added, mut nginx_added, mut bare_added) = (Vec::new(), Vec::new(), Vec::new());
    for start in 1..=starts {
        let (gateway, gateway_url) = start_gateway(bin, &upstream).await?;
        let paths = [(&*demo_url, "echo"), (&*nginx_url, "echo"), (&*gateway_url, "demo__echo"), (&*bare_url, "echo")];
        let p50 = load_generator(&paths, calls).await?;
        let (d, n, g, b) = (p50[0], p50[1], p50[2], p50[3]);
        let (added_g, added_n) = (g.saturating_sub(d), n.saturating_sub(d).max(Duration::from_micros(1)));
        let added_b = b.saturating_sub(d);
        println!(
            "| {start} | {} | {} | {} | {:.2} |",
            ms(added_g),
            ms(added_b),
            ms(added_n),
            added_g.as_secs_f64() / added_n.as_secs_f64()
        );
        gateway_added.push(added_g);
        nginx_added.push(added_n);
        bare_added.push(added_b);
        gateway.terminate().await;
    }
    let (g_min, g_max) = (*gateway_added.iter().min().unwrap(), *gateway_added.iter().max().unwrap());
    let g_median = percentile(&mut gateway_added, 0.5);
    let n_median = percentile(&mut nginx_added, 0.5);
    let b_median = percentile(&mut bare_added, 0.5);
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
    println!(
        "- the stack alone (actix-web in front, hyper behind, one worker, no MCP work): median added p50 {} = {:.2}× nginx's",
        ms(b_median),
        b_median.as_secs_f64() / n_median.as_secs_f64().max(1e-9)
    );
    println!("- {calls} calls per path per start, after 50 warm-up calls, paired round by round");
    println!();
    concurrent(plan, bin, &upstream, &nginx_url, &nginx).await
}

/// Throughput and CPU at 64 clients, both ways: clients in a load-generator process, each with
/// a connection of its own, the gateway's process alone timed; and the benchmark's own way
/// (section 1: the clients in its process, sharing one connection pool).
async fn concurrent(
    plan: &Plan,
    bin: &Path,
    upstream: &str,
    nginx_url: &str,
    nginx: &crate::harness::Process,
) -> Result<()> {
    let (clients, total) = if plan.quick { (8, 400) } else { (64, 20_000) };
    let (gateway, gateway_url) = start_gateway(bin, upstream).await?;
    let per_thousand = |cpu: Duration| cpu.as_secs_f64() * 1000.0 / total as f64;
    let cpu = |p: &crate::harness::Process| {
        let (user, system) = p.cpu_split();
        user + system
    };
    // Clients in a process of their own, a connection each.
    let before = cpu(&gateway);
    let gateway_rps = load_generator_concurrent(&gateway_url, "demo__echo", clients, total).await?;
    let gateway_cpu = per_thousand(cpu(&gateway).saturating_sub(before));
    let before = cpu(nginx);
    let nginx_rps = load_generator_concurrent(nginx_url, "echo", clients, total).await?;
    let nginx_cpu = per_thousand(cpu(nginx).saturating_sub(before));
    // The benchmark's own way: one client (one pool) in this process.
    let through = connect(&gateway_url).await?;
    let direct_nginx = connect(nginx_url).await?;
    let before = cpu(&gateway);
    let inproc_gateway_rps = crate::harness::throughput(&through, "demo__echo", total, clients).await?;
    let inproc_gateway_cpu = per_thousand(cpu(&gateway).saturating_sub(before));
    let before = cpu(nginx);
    let inproc_nginx_rps = crate::harness::throughput(&direct_nginx, "echo", total, clients).await?;
    let inproc_nginx_cpu = per_thousand(cpu(nginx).saturating_sub(before));
    println!("| {clients} clients, {total} calls | taskgate | nginx | taskgate / nginx |");
    println!("| --- | --- | --- | --- |");
    println!(
        "| throughput, a load-generator process, a connection per client | {gateway_rps:.0} req/s | {nginx_rps:.0} req/s | {:.2} |",
        gateway_rps / nginx_rps
    );
    println!(
        "| CPU per 1,000 calls, the proxy's process alone | {gateway_cpu:.3} s | {nginx_cpu:.3} s | {:.2} |",
        gateway_cpu / nginx_cpu.max(1e-9)
    );
    println!(
        "| throughput, clients in the benchmark's process sharing a pool (section 1's way) | {inproc_gateway_rps:.0} req/s | {inproc_nginx_rps:.0} req/s | {:.2} |",
        inproc_gateway_rps / inproc_nginx_rps
    );
    println!(
        "| CPU per 1,000 calls, section 1's way | {inproc_gateway_cpu:.3} s | {inproc_nginx_cpu:.3} s | {:.2} |",
        inproc_gateway_cpu / inproc_nginx_cpu.max(1e-9)
    );
    println!();
    gateway.terminate().await;
    Ok(())
}

/// Runs the load generator with `clients` clients, each with its own connection, `total`
/// calls in all: requests per second.
async fn load_generator_concurrent(url: &str, tool: &str, clients: usize, total: usize) -> Result<f64> {
    let out = tokio::process::Command::new(std::env::current_exe()?)
        .args(["--load-gen-concurrent", &clients.to_string(), &total.to_string(), url, tool])
        .kill_on_drop(true)
        .output()
        .await?;
    if !out.status.success() {
        bail!("the load generator failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let answer: Value = serde_json::from_slice(&out.stdout).context("the load generator's JSON")?;
    answer["rps"].as_f64().context("rps")
}

/// `taskgate-bench --load-gen-concurrent CLIENTS TOTAL URL TOOL`: CLIENTS clients, each with
/// its own connection (its own HTTP client), TOTAL calls in all after a warm-up call each;
/// prints `{"rps": …}`.
pub(crate) async fn generate_concurrent(args: &[String]) -> Result<()> {
    let usage = "--load-gen-concurrent CLIENTS TOTAL URL TOOL";
    let clients: usize = args.first().and_then(|n| n.parse().ok()).context(usage)?;
    let total: usize = args.get(1).and_then(|n| n.parse().ok()).context(usage)?;
    let (url, tool) = (args.get(2).context(usage)?, args.get(3).context(usage)?);
    let mut sessions = Vec::new();
    for _ in 0..clients {
        let client = connect(url).await?;
        call(&client, tool).await?;
        sessions.push(client);
    }
    let per_client = total / clients;
    let started = Instant::now();
    let runs = sessions.iter().map(|client| async move {
        for _ in 0..per_client {
            call(client, tool).await?;
        }
        Ok::<_, anyhow::Error>(())
    });
    for outcome in futures_util::future::join_all(runs).await {
        outcome?;
    }
    let rps = (per_client * clients) as f64 / started.elapsed().as_secs_f64();
    println!("{}", serde_json::json!({ "rps": rps }));
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
