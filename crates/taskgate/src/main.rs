//! The `taskgate` command: `serve`, `check-config`, `demo`, `demo-upstream` (the demo MCP
//! server itself, over stdio or HTTP), and `call` and `tasks` (a command-line MCP client).

#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

mod client;
mod logging;
mod malloc;
mod traces;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use taskgate_config::{Config, ConfigError, UpstreamConfig};
use taskgate_core::Gateway;

#[derive(Parser)]
#[command(
    name = "taskgate",
    version,
    about = "An MCP gateway with durable tasks, exact progress and cancellation routing, and tenants"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs the gateway with a configuration file.
    Serve {
        /// The TOML configuration file.
        #[arg(long, short)]
        config: PathBuf,
        /// Overrides server.listen (also TASKGATE_LISTEN): HOST:PORT, the host a name or an address.
        #[arg(long, value_parser = listen_address)]
        listen: Option<SocketAddr>,
        /// Overrides server.admin_listen (also TASKGATE_ADMIN_LISTEN): HOST:PORT.
        #[arg(long, env = "TASKGATE_ADMIN_LISTEN", value_parser = listen_address)]
        admin_listen: Option<SocketAddr>,
    },
    /// Validates a configuration file and prints every problem with its location.
    CheckConfig {
        /// The TOML configuration file.
        file: PathBuf,
    },
    /// Runs the gateway in front of built-in demo upstreams (one over HTTP, one over stdio).
    Demo {
        /// Where the gateway listens: HOST:PORT, the host a name or an address.
        #[arg(long, default_value = "127.0.0.1:8080", value_parser = listen_address)]
        listen: SocketAddr,
        /// The task store's data directory (tasks survive a restart of the demo).
        #[arg(long, default_value = "taskgate-demo-data")]
        data: PathBuf,
    },
    /// Checks or repairs the task store's database file (`[store] backend = "file"`) while the
    /// gateway is stopped.
    Store {
        #[command(subcommand)]
        action: StoreAction,
    },
    /// Prints the SHA-256 of an API key, for `[[tenant.api_key]] sha256` (reads the key from
    /// stdin when it is not given, so it stays out of the shell history).
    HashKey {
        /// The API key.
        key: Option<String>,
    },
    /// Calls a tool of an MCP server (the gateway or any other) and prints its result, with a
    /// progress bar; --task runs it as a task. Ctrl-C cancels.
    Call(client::call::CallArgs),
    /// Lists, shows, waits for or cancels the tasks an MCP server holds for the caller.
    Tasks {
        #[command(subcommand)]
        command: client::tasks::TasksCommand,
    },
    /// Runs the demo MCP server on its own, over stdio (--stdio) or Streamable HTTP (--listen).
    #[command(group(clap::ArgGroup::new("transport").required(true).args(["stdio", "listen"])))]
    DemoUpstream {
        /// Serve MCP on stdin/stdout.
        #[arg(long, conflicts_with = "listen")]
        stdio: bool,
        /// Serve MCP over Streamable HTTP at http://ADDR/mcp (HOST:PORT).
        #[arg(long, value_parser = listen_address)]
        listen: Option<SocketAddr>,
        /// Also serve the fixtures of the MCP conformance suite's server scenarios (tools,
        /// resources and prompts named test_*, test://...).
        #[arg(long)]
        conformance: bool,
        /// The protocol revisions it serves: 2025-11-25 (sessions through initialize),
        /// 2026-07-28 (stateless requests) or both (a dual-era server).
        #[arg(long, default_value = "2025-11-25", value_parser = |s: &str| s.parse::<taskgate_demo::Revisions>())]
        revision: taskgate_demo::Revisions,
    },
}

#[derive(Subcommand)]
enum StoreAction {
    /// Checks the database without changing it (on a copy beside it): redb's integrity check,
    /// every task read, every index compared. Exits 1 when something is wrong.
    Check(StoreArgs),
    /// Repairs the database: keeps a copy of the damaged file (`tasks.redb.damaged-<time>`),
    /// lets redb go back to its last intact commit, or else salvages every task that can be
    /// read into a new file.
    Repair(StoreArgs),
}

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("where").required(true).args(["config", "data"])))]
struct StoreArgs {
    /// The configuration file naming the data directory (`store.path`).
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// The data directory.
    #[arg(long)]
    data: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::CheckConfig { file } => return check_config(&file),
        Command::Serve { config: path, listen, admin_listen } => {
            let tuning = malloc::tune();
            Config::load(&path).map_err(anyhow::Error::from).and_then(|mut c| {
                if let Some(admin) = admin_listen {
                    c.server.admin_listen = Some(admin.to_string());
                }
                run_gateway(c, listen, path, tuning)
            })
        }
        Command::HashKey { key } => hash_key(key),
        Command::Call(args) => return client_command(client::call::run(args)),
        Command::Tasks { command } => return client_command(client::tasks::run(command)),
        Command::Store { action } => return store(action),
        Command::Demo { listen, data } => {
            let tuning = malloc::tune();
            demo(listen, data, tuning)
        }
        Command::DemoUpstream { stdio, listen, conformance, revision } => {
            demo_upstream(stdio, listen, conformance, revision)
        }
    };
    // The spans not sent yet go now (when traces are exported).
    traces::flush();
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("taskgate: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// A `--listen` value: `HOST:PORT`, the host an address or a name (`localhost:8080`).
fn listen_address(text: &str) -> Result<SocketAddr, String> {
    taskgate_config::resolve_listen(text)
}

/// `taskgate store check|repair`: prints what was found; exit status 0 when the store is (now)
/// healthy, 1 when it is not, 2 when it cannot be looked at.
fn store(action: StoreAction) -> ExitCode {
    let (StoreAction::Check(args) | StoreAction::Repair(args)) = &action;
    let dir = match (&args.data, &args.config) {
        (Some(dir), _) => dir.clone(),
        (None, Some(path)) => match Config::load(path) {
            Ok(config) if config.store.backend == taskgate_config::StoreBackend::File => {
                PathBuf::from(&config.store.path)
            }
            Ok(_) => {
                eprintln!("taskgate: {} does not use the file store (store.backend)", path.display());
                return ExitCode::from(2);
            }
            Err(e) => {
                eprintln!("taskgate: {e}");
                return ExitCode::from(2);
            }
        },
        (None, None) => unreachable!("clap requires one"),
    };
    let outcome = match action {
        StoreAction::Check(_) => taskgate_store::check_file(&dir).map(|report| (report, None)),
        StoreAction::Repair(_) => taskgate_store::repair_file(&dir),
    };
    match outcome {
        Ok((report, kept)) => {
            println!("{}: {} tasks readable", report.path.display(), report.tasks);
            println!("integrity: {}", if report.intact { "intact" } else { "damaged" });
            for finding in &report.findings {
                println!("- {finding}");
            }
            if !report.unreadable.is_empty() {
                println!("tasks that cannot be read: {}", report.unreadable.join(", "));
            }
            if let Some(kept) = &kept {
                println!("the damaged file is kept as {}", kept.display());
            }
            if report.healthy() || (kept.is_some() && report.intact) {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("taskgate: {e}");
            ExitCode::from(2)
        }
    }
}

/// Runs a client command on a runtime of its own; its errors are printed, exit status 1.
fn client_command(command: impl std::future::Future<Output = anyhow::Result<ExitCode>>) -> ExitCode {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    match runtime.block_on(command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("taskgate: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn hash_key(key: Option<String>) -> anyhow::Result<()> {
    let key = match key {
        Some(key) => key,
        None => {
            let mut line = String::new();
            std::io::stdin().read_line(&mut line).context("cannot read the key from stdin")?;
            line.trim_end_matches(['\r', '\n']).to_owned()
        }
    };
    anyhow::ensure!(!key.is_empty(), "the key is empty");
    if key.len() < 16 {
        // Hashed all the same (the demo's key is short): the operator is told, not refused.
        eprintln!(
            "taskgate: warning: this key has {} characters; a production key should have at least 16 random ones",
            key.len()
        );
    }
    println!("{}", taskgate_core::tenants::hash_key(&key));
    Ok(())
}

fn check_config(file: &std::path::Path) -> ExitCode {
    let name = file.display().to_string();
    let env = |key: &str| std::env::var(key).ok();
    let text = std::fs::read_to_string(file).map_err(|source| ConfigError::Read { path: name.clone(), source });
    // The demo's own file is checked as `taskgate demo` runs it: with its two upstreams.
    let demo = text.as_ref().is_ok_and(|text| text == DEMO_CONFIG);
    let read = text.and_then(|text| {
        if demo {
            let mut config = Config::parse_unvalidated(&text, &name, &env)?;
            let exe = std::env::current_exe().map_or_else(|_| "taskgate".into(), |e| e.display().to_string());
            config.upstreams.extend(demo_upstreams("http://127.0.0.1:1/mcp", &exe));
            let problems = config.validate().err().unwrap_or_default();
            Ok((config, problems))
        } else {
            Config::read(&text, &name, &env)
        }
    });
    let (config, mut problems) = match read {
        Ok(read) => read,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    // Secrets and key files are read as the gateway would read them, and each stdio command is
    // looked for as the gateway would start it.
    if let Err(more) = taskgate_core::tenants::check_credentials(&config, &env) {
        problems.extend(more);
    }
    problems.extend(config.command_problems(std::env::var("PATH").ok().as_deref()));
    if !problems.is_empty() {
        eprintln!("{}", ConfigError::Invalid { path: name, problems });
        return ExitCode::FAILURE;
    }
    let tenants = if config.tenants.is_empty() {
        "no tenants: every request is anonymous".to_string()
    } else {
        format!("{} tenants", config.tenants.len())
    };
    let upstreams = if demo {
        "the demo's 2 built-in upstreams".to_string()
    } else {
        format!("{} upstreams", config.upstreams.len())
    };
    println!("{}: ok ({upstreams}, {tenants})", file.display());
    // What only the authorization server can confirm: said, not refused.
    for (i, t) in config.tenants.iter().enumerate() {
        for (j, o) in t.oauth.iter().enumerate().filter(|(_, o)| o.issuer.ends_with('/')) {
            println!(
                "note: tenant[{i}] ({:?}).oauth[{j}].issuer {:?} ends with '/': it must equal the issuer its metadata names to the last character, and most authorization servers name theirs without it",
                t.id, o.issuer
            );
        }
    }
    ExitCode::SUCCESS
}

/// Runs the gateway until Ctrl-C or SIGTERM, reloading tenants from `path` on SIGHUP and when
/// the file changes.
fn run_gateway(
    config: Config,
    listen: Option<SocketAddr>,
    path: PathBuf,
    tuning: malloc::Tuning,
) -> anyhow::Result<()> {
    logging::init(&config);
    tuning.log();
    actix_rt::System::new().block_on(async move {
        let poll = config.server.config_poll_ms;
        // The listeners first: a port in use is said before any upstream process starts.
        let listeners = taskgate_http::Listeners::bind(&config, listen).context("cannot start the front door")?;
        let gateway = Gateway::start(config).map_err(problems)?;
        // Tasks the previous process left unfinished are followed again or failed before the
        // first request is served.
        recover(&gateway).await?;
        let hangup =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).context("SIGHUP handler")?;
        actix_rt::spawn(watch_config(path, gateway.clone(), poll, hangup));
        // Listened for before anything is announced: a signal sent once we are up is never missed.
        let mut signals = ShutdownSignals::new()?;
        let running = front_door(&gateway, listeners).await?;
        let handle = running.handle.clone();
        println!("taskgate listening on http://{}/mcp", running.addr);
        if let Some((addr, admin)) = running.admin {
            // The admin view only when an operator can sign in to it (it is 404 otherwise).
            let view = if gateway.admin_config().keys.is_empty() { "" } else { ", /admin/" };
            println!("admin listener on http://{addr} (/metrics, /healthz, /readyz{view})");
            actix_rt::spawn(admin);
        }
        let grace = std::time::Duration::from_secs(gateway.config().server.shutdown_grace_secs);
        // The server runs on its own task: it must go on serving (and obey pause and stop)
        // while the shutdown drains it.
        let mut server = actix_rt::spawn(running.server);
        tokio::select! {
            result = &mut server => result.context("the server task failed")?.context("the server failed")?,
            _ = signals.next() => {
                graceful_shutdown(&gateway, &handle, grace, &mut signals).await;
                let _ = server.await;
            }
        }
        Ok(())
    })
}

/// Binds the front door. When it cannot (the port is in use), the gateway is stopped inside the
/// runtime (its stdio processes too) before the error is returned: its actors must not be left
/// to start as the runtime is dropped.
async fn front_door(gateway: &Gateway, listeners: taskgate_http::Listeners) -> anyhow::Result<taskgate_http::Running> {
    match taskgate_http::serve_on(gateway.clone(), listeners) {
        Ok(running) => Ok(running),
        Err(e) => {
            gateway.shutdown().await;
            actix_rt::task::yield_now().await;
            Err(anyhow::Error::from(e).context("cannot start the front door"))
        }
    }
}

/// SIGTERM or SIGINT: stop accepting connections, answer `/readyz` 503 and refuse new
/// requests, let requests in flight finish for up to `grace`, then end every stream and stop
/// every stdio upstream process (stdin, SIGTERM, SIGKILL) before exiting.
async fn graceful_shutdown(
    gateway: &Gateway,
    handle: &taskgate_http::ServerHandle,
    grace: std::time::Duration,
    signals: &mut ShutdownSignals,
) {
    handle.pause().await;
    gateway.begin_drain();
    // A second signal cuts the grace short (an operator who means it).
    let drained = tokio::select! {
        drained = gateway.drained(grace) => drained,
        _ = signals.next() => {
            tracing::warn!("a second signal: ending what is still in flight now");
            false
        }
    };
    gateway.shutdown().await;
    handle.stop(true).await;
    tracing::info!(drained, "taskgate stopped");
}

/// Takes over the tasks an earlier run of the gateway left unfinished.
async fn recover(gateway: &Gateway) -> anyhow::Result<()> {
    let recovered = gateway.recover().await.context("cannot take over the tasks of the previous run")?;
    if recovered.followed + recovered.failed > 0 {
        tracing::info!(
            followed = recovered.followed,
            failed = recovered.failed,
            "tasks of the previous run taken over"
        );
    }
    Ok(())
}

/// Reloads the configuration on SIGHUP, and when the file's bytes change (checked every
/// `server.config_poll_ms`). An invalid file is refused whole and the running one kept.
async fn watch_config(path: PathBuf, gateway: Gateway, poll_ms: u64, mut hangup: tokio::signal::unix::Signal) {
    let mut last = std::fs::read(&path).ok();
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(poll_ms.max(100)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let trigger = tokio::select! {
            _ = hangup.recv() => "SIGHUP",
            _ = tick.tick(), if poll_ms > 0 => {
                let now = std::fs::read(&path).ok();
                if now == last {
                    continue;
                }
                "file changed"
            }
        };
        last = std::fs::read(&path).ok();
        tracing::info!(file = %path.display(), trigger, "reloading the configuration");
        match Config::load(&path) {
            Ok(config) => {
                let _ = gateway.reload(&config);
            }
            Err(e) => {
                let problem = taskgate_config::Problem { location: path.display().to_string(), message: e.to_string() };
                gateway.reload_rejected(&[problem]);
            }
        }
    }
}

/// SIGTERM and SIGINT, listened for from start to exit: a signal that arrives while the first
/// one is being handled is seen (a listener made later would miss it).
struct ShutdownSignals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl ShutdownSignals {
    fn new() -> anyhow::Result<ShutdownSignals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(ShutdownSignals {
            term: signal(SignalKind::terminate()).context("SIGTERM handler")?,
            int: signal(SignalKind::interrupt()).context("SIGINT handler")?,
        })
    }

    async fn next(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {},
            _ = self.int.recv() => {},
        }
    }
}

fn problems(problems: Vec<taskgate_config::Problem>) -> anyhow::Error {
    let lines: Vec<String> = problems.iter().map(|p| format!("  - {p}")).collect();
    anyhow::anyhow!("{} problem(s) in the configuration:\n{}", problems.len(), lines.join("\n"))
}

/// The demo's configuration: tenants and limits (its upstreams are added at start).
const DEMO_CONFIG: &str = include_str!("../../../config/demo.toml");

/// The demo's two built-in upstreams: 'demo' at `url` (native tasks) and 'local', this
/// executable's stdio demo upstream (plain tools, wrapped as tasks by the gateway).
fn demo_upstreams(url: &str, exe: &str) -> [UpstreamConfig; 2] {
    [
        UpstreamConfig::http("demo", url),
        UpstreamConfig::stdio("local", exe, vec!["demo-upstream".into(), "--stdio".into()]),
    ]
}

fn demo(listen: SocketAddr, data: PathBuf, tuning: malloc::Tuning) -> anyhow::Result<()> {
    let mut config = Config::parse_unvalidated(DEMO_CONFIG, "config/demo.toml", &|key| std::env::var(key).ok())?;
    config.server.listen = listen.to_string();
    config.store = taskgate_config::StoreConfig::file(data.display().to_string());
    logging::init(&config);
    tuning.log();
    let exe = std::env::current_exe().context("cannot find the taskgate executable for the stdio demo upstream")?;
    actix_rt::System::new().block_on(async move {
        let listeners = taskgate_http::Listeners::bind(&config, None).context("cannot start the front door")?;
        // 'demo' runs tasks natively; 'local' has plain tools that the gateway wraps as tasks.
        let demo = taskgate_demo::DemoServer::with_tasks();
        let upstream = taskgate_demo::http::serve(demo, "127.0.0.1:0").context("cannot start the demo upstream")?;
        config.upstreams.extend(demo_upstreams(&upstream.url, &exe.display().to_string()));
        config.validate().map_err(problems)?;
        let gateway = Gateway::start(config).map_err(problems)?;
        recover(&gateway).await?;
        let mut signals = ShutdownSignals::new()?;
        let running = front_door(&gateway, listeners).await?;
        let handle = running.handle.clone();
        let url = format!("http://{}/mcp", running.addr);
        println!("taskgate demo listening on {url}");
        println!("  upstream 'demo'  (Streamable HTTP, native tasks) at {}", upstream.url);
        println!("  upstream 'local' (stdio, tasks wrapped by the gateway) {} demo-upstream --stdio", exe.display());
        println!("  tenants: 'local' (no credentials needed) and 'team' (Authorization: Bearer demo-key; sees 'demo' only)");
        println!("Try: curl -si {url} -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \\");
        println!("       -d '{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{{\"protocolVersion\":\"2025-11-25\",\"capabilities\":{{}},\"clientInfo\":{{\"name\":\"curl\",\"version\":\"1\"}}}}}}'");
        let grace = std::time::Duration::from_secs(gateway.config().server.shutdown_grace_secs);
        let mut server = actix_rt::spawn(running.server);
        tokio::select! {
            result = &mut server => result.context("the server task failed")?.context("the server failed")?,
            _ = signals.next() => {
                graceful_shutdown(&gateway, &handle, grace, &mut signals).await;
                let _ = server.await;
                upstream.stop().await;
            }
        }
        Ok(())
    })
}

fn demo_upstream(
    stdio: bool,
    listen: Option<SocketAddr>,
    conformance: bool,
    revision: taskgate_demo::Revisions,
) -> anyhow::Result<()> {
    let demo = if conformance { taskgate_demo::DemoServer::conformance() } else { taskgate_demo::DemoServer::new() };
    let demo = demo.serving(revision);
    if stdio {
        // stdout carries MCP messages only; nothing else may be printed there.
        return actix_rt::System::new()
            .block_on(taskgate_demo::stdio::serve(demo))
            .context("stdio demo upstream failed");
    }
    let listen = listen.context("--listen ADDR or --stdio")?;
    actix_rt::System::new().block_on(async move {
        let mut signals = ShutdownSignals::new()?;
        let server = taskgate_demo::http::serve(demo, &listen.to_string()).context("cannot start the demo upstream")?;
        println!("taskgate demo upstream listening on {}", server.url);
        signals.next().await;
        server.stop().await;
        Ok(())
    })
}
