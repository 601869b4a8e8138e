//! [`Subjects`]: the callers' latest OAuth access tokens, kept only while an upstream is called
//! with each caller's own identity (token exchange, RFC 8693): the token an exchange starts
//! from. Bounded in count; a token is forgotten once it expires, and never logged.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use foldhash::HashMap;

use crate::clock::Clock;
use crate::identity::Identity;

/// A caller's latest access token and when it expires (seconds since the epoch).
struct Subject {
    token: Box<str>,
    expires_secs: Option<u64>,
}

/// The callers' latest OAuth access tokens, by identity.
pub struct Subjects {
    tokens: parking_lot::Mutex<HashMap<Identity, Subject>>,
    /// Most tokens kept (0: none, no upstream exchanges tokens).
    bound: AtomicUsize,
    clock: Arc<dyn Clock>,
}

impl Subjects {
    pub(crate) fn new(clock: Arc<dyn Clock>) -> Subjects {
        Subjects { tokens: Default::default(), bound: AtomicUsize::new(0), clock }
    }

    /// Keeps at most `bound` tokens from now on (0: none, and those kept are forgotten).
    pub(crate) fn set_bound(&self, bound: usize) {
        self.bound.store(bound, Ordering::Relaxed);
        if bound == 0 {
            *self.tokens.lock() = HashMap::default();
        }
    }

    /// Whether tokens are kept at all.
    pub fn wanted(&self) -> bool {
        self.bound.load(Ordering::Relaxed) > 0
    }

    /// Keeps `token` as `identity`'s latest. When full, expired tokens are forgotten first,
    /// then the one that expires first.
    pub fn remember(&self, identity: &Identity, token: &str, expires_secs: Option<u64>) {
        let bound = self.bound.load(Ordering::Relaxed);
        if bound == 0 {
            return;
        }
        let mut tokens = self.tokens.lock();
        if let Some(known) = tokens.get_mut(identity) {
            if &*known.token != token {
                *known = Subject { token: token.into(), expires_secs };
            }
            return;
        }
        if tokens.len() >= bound {
            let now = self.clock.now_ms() / 1000;
            tokens.retain(|_, s| s.expires_secs.is_none_or(|e| e > now));
            if tokens.len() >= bound {
                let first =
                    tokens.iter().min_by_key(|(_, s)| s.expires_secs.unwrap_or(u64::MAX)).map(|(i, _)| i.clone());
                if let Some(first) = first {
                    tokens.remove(&first);
                }
            }
        }
        tokens.insert(identity.clone(), Subject { token: token.into(), expires_secs });
    }

    /// `identity`'s latest token, while it is valid.
    pub fn token(&self, identity: &Identity) -> Option<String> {
        let now = self.clock.now_ms() / 1000;
        let mut tokens = self.tokens.lock();
        let subject = tokens.get(identity)?;
        if subject.expires_secs.is_some_and(|e| e <= now) {
            tokens.remove(identity);
            return None;
        }
        Some(subject.token.to_string())
    }

    /// `identity` as an upstream session acting for it sees it: its latest token, read at each
    /// exchange, when `issuer` issued it (no other authorization server's token is sent to
    /// `issuer`'s token endpoint).
    pub fn caller(self: &Arc<Self>, identity: &Identity, issuer: Option<&str>) -> taskgate_upstream::Caller {
        let Identity { tenant, principal } = identity;
        // Lengths first: no choice of names makes two identities one key.
        let key = format!("{}:{tenant}{principal}", tenant.len()).into();
        // An OAuth principal names its issuer (`oauth:<issuer>|<subject>`).
        let issued = issuer.is_some_and(|issuer| {
            principal.strip_prefix("oauth:").and_then(|p| p.strip_prefix(issuer)).is_some_and(|p| p.starts_with('|'))
        });
        let (subjects, identity) = (self.clone(), identity.clone());
        taskgate_upstream::Caller {
            key,
            subject: Arc::new(move || subjects.token(&identity).filter(|_| issued)),
            issued,
        }
    }

    /// Forgets the tokens of tenants `keep` does not name (a reload removed them).
    pub(crate) fn retain_tenants(&self, keep: impl Fn(&str) -> bool) {
        self.tokens.lock().retain(|identity, _| keep(&identity.tenant));
    }

    /// Tokens kept now.
    pub fn len(&self) -> usize {
        self.tokens.lock().len()
    }

    /// Whether none is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    fn who(n: u32) -> Identity {
        Identity { tenant: "t".into(), principal: format!("oauth:p{n}").into() }
    }

    #[test]
    fn tokens_are_kept_bounded_and_forgotten_when_they_expire() {
        let clock = Arc::new(ManualClock::new(1_000_000));
        let subjects = Arc::new(Subjects::new(clock.clone()));
        subjects.remember(&who(1), "a", Some(2000));
        assert!(subjects.is_empty(), "nothing is kept while no upstream exchanges tokens");
        subjects.set_bound(2);
        subjects.remember(&who(1), "a", Some(1500));
        subjects.remember(&who(2), "b", Some(2000));
        subjects.remember(&who(1), "a2", Some(1600));
        assert_eq!(subjects.token(&who(1)).as_deref(), Some("a2"));
        // Full: the one that expires first makes room.
        subjects.remember(&who(3), "c", Some(3000));
        assert_eq!((subjects.token(&who(1)), subjects.len()), (None, 2));
        clock.advance(1_500_000);
        assert_eq!(subjects.token(&who(2)), None, "expired");
        assert_eq!(subjects.token(&who(3)).as_deref(), Some("c"));
        // Only the tokens of the issuer an upstream names are exchanged there.
        let alice = Identity { tenant: "t".into(), principal: "oauth:https://a.example|alice".into() };
        subjects.remember(&alice, "t-a", Some(9_000));
        assert_eq!((subjects.caller(&alice, Some("https://a.example")).subject)().as_deref(), Some("t-a"));
        assert_eq!((subjects.caller(&alice, Some("https://a.example.evil")).subject)(), None);
        assert_eq!((subjects.caller(&alice, Some("https://b.example")).subject)(), None);
        subjects.retain_tenants(|t| t != "t");
        assert!(subjects.is_empty());
        subjects.set_bound(0);
        assert!(subjects.is_empty());
    }
}
