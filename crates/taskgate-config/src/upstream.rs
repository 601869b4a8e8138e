//! `[[upstream]]`: one upstream MCP server, its transport, revision and bounds.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::defaults;

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
    V2025,
    /// 2026-07-28: stateless requests carrying their version and capabilities in `_meta`.
    #[serde(rename = "2026-07-28")]
    V2026,
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
    /// Headers whose values are read from environment variables at start (header → variable),
    /// so a secret stays out of the file (http).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers_env: BTreeMap<String, String>,
    /// Headers whose values are read from files at start (header → path; the content, its
    /// trailing line end removed), e.g. a mounted secret (http).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers_file: BTreeMap<String, String>,
    /// The gateway's own OAuth client for this upstream (client credentials grant): each
    /// request carries its access token, cached and fetched again before it expires (http).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oauth: Option<UpstreamOAuth>,
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
    /// Longest wait, in milliseconds, before resuming a call's stream the upstream closed
    /// before its response (HTTP): the wait is the `retry` the upstream asked for, at most
    /// this. Lower it for servers that keep a closed stream's messages only briefly.
    #[serde(default = "default_resume_wait_max")]
    pub resume_wait_max_ms: u64,
    /// Most connections in use to this upstream at once (HTTP), all its sessions together:
    /// requests in flight and long-lived streams; a request waits for one (within
    /// `timeout_secs`), and streams leave a quarter of them to requests. At most as many again
    /// are kept idle for reuse.
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
    /// Per tool the gateway runs as a task (by the upstream's own tool name): how long, in
    /// milliseconds, a 2026-07-28 client's call waits before it is shown the task, for the
    /// tool to ask its first questions in the call (`input_required`, answered by the call's
    /// retry), as a server that asks before it makes a task does. The task is shown once that
    /// long has passed with no question outstanding, or as soon as it ends. Tools not named are
    /// shown their task at once, and ask through it. Tools the gateway does not wrap (native
    /// tasks, an upstream that speaks the tasks extension) are not affected.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tool_first_input_wait_ms: BTreeMap<String, u64>,
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

fn default_resume_wait_max() -> u64 {
    defaults::RESUME_WAIT_MAX_MS
}

fn default_max_connections() -> usize {
    defaults::MAX_UPSTREAM_CONNECTIONS
}

fn default_cached_tokens() -> usize {
    defaults::MAX_CACHED_UPSTREAM_TOKENS
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
            headers_env: BTreeMap::new(),
            headers_file: BTreeMap::new(),
            oauth: None,
            command: None,
            args: Vec::new(),
            env: BTreeMap::new(),
            max_processes: defaults::MAX_PROCESSES,
            prefix: true,
            timeout_secs: defaults::UPSTREAM_TIMEOUT_SECS,
            max_message_bytes: defaults::MAX_UPSTREAM_MESSAGE_BYTES,
            stream_idle_secs: defaults::STREAM_IDLE_SECS,
            resume_wait_max_ms: defaults::RESUME_WAIT_MAX_MS,
            max_connections: defaults::MAX_UPSTREAM_CONNECTIONS,
            task_support: TaskSupportSetting::Optional,
            required: false,
            tool_task_support: BTreeMap::new(),
            tool_first_input_wait_ms: BTreeMap::new(),
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

/// `[upstream.oauth]`: the gateway as an OAuth client of an upstream that is a resource server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamOAuth {
    /// The authorization server's token endpoint.
    pub token_url: String,
    /// The gateway's client id there.
    pub client_id: String,
    /// The environment variable holding its client secret.
    pub client_secret_env: String,
    /// How the gateway gets the upstream's tokens (see [`UpstreamGrant`]).
    #[serde(default)]
    pub grant: UpstreamGrant,
    /// The scope asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// The resource the token is for (RFC 8707). Absent: the upstream's `url`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    /// The issuer whose callers' access tokens are exchanged at `token_url` (`token_exchange`,
    /// required): a token of another authorization server is never sent there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    /// The `audience` of a token exchange (RFC 8693 section 2.1), for an authorization server
    /// that names the upstream by a logical name rather than by its URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audience: Option<String>,
    /// Most exchanged tokens kept for this upstream, one per principal (`token_exchange`);
    /// beyond them, the one that expires first is forgotten.
    #[serde(default = "default_cached_tokens")]
    pub max_cached_tokens: usize,
    /// The secret, read from `client_secret_env` at start.
    #[serde(skip)]
    pub client_secret: Option<String>,
}

/// How the gateway gets an upstream's access tokens (`[upstream.oauth] grant`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UpstreamGrant {
    /// The client credentials grant: the upstream sees the gateway, one token for all callers.
    #[default]
    ClientCredentials,
    /// Token exchange (RFC 8693): the caller's OAuth access token is exchanged at the
    /// authorization server for one whose audience is the upstream, kept per principal until
    /// it expires, so the upstream sees the user. The gateway's own requests (its tool
    /// catalog) use the client credentials grant of the same client.
    TokenExchange,
}
