//! The processes under test and the measures taken of them: the gateway, the demo upstream and
//! nginx started as child processes (stopped when dropped), their CPU time, and the clients
//! and percentiles the sections share.

use anyhow::{bail, Context, Result};
use futures_util::future::join_all;
use serde_json::json;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use taskgate_testkit::McpClient;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The `taskgate` binary beside this one (the same build profile).
pub(crate) fn taskgate_bin() -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let bin = exe.with_file_name("taskgate");
    if !bin.exists() {
        bail!("{} is missing: build the workspace first (cargo build --release --workspace)", bin.display());
    }
    Ok(bin)
}

pub(crate) fn machine() -> String {
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

/// A child process of the benchmark. It is stopped when dropped, whatever happens, and the
/// temporary directory it was given is removed.
pub(crate) struct Process {
    pub(crate) child: Child,
    /// Removed on drop.
    pub(crate) dir: Option<PathBuf>,
    /// Stopped with SIGTERM and waited for, rather than killed: nginx's master stops its
    /// workers only then (SIGKILL to the master leaves a worker running).
    pub(crate) graceful: bool,
}

impl Process {
    pub(crate) fn new(child: Child) -> Process {
        Process { child, dir: None, graceful: false }
    }

    /// Asks the process to exit (SIGTERM) and waits for it: a profiler wrapping the gateway
    /// writes its profile only on a clean exit.
    pub(crate) async fn terminate(mut self) {
        self.signal(libc::SIGTERM);
        let _ = tokio::time::timeout(Duration::from_secs(120), self.child.wait()).await;
    }

    pub(crate) fn signal(&self, signal: libc::c_int) {
        if let Some(pid) = self.child.id() {
            // SAFETY: kill only sends a signal to a child this process started and has not reaped.
            unsafe { libc::kill(pid as libc::pid_t, signal) };
        }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
    }

    /// Resident memory in bytes, from /proc.
    pub(crate) fn rss(&self) -> u64 {
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
    pub(crate) fn cpu_split(&self) -> (Duration, Duration) {
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
pub(crate) fn ticks_per_second() -> f64 {
    // SAFETY: sysconf only reads a constant of the system.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as f64
    } else {
        100.0
    }
}

/// User and system CPU of `pid` and, recursively, of its live children.
pub(crate) fn process_tree_cpu(pid: u32) -> (Duration, Duration) {
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

pub(crate) fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Starts a child and waits for the stdout line that contains `marker`; returns the line.
pub(crate) async fn spawn_until(mut command: Command, marker: &str) -> Result<(Process, String)> {
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

pub(crate) async fn start_demo(bin: &Path) -> Result<(Process, String)> {
    let port = free_port()?;
    // TASKGATE_BENCH_DEMO names another build to serve the demo upstream, so that two gateway
    // builds compared run after run meet the same upstream.
    let demo = std::env::var_os("TASKGATE_BENCH_DEMO").map(std::path::PathBuf::from);
    let mut command = Command::new(demo.as_deref().unwrap_or(bin));
    command.args(["demo-upstream", "--listen", &format!("127.0.0.1:{port}")]);
    let (process, _) = spawn_until(command, "listening on").await?;
    Ok((process, format!("http://127.0.0.1:{port}/mcp")))
}

/// Starts `taskgate serve` with `config` (TOML, without [server]); returns it and its URL.
pub(crate) async fn start_gateway(bin: &Path, config: &str) -> Result<(Process, String)> {
    // TASKGATE_BENCH_WRAP runs the gateway under a profiler, e.g.
    // "valgrind --tool=callgrind --callgrind-out-file=/tmp/taskgate.callgrind".
    let wrap = std::env::var("TASKGATE_BENCH_WRAP").ok().filter(|w| !w.trim().is_empty());
    let wrap: Vec<String> = wrap.iter().flat_map(|w| w.split_whitespace().map(str::to_owned)).collect();
    start_gateway_wrapped(bin, config, &wrap).await
}

/// Starts the gateway under `wrap` (a profiler's command line; none when empty) with `config`
/// in a temporary directory of its own, removed when it stops.
pub(crate) async fn start_gateway_wrapped(bin: &Path, config: &str, wrap: &[String]) -> Result<(Process, String)> {
    let dir = std::env::temp_dir().join(format!("taskgate-bench-{}-{}", std::process::id(), free_port()?));
    std::fs::create_dir_all(&dir)?;
    let file = dir.join("taskgate.toml");
    let written = std::fs::write(
        &file,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n{workers}{sessions}session_mailbox = 4096\n{config}{store}",
            // One worker unless the section says how many.
            workers = if config.contains("workers =") { "" } else { "workers = 1\n" },
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
pub(crate) async fn start_nginx(upstream: &str) -> Result<Option<(Process, String)>> {
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

pub(crate) fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    if samples.is_empty() {
        return Duration::ZERO;
    }
    let index = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[index]
}

pub(crate) fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1000.0)
}

pub(crate) fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "MISSED"
    }
}

pub(crate) async fn connect(url: &str) -> Result<McpClient> {
    let mut client = McpClient::new(url);
    client.initialize().await;
    Ok(client)
}

/// One tool call; checks it succeeded.
pub(crate) async fn call(client: &McpClient, tool: &str) -> Result<()> {
    let mut c = client.clone();
    let reply = c.request("tools/call", Some(json!({"name": tool, "arguments": {"text": "x"}}))).await;
    if reply.outcome().is_err() {
        bail!("{tool} failed: {:?}", reply.outcome());
    }
    Ok(())
}

pub(crate) async fn sequential_latencies(client: &McpClient, tool: &str, n: usize) -> Result<Vec<Duration>> {
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        call(client, tool).await?;
        samples.push(started.elapsed());
    }
    Ok(samples)
}

/// Requests per second with `concurrency` clients sending `total` calls in all.
pub(crate) async fn throughput(client: &McpClient, tool: &str, total: usize, concurrency: usize) -> Result<f64> {
    throughput_of(total, concurrency, || call(client, tool)).await
}

/// Requests per second of `one` (one call, checked), `concurrency` at a time, `total` in all.
pub(crate) async fn throughput_of<F, Fut>(total: usize, concurrency: usize, one: F) -> Result<f64>
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

/// A gateway run under a profiler (TASKGATE_BENCH_WRAP) ends with SIGTERM and is waited for,
/// so that the profiler writes its output; otherwise dropping it is enough.
pub(crate) async fn stop_profiled(gateway: Process) {
    if std::env::var("TASKGATE_BENCH_WRAP").is_ok_and(|w| !w.trim().is_empty()) {
        gateway.terminate().await;
    }
}

/// Answers every POST /mcp with `body`: what this HTTP stack does with no work at all.
pub(crate) async fn fixed_server(port: u16, body: String) -> Result<()> {
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

pub(crate) async fn metric(url: &str, name: &str) -> f64 {
    let metrics_url = url.trim_end_matches("/mcp").to_owned() + "/metrics";
    let Ok(response) = reqwest::get(&metrics_url).await else { return f64::NAN };
    let text = response.text().await.unwrap_or_default();
    text.lines()
        .filter(|l| l.split(['{', ' ']).next() == Some(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Sequential latencies of three paths (a client and the tool it calls), call by call in turn,
/// `n` each.
pub(crate) async fn interleaved(paths: [(&McpClient, &str); 3], n: usize) -> Result<[Vec<Duration>; 3]> {
    let mut samples: [Vec<Duration>; 3] = Default::default();
    for round in 0..n {
        for turn in 0..3 {
            let path = (round + turn) % 3;
            let (client, tool) = paths[path];
            let started = Instant::now();
            call(client, tool).await?;
            samples[path].push(started.elapsed());
        }
    }
    Ok(samples)
}
