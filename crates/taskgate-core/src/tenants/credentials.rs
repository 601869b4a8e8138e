//! Credentials: API keys (stored as SHA-256), JWT bearer tokens of a configured key (HS256,
//! RS256), and OAuth 2.1 access tokens of configured authorization servers (JWT access tokens,
//! RFC 9068, verified with the server's published keys, checked with OpenSSL in `jws.rs`), resolved
//! to an [`Identity`]. Nothing here logs or returns a key or a token.

use std::collections::HashMap;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::Value;
use taskgate_config::{Config, Problem};

use super::configured::{load_key, shared_keys, JwtVerifier};
pub use super::verified::Verified;
use crate::identity::Identity;

pub use super::refusal::AuthError;
use super::refusal::MORE_THAN_ONE_TENANT;

/// The SHA-256 of an API key, as lower-case hex (what `[[tenant.api_key]] sha256` holds).
pub fn hash_key(key: &str) -> String {
    super::jws::sha256(key.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// The tokens of one authorization server for one tenant.
struct OAuthVerifier {
    tenant: String,
    issuer: std::sync::Arc<super::oauth::Issuer>,
    audience: String,
    /// The tenant's profiles' endpoints (`<public_url>/<profile>`, and the profile), each a
    /// resource of its own (RFC 9728): a token for one is taken at that endpoint (unless
    /// `audience` is set).
    profile_audiences: Vec<(String, std::sync::Arc<str>)>,
    required_scopes: Vec<String>,
    principal_claim: String,
    tenant_claim: Option<String>,
    leeway_secs: u64,
    /// The gateway's client at the issuer, for token introspection.
    introspection: Option<(String, String)>,
    /// How the opaque tokens it introspects begin (none: every opaque token no other server's
    /// prefix claims).
    opaque_prefix: Option<String>,
    /// The issuer's key set as configured (none: its metadata's).
    jwks_uri: Option<String>,
}

/// Every credential of every tenant, built from one configuration.
pub(crate) struct Credentials {
    /// By the key's SHA-256: a look-up by hash reveals nothing about the key itself.
    api_keys: HashMap<[u8; 32], Identity>,
    jwts: Vec<JwtVerifier>,
    oauth: Vec<OAuthVerifier>,
    /// What introspection said of opaque tokens lately.
    issuers: std::sync::Arc<super::oauth::Issuers>,
    /// JWT access tokens verified lately, by their SHA-256: a client sends the same token with
    /// every request, and a signature check costs more than the rest of a proxied call.
    verified: super::verified::VerifiedTokens,
    /// The identity of a request with no credentials, if a tenant takes them (shared: each
    /// request's copy costs no allocation), with no scopes when its tenant's tools need some.
    anonymous: Option<Verified>,
}

impl Credentials {
    /// Reads secrets from the environment and keys from files; every problem is reported.
    pub fn build(
        config: &Config,
        env: &dyn Fn(&str) -> Option<String>,
        issuers: &std::sync::Arc<super::oauth::Issuers>,
    ) -> Result<Credentials, Vec<Problem>> {
        let mut problems = Vec::new();
        let mut api_keys = HashMap::new();
        let mut jwts = Vec::new();
        let mut oauth = Vec::new();
        let mut anonymous = None;
        for (i, tenant) in config.tenants.iter().enumerate() {
            if tenant.anonymous {
                let identity = Identity { tenant: tenant.id.as_str().into(), principal: "anonymous".into() };
                // A caller that sends no token holds no scope: the tools that need one are
                // refused it (403 with the scopes to ask for), never served unchecked.
                let scoped =
                    tenant.tools.as_ref().is_some_and(|t| !t.scopes.is_empty() || !t.upstream_scopes.is_empty());
                anonymous = Some(Verified {
                    identity,
                    scopes: scoped.then(|| std::sync::Arc::from([])),
                    expires_secs: None,
                    subject: None,
                    for_profile: None,
                });
            }
            for key in &tenant.api_keys {
                if let Some(hash) = decode_hex32(&key.sha256) {
                    // A principal's name says where it came from: an API key's `key:<name>`
                    // never equals a token's `jwt:<issuer>|<sub>` (issue: equal names from two
                    // credential kinds are two requestors).
                    let identity = Identity {
                        tenant: tenant.id.as_str().into(),
                        principal: format!("key:{}", key.principal).into(),
                    };
                    api_keys.insert(hash, identity);
                }
            }
            for (j, jwt) in tenant.jwts.iter().enumerate() {
                let at = |field: &str| format!("tenant[{i}] ({:?}).jwt[{j}].{field}", tenant.id);
                match load_key(jwt, env) {
                    Ok(key) => jwts.push(JwtVerifier {
                        tenant: tenant.id.clone(),
                        algorithm: jwt.algorithm,
                        key,
                        audience: jwt.audience.clone(),
                        issuer: jwt.issuer.clone(),
                        source: match &jwt.issuer {
                            Some(issuer) => format!("jwt:{issuer}|"),
                            None => format!("jwt:#{j}|"),
                        },
                        principal_claim: jwt.principal_claim.clone(),
                        tenant_claim: jwt.tenant_claim.clone(),
                        leeway_secs: jwt.leeway_secs,
                    }),
                    Err((field, message)) => problems.push(Problem { location: at(field), message }),
                }
            }
            for (j, server) in tenant.oauth.iter().enumerate() {
                let Some(audience) = server.audience.clone().or_else(|| config.server.public_url.clone()) else {
                    continue; // refused by validation
                };
                // Profiles' endpoints are resources under the gateway's own: when tokens carry the
                // gateway's URL (by default, or `audience` naming it), a profile's URL counts too.
                let own = |url: &String| {
                    use taskgate_config::normal_audience as normal;
                    server.audience.as_ref().is_none_or(|a| normal(a) == normal(url))
                };
                let profile_audiences = match &config.server.public_url {
                    Some(url) if own(url) => {
                        let of = |p: &taskgate_config::ProfileConfig| {
                            (super::profiles::resource_of(url, &p.name), p.name.as_str().into())
                        };
                        tenant.profiles.iter().map(of).collect()
                    }
                    _ => Vec::new(),
                };
                let introspection = match (&server.introspection_client_id, &server.introspection_secret_env) {
                    (Some(client), Some(var)) => match env(var) {
                        Some(secret) => Some((client.clone(), secret)),
                        None => {
                            problems.push(Problem {
                                location: format!("tenant[{i}] ({:?}).oauth[{j}].introspection_secret_env", tenant.id),
                                message: format!("the environment variable {var} is not set"),
                            });
                            None
                        }
                    },
                    _ => None,
                };
                // One issuer per URL in a configuration (validation refuses two jwks_uri).
                let issuer = oauth
                    .iter()
                    .find(|v: &&OAuthVerifier| v.issuer.url == server.issuer)
                    .map(|v| v.issuer.clone())
                    .unwrap_or_else(|| issuers.issuer(&server.issuer, server.jwks_uri.as_deref()));
                oauth.push(OAuthVerifier {
                    tenant: tenant.id.clone(),
                    issuer,
                    jwks_uri: server.jwks_uri.clone(),
                    audience,
                    profile_audiences,
                    required_scopes: server.required_scopes.clone(),
                    principal_claim: server.principal_claim.clone(),
                    tenant_claim: server.tenant_claim.clone(),
                    leeway_secs: server.leeway_secs,
                    introspection,
                    opaque_prefix: server.opaque_token_prefix.clone(),
                });
            }
        }
        if config.tenants.is_empty() {
            anonymous = Some(Verified::unscoped(Identity {
                tenant: crate::identity::IMPLICIT_TENANT.into(),
                principal: "anonymous".into(),
            }));
        }
        problems.extend(shared_keys(&jwts));
        if problems.is_empty() {
            Ok(Credentials { api_keys, jwts, oauth, issuers: issuers.clone(), verified: Default::default(), anonymous })
        } else {
            Err(problems)
        }
    }

    /// Whether `token` is a JWT verified lately.
    pub fn verified_lately(&self, token: &str, now_secs: u64) -> bool {
        // The SHA-256 only for a token that may be one: a flood of forged tokens costs a
        // keyed hash each.
        self.verified.may_hold(self.verified.quick(token.as_bytes()))
            && self.verified.get(&super::jws::sha256(token.as_bytes()), now_secs).is_some()
    }

    /// The identity an `Authorization` header value (or its absence) authenticates.
    pub fn authenticate(&self, authorization: Option<&str>, now_secs: u64) -> Result<Verified, AuthError> {
        let Some(header) = authorization else {
            return match &self.anonymous {
                Some(anonymous) => Ok(anonymous.clone()),
                None => Err(AuthError::Missing),
            };
        };
        // RFC 6750 section 3.1: another authentication scheme is no bearer credential at all
        // (401 with no error code); a bearer credential that is not one token is malformed (400).
        let token = match header.trim().split_once(' ') {
            Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => {
                let token = token.trim();
                if token.is_empty() || token.contains(char::is_whitespace) {
                    return Err(AuthError::Malformed);
                }
                token
            }
            _ if header.trim().eq_ignore_ascii_case("bearer") => return Err(AuthError::Malformed),
            _ => {
                return match &self.anonymous {
                    Some(anonymous) => Ok(anonymous.clone()),
                    None => Err(AuthError::Missing),
                }
            }
        };
        if token.split('.').count() == 3 {
            // A JWT not verified lately is told so by a keyed quick hash: its SHA-256 is
            // computed only for a token that may be one, and to keep one verified now.
            let quick = self.verified.quick(token.as_bytes());
            if self.verified.may_hold(quick) {
                if let Some(verified) = self.verified.get(&super::jws::sha256(token.as_bytes()), now_secs) {
                    return Ok(verified);
                }
            }
            let peek = super::jws::Peek::of(token).ok_or(AuthError::Token("its payload is not base64url JSON"))?;
            if let Some(issuer) = peek.issuer().filter(|iss| self.oauth.iter().any(|v| v.issuer.url == *iss)) {
                return self.verify_access_token(token, quick, issuer, &peek, now_secs);
            }
            return JwtVerifier::verify(&self.jwts, token, &peek, now_secs).map(Verified::unscoped);
        }
        let hash = super::jws::sha256(token.as_bytes());
        if let Some(identity) = self.api_keys.get(&hash) {
            return Ok(Verified::unscoped(identity.clone()));
        }
        // An opaque access token goes to the one server whose tokens it looks like, if any (an
        // unknown API key looks like none while tenants have API keys: validation sees to it).
        let Some(introspector) = self.introspector(token) else {
            return Err(AuthError::UnknownKey);
        };
        match self.issuers.introspected(&hash) {
            None => Err(AuthError::IntrospectionNeeded),
            Some(None) => Err(AuthError::Token("its authorization server says it is not active")),
            Some(Some((issuer, _))) if issuer != introspector.issuer.url => {
                Err(AuthError::Token("its authorization server says it is not active"))
            }
            Some(Some((issuer, claims))) => {
                // Only the tenants of the server that said it is active.
                let verifiers = self.oauth.iter().filter(|v| v.introspection.is_some() && v.issuer.url == issuer);
                one_tenant(verifiers.map(|v| v.check(&claims, now_secs, false).map(|verified| (v, verified))))
                    .map(|(_, verified)| verified)
            }
        }
    }

    /// The authorization server that introspects `token`: the one whose `opaque_token_prefix`
    /// it starts with, else the one that names none.
    fn introspector(&self, token: &str) -> Option<&OAuthVerifier> {
        let mut introspecting = self.oauth.iter().filter(|v| v.introspection.is_some());
        introspecting
            .clone()
            .filter(|v| v.opaque_prefix.as_deref().is_some_and(|p| token.starts_with(p)))
            .max_by_key(|v| v.opaque_prefix.as_ref().map_or(0, String::len))
            .or_else(|| introspecting.find(|v| v.opaque_prefix.is_none()))
    }

    /// The authorization server that introspects `token` (its issuer, and the gateway's client
    /// there): one at most.
    pub fn introspector_for(&self, token: &str) -> Option<(std::sync::Arc<super::oauth::Issuer>, String, String)> {
        let v = self.introspector(token)?;
        let (client, secret) = v.introspection.clone()?;
        Some((v.issuer.clone(), client, secret))
    }

    /// The authorization servers that introspect opaque tokens, with the gateway's client there.
    pub fn introspectors(&self) -> Vec<(std::sync::Arc<super::oauth::Issuer>, String, String)> {
        let mut all = Vec::new();
        for v in &self.oauth {
            if let Some((client, secret)) = &v.introspection {
                if !all.iter().any(|(i, c, _): &(std::sync::Arc<super::oauth::Issuer>, String, String)| {
                    i.url == v.issuer.url && c == client
                }) {
                    all.push((v.issuer.clone(), client.clone(), secret.clone()));
                }
            }
        }
        all
    }
}

/// The one tenant's verifier that takes a token, of the verdicts of every verifier of its
/// issuer: a token two tenants would take is refused; with none, the last refusal says why.
fn one_tenant<'a>(
    verdicts: impl Iterator<Item = Result<(&'a OAuthVerifier, Verified), AuthError>>,
) -> Result<(&'a OAuthVerifier, Verified), AuthError> {
    let mut taken: Option<(&OAuthVerifier, Verified)> = None;
    let mut refused = AuthError::Token("no configured tenant takes it");
    for verdict in verdicts {
        match verdict {
            Ok((v, _)) if taken.as_ref().is_some_and(|(t, _)| t.tenant == v.tenant) => {}
            Ok(_) if taken.is_some() => return Err(AuthError::Token(MORE_THAN_ONE_TENANT)),
            Ok(found) => taken = Some(found),
            Err(e) => refused = e,
        }
    }
    taken.ok_or(refused)
}

/// A JWT's claims, unverified.
fn unverified_claims(token: &str) -> Option<Value> {
    let payload = token.split('.').nth(1)?;
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).ok()?).ok()
}

impl Credentials {
    /// The scopes the configured authorization servers require, for the protected resource
    /// metadata and the challenges.
    pub fn oauth_scopes(&self) -> Vec<String> {
        let mut scopes: Vec<String> = self.oauth.iter().flat_map(|v| v.required_scopes.iter().cloned()).collect();
        scopes.sort();
        scopes.dedup();
        scopes
    }

    /// Which kinds of credentials any tenant takes: API keys, configured JWTs, OAuth access
    /// tokens.
    pub fn kinds(&self) -> (bool, bool, bool) {
        (!self.api_keys.is_empty(), !self.jwts.is_empty(), !self.oauth.is_empty())
    }

    /// The authorization servers this configuration puts in force, each once, with the
    /// `jwks_uri` it names ([`super::oauth::Issuers::install`]).
    pub fn issuers_in_force(&self) -> Vec<(std::sync::Arc<super::oauth::Issuer>, Option<String>)> {
        let mut all: Vec<(std::sync::Arc<super::oauth::Issuer>, Option<String>)> = Vec::new();
        for v in &self.oauth {
            if !all.iter().any(|(i, _)| i.url == v.issuer.url) {
                all.push((v.issuer.clone(), v.jwks_uri.clone()));
            }
        }
        all
    }

    /// The configured authorization servers' issuer identifiers.
    pub fn oauth_issuers(&self) -> Vec<String> {
        let mut issuers: Vec<String> = self.oauth.iter().map(|v| v.issuer.url.clone()).collect();
        issuers.sort();
        issuers.dedup();
        issuers
    }

    /// An OAuth 2.1 access token of `issuer` (MCP authorization, "Token Handling": a resource
    /// server MUST validate that the token was issued for it, RFC 8707 and RFC 9068).
    fn verify_access_token(
        &self,
        token: &str,
        quick: u64,
        issuer: &str,
        peek: &super::jws::Peek,
        now_secs: u64,
    ) -> Result<Verified, AuthError> {
        use super::jws::Alg;
        let header = token
            .split('.')
            .next()
            .and_then(|h| URL_SAFE_NO_PAD.decode(h).ok())
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .filter(|h| h.is_object() && token.split('.').count() == 3)
            .ok_or(AuthError::Token("its header does not decode"))?;
        // RFC 9068 section 4: the typ header MUST be at+jwt (or application/at+jwt).
        let typ = header.get("typ").and_then(Value::as_str).map(str::to_ascii_lowercase);
        if !matches!(typ.as_deref(), Some("at+jwt" | "application/at+jwt")) {
            return Err(AuthError::Token("it is not a JWT access token (typ at+jwt)"));
        }
        // RFC 7515 section 4.1.11: extensions marked critical that are not understood MUST be refused.
        if header.get("crit").is_some() {
            return Err(AuthError::Token("it names critical header extensions"));
        }
        // Asymmetric algorithms only: an HS256 token "signed" with a public key is refused.
        let alg = header
            .get("alg")
            .and_then(Value::as_str)
            .and_then(Alg::named)
            .filter(|alg| *alg != Alg::HS256)
            .ok_or(AuthError::Token("its algorithm is not an asymmetric one the gateway accepts"))?;
        let kid = header.get("kid").and_then(Value::as_str);
        let verifiers: Vec<&OAuthVerifier> = self.oauth.iter().filter(|v| v.issuer.url == issuer).collect();
        // An expired token is refused before its claims are read whole, its signature checked
        // or its keys read (what that tells a forger is the token's own exp); every other
        // refusal of its claims comes after the signature, so it tells nothing of the
        // configuration. (Its `iss` is the issuer's: that is how it came here.)
        if peek.expired(now_secs, verifiers.iter().map(|v| v.leeway_secs)) {
            return Err(AuthError::Token("it has expired"));
        }
        // A key id not held makes the keys be read again (at most once per cooldown).
        let keys = verifiers[0].issuer.keys();
        if !verifiers[0].issuer.has_key(kid) {
            return Err(AuthError::KeysNeeded(issuer.to_owned()));
        }
        let signed = keys
            .iter()
            .filter(|k| kid.is_none() || k.kid.as_deref() == kid)
            .filter(|k| k.alg.is_none_or(|published| published == alg))
            .any(|k| k.key.verifies(alg, token));
        if !signed {
            return Err(AuthError::Token("its signature does not verify with its authorization server's keys"));
        }
        let claims = unverified_claims(token)
            .filter(Value::is_object)
            .ok_or(AuthError::Token("its payload is not base64url JSON"))?;
        let (verifier, verified) =
            one_tenant(verifiers.iter().map(|v| v.check(&claims, now_secs, true).map(|verified| (*v, verified))))?;
        let hash = super::jws::sha256(token.as_bytes());
        self.verified.keep((hash, quick), &verified, keys, verifier.issuer.clone(), now_secs);
        Ok(verified)
    }
}

impl OAuthVerifier {
    /// The claims of a verified token, against this tenant's settings.
    /// `exp` is required of a JWT (RFC 9068); an introspection answer may leave it out (RFC
    /// 7662), its server having said the token is active now.
    fn check(&self, claims: &Value, now_secs: u64, exp_required: bool) -> Result<Verified, AuthError> {
        if let Some(claim) = &self.tenant_claim {
            if claims.get(claim).and_then(Value::as_str) != Some(self.tenant.as_str()) {
                return Err(AuthError::Token("its tenant claim names no tenant of this issuer"));
            }
        }
        let elsewhere = "it was issued for another resource (aud)";
        let profile_of = |aud: &str| self.profile_audiences.iter().find(|(url, _)| url == aud).map(|(_, p)| p);
        let ours = |aud: &str| aud == self.audience || profile_of(aud).is_some();
        let exp = super::claims::times_and_audience(claims, now_secs, self.leeway_secs, ours, exp_required, elsewhere)?;
        // Issued for a profile's endpoint, not the gateway's: taken at that endpoint only.
        let auds = match claims.get("aud") {
            Some(Value::String(aud)) => vec![aud.as_str()],
            Some(Value::Array(auds)) => auds.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        let for_profile = match auds.contains(&self.audience.as_str()) {
            true => None,
            false => auds.iter().find_map(|aud| profile_of(aud)).cloned(),
        };
        let granted: Vec<&str> = match (claims.get("scope"), claims.get("scp")) {
            (Some(Value::String(scope)), _) => scope.split(' ').filter(|s| !s.is_empty()).collect(),
            (_, Some(Value::Array(scopes))) => scopes.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        if let Some(missing) = self.required_scopes.iter().find(|s| !granted.contains(&s.as_str())) {
            tracing::debug!(%missing, "an access token lacks a required scope");
            return Err(AuthError::Scope(self.required_scopes.join(" ")));
        }
        // A client-credentials token may name no subject: its client is the principal, as
        // `client:<client_id>`; a subject that begins `client:` (or `sub:`) is written
        // `sub:<subject>`, so no subject is ever named as a client is.
        let (named, client) = match claims.get(&self.principal_claim) {
            None if self.principal_claim == "sub" => (claims.get("client_id"), true),
            named => (named, false),
        };
        let principal = match named {
            Some(Value::String(p)) if !p.is_empty() && client => format!("client:{p}"),
            Some(Value::Number(n)) if client => format!("client:{n}"),
            Some(Value::String(p)) if p.starts_with("client:") || p.starts_with("sub:") => format!("sub:{p}"),
            Some(Value::String(p)) if !p.is_empty() => p.clone(),
            Some(Value::Number(n)) => n.to_string(),
            Some(Value::String(_)) | None => return Err(AuthError::Token("it lacks the configured principal claim")),
            Some(_) => return Err(AuthError::Token("its principal claim is not a string")),
        };
        // Distinct from an API key's `key:` and a configured key's `jwt:` principals.
        let identity = Identity {
            tenant: self.tenant.as_str().into(),
            principal: format!("oauth:{}|{principal}", self.issuer.url).into(),
        };
        Ok(Verified {
            identity,
            scopes: Some(granted.into_iter().map(Box::from).collect()),
            expires_secs: exp,
            subject: None,
            for_profile,
        })
    }
}

fn decode_hex32(hex: &str) -> Option<[u8; 32]> {
    let mut out = [0u8; 32];
    if hex.len() != 64 {
        return None;
    }
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(i * 2..i * 2 + 2)?, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use openssl::hash::MessageDigest;
    use openssl::pkey::PKey;
    use openssl::rsa::Rsa;
    use openssl::sign::Signer;
    use serde_json::json;
    use taskgate_config::{ApiKeyConfig, JwtAlgorithm, JwtConfig, TenantConfig};

    const SECRET: &str = "0123456789abcdef0123456789abcdef";

    fn sign_hs256(claims: &Value, secret: &str) -> String {
        let head = URL_SAFE_NO_PAD.encode(br#"{"alg":"HS256","typ":"JWT"}"#);
        let body = URL_SAFE_NO_PAD.encode(claims.to_string());
        let key = PKey::hmac(secret.as_bytes()).unwrap();
        let mut signer = Signer::new(MessageDigest::sha256(), &key).unwrap();
        signer.update(format!("{head}.{body}").as_bytes()).unwrap();
        format!("{head}.{body}.{}", URL_SAFE_NO_PAD.encode(signer.sign_to_vec().unwrap()))
    }

    fn jwt(algorithm: JwtAlgorithm) -> JwtConfig {
        JwtConfig {
            algorithm,
            secret: None,
            secret_env: None,
            public_key: None,
            public_key_file: None,
            audience: "taskgate".into(),
            issuer: None,
            principal_claim: "sub".into(),
            tenant_claim: None,
            leeway_secs: 0,
        }
    }

    fn config() -> Config {
        let mut acme = TenantConfig::new("acme");
        acme.api_keys.push(ApiKeyConfig { principal: "ci".into(), sha256: hash_key("key-1") });
        acme.jwts.push(JwtConfig { secret: Some(SECRET.into()), ..jwt(JwtAlgorithm::HS256) });
        Config { tenants: vec![acme], ..Config::default() }
    }

    #[test]
    fn api_keys_resolve_by_hash_and_unknown_ones_are_refused() {
        let c = Credentials::build(&config(), &|_| None, &std::sync::Arc::new(super::super::oauth::Issuers::default()))
            .unwrap();
        let id = c.authenticate(Some("Bearer key-1"), 0).unwrap();
        assert_eq!((&*id.identity.tenant, &*id.identity.principal), ("acme", "key:ci"));
        assert_eq!(c.authenticate(Some("bearer key-1"), 0).unwrap(), id);
        assert_eq!(c.authenticate(Some("Bearer key-2"), 0), Err(AuthError::UnknownKey));
        assert_eq!(c.authenticate(Some("Basic a2V5"), 0), Err(AuthError::Missing));
        assert_eq!(c.authenticate(Some("Bearer a b"), 0), Err(AuthError::Malformed));
        assert_eq!(c.authenticate(Some("Bearer "), 0), Err(AuthError::Malformed));
        assert_eq!(c.authenticate(None, 0), Err(AuthError::Missing));
    }

    #[test]
    fn hs256_tokens_check_signature_exp_nbf_and_audience() {
        let c = Credentials::build(&config(), &|_| None, &std::sync::Arc::new(super::super::oauth::Issuers::default()))
            .unwrap();
        let good = json!({"sub": "alice", "aud": "taskgate", "exp": 2000, "nbf": 1000});
        let auth = |claims: &Value, secret: &str, now| {
            c.authenticate(Some(&format!("Bearer {}", sign_hs256(claims, secret))), now)
        };
        assert_eq!(&*auth(&good, SECRET, 1500).unwrap().identity.principal, "jwt:#0|alice");
        assert_eq!(auth(&good, SECRET, 2001), Err(AuthError::Token("it has expired")));
        // An expired token costs no signature check; any other refusal of its claims comes
        // after the signature, so a forger learns nothing of the configuration.
        assert_eq!(auth(&good, "another-secret-another-secret-xx", 2001), Err(AuthError::Token("it has expired")));
        let elsewhere = json!({"sub": "alice", "aud": "another-audience", "exp": 2000});
        assert_eq!(
            auth(&elsewhere, "another-secret-another-secret-xx", 1500),
            Err(AuthError::Token("no configured issuer signed it"))
        );
        assert_eq!(auth(&good, SECRET, 999), Err(AuthError::Token("it is not valid yet (nbf)")));
        assert_eq!(
            auth(&good, "another-secret-another-secret-xx", 1500),
            Err(AuthError::Token("no configured issuer signed it"))
        );
        let other_aud = json!({"sub": "alice", "aud": ["x", "y"], "exp": 2000});
        assert!(matches!(auth(&other_aud, SECRET, 1500), Err(AuthError::Token(_))));
        let listed_aud = json!({"sub": "alice", "aud": ["x", "taskgate"], "exp": 2000});
        assert!(auth(&listed_aud, SECRET, 1500).is_ok());
        // A signed token whose subject is not a string says so (not "no issuer signed it").
        let numeric_sub = json!({"sub": {"id": 7}, "aud": "taskgate", "exp": 2000});
        assert_eq!(auth(&numeric_sub, SECRET, 1500), Err(AuthError::Token("its principal claim is not a string")));
        let no_exp = json!({"sub": "alice", "aud": "taskgate"});
        assert_eq!(auth(&no_exp, SECRET, 1500), Err(AuthError::Token("it has no exp claim")));
        // A token whose header claims "none" is refused whatever its signature.
        let head = URL_SAFE_NO_PAD.encode(br#"{"alg":"none"}"#);
        let body = URL_SAFE_NO_PAD.encode(good.to_string());
        assert!(c.authenticate(Some(&format!("Bearer {head}.{body}.")), 1500).is_err());
    }

    #[test]
    fn rs256_tokens_verify_with_the_public_key_and_tenant_claims_select_the_tenant() {
        let rsa = Rsa::generate(2048).unwrap();
        let private = PKey::from_rsa(rsa).unwrap();
        let public_pem = String::from_utf8(private.public_key_to_pem().unwrap()).unwrap();
        let mut config = config();
        for id in ["acme", "globex"] {
            let mut t = TenantConfig::new(id);
            t.jwts.push(JwtConfig {
                public_key: Some(public_pem.clone()),
                tenant_claim: Some("org".into()),
                ..jwt(JwtAlgorithm::RS256)
            });
            config.tenants.push(t);
        }
        config.tenants.remove(0);
        let c = Credentials::build(&config, &|_| None, &std::sync::Arc::new(super::super::oauth::Issuers::default()))
            .unwrap();
        let sign = |claims: Value| {
            let head = URL_SAFE_NO_PAD.encode(br#"{"alg":"RS256"}"#);
            let body = URL_SAFE_NO_PAD.encode(claims.to_string());
            let mut signer = Signer::new(MessageDigest::sha256(), &private).unwrap();
            signer.update(format!("{head}.{body}").as_bytes()).unwrap();
            format!("Bearer {head}.{body}.{}", URL_SAFE_NO_PAD.encode(signer.sign_to_vec().unwrap()))
        };
        let id = c
            .authenticate(Some(&sign(json!({"sub": "bob", "org": "globex", "aud": "taskgate", "exp": 10}))), 5)
            .unwrap();
        assert_eq!((&*id.identity.tenant, &*id.identity.principal), ("globex", "jwt:#0|bob"));
        let unknown_org = sign(json!({"sub": "bob", "org": "initech", "aud": "taskgate", "exp": 10}));
        assert!(c.authenticate(Some(&unknown_org), 5).is_err());
        // An HS256 token "signed" with the public key as an HMAC secret is refused (alg confusion).
        let confused = sign_hs256(&json!({"sub": "bob", "org": "acme", "aud": "taskgate", "exp": 10}), &public_pem);
        assert!(c.authenticate(Some(&format!("Bearer {confused}")), 5).is_err());
    }

    #[test]
    fn a_token_two_tenants_would_take_is_refused_and_a_shared_key_needs_one_tenant_claim() {
        let tenant = |id: &str, audience: &str, claim: Option<&str>| {
            let mut t = TenantConfig::new(id);
            t.jwts.push(JwtConfig {
                secret: Some(SECRET.into()),
                audience: audience.into(),
                tenant_claim: claim.map(str::to_owned),
                ..jwt(JwtAlgorithm::HS256)
            });
            t
        };
        let issuers = std::sync::Arc::new(super::super::oauth::Issuers::default());
        // One key, one audience (as written or with a trailing slash): refused at start.
        let same = Config {
            tenants: vec![tenant("a", "https://gw/mcp", None), tenant("b", "https://gw/mcp/", None)],
            ..Config::default()
        };
        let problems = Credentials::build(&same, &|_| None, &issuers).err().unwrap();
        assert!(problems[0].message.contains("same tenant_claim"), "{problems:?}");
        let claimed = Config {
            tenants: vec![tenant("a", "https://gw", Some("org")), tenant("b", "https://gw", Some("org"))],
            ..Config::default()
        };
        assert!(Credentials::build(&claimed, &|_| None, &issuers).is_ok());
        // One key for two audiences: a token naming both is neither tenant's.
        let two = Config {
            tenants: vec![tenant("a", "https://a", None), tenant("b", "https://b", None)],
            ..Config::default()
        };
        let c = Credentials::build(&two, &|_| None, &issuers).unwrap();
        let auth = |aud: Value| {
            let token = sign_hs256(&json!({"sub": "eve", "aud": aud, "exp": 10}), SECRET);
            c.authenticate(Some(&format!("Bearer {token}")), 5)
        };
        assert_eq!(&*auth(json!("https://b")).unwrap().identity.tenant, "b");
        assert_eq!(auth(json!(["https://a", "https://b"])), Err(AuthError::Token(MORE_THAN_ONE_TENANT)));
    }

    #[test]
    fn a_client_credentials_principal_is_never_a_subjects() {
        let issuer = std::sync::Arc::new(super::super::oauth::Issuers::default()).issuer("https://as", None);
        let verifier = OAuthVerifier {
            tenant: "acme".into(),
            issuer,
            audience: "https://gw".into(),
            profile_audiences: vec![("https://gw/finder".into(), "finder".into())],
            required_scopes: Vec::new(),
            principal_claim: "sub".into(),
            tenant_claim: None,
            leeway_secs: 0,
            introspection: None,
            opaque_prefix: None,
            jwks_uri: None,
        };
        let principal = |claims: Value| {
            let mut claims = claims;
            claims["aud"] = json!("https://gw");
            claims["exp"] = json!(10);
            verifier.check(&claims, 5, true).map(|v| v.identity.principal.to_string())
        };
        assert_eq!(principal(json!({"client_id": "svc"})).unwrap(), "oauth:https://as|client:svc");
        assert_eq!(principal(json!({"sub": "client:svc"})).unwrap(), "oauth:https://as|sub:client:svc");
        assert_eq!(principal(json!({"sub": "sub:x"})).unwrap(), "oauth:https://as|sub:sub:x");
        assert_eq!(principal(json!({"sub": "alice", "client_id": "svc"})).unwrap(), "oauth:https://as|alice");
        assert_eq!(principal(json!({"client_id": 123})).unwrap(), "oauth:https://as|client:123");
        assert_eq!(principal(json!({"sub": "123"})).unwrap(), "oauth:https://as|123");
        // A profile's endpoint is a resource of the gateway's: a token for it is taken; one for
        // another resource is not.
        let at = |aud: Value| {
            let verified = verifier.check(&json!({"sub": "alice", "aud": aud, "exp": 10}), 5, true);
            verified.map(|v| v.for_profile.as_deref().map(str::to_owned))
        };
        assert_eq!(at(json!("https://gw/finder")), Ok(Some("finder".into())));
        assert_eq!(at(json!(["https://other", "https://gw/finder"])), Ok(Some("finder".into())));
        assert_eq!(at(json!(["https://gw/finder", "https://gw"])), Ok(None), "the gateway's own: taken anywhere");
        assert!(at(json!("https://gw/other")).is_err() && at(json!("https://gw/finder/x")).is_err());
    }

    #[test]
    fn a_profiles_url_is_an_audience_where_tokens_carry_the_gateways_url() {
        let audiences = |audience: &str| {
            let text = format!(
                "[server]\npublic_url = \"https://gw.example/mcp\"\n[[tenant]]\nid = \"acme\"\n\
                 [[tenant.oauth]]\nissuer = \"https://as.example\"\n{audience}\n\
                 [[tenant.profile]]\nname = \"finder\"\n"
            );
            let config = Config::parse_unvalidated(&text, "t.toml", &|_| None).unwrap();
            let issuers = std::sync::Arc::new(super::super::oauth::Issuers::default());
            let built = Credentials::build(&config, &|_| None, &issuers).unwrap();
            built.oauth[0].profile_audiences.iter().map(|(url, _)| url.clone()).collect::<Vec<_>>()
        };
        let finder = ["https://gw.example/mcp/finder".to_owned()];
        assert_eq!(audiences(""), finder, "the gateway's URL by default");
        assert_eq!(audiences("audience = \"HTTPS://GW.example/mcp/\""), finder, "the same URL, written otherwise");
        assert!(audiences("audience = \"taskgate\"").is_empty(), "another audience: every endpoint takes it");
    }

    #[test]
    fn key_problems_are_reported_where_they_are() {
        let mut config = config();
        config.tenants[0].jwts = vec![
            JwtConfig { secret_env: Some("NOT_SET".into()), ..jwt(JwtAlgorithm::HS256) },
            JwtConfig { public_key: Some("not pem".into()), ..jwt(JwtAlgorithm::RS256) },
        ];
        let problems =
            Credentials::build(&config, &|_| None, &std::sync::Arc::new(super::super::oauth::Issuers::default()))
                .err()
                .unwrap();
        let locations: Vec<_> = problems.iter().map(|p| p.location.as_str()).collect();
        assert_eq!(locations, ["tenant[0] (\"acme\").jwt[0].secret_env", "tenant[0] (\"acme\").jwt[1].public_key"]);
    }
}
