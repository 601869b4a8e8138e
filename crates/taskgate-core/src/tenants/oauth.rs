//! The keys of OAuth 2.1 authorization servers whose access tokens the gateway accepts (it is
//! their resource server, MCP authorization).
//!
//! An issuer's metadata is read from `<issuer>/.well-known/oauth-authorization-server`
//! (RFC 8414, the well-known part inserted before the issuer's path), else from OpenID Connect
//! Discovery's `/.well-known/openid-configuration`; its `issuer` must be the configured one
//! (RFC 8414 section 3.3). The keys come from its `jwks_uri` and are kept for as long as its
//! `Cache-Control: max-age` says (between a minute and an hour; five minutes without one), then
//! read again in the background. A token whose key id is not among them makes the keys be read
//! again at once, at most once every [`FORCED_REFRESH`] per issuer, so a rotation at the
//! authorization server needs no restart. While the authorization server cannot be reached the
//! keys already read keep serving; `/readyz` and `taskgate_oauth_keys{issuer}` say so.
//!
//! Keys are kept per issuer for the life of the process (a configuration reload keeps them).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::RwLock;
use serde_json::Value;

/// The least time between two reads of an issuer's keys forced by an unknown key id.
pub const FORCED_REFRESH: Duration = Duration::from_secs(10);
/// How long keys are kept without caching headers.
const DEFAULT_KEEP: Duration = Duration::from_secs(300);
/// Bounds on what caching headers may say.
const KEEP_AT_LEAST: Duration = Duration::from_secs(60);
const KEEP_AT_MOST: Duration = Duration::from_secs(3_600);
/// The longest wait for an authorization server's answer.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest metadata or key set read.
const MAX_DOCUMENT: usize = 1 << 20;
/// The largest introspection answer read (each active one is kept, up to 10,000).
const MAX_INTROSPECTION: usize = 16 << 10;

/// One verifying key.
pub(crate) struct Key {
    pub kid: Option<String>,
    /// The algorithm the key is published for (its JWK's `alg`), which a token must use.
    pub alg: Option<super::jws::Alg>,
    pub key: super::jws::Key,
}

#[derive(Default)]
struct KeyState {
    /// The `jwks_uri` the configuration names (none: the metadata's).
    configured: Option<String>,
    jwks_uri: Option<String>,
    /// The key set as last read: a read that finds it unchanged keeps `keys` (and with them
    /// the tokens verified with them).
    listed: Vec<Value>,
    introspection_endpoint: Option<String>,
    keys: Arc<Vec<Key>>,
    fresh_until: Option<Instant>,
    /// When a token's unknown key id last made the keys be read.
    last_forced: Option<Instant>,
    /// When the metadata was last read for the introspection endpoint.
    last_discovery: Option<Instant>,
    error: Option<String>,
}

/// One authorization server.
pub struct Issuer {
    /// Its issuer identifier.
    pub url: String,
    state: RwLock<KeyState>,
    /// One read at a time.
    reading: tokio::sync::Mutex<()>,
    /// Introspections started in the current second: the second, the count, and each
    /// client source's count (unknown opaque tokens cannot make the gateway flood the
    /// server, nor one client take another's turn).
    asked: parking_lot::Mutex<(u64, u32, HashMap<std::net::IpAddr, u32>)>,
}

/// Why a token is not introspected now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotAsked {
    /// The client sending it has had its share of this second's introspections.
    OverShare,
    /// This second's introspections at its server are spent.
    Spent,
}

/// Introspections a second at most, per authorization server.
pub const INTROSPECTIONS_PER_SECOND: u32 = 100;
/// Of which one client source may start at most.
pub const INTROSPECTIONS_PER_SOURCE: u32 = INTROSPECTIONS_PER_SECOND / 10;

/// What `/readyz` shows of an issuer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuerHealth {
    /// The issuer identifier.
    pub issuer: String,
    /// Keys held now.
    pub keys: usize,
    /// Why the last read failed, when it did.
    pub error: Option<String>,
    /// Whether its tokens need its keys (not when it only introspects opaque tokens).
    pub needs_keys: bool,
}

impl Issuer {
    /// The keys that may have signed a token naming `kid` (all of them when it names none).
    pub(crate) fn keys(&self) -> Arc<Vec<Key>> {
        self.state.read().keys.clone()
    }

    /// Waits (at most [`FETCH_TIMEOUT`]) for a read of the keys under way to end; at once when
    /// none is.
    pub(crate) async fn await_read(&self) {
        if self.reading.try_lock().is_err() {
            let _ = tokio::time::timeout(FETCH_TIMEOUT, self.reading.lock()).await;
        }
    }

    /// Whether a key of `kid` is held.
    pub(crate) fn has_key(&self, kid: Option<&str>) -> bool {
        let state = self.state.read();
        match kid {
            Some(kid) => state.keys.iter().any(|k| k.kid.as_deref() == Some(kid)),
            None => !state.keys.is_empty(),
        }
    }

    /// Reads the keys again: when `forced` (an unknown key id), unless that was done less than
    /// [`FORCED_REFRESH`] ago; otherwise only when they are due.
    ///
    /// A forced read is claimed before anything is awaited: while one is under way or was made
    /// within the cooldown, the callers that would force another (tokens naming key ids not
    /// held: anyone can send those) return at once, waiting on nothing.
    /// Whether the keys were read (or tried to be).
    pub async fn refresh(&self, http: &reqwest::Client, forced: bool) -> bool {
        if forced {
            let now = Instant::now();
            let mut state = self.state.write();
            if state.last_forced.is_some_and(|at| now.duration_since(at) < FORCED_REFRESH) {
                return false;
            }
            state.last_forced = Some(now);
        }
        let _one = self.reading.lock().await;
        if !forced && self.state.read().fresh_until.is_some_and(|until| Instant::now() < until) {
            return false;
        }
        let (jwks_uri, configured) = {
            let state = self.state.read();
            (state.jwks_uri.clone(), state.configured.clone())
        };
        let outcome = async {
            let jwks_uri = match jwks_uri {
                Some(uri) => uri,
                None => self.discover(http).await?.0.ok_or_else(|| format!("{} publishes no jwks_uri", self.url))?,
            };
            let (body, keep) = fetch(http, &jwks_uri).await?;
            let set: Value = serde_json::from_slice(&body).map_err(|e| format!("{jwks_uri} is not a JWK set: {e}"))?;
            let listed = set
                .get("keys")
                .and_then(Value::as_array)
                .ok_or_else(|| format!("{jwks_uri} is not a JWK set: it has no \"keys\""))?;
            let keys: Vec<Key> = listed
                .iter()
                .filter_map(|jwk| {
                    let kid = jwk.get("kid").and_then(Value::as_str).map(str::to_owned);
                    // RFC 8725 section 3.1: a key is used with the algorithm it is published for.
                    let alg = match jwk.get("alg") {
                        None => None,
                        Some(named) => Some(named.as_str().and_then(super::jws::Alg::named)?),
                    };
                    super::jws::Key::from_jwk(jwk).map(|key| Key { kid, alg, key })
                })
                .collect();
            if keys.is_empty() {
                return Err(format!("{jwks_uri} holds no key the gateway can verify with"));
            }
            Ok((jwks_uri, keys, keep, listed.clone()))
        }
        .await;
        let mut state = self.state.write();
        if state.configured != configured {
            // A reload named another jwks_uri meanwhile: what was read is no longer its keys.
            return true;
        }
        match outcome {
            Ok((jwks_uri, keys, keep, listed)) => {
                tracing::info!(issuer = %self.url, keys = keys.len(), "read the authorization server's keys");
                state.jwks_uri = Some(jwks_uri);
                if listed != state.listed || state.keys.is_empty() {
                    state.keys = Arc::new(keys);
                    state.listed = listed;
                }
                state.fresh_until = Some(Instant::now() + keep);
                state.error = None;
            }
            Err(why) => {
                tracing::warn!(issuer = %self.url, %why, held = state.keys.len(), "cannot read the authorization server's keys; those held keep serving");
                state.error = Some(why);
            }
        }
        true
    }

    /// The `jwks_uri` and `introspection_endpoint` of the issuer's metadata (RFC 8414, else
    /// OpenID Connect Discovery); each must be https (or http on loopback).
    async fn discover(&self, http: &reqwest::Client) -> Result<(Option<String>, Option<String>), String> {
        let mut tried = Vec::new();
        for url in metadata_urls(&self.url) {
            match fetch(http, &url).await {
                Ok((body, _)) => {
                    let metadata: Value =
                        serde_json::from_slice(&body).map_err(|e| format!("{url} is not JSON metadata: {e}"))?;
                    // RFC 8414 section 3.3: the issuer in the metadata MUST be the one asked for.
                    let named = metadata.get("issuer").and_then(Value::as_str);
                    if named != Some(self.url.as_str()) {
                        // Both named: a trailing slash one side and not the other is the usual cause.
                        let named = named.map_or_else(|| "none".to_owned(), |n| format!("{n:?}"));
                        return Err(format!(
                            "{url} names the issuer {named}, not {:?} as configured (they must be equal, to the last character)",
                            self.url
                        ));
                    }
                    let field = |name: &str| -> Result<Option<String>, String> {
                        match metadata.get(name).and_then(Value::as_str) {
                            None => Ok(None),
                            Some(found) => taskgate_config::secure_url(found)
                                .map(|()| Some(found.to_owned()))
                                .map_err(|why| format!("{url}: its {name} {why}")),
                        }
                    };
                    let (jwks_uri, introspection) = (field("jwks_uri")?, field("introspection_endpoint")?);
                    self.state.write().introspection_endpoint = introspection.clone();
                    return Ok((jwks_uri, introspection));
                }
                Err(why) => tried.push(why),
            }
        }
        Err(format!("no metadata found: {}", tried.join("; ")))
    }

    /// The introspection endpoint, read from the metadata when not known yet (at most once
    /// every [`FORCED_REFRESH`] after a failure).
    async fn introspection_endpoint(&self, http: &reqwest::Client) -> Result<String, String> {
        if let Some(endpoint) = self.state.read().introspection_endpoint.clone() {
            return Ok(endpoint);
        }
        let _one = self.reading.lock().await;
        if let Some(endpoint) = self.state.read().introspection_endpoint.clone() {
            return Ok(endpoint);
        }
        {
            let mut state = self.state.write();
            let now = Instant::now();
            if state.last_discovery.is_some_and(|at| now.duration_since(at) < FORCED_REFRESH) {
                return Err(state
                    .error
                    .clone()
                    .unwrap_or_else(|| format!("{} publishes no introspection_endpoint", self.url)));
            }
            state.last_discovery = Some(now);
        }
        match self.discover(http).await {
            Ok((_, Some(endpoint))) => Ok(endpoint),
            Ok((_, None)) => Err(format!("{} publishes no introspection_endpoint", self.url)),
            Err(why) => {
                self.state.write().error = Some(why.clone());
                Err(why)
            }
        }
    }

    /// Takes one of the introspections this server allows this second, for a token `source`
    /// sent (none known: it counts against the server's budget only).
    pub fn may_introspect(&self, source: Option<std::net::IpAddr>, now_secs: u64) -> Result<(), NotAsked> {
        let mut asked = self.asked.lock();
        if asked.0 != now_secs {
            *asked = (now_secs, 0, HashMap::new());
        }
        let (_, total, by_source) = &mut *asked;
        if let Some(source) = source {
            if by_source.get(&source).is_some_and(|n| *n >= INTROSPECTIONS_PER_SOURCE) {
                return Err(NotAsked::OverShare);
            }
        }
        if *total >= INTROSPECTIONS_PER_SECOND {
            return Err(NotAsked::Spent);
        }
        *total += 1;
        if let Some(source) = source {
            *by_source.entry(source).or_default() += 1;
        }
        Ok(())
    }

    /// What `/readyz` shows.
    pub fn health(&self) -> IssuerHealth {
        let state = self.state.read();
        IssuerHealth { issuer: self.url.clone(), keys: state.keys.len(), error: state.error.clone(), needs_keys: true }
    }
}

/// `application/x-www-form-urlencoded` of one value (also what a client id and secret are
/// before HTTP Basic authentication, RFC 6749 section 2.3.1).
fn form_encode(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

/// Where an issuer's metadata may be: RFC 8414 section 3.1 (the well-known part between the
/// host and the issuer's path), then OpenID Connect Discovery 1.0 section 4 (appended).
pub fn metadata_urls(issuer: &str) -> Vec<String> {
    let trimmed = issuer.trim_end_matches('/');
    let (origin, path) = match trimmed.find("://").map(|i| i + 3) {
        Some(start) => match trimmed[start..].find('/') {
            Some(slash) => trimmed.split_at(start + slash),
            None => (trimmed, ""),
        },
        None => (trimmed, ""),
    };
    let mut urls = vec![format!("{origin}/.well-known/oauth-authorization-server{path}")];
    urls.push(format!("{trimmed}/.well-known/openid-configuration"));
    if !path.is_empty() {
        urls.push(format!("{origin}/.well-known/openid-configuration{path}"));
    }
    urls
}

/// GETs a JSON document, bounded in time and size; its body and how long it may be kept.
async fn fetch(http: &reqwest::Client, url: &str) -> Result<(Vec<u8>, Duration), String> {
    let response = tokio::time::timeout(FETCH_TIMEOUT, http.get(url).header("accept", "application/json").send())
        .await
        .map_err(|_| format!("{url} did not answer within {} s", FETCH_TIMEOUT.as_secs()))?
        .map_err(|e| format!("{url}: {e}"))?;
    if !response.status().is_success() {
        return Err(format!("{url} answered {}", response.status()));
    }
    let keep = response
        .headers()
        .get("cache-control")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.split(',').find_map(|d| d.trim().strip_prefix("max-age=").and_then(|s| s.trim().parse::<u64>().ok()))
        })
        .map_or(DEFAULT_KEEP, |secs| Duration::from_secs(secs).clamp(KEEP_AT_LEAST, KEEP_AT_MOST));
    Ok((read_bounded(response, url, MAX_DOCUMENT).await?, keep))
}

/// A response's body, at most `max` bytes read within [`FETCH_TIMEOUT`]: a server that sends
/// more, or sends it slowly, is refused without its body being held.
pub(crate) async fn read_bounded(mut response: reqwest::Response, url: &str, max: usize) -> Result<Vec<u8>, String> {
    if response.content_length().is_some_and(|n| n > max as u64) {
        return Err(format!("{url} sends more than {max} bytes"));
    }
    let read = async {
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| format!("{url}: {e}"))? {
            if body.len() + chunk.len() > max {
                return Err(format!("{url} sent more than {max} bytes"));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    };
    tokio::time::timeout(FETCH_TIMEOUT, read)
        .await
        .map_err(|_| format!("{url} did not send its answer within {} s", FETCH_TIMEOUT.as_secs()))?
}

/// Tokens introspected, at most.
const MAX_INTROSPECTED: usize = 10_000;
/// How long an active token's introspection is kept at most (and an inactive one's).
const KEEP_ACTIVE: Duration = Duration::from_secs(60);
const KEEP_INACTIVE: Duration = Duration::from_secs(30);

/// What introspection said of a token (by its SHA-256): the server it is active at, and its
/// claims.
type Introspected = HashMap<[u8; 32], (Option<(String, Value)>, Instant)>;

/// Every issuer the configuration names, kept across reloads, and what introspection said of
/// opaque tokens lately (bounded in entries and time).
pub struct Issuers {
    known: RwLock<HashMap<String, Arc<Issuer>>>,
    http: reqwest::Client,
    introspected: parking_lot::Mutex<Introspected>,
}

impl Default for Issuers {
    fn default() -> Self {
        let http =
            // No redirects: a token or a secret is never resent where a redirect points.
            reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap_or_default();
        Issuers { known: RwLock::default(), http, introspected: parking_lot::Mutex::default() }
    }
}

impl Issuers {
    /// The issuer of `url` for a configuration being built: the one in force, or a new one (with
    /// its configured `jwks_uri` when metadata is not read) that nothing reads until the
    /// configuration is [`Issuers::install`]ed. Nothing in force changes here: a configuration
    /// refused after this leaves every issuer as it was.
    pub fn issuer(&self, url: &str, jwks_uri: Option<&str>) -> Arc<Issuer> {
        if let Some(issuer) = self.known.read().get(url) {
            return issuer.clone();
        }
        let configured = jwks_uri.map(str::to_owned);
        let state = KeyState { configured: configured.clone(), jwks_uri: configured, ..KeyState::default() };
        Arc::new(Issuer {
            url: url.to_owned(),
            state: RwLock::new(state),
            reading: tokio::sync::Mutex::new(()),
            asked: parking_lot::Mutex::default(),
        })
    }

    /// Puts in force the issuers of a configuration that was accepted, each with the `jwks_uri`
    /// it names (one that names another than before has its keys dropped and read from there
    /// at once), and forgets the others (their keys are no longer read, nor shown).
    pub fn install(&self, in_force: &[(Arc<Issuer>, Option<String>)]) {
        let mut known = self.known.write();
        known.retain(|url, _| in_force.iter().any(|(i, _)| i.url == *url));
        for (issuer, jwks_uri) in in_force {
            known.insert(issuer.url.clone(), issuer.clone());
            let mut state = issuer.state.write();
            if state.configured != *jwks_uri {
                *state = KeyState { configured: jwks_uri.clone(), jwks_uri: jwks_uri.clone(), ..KeyState::default() };
            }
        }
    }

    /// The issuer named `url`, if configured.
    pub fn get(&self, url: &str) -> Option<Arc<Issuer>> {
        self.known.read().get(url).cloned()
    }

    /// Every issuer's health.
    pub fn health(&self) -> Vec<IssuerHealth> {
        let mut all: Vec<_> = self.known.read().values().map(|i| i.health()).collect();
        all.sort_by(|a, b| a.issuer.cmp(&b.issuer));
        all
    }

    /// Reads the keys of every issuer that are due.
    pub async fn refresh_due(&self) {
        let issuers: Vec<_> = self.known.read().values().cloned().collect();
        let reads = issuers.iter().map(|i| i.refresh(&self.http, false));
        futures_util::future::join_all(reads).await;
    }

    /// What introspection said of the token of `hash` lately: `Some(Some((issuer, claims)))`
    /// active at that issuer, `Some(None)` active at none asked, `None` not asked (or no longer
    /// kept).
    pub(crate) fn introspected(&self, hash: &[u8; 32]) -> Option<Option<(String, Value)>> {
        let cache = self.introspected.lock();
        cache.get(hash).filter(|(_, until)| Instant::now() < *until).map(|(found, _)| found.clone())
    }

    /// Keeps what introspection said of a token: active at `issuer` (until its `exp`, at most a
    /// minute) or at none (30 s). Over the bound, expired answers go first, then inactive ones.
    pub(crate) fn remember(&self, token: &str, found: Option<(String, Value)>) {
        let now = Instant::now();
        let keep = match &found {
            Some((_, claims)) => claims
                .get("exp")
                .and_then(Value::as_u64)
                .map(|exp| {
                    let unix =
                        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
                    Duration::from_secs(exp.saturating_sub(unix))
                })
                .unwrap_or(KEEP_ACTIVE)
                .min(KEEP_ACTIVE),
            None => KEEP_INACTIVE,
        };
        let mut cache = self.introspected.lock();
        if cache.len() >= MAX_INTROSPECTED {
            cache.retain(|_, (_, until)| now < *until);
        }
        if cache.len() >= MAX_INTROSPECTED {
            cache.retain(|_, (found, _)| found.is_some());
        }
        if cache.len() >= MAX_INTROSPECTED {
            let evict: Vec<[u8; 32]> = cache.keys().take(MAX_INTROSPECTED / 10).copied().collect();
            for key in evict {
                cache.remove(&key);
            }
        }
        cache.insert(super::jws::sha256(token.as_bytes()), (found, now + keep));
    }

    /// Asks `issuer`'s introspection endpoint about `token` (RFC 7662), authenticating as
    /// `client`: the claims when it is active there. An answer naming another issuer is not
    /// this issuer's token.
    pub async fn introspect(
        &self,
        issuer: &Arc<Issuer>,
        client: &str,
        secret: &str,
        token: &str,
    ) -> Result<Option<Value>, String> {
        let endpoint = issuer.introspection_endpoint(&self.http).await?;
        let body = format!("token={}&token_type_hint=access_token", form_encode(token));
        let sent = self
            .http
            .post(&endpoint)
            .basic_auth(form_encode(client), Some(form_encode(secret)))
            .header("content-type", "application/x-www-form-urlencoded")
            .header("accept", "application/json")
            .body(body)
            .send();
        let response = tokio::time::timeout(FETCH_TIMEOUT, sent)
            .await
            .map_err(|_| format!("{endpoint} did not answer within {} s", FETCH_TIMEOUT.as_secs()))?
            .map_err(|e| format!("{endpoint}: {e}"))?;
        if !response.status().is_success() {
            return Err(format!("{endpoint} answered {}", response.status()));
        }
        // An answer is a token's claims, kept while the token is: a few hundred bytes, bounded.
        let body = read_bounded(response, &endpoint, MAX_INTROSPECTION).await?;
        let answer: Value = serde_json::from_slice(&body).map_err(|e| format!("{endpoint} answered no JSON: {e}"))?;
        let active = answer.get("active") == Some(&Value::Bool(true));
        let theirs = answer.get("iss").and_then(Value::as_str).is_none_or(|iss| iss == issuer.url);
        Ok((active && theirs).then_some(answer))
    }

    /// Reads `url`'s keys again now (a token named a key id not held), rate-bounded.
    /// Whether they were read: not within the cooldown of the last forced read.
    pub async fn refresh_now(&self, url: &str) -> bool {
        match self.get(url) {
            Some(issuer) => issuer.refresh(&self.http, true).await,
            None => false,
        }
    }

    /// Waits for a read of `url`'s keys under way (another request's) to end.
    pub async fn await_read(&self, url: &str) {
        if let Some(issuer) = self.get(url) {
            issuer.await_read().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_is_looked_for_where_rfc_8414_and_openid_discovery_put_it() {
        assert_eq!(
            metadata_urls("https://idp.example.com"),
            [
                "https://idp.example.com/.well-known/oauth-authorization-server",
                "https://idp.example.com/.well-known/openid-configuration"
            ]
        );
        assert_eq!(
            metadata_urls("https://idp.example.com/tenant/a/"),
            [
                "https://idp.example.com/.well-known/oauth-authorization-server/tenant/a",
                "https://idp.example.com/tenant/a/.well-known/openid-configuration",
                "https://idp.example.com/.well-known/openid-configuration/tenant/a",
            ]
        );
    }

    /// Tokens naming key ids not held make one read of the keys; while it is under way (here an
    /// authorization server that never answers) and for the cooldown after, the others that
    /// would force one return at once, waiting on nothing.
    #[tokio::test]
    async fn unknown_key_ids_force_one_read_and_nobody_waits_on_it() {
        use futures_util::FutureExt;
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let jwks = format!("http://{}/jwks", silent.local_addr().unwrap());
        let issuers = Issuers::default();
        let issuer = issuers.issuer("https://idp.example.com", Some(&jwks));
        let http = reqwest::Client::new();
        let reading = tokio::spawn({
            let (issuer, http) = (issuer.clone(), http.clone());
            async move { issuer.refresh(&http, true).await }
        });
        while issuer.state.read().last_forced.is_none() {
            tokio::task::yield_now().await;
        }
        for _ in 0..1000 {
            assert!(issuer.refresh(&http, true).now_or_never().is_some(), "a forced read waited");
        }
        assert!(!reading.is_finished(), "the one read is still waiting for its answer");
        // A request whose key id is still not held after its own look waits for the read under
        // way (a rotation's new key arrives with it), and goes on once it ends.
        let waiting = tokio::spawn({
            let issuer = issuer.clone();
            async move { issuer.await_read().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        reading.abort();
        waiting.await.unwrap();
        assert!(issuer.await_read().now_or_never().is_some(), "with no read under way, nobody waits");
        drop(silent);
    }

    /// A key set server on loopback: every request gets `body`; the paths asked are kept.
    async fn key_set_server(body: String) -> (String, Arc<parking_lot::Mutex<Vec<String>>>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let asked = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let seen = asked.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let mut request = vec![0u8; 4096];
                let n = socket.read(&mut request).await.unwrap_or(0);
                let line = String::from_utf8_lossy(&request[..n]).lines().next().unwrap_or_default().to_owned();
                seen.lock().push(line.split(' ').nth(1).unwrap_or_default().to_owned());
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = socket.write_all(format!("{head}{body}").as_bytes()).await;
            }
        });
        (base, asked)
    }

    fn es256_jwk(kid: &str) -> Value {
        use openssl::bn::{BigNum, BigNumContext};
        use openssl::ec::{EcGroup, EcKey};
        let group = EcGroup::from_curve_name(openssl::nid::Nid::X9_62_PRIME256V1).unwrap();
        let key = EcKey::generate(&group).unwrap();
        let (mut x, mut y, mut ctx) = (BigNum::new().unwrap(), BigNum::new().unwrap(), BigNumContext::new().unwrap());
        key.public_key().affine_coordinates(&group, &mut x, &mut y, &mut ctx).unwrap();
        let b64 = |n: &BigNum| {
            base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, n.to_vec_padded(32).unwrap())
        };
        serde_json::json!({"kty": "EC", "crv": "P-256", "x": b64(&x), "y": b64(&y), "kid": kid, "alg": "ES256", "use": "sig"})
    }

    #[tokio::test]
    async fn an_unchanged_key_set_keeps_the_keys_and_a_reload_naming_another_jwks_uri_reads_there_at_once() {
        let set = serde_json::json!({"keys": [es256_jwk("k1")]}).to_string();
        let (base, asked) = key_set_server(set).await;
        let issuers = Issuers::default();
        let one = Some(format!("{base}/one"));
        let issuer = issuers.issuer("https://idp.example.com", one.as_deref());
        issuers.install(&[(issuer.clone(), one)]);
        let http = reqwest::Client::new();
        assert!(issuer.refresh(&http, false).await);
        let first = issuer.keys();
        assert_eq!(first.len(), 1);
        // Read again (an unknown key id forced it): the same keys, so the same set, and the
        // tokens verified with it stay verified.
        assert!(issuer.refresh(&http, true).await);
        assert!(Arc::ptr_eq(&first, &issuer.keys()), "an unchanged key set is kept as it was");
        // A configuration naming another jwks_uri changes nothing until it is put in force...
        let two = Some(format!("{base}/two"));
        let same = issuers.issuer("https://idp.example.com", two.as_deref());
        assert!(Arc::ptr_eq(&same, &issuer));
        assert!(Arc::ptr_eq(&first, &issuer.keys()), "a configuration refused leaves the keys in force");
        let fresh = issuers.issuer("https://new.example.com", None);
        assert!(issuers.get("https://new.example.com").is_none() && fresh.keys().is_empty());
        // ...then the keys held are dropped, and read from there.
        issuers.install(&[(same, two.clone())]);
        assert!(issuer.keys().is_empty(), "the old uri's keys no longer verify");
        assert!(issuer.refresh(&http, false).await, "due at once");
        assert_eq!(*asked.lock(), ["/one", "/one", "/two"]);
        // The same configuration again changes nothing.
        let kept = issuer.keys();
        issuers.install(&[(issuers.issuer("https://idp.example.com", two.as_deref()), two)]);
        assert!(Arc::ptr_eq(&kept, &issuer.keys()));
    }

    #[test]
    fn each_server_has_its_own_introspection_budget_and_each_client_its_share_of_it() {
        let issuers = Issuers::default();
        let (a, b) = (issuers.issuer("https://a.example", None), issuers.issuer("https://b.example", None));
        let client = |n: u8| Some(std::net::IpAddr::from([192, 0, 2, n]));
        // One client: its share, then 401 (OverShare), whatever the server has left.
        for _ in 0..INTROSPECTIONS_PER_SOURCE {
            assert_eq!(a.may_introspect(client(1), 100), Ok(()));
        }
        assert_eq!(a.may_introspect(client(1), 100), Err(NotAsked::OverShare));
        // Many clients: the server's budget, then 503 (Spent) for everyone at that server...
        let mut n = 2;
        while a.may_introspect(client(n), 100).is_ok() {
            n += 1;
        }
        assert_eq!(a.may_introspect(client(200), 100), Err(NotAsked::Spent));
        assert_eq!(a.asked.lock().1, INTROSPECTIONS_PER_SECOND);
        // ...while the other server's budget is whole, and the next second a new one.
        assert_eq!(b.may_introspect(client(1), 100), Ok(()));
        assert_eq!(a.may_introspect(client(1), 101), Ok(()));
    }

    #[test]
    fn issuers_a_reload_removed_are_no_longer_read_nor_shown() {
        let issuers = Issuers::default();
        let kept = issuers.issuer("https://a.example.com", None);
        issuers.install(&[(kept.clone(), None), (issuers.issuer("https://b.example.com", None), None)]);
        assert_eq!(issuers.health().len(), 2);
        issuers.install(&[(kept.clone(), None)]);
        let health = issuers.health();
        assert_eq!((health.len(), health[0].issuer.as_str()), (1, "https://a.example.com"));
        assert!(Arc::ptr_eq(&kept, &issuers.issuer("https://a.example.com", None)), "the one kept keeps its keys");
    }
}
