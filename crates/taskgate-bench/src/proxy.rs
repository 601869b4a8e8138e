//! Section 1: what the gateway adds to a proxied call, against nginx and the bare Rust proxies
//! (latency, CPU per call, throughput).

use crate::harness::{
    call, connect, ms, percentile, sequential_latencies, start_demo, start_gateway, start_nginx, stop_profiled,
    throughput, verdict, Process,
};
use crate::plan::Plan;
use anyhow::Result;
use std::path::Path;
use std::time::Duration;

pub(crate) async fn proxy_overhead(plan: &Plan, bin: &Path) -> Result<()> {
    println!("## 1. Proxy overhead: tools/call of a fast tool");
    println!();
    let (_demo, demo_url) = start_demo(bin).await?;
    let (gateway, gateway_url) =
        start_gateway(bin, &format!("[[upstream]]\nname = \"demo\"\ntransport = \"http\"\nurl = \"{demo_url}\"\n"))
            .await?;
    let upstream_addr = demo_url.trim_start_matches("http://").trim_end_matches("/mcp").to_owned();
    let nginx = start_nginx(&upstream_addr).await?;
    // The gateway's HTTP stack with no MCP work: the floor this stack sets.
    let (bare_process, bare_url) = crate::bare::start(&demo_url, &[], crate::bare::Front::Actix).await?;
    // The same with hyper's server in front: the floor of the leanest Rust stack.
    let (hyper_process, hyper_url) = crate::bare::start(&demo_url, &[], crate::bare::Front::Hyper).await?;

    let direct = connect(&demo_url).await?;
    let through = connect(&gateway_url).await?;
    let bare = connect(&bare_url).await?;
    let lean = connect(&hyper_url).await?;
    let proxied = match &nginx {
        Some((_, url)) => Some(connect(url).await?),
        None => None,
    };
    // Warm up every path.
    for _ in 0..20 {
        call(&direct, "echo").await?;
        call(&through, "demo__echo").await?;
        call(&bare, "echo").await?;
        call(&lean, "echo").await?;
        if let Some(p) = &proxied {
            call(p, "echo").await?;
        }
    }
    // Interleave the paths round by round so that noise hits them alike.
    let rounds = 4;
    let (mut d, mut g, mut b, mut h, mut n) = (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        d.extend(sequential_latencies(&direct, "echo", plan.sequential / rounds).await?);
        g.extend(sequential_latencies(&through, "demo__echo", plan.sequential / rounds).await?);
        b.extend(sequential_latencies(&bare, "echo", plan.sequential / rounds).await?);
        h.extend(sequential_latencies(&lean, "echo", plan.sequential / rounds).await?);
        if let Some(p) = &proxied {
            n.extend(sequential_latencies(p, "echo", plan.sequential / rounds).await?);
        }
    }
    let (d50, d99) = (percentile(&mut d, 0.5), percentile(&mut d, 0.99));
    let (g50, g99) = (percentile(&mut g, 0.5), percentile(&mut g, 0.99));
    let (b50, b99) = (percentile(&mut b, 0.5), percentile(&mut b, 0.99));
    let (h50, h99) = (percentile(&mut h, 0.5), percentile(&mut h, 0.99));
    let direct_rps = throughput(&direct, "echo", plan.concurrent_total, plan.concurrency).await?;
    // CPU seconds per 1,000 calls, from each throughput run's calls, as user and system time.
    let per_thousand = |cpu: Duration| cpu.as_secs_f64() * 1000.0 / plan.concurrent_total as f64;
    let measure = |process: &Process| {
        let before = process.cpu_split();
        move |process: &Process| {
            let after = process.cpu_split();
            (per_thousand(after.0.saturating_sub(before.0)), per_thousand(after.1.saturating_sub(before.1)))
        }
    };
    let done = measure(&gateway);
    let gateway_rps = throughput(&through, "demo__echo", plan.concurrent_total, plan.concurrency).await?;
    let gateway_split = done(&gateway);
    let done = measure(&bare_process);
    let bare_rps = throughput(&bare, "echo", plan.concurrent_total, plan.concurrency).await?;
    let bare_split = done(&bare_process);
    let done = measure(&hyper_process);
    let hyper_rps = throughput(&lean, "echo", plan.concurrent_total, plan.concurrency).await?;
    let hyper_split = done(&hyper_process);
    let (gateway_cpu, bare_cpu, hyper_cpu) =
        (gateway_split.0 + gateway_split.1, bare_split.0 + bare_split.1, hyper_split.0 + hyper_split.1);
    println!("| path | p50 | p99 | throughput at {} clients | CPU per 1,000 calls |", plan.concurrency);
    println!("| --- | --- | --- | --- | --- |");
    println!("| direct to the upstream | {} | {} | {:.0} req/s | |", ms(d50), ms(d99), direct_rps);
    println!("| through taskgate | {} | {} | {:.0} req/s | {:.3} s |", ms(g50), ms(g99), gateway_rps, gateway_cpu);
    println!(
        "| through the bare actix-web + hyper proxy (the stack alone) | {} | {} | {:.0} req/s | {:.3} s |",
        ms(b50),
        ms(b99),
        bare_rps,
        bare_cpu
    );
    println!(
        "| through a bare hyper proxy (hyper's server and client, no actix) | {} | {} | {:.0} req/s | {:.3} s |",
        ms(h50),
        ms(h99),
        hyper_rps,
        hyper_cpu
    );
    let gateway_added = g50.saturating_sub(d50);
    let bare_added = b50.saturating_sub(d50).max(Duration::from_micros(1));
    let hyper_added = h50.saturating_sub(d50).max(Duration::from_micros(1));
    match &proxied {
        Some(p) => {
            let (n50, n99) = (percentile(&mut n, 0.5), percentile(&mut n, 0.99));
            let nginx_process = &nginx.as_ref().expect("nginx runs").0;
            let done = measure(nginx_process);
            let nginx_rps = throughput(p, "echo", plan.concurrent_total, plan.concurrency).await?;
            let nginx_split = done(nginx_process);
            let nginx_cpu = nginx_split.0 + nginx_split.1;
            println!(
                "| through nginx (proxy_pass) | {} | {} | {:.0} req/s | {:.3} s |",
                ms(n50),
                ms(n99),
                nginx_rps,
                nginx_cpu
            );
            let nginx_added = n50.saturating_sub(d50).max(Duration::from_micros(1));
            let latency_ratio = gateway_added.as_secs_f64() / nginx_added.as_secs_f64();
            let throughput_ratio = gateway_rps / nginx_rps;
            println!();
            println!(
                "- added p50 latency: taskgate {} vs nginx {}: ratio {:.2} (target ≤ 1.5: {})",
                ms(gateway_added),
                ms(nginx_added),
                latency_ratio,
                verdict(latency_ratio <= 1.5)
            );
            println!(
                "- throughput: taskgate / nginx = {:.2} (target ≥ 0.95: {})",
                throughput_ratio,
                verdict(throughput_ratio >= 0.95)
            );
            let cpu_ratio = gateway_cpu / nginx_cpu.max(1e-9);
            println!(
                "- CPU per 1,000 calls: taskgate {:.3} s vs nginx {:.3} s: ratio {:.2} (target ≤ 1.5: {})",
                gateway_cpu,
                nginx_cpu,
                cpu_ratio,
                verdict(cpu_ratio <= 1.5)
            );
            // A bare proxy's figures against nginx's.
            let against_nginx = |name: &str, added: Duration, rps: f64, cpu: f64| {
                println!(
                    "- {name} vs nginx: added latency {} ({:.2}×), throughput {:.2}×, CPU {:.2}×",
                    ms(added),
                    added.as_secs_f64() / nginx_added.as_secs_f64(),
                    rps / nginx_rps,
                    cpu / nginx_cpu.max(1e-9)
                )
            };
            against_nginx("the stack alone (bare proxy)", bare_added, bare_rps, bare_cpu);
            against_nginx("the bare hyper proxy", hyper_added, hyper_rps, hyper_cpu);
            println!(
                "- CPU per 1,000 calls, user + system: taskgate {:.3} + {:.3} s, the stack alone {:.3} + {:.3} s, the bare hyper proxy {:.3} + {:.3} s, nginx {:.3} + {:.3} s",
                gateway_split.0,
                gateway_split.1,
                bare_split.0,
                bare_split.1,
                hyper_split.0,
                hyper_split.1,
                nginx_split.0,
                nginx_split.1
            );
        }
        None => {
            println!();
            println!("- nginx is not installed (apt-get install -y nginx): the nginx comparison was skipped.");
            println!(
                "- added p50 latency through taskgate: {}; throughput taskgate / direct = {:.2}; CPU per 1,000 calls {:.3} s",
                ms(gateway_added),
                gateway_rps / direct_rps,
                gateway_cpu
            );
        }
    }
    println!(
        "- taskgate vs the stack alone: added latency {:.2}×, throughput {:.2}×, CPU {:.2}×",
        gateway_added.as_secs_f64() / bare_added.as_secs_f64(),
        gateway_rps / bare_rps,
        gateway_cpu / bare_cpu.max(1e-9)
    );
    println!();
    stop_profiled(gateway).await;
    Ok(())
}
