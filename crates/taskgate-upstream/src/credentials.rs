//! The gateway's own OAuth client for an upstream that is a resource server (`[upstream.oauth]`,
//! the client credentials grant of OAuth 2.1, the upstream named as the resource, RFC 8707):
//! one token for the upstream, kept until shortly before it expires, fetched again by one
//! request while the others wait for it. A client's own token is never what an upstream gets.

use std::time::{Duration, Instant};

use reqwest::header::HeaderValue;
use serde_json::Value;
use taskgate_config::UpstreamOAuth;

/// A token is fetched again this long before it expires.
const EARLY: Duration = Duration::from_secs(30);
/// The longest wait for the token endpoint.
const TIMEOUT: Duration = Duration::from_secs(10);

/// One upstream's client credentials and its current token.
pub(crate) struct ClientCredentials {
    upstream: String,
    config: UpstreamOAuth,
    resource: String,
    http: reqwest::Client,
    token: parking_lot::Mutex<Option<(HeaderValue, Instant)>>,
    fetching: tokio::sync::Mutex<()>,
}

impl ClientCredentials {
    /// The credentials of `upstream` (whose URL is the default resource).
    pub(crate) fn new(upstream: &str, url: Option<&str>, config: &UpstreamOAuth) -> ClientCredentials {
        ClientCredentials {
            upstream: upstream.to_owned(),
            resource: config.resource.clone().or_else(|| url.map(str::to_owned)).unwrap_or_default(),
            config: config.clone(),
            http: reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap_or_default(),
            token: parking_lot::Mutex::new(None),
            fetching: tokio::sync::Mutex::new(()),
        }
    }

    fn current(&self) -> Option<HeaderValue> {
        let token = self.token.lock();
        token.as_ref().filter(|(_, until)| Instant::now() < *until).map(|(value, _)| value.clone())
    }

    /// The `Authorization` header value for the next request.
    pub(crate) async fn authorization(&self) -> Result<HeaderValue, String> {
        if let Some(value) = self.current() {
            return Ok(value);
        }
        let _one = self.fetching.lock().await;
        if let Some(value) = self.current() {
            return Ok(value);
        }
        let (value, until) = self.fetch().await.map_err(|why| {
            format!("cannot get an access token for upstream '{}' from {}: {why}", self.upstream, self.config.token_url)
        })?;
        *self.token.lock() = Some((value.clone(), until));
        Ok(value)
    }

    /// Forgets the token (the upstream refused it): the next request fetches another.
    pub(crate) fn refused(&self) {
        *self.token.lock() = None;
    }

    async fn fetch(&self) -> Result<(HeaderValue, Instant), String> {
        let mut form = vec![("grant_type", "client_credentials"), ("resource", self.resource.as_str())];
        if let Some(scope) = &self.config.scope {
            form.push(("scope", scope));
        }
        let body = form.iter().map(|(k, v)| format!("{k}={}", encode(v))).collect::<Vec<_>>().join("&");
        let secret = self.config.client_secret.as_deref().unwrap_or_default();
        let sent = self
            .http
            .post(&self.config.token_url)
            .basic_auth(&self.config.client_id, Some(secret))
            .header("content-type", "application/x-www-form-urlencoded")
            .header("accept", "application/json")
            .body(body)
            .send();
        let response = tokio::time::timeout(TIMEOUT, sent).await.map_err(|_| "no answer in time".to_owned())?;
        let response = response.map_err(|e| e.to_string())?;
        let status = response.status();
        let bytes = tokio::time::timeout(TIMEOUT, response.bytes())
            .await
            .map_err(|_| "no answer in time".to_owned())?
            .map_err(|e| e.to_string())?;
        let answer: Value = serde_json::from_slice(&bytes).map_err(|_| format!("it answered {status} without JSON"))?;
        if !status.is_success() {
            let error = answer.get("error").and_then(Value::as_str).unwrap_or("an error");
            return Err(format!("it answered {status}: {error}"));
        }
        let token = answer.get("access_token").and_then(Value::as_str).ok_or("its answer has no access_token")?;
        let lifetime = Duration::from_secs(answer.get("expires_in").and_then(Value::as_u64).unwrap_or(300));
        let value = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| "the token is not a header value")?;
        // Used until shortly before it expires (a short-lived token, until half its life).
        Ok((value, Instant::now() + lifetime.saturating_sub(EARLY.min(lifetime / 2))))
    }
}

fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            b => format!("%{b:02X}"),
        })
        .collect()
}
