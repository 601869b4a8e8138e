//! Tokens refused after their checks, counted per client source each second. A source that had
//! [`PER_SOURCE`] refused in the current second has its further tokens refused before any
//! signature is checked (a token verified lately still passes): a flood of forged tokens costs
//! the gateway what refusing a wrong API key costs, not an RSA or ECDSA verification each.

use std::collections::HashMap;
use std::net::IpAddr;

use parking_lot::Mutex;

/// Tokens one source may have refused in a second before the rest are refused unchecked.
pub const PER_SOURCE: u32 = 10;
/// Sources counted at once; beyond them the second's counts start again (bounded memory under a
/// flood from many addresses, each of which then gets its own budget again).
const MAX_SOURCES: usize = 65_536;

#[derive(Default)]
pub struct RefusedTokens {
    /// The second counted, and each source's refusals in it.
    counts: Mutex<(u64, HashMap<IpAddr, u32>)>,
}

impl RefusedTokens {
    /// Whether `source` has had its refusals this second: its tokens are not checked.
    pub fn spent(&self, source: IpAddr, now_secs: u64) -> bool {
        let counts = self.counts.lock();
        counts.0 == now_secs && counts.1.get(&source).is_some_and(|n| *n >= PER_SOURCE)
    }

    /// A token `source` sent was refused after its checks.
    pub fn refused(&self, source: IpAddr, now_secs: u64) {
        let mut counts = self.counts.lock();
        if counts.0 != now_secs || counts.1.len() >= MAX_SOURCES {
            *counts = (now_secs, HashMap::new());
        }
        *counts.1.entry(source).or_default() += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_is_refused_unchecked_for_the_rest_of_the_second_it_spent_its_budget_in() {
        let refused = RefusedTokens::default();
        let (one, two): (IpAddr, IpAddr) = ("192.0.2.1".parse().unwrap(), "192.0.2.2".parse().unwrap());
        for _ in 0..PER_SOURCE {
            assert!(!refused.spent(one, 100));
            refused.refused(one, 100);
        }
        assert!(refused.spent(one, 100));
        assert!(!refused.spent(two, 100), "each source its own");
        assert!(!refused.spent(one, 101), "a new second, a new budget");
        refused.refused(two, 101);
        assert!(!refused.spent(one, 100), "the old second's counts are gone");
    }
}
