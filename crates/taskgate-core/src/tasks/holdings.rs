//! What each tenant holds in the task store, in count and in result bytes, so that one tenant
//! cannot take all of `tasks.max_tasks` or `tasks.max_result_bytes_total` (its share, see
//! [`crate::tenants::Shares`]).
//!
//! This process counts the tasks it created until their ttl has passed (the Supervisor prunes
//! them on every sweep, whatever deleted them): a restart starts from zero, and with Redis each
//! replica counts its own.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

/// One task held (every task this process created has one: kept small).
struct Holding {
    /// The one copy of the tenant's name the table keeps.
    tenant: Arc<str>,
    result_bytes: usize,
    /// [`NEVER`] for a task without a ttl.
    expires_at_ms: u64,
}

const NEVER: u64 = u64::MAX;

/// A tenant's totals.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    /// Tasks held.
    pub tasks: usize,
    /// Bytes of results held.
    pub result_bytes: usize,
}

#[derive(Default)]
struct Table {
    /// Keyed by the task id the rest of the gateway shares ([`Holdings::shared_id`]).
    by_task: HashMap<Arc<str>, Holding>,
    by_tenant: HashMap<Arc<str>, Held>,
    result_bytes: usize,
}

/// Every task this process created and that is still held.
#[derive(Default)]
pub struct Holdings {
    table: Mutex<Table>,
}

impl Table {
    /// The tenant's totals, under the one copy of its name.
    fn tenant(&mut self, tenant: &str) -> (Arc<str>, &mut Held) {
        let name = match self.by_tenant.get_key_value(tenant) {
            Some((name, _)) => name.clone(),
            None => Arc::from(tenant),
        };
        let held = self.by_tenant.entry(name.clone()).or_default();
        (name, held)
    }
}

/// Why a result does not fit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TooLarge {
    /// The tenant's share of result bytes.
    Tenant { limit: usize },
    /// `tasks.max_result_bytes_total`.
    Gateway { limit: usize },
}

impl Holdings {
    /// One more task for `tenant` unless it holds `share` already.
    pub fn admit(&self, task_id: &str, tenant: &str, expires_at_ms: Option<u64>, share: usize) -> Result<(), usize> {
        let mut table = self.table.lock();
        let (tenant, held) = table.tenant(tenant);
        if held.tasks >= share {
            if held.tasks == 0 {
                table.by_tenant.remove(&tenant);
            }
            return Err(share);
        }
        held.tasks += 1;
        let holding = Holding { tenant, result_bytes: 0, expires_at_ms: expires_at_ms.unwrap_or(NEVER) };
        table.by_task.insert(task_id.into(), holding);
        Ok(())
    }

    /// Holds `bytes` of result for a task, within the tenant's `share` and the gateway's
    /// `total`. A task this process does not hold yet (another replica's, or an earlier run's)
    /// is counted from now on, until `expires_at_ms`.
    pub fn hold_result(
        &self,
        task_id: &str,
        tenant: &str,
        expires_at_ms: Option<u64>,
        bytes: usize,
        (share, total): (usize, usize),
    ) -> Result<(), TooLarge> {
        let mut table = self.table.lock();
        let before = table.by_task.get(task_id).map_or(0, |h| h.result_bytes);
        let tenant_after = table.by_tenant.get(tenant).map_or(0, |h| h.result_bytes) - before + bytes;
        if tenant_after > share {
            return Err(TooLarge::Tenant { limit: share });
        }
        let total_after = table.result_bytes - before + bytes;
        if total_after > total {
            return Err(TooLarge::Gateway { limit: total });
        }
        table.result_bytes = total_after;
        let known = table.by_task.contains_key(task_id);
        let (tenant, held) = table.tenant(tenant);
        held.result_bytes = tenant_after;
        if !known {
            held.tasks += 1;
            let holding = Holding { tenant, result_bytes: 0, expires_at_ms: expires_at_ms.unwrap_or(NEVER) };
            table.by_task.insert(task_id.into(), holding);
        }
        if let Some(holding) = table.by_task.get_mut(task_id) {
            holding.result_bytes = bytes;
        }
        Ok(())
    }

    /// The task is gone (deleted, expired, or never created).
    pub fn release(&self, task_id: &str) {
        let mut table = self.table.lock();
        if let Some(holding) = table.by_task.remove(task_id) {
            table.result_bytes -= holding.result_bytes;
            if let Some(held) = table.by_tenant.get_mut(&holding.tenant) {
                held.tasks -= 1;
                held.result_bytes -= holding.result_bytes;
                if held.tasks == 0 {
                    table.by_tenant.remove(&holding.tenant);
                }
            }
            // A burst's table gives its capacity back once the burst is over.
            if table.by_task.is_empty() && table.by_task.capacity() > 64 {
                table.by_task.shrink_to_fit();
            }
        }
    }

    /// Forgets every task whose ttl has passed.
    pub fn prune(&self, now_ms: u64) {
        let expired: Vec<Arc<str>> = {
            let table = self.table.lock();
            table.by_task.iter().filter(|(_, h)| h.expires_at_ms <= now_ms).map(|(id, _)| id.clone()).collect()
        };
        for id in expired {
            self.release(&id);
        }
    }

    /// The held task's id as the table keeps it, for the gateway's other tables to share (a
    /// task's id is then one copy, however many tables name it).
    pub fn shared_id(&self, task_id: &str) -> Option<Arc<str>> {
        self.table.lock().by_task.get_key_value(task_id).map(|(id, _)| id.clone())
    }

    /// A tenant's totals.
    pub fn held(&self, tenant: &str) -> Held {
        self.table.lock().by_tenant.get(tenant).copied().unwrap_or_default()
    }

    /// Every tenant's totals.
    pub fn by_tenant(&self) -> Vec<(String, Held)> {
        self.table.lock().by_tenant.iter().map(|(t, h)| (t.to_string(), *h)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_holds_at_most_its_share_of_tasks_and_result_bytes() {
        let h = Holdings::default();
        h.admit("a1", "a", Some(100), 2).unwrap();
        h.admit("a2", "a", Some(200), 2).unwrap();
        assert_eq!(h.admit("a3", "a", Some(100), 2), Err(2));
        h.admit("b1", "b", None, 2).unwrap();
        assert_eq!(h.hold_result("a1", "a", None, 60, (100, 150)), Ok(()));
        assert_eq!(h.hold_result("a2", "a", None, 60, (100, 150)), Err(TooLarge::Tenant { limit: 100 }));
        assert_eq!(h.hold_result("b1", "b", None, 100, (100, 150)), Err(TooLarge::Gateway { limit: 150 }));
        assert_eq!(h.held("a"), Held { tasks: 2, result_bytes: 60 });
        h.prune(150);
        assert_eq!(h.held("a"), Held { tasks: 1, result_bytes: 0 });
        assert_eq!(h.hold_result("b1", "b", None, 100, (100, 150)), Ok(()));
        h.release("b1");
        h.release("b1");
        assert_eq!(h.held("b"), Held::default());
        h.admit("a3", "a", Some(1000), 2).unwrap();
        // A task another replica created is counted here from its result on, until its ttl.
        h.hold_result("elsewhere", "c", Some(500), 10, (100, 150)).unwrap();
        assert_eq!(h.held("c"), Held { tasks: 1, result_bytes: 10 });
        h.prune(500);
        assert_eq!(h.held("c"), Held::default());
        // Refused, a tenant holding nothing leaves no entry.
        assert_eq!(h.admit("z1", "z", None, 0), Err(0));
        assert!(h.by_tenant().iter().all(|(t, _)| t != "z"));
    }

    #[test]
    fn a_held_tasks_id_and_its_tenants_name_are_one_copy_each() {
        let h = Holdings::default();
        h.admit("t1", "a", None, 10).unwrap();
        h.admit("t2", "a", None, 10).unwrap();
        let id = h.shared_id("t1").unwrap();
        assert!(Arc::ptr_eq(&id, &h.shared_id("t1").unwrap()));
        assert_eq!(h.shared_id("t3"), None);
        let table = h.table.lock();
        assert!(Arc::ptr_eq(&table.by_task["t1"].tenant, &table.by_task["t2"].tenant));
        assert!(Arc::ptr_eq(&table.by_task["t1"].tenant, table.by_tenant.get_key_value("a").unwrap().0));
    }
}
