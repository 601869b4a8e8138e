//! JWTs of keys the configuration holds (`[[tenant.jwt]]`: an HS256 secret or an RS256 public
//! key): each key verifies tokens of its one algorithm, and a token logs in to the one tenant
//! whose key verifies it and whose claims take it (two that would are refused, and a
//! configuration where two could is refused at start).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use openssl::pkey::{Id, PKey};
use serde_json::Value;
use taskgate_config::{JwtAlgorithm, JwtConfig, Problem};

use super::refusal::{AuthError, MORE_THAN_ONE_TENANT};
use crate::identity::Identity;

/// A configured verifying key, with the one algorithm it verifies (a token whose header names
/// another is refused: no HS256 token keyed with an RSA public key).
pub(super) struct Key {
    pub(super) algorithm: super::jws::Alg,
    pub(super) key: super::jws::Key,
    /// The SHA-256 of the secret or of the public key's DER: two entries with one key are
    /// told apart by it.
    pub(super) fingerprint: [u8; 32],
}

pub(super) struct JwtVerifier {
    pub(super) tenant: String,
    pub(super) algorithm: JwtAlgorithm,
    pub(super) key: Key,
    pub(super) audience: String,
    pub(super) issuer: Option<String>,
    /// Where its principals come from, in their names: `jwt:<issuer>|` (or `jwt:#<n>|` for the
    /// tenant's n-th verifier when it names no issuer).
    pub(super) source: String,
    pub(super) principal_claim: String,
    pub(super) tenant_claim: Option<String>,
    pub(super) leeway_secs: u64,
}

impl JwtVerifier {
    /// A JWT of a configured key (`[[tenant.jwt]]`): the one tenant whose keys verify it and
    /// whose claims take it.
    pub(super) fn verify(
        jwts: &[JwtVerifier],
        token: &str,
        peek: &super::jws::Peek,
        now_secs: u64,
    ) -> Result<Identity, AuthError> {
        let mut parts = token.split('.');
        let (Some(header64), Some(payload64), Some(signature64)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(AuthError::Token("it is not a JWT (three base64url parts)"));
        };
        let decode = |part: &str| URL_SAFE_NO_PAD.decode(part).ok();
        let as_object = |bytes: Option<Vec<u8>>| {
            bytes.and_then(|b| serde_json::from_slice::<Value>(&b).ok()).filter(Value::is_object)
        };
        let header = as_object(decode(header64)).ok_or(AuthError::Token("its header is not base64url JSON"))?;
        decode(signature64).ok_or(AuthError::Token("its signature is not base64url"))?;
        // RFC 7515 section 4.1.11: extensions marked critical that are not understood MUST be refused.
        if header.get("crit").is_some() {
            return Err(AuthError::Token("it names critical header extensions"));
        }
        let algorithm = match header.get("alg").and_then(Value::as_str) {
            Some("HS256") => JwtAlgorithm::HS256,
            Some("RS256") => JwtAlgorithm::RS256,
            _ => return Err(AuthError::Token("its algorithm is not HS256 or RS256")),
        };
        // An expired token, or one no configured key is for, is refused before its claims are
        // read whole or its signature checked (what that tells a forger is the token's own exp
        // and iss); every other refusal of its claims comes after the signature.
        if peek.expired(now_secs, jwts.iter().map(|v| v.leeway_secs)) {
            return Err(AuthError::Token("it has expired"));
        }
        let issuer = peek.issuer();
        let mut candidates = jwts
            .iter()
            .filter(|v| v.algorithm == algorithm)
            .filter(|v| v.issuer.as_deref().is_none_or(|want| issuer == Some(want)))
            .peekable();
        if candidates.peek().is_none() {
            return Err(AuthError::Token("no configured issuer signed it"));
        }
        let claims = as_object(decode(payload64)).ok_or(AuthError::Token("its payload is not base64url JSON"))?;
        let candidates = candidates.filter(|v| {
            v.tenant_claim.as_ref().is_none_or(|c| claims.get(c).and_then(Value::as_str) == Some(&v.tenant))
        });
        // Every key that verifies it is asked: a token two tenants would take is refused, never
        // given to the first listed.
        let mut taken: Option<(&JwtVerifier, Identity)> = None;
        let mut refused = None;
        for verifier in candidates {
            if taken.as_ref().is_some_and(|(t, _)| t.tenant == verifier.tenant) || !verifier.key.verifies(token) {
                continue;
            }
            match verifier.identity(&claims, now_secs) {
                Ok(_) if taken.is_some() => return Err(AuthError::Token(MORE_THAN_ONE_TENANT)),
                Ok(identity) => taken = Some((verifier, identity)),
                Err(e) => {
                    refused.get_or_insert(e);
                }
            }
        }
        match taken {
            Some((_, identity)) => Ok(identity),
            None => Err(refused.unwrap_or(AuthError::Token("no configured issuer signed it"))),
        }
    }

    /// The identity a token's claims give under this key's settings, its signature aside.
    fn identity(&self, claims: &Value, now_secs: u64) -> Result<Identity, AuthError> {
        let elsewhere = "its audience (aud) is not this gateway's";
        let ours = |aud: &str| aud == self.audience;
        super::claims::times_and_audience(claims, now_secs, self.leeway_secs, ours, true, elsewhere)?;
        let principal = match claims.get(&self.principal_claim) {
            Some(Value::String(p)) if !p.is_empty() => p.clone(),
            Some(Value::Number(n)) => n.to_string(),
            Some(Value::String(_)) | None => return Err(AuthError::Token("it lacks the configured principal claim")),
            Some(_) => return Err(AuthError::Token("its principal claim is not a string")),
        };
        Ok(Identity { tenant: self.tenant.as_str().into(), principal: format!("{}{principal}", self.source).into() })
    }
}

/// Configured keys two tenants share (one secret or public key, audiences with one normal
/// form, issuers a token could match both of) must say whose each token is, with one
/// `tenant_claim`: otherwise one token would log in to either.
pub(super) fn shared_keys(jwts: &[JwtVerifier]) -> Vec<Problem> {
    let mut problems = Vec::new();
    for (n, v) in jwts.iter().enumerate() {
        for other in &jwts[..n] {
            let issuers_meet = v.issuer.is_none() || other.issuer.is_none() || v.issuer == other.issuer;
            let shared = other.tenant != v.tenant
                && other.key.fingerprint == v.key.fingerprint
                && issuers_meet
                && taskgate_config::normal_audience(&other.audience) == taskgate_config::normal_audience(&v.audience);
            if shared && (v.tenant_claim.is_none() || v.tenant_claim != other.tenant_claim) {
                problems.push(Problem {
                    location: format!("tenant ({:?}).jwt ({})", v.tenant, v.source.trim_end_matches('|')),
                    message: format!(
                        "tenant {:?} takes tokens of the same key for the same audience: both must name the same tenant_claim, which says whose each token is",
                        other.tenant
                    ),
                });
            }
        }
    }
    problems
}

impl Key {
    /// Whether the token's signature verifies with this key (its claims are checked apart).
    fn verifies(&self, token: &str) -> bool {
        self.key.verifies(self.algorithm, token)
    }
}

pub(super) fn load_key(jwt: &JwtConfig, env: &dyn Fn(&str) -> Option<String>) -> Result<Key, (&'static str, String)> {
    match jwt.algorithm {
        JwtAlgorithm::HS256 => {
            let secret = match (&jwt.secret, &jwt.secret_env) {
                (Some(secret), _) => secret.clone(),
                (None, Some(var)) => {
                    env(var).ok_or(("secret_env", format!("the environment variable {var} is not set")))?
                }
                (None, None) => return Err(("secret", "HS256 needs a secret".into())),
            };
            if secret.len() < 32 {
                return Err(("secret", "an HS256 secret must be at least 32 bytes".into()));
            }
            let key = super::jws::Key::secret(secret.as_bytes())
                .ok_or(("secret", "OpenSSL refused it as an HMAC key".to_string()))?;
            Ok(Key { algorithm: super::jws::Alg::HS256, key, fingerprint: super::jws::sha256(secret.as_bytes()) })
        }
        JwtAlgorithm::RS256 => {
            let (field, pem) = match (&jwt.public_key, &jwt.public_key_file) {
                (Some(pem), _) => ("public_key", pem.clone()),
                (None, Some(path)) => (
                    "public_key_file",
                    std::fs::read_to_string(path)
                        .map_err(|e| ("public_key_file", format!("cannot read {path}: {e}")))?,
                ),
                (None, None) => return Err(("public_key", "RS256 needs a public key".into())),
            };
            let key = PKey::public_key_from_pem(pem.as_bytes())
                .map_err(|_| (field, "is not a PEM public key (-----BEGIN PUBLIC KEY-----)".to_string()))?;
            if key.id() != Id::RSA || key.bits() < 2048 {
                return Err((field, "RS256 needs an RSA public key of at least 2048 bits".into()));
            }
            let fingerprint = super::jws::sha256(&key.public_key_to_der().unwrap_or_default());
            Ok(Key { algorithm: super::jws::Alg::RS256, key: super::jws::Key::Public(key), fingerprint })
        }
    }
}
