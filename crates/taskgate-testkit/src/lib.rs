//! Test builders: start the real gateway and real upstreams on `127.0.0.1:0`, and talk MCP to
//! them over real sockets. Tests read like the scenario they check:
//!
//! ```ignore
//! let demo = DemoUpstream::start();
//! let gateway = TestGateway::start(config_with(vec![demo.upstream("demo")]));
//! let mut client = McpClient::new(&gateway.url);
//! client.initialize().await;
//! let result = client.call("demo__echo", json!({"text": "hi"})).await.unwrap();
//! ```

mod client;
pub mod jwt;
mod nginx;
mod process;
mod prometheus;

use std::net::SocketAddr;
use std::path::PathBuf;

use actix_web::dev::ServerHandle;
use taskgate_config::{Config, UpstreamConfig};
use taskgate_core::Gateway;
use taskgate_demo::http::DemoHttp;
use taskgate_demo::DemoServer;

pub use client::{McpClient, Reply, SseReader};
pub use nginx::Nginx;
pub use process::ServedGateway;
pub use prometheus::Prometheus;

/// The gateway, running on a free loopback port.
pub struct TestGateway {
    /// The bound address.
    pub addr: SocketAddr,
    /// The MCP endpoint URL.
    pub url: String,
    /// The core, for assertions on its state.
    pub gateway: Gateway,
    /// The admin listener's address, when `server.admin_listen` is set.
    pub admin: Option<SocketAddr>,
    /// The 2026-07-28 front door's state: a test on a manual clock releases the exchanges whose
    /// wait is over with `front.release_due()`.
    pub front: std::sync::Arc<taskgate_http::revision_2026::Front2026>,
    handle: ServerHandle,
    /// The file store's data directory, when the test left the store at its default.
    _data: Option<tempfile::TempDir>,
}

impl TestGateway {
    /// Starts the gateway with `config` (its listen address is replaced by 127.0.0.1:0).
    /// Call inside an actix system (`#[actix_rt::test]`).
    pub fn start(config: Config) -> TestGateway {
        TestGateway::start_with_clock(config, std::sync::Arc::new(taskgate_core::clock::SystemClock))
    }

    /// [`TestGateway::start`] with a clock the test controls.
    pub fn start_with_clock(mut config: Config, clock: std::sync::Arc<dyn taskgate_core::clock::Clock>) -> TestGateway {
        config.server.listen = "127.0.0.1:0".into();
        config.server.workers = 2;
        // The default store (a file in ./taskgate-data) gets a directory of its own, so tests
        // run on the durable store without sharing one.
        let data = (config.store == taskgate_config::StoreConfig::default()).then(|| {
            let dir = tempfile::tempdir().expect("a temporary directory");
            config.store = taskgate_config::StoreConfig::file(dir.path().display().to_string());
            dir
        });
        if let Err(problems) = config.validate() {
            panic!("invalid test configuration: {problems:?}");
        }
        let gateway = Gateway::start_with_clock(config, clock).expect("test tenants' credentials load");
        let running = taskgate_http::serve(gateway.clone(), None).expect("bind 127.0.0.1:0");
        actix_rt::spawn(running.server);
        let admin = running.admin.map(|(addr, server)| {
            actix_rt::spawn(server);
            addr
        });
        TestGateway {
            addr: running.addr,
            url: format!("http://{}/mcp", running.addr),
            gateway,
            admin,
            front: running.front,
            handle: running.handle,
            _data: data,
        }
    }

    /// Stops the front door.
    pub async fn stop(&self) {
        self.handle.stop(false).await;
    }
}

/// The demo MCP server over HTTP on a free loopback port.
pub struct DemoUpstream {
    /// The server's tools and stats.
    pub demo: DemoServer,
    /// The HTTP server.
    pub http: DemoHttp,
}

impl DemoUpstream {
    /// Starts it with plain tools (the gateway wraps its tasks). Call inside an actix system.
    pub fn start() -> DemoUpstream {
        DemoUpstream::serve(DemoServer::new())
    }

    /// Starts it with native tasks.
    pub fn start_with_tasks() -> DemoUpstream {
        DemoUpstream::serve(DemoServer::with_tasks())
    }

    /// Starts it with tools only: no resources, prompts, completion or logging.
    pub fn start_tools_only() -> DemoUpstream {
        DemoUpstream::serve(DemoServer::tools_only())
    }

    /// Starts it with the conformance suite's fixtures too ([`DemoServer::conformance`]).
    pub fn start_conformance() -> DemoUpstream {
        DemoUpstream::serve(DemoServer::conformance())
    }

    /// Starts it with the conformance suite's fixtures, serving `revisions`.
    pub fn start_conformance_at(revisions: taskgate_demo::Revisions) -> DemoUpstream {
        DemoUpstream::serve(DemoServer::conformance().serving(revisions))
    }

    fn serve(demo: DemoServer) -> DemoUpstream {
        let http = taskgate_demo::http::serve(demo.clone(), "127.0.0.1:0").expect("bind 127.0.0.1:0");
        DemoUpstream { demo, http }
    }

    /// An upstream entry for the gateway's configuration.
    pub fn upstream(&self, name: &str) -> UpstreamConfig {
        UpstreamConfig::http(name, self.http.url.clone())
    }
}

/// The `taskgate` executable built beside the test binaries by `cargo build --workspace`,
/// or `TASKGATE_BIN` when set.
pub fn taskgate_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("TASKGATE_BIN") {
        return PathBuf::from(path);
    }
    let mut dir = std::env::current_exe().expect("test executable path");
    dir.pop();
    if dir.ends_with("deps") {
        dir.pop();
    }
    let bin = dir.join("taskgate");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build --workspace` before the tests (the README test command does)",
        bin.display()
    );
    bin
}

/// The demo server as a stdio upstream (a `taskgate demo-upstream --stdio` child process).
pub fn stdio_demo_upstream(name: &str) -> UpstreamConfig {
    UpstreamConfig::stdio(name, taskgate_bin().display().to_string(), vec!["demo-upstream".into(), "--stdio".into()])
}

/// A configuration with these upstreams and defaults otherwise.
pub fn config_with(upstreams: Vec<UpstreamConfig>) -> Config {
    Config { upstreams, ..Config::default() }
}

/// The `tests/interop` folder with the TypeScript SDK peers; panics with the fix when its
/// packages are not installed.
pub fn interop_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/interop");
    let dir = dir.canonicalize().unwrap_or(dir);
    assert!(
        dir.join("node_modules/@modelcontextprotocol/sdk").exists(),
        "the TypeScript SDK is not installed: run `tests/interop/install`"
    );
    dir
}

/// Raises this process's soft open-file limit to its hard limit, and returns the limit now in
/// force: a test that opens many sockets itself leaves room for the tests running beside it.
pub fn raise_own_open_files() -> u64 {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit only read and write the struct given.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit { rlim_cur: limit.rlim_max, rlim_max: limit.rlim_max };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit = raised;
            }
        }
    }
    #[allow(clippy::unnecessary_cast)] // rlim_t is not u64 on every target
    let open_files = limit.rlim_cur as u64;
    open_files
}
