//! Who is calling: credentials checked (an authorization server's keys read again, or an
//! opaque token introspected, when a token needs it), refusals with their challenges (RFC
//! 6750, RFC 9728), and the protected resource metadata.

use super::Gateway;
use crate::tenants::AuthError;
use crate::{GatewayError, Identity};

/// Where the protected resource metadata of `public_url` is (RFC 9728 section 3.1: the
/// well-known part between the host and the resource's path).
pub fn resource_metadata_url(public_url: &str) -> String {
    let start = public_url.find("://").map_or(0, |i| i + 3);
    match public_url[start..].find('/') {
        Some(slash) => {
            let (origin, path) = public_url.split_at(start + slash);
            let path = path.trim_end_matches('/');
            format!("{origin}/.well-known/oauth-protected-resource{path}")
        }
        None => format!("{}/.well-known/oauth-protected-resource", public_url.trim_end_matches('/')),
    }
}

impl Gateway {
    /// The identity an `Authorization` header value (or its absence) authenticates; a refusal
    /// is counted and logged by reason, never with the credential. An access token signed by a
    /// key its authorization server has not published to the gateway yet makes the keys be
    /// read again (rate-bounded), then the token checked again.
    pub async fn authenticate(&self, authorization: Option<&str>) -> Result<Identity, GatewayError> {
        let mut outcome = self.shared.tenancy.authenticate(authorization);
        match &outcome {
            Err(AuthError::KeysNeeded(issuer)) => {
                self.shared.tenancy.issuers.refresh_now(issuer).await;
                outcome = self.shared.tenancy.authenticate(authorization);
            }
            Err(AuthError::IntrospectionNeeded) => {
                let token = authorization.and_then(|h| h.split_once(' ')).map_or("", |(_, t)| t.trim());
                if !self.shared.tenancy.introspect(token).await {
                    // Not the token's fault: the client retries (503, Retry-After).
                    return Err(GatewayError::Overloaded(
                        "too many tokens to introspect at the authorization server this second; retry".into(),
                    ));
                }
                outcome = self.shared.tenancy.authenticate(authorization);
                if let Err(AuthError::IntrospectionNeeded) = outcome {
                    outcome = Err(AuthError::Token("no authorization server could be asked about it"));
                }
            }
            _ => {}
        }
        outcome.map_err(|e| {
            self.shared.metrics.auth_failures.with_label_values(&[e.reason()]).inc();
            if let Some(suppressed) = crate::logs::limiter().allow("credentials_refused") {
                tracing::info!(target: "taskgate::audit", reason = e.reason(), suppressed, "credentials refused");
            }
            self.refusal(&e)
        })
    }

    /// The error and challenge for refused credentials: RFC 6750 section 3.1 (no `error`
    /// attribute when none were sent) with RFC 9728 section 5.1's `resource_metadata` and the
    /// scope needed (MCP authorization, "Protected Resource Metadata Discovery Requirements").
    fn refusal(&self, e: &AuthError) -> GatewayError {
        let (issuers, scopes) = self.shared.tenancy.oauth();
        let mut challenge = match (&self.shared.config.server.public_url, issuers.is_empty()) {
            (Some(url), false) => format!(r#"Bearer resource_metadata="{}""#, resource_metadata_url(url)),
            _ => r#"Bearer realm="taskgate""#.to_owned(),
        };
        let scope = match e {
            AuthError::Scope(needed) => needed.clone(),
            _ => scopes.join(" "),
        };
        if !scope.is_empty() && !issuers.is_empty() {
            challenge.push_str(&format!(r#", scope="{scope}""#));
        }
        match e {
            AuthError::Missing => GatewayError::Unauthorized { message: e.to_string(), challenge },
            AuthError::Scope(_) => {
                challenge.push_str(r#", error="insufficient_scope""#);
                GatewayError::Forbidden { message: e.to_string(), challenge }
            }
            _ => {
                challenge.push_str(r#", error="invalid_token""#);
                GatewayError::Unauthorized { message: e.to_string(), challenge }
            }
        }
    }

    /// The protected resource metadata (RFC 9728) when authorization servers are configured.
    pub fn protected_resource_metadata(&self) -> Option<serde_json::Value> {
        let url = self.shared.config.server.public_url.as_ref()?;
        let (issuers, scopes) = self.shared.tenancy.oauth();
        if issuers.is_empty() {
            return None;
        }
        Some(serde_json::json!({
            "resource": url,
            "authorization_servers": issuers,
            "scopes_supported": scopes,
            "bearer_methods_supported": ["header"],
            "resource_name": "taskgate",
        }))
    }

    /// The authorization servers' key health.
    pub fn oauth_health(&self) -> Vec<crate::tenants::oauth::IssuerHealth> {
        // The issuers of the configuration in force (a reload may have removed some).
        let (issuers, _) = self.shared.tenancy.oauth();
        let introspecting = self.shared.tenancy.introspecting();
        let mut health = self.shared.tenancy.issuers.health();
        health.retain(|h| issuers.contains(&h.issuer));
        for h in &mut health {
            h.needs_keys = !introspecting.contains(&h.issuer) || h.keys > 0;
        }
        health
    }
}
