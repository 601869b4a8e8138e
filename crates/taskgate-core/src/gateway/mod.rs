//! [`Gateway`]: the handle the front door holds. It starts the Router, creates sessions at
//! `initialize`, and hands out [`SessionHandle`]s that deliver messages to session actors with
//! bounded waiting (invariant 3).

// foldhash: the maps of ids and names on every request's path hash in a few instructions,
// not SipHash's hundreds; its seeds are random per map.
use foldhash::HashMap;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use parking_lot::RwLock;
use serde_json::Value;
use taskgate_config::Config;
use taskgate_protocol::Message as RpcMessage;
use taskgate_upstream::Connector;

use taskgate_config::StoreBackend;
use taskgate_store::{FileTaskStore, MemoryTaskStore, RedisTaskStore, TaskStore};

use crate::catalog::{Catalog, Naming};
use crate::clock::{Clock, SystemClock};
use crate::identity::Identity;
use crate::metrics::Metrics;
use crate::router::{Router, UpstreamHealth};
use crate::session::registry::Sessions;
use crate::session::session_context::SessionContext;
use crate::tasks::{Supervisor, Sweep, TaskContext, TaskService, TaskShared};
use crate::tenants::{self, Tenancy};
use crate::GatewayError;

mod admin;
mod callers;
mod client_sessions;
mod endpoints;
mod forwarded_retries;
mod handle;
mod health;
mod pool;
mod replicated;
mod tool_admission;

pub use callers::resource_metadata_url;
pub use client_sessions::{server_info, server_info_at};
pub use handle::SessionHandle;
pub use health::Readiness;
use pool::Pool;

/// Opens the configured task store; a directory that cannot be used is a problem at start.
fn open_store(config: &Config) -> Result<Arc<dyn TaskStore>, Vec<taskgate_config::Problem>> {
    let max_tasks = config.tasks.max_tasks;
    match config.store.backend {
        StoreBackend::Memory => Ok(Arc::new(MemoryTaskStore::new(max_tasks))),
        StoreBackend::File => {
            let cache = usize::try_from(config.store.cache_mib.saturating_mul(1 << 20)).unwrap_or(usize::MAX);
            let store =
                FileTaskStore::open_with(std::path::Path::new(&config.store.path), max_tasks, cache).map_err(|e| {
                    vec![taskgate_config::Problem { location: "store.path".into(), message: e.to_string() }]
                })?;
            tracing::info!(file = %store.path().display(), tasks = store.len(), "task store opened");
            Ok(Arc::new(store))
        }
        StoreBackend::Redis => {
            let problem =
                |location: &str, message: String| vec![taskgate_config::Problem { location: location.into(), message }];
            let url = config.store.redis_url(&|k| std::env::var(k).ok()).ok_or_else(|| {
                problem(
                    "store.url_env",
                    format!("the variable {:?} is not set", config.store.url_env.as_deref().unwrap_or("")),
                )
            })?;
            let timeout = Duration::from_millis(config.store.timeout_ms);
            let store = RedisTaskStore::open(&url, &config.store.key_prefix, max_tasks, config.store.lease_ms, timeout)
                .map_err(|e| problem("store.url", e.to_string()))?;
            tracing::info!(redis = %store.shown(), prefix = %config.store.key_prefix, "task store: Redis, shared with the other replicas");
            Ok(Arc::new(store))
        }
    }
}

/// The tenants whose series are initialised: the configured ones, or the implicit one.
fn tenant_ids(config: &Config) -> Vec<String> {
    if config.tenants.is_empty() {
        return vec![tenants::IMPLICIT_TENANT.to_owned()];
    }
    config.tenants.iter().map(|t| t.id.clone()).collect()
}

/// Each tenant with each rate of its `[tenant.tools]`, as the metric labels them.
fn tool_rate_patterns(config: &Config) -> Vec<(String, String)> {
    let rules = config.tenants.iter().filter_map(|t| t.tools.as_ref().map(|r| (t, r)));
    rules
        .flat_map(|(t, r)| {
            let globs = r.rates.keys().cloned();
            let upstreams = r.upstream_rates.keys().map(|u| format!("upstream:{u}"));
            globs.chain(upstreams).map(|p| (t.id.clone(), p))
        })
        .collect()
}

/// Each tenant with each of its profiles ("" for its own endpoint), as the metrics label them.
fn profile_labels(config: &Config) -> Vec<(String, String)> {
    config
        .tenants
        .iter()
        .flat_map(|t| {
            std::iter::once(String::new()).chain(t.profiles.iter().map(|p| p.name.clone())).map(|p| (t.id.clone(), p))
        })
        .collect()
}

fn upstream_names(config: &Config) -> Vec<String> {
    config.upstreams.iter().map(|u| u.name.clone()).collect()
}

/// Each tenant with each upstream it may use (all of them unless its `upstreams` names some).
fn tenant_upstreams(config: &Config) -> Vec<(String, String)> {
    let mut pairs = Vec::new();
    for tenant in tenant_ids(config) {
        let named = config.tenants.iter().find(|t| t.id == tenant).and_then(|t| t.upstreams.as_ref());
        for upstream in config.upstreams.iter().filter(|u| named.is_none_or(|n| n.contains(&u.name))) {
            pairs.push((tenant.clone(), upstream.name.clone()));
        }
    }
    pairs
}

/// The running gateway core. Cheap to clone.
#[derive(Clone)]
pub struct Gateway {
    shared: Arc<SessionContext>,
    /// The session table.
    sessions: Arc<Sessions>,
    /// What the task layer's actors share.
    tasks: Arc<TaskShared>,
    supervisor: Addr<Supervisor>,
    /// Sessions serving stateless requests, by identity and relayed client capabilities.
    pool: Arc<parking_lot::Mutex<Pool>>,
    /// `[admin]` as last loaded: its operators' keys change with a reload.
    admin: Arc<parking_lot::RwLock<Arc<taskgate_config::AdminConfig>>>,
}

/// How long a client session has made no request before a new process of an upstream whose
/// places are all taken may take its place there.
const IDLE_BEFORE_RECLAIM_MS: u64 = 2_000;

impl Gateway {
    /// Starts the core (the Router begins listing upstream tools). Call inside an actix system.
    /// Fails when a tenant's credentials cannot be loaded (a key file, a secret's variable).
    pub fn start(config: Config) -> Result<Gateway, Vec<taskgate_config::Problem>> {
        Gateway::start_with_clock(config, Arc::new(SystemClock))
    }

    /// [`Gateway::start`] with a given clock (tests pass a [`crate::clock::ManualClock`]).
    pub fn start_with_clock(config: Config, clock: Arc<dyn Clock>) -> Result<Gateway, Vec<taskgate_config::Problem>> {
        let tenancy = Tenancy::new(&config, clock.clone())?;
        let metrics = Arc::new(Metrics::new());
        let observer: Arc<dyn taskgate_upstream::RequestObserver> = metrics.clone();
        let connectors: Vec<Connector> =
            config.upstreams.iter().cloned().map(|u| Connector::with_observer(u, Some(observer.clone()))).collect();
        let naming = config.upstreams.iter().map(|u| Naming { upstream: u.name.clone(), prefix: u.prefix }).collect();
        let catalog = Arc::new(RwLock::new(Catalog::new(&config.federation.separator, naming)));
        let sessions = Arc::new(Sessions::new(config.server.max_sessions, metrics.clone()));
        // An upstream whose process places are all taken (or a tenant's share of them) asks
        // the client sessions (of that tenant) idle for `IDLE_BEFORE_RECLAIM` and holding
        // nothing (a one-shot client that never ended its session) to let their session of it
        // go now, not after `server.upstream_release_secs`.
        // (Not with `share_sessions = "never"`: its sessions are their clients' for their life.)
        for connector in connectors.iter().filter(|c| c.pools_sessions()) {
            let (sessions, clock, upstream) = (Arc::downgrade(&sessions), clock.clone(), connector.name().to_owned());
            connector.when_full(Arc::new(move |tenant| {
                if let Some(sessions) = sessions.upgrade() {
                    let cutoff = clock.now_ms().saturating_sub(IDLE_BEFORE_RECLAIM_MS);
                    sessions.release_for_a_process(&upstream, tenant, cutoff);
                }
            }));
        }
        let router =
            Router::new(connectors.clone(), catalog.clone(), sessions.clone(), &config.federation, metrics.clone())
                .start();
        let connectors: Arc<HashMap<String, Connector>> =
            Arc::new(connectors.into_iter().map(|c| (c.name().to_owned(), c)).collect());
        let store: Arc<dyn TaskStore> =
            Arc::new(crate::tasks::ObservedStore::new(open_store(&config)?, metrics.clone()));
        let replica = uuid::Uuid::new_v4().to_string();
        let (publisher, outgoing) = crate::tasks::Publisher::new(store.shared(), replica.clone());
        let incoming = store.subscribe();
        let lease = store.lease_ms().map(Duration::from_millis);
        let tasks = Arc::new(TaskService::new(
            store,
            metrics.clone(),
            clock.clone(),
            config.tasks.page_size,
            sessions.clone(),
            publisher,
        ));
        let (config, tenancy) = (Arc::new(config), Arc::new(tenancy));
        let progress = Arc::new(crate::progress::ProgressStats::new(&metrics));
        let task_context = Arc::new(TaskContext {
            config: config.clone(),
            clock: clock.clone(),
            metrics: metrics.clone(),
            tenancy: tenancy.clone(),
            replica: replica.clone(),
            connectors: connectors.clone(),
            tasks: tasks.clone(),
            sessions: sessions.clone(),
            supervisor: std::sync::OnceLock::new(),
            retries: Arc::default(),
            stopping: Default::default(),
        });
        let shared = Arc::new(SessionContext {
            config,
            router,
            catalog,
            connectors,
            sessions: sessions.clone(),
            tasks,
            replica,
            clock,
            progress,
            live_requests: Default::default(),
            metrics,
            tenancy,
            task_context: task_context.clone(),
            draining: Default::default(),
            streams: Arc::default(),
            search: Default::default(),
        });
        shared.metrics.initialise(&tenant_ids(&shared.config), &upstream_names(&shared.config));
        shared.metrics.initialise_tool_rates(&tool_rate_patterns(&shared.config));
        shared.metrics.initialise_profiles(&profile_labels(&shared.config));
        shared.metrics.tenant_upstreams(&tenant_upstreams(&shared.config));
        let supervisor = Supervisor::new(task_context.clone()).start();
        let _ = task_context.supervisor.set(supervisor.clone().recipient());
        // Replicas sharing the store: events both ways, leases on the tasks run here.
        if let Some(outgoing) = outgoing {
            actix::spawn(crate::tasks::publish_loop(task_context.clone(), outgoing));
        }
        if let Some(incoming) = incoming {
            actix::spawn(crate::tasks::listen(task_context.clone(), incoming));
        }
        if let Some(lease) = lease {
            actix::spawn(crate::tasks::keep_leases(task_context.clone(), lease));
        }
        if shared.config.tenants.is_empty() {
            tracing::warn!(
                "no [[tenant]] is configured: every request is served, without credentials, as tenant \"{}\"",
                tenants::IMPLICIT_TENANT
            );
        }
        // The authorization servers' keys: read at start, then again when due, while the
        // gateway is there.
        let issuers = Arc::downgrade(&shared.tenancy.issuers);
        actix::spawn(async move {
            while let Some(issuers) = issuers.upgrade() {
                issuers.refresh_due().await;
                drop(issuers);
                tokio::time::sleep(Duration::from_secs(15)).await;
            }
        });
        let admin = Arc::new(parking_lot::RwLock::new(Arc::new(shared.config.admin.clone())));
        Ok(Gateway { shared, sessions, tasks: task_context, supervisor, pool: Arc::default(), admin })
    }

    /// Admits one JSON-RPC request of `identity` by its tenant's and principal's rates
    /// (`tasks/get` and `tasks/list` count in the polling buckets). With a shared store the
    /// buckets are shared by every replica (so N replicas do not grant N times a rate); while
    /// the store is unreachable each replica falls back to its own buckets.
    pub async fn admit(&self, identity: &Identity, method: &str) -> Result<(), GatewayError> {
        let tenancy = &self.shared.tenancy;
        let store = self.shared.tasks.store();
        let outcome = if store.shared() {
            let buckets = tenancy.shared_buckets(identity, method);
            let names: Vec<taskgate_store::RateBucket> = buckets.iter().map(|(_, _, b)| b.clone()).collect();
            match store.admit_rates(&names).await {
                Ok(None) => Ok(()),
                Ok(Some((index, retry_after_ms))) => {
                    let (bucket, rate, _) = buckets[index].clone();
                    Err(tenants::Refused { bucket, retry_after_ms, rate })
                }
                Err(e) => {
                    tracing::debug!(error = %e, "shared rate buckets unreachable; this replica's own apply");
                    tenancy.admit_request(identity, method)
                }
            }
        } else {
            tenancy.admit_request(identity, method)
        };
        outcome.map_err(|refused| {
            let m = &self.shared.metrics;
            m.rate_limited.with_label_values(&[&identity.tenant, refused.bucket.label()]).inc();
            tracing::debug!(target: "taskgate::audit", tenant = %identity.tenant, principal = %identity.principal, %method, bucket = refused.bucket.label(), "rate limited");
            tenants::rate_error(identity, &refused)
        })
    }

    /// The largest POST body `identity` may send.
    pub fn max_body_bytes(&self, identity: &Identity) -> usize {
        self.shared.tenancy.policy(&identity.tenant).max_body_bytes
    }

    /// The policy in force for a tenant.
    pub fn tenant_policy(&self, tenant: &str) -> Arc<tenants::TenantPolicy> {
        self.shared.tenancy.policy(tenant)
    }

    /// Applies the tenants of a new configuration (credentials, upstream visibility, limits,
    /// profiles: open sessions serve their endpoint as it is now, and end if their profile is
    /// gone) and its operators (`[[admin.key]]`, `admin.refresh_ms`) without touching tasks.
    /// An invalid configuration is refused whole, its problems returned, and the current one
    /// kept. Other sections take effect on restart.
    pub fn reload(&self, config: &Config) -> Result<(), Vec<taskgate_config::Problem>> {
        let mut checked = config.clone();
        // Upstreams are not reloaded: tenants may only name the ones running.
        checked.upstreams = self.shared.config.upstreams.clone();
        let outcome = checked.validate().and_then(|()| self.shared.tenancy.reload(&checked));
        let m = &self.shared.metrics;
        match &outcome {
            Ok(()) => {
                m.config_reloads.with_label_values(&["applied"]).inc();
                m.initialise(&tenant_ids(&checked), &upstream_names(&checked));
                m.initialise_tool_rates(&tool_rate_patterns(&checked));
                m.initialise_profiles(&profile_labels(&checked));
                m.tenant_upstreams(&tenant_upstreams(&checked));
                self.sessions.endpoints_reloaded();
                let listeners_moved = checked.admin.on_main_listener != self.admin_config().on_main_listener;
                *self.admin.write() = Arc::new(checked.admin.clone());
                let restart: Vec<&str> = [
                    ("server", config.server != self.shared.config.server),
                    ("logging", config.logging != self.shared.config.logging),
                    ("federation", config.federation != self.shared.config.federation),
                    ("tasks", config.tasks != self.shared.config.tasks),
                    ("progress", config.progress != self.shared.config.progress),
                    ("store", config.store != self.shared.config.store),
                    ("upstream", config.upstreams != self.shared.config.upstreams),
                    ("traces", config.traces != self.shared.config.traces),
                    ("admin.on_main_listener", listeners_moved),
                ]
                .into_iter()
                .filter_map(|(name, changed)| changed.then_some(name))
                .collect();
                tracing::info!(tenants = ?self.shared.tenancy.ids(), "configuration reloaded: tenants applied");
                if !restart.is_empty() {
                    tracing::warn!(sections = ?restart, "these sections changed but take effect only after a restart");
                }
            }
            Err(problems) => self.reload_rejected(problems),
        }
        outcome
    }

    /// Records a reload refused before it reached [`Gateway::reload`] (the file did not parse).
    pub fn reload_rejected(&self, problems: &[taskgate_config::Problem]) {
        self.shared.metrics.config_reloads.with_label_values(&["rejected"]).inc();
        for p in problems {
            tracing::error!(location = %p.location, problem = %p.message, "configuration reload rejected; the current configuration stays");
        }
    }

    /// Closes sessions idle for `server.session_idle_timeout_secs` now (the Supervisor does it
    /// on every sweep), and resolves when done.
    pub async fn expire_idle_sessions(&self) {
        let _ = self.supervisor.send(crate::tasks::ExpireSessions).await;
    }

    /// The stdio processes of an upstream running now; `None` for a name not configured.
    pub fn upstream_processes(&self, upstream: &str) -> Option<usize> {
        self.shared.connectors.get(upstream).map(Connector::running_processes)
    }

    /// An upstream's pooled sessions now: held by a client session, and idle; `None` for a name
    /// not configured.
    pub fn pooled_upstream_sessions(&self, upstream: &str) -> Option<(usize, usize)> {
        self.shared.connectors.get(upstream).map(Connector::pooled_sessions)
    }

    /// The metrics registry.
    pub fn metrics(&self) -> &Metrics {
        &self.shared.metrics
    }

    /// The metrics, to keep (the front door counts what it refuses before a request exists).
    pub fn shared_metrics(&self) -> Arc<Metrics> {
        self.shared.metrics.clone()
    }

    /// The text exposition of every metric, with the gauges read at scrape time refreshed.
    pub async fn render_metrics(&self) -> String {
        let m = &self.shared.metrics;
        let upstreams = self.ready_report().await.upstreams;
        for u in upstreams {
            m.upstream_reachable.with_label_values(&[&u.name]).set(i64::from(u.reachable));
        }
        for issuer in self.shared.tenancy.issuers.health() {
            m.oauth_keys.with_label_values(&[&issuer.issuer]).set(issuer.keys as i64);
            m.oauth_keys_stale.with_label_values(&[&issuer.issuer]).set(i64::from(issuer.error.is_some()));
        }
        m.sessions_active.reset();
        for (tenant, count) in self.sessions.count_by_tenant() {
            m.sessions_active.with_label_values(&[&tenant]).set(count as i64);
        }
        m.stream_bytes.set(self.sessions.stream_bytes() as i64);
        m.result_bytes.reset();
        for (tenant, held) in self.shared.tasks.holdings.by_tenant() {
            m.result_bytes.with_label_values(&[&tenant]).set(held.result_bytes as i64);
        }
        m.task_actors.set(self.shared.tasks.live_actors() as i64);
        m.requests_in_progress.set(self.live_requests() as i64);
        m.progress_actors.set(self.shared.progress.live.load(std::sync::atomic::Ordering::Relaxed) as i64);
        m.catalog_collisions.set(self.shared.catalog.read().collisions().len() as i64);
        for connector in self.shared.connectors.values().filter(|c| c.acts_for_callers()) {
            m.upstream_exchanged_tokens.with_label_values(&[connector.name()]).set(connector.exchanged_tokens() as i64);
        }
        m.oauth_caller_tokens.set(self.shared.tenancy.subjects.len() as i64);
        m.render()
    }

    /// Whether the task store answers now (`Err` says why); kept in `taskgate_store_up`.
    pub async fn store_health(&self) -> Result<(), String> {
        let health = self.shared.tasks.store().health().await.map_err(|e| e.to_string());
        self.shared.metrics.store_up.set(i64::from(health.is_ok()));
        health
    }

    /// Whether the gateway is ready, and each upstream's reachability: ready when every upstream
    /// marked `required` has answered its `tools/list`, and the gateway is not shutting down.
    pub async fn readiness(&self) -> (bool, Vec<UpstreamHealth>) {
        let states = self.shared.router.send(crate::router::UpstreamStates).await.unwrap_or_default();
        let ready = states.iter().all(|u| !u.required || u.reachable) && !self.draining();
        (ready, states)
    }

    /// Whether the gateway is shutting down (new requests get 503).
    pub fn draining(&self) -> bool {
        self.shared.draining.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The first step of a graceful shutdown: new requests are refused from now on, `/readyz`
    /// answers 503 so load balancers move away, and every GET stream ends (clients reconnect
    /// elsewhere); requests in flight go on.
    pub fn begin_drain(&self) {
        self.shared.draining.store(true, std::sync::atomic::Ordering::Relaxed);
        for session in self.sessions.all() {
            session.do_send(crate::session::EndGetStream);
        }
        tracing::info!(
            requests = self.live_requests(),
            "shutting down: new requests are refused, requests in flight finish"
        );
    }

    /// Waits until no client request is in flight, or `grace` has passed; true when drained.
    pub async fn drained(&self, grace: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + grace;
        let mut tick = tokio::time::interval(Duration::from_millis(20));
        loop {
            if self.live_requests() == 0 {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!(requests = self.live_requests(), "the shutdown grace ran out; their streams end now");
                return false;
            }
            tick.tick().await;
        }
    }

    /// The last step of a shutdown: every request still in flight is answered with an error
    /// saying the gateway is shutting down (-32002, `data.reason = "shutting_down"`) and
    /// cancelled upstream, every session ends, and every stdio upstream process is stopped
    /// (stdin closed, then SIGTERM, then SIGKILL) and waited for.
    pub async fn shutdown(&self) {
        // What the shutdown cuts short ends with the gateway, and says so: set before any
        // session ends, since ending one may stop the stdio processes a task's call runs in.
        self.tasks.stopping.store(true, std::sync::atomic::Ordering::Relaxed);
        // Status changes still waiting for a failing store go with the process (a restart
        // takes the tasks over from what the store holds): said, never silent.
        let unwritten = self.tasks.tasks.unwritten.give_up_all();
        if unwritten > 0 {
            tracing::error!(unwritten, "the gateway stops with task status changes the store never took; those tasks are taken over from what the store holds");
        }
        // Each request still in flight gets an error saying the gateway is shutting down; all
        // sessions at once, their upstream cancellations bounded together.
        let ended = self.sessions.all().into_iter().map(|session| session.send(crate::session::ShutDown));
        let _ = tokio::time::timeout(crate::session::CANCEL_AT_SHUTDOWN, futures_util::future::join_all(ended)).await;
        let stops: Vec<_> = self.shared.connectors.values().map(|c| c.shutdown()).collect();
        futures_util::future::join_all(stops).await;
    }

    /// Takes over the tasks no live gateway process runs (this process's earlier life, after a
    /// restart): native tasks on HTTP upstreams are followed again, the others fail with a
    /// statusMessage that says why. Call once after [`Gateway::start`], before serving.
    ///
    /// A shared store (Redis) that does not answer yet is not an error: the gateway serves,
    /// answers task methods with 503 until it is back, and its lease loop takes orphans over
    /// then. A local store that cannot be read is an error.
    pub async fn recover(&self) -> Result<crate::tasks::Recovered, GatewayError> {
        match TaskService::recover(self.tasks.clone()).await {
            Err(GatewayError::StoreUnavailable(why)) if self.shared.tasks.store().shared() => {
                tracing::warn!(%why, "the task store does not answer yet; serving, and taking orphaned tasks over once it does");
                Ok(crate::tasks::Recovered::default())
            }
            other => other,
        }
    }

    /// Sweeps expired tasks now, and resolves when done.
    pub async fn sweep_expired(&self) {
        let _ = self.supervisor.send(Sweep).await;
    }

    /// A test hook: makes a task's actor panic, as a bug would, so that tests can watch the
    /// Supervisor restart it. False when the task has no live actor.
    #[cfg(any(test, feature = "test-hooks"))]
    pub async fn crash_task_actor(&self, task_id: &str) -> bool {
        let actor = self.shared.tasks.actor(task_id);
        match actor {
            // The panic drops the reply channel: the send fails, as a crash would make it.
            Some(actor) => {
                let _ = actor.send(crate::tasks::Crash).await;
                true
            }
            None => false,
        }
    }

    /// The requestor's task's outstanding input requests as the shared store lists them, by
    /// key (empty without a shared store: the replica running a task holds its own).
    pub async fn task_input_requests(
        &self,
        identity: &Identity,
        task_id: &str,
    ) -> Result<Vec<(String, Value)>, GatewayError> {
        self.shared.tasks.input_requests(identity, task_id).await
    }

    /// Answers to the requestor's task's input requests (responses whose ids are the requests'
    /// keys), delivered wherever the task runs.
    pub async fn answer_task_inputs(
        &self,
        identity: &Identity,
        task_id: &str,
        responses: Vec<RpcMessage>,
    ) -> Result<(), GatewayError> {
        self.shared.tasks.answer_inputs(identity, task_id, responses).await
    }

    /// Whether a task has a live actor now.
    #[doc(hidden)]
    pub fn task_actor_alive(&self, task_id: &str) -> bool {
        self.shared.tasks.actor(task_id).is_some_and(|a| a.connected())
    }

    /// Progress counters: relayed, coalesced, dropped, live tokens.
    pub fn progress_stats(&self) -> &crate::progress::ProgressStats {
        &self.shared.progress
    }

    /// Client requests in progress across all sessions.
    pub fn live_requests(&self) -> usize {
        self.shared.live_requests.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Task actors alive now.
    pub fn live_tasks(&self) -> usize {
        self.shared.tasks.live_actors()
    }

    /// Tasks held in the store (live and finished until their ttl).
    pub fn stored_tasks(&self) -> usize {
        self.shared.tasks.store().len()
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.shared.config
    }

    /// `[admin]` as last loaded (its keys change with a reload; where it is served does not).
    pub fn admin_config(&self) -> Arc<taskgate_config::AdminConfig> {
        self.admin.read().clone()
    }

    /// Tool names offered by more than one upstream, as last listed.
    pub fn collisions(&self) -> Vec<crate::catalog::Collision> {
        self.shared.catalog.read().collisions().to_vec()
    }

    /// Sessions open now.
    pub fn session_count(&self) -> usize {
        self.sessions.len()
    }
}
