//! Where to get an access token for a server that wants one (MCP authorization): its protected
//! resource metadata (RFC 9728) names its authorization server, whose metadata (RFC 8414, or
//! OpenID Connect Discovery) names the token endpoint.

use anyhow::Context;
use serde_json::Value;

/// The token endpoint of the authorization server of the MCP endpoint `url`.
pub async fn token_endpoint(url: &str) -> anyhow::Result<String> {
    let http = reqwest::Client::builder().timeout(std::time::Duration::from_secs(30)).build()?;
    let resource = metadata_url(url).with_context(|| format!("{url} is not an http(s) URL"))?;
    let metadata = get_json(&http, &resource)
        .await
        .with_context(|| format!("the server's protected resource metadata ({resource}); give --token-url instead"))?;
    let issuer = metadata
        .get("authorization_servers")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
        .and_then(Value::as_str)
        .with_context(|| format!("{resource} names no authorization server"))?
        .trim_end_matches('/')
        .to_owned();
    let (origin, path) = split(&issuer).with_context(|| format!("the authorization server {issuer:?} is not a URL"))?;
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
                // OAuth 2.1: a secret goes over TLS, but to this machine.
                anyhow::ensure!(
                    endpoint.starts_with("https://") || loopback(endpoint),
                    "the token endpoint {endpoint} is not https: the client secret is not sent there"
                );
                return Ok(endpoint.to_owned());
            }
        }
    }
    anyhow::bail!("no token endpoint in {issuer}'s metadata; give --token-url")
}

async fn get_json(http: &reqwest::Client, url: &str) -> anyhow::Result<Value> {
    let response = http.get(url).send().await?;
    anyhow::ensure!(response.status().is_success(), "{url} answered {}", response.status());
    Ok(serde_json::from_slice(&response.bytes().await?)?)
}

/// Whether `url` is `http://` to this machine (127.0.0.1, ::1, localhost).
fn loopback(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("http://") else { return false };
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => host.rsplit_once(':').map_or(host, |(h, _)| h),
    };
    host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// (`scheme://host[:port]`, path without a trailing slash).
fn split(url: &str) -> Option<(String, String)> {
    let (scheme, rest) = url.split_once("://")?;
    if scheme != "http" && scheme != "https" {
        return None;
    }
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    Some((format!("{scheme}://{host}"), path.trim_end_matches('/').to_owned()))
}

/// RFC 9728 section 3.1: the metadata of `https://host/path` is at
/// `https://host/.well-known/oauth-protected-resource/path`.
fn metadata_url(url: &str) -> Option<String> {
    let (origin, path) = split(url)?;
    Some(format!("{origin}/.well-known/oauth-protected-resource{path}"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_well_known_part_goes_between_host_and_path() {
        assert_eq!(
            super::metadata_url("https://gw.example.com:8443/mcp").unwrap(),
            "https://gw.example.com:8443/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(super::metadata_url("http://h").unwrap(), "http://h/.well-known/oauth-protected-resource");
        assert!(super::metadata_url("ftp://h/x").is_none());
    }

    #[test]
    fn a_secret_goes_in_clear_only_to_this_machine() {
        for url in ["http://127.0.0.1:9000/token", "http://localhost/token", "http://[::1]:80/t"] {
            assert!(super::loopback(url), "{url}");
        }
        for url in ["http://as.example/token", "https://127.0.0.1/token", "http://127.0.0.1.evil.example/t"] {
            assert!(!super::loopback(url), "{url}");
        }
    }
}
