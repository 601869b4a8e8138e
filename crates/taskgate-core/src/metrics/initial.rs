//! The series whose labels are known in advance, created at 0 at start and on every reload.

use super::Metrics;

impl Metrics {
    /// [`Metrics::initialise`]'s part for the configuration's own names: each tenant's
    /// `[tenant.tools]` rates, by the glob or `upstream:<name>` written.
    pub fn initialise_tool_rates(&self, patterns: &[(String, String)]) {
        for (tenant, pattern) in patterns {
            self.tool_rate_limited.with_label_values(&[tenant, pattern]);
        }
    }

    /// The series of each tenant's endpoints ("": its own), at 0.
    pub fn initialise_profiles(&self, endpoints: &[(String, String)]) {
        for (tenant, profile) in endpoints {
            self.tool_searches.with_label_values(&[tenant, profile]);
            if !profile.is_empty() {
                for outcome in ["served", "refused"] {
                    self.profile_requests.with_label_values(&[tenant, profile, outcome]);
                }
            }
        }
    }

    /// Creates every series whose labels are known in advance at 0 (Prometheus instrumentation
    /// practice): a fresh `/metrics` already has them, so dashboards show 0 rather than "No
    /// data" and `absent()` alerts do not misfire. Called at start and on every reload (new
    /// tenants). Series that name an id never exist (invariant 9).
    pub fn initialise(&self, tenants: &[String], upstreams: &[String]) {
        self.ready.set(1);
        self.tool_catalog_fallbacks.with_label_values::<&str>(&[]);
        const TASK_ENDS: [&str; 3] = ["completed", "failed", "cancelled"];
        const ADMISSION: [&str; 10] = [
            "max_sessions",
            "tenant_max_sessions",
            "session_requests",
            "max_tasks",
            "tenant_max_tasks",
            "result_bytes",
            "tenant_max_streams",
            "max_concurrent_tasks",
            "max_concurrent_tasks_per_principal",
            "store_unwritten",
        ];
        const BUCKETS: [&str; 4] = ["tenant_rate", "principal_rate", "tenant_poll_rate", "principal_poll_rate"];
        const UPSTREAM_ERRORS: [&str; 5] = ["rpc_error", "unavailable", "protocol", "timeout", "overloaded"];
        const STORE_OPERATIONS: [&str; 25] = [
            "create",
            "get",
            "compare_and_set",
            "list",
            "expire",
            "delete",
            "claim_orphans",
            "renew_leases",
            "publish",
            "reserve",
            "release",
            "admit_rates",
            "health",
            "put_input",
            "remove_inputs",
            "inputs",
            "put_session",
            "session",
            "change_session",
            "delete_session",
            "activate",
            "activated",
            "scan_tasks",
            "scan_sessions",
            "describe",
        ];
        const EVENT_KINDS: [&str; 16] = [
            "finished",
            "cancelled",
            "status",
            "progress",
            "input_requested",
            "input_responses",
            "session_message",
            "session_client",
            "session_ended",
            "session_changed",
            "session_stream",
            "identity_activated",
            "upstream_restart",
            "retry_forwarded",
            "retry_reply",
            "retry_closed",
        ];
        for (status, reason) in [
            ("received", "none"),
            ("forwarded", "none"),
            ("ignored", "malformed"),
            ("ignored", "unknown_request"),
            ("ignored", "task_augmented"),
        ] {
            self.cancellations.with_label_values(&[status, reason]);
        }
        for status in ["relayed", "coalesced", "dropped"] {
            self.progress_notifications.with_label_values(&[status]);
        }
        for limit in ["connections", "unfinished_requests"] {
            self.peer_refusals.with_label_values(&[limit]);
        }
        for reason in ["session_mailbox", "session_notification", "task_mailbox"] {
            self.mailbox_full.with_label_values(&[reason]);
        }
        for reason in ["missing", "malformed", "unknown_key", "token_expired", "invalid_token", "refused_tokens"] {
            self.auth_failures.with_label_values(&[reason]);
        }
        for status in ["applied", "rejected"] {
            self.config_reloads.with_label_values(&[status]);
        }
        self.actor_restarts.with_label_values(&["task_actor_crashed"]);
        for outcome in ["followed", "failed"] {
            self.tasks_recovered.with_label_values(&[outcome]);
        }
        for operation in STORE_OPERATIONS {
            self.store_errors.with_label_values(&[operation]);
        }
        for direction in ["published", "lost", "received"] {
            for kind in EVENT_KINDS {
                self.store_events.with_label_values(&[direction, kind]);
            }
        }
        for upstream in upstreams {
            self.upstream_streams.with_label_values(&[upstream]);
            self.upstream_connections.with_label_values(&[upstream]);
            self.upstream_connection_waits.with_label_values(&[upstream]);
            for shared in ["true", "false"] {
                self.upstream_sessions.with_label_values(&[upstream, shared]);
            }
            for reason in UPSTREAM_ERRORS {
                self.upstream_errors.with_label_values(&[upstream, reason]);
            }
        }
        for tenant in tenants {
            for reason in ADMISSION {
                self.admission_rejected.with_label_values(&[tenant, reason]);
            }
            for bucket in BUCKETS {
                self.rate_limited.with_label_values(&[tenant, bucket]);
            }
            for stream in ["request", "get"] {
                self.streams_dropped.with_label_values(&[tenant, stream]);
                self.stream_messages_dropped.with_label_values(&[tenant, stream]);
            }
            self.task_lookup_failures.with_label_values(&[tenant]);
            self.requests.initialise(tenant);
            self.sessions_expired.with_label_values(&[tenant]);
            self.sessions_reclaimed.with_label_values(&[tenant]);
            self.sessions_loaded.with_label_values(&[tenant]);
            self.upstream_sessions_released.with_label_values(&[tenant]);
            self.task_polls.with_label_values(&[tenant]);
            self.task_polls_early.with_label_values(&[tenant]);
            self.task_result_waiters.with_label_values(&[tenant]);
            for upstream in upstreams {
                self.tasks_created.with_label_values(&[tenant, upstream]);
                for status in TASK_ENDS {
                    self.tasks_finished.with_label_values(&[tenant, upstream, status]);
                    self.task_duration.with_label_values(&[tenant, upstream, status]);
                }
            }
        }
    }
}
