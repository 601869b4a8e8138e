//! Where to get an access token for a server that wants one (MCP authorization). The client
//! secret goes only to the authorization server the user trusts:
//!
//! - `--token-url`: that endpoint;
//! - `--issuer`: that issuer's token endpoint, from its own metadata (RFC 8414, or OpenID
//!   Connect Discovery), whose `issuer` must be the one named;
//! - neither: only for a server on this machine, the authorization server its protected
//!   resource metadata (RFC 9728) names. A remote server naming its own authorization server
//!   could otherwise have the secret sent wherever it likes.
//!
//! Every URL is parsed (`url`); each must be https, or http to this machine; no redirect is
//! followed and no answer is read past [`MAX_ANSWER`] bytes.

use anyhow::Context;
use reqwest::Url;
use serde_json::Value;

/// The largest metadata document read.
const MAX_ANSWER: usize = 1 << 20;

/// The token endpoint to send the client secret to, for the MCP endpoint `url`: `token_url`,
/// else `issuer`'s, else (a server on this machine only) its authorization server's.
pub async fn token_endpoint(url: &str, issuer: Option<&str>, token_url: Option<&str>) -> anyhow::Result<String> {
    if let Some(token_url) = token_url {
        secure(token_url).context("--token-url")?;
        return Ok(token_url.to_owned());
    }
    let http = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(30))
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let issuer = match issuer {
        Some(issuer) => issuer.trim_end_matches('/').to_owned(),
        None => {
            let server = secure(url).context("the server's URL")?;
            anyhow::ensure!(
                is_loopback(&server),
                "{url} is not on this machine: name its authorization server with --issuer (or its token endpoint with --token-url), so the client secret goes only where you trust"
            );
            named_issuer(&http, &server).await?
        }
    };
    let parsed = secure(&issuer).context("the authorization server")?;
    let path = parsed.path().trim_end_matches('/').to_owned();
    let origin = parsed.origin().ascii_serialization();
    // RFC 8414 section 3.1: the well-known part goes between the host and the issuer's path.
    let candidates = [
        format!("{origin}/.well-known/oauth-authorization-server{path}"),
        format!("{origin}/.well-known/openid-configuration{path}"),
        format!("{issuer}/.well-known/openid-configuration"),
    ];
    for candidate in &candidates {
        if let Ok(metadata) = get_json(&http, candidate).await {
            // RFC 8414 section 3.3: the metadata's issuer MUST be the one asked about, so a
            // document served elsewhere cannot send the client's secret to its endpoint.
            let named = metadata.get("issuer").and_then(Value::as_str).map(|i| i.trim_end_matches('/'));
            if named != Some(issuer.as_str()) {
                anyhow::bail!(
                    "{candidate} names the issuer {named:?}, not {issuer:?}: not trusted with the client secret"
                );
            }
            if let Some(endpoint) = metadata.get("token_endpoint").and_then(Value::as_str) {
                secure(endpoint).with_context(|| format!("{issuer}'s token endpoint"))?;
                return Ok(endpoint.to_owned());
            }
        }
    }
    anyhow::bail!("no token endpoint in {issuer}'s metadata; give --token-url")
}

/// The scopes the protected resource metadata of the MCP endpoint `url` lists
/// (`scopes_supported`), space-separated; none when it lists none or cannot be read.
pub async fn scopes_supported(url: &str) -> Option<String> {
    let server = secure(url).ok()?;
    let http = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(30))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .ok()?;
    let metadata = get_json(&http, &metadata_url(&server)).await.ok()?;
    let scopes: Vec<&str> = metadata.get("scopes_supported")?.as_array()?.iter().filter_map(Value::as_str).collect();
    (!scopes.is_empty()).then(|| scopes.join(" "))
}

/// The first authorization server the protected resource metadata of `server` names.
async fn named_issuer(http: &reqwest::Client, server: &Url) -> anyhow::Result<String> {
    let resource = metadata_url(server);
    let metadata = get_json(http, &resource)
        .await
        .with_context(|| format!("the server's protected resource metadata ({resource}); give --token-url instead"))?;
    Ok(metadata
        .get("authorization_servers")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
        .and_then(Value::as_str)
        .with_context(|| format!("{resource} names no authorization server"))?
        .trim_end_matches('/')
        .to_owned())
}

async fn get_json(http: &reqwest::Client, url: &str) -> anyhow::Result<Value> {
    let mut response = http.get(url).header("accept", "application/json").send().await?;
    anyhow::ensure!(response.status().is_success(), "{url} answered {}", response.status());
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        anyhow::ensure!(body.len() + chunk.len() <= MAX_ANSWER, "{url} sent more than {MAX_ANSWER} bytes");
        body.extend_from_slice(&chunk);
    }
    Ok(serde_json::from_slice(&body)?)
}

/// `url` parsed, when it is https, or http to this machine (a secret goes over TLS, OAuth 2.1
/// section 1.5, but may go in clear to this machine), and carries no user or password.
pub fn secure(url: &str) -> anyhow::Result<Url> {
    let parsed = Url::parse(url).with_context(|| format!("{url:?} is not a URL"))?;
    anyhow::ensure!(
        parsed.username().is_empty() && parsed.password().is_none(),
        "{url:?} carries a user name or password"
    );
    match parsed.scheme() {
        "https" => Ok(parsed),
        "http" if is_loopback(&parsed) => Ok(parsed),
        _ => anyhow::bail!("{url:?} is not https:// (http:// only to this machine)"),
    }
}

/// Whether `url`'s host is this machine (127.0.0.0/8, ::1, localhost).
fn is_loopback(url: &Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

/// RFC 9728 section 3.1: the metadata of `https://host/path` is at
/// `https://host/.well-known/oauth-protected-resource/path`.
fn metadata_url(url: &Url) -> String {
    let path = url.path().trim_end_matches('/');
    format!("{}/.well-known/oauth-protected-resource{path}", url.origin().ascii_serialization())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_well_known_part_goes_between_host_and_path() {
        let url = |u: &str| Url::parse(u).unwrap();
        assert_eq!(
            metadata_url(&url("https://gw.example.com:8443/mcp")),
            "https://gw.example.com:8443/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(metadata_url(&url("http://h")), "http://h/.well-known/oauth-protected-resource");
    }

    #[test]
    fn a_secret_goes_in_clear_only_to_this_machine() {
        for url in
            ["http://127.0.0.1:9000/token", "http://localhost/token", "http://[::1]:80/t", "https://as.example/t"]
        {
            assert!(secure(url).is_ok(), "{url}");
        }
        for url in [
            "http://as.example/token",
            "http://127.0.0.1.evil.example/t",
            "http://127.0.0.1:1@evil.example/token",
            "http://localhost@evil.example/token",
            "https://user:pass@as.example/token",
            "ftp://127.0.0.1/t",
            "not a url",
        ] {
            assert!(secure(url).is_err(), "{url}");
        }
    }
}
