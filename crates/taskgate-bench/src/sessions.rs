//! Section 10, sessions: many client sessions, one call each, through one gateway to one HTTP
//! upstream: what each costs the gateway in memory, and how many connections and sessions the
//! upstream is made to hold.

use std::path::Path;

use crate::harness::{call, start_demo, start_gateway, verdict};
use crate::plan::Plan;
use anyhow::{bail, Result};
use futures_util::future::join_all;
use taskgate_testkit::McpClient;

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

/// What one gateway was made to hold by the sessions.
struct Held {
    /// Gateway RSS: before, with `count` sessions each with a client connection of its own,
    /// with `count` more sharing `concurrency` client connections.
    gateway: [u64; 3],
    /// The upstream's RSS before and with the first `count` sessions.
    demo: [u64; 2],
    /// Connections to the upstream before and with the first `count` sessions.
    connections: [usize; 2],
    /// Upstream sessions the gateway holds with all the sessions open (its catalog's included).
    upstream_sessions: u64,
}

pub async fn sessions(plan: &Plan, bin: &Path) -> Result<()> {
    let count = if plan.quick { 50 } else { 1000 };
    println!("## 10. Sessions: {count} client sessions, one call each, one HTTP upstream");
    println!();
    let private = measure(plan, bin, count, "never").await?;
    let shared = measure(plan, bin, count, "always").await?;
    let mib = |b: u64| b as f64 / 1048576.0;
    let extra = |h: &Held| mib(h.gateway[1].saturating_sub(h.gateway[0]));
    let extra_shared = |h: &Held| mib(h.gateway[2].saturating_sub(h.gateway[1]));
    let per = |mib: f64| mib * 1048576.0 / count as f64;
    println!("| measure | each client session its own upstream session (`share_sessions = \"never\"`) | shared (`\"always\"`) |");
    println!("| --- | --- | --- |");
    let row = |name: &str, f: &dyn Fn(&Held) -> String| println!("| {name} | {} | {} |", f(&private), f(&shared));
    row("gateway RSS before", &|h| format!("{:.1} MiB", mib(h.gateway[0])));
    row(&format!("extra gateway RSS, {count} sessions each with a client connection of its own"), &|h| {
        format!("+{:.1} MiB ({:.0} B a session)", extra(h), per(extra(h)))
    });
    row(&format!("extra gateway RSS, {count} more sessions sharing {} client connections", plan.concurrency), &|h| {
        format!("+{:.1} MiB ({:.0} B a session)", extra_shared(h), per(extra_shared(h)))
    });
    row(&format!("upstream sessions held with {} client sessions open", 2 * count + 1), &|h| {
        h.upstream_sessions.to_string()
    });
    row("upstream RSS, before and with the first sessions", &|h| {
        format!("{:.1} → {:.1} MiB", mib(h.demo[0]), mib(h.demo[1]))
    });
    row("connections to the upstream, before and with the first sessions", &|h| {
        format!("{} → {}", h.connections[0], h.connections[1])
    });
    println!();
    let scaled = |x: f64| x * 1000.0 / count as f64;
    for (name, held) in [("own upstream sessions", &private), ("shared upstream sessions", &shared)] {
        println!(
            "- {name}: extra gateway RSS scaled to 1,000 sessions, each with a client connection of its own: {:.1} MiB (target ≤ 8: {}); the clients sharing {} connections: {:.1} MiB (target ≤ 8: {})",
            scaled(extra(held)),
            verdict(scaled(extra(held)) <= 8.0),
            plan.concurrency,
            scaled(extra_shared(held)),
            verdict(scaled(extra_shared(held)) <= 8.0)
        );
    }
    println!(
        "- connections to the upstream held by {} sessions: {} and {} (the sessions declare no capabilities and open no GET stream, so they hold no upstream GET stream: these are the catalog's GET stream and the HTTP client's idle pool; target: at most upstream[].max_connections, 256 by default: {})",
        count + 1,
        private.connections[1],
        shared.connections[1],
        verdict(private.connections[1].max(shared.connections[1]) <= 256)
    );
    println!();
    Ok(())
}

/// Opens the sessions through a gateway whose upstream has `share_sessions = share`.
async fn measure(plan: &Plan, bin: &Path, count: usize, share: &str) -> Result<Held> {
    let (demo, demo_url) = start_demo(bin).await?;
    let demo_port: u16 = demo_url.trim_start_matches("http://127.0.0.1:").trim_end_matches("/mcp").parse()?;
    let (gateway, url) = start_gateway(
        bin,
        &format!(
            "max_sessions = {}\n[[upstream]]\nname = \"demo\"\ntransport = \"http\"\nurl = \"{demo_url}\"\nshare_sessions = \"{share}\"\n",
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
    let more = open_sessions(count, plan.concurrency, || McpClient::sharing_connections(&pool)).await?;
    let gateway_shared = gateway.rss();
    let upstream_sessions = upstream_sessions(&url).await?;
    drop((clients, more));
    crate::harness::stop_profiled(gateway).await;
    Ok(Held {
        gateway: [gateway_before, gateway_after, gateway_shared],
        demo: [demo_before, demo_after],
        connections: [connections_before, connections_after],
        upstream_sessions,
    })
}

/// `taskgate_upstream_sessions`, summed, from the gateway's /metrics.
async fn upstream_sessions(url: &str) -> Result<u64> {
    let metrics = reqwest::get(url.replace("/mcp", "/metrics")).await?.text().await?;
    Ok(metrics
        .lines()
        .filter(|l| l.starts_with("taskgate_upstream_sessions{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64)
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
