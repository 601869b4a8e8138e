//! [`TaskContext`]: what a task actor, the Supervisor, recovery and the replicas' loops share:
//! the configuration, the clock, the metrics, the tenants' rules, the upstreams, the task
//! state, and where crashed actors go to be restarted. Generic over the actors' handle (`A`),
//! so the task layer's lower files name no actor type.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};

use actix::Recipient;
use foldhash::HashMap;
use taskgate_config::Config;
use taskgate_upstream::Connector;

use super::requestor_sessions::RequestorSessions;
use super::state::TaskState;
use super::work::Restart;
use crate::clock::Clock;
use crate::metrics::Metrics;
use crate::tenants::Tenancy;

/// What the task layer's actors and loops share.
pub(crate) struct TaskContext<A> {
    pub config: Arc<Config>,
    pub clock: Arc<dyn Clock>,
    /// The Prometheus metrics.
    pub metrics: Arc<Metrics>,
    /// Tenants, credentials, rate buckets and task counts.
    pub tenancy: Arc<Tenancy>,
    /// This process's id among the replicas sharing the store (a v4 UUID per start): the
    /// tasks it runs are marked with it.
    pub replica: String,
    /// The upstreams by name.
    pub connectors: Arc<HashMap<String, Connector>>,
    /// The task state: the store, live task actors, the upstream maps, waiters (invariant 8:
    /// what another replica would need lives in its store).
    pub tasks: Arc<TaskState<A>>,
    /// The client sessions of this replica (the Supervisor closes idle ones).
    pub sessions: Arc<dyn RequestorSessions>,
    /// The Supervisor, for actors that crashed.
    pub supervisor: OnceLock<Recipient<Restart>>,
    /// 2026-07-28 retries passed between replicas (the replicas' loops deliver their events).
    pub retries: Arc<crate::retry_relay::RetryRelay>,
    /// Set as the gateway shuts down, before it stops the upstreams: what the tasks running here
    /// lose then (a wrapped call, a stdio process) ends with the gateway, not by the upstream's
    /// doing.
    pub stopping: AtomicBool,
}
