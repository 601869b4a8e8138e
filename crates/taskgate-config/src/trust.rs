//! Checks across tenants that keep their trust apart: a token logs in to one tenant only, and
//! an opaque token (or an API key) is sent to one authorization server at most, never to
//! another tenant's.
//!
//! - Two `[[tenant.oauth]]` entries of different tenants that trust one issuer for the same
//!   audience (compared as normalised URIs: scheme and host in lower case, no trailing `/`)
//!   must both name the same `tenant_claim`: otherwise one token would be taken by both.
//! - Entries naming one issuer agree on its `jwks_uri` and on the gateway's client for
//!   introspection there.
//! - Each introspecting issuer takes the opaque tokens that start with its
//!   `opaque_token_prefix`; at most one takes unprefixed ones, and none does while a tenant has
//!   API keys (an unknown or revoked API key is no opaque token and is sent nowhere).

use std::collections::BTreeMap;

use crate::tenants::TenantConfig;

/// An audience (a URI) as compared between tenants: scheme and host in lower case, no trailing
/// `/`. Two audiences with the same normal form name one resource.
pub fn normal_audience(audience: &str) -> String {
    let trimmed = audience.trim().trim_end_matches('/');
    match trimmed.split_once("://") {
        Some((scheme, rest)) => {
            let (host, path) = rest.split_at(rest.find(['/', '?', '#']).unwrap_or(rest.len()));
            format!("{}://{}{path}", scheme.to_ascii_lowercase(), host.to_ascii_lowercase())
        }
        None => trimmed.to_owned(),
    }
}

/// Checks the tenants' OAuth entries against each other.
pub(crate) fn validate(tenants: &[TenantConfig], public_url: Option<&str>, bad: &mut dyn FnMut(String, String)) {
    let at = |i: usize, j: usize, field: &str| format!("tenant[{i}] ({:?}).oauth[{j}].{field}", tenants[i].id);
    let entries: Vec<(usize, usize, &crate::OAuthConfig)> =
        tenants.iter().enumerate().flat_map(|(i, t)| t.oauth.iter().enumerate().map(move |(j, o)| (i, j, o))).collect();
    for (n, &(i, j, oauth)) in entries.iter().enumerate() {
        let audience = oauth.audience.as_deref().or(public_url).map(normal_audience);
        for &(k, l, other) in &entries[..n] {
            if other.issuer != oauth.issuer {
                continue;
            }
            if other.jwks_uri != oauth.jwks_uri {
                bad(at(i, j, "jwks_uri"), format!("tenant[{k}].oauth[{l}] names another jwks_uri for this issuer"));
            }
            let introspects = |o: &crate::OAuthConfig| {
                (o.introspection_client_id.clone(), o.introspection_secret_env.clone(), o.opaque_token_prefix.clone())
            };
            if other.introspection_client_id.is_some()
                && oauth.introspection_client_id.is_some()
                && introspects(other) != introspects(oauth)
            {
                bad(
                    at(i, j, "introspection_client_id"),
                    format!(
                        "tenant[{k}].oauth[{l}] introspects at this issuer with another client, secret or opaque_token_prefix"
                    ),
                );
            }
            let same_audience =
                audience.is_some() && other.audience.as_deref().or(public_url).map(normal_audience) == audience;
            if k != i && same_audience && (oauth.tenant_claim.is_none() || other.tenant_claim != oauth.tenant_claim) {
                bad(
                    at(i, j, "tenant_claim"),
                    format!(
                        "tenant[{k}] ({:?}).oauth[{l}] trusts the same issuer for the same audience: both must name the same tenant_claim, which says whose each token is",
                        tenants[k].id
                    ),
                );
            }
        }
    }
    // Opaque tokens: one introspecting issuer per token.
    let mut prefixes: BTreeMap<&str, (Option<&str>, usize, usize)> = BTreeMap::new();
    for &(i, j, oauth) in &entries {
        if oauth.introspection_client_id.is_some() {
            prefixes.entry(oauth.issuer.as_str()).or_insert((oauth.opaque_token_prefix.as_deref(), i, j));
        } else if oauth.opaque_token_prefix.is_some() {
            bad(at(i, j, "opaque_token_prefix"), "is for introspection: set introspection_client_id too".into());
        }
        if oauth.opaque_token_prefix.as_deref() == Some("") {
            bad(at(i, j, "opaque_token_prefix"), "must be non-empty (or absent)".into());
        }
    }
    let unprefixed: Vec<_> = prefixes.values().filter(|(p, _, _)| p.is_none()).collect();
    if unprefixed.len() > 1 {
        let &&(_, i, j) = unprefixed.last().expect("two");
        bad(
            at(i, j, "opaque_token_prefix"),
            "more than one authorization server introspects: each but one must name the opaque_token_prefix of its tokens, so a token is sent to its own server only".into(),
        );
    }
    if let (Some(&&(_, i, j)), true) = (unprefixed.first(), tenants.iter().any(|t| !t.api_keys.is_empty())) {
        bad(
            at(i, j, "opaque_token_prefix"),
            "a tenant has API keys: name the prefix of this server's opaque tokens, so an unknown API key is never sent to it".into(),
        );
    }
    let named: Vec<(&str, &str, usize, usize)> =
        prefixes.iter().filter_map(|(issuer, (p, i, j))| p.map(|p| (*issuer, p, *i, *j))).collect();
    for (n, &(issuer, prefix, i, j)) in named.iter().enumerate() {
        for &(other, theirs, _, _) in &named[..n] {
            if other != issuer && (prefix.starts_with(theirs) || theirs.starts_with(prefix)) {
                bad(at(i, j, "opaque_token_prefix"), format!("overlaps {theirs:?}, the prefix of {other}'s tokens"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ApiKeyConfig, OAuthConfig};

    fn oauth(issuer: &str, audience: Option<&str>) -> OAuthConfig {
        OAuthConfig {
            issuer: issuer.into(),
            audience: audience.map(str::to_owned),
            required_scopes: Vec::new(),
            principal_claim: "sub".into(),
            tenant_claim: None,
            leeway_secs: 30,
            jwks_uri: None,
            introspection_client_id: None,
            introspection_secret_env: None,
            opaque_token_prefix: None,
        }
    }

    fn problems(tenants: &[TenantConfig], public_url: Option<&str>) -> Vec<String> {
        let mut found = Vec::new();
        validate(tenants, public_url, &mut |at, why| found.push(format!("{at}: {why}")));
        found
    }

    fn tenant(id: &str, entries: Vec<OAuthConfig>) -> TenantConfig {
        let mut t = TenantConfig::new(id);
        t.oauth = entries;
        t
    }

    #[test]
    fn audiences_are_compared_in_normal_form() {
        assert_eq!(normal_audience("HTTPS://GW.Example.com/mcp/"), "https://gw.example.com/mcp");
        assert_eq!(normal_audience("https://gw.example.com"), normal_audience("https://gw.example.com/"));
        assert_ne!(normal_audience("https://gw.example.com/MCP"), normal_audience("https://gw.example.com/mcp"));
    }

    #[test]
    fn one_issuer_and_audience_for_two_tenants_needs_one_tenant_claim() {
        let url = Some("https://gw.example.com/mcp");
        // One tenant leaves the audience to public_url, the other writes it with a slash.
        let a = tenant("a", vec![oauth("https://as", None)]);
        let b = tenant("b", vec![oauth("https://as", Some("https://GW.example.com/mcp/"))]);
        let found = problems(&[a.clone(), b.clone()], url);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].starts_with("tenant[1] (\"b\").oauth[0].tenant_claim"), "{found:?}");
        // A claim on one side only is not enough; different claims are not either.
        let mut a_claimed = a.clone();
        a_claimed.oauth[0].tenant_claim = Some("org".into());
        assert_eq!(problems(&[a_claimed.clone(), b.clone()], url).len(), 1);
        let mut b_claimed = b.clone();
        b_claimed.oauth[0].tenant_claim = Some("tid".into());
        assert_eq!(problems(&[a_claimed.clone(), b_claimed.clone()], url).len(), 1);
        b_claimed.oauth[0].tenant_claim = Some("org".into());
        assert!(problems(&[a_claimed, b_claimed], url).is_empty());
        // Another audience, or another issuer, is another trust.
        let c = tenant("c", vec![oauth("https://as", Some("https://other.example.com/mcp"))]);
        let d = tenant("d", vec![oauth("https://as2", None)]);
        assert!(problems(&[a, c, d], url).is_empty());
    }

    #[test]
    fn an_issuer_has_one_jwks_uri_and_one_introspection_client() {
        let mut a = oauth("https://as", Some("https://a"));
        a.jwks_uri = Some("https://as/jwks".into());
        let b = oauth("https://as", Some("https://b"));
        let found = problems(&[tenant("a", vec![a]), tenant("b", vec![b])], None);
        assert!(found[0].contains("another jwks_uri"), "{found:?}");
        let mut a = oauth("https://as", Some("https://a"));
        a.introspection_client_id = Some("one".into());
        let mut b = oauth("https://as", Some("https://b"));
        b.introspection_client_id = Some("two".into());
        let found = problems(&[tenant("a", vec![a]), tenant("b", vec![b])], None);
        assert!(found[0].contains("another client"), "{found:?}");
    }

    #[test]
    fn each_opaque_token_has_one_introspecting_server_and_api_keys_none() {
        let introspecting = |issuer: &str, prefix: Option<&str>| {
            let mut o = oauth(issuer, Some("https://gw"));
            o.introspection_client_id = Some("gw".into());
            o.opaque_token_prefix = prefix.map(str::to_owned);
            o
        };
        let two = [
            tenant("a", vec![introspecting("https://as1", None)]),
            tenant("b", vec![introspecting("https://as2", None)]),
        ];
        assert_eq!(problems(&two, None).len(), 1, "two servers for unprefixed tokens");
        let prefixed = [
            tenant("a", vec![introspecting("https://as1", None)]),
            tenant("b", vec![introspecting("https://as2", Some("b_"))]),
        ];
        assert!(problems(&prefixed, None).is_empty());
        let overlapping = [
            tenant("a", vec![introspecting("https://as1", Some("tok_"))]),
            tenant("b", vec![introspecting("https://as2", Some("tok_b"))]),
        ];
        assert!(problems(&overlapping, None)[0].contains("overlaps"));
        let mut keyed = prefixed.clone();
        keyed[1].api_keys.push(ApiKeyConfig { principal: "ci".into(), sha256: "0".repeat(64) });
        let found = problems(&keyed, None);
        assert!(found.len() == 1 && found[0].contains("unknown API key"), "{found:?}");
        keyed[0].oauth[0].opaque_token_prefix = Some("a_".into());
        assert!(problems(&keyed, None).is_empty());
        let mut stray = oauth("https://as3", Some("https://gw"));
        stray.opaque_token_prefix = Some("c_".into());
        assert!(problems(&[tenant("c", vec![stray])], None)[0].contains("introspection_client_id"));
    }
}
