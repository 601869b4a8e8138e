//! `[tasks]` and `[store]`: task limits and where task state lives.

use serde::{Deserialize, Serialize};

use crate::defaults;

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
    /// `file`: memory for the database's page cache, in MiB (pages read or written recently;
    /// the file itself may be larger). redb holds up to about twice it (read cache and write
    /// buffer): this, not the results stored, is what the file store costs in memory.
    pub cache_mib: u64,
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
            cache_mib: defaults::STORE_CACHE_MIB,
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
