//! taskgate's benchmarks. Every figure that matters is a ratio of two things measured side by
//! side in the same run on the same machine (the machines are shared and noisy, so absolute
//! times alone mean little). All load goes to 127.0.0.1 and is bounded in count and time.
//!
//! `taskgate-bench` runs the full suite; `taskgate-bench --quick` runs every measurement with
//! small counts to check that it works (CI does this). The gateway and the upstreams are the
//! real `taskgate` binary, started as child processes, so the gateway's memory is its own.

use crate::harness::{fixed_server, machine, taskgate_bin};
use crate::plan::{parse_args, Plan, USAGE};
use crate::polling::polling;
use crate::progress::{cancellation, progress};
use crate::proxy::proxy_overhead;
use crate::scale::task_scale;
use anyhow::{Context, Result};
use std::path::PathBuf;
use std::time::Instant;

mod bare;
mod catalog;
mod credentials;
mod floor;
mod harness;
mod instructions;
mod oneshot;
mod plan;
mod polling;
mod progress;
mod proxy;
mod refusals;
mod replicas;
mod revisions;
mod scale;
mod sessions;
mod soak;
mod spread;
mod stores;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--fixed-server") {
        // The comparison server of section 2, in a process of its own like the gateway.
        let port: u16 = args.get(1).and_then(|p| p.parse().ok()).context("--fixed-server PORT BODY")?;
        let body = args.get(2).cloned().unwrap_or_default();
        return actix_rt::System::new().block_on(fixed_server(port, body));
    }
    if args.first().map(String::as_str) == Some("--task-floor") {
        // Section 3's floor, in a process of its own (its resident memory is the measure).
        let n: usize = args.get(1).and_then(|n| n.parse().ok()).context("--task-floor N")?;
        return actix_rt::System::new().block_on(floor::run(n));
    }
    if args.first().map(String::as_str) == Some("--bare-proxy") {
        // The bare actix-web + hyper proxy of sections 1 and 9, in a process of its own.
        let port: u16 = args.get(1).and_then(|p| p.parse().ok()).context("--bare-proxy PORT UPSTREAM_URL")?;
        let upstream = args.get(2).cloned().context("--bare-proxy PORT UPSTREAM_URL")?;
        return actix_rt::System::new().block_on(bare::serve(port, upstream));
    }
    if args.first().map(String::as_str) == Some("--load-gen-concurrent") {
        // Section 14's concurrent load generator, in a process of its own.
        return actix_rt::System::new().block_on(spread::generate_concurrent(&args[1..]));
    }
    if args.first().map(String::as_str) == Some("--load-gen") {
        // Section 14's load generator, in a process of its own.
        return actix_rt::System::new().block_on(spread::generate(&args[1..]));
    }
    if args.first().map(String::as_str) == Some("--bare-hyper-proxy") {
        // The same with hyper's server in front instead of actix-web.
        let port: u16 = args.get(1).and_then(|p| p.parse().ok()).context("--bare-hyper-proxy PORT UPSTREAM_URL")?;
        let upstream = args.get(2).cloned().context("--bare-hyper-proxy PORT UPSTREAM_URL")?;
        return bare::serve_hyper(port, upstream);
    }
    let plan = match parse_args(&args) {
        Ok(Some(plan)) => plan,
        Ok(None) => {
            println!("{USAGE}");
            return Ok(());
        }
        Err(why) => {
            eprintln!("taskgate-bench: {why}\n\n{USAGE}");
            std::process::exit(2);
        }
    };
    let bin = taskgate_bin()?;
    actix_rt::System::new().block_on(run(plan, bin))
}

async fn run(plan: Plan, bin: PathBuf) -> Result<()> {
    let started = Instant::now();
    println!(
        "# taskgate benchmarks{}",
        if plan.quick { " (quick mode: small counts, figures not meaningful)" } else { "" }
    );
    println!();
    println!("machine: {}", machine());
    println!();
    let run = |name: &str| plan.only.as_deref().is_none_or(|only| only == name);
    if run("proxy") {
        proxy_overhead(&plan, &bin).await?;
    }
    if run("polling") {
        polling(&plan, &bin).await?;
    }
    if run("tasks") {
        task_scale(&plan, &bin).await?;
    }
    if run("progress") {
        progress(&plan, &bin).await?;
    }
    if run("cancellation") {
        cancellation(&plan, &bin).await?;
    }
    if run("stores") {
        stores::stores(&plan, &bin).await?;
    }
    if run("soak") {
        soak::soak(&plan, &bin).await?;
    }
    if run("revisions") {
        revisions::revisions(&plan, &bin).await?;
    }
    if run("instructions") {
        instructions::instructions(&plan, &bin).await?;
    }
    if run("sessions") {
        sessions::sessions(&plan, &bin).await?;
    }
    if run("one-shot") {
        oneshot::one_shot_clients(&plan, &bin).await?;
    }
    if run("credentials") {
        credentials::credentials(&plan, &bin).await?;
    }
    if run("refusals") {
        refusals::refusals(&plan, &bin).await?;
    }
    if run("replicas") {
        replicas::replicas(&plan, &bin).await?;
    }
    if run("spread") {
        spread::spread(&plan, &bin).await?;
    }
    if run("catalog") {
        catalog::catalog_search(&plan)?;
    }
    println!();
    println!("total benchmark time: {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}
