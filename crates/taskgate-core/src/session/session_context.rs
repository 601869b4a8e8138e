//! [`SessionContext`]: what every client session shares: the configuration, the catalog and the
//! router, the upstreams, the session table, the task layer, the tenants' rules, the metrics, the
//! pool of client streams.

use std::sync::Arc;

use actix::Addr;
use foldhash::HashMap;
use parking_lot::RwLock;
use taskgate_config::Config;
use taskgate_upstream::Connector;

use crate::catalog::Catalog;
use crate::clock::Clock;
use crate::identity::Identity;
use crate::metrics::Metrics;
use crate::progress::ProgressStats;
use crate::router::Router;
use crate::stream_pool::StreamPool;
use crate::tasks::{TaskService, TaskShared};
use crate::tenants::Tenancy;

/// What every client session shares.
pub(crate) struct SessionContext {
    pub config: Arc<Config>,
    pub router: Addr<Router>,
    pub catalog: Arc<RwLock<Catalog>>,
    pub connectors: Arc<HashMap<String, Connector>>,
    /// The session table, for a session to leave it when it ends.
    pub sessions: Arc<dyn SessionTable>,
    /// The task layer: the store, live task actors, the upstream maps, waiters (invariant 8:
    /// what another replica would need lives in its store).
    pub tasks: Arc<TaskService>,
    /// This process's id among the replicas sharing the store (a v4 UUID per start): the
    /// tasks it runs are marked with it.
    pub replica: String,
    pub clock: Arc<dyn Clock>,
    /// Progress counters and the upstream token sequence.
    pub progress: Arc<ProgressStats>,
    /// Client requests in progress across all sessions.
    pub live_requests: std::sync::atomic::AtomicUsize,
    /// The Prometheus metrics.
    pub metrics: Arc<Metrics>,
    /// Tenants, credentials, rate buckets and task counts.
    pub tenancy: Arc<Tenancy>,
    /// What the task layer's actors share: a session starts a task's actor with it.
    pub task_context: Arc<TaskShared>,
    /// Set on SIGTERM/SIGINT: new requests are refused, `/readyz` says 503, in-flight work
    /// finishes.
    pub draining: std::sync::atomic::AtomicBool,
    /// Client streams open now, by tenant (bounded by server.max_streams and each tenant's
    /// share of it).
    pub streams: Arc<StreamPool>,
    /// The tool-search index of each tool catalog, rebuilt when its catalog changes.
    pub search: crate::tool_search::SearchIndexes,
}

/// The session table as a session sees it (the gateway holds the table itself).
pub(crate) trait SessionTable: Send + Sync {
    /// Forgets the session `id` (it has ended).
    fn forget(&self, id: &str);
    /// A 2026-07-28 client of `identity` activated tools at the endpoint of `profile` (search
    /// mode): its listen streams there are told its tool list changed.
    fn activated(&self, identity: &Identity, profile: Option<&str>);
}
