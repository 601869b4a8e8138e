//! The gateway's own OAuth client for an upstream that is a resource server (`[upstream.oauth]`,
//! MCP authorization; the upstream named as the resource, RFC 8707):
//!
//! - `client_credentials`: one token for the upstream, the gateway's own, kept until shortly
//!   before it expires, fetched again by one request while the others wait for it;
//! - `token_exchange` (RFC 8693): the caller's OAuth access token exchanged for one whose
//!   audience is the upstream, kept per principal (bounded) until shortly before it expires,
//!   so the upstream sees the user. Requests the gateway makes for itself (its tool catalog)
//!   use the client credentials grant of the same client.
//!
//! A client's own token is never what an upstream gets (MCP authorization, "Access Token
//! Privilege Restriction": no token passthrough).

use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::header::HeaderValue;
use serde_json::Value;
use taskgate_config::{UpstreamGrant, UpstreamOAuth};

use crate::identity::Caller;

/// A token is fetched again this long before it expires.
const EARLY: Duration = Duration::from_secs(30);
/// The longest wait for the token endpoint.
const TIMEOUT: Duration = Duration::from_secs(10);
/// Token exchanges of one upstream in flight at once (for different principals).
const EXCHANGES_AT_ONCE: usize = 16;

/// RFC 8693 section 2.1.
const TOKEN_EXCHANGE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
/// RFC 8693 section 3.
const ACCESS_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";

/// One upstream's OAuth credentials: the gateway's own token, and for `token_exchange` the
/// callers' exchanged tokens.
pub(crate) struct Credentials {
    upstream: String,
    config: UpstreamOAuth,
    resource: String,
    http: reqwest::Client,
    /// The gateway's own token (client credentials).
    own: parking_lot::Mutex<Option<(HeaderValue, Instant)>>,
    fetching: tokio::sync::Mutex<()>,
    /// Exchanged tokens by principal (`token_exchange`).
    exchanged: parking_lot::Mutex<foldhash::HashMap<Arc<str>, (HeaderValue, Instant)>>,
    /// One exchange per principal at a time: the others wait for its token.
    exchanging: parking_lot::Mutex<foldhash::HashMap<Arc<str>, Arc<tokio::sync::Mutex<()>>>>,
    exchanges: tokio::sync::Semaphore,
}

impl Credentials {
    /// The credentials of `upstream` (whose URL is the default resource).
    pub(crate) fn new(upstream: &str, url: Option<&str>, config: &UpstreamOAuth) -> Credentials {
        Credentials {
            upstream: upstream.to_owned(),
            resource: config.resource.clone().or_else(|| url.map(str::to_owned)).unwrap_or_default(),
            config: config.clone(),
            http: reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap_or_default(),
            own: parking_lot::Mutex::new(None),
            fetching: tokio::sync::Mutex::new(()),
            exchanged: Default::default(),
            exchanging: Default::default(),
            exchanges: tokio::sync::Semaphore::new(EXCHANGES_AT_ONCE),
        }
    }

    /// Whether requests made for a caller carry a token exchanged for that caller's.
    pub(crate) fn exchanges(&self) -> bool {
        self.config.grant == UpstreamGrant::TokenExchange
    }

    /// Exchanged tokens kept now.
    pub(crate) fn exchanged_tokens(&self) -> usize {
        self.exchanged.lock().len()
    }

    /// The `Authorization` header value for the next request made for `caller` (`None`: the
    /// gateway's own request).
    pub(crate) async fn authorization(&self, caller: Option<&Caller>) -> Result<HeaderValue, String> {
        match caller.filter(|_| self.exchanges()) {
            Some(caller) => self.exchanged(caller).await,
            None => self.own().await,
        }
    }

    /// Forgets the token a request for `caller` carried (the upstream refused it): the next
    /// request gets another.
    pub(crate) fn refused(&self, caller: Option<&Caller>) {
        match caller.filter(|_| self.exchanges()) {
            Some(caller) => {
                let prefix = format!("{}\n", caller.key);
                self.exchanged.lock().retain(|key, _| !key.starts_with(&prefix));
            }
            None => *self.own.lock() = None,
        }
    }

    fn current_own(&self) -> Option<HeaderValue> {
        let token = self.own.lock();
        token.as_ref().filter(|(_, until)| Instant::now() < *until).map(|(value, _)| value.clone())
    }

    async fn own(&self) -> Result<HeaderValue, String> {
        if let Some(value) = self.current_own() {
            return Ok(value);
        }
        let _one = self.fetching.lock().await;
        if let Some(value) = self.current_own() {
            return Ok(value);
        }
        let mut form = vec![("grant_type", "client_credentials"), ("resource", self.resource.as_str())];
        if let Some(scope) = &self.config.scope {
            form.push(("scope", scope));
        }
        let (value, until) = self.fetch(&form, None).await.map_err(|why| {
            format!("cannot get an access token for upstream '{}' from {}: {why}", self.upstream, self.config.token_url)
        })?;
        *self.own.lock() = Some((value.clone(), until));
        Ok(value)
    }

    fn current_exchanged(&self, key: &str) -> Option<HeaderValue> {
        let tokens = self.exchanged.lock();
        tokens.get(key).filter(|(_, until)| Instant::now() < *until).map(|(value, _)| value.clone())
    }

    async fn exchanged(&self, caller: &Caller) -> Result<HeaderValue, String> {
        // The token of the client request this is for; the caller's latest only for what the
        // session sends on its own.
        let subject = match crate::identity::current_subject() {
            Some(Some(subject)) if caller.issued => {
                let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
                if subject.expired(now) {
                    return Err(format!(
                        "upstream '{}' is called with the caller's own identity (token_exchange), and the access token \
                         of the request this is for (of a task: of the request that created it) has expired",
                        self.upstream
                    ));
                }
                Some(subject.token.to_string())
            }
            Some(_) => None,
            None => (caller.subject)(),
        };
        let Some(subject) = subject else {
            let from = self.config.issuer.as_deref().unwrap_or("a configured authorization server");
            return Err(format!(
                "upstream '{}' is called with the caller's own identity (token_exchange), and this caller has no \
                 valid OAuth access token from {from} to exchange",
                self.upstream
            ));
        };
        // Kept per principal and token: a user's narrower token never stands on what a wider
        // one of the same user was exchanged for.
        let key: Arc<str> = format!("{}\n{}", caller.key, digest(&subject)).into();
        if let Some(value) = self.current_exchanged(&key) {
            return Ok(value);
        }
        let turn = Turn::take(&self.exchanging, key.clone());
        let _one = turn.lock().lock().await;
        if let Some(value) = self.current_exchanged(&key) {
            return Ok(value);
        }
        let _permit = self.exchanges.acquire().await.map_err(|_| "the gateway is stopping".to_owned())?;
        let mut form = vec![
            ("grant_type", TOKEN_EXCHANGE),
            ("subject_token", subject.as_str()),
            ("subject_token_type", ACCESS_TOKEN_TYPE),
            ("requested_token_type", ACCESS_TOKEN_TYPE),
            ("resource", self.resource.as_str()),
        ];
        if let Some(audience) = &self.config.audience {
            form.push(("audience", audience));
        }
        if let Some(scope) = &self.config.scope {
            form.push(("scope", scope));
        }
        let (value, until) = self.fetch(&form, Some(&subject)).await.map_err(|why| {
            format!(
                "cannot exchange the caller's access token for one for upstream '{}' at {}: {why}",
                self.upstream, self.config.token_url
            )
        })?;
        self.keep(key, value.clone(), until);
        Ok(value)
    }

    /// Keeps a principal's exchanged token; when full, forgets expired ones, else the one that
    /// expires first.
    fn keep(&self, key: Arc<str>, value: HeaderValue, until: Instant) {
        let mut tokens = self.exchanged.lock();
        if tokens.len() >= self.config.max_cached_tokens && !tokens.contains_key(&key) {
            let now = Instant::now();
            tokens.retain(|_, (_, until)| *until > now);
            if tokens.len() >= self.config.max_cached_tokens {
                if let Some(first) = tokens.iter().min_by_key(|(_, (_, until))| *until).map(|(k, _)| k.clone()) {
                    tokens.remove(&first);
                }
            }
        }
        tokens.insert(key, (value, until));
    }

    /// Asks the token endpoint for a token; never `subject` back (that would pass the
    /// caller's own token through).
    async fn fetch(&self, form: &[(&str, &str)], subject: Option<&str>) -> Result<(HeaderValue, Instant), String> {
        let body = form_urlencoded::Serializer::new(String::new()).extend_pairs(form).finish();
        // RFC 6749 section 2.3.1: the id and secret are form-encoded before Basic authentication.
        let encode = |text: &str| form_urlencoded::byte_serialize(text.as_bytes()).collect::<String>();
        let secret = encode(self.config.client_secret.as_deref().unwrap_or_default());
        let sent = self
            .http
            .post(&self.config.token_url)
            .basic_auth(encode(&self.config.client_id), Some(secret))
            .header("content-type", "application/x-www-form-urlencoded")
            .header("accept", "application/json")
            .body(body)
            .send();
        let response = tokio::time::timeout(TIMEOUT, sent).await.map_err(|_| "no answer in time".to_owned())?;
        let response = response.map_err(|e| e.to_string())?;
        let status = response.status();
        let bytes = tokio::time::timeout(TIMEOUT, read_bounded(response))
            .await
            .map_err(|_| "no answer in time".to_owned())??;
        let answer: Value = serde_json::from_slice(&bytes).map_err(|_| format!("it answered {status} without JSON"))?;
        if !status.is_success() {
            let error = answer.get("error").and_then(Value::as_str).unwrap_or("an error");
            return Err(match answer.get("error_description").and_then(Value::as_str) {
                Some(description) => format!("it answered {status}: {error} ({description})"),
                None => format!("it answered {status}: {error}"),
            });
        }
        let token = answer.get("access_token").and_then(Value::as_str).ok_or("its answer has no access_token")?;
        // RFC 6749 section 5.1 (RFC 8693 section 2.2.1): the type of token issued.
        if let Some(kind) =
            answer.get("token_type").and_then(Value::as_str).filter(|t| !t.eq_ignore_ascii_case("bearer"))
        {
            return Err(format!("it issued a {kind:?} token, not a Bearer one"));
        }
        if subject == Some(token) {
            return Err("it answered with the caller's own token, which is never passed to an upstream".into());
        }
        let lifetime = Duration::from_secs(answer.get("expires_in").and_then(Value::as_u64).unwrap_or(300));
        let value = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| "the token is not a header value")?;
        // Used until shortly before it expires (a short-lived token, until half its life).
        Ok((value, Instant::now() + lifetime.saturating_sub(EARLY.min(lifetime / 2))))
    }
}

/// A token endpoint's answer is read up to this many bytes.
const MAX_ANSWER: usize = 64 * 1024;

/// A response's body, at most [`MAX_ANSWER`] bytes.
async fn read_bounded(mut response: reqwest::Response) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
        if body.len() + chunk.len() > MAX_ANSWER {
            return Err(format!("its answer is larger than {MAX_ANSWER} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// A token's digest, to key what was exchanged for it (not a secret: the key stays here).
fn digest(token: &str) -> String {
    // SHA-256: two tokens of one caller never share what was exchanged for one of them.
    openssl::sha::sha256(token.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// One exchange for a key at a time: the others wait for its token. The key's lock leaves
/// the table with its last holder, however it ends (a caller gone away included).
struct Turn<'a> {
    table: &'a parking_lot::Mutex<foldhash::HashMap<Arc<str>, Arc<tokio::sync::Mutex<()>>>>,
    key: Arc<str>,
    lock: Option<Arc<tokio::sync::Mutex<()>>>,
}

impl<'a> Turn<'a> {
    fn take(
        table: &'a parking_lot::Mutex<foldhash::HashMap<Arc<str>, Arc<tokio::sync::Mutex<()>>>>,
        key: Arc<str>,
    ) -> Turn<'a> {
        let lock = table.lock().entry(key.clone()).or_default().clone();
        Turn { table, key, lock: Some(lock) }
    }

    fn lock(&self) -> &tokio::sync::Mutex<()> {
        self.lock.as_deref().expect("held until dropped")
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        // Under the table's lock, as every clone is taken: the count cannot change meanwhile.
        let mut table = self.table.lock();
        drop(self.lock.take());
        if table.get(&self.key).is_some_and(|lock| Arc::strong_count(lock) == 1) {
            table.remove(&self.key);
        }
    }
}

/// What a channel's requests carry: an upstream's credentials, for one caller (`None`: the
/// gateway's own requests).
#[derive(Clone)]
pub(crate) struct Authorizer {
    pub(crate) of: Arc<Credentials>,
    pub(crate) caller: Option<Caller>,
}

impl Authorizer {
    /// Whose token a refused request carried, for the error.
    pub(crate) fn whose(&self) -> &'static str {
        if self.caller.is_some() && self.of.exchanges() {
            "the token exchanged for the caller's"
        } else {
            "the gateway's access token"
        }
    }
}
