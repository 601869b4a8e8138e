//! Default values, in one place.

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
/// How long a client may read nothing of a stream while notifications for it are dropped.
pub const STREAM_STALL_SECS: u64 = 30;
/// Requests of one client behind a trusted proxy not answered yet, at most.
pub const MAX_UNFINISHED_REQUESTS_PER_PEER: usize = 256;
/// Bytes buffered across all the outbound streams of one session.
pub const SESSION_BUFFER_BYTES: usize = 8 * 1024 * 1024;
/// Longest time a client may take to send a request body, in milliseconds.
pub const BODY_TIMEOUT_MS: u64 = 10_000;
pub const FIRST_MESSAGE_WAIT_MS: u64 = 1_000;
/// How long a client's reply stream is held for it to resume, in seconds.
pub const STREAM_RESUME_SECS: u64 = 60;
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
/// Least time between progress notifications per token: none, every value is relayed as the
/// upstream sends it (an operator may ask for coalescing).
pub const PROGRESS_MIN_INTERVAL_MS: u64 = 0;
/// Expiry sweep period.
pub const SWEEP_INTERVAL_MS: u64 = 1000;
/// stdio processes per upstream.
pub const MAX_PROCESSES: usize = 16;
/// Largest message accepted from an upstream.
pub const MAX_UPSTREAM_MESSAGE_BYTES: usize = 16 * 1024 * 1024;
/// Seconds an upstream GET stream stays open once nothing needs it.
pub const STREAM_IDLE_SECS: u64 = 30;
/// Longest wait before resuming a call's stream an upstream closed early (its `retry`, at most).
pub const RESUME_WAIT_MAX_MS: u64 = 30_000;
/// Connections to one HTTP upstream at once.
pub const MAX_UPSTREAM_CONNECTIONS: usize = 256;
/// Seconds a shared upstream session outlives its last client session.
pub const SHARED_IDLE_SECS: u64 = 60;
/// Exchanged access tokens one upstream keeps, one per principal (about a kilobyte each).
pub const MAX_CACHED_UPSTREAM_TOKENS: usize = 10_000;
/// Seconds without a request after which a session with nothing in flight is closed.
pub const SESSION_IDLE_TIMEOUT_SECS: u64 = 30 * 60;
/// Seconds without a request after which a session that holds nothing lets its upstream
/// sessions (and their stdio processes) go.
pub const UPSTREAM_RELEASE_SECS: u64 = 60;
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
/// Memory for the file store's page cache, in MiB (redb holds up to about twice it: its read
/// cache and its write buffer).
pub const STORE_CACHE_MIB: u64 = 32;
/// Origins allowed when none are configured: local pages only.
pub fn allowed_origins() -> Vec<String> {
    ["http://localhost", "http://127.0.0.1", "http://[::1]"].map(String::from).to_vec()
}
