//! Rates of tool calls (`[tenant.tools] rates` and `upstream_rates`): one GCRA bucket per glob
//! or upstream, tenant-wide or per principal, counted apart from the request rates. A call's
//! buckets are all checked before any is taken from, so a refused call costs none of them.

use std::collections::HashMap;

use parking_lot::Mutex;
use taskgate_config::{glob, Rate, RatePer, ToolRate, ToolRules};

use super::limits::gcra;
use crate::identity::Identity;

/// One bucket a call counts in.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolBucket {
    /// What the operator wrote: the glob, or `upstream:<name>`. The metric label and the
    /// refusal's `pattern` (configured values: the label set stays bounded).
    pub pattern: String,
    pub rate: Rate,
    pub per: RatePer,
    /// The bucket's name: its kind, tenant, principal (when per principal) and pattern.
    pub key: String,
}

fn bucket(identity: &Identity, pattern: String, rate: &ToolRate) -> ToolBucket {
    // Lengths first: no choice of names makes two buckets one.
    let key = match rate.per {
        RatePer::Tenant => format!("tool:{}:{}{pattern}", identity.tenant.len(), identity.tenant),
        RatePer::Principal => format!(
            "tool:{}:{}{}:{}{pattern}",
            identity.tenant.len(),
            identity.tenant,
            identity.principal.len(),
            identity.principal
        ),
    };
    ToolBucket { pattern, rate: rate.rate(), per: rate.per, key }
}

/// The buckets a call of `tool` (the gateway's name) counts in, given the upstreams it may
/// reach: the globs that match it, then its upstreams' rates.
pub fn buckets(rules: &ToolRules, identity: &Identity, tool: &str, upstreams: &[&str]) -> Vec<ToolBucket> {
    let by_tool = rules.rates.iter().filter(|(g, _)| glob(g, tool)).map(|(g, r)| bucket(identity, g.clone(), r));
    let by_upstream = rules
        .upstream_rates
        .iter()
        .filter(|(u, _)| upstreams.contains(&u.as_str()))
        .map(|(u, r)| bucket(identity, format!("upstream:{u}"), r));
    by_tool.chain(by_upstream).collect()
}

/// This replica's tool-call buckets (a shared store keeps them for every replica instead).
#[derive(Default)]
pub struct ToolRateLimiter {
    /// Each bucket's theoretical arrival time (ms).
    arrivals: Mutex<HashMap<String, f64>>,
}

impl ToolRateLimiter {
    /// Admits a call at `now_ms` in every bucket, or says which refuses it (its index) and in
    /// how many ms it would admit.
    pub fn check(&self, buckets: &[ToolBucket], now_ms: u64) -> Result<(), (usize, u64)> {
        if buckets.is_empty() {
            return Ok(());
        }
        let now = now_ms as f64;
        let mut arrivals = self.arrivals.lock();
        let mut next = Vec::with_capacity(buckets.len());
        for (i, b) in buckets.iter().enumerate() {
            let tat = arrivals.get(&b.key).copied().unwrap_or(0.0);
            next.push(gcra(tat, now, b.rate).map_err(|retry| (i, retry))?);
        }
        for (b, tat) in buckets.iter().zip(next) {
            arrivals.insert(b.key.clone(), tat);
        }
        Ok(())
    }

    /// Forgets buckets that are full again: memory stays bounded by the buckets used recently.
    pub fn prune(&self, now_ms: u64) {
        let now = now_ms as f64;
        self.arrivals.lock().retain(|_, tat| *tat > now);
    }

    /// Buckets held.
    pub fn len(&self) -> usize {
        self.arrivals.lock().len()
    }

    /// True when no bucket is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> ToolRules {
        let rate = |per_second, burst, per| ToolRate { per_second, burst, per };
        ToolRules {
            rates: [
                ("search__*".to_owned(), rate(1.0, 2, RatePer::Tenant)),
                ("*__query".to_owned(), rate(1.0, 1, RatePer::Principal)),
            ]
            .into(),
            upstream_rates: [("search".to_owned(), rate(10.0, 3, RatePer::Tenant))].into(),
            ..ToolRules::default()
        }
    }

    fn who(principal: &str) -> Identity {
        Identity { tenant: "acme".into(), principal: principal.into() }
    }

    #[test]
    fn a_call_counts_in_every_glob_that_matches_it_and_its_upstreams_rate() {
        let patterns = |tool, upstreams: &[&str]| -> Vec<String> {
            buckets(&rules(), &who("alice"), tool, upstreams).into_iter().map(|b| b.pattern).collect()
        };
        assert_eq!(patterns("search__query", &["search"]), ["*__query", "search__*", "upstream:search"]);
        assert_eq!(patterns("files__read", &["files"]), Vec::<String>::new());
        let alice = buckets(&rules(), &who("alice"), "db__query", &[]);
        let bob = buckets(&rules(), &who("bob"), "db__query", &[]);
        assert_ne!(alice[0].key, bob[0].key, "per principal");
        let alice = buckets(&rules(), &who("alice"), "search__x", &[]);
        let bob = buckets(&rules(), &who("bob"), "search__x", &[]);
        assert_eq!(alice[0].key, bob[0].key, "tenant-wide");
    }

    #[test]
    fn a_refused_call_takes_from_no_bucket_and_waiting_as_told_is_enough() {
        let limiter = ToolRateLimiter::default();
        let call = buckets(&rules(), &who("alice"), "search__query", &["search"]);
        assert_eq!(limiter.check(&call, 1_000), Ok(()));
        // `*__query` is per principal with a burst of 1: refused, index 0, for a second.
        assert_eq!(limiter.check(&call, 1_000), Err((0, 1000)));
        // The tenant-wide `search__*` bucket (burst 2) still has its second call.
        let other = buckets(&rules(), &who("alice"), "search__list", &["search"]);
        assert_eq!(limiter.check(&other, 1_000), Ok(()));
        assert_eq!(limiter.check(&other, 1_000).map_err(|(i, _)| other[i].pattern.clone()), Err("search__*".into()));
        assert_eq!(limiter.check(&call, 2_000), Ok(()));
        limiter.prune(10_000);
        assert!(limiter.is_empty());
    }
}
