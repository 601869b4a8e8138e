//! taskgate configuration: the TOML schema, its defaults (all in [`defaults`]), environment
//! overrides and a [`Config::validate`] that reports every problem at once with its location.
//!
//! See `config/taskgate.toml` for a documented example; a test loads it so it cannot rot.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::Path;

use serde::{Deserialize, Serialize};

mod tenants;

pub use tenants::{ApiKeyConfig, EffectiveTaskLimits, JwtAlgorithm, JwtConfig, Rate, TenantConfig, TenantLimits};

/// Default values, in one place.
pub mod defaults {
    /// Listen address of the front door.
    pub const LISTEN: &str = "127.0.0.1:8080";
    /// What `serve` and `demo` ask of glibc's malloc (`GLIBC_TUNABLES`) unless the operator
    /// sets `GLIBC_TUNABLES`: a thread keeps 2 freed chunks of each small size for itself (7 by
    /// default), so little of what a burst of tasks used stays resident after their trim.
    pub const GLIBC_TUNABLES: &str = "glibc.malloc.tcache_count=2";
    /// Largest accepted POST body.
    pub const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;
    /// Most client sessions open at once.
    pub const MAX_SESSIONS: usize = 10_000;
    /// Messages a session may have queued before new requests get 503.
    pub const SESSION_MAILBOX: usize = 256;
    /// Messages buffered per outbound SSE stream before the stream is considered stuck.
    pub const STREAM_BUFFER: usize = 256;
    /// Bytes buffered per outbound SSE stream before its client is dropped as not reading.
    pub const STREAM_BUFFER_BYTES: usize = 2 * 1024 * 1024;
    /// Bytes buffered across all the outbound streams of one session.
    pub const SESSION_BUFFER_BYTES: usize = 8 * 1024 * 1024;
    /// Longest time a client may take to send a request body, in milliseconds.
    pub const BODY_TIMEOUT_MS: u64 = 10_000;
    pub const FIRST_MESSAGE_WAIT_MS: u64 = 1_000;
    /// The keep-alive cadence of SSE replies: waiting longer would leave a connection silent
    /// for longer than an idle stream ever is.
    pub const MAX_FIRST_MESSAGE_WAIT_MS: u64 = 15_000;
    /// How long an upstream request waits for a 2026-07-28 client's retry with its input, in seconds.
    pub const INPUT_WAIT_SECS: u64 = 120;
    /// Client streams open at once.
    pub const MAX_STREAMS: usize = 10_000;
    /// One tenant's share of each gateway-wide pool, in percent.
    pub const TENANT_SHARE_PERCENT: u8 = 50;
    /// Bytes of task results held at once.
    pub const MAX_RESULT_BYTES_TOTAL: usize = 1024 * 1024 * 1024;
    /// Longest time in-flight requests get to finish after SIGTERM or SIGINT.
    pub const SHUTDOWN_GRACE_SECS: u64 = 30;
    /// Seconds to wait for an upstream response.
    pub const UPSTREAM_TIMEOUT_SECS: u64 = 300;
    /// Tool name separator between upstream and tool.
    pub const SEPARATOR: &str = "__";
    /// Tools per `tools/list` page.
    pub const PAGE_SIZE: usize = 100;
    /// Seconds to wait for an upstream's `tools/list` when building the catalog.
    pub const LIST_TIMEOUT_SECS: u64 = 10;
    /// Tool catalogs by client capability set (the one of a client declaring none included).
    pub const MAX_TOOL_CATALOGS: usize = 8;
    /// Task ttl when none is requested: one hour.
    pub const DEFAULT_TTL_MS: u64 = 60 * 60 * 1000;
    /// Smallest task ttl granted: ten seconds.
    pub const MIN_TTL_MS: u64 = 10_000;
    /// Largest task ttl: one day.
    pub const MAX_TTL_MS: u64 = 24 * 60 * 60 * 1000;
    /// Suggested polling interval.
    pub const POLL_INTERVAL_MS: u64 = 1000;
    /// Tasks per `tasks/list` page.
    pub const TASKS_PAGE_SIZE: usize = 50;
    /// Most tasks held at once.
    pub const MAX_TASKS: usize = 100_000;
    /// Least time between progress notifications per token.
    pub const PROGRESS_MIN_INTERVAL_MS: u64 = 50;
    /// Expiry sweep period.
    pub const SWEEP_INTERVAL_MS: u64 = 1000;
    /// stdio processes per upstream.
    pub const MAX_PROCESSES: usize = 16;
    /// Largest message accepted from an upstream.
    pub const MAX_UPSTREAM_MESSAGE_BYTES: usize = 16 * 1024 * 1024;
    /// Seconds an upstream GET stream stays open once nothing needs it.
    pub const STREAM_IDLE_SECS: u64 = 30;
    /// Connections to one HTTP upstream at once.
    pub const MAX_UPSTREAM_CONNECTIONS: usize = 256;
    /// Seconds a shared upstream session outlives its last client session.
    pub const SHARED_IDLE_SECS: u64 = 60;
    /// Seconds without a request after which a session with nothing in flight is closed.
    pub const SESSION_IDLE_TIMEOUT_SECS: u64 = 30 * 60;
    /// How often the configuration file is checked for changes, in milliseconds.
    pub const CONFIG_POLL_MS: u64 = 2000;
    /// Log filter.
    pub const LOG_LEVEL: &str = "info";
    /// The file store's data directory.
    pub const STORE_PATH: &str = "taskgate-data";
    /// Prefix of every Redis key the gateway writes.
    pub const REDIS_KEY_PREFIX: &str = "taskgate:";
    /// How long a replica's claim on a running task lasts without renewal (Redis); another
    /// replica takes the task over within about this time after its replica dies.
    pub const LEASE_MS: u64 = 10_000;
    /// Longest wait for one Redis operation.
    pub const STORE_TIMEOUT_MS: u64 = 2_000;
    /// Origins allowed when none are configured: local pages only.
    pub fn allowed_origins() -> Vec<String> {
        ["http://localhost", "http://127.0.0.1", "http://[::1]"].map(String::from).to_vec()
    }
}

/// The whole configuration file.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The front door.
    #[serde(default)]
    pub server: ServerConfig,
    /// Logging.
    #[serde(default)]
    pub logging: LoggingConfig,
    /// How upstream tools are federated.
    #[serde(default)]
    pub federation: FederationConfig,
    /// Tasks (basic/utilities/tasks).
    #[serde(default)]
    pub tasks: TasksConfig,
    /// Progress relaying (basic/utilities/progress).
    #[serde(default)]
    pub progress: ProgressConfig,
    /// Where task state lives.
    #[serde(default)]
    pub store: StoreConfig,
    /// The upstream MCP servers.
    #[serde(default, rename = "upstream")]
    pub upstreams: Vec<UpstreamConfig>,
    /// The tenants. With none, every request is served as one anonymous tenant that sees every
    /// upstream (local use); with some, only their credentials (or the one `anonymous` tenant).
    #[serde(default, rename = "tenant", skip_serializing_if = "Vec::is_empty")]
    pub tenants: Vec<TenantConfig>,
}

/// `[server]`: the front door.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Address to listen on (`TASKGATE_LISTEN` overrides).
    pub listen: String,
    /// Origins allowed to call the gateway (DNS-rebinding protection). A request with an
    /// `Origin` header not in this list gets 403; a request without `Origin` is allowed.
    /// Each entry is `scheme://host` (any port) or `scheme://host:port`; `"*"` allows all.
    pub allowed_origins: Vec<String>,
    /// Largest POST body in bytes; larger bodies get 413.
    pub max_body_bytes: usize,
    /// Most client sessions open at once; `initialize` beyond it gets 503.
    pub max_sessions: usize,
    /// Messages a session may have queued; requests beyond it get 503.
    pub session_mailbox: usize,
    /// Messages buffered per outbound SSE stream; one more drops the client as not reading.
    pub stream_buffer: usize,
    /// Bytes buffered per outbound SSE stream (a request's reply or the GET stream); a client
    /// that lets more pile up is dropped (its request cancelled upstream). One message always
    /// fits a stream that has nothing queued.
    pub stream_buffer_bytes: usize,
    /// Bytes buffered across all the outbound streams of one session, and the messages queued
    /// for it while it has no stream open.
    pub session_buffer_bytes: usize,
    /// Longest time a client may take to send a request's body, in milliseconds (408 after).
    pub body_timeout_ms: u64,
    /// How long a streamed method's reply (`tools/call`, `tasks/result`, …) to a client that
    /// accepts JSON and SSE waits for its first message, in milliseconds: a response that comes
    /// first within it is one JSON object; anything else, or nothing by then, starts the SSE
    /// stream. 0 starts the stream at once unless the response is already there.
    pub first_message_wait_ms: u64,
    /// How long an upstream request that asked a 2026-07-28 client for input (an
    /// `input_required` result) waits for the client's retry before it is answered with an
    /// error and cancelled, in seconds.
    pub input_wait_secs: u64,
    /// Most connections open at once on each listener; 0 sizes it from the open-file limit
    /// (raised to its hard limit at start), keeping a quarter of the descriptors for upstreams,
    /// the store and the admin listener.
    pub max_connections: usize,
    /// After SIGTERM or SIGINT, how long requests in flight may take to finish before their
    /// streams are ended, in seconds.
    pub shutdown_grace_secs: u64,
    /// Client streams (SSE replies and GET streams) open at once, all tenants together.
    pub max_streams: usize,
    /// The share of each gateway-wide pool (sessions, tasks held, result bytes held, open
    /// streams) one tenant may take, in percent, when more than one tenant is configured;
    /// `limits.share_percent` overrides it per tenant.
    pub tenant_share_percent: u8,
    /// HTTP worker threads; 0 means one per core.
    pub workers: usize,
    /// A second listener for `/metrics`, `/healthz` and `/readyz` only (they are also on the main
    /// listener), e.g. `127.0.0.1:9090`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_listen: Option<String>,
    /// A session with no request for this many seconds, and no request in flight or GET stream
    /// open, is closed (its tasks live on). 0 keeps idle sessions forever.
    pub session_idle_timeout_secs: u64,
    /// How often `taskgate serve` checks its configuration file for changes, in milliseconds
    /// (tenants reload on a change and on SIGHUP). 0 reloads on SIGHUP only.
    pub config_poll_ms: u64,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: defaults::LISTEN.into(),
            allowed_origins: defaults::allowed_origins(),
            max_body_bytes: defaults::MAX_BODY_BYTES,
            max_sessions: defaults::MAX_SESSIONS,
            session_mailbox: defaults::SESSION_MAILBOX,
            stream_buffer: defaults::STREAM_BUFFER,
            stream_buffer_bytes: defaults::STREAM_BUFFER_BYTES,
            session_buffer_bytes: defaults::SESSION_BUFFER_BYTES,
            body_timeout_ms: defaults::BODY_TIMEOUT_MS,
            first_message_wait_ms: defaults::FIRST_MESSAGE_WAIT_MS,
            input_wait_secs: defaults::INPUT_WAIT_SECS,
            max_connections: 0,
            shutdown_grace_secs: defaults::SHUTDOWN_GRACE_SECS,
            max_streams: defaults::MAX_STREAMS,
            tenant_share_percent: defaults::TENANT_SHARE_PERCENT,
            workers: 0,
            admin_listen: None,
            session_idle_timeout_secs: defaults::SESSION_IDLE_TIMEOUT_SECS,
            config_poll_ms: defaults::CONFIG_POLL_MS,
        }
    }
}

/// `[logging]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LoggingConfig {
    /// A `RUST_LOG`-style filter, e.g. `info,taskgate_upstream=debug` (`TASKGATE_LOG` overrides).
    pub level: String,
    /// `human` or `json`.
    pub format: LogFormat,
}

impl Default for LoggingConfig {
    fn default() -> Self {
        LoggingConfig { level: defaults::LOG_LEVEL.into(), format: LogFormat::Human }
    }
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    Human,
    /// One JSON object per line.
    Json,
}

/// `[federation]`: how upstream tools are merged into one catalog.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FederationConfig {
    /// Between the upstream name and the tool name: `<upstream><separator><tool>`.
    pub separator: String,
    /// Tools per `tools/list` page.
    pub page_size: usize,
    /// Seconds to wait for an upstream's own `tools/list` when building the catalog; an upstream
    /// slower than this is left out of the listing until it answers.
    pub list_timeout_secs: u64,
    /// Tool catalogs kept at most: one per distinct set of client capabilities the gateway
    /// relays (roots, sampling, elicitation), because upstreams may offer tools only to clients
    /// that declare them. Clients beyond the cap see the catalog of a client declaring none.
    pub max_tool_catalogs: usize,
}

impl Default for FederationConfig {
    fn default() -> Self {
        FederationConfig {
            separator: defaults::SEPARATOR.into(),
            page_size: defaults::PAGE_SIZE,
            list_timeout_secs: defaults::LIST_TIMEOUT_SECS,
            max_tool_catalogs: defaults::MAX_TOOL_CATALOGS,
        }
    }
}

/// `[tasks]`: durable tasks for tool calls.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TasksConfig {
    /// ttl given to a task whose request names none, in milliseconds.
    pub default_ttl_ms: u64,
    /// Largest ttl granted, in milliseconds; a larger request is lowered to it.
    pub max_ttl_ms: u64,
    /// Smallest ttl granted, in milliseconds; a smaller request (0 included) is raised to it,
    /// so a result is never gone before the client can fetch it.
    pub min_ttl_ms: u64,
    /// When true, a task created without a ttl is kept until cancelled or done and its ttl is
    /// `null`, and requested ttls are not capped.
    pub unlimited_ttl: bool,
    /// `pollInterval` suggested to clients, in milliseconds.
    pub poll_interval_ms: u64,
    /// Tasks per `tasks/list` page.
    pub page_size: usize,
    /// Most tasks held at once (live and finished, until their ttl); more get -32002.
    pub max_tasks: usize,
    /// Bytes of task results held at once (serialised); a task whose result does not fit
    /// becomes `failed` with a statusMessage saying so.
    pub max_result_bytes_total: usize,
    /// How often expired tasks are swept, in milliseconds (a backstop to the live tasks' ttl timer).
    pub sweep_interval_ms: u64,
}

impl Default for TasksConfig {
    fn default() -> Self {
        TasksConfig {
            default_ttl_ms: defaults::DEFAULT_TTL_MS,
            max_ttl_ms: defaults::MAX_TTL_MS,
            min_ttl_ms: defaults::MIN_TTL_MS,
            unlimited_ttl: false,
            poll_interval_ms: defaults::POLL_INTERVAL_MS,
            page_size: defaults::TASKS_PAGE_SIZE,
            max_tasks: defaults::MAX_TASKS,
            max_result_bytes_total: defaults::MAX_RESULT_BYTES_TOTAL,
            sweep_interval_ms: defaults::SWEEP_INTERVAL_MS,
        }
    }
}

/// Which task store the gateway uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreBackend {
    /// An embedded, crash-safe database in `path` (the default; one process).
    File,
    /// Memory only: tasks are lost on restart (tests).
    Memory,
    /// Redis at `url`, shared by many replicas.
    Redis,
}

/// `[store]`: where task state lives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// `file` (default), `memory` or `redis`.
    pub backend: StoreBackend,
    /// `file`: the data directory (created if missing; relative to the working directory).
    pub path: String,
    /// `redis`: `redis://[user:password@]host:port[/db]`, or `rediss://` for TLS.
    pub url: Option<String>,
    /// `redis`: the environment variable holding the URL instead (keeps a password out of
    /// the file).
    pub url_env: Option<String>,
    /// `redis`: the prefix of every key (several gateways may share a Redis with different ones).
    pub key_prefix: String,
    /// `redis`: how long a replica's claim on a running task lasts without renewal, in
    /// milliseconds; a dead replica's tasks are taken over within about this time.
    pub lease_ms: u64,
    /// `redis`: the longest wait for one operation, in milliseconds; then the request fails
    /// with a clear error (503, -32002).
    pub timeout_ms: u64,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            backend: StoreBackend::File,
            path: defaults::STORE_PATH.into(),
            url: None,
            url_env: None,
            key_prefix: defaults::REDIS_KEY_PREFIX.into(),
            lease_ms: defaults::LEASE_MS,
            timeout_ms: defaults::STORE_TIMEOUT_MS,
        }
    }
}

impl StoreConfig {
    /// Memory only (tests).
    pub fn memory() -> StoreConfig {
        StoreConfig { backend: StoreBackend::Memory, ..StoreConfig::default() }
    }

    /// The embedded file store in `path`.
    pub fn file(path: impl Into<String>) -> StoreConfig {
        StoreConfig { backend: StoreBackend::File, path: path.into(), ..StoreConfig::default() }
    }

    /// The Redis URL, from `url` or the variable `url_env` names.
    pub fn redis_url(&self, env: &dyn Fn(&str) -> Option<String>) -> Option<String> {
        self.url.clone().or_else(|| self.url_env.as_deref().and_then(env))
    }
}

/// `[progress]`: how upstream progress notifications are relayed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProgressConfig {
    /// Least time between two notifications for one token, in milliseconds: values arriving
    /// faster are coalesced (the latest wins; the last one before completion is always sent).
    /// 0 relays every value.
    pub min_interval_ms: u64,
}

impl Default for ProgressConfig {
    fn default() -> Self {
        ProgressConfig { min_interval_ms: defaults::PROGRESS_MIN_INTERVAL_MS }
    }
}

/// How a tool of an upstream without native tasks may be called as a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskSupportSetting {
    /// Never as a task.
    Forbidden,
    /// As a task or a plain call.
    Optional,
    /// Only as a task.
    Required,
}

/// How an upstream is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// Streamable HTTP at `url`.
    Http,
    /// A child process speaking MCP on stdin/stdout.
    Stdio,
}

/// Which MCP revision the gateway speaks to an upstream (`upstream[].protocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum UpstreamProtocol {
    /// Detect it: a modern `server/discover` probe first, `initialize` when the upstream
    /// answers as a legacy server (basic/versioning "Backward Compatibility").
    #[default]
    #[serde(rename = "auto")]
    Auto,
    /// 2025-11-25 (or an earlier legacy version it negotiates): sessions and `initialize`.
    #[serde(rename = "2025-11-25")]
    Legacy,
    /// 2026-07-28: stateless requests carrying their version and capabilities in `_meta`.
    #[serde(rename = "2026-07-28")]
    Modern,
}

/// `[[upstream]]`: one upstream MCP server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// Unique name; also the tool-name prefix.
    pub name: String,
    /// `http` or `stdio`.
    pub transport: Transport,
    /// MCP endpoint URL (http).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Extra HTTP headers sent to the upstream, e.g. its own credentials (http).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Program to run (stdio).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Arguments (stdio).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Environment variables added for the process (stdio).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Most processes of this upstream at once; one runs per client session that uses it (stdio).
    #[serde(default = "default_max_processes")]
    pub max_processes: usize,
    /// Prefix this upstream's tool names with `<name><separator>`.
    #[serde(default = "default_true")]
    pub prefix: bool,
    /// Seconds to wait for a response from this upstream.
    #[serde(default = "default_timeout")]
    pub timeout_secs: u64,
    /// Largest message accepted from this upstream, in bytes.
    #[serde(default = "default_max_message")]
    pub max_message_bytes: usize,
    /// Seconds an upstream session's GET stream stays open once nothing needs it (HTTP). It is
    /// open while something can receive what it carries: always for a client that can be
    /// asked things, else while the client has its own GET stream open, a native task of it
    /// reports progress, or it is the gateway's catalog session.
    #[serde(default = "default_stream_idle")]
    pub stream_idle_secs: u64,
    /// Most connections to this upstream at once (HTTP), all its sessions together: requests
    /// in flight and long-lived streams; a request waits for one (within `timeout_secs`), and
    /// streams leave a quarter of them to requests.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// For an upstream without native tasks: how its tools may be called as tasks (the gateway
    /// runs them in the background). Ignored when the upstream declares
    /// `tasks.requests.tools.call`: its tools' own `execution.taskSupport` applies.
    #[serde(default = "default_task_support")]
    pub task_support: TaskSupportSetting,
    /// `/readyz` reports not ready while this upstream cannot be reached.
    #[serde(default)]
    pub required: bool,
    /// Per-tool overrides of `task_support`, by the upstream's own tool name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tool_task_support: BTreeMap<String, TaskSupportSetting>,
    /// The MCP revision spoken to it: `auto` (detected and cached), `2025-11-25` or
    /// `2026-07-28`.
    #[serde(default)]
    pub protocol: UpstreamProtocol,
    /// Whether client sessions share upstream sessions (see [`ShareSessions`]).
    #[serde(default)]
    pub share_sessions: ShareSessions,
    /// Seconds a shared upstream session is kept once no client session uses it, for the next
    /// one to reuse (0: ended at once).
    #[serde(default = "default_shared_idle")]
    pub shared_idle_secs: u64,
}

/// Whether the client sessions of one tenant and principal, declaring the same client, share
/// an upstream session (`upstream[].share_sessions`). Only clients that can be asked nothing
/// (no roots, sampling or elicitation) share, and only until they set a log level or subscribe
/// to a resource (state an upstream keeps per session); what the upstream sends about a request
/// reaches the client session that made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ShareSessions {
    /// Share when the upstream speaks 2026-07-28, which has no sessions (nothing a client
    /// could observe is kept per session at the upstream); not with a 2025-11-25 upstream.
    #[default]
    Auto,
    /// Share with any upstream: right for a server that keeps no state per session that its
    /// clients could observe (most tool servers). One session for many clients.
    Always,
    /// Every client session has upstream sessions of its own.
    Never,
}

fn default_task_support() -> TaskSupportSetting {
    TaskSupportSetting::Optional
}

fn default_max_processes() -> usize {
    defaults::MAX_PROCESSES
}
fn default_true() -> bool {
    true
}
fn default_timeout() -> u64 {
    defaults::UPSTREAM_TIMEOUT_SECS
}
fn default_max_message() -> usize {
    defaults::MAX_UPSTREAM_MESSAGE_BYTES
}

fn default_stream_idle() -> u64 {
    defaults::STREAM_IDLE_SECS
}

fn default_max_connections() -> usize {
    defaults::MAX_UPSTREAM_CONNECTIONS
}

fn default_shared_idle() -> u64 {
    defaults::SHARED_IDLE_SECS
}

impl UpstreamConfig {
    /// An HTTP upstream with defaults.
    pub fn http(name: impl Into<String>, url: impl Into<String>) -> UpstreamConfig {
        UpstreamConfig {
            name: name.into(),
            transport: Transport::Http,
            url: Some(url.into()),
            headers: BTreeMap::new(),
            command: None,
            args: Vec::new(),
            env: BTreeMap::new(),
            max_processes: defaults::MAX_PROCESSES,
            prefix: true,
            timeout_secs: defaults::UPSTREAM_TIMEOUT_SECS,
            max_message_bytes: defaults::MAX_UPSTREAM_MESSAGE_BYTES,
            stream_idle_secs: defaults::STREAM_IDLE_SECS,
            max_connections: defaults::MAX_UPSTREAM_CONNECTIONS,
            task_support: TaskSupportSetting::Optional,
            required: false,
            tool_task_support: BTreeMap::new(),
            protocol: UpstreamProtocol::Auto,
            share_sessions: ShareSessions::Auto,
            shared_idle_secs: defaults::SHARED_IDLE_SECS,
        }
    }

    /// A stdio upstream with defaults.
    pub fn stdio(name: impl Into<String>, command: impl Into<String>, args: Vec<String>) -> UpstreamConfig {
        UpstreamConfig {
            transport: Transport::Stdio,
            url: None,
            command: Some(command.into()),
            args,
            ..UpstreamConfig::http(name, "")
        }
    }
}

/// One problem found in a configuration, with where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Where: a dotted path such as `upstream[1].url`.
    pub location: String,
    /// What is wrong and what to do.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.location, self.message)
    }
}

/// Why a configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The TOML did not parse into the schema (the message has line and column).
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// The parser's message.
        message: String,
    },
    /// The configuration parsed but is not valid.
    #[error("{} problem(s) in {path}:\n{}", problems.len(), problems.iter().map(|p| format!("  - {p}")).collect::<Vec<_>>().join("\n"))]
    Invalid {
        /// The file.
        path: String,
        /// Every problem found.
        problems: Vec<Problem>,
    },
}

impl Config {
    /// Parses TOML text, applies `env` overrides and validates; `path` names the source in errors.
    pub fn from_toml(text: &str, path: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let config = Config::parse_unvalidated(text, path, env)?;
        config.validate().map_err(|problems| ConfigError::Invalid { path: path.into(), problems })?;
        Ok(config)
    }

    /// [`Config::from_toml`] without validation, for a caller that adds to the configuration
    /// (the demo adds its built-in upstreams) and validates after.
    pub fn parse_unvalidated(
        text: &str,
        path: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let mut config: Config =
            toml::from_str(text).map_err(|e| ConfigError::Parse { path: path.into(), message: e.to_string() })?;
        config.apply_env(env);
        Ok(config)
    }

    /// Reads, parses and validates a file, with overrides from the process environment.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: name.clone(), source })?;
        Config::from_toml(&text, &name, &|key| std::env::var(key).ok())
    }

    /// Environment overrides: `TASKGATE_LISTEN` and `TASKGATE_LOG`.
    pub fn apply_env(&mut self, env: &dyn Fn(&str) -> Option<String>) {
        if let Some(listen) = env("TASKGATE_LISTEN") {
            self.server.listen = listen;
        }
        if let Some(level) = env("TASKGATE_LOG") {
            self.logging.level = level;
        }
    }

    /// The listen address; valid after [`Config::validate`].
    pub fn listen_addr(&self) -> SocketAddr {
        self.server.listen.parse().expect("validated listen address")
    }

    fn validate_store(&self, bad: &mut dyn FnMut(String, String)) {
        let store = &self.store;
        match store.backend {
            StoreBackend::File if store.path.trim().is_empty() => {
                bad("store.path".into(), "the file store needs a data directory, e.g. path = \"taskgate-data\"".into())
            }
            StoreBackend::Redis => {
                match (&store.url, &store.url_env) {
                    (None, None) => bad(
                        "store.url".into(),
                        "the redis store needs url = \"redis://host:6379\" (or url_env naming a variable)".into(),
                    ),
                    (Some(_), Some(_)) => bad("store.url_env".into(), "give url or url_env, not both".into()),
                    (Some(url), None) if !valid_redis_url(url) => {
                        bad("store.url".into(), "must start with redis:// or rediss:// (TLS) and name a host".into())
                    }
                    _ => {}
                }
                if store.key_prefix.is_empty() {
                    bad("store.key_prefix".into(), "must be non-empty, e.g. \"taskgate:\"".into());
                }
                if store.lease_ms < 100 {
                    bad("store.lease_ms".into(), format!("{} is too short; use at least 100", store.lease_ms));
                }
                if store.timeout_ms == 0 {
                    bad("store.timeout_ms".into(), "must be at least 1".into());
                }
            }
            _ => {}
        }
        if store.backend != StoreBackend::Redis && (store.url.is_some() || store.url_env.is_some()) {
            bad("store.url".into(), "url and url_env are for backend = \"redis\"".into());
        }
    }

    /// Checks everything and returns every problem found.
    pub fn validate(&self) -> Result<(), Vec<Problem>> {
        let mut problems = Vec::new();
        let mut bad = |location: String, message: String| problems.push(Problem { location, message });

        if let Some(admin) = &self.server.admin_listen {
            if admin.parse::<SocketAddr>().is_err() {
                bad("server.admin_listen".into(), format!("{admin:?} is not an address like 127.0.0.1:9090"));
            }
        }
        if self.server.listen.parse::<SocketAddr>().is_err() {
            bad("server.listen".into(), format!("{:?} is not an address like 127.0.0.1:8080", self.server.listen));
        }
        for (i, origin) in self.server.allowed_origins.iter().enumerate() {
            if origin != "*" && !valid_origin(origin) {
                bad(
                    format!("server.allowed_origins[{i}]"),
                    format!("{origin:?} is not an origin like http://localhost or https://app.example.com:8443"),
                );
            }
        }
        if self.server.first_message_wait_ms > defaults::MAX_FIRST_MESSAGE_WAIT_MS {
            bad(
                "server.first_message_wait_ms".into(),
                format!(
                    "{} is longer than an idle SSE reply is ever silent; use 0 to {}",
                    self.server.first_message_wait_ms,
                    defaults::MAX_FIRST_MESSAGE_WAIT_MS
                ),
            );
        }
        if self.server.tenant_share_percent > 100 {
            bad(
                "server.tenant_share_percent".into(),
                format!("{} is a percentage; use 1 to 100", self.server.tenant_share_percent),
            );
        }
        for (i, t) in self.tenants.iter().enumerate() {
            if t.limits.share_percent.is_some_and(|p| p == 0 || p > 100) {
                bad(format!("tenant[{i}] ({:?}).limits.share_percent", t.id), "use 1 to 100".into());
            }
        }
        if self.server.max_body_bytes < 1024 {
            bad(
                "server.max_body_bytes".into(),
                format!("{} is too small; use at least 1024", self.server.max_body_bytes),
            );
        }
        for (key, value) in [
            ("server.max_sessions", self.server.max_sessions),
            ("server.session_mailbox", self.server.session_mailbox),
            ("server.stream_buffer", self.server.stream_buffer),
            ("server.stream_buffer_bytes", self.server.stream_buffer_bytes),
            ("server.session_buffer_bytes", self.server.session_buffer_bytes),
            ("server.body_timeout_ms", self.server.body_timeout_ms as usize),
            ("server.input_wait_secs", self.server.input_wait_secs as usize),
            ("server.max_streams", self.server.max_streams),
            ("server.tenant_share_percent", self.server.tenant_share_percent as usize),
            ("federation.page_size", self.federation.page_size),
            ("federation.list_timeout_secs", self.federation.list_timeout_secs as usize),
        ] {
            if value == 0 {
                bad(key.into(), "must be at least 1".into());
            }
        }
        for (key, value) in [
            ("tasks.default_ttl_ms", self.tasks.default_ttl_ms),
            ("tasks.max_ttl_ms", self.tasks.max_ttl_ms),
            ("tasks.poll_interval_ms", self.tasks.poll_interval_ms),
            ("tasks.page_size", self.tasks.page_size as u64),
            ("tasks.max_tasks", self.tasks.max_tasks as u64),
            ("tasks.sweep_interval_ms", self.tasks.sweep_interval_ms),
        ] {
            if value == 0 {
                bad(key.into(), "must be at least 1".into());
            }
        }
        if !self.tasks.unlimited_ttl && self.tasks.default_ttl_ms > self.tasks.max_ttl_ms {
            bad(
                "tasks.default_ttl_ms".into(),
                format!("{} exceeds tasks.max_ttl_ms ({})", self.tasks.default_ttl_ms, self.tasks.max_ttl_ms),
            );
        }
        self.validate_store(&mut bad);
        if self.federation.page_size > 10_000 {
            bad(
                "federation.page_size".into(),
                format!("{} is too large; use at most 10000", self.federation.page_size),
            );
        }
        if self.federation.separator.is_empty() || !self.federation.separator.chars().all(tool_name_char) {
            bad(
                "federation.separator".into(),
                format!(
                    "{:?} must be non-empty and use only A-Z a-z 0-9 _ - . (tool-name characters)",
                    self.federation.separator
                ),
            );
        }

        let mut seen = BTreeMap::new();
        for (i, up) in self.upstreams.iter().enumerate() {
            let at = |field: &str| format!("upstream[{i}] ({:?}).{field}", up.name);
            if up.name.is_empty() || !up.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
                bad(at("name"), "must be non-empty and use only A-Z a-z 0-9 _ -".into());
            }
            if let Some(first) = seen.insert(up.name.clone(), i) {
                bad(at("name"), format!("duplicates upstream[{first}]; names must be unique"));
            }
            match up.transport {
                Transport::Http => {
                    match &up.url {
                        None => bad(at("url"), "an http upstream needs url = \"http://host:port/mcp\"".into()),
                        Some(url) if !(url.starts_with("http://") || url.starts_with("https://")) || url.len() < 10 => {
                            bad(at("url"), format!("{url:?} is not an http:// or https:// URL"))
                        }
                        Some(_) => {}
                    }
                    if up.command.is_some() || !up.args.is_empty() || !up.env.is_empty() {
                        bad(at("command"), "command, args and env are for stdio upstreams".into());
                    }
                }
                Transport::Stdio => {
                    if up.command.as_deref().is_none_or(str::is_empty) {
                        bad(at("command"), "a stdio upstream needs command = \"program\"".into());
                    }
                    if up.url.is_some() || !up.headers.is_empty() {
                        bad(at("url"), "url and headers are for http upstreams".into());
                    }
                    if up.max_processes == 0 {
                        bad(at("max_processes"), "must be at least 1".into());
                    }
                }
            }
            if up.timeout_secs == 0 {
                bad(at("timeout_secs"), "must be at least 1".into());
            }
            if up.max_message_bytes < 1024 {
                bad(at("max_message_bytes"), "must be at least 1024".into());
            }
            if up.stream_idle_secs > 86_400 {
                bad(at("stream_idle_secs"), "must be at most 86400 (a day)".into());
            }
            if up.shared_idle_secs > 86_400 {
                bad(at("shared_idle_secs"), "must be at most 86400 (a day)".into());
            }
            if !(2..=65_535).contains(&up.max_connections) {
                bad(at("max_connections"), "must be 2 to 65535 (a stream and a request at least)".into());
            }
        }
        let names = self.upstreams.iter().map(|u| u.name.as_str()).collect();
        problems.extend(tenants::collect(&self.tenants, &names));
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems)
        }
    }
}

/// Characters MCP recommends for tool names (server/tools, "Tool names").
fn tool_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')
}

fn valid_origin(origin: &str) -> bool {
    let Some((scheme, rest)) = origin.split_once("://") else { return false };
    matches!(scheme, "http" | "https") && !rest.is_empty() && !rest.contains('/')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn empty_file_is_the_defaults() {
        let c = Config::from_toml("", "t.toml", &no_env).unwrap();
        assert_eq!(c, Config::default());
    }

    #[test]
    fn unknown_keys_are_rejected_with_their_location() {
        let err = Config::from_toml("[server]\nlisten = \"127.0.0.1:1\"\nlistn = 1\n", "t.toml", &no_env).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("listn") && text.contains("line 3"), "{text}");
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let text = r#"
            [server]
            listen = "nowhere"
            allowed_origins = ["localhost"]
            [federation]
            separator = " "
            [[upstream]]
            name = "a"
            transport = "http"
            [[upstream]]
            name = "a"
            transport = "stdio"
            url = "http://x:1/mcp"
        "#;
        let Err(ConfigError::Invalid { problems, .. }) = Config::from_toml(text, "t.toml", &no_env) else {
            panic!("expected invalid")
        };
        let locations: Vec<_> = problems.iter().map(|p| p.location.as_str()).collect();
        assert_eq!(
            locations,
            [
                "server.listen",
                "server.allowed_origins[0]",
                "federation.separator",
                "upstream[0] (\"a\").url",
                "upstream[1] (\"a\").name",
                "upstream[1] (\"a\").command",
                "upstream[1] (\"a\").url",
            ]
        );
    }

    #[test]
    fn the_first_message_wait_is_bounded_by_the_keep_alive_cadence() {
        let parse =
            |ms: u64| Config::from_toml(&format!("[server]\nfirst_message_wait_ms = {ms}\n"), "t.toml", &no_env);
        assert_eq!(parse(0).unwrap().server.first_message_wait_ms, 0);
        assert_eq!(parse(15_000).unwrap().server.first_message_wait_ms, 15_000);
        assert_eq!(Config::default().server.first_message_wait_ms, 1_000);
        let Err(ConfigError::Invalid { problems, .. }) = parse(15_001) else { panic!("expected invalid") };
        assert_eq!(problems[0].location, "server.first_message_wait_ms");
        assert!(problems[0].message.contains("0 to 15000"), "{}", problems[0].message);
    }

    #[test]
    fn an_upstream_streams_idle_time_is_at_most_a_day() {
        let parse = |secs: u64| {
            let body = format!("[[upstream]]\nname = \"a\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:1/mcp\"\nstream_idle_secs = {secs}\n");
            Config::from_toml(&body, "t.toml", &no_env)
        };
        assert_eq!(parse(0).unwrap().upstreams[0].stream_idle_secs, 0);
        assert_eq!(parse(86_400).unwrap().upstreams[0].stream_idle_secs, 86_400);
        assert_eq!(UpstreamConfig::http("a", "http://h/mcp").stream_idle_secs, 30);
        let Err(ConfigError::Invalid { problems, .. }) = parse(86_401) else { panic!("expected invalid") };
        assert_eq!(problems[0].location, "upstream[0] (\"a\").stream_idle_secs");
    }

    #[test]
    fn session_sharing_is_auto_by_default_and_its_idle_time_at_most_a_day() {
        let parse = |extra: &str| {
            let body = format!(
                "[[upstream]]\nname = \"a\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:1/mcp\"\n{extra}\n"
            );
            Config::from_toml(&body, "t.toml", &no_env)
        };
        let default = &parse("").unwrap().upstreams[0];
        assert_eq!((default.share_sessions, default.shared_idle_secs), (ShareSessions::Auto, 60));
        for (text, mode) in
            [("always", ShareSessions::Always), ("never", ShareSessions::Never), ("auto", ShareSessions::Auto)]
        {
            let parsed = parse(&format!("share_sessions = \"{text}\"\nshared_idle_secs = 0")).unwrap();
            assert_eq!((parsed.upstreams[0].share_sessions, parsed.upstreams[0].shared_idle_secs), (mode, 0));
        }
        assert!(matches!(parse("share_sessions = \"sometimes\""), Err(ConfigError::Parse { .. })));
        let Err(ConfigError::Invalid { problems, .. }) = parse("shared_idle_secs = 86401") else {
            panic!("expected invalid")
        };
        assert_eq!(problems[0].location, "upstream[0] (\"a\").shared_idle_secs");
    }

    #[test]
    fn an_upstreams_connections_are_bounded_and_leave_room_for_a_request() {
        let parse = |max: usize| {
            let body = format!(
                "[[upstream]]\nname = \"a\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:1/mcp\"\nmax_connections = {max}\n"
            );
            Config::from_toml(&body, "t.toml", &no_env)
        };
        assert_eq!(parse(2).unwrap().upstreams[0].max_connections, 2);
        assert_eq!(UpstreamConfig::http("a", "http://h/mcp").max_connections, 256);
        for max in [0, 1, 65_536] {
            let Err(ConfigError::Invalid { problems, .. }) = parse(max) else { panic!("{max}: expected invalid") };
            assert_eq!(problems[0].location, "upstream[0] (\"a\").max_connections");
        }
    }

    #[test]
    fn store_keys_are_validated_with_their_location_and_never_echo_a_url() {
        let c = Config::from_toml(
            "[store]\nbackend = \"redis\"\nurl = \"redis://:pw@127.0.0.1:6379/0\"\n",
            "t.toml",
            &no_env,
        )
        .unwrap();
        assert_eq!(c.store.backend, StoreBackend::Redis);
        assert_eq!(Config::from_toml("", "t.toml", &no_env).unwrap().store, StoreConfig::file("taskgate-data"));
        let cases = [
            ("backend = \"redis\"", "store.url"),
            ("backend = \"redis\"\nurl = \"http://:secret@host\"", "store.url"),
            ("backend = \"redis\"\nurl = \"redis://h\"\nurl_env = \"X\"", "store.url_env"),
            ("backend = \"redis\"\nurl = \"redis://h\"\nlease_ms = 5", "store.lease_ms"),
            ("backend = \"redis\"\nurl = \"redis://h\"\nkey_prefix = \"\"", "store.key_prefix"),
            ("backend = \"file\"\npath = \" \"", "store.path"),
            ("backend = \"memory\"\nurl = \"redis://h\"", "store.url"),
        ];
        for (body, location) in cases {
            let Err(ConfigError::Invalid { problems, .. }) =
                Config::from_toml(&format!("[store]\n{body}\n"), "t.toml", &no_env)
            else {
                panic!("{body} should be invalid")
            };
            assert_eq!(problems.iter().map(|p| p.location.as_str()).collect::<Vec<_>>(), [location], "{body}");
            assert!(problems.iter().all(|p| !p.message.contains("secret")), "{problems:?}");
        }
        let bad = Config::from_toml("[store]\nbackend = \"etcd\"\n", "t.toml", &no_env).unwrap_err().to_string();
        assert!(bad.contains("etcd") && bad.contains("line 2"), "{bad}");
        let env = |k: &str| (k == "REDIS_URL").then(|| "redis://127.0.0.1:1".to_string());
        let c =
            Config::from_toml("[store]\nbackend = \"redis\"\nurl_env = \"REDIS_URL\"\n", "t.toml", &no_env).unwrap();
        assert_eq!(c.store.redis_url(&env).as_deref(), Some("redis://127.0.0.1:1"));
    }

    #[test]
    fn environment_overrides_listen_and_log_level() {
        let env = |k: &str| match k {
            "TASKGATE_LISTEN" => Some("127.0.0.1:9999".to_string()),
            "TASKGATE_LOG" => Some("debug".to_string()),
            _ => None,
        };
        let c = Config::from_toml("[server]\nlisten = \"127.0.0.1:1\"\n", "t.toml", &env).unwrap();
        assert_eq!(c.server.listen, "127.0.0.1:9999");
        assert_eq!(c.logging.level, "debug");
    }
}

#[cfg(test)]
mod tenant_tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    const KEY: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

    #[test]
    fn tenants_parse_with_keys_jwts_and_limits() {
        let text = format!(
            r#"
            [[upstream]]
            name = "search"
            transport = "http"
            url = "http://127.0.0.1:1/mcp"
            [[tenant]]
            id = "acme"
            upstreams = ["search"]
            [[tenant.api_key]]
            principal = "ci"
            sha256 = "{KEY}"
            [[tenant.jwt]]
            algorithm = "HS256"
            secret_env = "ACME_JWT_SECRET"
            audience = "taskgate"
            [tenant.limits]
            max_concurrent_tasks = 10
            rate = {{ per_second = 5.0, burst = 10 }}
            "#
        );
        let c = Config::from_toml(&text, "t.toml", &no_env).unwrap();
        let t = &c.tenants[0];
        assert_eq!(t.api_keys[0].principal, "ci");
        assert_eq!(t.jwts[0].principal_claim, "sub");
        assert_eq!(t.limits.rate, Some(Rate { per_second: 5.0, burst: 10 }));
        let tasks = t.limits.tasks(&c.tasks);
        assert_eq!((tasks.default_ttl_ms, tasks.max_ttl_ms), (Some(3_600_000), Some(86_400_000)));
    }

    #[test]
    fn tenant_problems_are_reported_with_locations() {
        let text = format!(
            r#"
            [[tenant]]
            id = "a"
            upstreams = ["nowhere"]
            anonymous = true
            [[tenant.api_key]]
            principal = "p"
            sha256 = "XYZ"
            [[tenant]]
            id = "a"
            anonymous = true
            [[tenant.jwt]]
            algorithm = "RS256"
            secret = "short"
            audience = ""
            [tenant.limits]
            max_concurrent_tasks = 0
            default_ttl_ms = 10
            max_ttl_ms = 5
            rate = {{ per_second = 0.0, burst = 0 }}
            [[tenant]]
            id = "b"
            [[tenant.api_key]]
            principal = "x"
            sha256 = "{KEY}"
            [[tenant]]
            id = "c"
            [[tenant.api_key]]
            principal = "y"
            sha256 = "{KEY}"
            "#
        );
        let Err(ConfigError::Invalid { problems, .. }) = Config::from_toml(&text, "t.toml", &no_env) else {
            panic!("expected invalid")
        };
        let locations: Vec<_> = problems.iter().map(|p| p.location.as_str()).collect();
        assert_eq!(
            locations,
            [
                "tenant[0] (\"a\").upstreams[0]",
                "tenant[0] (\"a\").api_key[0].sha256",
                "tenant[1] (\"a\").id",
                "tenant[1] (\"a\").anonymous",
                "tenant[1] (\"a\").jwt[0].public_key",
                "tenant[1] (\"a\").jwt[0].secret",
                "tenant[1] (\"a\").jwt[0].audience",
                "tenant[1] (\"a\").limits.max_concurrent_tasks",
                "tenant[1] (\"a\").limits.default_ttl_ms",
                "tenant[1] (\"a\").limits.rate",
                "tenant[1] (\"a\").limits.rate",
                "tenant[3] (\"c\").api_key[0].sha256",
            ]
        );
    }
}

/// A Redis URL the client can use: `redis://` or `rediss://` with a host. The URL itself is
/// never echoed in a problem (it may hold a password).
fn valid_redis_url(url: &str) -> bool {
    let rest = url.strip_prefix("redis://").or_else(|| url.strip_prefix("rediss://"));
    rest.is_some_and(|r| r.rsplit('@').next().is_some_and(|host| !host.is_empty() && !host.starts_with('/')))
}
