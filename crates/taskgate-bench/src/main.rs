//! taskgate's benchmarks. Every figure that matters is a ratio of two things measured side by
//! side in the same run on the same machine (the machines are shared and noisy, so absolute
//! times alone mean little). All load goes to 127.0.0.1 and is bounded in count and time.
//!
//! `taskgate-bench` runs the full suite; `taskgate-bench --quick` runs every measurement with
//! small counts to check that it works (CI does this). The gateway and the upstreams are the
//! real `taskgate` binary, started as child processes, so the gateway's memory is its own.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures_util::future::join_all;
use serde_json::json;
use taskgate_testkit::McpClient;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

mod bare;
mod floor;
mod instructions;
mod revisions;
mod sessions;
mod soak;
mod stores;

/// Counts for one run.
struct Plan {
    quick: bool,
    only: Option<String>,
    sequential: usize,
    concurrent_total: usize,
    concurrency: usize,
    tasks: usize,
    progress_values: usize,
    cancellations: usize,
}

impl Plan {
    fn new(quick: bool) -> Plan {
        if quick {
            Plan {
                quick,
                only: None,
                sequential: 50,
                concurrent_total: 256,
                concurrency: 64,
                tasks: 500,
                progress_values: 500,
                cancellations: 300,
            }
        } else {
            Plan {
                quick,
                only: None,
                sequential: 2000,
                concurrent_total: 20_000,
                concurrency: 64,
                tasks: 100_000,
                progress_values: 20_000,
                cancellations: 10_000,
            }
        }
    }
}

/// The sections, in the order a full run takes them.
const SECTIONS: [&str; 10] = [
    "proxy",
    "polling",
    "tasks",
    "progress",
    "cancellation",
    "stores",
    "soak",
    "revisions",
    "instructions",
    "sessions",
];

const USAGE: &str = "usage: taskgate-bench [--quick] [--only SECTION] [--tasks N]

Runs taskgate's benchmarks against the taskgate binary beside this one (build the workspace
first: cargo build --release --workspace) and prints the report as Markdown.

  --quick          every measurement with small counts: checks that each works (CI runs this);
                   the figures mean nothing
  --only SECTION   one section: proxy, polling, tasks, progress, cancellation, stores, soak,
                   revisions, instructions, sessions
  --tasks N        the number of live tasks of the task-scale section (default 100000)
  --help           this text

nginx (the reverse-proxy comparison), redis-server (the Redis rows) and valgrind (instruction
counts) are used when installed and skipped with a note otherwise.

Environment: TASKGATE_BENCH_WRAP runs the gateway under a profiler (e.g. \"valgrind
--tool=massif\"); TASKGATE_BENCH_CALLGRIND_DIR keeps the instruction section's callgrind
profiles in that directory.";

/// Reads the command line; `Err` carries the message for a bad one.
fn parse_args(args: &[String]) -> Result<Option<Plan>, String> {
    let mut quick = false;
    let mut only = None;
    let mut tasks = None;
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--help" | "-h" => return Ok(None),
            "--quick" => quick = true,
            "--only" => {
                let section = rest.next().ok_or("--only needs a section")?;
                if !SECTIONS.contains(&section.as_str()) {
                    return Err(format!("unknown section {section:?}; the sections are {}", SECTIONS.join(", ")));
                }
                only = Some(section.clone());
            }
            "--tasks" => {
                let n = rest.next().ok_or("--tasks needs a count")?;
                tasks = Some(
                    n.parse::<usize>().ok().filter(|n| *n > 0).ok_or(format!("--tasks {n:?}: not a positive count"))?,
                );
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let mut plan = Plan::new(quick);
    plan.only = only;
    if let Some(n) = tasks {
        plan.tasks = n;
    }
    Ok(Some(plan))
}

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

/// The `taskgate` binary beside this one (the same build profile).
fn taskgate_bin() -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let bin = exe.with_file_name("taskgate");
    if !bin.exists() {
        bail!("{} is missing: build the workspace first (cargo build --release --workspace)", bin.display());
    }
    Ok(bin)
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
    println!();
    println!("total benchmark time: {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

fn machine() -> String {
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines().find(|l| l.starts_with("model name")).map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| m.lines().next().map(|l| l.split_whitespace().nth(1).unwrap_or("0").to_owned()))
        .and_then(|kb| kb.parse::<u64>().ok())
        .map(|kb| format!("{:.0} GiB", kb as f64 / 1024.0 / 1024.0))
        .unwrap_or_default();
    format!("{cpus} cores ({model}), {memory}; shared and noisy")
}

// ---------------------------------------------------------------------------------------------
// Processes

/// A child process of the benchmark. It is stopped when dropped, whatever happens, and the
/// temporary directory it was given is removed.
struct Process {
    child: Child,
    /// Removed on drop.
    dir: Option<PathBuf>,
    /// Stopped with SIGTERM and waited for, rather than killed: nginx's master stops its
    /// workers only then (SIGKILL to the master leaves a worker running).
    graceful: bool,
}

impl Process {
    fn new(child: Child) -> Process {
        Process { child, dir: None, graceful: false }
    }

    /// Asks the process to exit (SIGTERM) and waits for it: a profiler wrapping the gateway
    /// writes its profile only on a clean exit.
    async fn terminate(mut self) {
        self.signal(libc::SIGTERM);
        let _ = tokio::time::timeout(Duration::from_secs(120), self.child.wait()).await;
    }

    fn signal(&self, signal: libc::c_int) {
        if let Some(pid) = self.child.id() {
            // SAFETY: kill only sends a signal to a child this process started and has not reaped.
            unsafe { libc::kill(pid as libc::pid_t, signal) };
        }
    }

    fn pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
    }

    /// Resident memory in bytes, from /proc.
    fn rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<u64>().ok())
            .map(|kb| kb * 1024)
            .unwrap_or(0)
    }

    /// CPU time, user and system (kernel), of the process and of its children still running
    /// (nginx's workers), from /proc.
    fn cpu_split(&self) -> (Duration, Duration) {
        process_tree_cpu(self.pid())
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if self.child.id().is_some() {
            if self.graceful {
                self.signal(libc::SIGTERM);
                let deadline = Instant::now() + Duration::from_secs(10);
                while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            let _ = self.child.start_kill();
            // Reap it, so that no zombie is left and its files are closed before the removal.
            let deadline = Instant::now() + Duration::from_secs(10);
            while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Clock ticks per second of /proc's CPU times.
fn ticks_per_second() -> f64 {
    // SAFETY: sysconf only reads a constant of the system.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as f64
    } else {
        100.0
    }
}

/// User and system CPU of `pid` and, recursively, of its live children.
fn process_tree_cpu(pid: u32) -> (Duration, Duration) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name (which may hold spaces) in parentheses.
    let fields: Vec<&str> =
        stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let time = |i: usize| {
        let ticks = fields.get(i).and_then(|t| t.parse::<u64>().ok()).unwrap_or(0);
        Duration::from_secs_f64(ticks as f64 / ticks_per_second())
    };
    let (mut user, mut system) = (time(11), time(12));
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    for child in children.split_whitespace().filter_map(|c| c.parse::<u32>().ok()) {
        let (u, s) = process_tree_cpu(child);
        user += u;
        system += s;
    }
    (user, system)
}

fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Starts a child and waits for the stdout line that contains `marker`; returns the line.
async fn spawn_until(mut command: Command, marker: &str) -> Result<(Process, String)> {
    command.stdout(Stdio::piped()).stderr(Stdio::null()).kill_on_drop(true).env("TASKGATE_LOG", "info");
    let mut child = command.spawn().context("cannot start a child process")?;
    let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
    let line = tokio::time::timeout(Duration::from_secs(180), async {
        while let Some(line) = lines.next_line().await? {
            if line.contains(marker) {
                return Ok::<_, std::io::Error>(line);
            }
        }
        Err(std::io::Error::other("the child exited before it was ready"))
    })
    .await
    .context("the child did not start within 180 s")??;
    // Keep draining stdout so the child never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok((Process::new(child), line))
}

async fn start_demo(bin: &Path) -> Result<(Process, String)> {
    let port = free_port()?;
    let mut command = Command::new(bin);
    command.args(["demo-upstream", "--listen", &format!("127.0.0.1:{port}")]);
    let (process, _) = spawn_until(command, "listening on").await?;
    Ok((process, format!("http://127.0.0.1:{port}/mcp")))
}

/// Starts `taskgate serve` with `config` (TOML, without [server]); returns it and its URL.
async fn start_gateway(bin: &Path, config: &str) -> Result<(Process, String)> {
    // TASKGATE_BENCH_WRAP runs the gateway under a profiler, e.g.
    // "valgrind --tool=callgrind --callgrind-out-file=/tmp/taskgate.callgrind".
    let wrap = std::env::var("TASKGATE_BENCH_WRAP").ok().filter(|w| !w.trim().is_empty());
    let wrap: Vec<String> = wrap.iter().flat_map(|w| w.split_whitespace().map(str::to_owned)).collect();
    start_gateway_wrapped(bin, config, &wrap).await
}

/// Starts the gateway under `wrap` (a profiler's command line; none when empty) with `config`
/// in a temporary directory of its own, removed when it stops.
async fn start_gateway_wrapped(bin: &Path, config: &str, wrap: &[String]) -> Result<(Process, String)> {
    let dir = std::env::temp_dir().join(format!("taskgate-bench-{}-{}", std::process::id(), free_port()?));
    std::fs::create_dir_all(&dir)?;
    let file = dir.join("taskgate.toml");
    let written = std::fs::write(
        &file,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nworkers = 1\n{sessions}session_mailbox = 4096\n{config}{store}",
            sessions = if config.contains("max_sessions") { "" } else { "max_sessions = 1000\n" },
            // The file store (the default) in this run's own directory, unless the config names one.
            store = if config.contains("[store]") {
                String::new()
            } else {
                format!("\n[store]\npath = {:?}\n", dir.join("data").display().to_string())
            },
        ),
    );
    let mut command = match wrap.split_first() {
        Some((program, args)) => {
            let mut command = Command::new(program);
            // The gateway's own malloc settings, given here: it would otherwise run itself
            // again to set them, outside the profiler.
            command.args(args).arg(bin).env("GLIBC_TUNABLES", taskgate_config::defaults::GLIBC_TUNABLES);
            command
        }
        None => Command::new(bin),
    };
    command.arg("serve").arg("--config").arg(&file);
    let started = match written {
        Ok(()) => spawn_until(command, "taskgate listening on").await,
        Err(e) => Err(e.into()),
    };
    let (mut process, line) = match started {
        Ok(started) => started,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(e);
        }
    };
    process.dir = Some(dir);
    let url = line.rsplit(' ').next().unwrap_or_default().to_owned();
    Ok((process, url))
}

/// Starts nginx as a bare reverse proxy in front of `upstream` (host:port), if installed.
async fn start_nginx(upstream: &str) -> Result<Option<(Process, String)>> {
    let nginx = ["/usr/sbin/nginx", "/usr/bin/nginx"].into_iter().find(|p| Path::new(p).exists());
    let Some(nginx) = nginx else { return Ok(None) };
    let dir = std::env::temp_dir().join(format!("taskgate-bench-nginx-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("logs"))?;
    let port = free_port()?;
    let conf = format!(
        "worker_processes 1;\nerror_log {dir}/logs/error.log;\npid {dir}/nginx.pid;\nevents {{ worker_connections 4096; }}\n\
         http {{\n  access_log off;\n  upstream demo {{ server {upstream}; keepalive 128; }}\n  server {{\n    listen 127.0.0.1:{port};\n    \
         location / {{ proxy_pass http://demo; proxy_http_version 1.1; proxy_set_header Connection \"\"; proxy_buffering off; }}\n  }}\n}}\n",
        dir = dir.display()
    );
    let file = dir.join("nginx.conf");
    std::fs::write(&file, conf)?;
    let child = Command::new(nginx)
        .arg("-c")
        .arg(&file)
        .arg("-p")
        .arg(&dir)
        .args(["-g", "daemon off;"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let process = Process { child, dir: Some(dir), graceful: true };
    // Wait until it accepts connections (a benchmark may wait; tests may not).
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(Some((process, format!("http://127.0.0.1:{port}/mcp"))));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!("nginx did not start")
}

// ---------------------------------------------------------------------------------------------
// Measuring

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    if samples.is_empty() {
        return Duration::ZERO;
    }
    let index = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[index]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1000.0)
}

fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "MISSED"
    }
}

async fn connect(url: &str) -> Result<McpClient> {
    let mut client = McpClient::new(url);
    client.initialize().await;
    Ok(client)
}

/// One tool call; checks it succeeded.
async fn call(client: &McpClient, tool: &str) -> Result<()> {
    let mut c = client.clone();
    let reply = c.request("tools/call", Some(json!({"name": tool, "arguments": {"text": "x"}}))).await;
    if reply.outcome().is_err() {
        bail!("{tool} failed: {:?}", reply.outcome());
    }
    Ok(())
}

async fn sequential_latencies(client: &McpClient, tool: &str, n: usize) -> Result<Vec<Duration>> {
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        call(client, tool).await?;
        samples.push(started.elapsed());
    }
    Ok(samples)
}

/// Requests per second with `concurrency` clients sending `total` calls in all.
async fn throughput(client: &McpClient, tool: &str, total: usize, concurrency: usize) -> Result<f64> {
    throughput_of(total, concurrency, || call(client, tool)).await
}

/// Requests per second of `one` (one call, checked), `concurrency` at a time, `total` in all.
async fn throughput_of<F, Fut>(total: usize, concurrency: usize, one: F) -> Result<f64>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let started = Instant::now();
    let per_worker = total / concurrency;
    let one = &one;
    let workers = (0..concurrency).map(|_| async move {
        for _ in 0..per_worker {
            one().await?;
        }
        Ok::<_, anyhow::Error>(())
    });
    for outcome in join_all(workers).await {
        outcome?;
    }
    Ok((per_worker * concurrency) as f64 / started.elapsed().as_secs_f64())
}

// ---------------------------------------------------------------------------------------------
// 1. Proxy overhead

async fn proxy_overhead(plan: &Plan, bin: &Path) -> Result<()> {
    println!("## 1. Proxy overhead: tools/call of a fast tool");
    println!();
    let (_demo, demo_url) = start_demo(bin).await?;
    let (gateway, gateway_url) =
        start_gateway(bin, &format!("[[upstream]]\nname = \"demo\"\ntransport = \"http\"\nurl = \"{demo_url}\"\n"))
            .await?;
    let upstream_addr = demo_url.trim_start_matches("http://").trim_end_matches("/mcp").to_owned();
    let nginx = start_nginx(&upstream_addr).await?;
    // The gateway's HTTP stack with no MCP work: the floor this stack sets.
    let (bare_process, bare_url) = bare::start(&demo_url, &[], bare::Front::Actix).await?;
    // The same with hyper's server in front: the floor of the leanest Rust stack.
    let (hyper_process, hyper_url) = bare::start(&demo_url, &[], bare::Front::Hyper).await?;

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

/// A gateway run under a profiler (TASKGATE_BENCH_WRAP) ends with SIGTERM and is waited for,
/// so that the profiler writes its output; otherwise dropping it is enough.
async fn stop_profiled(gateway: Process) {
    if std::env::var("TASKGATE_BENCH_WRAP").is_ok_and(|w| !w.trim().is_empty()) {
        gateway.terminate().await;
    }
}

// ---------------------------------------------------------------------------------------------
// 2. Polling

async fn polling(plan: &Plan, bin: &Path) -> Result<()> {
    println!("## 2. Polling: tasks/get throughput");
    println!();
    let (_demo, demo_url) = start_demo(bin).await?;
    let (_gateway, gateway_url) =
        start_gateway(bin, &format!("[[upstream]]\nname = \"demo\"\ntransport = \"http\"\nurl = \"{demo_url}\"\n"))
            .await?;
    let mut client = connect(&gateway_url).await?;
    let created = client
        .request("tools/call", Some(json!({"name": "demo__wait", "arguments": {"gate": "never"}, "task": {}})))
        .await
        .outcome()
        .map_err(|e| anyhow::anyhow!("cannot create a task: {e:?}"))?;
    let task_id = created["task"]["taskId"].as_str().unwrap_or_default().to_owned();
    let poll = json!({"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"taskId": task_id}}).to_string();
    let sample = client.post_raw(poll.clone(), &[("accept", "application/json")]).await;
    let body = sample.response().to_json();

    // The practical limit of this stack: an actix-web handler answering the same body, in a
    // process of its own (as the gateway is).
    let fixed_port = free_port()?;
    let mut command = Command::new(std::env::current_exe()?);
    command.arg("--fixed-server").arg(fixed_port.to_string()).arg(&body);
    let (_fixed_process, _) = spawn_until(command, "fixed server listening").await?;
    let fixed_url = format!("http://127.0.0.1:{fixed_port}/mcp");
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.1", fixed_port)).is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut fixed = McpClient::new(&fixed_url);
    fixed.session = client.session.clone();
    let measure = |c: McpClient| tasks_get_rps(plan, c, task_id.clone());
    let _ = measure(client.clone()).await; // warm up
    let gateway_rps = measure(client.clone()).await;
    let fixed_rps = measure(fixed).await;
    let ratio = gateway_rps / fixed_rps;
    println!("| server | tasks/get throughput at {} clients |", plan.concurrency);
    println!("| --- | --- |");
    println!("| taskgate (the task in the store) | {gateway_rps:.0} req/s |");
    println!("| actix-web handler, same {} byte body | {fixed_rps:.0} req/s |", body.len());
    println!();
    println!("- ratio {:.2} (target ≥ 0.6: {})", ratio, verdict(ratio >= 0.6));
    println!();
    Ok(())
}

/// `tasks/get` of one task, `plan.concurrency` at a time: requests per second.
async fn tasks_get_rps(plan: &Plan, client: McpClient, task_id: String) -> f64 {
    let started = Instant::now();
    let per = plan.concurrent_total / plan.concurrency;
    let workers = (0..plan.concurrency).map(|w| {
        let c = client.clone();
        let task_id = task_id.clone();
        async move {
            for i in 0..per {
                // Each request in flight needs its own id.
                let id = (w * per + i) as i64 + 10;
                let poll = json!({"jsonrpc": "2.0", "id": id, "method": "tasks/get", "params": {"taskId": task_id}});
                let reply = c.post_raw(poll.to_string(), &[("accept", "application/json")]).await;
                assert_eq!(reply.status, 200, "{reply:?}");
            }
        }
    });
    join_all(workers).await;
    (per * plan.concurrency) as f64 / started.elapsed().as_secs_f64()
}

/// Answers every POST /mcp with `body`: what this HTTP stack does with no work at all.
async fn fixed_server(port: u16, body: String) -> Result<()> {
    let server = actix_web::HttpServer::new(move || {
        let body = body.clone();
        actix_web::App::new().route(
            "/mcp",
            // It reads the request body, as any real handler does (an unread body costs the
            // connection its keep-alive).
            actix_web::web::post().to(move |_request: actix_web::web::Bytes| {
                let body = body.clone();
                async move { actix_web::HttpResponse::Ok().content_type("application/json").body(body) }
            }),
        )
    })
    .workers(1)
    // As the gateway does: no Nagle stall on small writes (a fair comparison).
    .on_connect(|connection, _| {
        if let Some(tcp) = connection.downcast_ref::<actix_web::rt::net::TcpStream>() {
            let _ = tcp.set_nodelay(true);
        }
    })
    .disable_signals()
    .bind(("127.0.0.1", port))?
    .run();
    println!("fixed server listening on {port}");
    server.await?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 3. Task scale

async fn metric(url: &str, name: &str) -> f64 {
    let metrics_url = url.trim_end_matches("/mcp").to_owned() + "/metrics";
    let Ok(response) = reqwest::get(&metrics_url).await else { return f64::NAN };
    let text = response.text().await.unwrap_or_default();
    text.lines()
        .filter(|l| l.split(['{', ' ']).next() == Some(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

async fn task_scale(plan: &Plan, bin: &Path) -> Result<()> {
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
    // Issue 16's target (issue 5 had 4 KiB).
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
async fn task_floor(n: usize) -> Result<(f64, f64, f64)> {
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

// ---------------------------------------------------------------------------------------------
// 4. Progress

async fn progress_run(bin: &Path, demo_url: &str, min_interval_ms: u64, values: usize) -> Result<(f64, usize, bool)> {
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

async fn progress(plan: &Plan, bin: &Path) -> Result<()> {
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

// ---------------------------------------------------------------------------------------------
// 5. Cancellation

async fn cancellation(plan: &Plan, bin: &Path) -> Result<()> {
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
