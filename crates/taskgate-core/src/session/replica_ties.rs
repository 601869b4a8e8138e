//! [`ReplicaTies`]: what ties one replica's copy of a client session to the others' (the data;
//! what is done with it is `across_replicas.rs`).

use foldhash::{HashMap, HashMapExt};

/// What ties a copy of the session to the others.
pub(crate) struct ReplicaTies {
    /// The resources (as the client names them) its upstream sessions are subscribed to.
    pub held_subscriptions: std::collections::BTreeSet<String>,
    /// Of those, the ones it subscribed to for the GET stream it holds, once the upstream took
    /// them: their updates from other copies are not passed on (its own arrive).
    pub confirmed: std::collections::BTreeSet<String>,
    /// Its own sessions at HTTP upstreams as recorded for every replica serving it, which
    /// continue them.
    pub upstream_refs: HashMap<String, taskgate_upstream::SessionResume>,
    /// The replica holding the client's GET stream, when another does: as recorded when the
    /// copy was loaded, then as heard.
    pub stream_at: Option<String>,
}

impl Default for ReplicaTies {
    fn default() -> ReplicaTies {
        ReplicaTies {
            held_subscriptions: Default::default(),
            confirmed: Default::default(),
            upstream_refs: HashMap::new(),
            stream_at: None,
        }
    }
}
