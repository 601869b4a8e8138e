//! [`VerifiedTokens`]: JWT access tokens verified lately, by their SHA-256. A client sends the
//! same token with every request, and a signature check costs more than the rest of a proxied
//! call; a token is kept until its `exp`, tied to the key set of its issuer it was verified
//! with (new keys, read at a rotation or when due, mean it is verified again).

use std::collections::HashMap;
use std::sync::Arc;

use super::oauth::{Issuer, Key};
use crate::identity::Identity;

/// What a request's credentials established: who is calling and, for an OAuth access token,
/// what it grants and until when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// Who is calling.
    pub identity: Identity,
    /// The scopes an OAuth access token grants; `None` for credentials that carry none (API
    /// keys, configured JWTs, anonymous use).
    pub scopes: Option<std::sync::Arc<[Box<str>]>>,
    /// When an OAuth access token expires (seconds since the epoch), if it says.
    pub expires_secs: Option<u64>,
    /// The access token itself, while an upstream exchanges callers' tokens (RFC 8693): what
    /// the exchanges made for this request (and a task it creates) start from.
    pub subject: Option<taskgate_upstream::Subject>,
    /// The profile an OAuth access token was issued for, when its `aud` names that profile's
    /// endpoint (`<public_url>/<profile>`) and not the gateway's: it is taken there only.
    pub for_profile: Option<std::sync::Arc<str>>,
}

impl Verified {
    /// An identity from credentials that grant no scopes.
    pub fn unscoped(identity: Identity) -> Verified {
        Verified { identity, scopes: None, expires_secs: None, subject: None, for_profile: None }
    }

    /// The first of `needed` the credentials do not grant (credentials without scopes are not
    /// held to scopes).
    pub fn lacks<'a>(&self, needed: &[&'a str]) -> Option<&'a str> {
        let granted = self.scopes.as_deref()?;
        needed.iter().find(|s| !granted.iter().any(|g| &**g == **s)).copied()
    }
}

/// Tokens kept at most.
const MAX_VERIFIED: usize = 10_000;

struct VerifiedToken {
    verified: Verified,
    until_secs: u64,
    keys: Arc<Vec<Key>>,
    issuer: Arc<Issuer>,
    /// The token's [`VerifiedTokens::quick`] hash.
    quick: u64,
}

/// JWT access tokens verified lately.
#[derive(Default)]
pub(crate) struct VerifiedTokens(
    parking_lot::RwLock<HashMap<[u8; 32], VerifiedToken>>,
    /// The second expired tokens were last swept out (once a second at most when full).
    std::sync::atomic::AtomicU64,
    /// The quick hashes of the tokens kept (with, until a sweep, some that left): a token whose
    /// quick hash is not here was not verified lately, known without its SHA-256.
    parking_lot::RwLock<std::collections::HashSet<u64>>,
    /// The quick hash's key, random per process (a client cannot aim at another's token).
    std::collections::hash_map::RandomState,
);

impl VerifiedTokens {
    /// A keyed hash of `token` (SipHash, a few times cheaper than SHA-256): what a flood of
    /// forged tokens from a client past its refusals costs to tell from a token verified lately.
    pub(crate) fn quick(&self, token: &[u8]) -> u64 {
        use std::hash::BuildHasher;
        self.3.hash_one(token)
    }

    /// Whether a token with this quick hash may have been verified lately (false: it was not).
    pub(crate) fn may_hold(&self, quick: u64) -> bool {
        self.2.read().contains(&quick)
    }

    /// A token verified lately, while it has not expired and its issuer's key set is the one
    /// it was verified with.
    pub(crate) fn get(&self, hash: &[u8; 32], now_secs: u64) -> Option<Verified> {
        let verified = self.0.read();
        let kept = verified.get(hash)?;
        let current = now_secs < kept.until_secs && Arc::ptr_eq(&kept.keys, &kept.issuer.keys());
        current.then(|| kept.verified.clone())
    }

    /// Keeps a verified token until its `exp` (over the bound, expired ones are forgotten, and
    /// when none has, the new one is not kept).
    pub(crate) fn keep(
        &self,
        (hash, quick): ([u8; 32], u64),
        verified: &Verified,
        keys: Arc<Vec<Key>>,
        issuer: Arc<Issuer>,
        now_secs: u64,
    ) {
        let Some(until_secs) = verified.expires_secs.filter(|exp| *exp > now_secs) else { return };
        let mut kept = self.0.write();
        if kept.len() >= MAX_VERIFIED {
            let swept = self.1.swap(now_secs, std::sync::atomic::Ordering::Relaxed);
            if swept != now_secs {
                kept.retain(|_, t| t.until_secs > now_secs);
                *self.2.write() = kept.values().map(|t| t.quick).collect();
            }
            if kept.len() >= MAX_VERIFIED {
                return;
            }
        }
        kept.insert(hash, VerifiedToken { verified: verified.clone(), until_secs, keys, issuer, quick });
        self.2.write().insert(quick);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verified(n: u32, exp: u64) -> Verified {
        let identity = Identity { tenant: "t".into(), principal: format!("oauth:i|p{n}").into() };
        let scopes = Some(Arc::from(vec![Box::from("mcp")]));
        Verified { identity, scopes, expires_secs: Some(exp), subject: None, for_profile: None }
    }

    #[test]
    fn a_token_is_kept_until_it_expires_and_within_the_bound() {
        let issuers = super::super::oauth::Issuers::default();
        let issuer = issuers.issuer("https://i.example", None);
        let tokens = VerifiedTokens::default();
        tokens.keep(([1; 32], 1), &verified(1, 100), issuer.keys(), issuer.clone(), 10);
        assert_eq!(tokens.get(&[1; 32], 50), Some(verified(1, 100)));
        assert_eq!(tokens.get(&[1; 32], 100), None, "expired");
        assert_eq!(tokens.get(&[2; 32], 50), None, "never verified");
        // An expired token is never kept.
        tokens.keep(([3; 32], 3), &verified(3, 10), issuer.keys(), issuer.clone(), 10);
        assert_eq!(tokens.get(&[3; 32], 5), None);
        // Full of live tokens: a new one is not kept (it is verified again next time).
        for n in 0..MAX_VERIFIED as u32 {
            let mut hash = [0u8; 32];
            hash[..4].copy_from_slice(&n.to_be_bytes());
            hash[31] = 9;
            tokens.keep((hash, u64::from(n) + 100), &verified(n, 1000), issuer.keys(), issuer.clone(), 20);
        }
        tokens.keep(([4; 32], 4), &verified(4, 1000), issuer.keys(), issuer.clone(), 20);
        assert_eq!(tokens.get(&[4; 32], 30), None);
        // Once those expire, room is made.
        tokens.keep(([4; 32], 4), &verified(4, 5000), issuer.keys(), issuer.clone(), 2000);
        assert_eq!(tokens.get(&[4; 32], 2001), Some(verified(4, 5000)));
        // The quick hashes are those of the tokens kept since the sweep.
        assert!(tokens.may_hold(4));
        assert!(!tokens.may_hold(1) && !tokens.may_hold(100), "swept out with their tokens");
    }

    #[test]
    fn a_token_not_kept_is_told_apart_by_its_quick_hash_alone() {
        let issuers = super::super::oauth::Issuers::default();
        let issuer = issuers.issuer("https://i.example", None);
        let tokens = VerifiedTokens::default();
        let (kept, forged) = (b"header.kept.signature".as_slice(), b"header.forged.signature".as_slice());
        assert_ne!(tokens.quick(kept), tokens.quick(forged));
        assert_eq!(tokens.quick(kept), tokens.quick(kept));
        tokens.keep(([7; 32], tokens.quick(kept)), &verified(7, 100), issuer.keys(), issuer.clone(), 10);
        assert!(tokens.may_hold(tokens.quick(kept)));
        assert!(!tokens.may_hold(tokens.quick(forged)));
        // The key is the process's own: another cache hashes the same token otherwise.
        assert_ne!(VerifiedTokens::default().quick(kept), tokens.quick(kept));
    }
}
