//! The sessions serving 2026-07-28 requests, pooled by tenant, principal and the client
//! capabilities the gateway relays.

use foldhash::HashMap;

/// The pooled sessions' ids, by what a pooled session is shared by: tenant, principal, and the
/// canonical form of the client capabilities the gateway relays (what its upstream sessions
/// declare). Nested so that a request finds its session by the names it carries, without
/// building a key.
#[derive(Default)]
pub(super) struct Pool(HashMap<String, HashMap<String, HashMap<crate::router::Caps, String>>>);

impl Pool {
    pub(super) fn get(&self, tenant: &str, principal: &str, caps: &str) -> Option<&String> {
        self.0.get(tenant)?.get(principal)?.get(caps)
    }

    pub(super) fn insert(&mut self, tenant: &str, principal: &str, caps: &str, id: String) {
        let principals = self.0.entry(tenant.to_owned()).or_default();
        principals.entry(principal.to_owned()).or_default().insert(caps.to_owned(), id);
    }

    /// Keeps the sessions `keep` says are still there.
    pub(super) fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        self.0.retain(|_, principals| {
            principals.retain(|_, sessions| {
                sessions.retain(|_, id| keep(id));
                !sessions.is_empty()
            });
            !principals.is_empty()
        });
    }

    pub(super) fn len(&self) -> usize {
        self.0.values().flat_map(HashMap::values).map(HashMap::len).sum()
    }
}
