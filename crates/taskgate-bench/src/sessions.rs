//! Section 10, sessions: many client sessions, one call each, through one gateway to one HTTP
//! upstream: what each costs the gateway in memory, and how many connections and sessions the
//! upstream is made to hold.

use std::path::Path;

use anyhow::{bail, Result};
use futures_util::future::join_all;
use taskgate_testkit::McpClient;

use crate::{call, start_demo, start_gateway, verdict, Plan};

/// Established TCP connections to `port` on 127.0.0.1, from /proc/net/tcp (the upstream's side
/// of each is a socket too, so each connection is counted once, by its remote port).
fn connections_to(port: u16) -> usize {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let wanted = format!("0100007F:{port:04X}");
    table
        .lines()
        .skip(1)
        .filter(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            // local, remote, state (01: established)
            fields.len() > 3 && fields[2] == wanted && fields[3] == "01"
        })
        .count()
}

pub async fn sessions(plan: &Plan, bin: &Path) -> Result<()> {
    let count = if plan.quick { 50 } else { 1000 };
    println!("## 10. Sessions: {count} client sessions, one call each, one HTTP upstream");
    println!();
    let (demo, demo_url) = start_demo(bin).await?;
    let demo_port: u16 = demo_url.trim_start_matches("http://127.0.0.1:").trim_end_matches("/mcp").parse()?;
    let (gateway, url) = start_gateway(
        bin,
        &format!(
            "max_sessions = {}\n[[upstream]]\nname = \"demo\"\ntransport = \"http\"\nurl = \"{demo_url}\"\n",
            2 * count + 16
        ),
    )
    .await?;
    // One session and call first, so that what every gateway has (the catalog, the client
    // pool) is in the baseline.
    let mut first = McpClient::new(&url);
    first.initialize().await;
    call(&first, "demo__echo").await?;
    let (gateway_before, demo_before, connections_before) = (gateway.rss(), demo.rss(), connections_to(demo_port));
    let clients = open_sessions(count, plan.concurrency, || McpClient::new(&url)).await?;
    let (gateway_after, demo_after, connections_after) = (gateway.rss(), demo.rss(), connections_to(demo_port));
    // As many more sessions again, their clients sharing one connection pool (at most
    // `concurrency` connections): what a session costs without a client connection of its own.
    // A new pool: `first`'s connection has been idle for the whole first phase, longer than the
    // gateway's keep-alive, and a request on it could race the server closing it.
    let pool = McpClient::new(&url);
    let shared = open_sessions(count, plan.concurrency, || McpClient::sharing_connections(&pool)).await?;
    let gateway_shared = gateway.rss();
    let per_session = gateway_after.saturating_sub(gateway_before) as f64 / count as f64;
    let mib = |b: u64| b as f64 / 1048576.0;
    let extra = mib(gateway_after.saturating_sub(gateway_before));
    println!("| measure | before | with {count} more sessions |");
    println!("| --- | --- | --- |");
    println!(
        "| gateway RSS | {:.1} MiB | {:.1} MiB (+{extra:.1} MiB, {per_session:.0} B a session) |",
        mib(gateway_before),
        mib(gateway_after)
    );
    let extra_shared = mib(gateway_shared.saturating_sub(gateway_after));
    println!(
        "| gateway RSS, {count} more sessions sharing {} client connections | {:.1} MiB | {:.1} MiB (+{extra_shared:.1} MiB, {:.0} B a session) |",
        plan.concurrency,
        mib(gateway_after),
        mib(gateway_shared),
        gateway_shared.saturating_sub(gateway_after) as f64 / count as f64
    );
    println!("| upstream RSS | {:.1} MiB | {:.1} MiB |", mib(demo_before), mib(demo_after));
    println!("| connections to the upstream | {connections_before} | {connections_after} |");
    println!();
    let scaled = |x: f64| x * 1000.0 / count as f64;
    println!(
        "- extra gateway RSS, scaled to 1,000 sessions, each with a client connection of its own: {:.1} MiB (target ≤ 8: {})",
        scaled(extra),
        verdict(scaled(extra) <= 8.0)
    );
    println!(
        "- the same, the clients sharing {} connections: {:.1} MiB (target ≤ 8: {})",
        plan.concurrency,
        scaled(extra_shared),
        verdict(scaled(extra_shared) <= 8.0)
    );
    println!(
        "- connections to the upstream held by {} sessions: {connections_after} (the sessions declare no capabilities and open no GET stream, so theirs hold no upstream GET stream: these are the catalog's GET stream and reqwest's idle pool; each session still has an upstream session of its own; target: at most upstream[].max_connections, 256 by default)",
        count + 1
    );
    println!();
    drop((clients, shared));
    Ok(())
}

/// Opens `count` sessions, `concurrency` at a time, each making one call.
async fn open_sessions(count: usize, concurrency: usize, client: impl Fn() -> McpClient) -> Result<Vec<McpClient>> {
    let mut clients = Vec::with_capacity(count);
    for batch in (0..count).collect::<Vec<_>>().chunks(concurrency) {
        let opened = join_all(batch.iter().map(|_| {
            let mut client = client();
            async move {
                client.initialize().await;
                call(&client, "demo__echo").await.map(|_| client)
            }
        }))
        .await;
        for client in opened {
            clients.push(client?);
        }
    }
    if clients.len() != count {
        bail!("{} sessions opened of {count}", clients.len());
    }
    Ok(clients)
}
