//! The Supervisor's limits: request rates as GCRA (a token bucket kept as one "theoretical
//! arrival time" per bucket) and concurrent-task counts held by [`TaskPermit`]s.
//!
//! Both are shared tables behind short locks rather than an actor's mailbox: a check is a few
//! arithmetic operations, and putting every request through one mailbox would make the
//! Supervisor the gateway's bottleneck (invariant 2's spirit: nothing slow in a mailbox).

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use taskgate_config::Rate;

use crate::identity::Identity;

/// A rate check that failed: which bucket, and how long until it admits again.
#[derive(Debug, Clone, PartialEq)]
pub struct Refused {
    /// The bucket that refused.
    pub bucket: Bucket,
    /// Milliseconds until a request would be admitted.
    pub retry_after_ms: u64,
    /// The rate of that bucket.
    pub rate: Rate,
}

/// Which bucket a request is counted in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bucket {
    /// The tenant's requests.
    Tenant,
    /// The principal's requests.
    Principal,
    /// The tenant's polling (`tasks/get`, `tasks/list`).
    TenantPoll,
    /// The principal's polling.
    PrincipalPoll,
}

impl Bucket {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Bucket::Tenant => "tenant_rate",
            Bucket::Principal => "principal_rate",
            Bucket::TenantPoll => "tenant_poll_rate",
            Bucket::PrincipalPoll => "principal_poll_rate",
        }
    }
}

/// GCRA with the arrival time in milliseconds: the bucket admits a request at `now` when its
/// theoretical arrival time is at most `tau` ahead of `now`, and each admission moves it one
/// emission interval on.
pub(super) fn gcra(tat: f64, now: f64, rate: Rate) -> Result<f64, u64> {
    let interval = 1000.0 / rate.per_second;
    let tau = interval * f64::from(rate.burst.saturating_sub(1));
    let tat = tat.max(now);
    if tat - now > tau {
        Err(((tat - now - tau).ceil() as u64).max(1))
    } else {
        Ok(tat + interval)
    }
}

#[derive(Default)]
struct TenantBuckets {
    /// Arrival times of the tenant's request and poll buckets.
    tenant: [f64; 2],
    /// The same per principal.
    principals: HashMap<String, [f64; 2]>,
}

/// The rate buckets of every tenant and principal.
#[derive(Default)]
pub struct RateLimiter {
    buckets: Mutex<HashMap<String, TenantBuckets>>,
}

/// The rates that apply to one request.
pub struct Rates {
    /// Tenant-wide.
    pub tenant: Option<Rate>,
    /// Per principal.
    pub principal: Option<Rate>,
    /// Whether the request is a polling method (counted in the poll buckets).
    pub poll: bool,
}

impl RateLimiter {
    /// Admits a request at `now_ms`, or says which bucket refuses it. A refused request
    /// consumes nothing, so a client that waits as told is admitted.
    pub fn check(&self, tenant: &str, principal: &str, rates: &Rates, now_ms: u64) -> Result<(), Refused> {
        if rates.tenant.is_none() && rates.principal.is_none() {
            return Ok(());
        }
        let now = now_ms as f64;
        let slot = usize::from(rates.poll);
        let (tenant_bucket, principal_bucket) =
            if rates.poll { (Bucket::TenantPoll, Bucket::PrincipalPoll) } else { (Bucket::Tenant, Bucket::Principal) };
        let mut all = self.buckets.lock();
        if !all.contains_key(tenant) {
            all.insert(tenant.to_owned(), TenantBuckets::default());
        }
        let buckets = all.get_mut(tenant).expect("inserted above");
        // Check both before taking from either: the principal's limit is the more specific.
        let principal_next = match rates.principal {
            Some(rate) => {
                let tat = buckets.principals.get(principal).map_or(0.0, |b| b[slot]);
                Some(gcra(tat, now, rate).map_err(|retry| Refused {
                    bucket: principal_bucket,
                    retry_after_ms: retry,
                    rate,
                })?)
            }
            None => None,
        };
        let tenant_next = match rates.tenant {
            Some(rate) => Some(gcra(buckets.tenant[slot], now, rate).map_err(|retry| Refused {
                bucket: tenant_bucket,
                retry_after_ms: retry,
                rate,
            })?),
            None => None,
        };
        if let Some(next) = tenant_next {
            buckets.tenant[slot] = next;
        }
        if let Some(next) = principal_next {
            match buckets.principals.get_mut(principal) {
                Some(b) => b[slot] = next,
                None => {
                    let mut b = [0.0; 2];
                    b[slot] = next;
                    buckets.principals.insert(principal.to_owned(), b);
                }
            }
        }
        Ok(())
    }

    /// Forgets buckets that are full again (their arrival time has passed): a fresh bucket is
    /// the same, so memory stays bounded by the principals active recently.
    pub fn prune(&self, now_ms: u64) {
        let now = now_ms as f64;
        let mut all = self.buckets.lock();
        all.retain(|_, b| {
            b.principals.retain(|_, p| p[0] > now || p[1] > now);
            b.tenant[0] > now || b.tenant[1] > now || !b.principals.is_empty()
        });
    }

    /// Buckets held (tenants plus principals), for tests and metrics.
    pub fn len(&self) -> usize {
        self.buckets.lock().values().map(|b| 1 + b.principals.len()).sum()
    }

    /// True when no bucket is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[derive(Default)]
struct Counts {
    tenant: usize,
    principals: HashMap<String, usize>,
}

/// Tasks not yet terminal, per tenant and principal.
#[derive(Default, Clone)]
pub struct Concurrency {
    counts: Arc<Mutex<HashMap<String, Counts>>>,
}

/// Which cap refused a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cap {
    /// `max_concurrent_tasks`.
    Tenant(usize),
    /// `max_concurrent_tasks_per_principal`.
    Principal(usize),
}

/// One admitted task's place under its caps; dropping it gives the place back.
pub struct TaskPermit {
    counts: Arc<Mutex<HashMap<String, Counts>>>,
    /// Whose (shared text: a permit costs no copy of the names).
    who: Identity,
}

impl TaskPermit {
    /// Whose place this is.
    pub fn who(&self) -> &Identity {
        &self.who
    }
}

impl Concurrency {
    /// Admits one more task for (tenant, principal) under the caps, or says which is full.
    pub fn acquire(
        &self,
        who: &Identity,
        tenant_cap: Option<usize>,
        principal_cap: Option<usize>,
    ) -> Result<TaskPermit, Cap> {
        let (tenant, principal) = (&*who.tenant, &*who.principal);
        let mut all = self.counts.lock();
        let counts = all.entry(tenant.to_owned()).or_default();
        if let Some(cap) = tenant_cap {
            if counts.tenant >= cap {
                return Err(Cap::Tenant(cap));
            }
        }
        let mine = counts.principals.get(principal).copied().unwrap_or(0);
        if let Some(cap) = principal_cap {
            if mine >= cap {
                return Err(Cap::Principal(cap));
            }
        }
        counts.tenant += 1;
        *counts.principals.entry(principal.to_owned()).or_default() += 1;
        Ok(TaskPermit { counts: self.counts.clone(), who: who.clone() })
    }

    /// Tasks held now by a tenant.
    pub fn of_tenant(&self, tenant: &str) -> usize {
        self.counts.lock().get(tenant).map_or(0, |c| c.tenant)
    }
}

impl Drop for TaskPermit {
    fn drop(&mut self) {
        let mut all = self.counts.lock();
        if let Some(counts) = all.get_mut(&*self.who.tenant) {
            counts.tenant = counts.tenant.saturating_sub(1);
            if let Some(n) = counts.principals.get_mut(&*self.who.principal) {
                *n -= 1;
                if *n == 0 {
                    counts.principals.remove(&*self.who.principal);
                }
            }
            if counts.tenant == 0 {
                all.remove(&*self.who.tenant);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rates(tenant: Option<Rate>, principal: Option<Rate>) -> Rates {
        Rates { tenant, principal, poll: false }
    }

    #[test]
    fn gcra_admits_a_burst_then_the_sustained_rate() {
        let limiter = RateLimiter::default();
        let r = rates(Some(Rate { per_second: 10.0, burst: 3 }), None);
        for _ in 0..3 {
            assert!(limiter.check("t", "p", &r, 1000).is_ok());
        }
        let refused = limiter.check("t", "p", &r, 1000).unwrap_err();
        assert_eq!((refused.bucket, refused.retry_after_ms), (Bucket::Tenant, 100));
        // Waiting as told is enough, and one interval admits exactly one more.
        assert!(limiter.check("t", "p", &r, 1100).is_ok());
        assert!(limiter.check("t", "p", &r, 1100).is_err());
        assert!(limiter.check("t", "p", &r, 1200).is_ok());
    }

    #[test]
    fn principal_buckets_are_separate_and_refusals_consume_nothing() {
        let limiter = RateLimiter::default();
        let r = rates(Some(Rate { per_second: 1.0, burst: 4 }), Some(Rate { per_second: 1.0, burst: 2 }));
        assert!(limiter.check("t", "alice", &r, 0).is_ok());
        assert!(limiter.check("t", "alice", &r, 0).is_ok());
        assert_eq!(limiter.check("t", "alice", &r, 0).unwrap_err().bucket, Bucket::Principal);
        // Alice's refusal did not take from the tenant: bob still gets the tenant's last two.
        assert!(limiter.check("t", "bob", &r, 0).is_ok());
        assert!(limiter.check("t", "bob", &r, 0).is_ok());
        assert_eq!(limiter.check("t", "carol", &r, 0).unwrap_err().bucket, Bucket::Tenant);
        // Another tenant is untouched, and polling has its own bucket.
        assert!(limiter.check("u", "alice", &r, 0).is_ok());
        let poll = Rates { poll: true, ..rates(Some(Rate { per_second: 1.0, burst: 1 }), None) };
        assert!(limiter.check("t", "alice", &poll, 0).is_ok());
        assert_eq!(limiter.check("t", "alice", &poll, 0).unwrap_err().bucket, Bucket::TenantPoll);
    }

    #[test]
    fn full_buckets_are_pruned() {
        let limiter = RateLimiter::default();
        let r = rates(Some(Rate { per_second: 1.0, burst: 10 }), Some(Rate { per_second: 1.0, burst: 2 }));
        for p in ["a", "b", "c"] {
            limiter.check("t", p, &r, 0).unwrap();
        }
        assert_eq!(limiter.len(), 4);
        limiter.prune(500);
        assert_eq!(limiter.len(), 4);
        // Principals are full again after one interval; the tenant after three.
        limiter.prune(1500);
        assert_eq!(limiter.len(), 1);
        limiter.prune(5000);
        assert!(limiter.is_empty());
    }

    #[test]
    fn permits_count_tasks_until_dropped() {
        let c = Concurrency::default();
        let who = |tenant: &str, principal: &str| Identity { tenant: tenant.into(), principal: principal.into() };
        let a = c.acquire(&who("t", "alice"), Some(3), Some(2)).unwrap();
        let b = c.acquire(&who("t", "alice"), Some(3), Some(2)).unwrap();
        assert_eq!(c.acquire(&who("t", "alice"), Some(3), Some(2)).err(), Some(Cap::Principal(2)));
        let d = c.acquire(&who("t", "bob"), Some(3), Some(2)).unwrap();
        assert_eq!(c.acquire(&who("t", "carol"), Some(3), Some(2)).err(), Some(Cap::Tenant(3)));
        assert!(c.acquire(&who("u", "alice"), Some(3), Some(2)).is_ok());
        drop(a);
        assert!(c.acquire(&who("t", "carol"), Some(3), Some(2)).is_ok());
        drop((b, d));
        assert_eq!(c.of_tenant("t"), 0);
    }
}
