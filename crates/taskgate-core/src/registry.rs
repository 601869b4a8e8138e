//! The live client sessions, by id, bounded by `server.max_sessions`.

use std::collections::HashMap;

use actix::Addr;
use parking_lot::RwLock;

use crate::session::SessionActor;

/// Who is calling: the tenant and the principal within it. Sessions and (later) tasks are
/// bound to it; until tenants are configured every caller is the anonymous identity.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Identity {
    /// The tenant id.
    pub tenant: String,
    /// The principal (user or service) within the tenant.
    pub principal: String,
}

impl Identity {
    /// The identity of unauthenticated local use.
    pub fn anonymous() -> Identity {
        Identity { tenant: "anonymous".into(), principal: "anonymous".into() }
    }
}

#[derive(Clone)]
pub(crate) struct SessionEntry {
    pub addr: Addr<SessionActor>,
    pub identity: Identity,
    pub protocol_version: String,
}

/// The session table.
pub(crate) struct Sessions {
    map: RwLock<HashMap<String, SessionEntry>>,
    max: usize,
}

impl Sessions {
    pub fn new(max: usize) -> Sessions {
        Sessions { map: RwLock::new(HashMap::new()), max }
    }

    /// Reserves room for one more session; false when at the limit.
    pub fn insert(&self, id: String, entry: SessionEntry) -> bool {
        let mut map = self.map.write();
        if map.len() >= self.max {
            return false;
        }
        map.insert(id, entry);
        true
    }

    pub fn is_full(&self) -> bool {
        self.map.read().len() >= self.max
    }

    /// The session, if it exists and belongs to `identity`. A session of another identity is
    /// reported exactly like one that does not exist.
    pub fn get(&self, id: &str, identity: &Identity) -> Option<SessionEntry> {
        self.map.read().get(id).filter(|e| &e.identity == identity).cloned()
    }

    pub fn remove(&self, id: &str) -> Option<SessionEntry> {
        self.map.write().remove(id)
    }

    pub fn len(&self) -> usize {
        self.map.read().len()
    }

    /// Sessions open per tenant.
    pub fn count_by_tenant(&self) -> HashMap<String, usize> {
        let mut counts = HashMap::new();
        for entry in self.map.read().values() {
            *counts.entry(entry.identity.tenant.clone()).or_default() += 1;
        }
        counts
    }

    /// The sessions of one identity (where its task notifications go).
    pub fn of(&self, identity: &Identity) -> Vec<Addr<SessionActor>> {
        self.map.read().values().filter(|e| &e.identity == identity).map(|e| e.addr.clone()).collect()
    }

    pub fn all(&self) -> Vec<Addr<SessionActor>> {
        self.map.read().values().map(|e| e.addr.clone()).collect()
    }
}
