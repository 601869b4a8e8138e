//! The gateway's Prometheus metrics. Every name starts with `taskgate_` (but the standard
//! `process_*`), counters end in `_total`, durations are `_seconds`, sizes `_bytes`. Each label
//! name has one meaning across all metrics ([`LABELS`]), and its values come from the
//! configuration or a fixed set, never from an id or a client's text (architecture invariant 9).

mod initial;
mod process;
mod requests;

use std::time::Duration;

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};

pub use process::ProcessCollector;
pub use requests::{RequestMeter, RequestMetrics};

/// Every label name the gateway's metrics use, with its one meaning.
pub const LABELS: &[(&str, &str)] = &[
    ("tenant", "a configured tenant's id"),
    ("upstream", "a configured upstream's name"),
    ("method", "an MCP method (a fixed set, then other)"),
    ("status", "a task's status (working, input_required, completed, failed, cancelled)"),
    ("outcome", "what became of an event (relayed, coalesced, forwarded, applied, followed...)"),
    ("reason", "why something was refused or failed"),
    ("http_method", "an HTTP request method"),
    ("code", "an HTTP response status code"),
    ("shared", "whether client sessions share an upstream session"),
    ("stream", "which client stream (request or get)"),
    ("limit", "which per-source limit was reached"),
    ("operation", "a task store operation"),
    ("direction", "an event between replicas: published, lost or received"),
    ("kind", "the kind of an event between replicas"),
    ("issuer", "a configured authorization server's issuer"),
    ("version", "the gateway's version"),
    ("pattern", "a configured tool glob of [tenant.tools] rates, or upstream:<name>"),
    ("profile", "a configured profile's name (\"\": the tenant's own endpoint)"),
];

/// Buckets for upstream request and task durations, in seconds.
const LATENCY_BUCKETS: &[f64] =
    &[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];
const TASK_BUCKETS: &[f64] = &[0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0];

/// Every metric the gateway exports.
pub struct Metrics {
    registry: Registry,
    /// Every registered name, with whether it is a histogram.
    names: Vec<(String, bool)>,
    /// Client sessions open, by tenant.
    pub sessions_active: IntGaugeVec,
    /// Tasks held (live and finished until their ttl), by tenant and status.
    pub tasks: IntGaugeVec,
    /// Tasks created, by tenant and upstream.
    pub tasks_created: IntCounterVec,
    /// Tasks that reached a terminal status, by tenant, upstream and final status.
    pub tasks_finished: IntCounterVec,
    /// Time from creation to terminal status, by tenant, upstream and final status.
    pub task_duration: HistogramVec,
    /// Task actors alive.
    pub task_actors: IntGauge,
    /// Client requests in progress (all sessions).
    pub requests_in_progress: IntGauge,
    /// Progress actors alive (live progress tokens).
    pub progress_actors: IntGauge,
    /// Client reply streams held for their clients to resume (`Last-Event-ID`).
    pub reply_streams_held: IntGauge,
    /// `tasks/get` requests, by tenant.
    pub task_polls: IntCounterVec,
    /// `tasks/get` requests arriving sooner than the task's suggested pollInterval, by tenant.
    pub task_polls_early: IntCounterVec,
    /// Requests blocked in `tasks/result`, by tenant.
    pub task_result_waiters: IntGaugeVec,
    /// Progress notifications by what became of them (status: relayed, coalesced, dropped).
    pub progress_notifications: IntCounterVec,
    /// Client cancellations by status (received, forwarded, ignored) and reason.
    pub cancellations: IntCounterVec,
    /// Upstream request latency, by upstream and method.
    pub upstream_request_duration: HistogramVec,
    /// Upstream failures by upstream and reason.
    pub upstream_errors: IntCounterVec,
    /// Long-lived streams open to each upstream: GET streams (2025-11-25) and
    /// `subscriptions/listen` streams (2026-07-28), each holding a connection.
    pub upstream_streams: IntGaugeVec,
    /// Connections to each HTTP upstream in use (requests in flight and streams open), under
    /// its `max_connections`.
    pub upstream_connections: IntGaugeVec,
    /// Requests to each HTTP upstream that waited for a connection (all in use).
    pub upstream_connection_waits: IntCounterVec,
    /// Sessions held with each upstream, by whether client sessions share them.
    pub upstream_sessions: IntGaugeVec,
    /// Requests refused at admission (a cap was reached), by tenant and reason.
    pub admission_rejected: IntCounterVec,
    /// Connections closed as they were accepted and requests refused because one source
    /// address held its share of the listener, by limit (`connections`, `unfinished_requests`).
    pub peer_refusals: IntCounterVec,
    /// Messages that found an actor's mailbox or a stream full, by reason.
    pub mailbox_full: IntCounterVec,
    /// HTTP responses by HTTP method and status.
    pub http_responses: IntCounterVec,
    /// 1 when the upstream answered its last `tools/list`, else 0, by upstream.
    pub upstream_reachable: IntGaugeVec,
    /// Verifying keys held of each authorization server (0: its tokens cannot be checked).
    pub oauth_keys: IntGaugeVec,
    /// 1 while the last read of an authorization server's keys failed.
    pub oauth_keys_stale: IntGaugeVec,
    /// Access tokens exchanged for callers kept now, by upstream (token exchange).
    pub upstream_exchanged_tokens: IntGaugeVec,
    /// Callers' access tokens kept now, to exchange.
    pub oauth_caller_tokens: IntGauge,
    /// Tool name collisions in the catalog now.
    pub catalog_collisions: IntGauge,
    /// Tool catalogs kept, one per distinct set of relayed client capabilities.
    pub tool_catalogs: IntGauge,
    /// Sessions given the catalog of a client declaring no capabilities because
    /// `federation.max_tool_catalogs` was reached.
    pub tool_catalog_fallbacks: IntCounterVec,
    /// Process start, for uptime.
    pub start_time: IntGauge,
    /// Client requests by tenant and MCP method: count, duration, errors.
    pub requests: RequestMetrics,
    /// 1 while the gateway is ready (what `/readyz` answers), else 0.
    pub ready: IntGauge,
    /// 1 for each upstream a tenant may use: dashboards join upstream series on it to filter
    /// upstreams by tenant.
    pub tenant_upstreams: IntGaugeVec,
    /// Requests refused for their credentials, by reason (missing, malformed, unknown_key,
    /// invalid_token, token_expired).
    pub auth_failures: IntCounterVec,
    /// Requests refused by a rate limit (HTTP 429), by tenant and reason (the bucket).
    pub rate_limited: IntCounterVec,
    /// Tool calls refused by a `[tenant.tools]` rate, by tenant and the glob (or upstream)
    /// configured.
    pub tool_rate_limited: IntCounterVec,
    /// Requests at a profile's endpoint (`/mcp/<profile>`), by tenant, profile and outcome
    /// (served, refused).
    pub profile_requests: IntCounterVec,
    /// `find_tools` searches, by tenant and profile ("" at the tenant's own endpoint).
    pub tool_searches: IntCounterVec,
    /// How long a `find_tools` search takes in the gateway (the index built anew included).
    pub tool_search_seconds: prometheus::Histogram,
    /// tasks/get, tasks/result and tasks/cancel naming a task the requestor cannot see, by tenant.
    pub task_lookup_failures: IntCounterVec,
    /// Configuration reloads by status (applied, rejected).
    pub config_reloads: IntCounterVec,
    /// Sessions closed after being idle, by tenant.
    pub sessions_expired: IntCounterVec,
    /// Idle sessions closed to make room for a new one of the same principal (a tenant at its
    /// session cap, `limits.at_max_sessions = "reclaim_idle"`), by tenant.
    pub sessions_reclaimed: IntCounterVec,
    /// Sessions this replica loaded from the shared store (created at another replica), by tenant.
    pub sessions_loaded: IntCounterVec,
    /// Upstream sessions an idle client session let go (`server.upstream_release_secs`), by tenant.
    pub upstream_sessions_released: IntCounterVec,
    /// Actors that stopped abnormally and were restarted from the store, by reason.
    pub actor_restarts: IntCounterVec,
    /// Tasks taken over from a gateway process that stopped (a restart, a replica's death),
    /// by outcome (`followed` again, or `failed`).
    pub tasks_recovered: IntCounterVec,
    /// Task store operations' latency, by operation.
    pub store_duration: HistogramVec,
    /// Task store operations that failed in the backend (not a refused change), by operation.
    pub store_errors: IntCounterVec,
    /// Events between replicas: published, lost (could not be published) or received, by kind.
    pub store_events: IntCounterVec,
    /// 1 while the task store answers, 0 while it does not.
    pub store_up: IntGauge,
    /// Task status changes waiting for a failing store, and the bytes of their results.
    pub store_unwritten_changes: IntGauge,
    pub store_unwritten_bytes: IntGauge,
    /// Client streams ended because their client stopped reading and their byte or message
    /// budget ran out, by tenant and stream (`request` or `get`).
    pub streams_dropped: IntCounterVec,
    /// Messages (notifications) dropped from client streams because they did not fit: the
    /// client read slower than its upstreams talked.
    pub stream_messages_dropped: IntCounterVec,
    /// Bytes queued on client streams now, all sessions.
    pub stream_bytes: IntGauge,
    /// Bytes of task results held now (this process's tasks), by tenant.
    pub result_bytes: IntGaugeVec,
}

impl Metrics {
    /// Creates and registers every metric.
    pub fn new() -> Metrics {
        let registry = Registry::new();
        let names = std::cell::RefCell::new(vec![("taskgate_build_info".to_owned(), false)]);
        let named = |name: &str, histogram: bool| names.borrow_mut().push((name.to_owned(), histogram));
        let gauge = |name: &str, help: &str, labels: &[&str]| {
            named(name, false);
            let g = IntGaugeVec::new(Opts::new(name, help), labels).expect("valid gauge");
            registry.register(Box::new(g.clone())).expect("unique metric");
            g
        };
        let counter = |name: &str, help: &str, labels: &[&str]| {
            named(name, false);
            let c = IntCounterVec::new(Opts::new(name, help), labels).expect("valid counter");
            registry.register(Box::new(c.clone())).expect("unique metric");
            c
        };
        let histogram = |name: &str, help: &str, labels: &[&str], buckets: &[f64]| {
            named(name, true);
            let h = HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets.to_vec()), labels)
                .expect("valid histogram");
            registry.register(Box::new(h.clone())).expect("unique metric");
            h
        };
        let single = |name: &str, help: &str| {
            named(name, false);
            let g = IntGauge::new(name, help).expect("valid gauge");
            registry.register(Box::new(g.clone())).expect("unique metric");
            g
        };
        let build_info = IntGauge::with_opts(
            Opts::new("taskgate_build_info", "Build information; always 1")
                .const_label("version", env!("CARGO_PKG_VERSION")),
        )
        .expect("valid gauge");
        registry.register(Box::new(build_info.clone())).expect("unique metric");
        build_info.set(1);
        registry.register(Box::new(ProcessCollector::new())).expect("unique metrics");
        let mut metrics = Metrics {
            names: Vec::new(),
            sessions_active: gauge("taskgate_sessions_active", "Client sessions open", &["tenant"]),
            tasks: gauge(
                "taskgate_tasks",
                "Tasks held, live and finished until their ttl, by status",
                &["tenant", "status"],
            ),
            tasks_created: counter("taskgate_tasks_created_total", "Tasks created", &["tenant", "upstream"]),
            tasks_finished: counter(
                "taskgate_tasks_finished_total",
                "Tasks that reached a terminal status",
                &["tenant", "upstream", "status"],
            ),
            task_duration: histogram(
                "taskgate_task_duration_seconds",
                "Time from task creation to its terminal status",
                &["tenant", "upstream", "status"],
                TASK_BUCKETS,
            ),
            task_actors: single("taskgate_task_actors", "Task actors alive"),
            requests_in_progress: single("taskgate_requests_in_progress", "Client requests in progress"),
            progress_actors: single("taskgate_progress_actors", "Progress actors alive (live progress tokens)"),
            reply_streams_held: single(
                "taskgate_reply_streams_held",
                "Client reply streams their connection left, held for the client to resume (Last-Event-ID)",
            ),
            task_polls: counter("taskgate_task_polls_total", "tasks/get requests", &["tenant"]),
            task_polls_early: counter(
                "taskgate_task_polls_early_total",
                "tasks/get requests arriving sooner than the task's suggested pollInterval",
                &["tenant"],
            ),
            task_result_waiters: gauge("taskgate_task_result_waiters", "Requests blocked in tasks/result", &["tenant"]),
            progress_notifications: counter(
                "taskgate_progress_notifications_total",
                "Progress notifications from upstreams by outcome (relayed, coalesced, dropped)",
                &["outcome"],
            ),
            cancellations: counter(
                "taskgate_cancellations_total",
                "Client cancellations by outcome (received, forwarded, ignored)",
                &["outcome", "reason"],
            ),
            upstream_request_duration: histogram(
                "taskgate_upstream_request_duration_seconds",
                "Upstream request latency",
                &["upstream", "method"],
                LATENCY_BUCKETS,
            ),
            upstream_errors: counter("taskgate_upstream_errors_total", "Upstream failures", &["upstream", "reason"]),
            upstream_streams: gauge(
                "taskgate_upstream_streams",
                "Long-lived streams open to an upstream (GET or subscriptions/listen), each a connection",
                &["upstream"],
            ),
            upstream_connections: gauge(
                "taskgate_upstream_connections",
                "Connections to an HTTP upstream in use (requests in flight, streams open), at most its max_connections",
                &["upstream"],
            ),
            upstream_sessions: gauge(
                "taskgate_upstream_sessions",
                "Sessions held with an upstream (the catalog's included), shared by client sessions or not",
                &["upstream", "shared"],
            ),
            upstream_connection_waits: counter(
                "taskgate_upstream_connection_waits_total",
                "Requests to an HTTP upstream that waited for a connection (all of max_connections in use)",
                &["upstream"],
            ),
            admission_rejected: counter(
                "taskgate_admission_rejected_total",
                "Requests refused because a cap was reached",
                &["tenant", "reason"],
            ),
            peer_refusals: counter(
                "taskgate_peer_refusals_total",
                "Connections closed at accept and requests refused because one source address held its share (limit: connections, unfinished_requests)",
                &["limit"],
            ),
            mailbox_full: counter(
                "taskgate_mailbox_full_total",
                "Messages that found an actor mailbox or an outbound stream full",
                &["reason"],
            ),
            http_responses: counter("taskgate_http_responses_total", "HTTP responses", &["http_method", "code"]),
            upstream_reachable: gauge(
                "taskgate_upstream_reachable",
                "1 when the upstream answered its last tools/list, else 0",
                &["upstream"],
            ),
            oauth_keys: gauge(
                "taskgate_oauth_keys",
                "Verifying keys held of each authorization server (0: its tokens cannot be checked)",
                &["issuer"],
            ),
            oauth_keys_stale: gauge(
                "taskgate_oauth_keys_stale",
                "1 while the last read of an authorization server's keys failed (those held keep serving)",
                &["issuer"],
            ),
            upstream_exchanged_tokens: gauge(
                "taskgate_upstream_exchanged_tokens",
                "Access tokens exchanged for callers kept now, by upstream (token exchange, one per principal)",
                &["upstream"],
            ),
            oauth_caller_tokens: single(
                "taskgate_oauth_caller_tokens",
                "Callers' OAuth access tokens kept now, to exchange for upstreams",
            ),
            catalog_collisions: single("taskgate_catalog_collisions", "Tool names offered by more than one upstream"),
            tool_catalogs: single(
                "taskgate_tool_catalogs",
                "Tool catalogs kept, one per distinct set of relayed client capabilities",
            ),
            tool_catalog_fallbacks: counter(
                "taskgate_tool_catalog_fallbacks_total",
                "Sessions given the tools of a client declaring no capabilities (federation.max_tool_catalogs reached)",
                &[],
            ),
            start_time: single("taskgate_start_time_seconds", "Start time of the process since the Unix epoch"),
            requests: RequestMetrics::new(
                counter("taskgate_requests_total", "Client requests received, refused ones included", &["tenant", "method"]),
                counter(
                    "taskgate_request_errors_total",
                    "Client requests answered with an error (a JSON-RPC error or an HTTP refusal)",
                    &["tenant", "method"],
                ),
                histogram(
                    "taskgate_request_duration_seconds",
                    "Client request duration, until its response was sent (the end of its stream)",
                    &["tenant", "method"],
                    LATENCY_BUCKETS,
                ),
            ),
            ready: single("taskgate_ready", "1 while the gateway is ready (what /readyz answers), else 0"),
            tenant_upstreams: gauge(
                "taskgate_tenant_upstream",
                "1 for each upstream a tenant may use (join upstream series on it to filter by tenant)",
                &["tenant", "upstream"],
            ),
            auth_failures: counter(
                "taskgate_auth_failures_total",
                "Requests refused for their credentials",
                &["reason"],
            ),
            rate_limited: counter(
                "taskgate_rate_limited_total",
                "Requests refused by a rate limit (HTTP 429)",
                &["tenant", "reason"],
            ),
            tool_rate_limited: counter(
                "taskgate_tool_rate_limited_total",
                "Tool calls refused by a rate of [tenant.tools] (HTTP 429), by the glob or upstream:<name> configured",
                &["tenant", "pattern"],
            ),
            profile_requests: counter(
                "taskgate_profile_requests_total",
                "Requests at a profile's endpoint (/mcp/<profile>), by tenant, profile and outcome (served, refused)",
                &["tenant", "profile", "outcome"],
            ),
            tool_searches: counter(
                "taskgate_tool_searches_total",
                "find_tools searches (search mode), by tenant and profile (\"\" at the tenant's own endpoint)",
                &["tenant", "profile"],
            ),
            tool_search_seconds: histogram(
                "taskgate_tool_search_seconds",
                "Time a find_tools search takes in the gateway",
                &[],
                &[0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25],
            )
            .with_label_values::<&str>(&[]),
            task_lookup_failures: counter(
                "taskgate_task_lookup_failures_total",
                "Task look-ups naming a task that is unknown, expired or another requestor's",
                &["tenant"],
            ),
            config_reloads: counter("taskgate_config_reloads_total", "Configuration reloads", &["outcome"]),
            sessions_expired: counter(
                "taskgate_sessions_expired_total",
                "Sessions closed after being idle",
                &["tenant"],
            ),
            upstream_sessions_released: counter(
                "taskgate_upstream_sessions_released_total",
                "Upstream sessions (and their stdio processes) an idle client session let go",
                &["tenant"],
            ),
            sessions_reclaimed: counter(
                "taskgate_sessions_reclaimed_total",
                "Idle sessions closed to make room for a new session of the same principal at its tenant's cap",
                &["tenant"],
            ),
            sessions_loaded: counter(
                "taskgate_sessions_loaded_total",
                "Sessions this replica loaded from the shared store to serve a request (created at another replica)",
                &["tenant"],
            ),
            actor_restarts: counter(
                "taskgate_actor_restarts_total",
                "Actors that stopped abnormally and were restarted from the store",
                &["reason"],
            ),
            tasks_recovered: counter(
                "taskgate_tasks_recovered_total",
                "Tasks taken over from a gateway process that stopped, by outcome (followed again or failed)",
                &["outcome"],
            ),
            store_duration: histogram(
                "taskgate_store_operation_duration_seconds",
                "Task store operation latency",
                &["operation"],
                &[0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 2.5],
            ),
            store_errors: counter(
                "taskgate_store_errors_total",
                "Task store operations that failed in the backend",
                &["operation"],
            ),
            store_events: counter(
                "taskgate_store_events_total",
                "Events between replicas: published, lost or received, by kind",
                &["direction", "kind"],
            ),
            store_up: single("taskgate_store_up", "1 while the task store answers, 0 while it does not"),
            store_unwritten_changes: single(
                "taskgate_store_unwritten_changes",
                "Task status changes waiting for a failing store to take them",
            ),
            store_unwritten_bytes: single(
                "taskgate_store_unwritten_bytes",
                "Bytes of the results of task status changes waiting for a failing store",
            ),
            streams_dropped: counter(
                "taskgate_client_streams_dropped_total",
                "Client streams ended because the client read nothing for server.stream_stall_secs while messages for it were dropped",
                &["tenant", "stream"],
            ),
            stream_messages_dropped: counter(
                "taskgate_client_stream_messages_dropped_total",
                "Messages dropped from client streams because they did not fit (the client read slower than its upstreams talked): notifications, and requests relayed to the client",
                &["tenant", "stream"],
            ),
            stream_bytes: single("taskgate_client_stream_bytes", "Bytes queued on client streams, all sessions"),
            result_bytes: gauge(
                "taskgate_task_result_bytes",
                "Bytes of task results held (this process's tasks)",
                &["tenant"],
            ),
            registry,
        };
        metrics.names = names.into_inner();
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        metrics.start_time.set(now.as_secs() as i64);
        metrics
    }

    /// The text exposition format.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut out).expect("text encoding never fails");
        String::from_utf8(out).expect("the text format is UTF-8")
    }

    /// Every metric name a scrape can contain (histograms with their series suffixes).
    pub fn exported_names(&self) -> Vec<String> {
        let mut names = Vec::new();
        for (name, histogram) in &self.names {
            if *histogram {
                for suffix in ["_bucket", "_sum", "_count"] {
                    names.push(format!("{name}{suffix}"));
                }
            }
            names.push(name.clone());
        }
        names.extend(ProcessCollector::names().map(str::to_owned));
        names
    }

    /// Says which upstreams each tenant may use (at start and on every reload).
    pub fn tenant_upstreams(&self, pairs: &[(String, String)]) {
        self.tenant_upstreams.reset();
        for (tenant, upstream) in pairs {
            self.tenant_upstreams.with_label_values(&[tenant, upstream]).set(1);
        }
    }

    /// Records one upstream request.
    pub fn upstream_request(&self, upstream: &str, method: &str, took: Duration, error: Option<&'static str>) {
        self.upstream_request_duration.with_label_values(&[upstream, method]).observe(took.as_secs_f64());
        if let Some(reason) = error {
            self.upstream_errors.with_label_values(&[upstream, reason]).inc();
        }
    }
}

impl taskgate_upstream::RequestObserver for Metrics {
    fn observe(&self, upstream: &str, method: &str, took: Duration, error: Option<&'static str>) {
        self.upstream_request(upstream, method, took, error);
    }

    fn stream(&self, upstream: &str, open: bool) {
        self.upstream_streams.with_label_values(&[upstream]).add(if open { 1 } else { -1 });
    }

    fn session(&self, upstream: &str, shared: bool, open: bool) {
        let shared = if shared { "true" } else { "false" };
        self.upstream_sessions.with_label_values(&[upstream, shared]).add(if open { 1 } else { -1 });
    }

    fn connections_gauge(&self, upstream: &str) -> Option<Box<dyn Fn(usize) + Send + Sync>> {
        let gauge = self.upstream_connections.with_label_values(&[upstream]);
        Some(Box::new(move |in_use| gauge.set(in_use as i64)))
    }

    fn connection_waits(&self, upstream: &str) -> Option<Box<dyn Fn() + Send + Sync>> {
        let waits = self.upstream_connection_waits.with_label_values(&[upstream]);
        Some(Box::new(move || waits.inc()))
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_series_exist_at_zero_before_their_first_event() {
        let m = Metrics::new();
        m.initialise(&["acme".into()], &["files".into()]);
        let text = m.render();
        for series in [
            r#"taskgate_cancellations_total{outcome="received",reason="none"} 0"#,
            r#"taskgate_admission_rejected_total{reason="max_sessions",tenant="acme"} 0"#,
            r#"taskgate_upstream_errors_total{reason="timeout",upstream="files"} 0"#,
            r#"taskgate_tasks_finished_total{status="failed",tenant="acme",upstream="files"} 0"#,
            r#"taskgate_task_duration_seconds_count{status="completed",tenant="acme",upstream="files"} 0"#,
            r#"taskgate_mailbox_full_total{reason="session_mailbox"} 0"#,
            r#"taskgate_rate_limited_total{reason="tenant_rate",tenant="acme"} 0"#,
            r#"taskgate_client_streams_dropped_total{stream="request",tenant="acme"} 0"#,
        ] {
            assert!(text.contains(series), "missing {series}");
        }
    }

    #[test]
    fn names_follow_prometheus_conventions() {
        let m = Metrics::new();
        m.upstream_request("u", "tools/call", Duration::from_millis(3), Some("timeout"));
        m.sessions_active.with_label_values(&["t"]).set(1);
        let text = m.render();
        assert!(text.contains("taskgate_upstream_errors_total{reason=\"timeout\",upstream=\"u\"} 1"), "{text}");
        for name in m.exported_names() {
            assert!(name.starts_with("taskgate_") || name.starts_with("process_"), "{name}");
            assert!(!name.contains("__"), "{name}");
        }
        // Types: a value that goes up and down is no counter.
        assert!(text.contains("# TYPE taskgate_build_info gauge"), "{text}");
        assert!(text.contains("# TYPE process_cpu_seconds_total counter"), "{text}");
        assert!(m.exported_names().contains(&"taskgate_upstream_request_duration_seconds_bucket".to_string()));
    }

    #[test]
    fn every_label_name_has_one_listed_meaning() {
        let m = Metrics::new();
        m.initialise(&["acme".into()], &["files".into()]);
        m.tenant_upstreams(&[("acme".into(), "files".into())]);
        drop(m.requests.meter("acme", "tools/call"));
        m.http_responses.with_label_values(&["POST", "200"]).inc();
        m.tasks.with_label_values(&["acme", "working"]).set(1);
        m.upstream_request("files", "tools/call", Duration::from_millis(1), None);
        m.oauth_keys.with_label_values(&["https://as.example"]).set(1);
        m.store_duration.with_label_values(&["get"]).observe(0.001);
        let mut seen = std::collections::BTreeSet::new();
        for family in m.registry.gather() {
            for metric in family.get_metric() {
                for label in metric.get_label() {
                    seen.insert(label.name().to_owned());
                }
            }
        }
        let listed: std::collections::BTreeSet<String> = LABELS.iter().map(|(n, _)| n.to_string()).collect();
        let unlisted: Vec<_> = seen.difference(&listed).collect();
        assert!(unlisted.is_empty(), "label names without a meaning in LABELS: {unlisted:?}");
        assert!(seen.contains("outcome") && seen.contains("code") && seen.contains("method"));
    }

    #[test]
    fn a_request_is_counted_timed_and_its_error_counted() {
        let m = Metrics::new();
        drop(m.requests.meter("acme", "tools/call"));
        let mut failed = m.requests.meter("acme", "made/up");
        failed.fail();
        drop(failed);
        let text = m.render();
        for series in [
            r#"taskgate_requests_total{method="tools/call",tenant="acme"} 1"#,
            r#"taskgate_request_errors_total{method="tools/call",tenant="acme"} 0"#,
            r#"taskgate_request_duration_seconds_count{method="tools/call",tenant="acme"} 1"#,
            r#"taskgate_requests_total{method="other",tenant="acme"} 1"#,
            r#"taskgate_request_errors_total{method="other",tenant="acme"} 1"#,
        ] {
            assert!(text.contains(series), "missing {series} in {text}");
        }
    }
}
