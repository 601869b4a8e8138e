//! Section 6, task stores side by side in one run: the memory store, the embedded file store
//! (redb, fsync on every commit) and Redis (AOF with `appendfsync always`, started here on a
//! free loopback port); and the takeover time of a killed replica's task.

use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::harness::{connect, ms, percentile, start_demo, start_gateway, verdict};
use crate::plan::Plan;
use crate::polling::tasks_get_rps;
use anyhow::{bail, Context, Result};
use futures_util::future::join_all;
use serde_json::json;
use taskgate_store::testing::RedisServer;
use taskgate_testkit::McpClient;

/// What one store measured.
struct Row {
    name: &'static str,
    get_rps: f64,
    create: (Duration, Duration),
    ping: (Duration, Duration),
    rss_per_task: f64,
    storage_per_task: Option<f64>,
    storage_what: &'static str,
}

/// Creates a task of `tool`; its CreateTaskResult latency.
async fn create(client: &McpClient, tool: &str) -> Result<Duration> {
    let mut c = client.clone();
    let started = Instant::now();
    let reply = c
        .request("tools/call", Some(json!({"name": tool, "arguments": {"gate": "never", "text": "x"}, "task": {}})))
        .await;
    let took = started.elapsed();
    reply.outcome().map_err(|e| anyhow::anyhow!("creating a {tool} task failed: {e:?}"))?;
    Ok(took)
}

/// Bytes used by the files under `dir`.
fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries.flatten().filter_map(|e| e.metadata().ok()).filter(|m| m.is_file()).map(|m| m.len()).sum()
        })
        .unwrap_or(0)
}

/// Redis's `used_memory`, read over a plain connection.
pub(crate) fn redis_used_memory(port: u16) -> Result<u64> {
    redis_info(port, "memory")?
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .context("no used_memory in INFO")
}

/// One section of Redis's `INFO`, as text (a bulk string: read until its announced length).
pub(crate) fn redis_info(port: u16, section: &str) -> Result<String> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.write_all(format!("*2\r\n$4\r\nINFO\r\n${}\r\n{section}\r\n", section.len()).as_bytes())?;
    let mut bytes = Vec::new();
    let mut buffer = [0u8; 8192];
    loop {
        let n = stream.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        bytes.extend_from_slice(&buffer[..n]);
        let text = String::from_utf8_lossy(&bytes);
        if let Some((header, body)) = text.strip_prefix('$').and_then(|t| t.split_once("\r\n")) {
            if header.parse::<usize>().is_ok_and(|len| body.len() >= len) {
                break;
            }
        }
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// A store to measure: its name, its `[store]` section, and how to read what it stores.
struct Candidate<'a> {
    name: &'static str,
    config: String,
    storage: Box<dyn Fn() -> Option<u64> + 'a>,
    what: &'static str,
}

async fn measure(plan: &Plan, bin: &Path, demo_url: &str, candidate: Candidate<'_>, held: usize) -> Result<Row> {
    let Candidate { name, config: store, storage, what } = candidate;
    let config = format!(
        "{store}\n[tasks]\nmax_tasks = {}\n[[upstream]]\nname = \"demo\"\ntransport = \"http\"\nurl = \"{demo_url}\"\n",
        held * 2 + 10_000
    );
    let (gateway, url) = start_gateway(bin, &config).await?;
    let client = connect(&url).await?;
    // tasks/get of a live task, 64 clients.
    let mut c = client.clone();
    let created =
        c.request("tools/call", Some(json!({"name": "demo__wait", "arguments": {"gate": "never"}, "task": {}}))).await;
    let task_id = created.outcome().map_err(|e| anyhow::anyhow!("{e:?}"))?["task"]["taskId"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let _ = tasks_get_rps(plan, client.clone(), task_id.clone()).await; // warm up
    let get_rps = tasks_get_rps(plan, client.clone(), task_id).await;
    // CreateTaskResult and ping, one at a time, alternating so that noise hits both alike.
    let (mut creates, mut pings) = (Vec::new(), Vec::new());
    for _ in 0..plan.sequential.min(1000) {
        // A task that keeps running: only its creation is measured (a task that finished at
        // once would put its own status change in front of the next creation).
        creates.push(create(&client, "demo__wait").await?);
        let started = Instant::now();
        let mut c = client.clone();
        c.request("ping", None).await.outcome().map_err(|e| anyhow::anyhow!("{e:?}"))?;
        pings.push(started.elapsed());
    }
    // Tasks held: finished ones, kept until their ttl.
    let (rss_before, storage_before) = (gateway.rss(), storage());
    let mut made = 0;
    while made < held {
        let batch = plan.concurrency.min(held - made);
        for outcome in join_all((0..batch).map(|_| create(&client, "demo__echo"))).await {
            outcome?;
        }
        made += batch;
    }
    let (rss_after, storage_after) = (gateway.rss(), storage());
    gateway.terminate().await;
    Ok(Row {
        name,
        get_rps,
        create: (percentile(&mut creates, 0.5), percentile(&mut creates, 0.99)),
        ping: (percentile(&mut pings, 0.5), percentile(&mut pings, 0.99)),
        rss_per_task: rss_after.saturating_sub(rss_before) as f64 / held as f64,
        storage_per_task: storage_before.zip(storage_after).map(|(b, a)| a.saturating_sub(b) as f64 / held as f64),
        storage_what: what,
    })
}

/// The floor of a durable write on the disk the stores use: `n` appends of 1 KiB to a file in
/// `dir`, each followed by `fdatasync` (what one redb commit or one Redis write with
/// `appendfsync always` waits for at least).
fn fsync_latencies(dir: &Path, n: usize) -> Result<Vec<Duration>> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join("fsync-floor");
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&path)?;
    let block = [b'x'; 1024];
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        file.write_all(&block)?;
        file.sync_data()?;
        samples.push(started.elapsed());
    }
    drop(file);
    std::fs::remove_file(&path)?;
    Ok(samples)
}

pub(crate) fn redis_installed() -> bool {
    std::process::Command::new("redis-server").arg("--version").output().is_ok_and(|o| o.status.success())
}

/// A directory removed when this is dropped.
struct RemovedOnDrop(std::path::PathBuf);

impl Drop for RemovedOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(crate) async fn stores(plan: &Plan, bin: &Path) -> Result<()> {
    let held = if plan.quick { 500 } else { 100_000 };
    println!("## 6. Task stores: memory, file (redb), Redis");
    println!();
    let (_demo, demo_url) = start_demo(bin).await?;
    let data = std::env::temp_dir().join(format!("taskgate-bench-store-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    // Removed however this section ends (a failed measurement returns early).
    let _removed = RemovedOnDrop(data.clone());
    let mut rows = Vec::new();
    let memory = Candidate {
        name: "memory",
        config: "[store]\nbackend = \"memory\"".into(),
        storage: Box::new(|| None),
        what: "",
    };
    rows.push(measure(plan, bin, &demo_url, memory, held).await?);
    let file = Candidate {
        name: "file",
        config: format!("[store]\npath = {:?}", data.display().to_string()),
        storage: Box::new(|| Some(dir_bytes(&data))),
        what: "disk",
    };
    rows.push(measure(plan, bin, &demo_url, file, held).await?);
    let mut fsyncs = fsync_latencies(&data, plan.sequential.min(1000))?;
    let fsync = (percentile(&mut fsyncs, 0.5), percentile(&mut fsyncs, 0.99));
    let redis = redis_installed().then(RedisServer::start);
    if let Some(redis) = &redis {
        let port = redis.port;
        let shared = Candidate {
            name: "redis",
            config: format!("[store]\nbackend = \"redis\"\nurl = \"{}\"", redis.url),
            storage: Box::new(move || redis_used_memory(port).ok()),
            what: "Redis memory",
        };
        rows.push(measure(plan, bin, &demo_url, shared, held).await?);
    }

    println!("| store | tasks/get at {} clients | CreateTaskResult p50 / p99 | ping p50 / p99 (same gateway) | gateway RSS per held task | storage per held task |", plan.concurrency);
    println!("| --- | --- | --- | --- | --- | --- |");
    for r in &rows {
        let storage = r.storage_per_task.map_or("—".to_owned(), |b| format!("{b:.0} B ({})", r.storage_what));
        println!(
            "| {} | {:.0} req/s | {} / {} | {} / {} | {:.0} B | {storage} |",
            r.name,
            r.get_rps,
            ms(r.create.0),
            ms(r.create.1),
            ms(r.ping.0),
            ms(r.ping.1),
            r.rss_per_task
        );
    }
    println!();
    let memory = &rows[0];
    for (row, target) in rows.iter().skip(1).zip([0.8, 0.5]) {
        let ratio = row.get_rps / memory.get_rps;
        println!(
            "- tasks/get throughput, {} / memory: {ratio:.2} (target ≥ {target}: {})",
            row.name,
            verdict(ratio >= target)
        );
    }
    for row in rows.iter().skip(1) {
        let ratio = row.create.1.as_secs_f64() / memory.create.1.as_secs_f64().max(1e-9);
        println!("- CreateTaskResult p99, {} / memory: {ratio:.2} (target ≤ 3: {})", row.name, verdict(ratio <= 3.0));
    }
    // A durable store cannot answer sooner than its disk: the memory store's creation plus one
    // fsync is the least a creation can take.
    let floor = memory.create.1 + fsync.1;
    println!(
        "- the floor of a durable creation on this disk: one 1 KiB append + fdatasync takes {} / {} (p50 / p99); the memory store's creation p99 + that p99 = {}, {:.2}× the memory store's p99",
        ms(fsync.0),
        ms(fsync.1),
        ms(floor),
        floor.as_secs_f64() / memory.create.1.as_secs_f64().max(1e-9)
    );
    println!("- {held} tasks held per store (finished, kept until their ttl)");
    if redis.is_none() {
        println!("- Redis rows skipped: redis-server is not installed (apt-get install -y redis-server)");
    }
    println!();
    if let Some(redis) = &redis {
        takeover(plan, bin, &demo_url, redis).await?;
    }
    Ok(())
}

/// Two replicas on Redis; the one running a task is killed (SIGKILL); how long until the
/// other has taken the task over (a wrapped task: it is failed, saying why).
async fn takeover(plan: &Plan, bin: &Path, demo_url: &str, redis: &RedisServer) -> Result<()> {
    let lease_ms: u64 = if plan.quick { 500 } else { 2_000 };
    let config = format!(
        "[store]\nbackend = \"redis\"\nurl = \"{}\"\nkey_prefix = \"takeover:\"\nlease_ms = {lease_ms}\n\
         [[upstream]]\nname = \"demo\"\ntransport = \"http\"\nurl = \"{demo_url}\"\n",
        redis.url
    );
    let rounds = if plan.quick { 2 } else { 5 };
    let mut times = Vec::new();
    for _ in 0..rounds {
        let (a, a_url) = start_gateway(bin, &config).await?;
        let (b, b_url) = start_gateway(bin, &config).await?;
        let mut on_a = connect(&a_url).await?;
        let mut on_b = connect(&b_url).await?;
        let created = on_a
            .request("tools/call", Some(json!({"name": "demo__wait", "arguments": {"gate": "never"}, "task": {}})))
            .await;
        let task_id = created.outcome().map_err(|e| anyhow::anyhow!("{e:?}"))?["task"]["taskId"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let mut a = a;
        a.child.kill().await?;
        let killed = Instant::now();
        loop {
            let task = on_b
                .request("tasks/get", Some(json!({"taskId": task_id})))
                .await
                .outcome()
                .map_err(|e| anyhow::anyhow!("{e:?}"))?;
            if task["status"] == "failed" {
                break;
            }
            if killed.elapsed() > Duration::from_millis(lease_ms * 10) {
                bail!("the task was not taken over within 10 lease periods");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        times.push(killed.elapsed());
        b.terminate().await;
        let _ = &mut on_a;
    }
    let worst = times.iter().max().copied().unwrap_or_default();
    let ratio = worst.as_secs_f64() * 1000.0 / lease_ms as f64;
    println!("### Takeover after SIGKILL of a replica (lease {lease_ms} ms, {rounds} rounds)");
    println!();
    println!("| round | time until the other replica had taken the task over |");
    println!("| --- | --- |");
    for (i, t) in times.iter().enumerate() {
        println!("| {} | {} |", i + 1, ms(*t));
    }
    println!();
    println!("- worst takeover / lease: {ratio:.2} (target ≤ 2: {})", verdict(ratio <= 2.0));
    println!();
    Ok(())
}
