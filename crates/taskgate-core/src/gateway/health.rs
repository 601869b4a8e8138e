//! What `/readyz` and `taskgate_ready` say: the task store answers, every upstream marked
//! `required` answers, every authorization server whose JWTs must be checked has keys, and the
//! gateway is not shutting down.

use super::Gateway;
use crate::router::UpstreamHealth;
use crate::tenants::oauth::IssuerHealth;

/// The gateway's readiness and what it was made of.
pub struct Readiness {
    pub ready: bool,
    /// `Err` says why the store does not answer.
    pub store: Result<(), String>,
    pub upstreams: Vec<UpstreamHealth>,
    pub oauth: Vec<IssuerHealth>,
}

impl Gateway {
    /// Checks readiness now (each upstream is pinged at most once however many ask at once).
    pub async fn ready_report(&self) -> Readiness {
        let (upstreams_ready, upstreams) = self.readiness().await;
        let store = self.store_health().await;
        // An authorization server whose keys were never read: its JWTs cannot be checked (one
        // that only introspects needs none).
        let oauth = self.oauth_health();
        let ready = upstreams_ready && store.is_ok() && oauth.iter().all(|i| i.keys > 0 || !i.needs_keys);
        self.metrics().ready.set(i64::from(ready));
        Readiness { ready, store, upstreams, oauth }
    }
}
