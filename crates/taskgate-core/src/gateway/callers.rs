//! Who is calling: credentials checked (an authorization server's keys read again, or an
//! opaque token introspected, when a token needs it), refusals with their challenges (RFC
//! 6750, RFC 9728), and the protected resource metadata.

use super::Gateway;
use crate::tenants::{AuthError, Verified};
use crate::GatewayError;

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
    /// read again (rate-bounded), then the token checked again. An OAuth access token is kept
    /// as its caller's latest, and carried with the request as its subject, while an upstream
    /// exchanges callers' tokens (RFC 8693).
    ///
    /// `source` names the client (its address, or the one a trusted proxy names): an opaque
    /// token is introspected only within the client's share of its server's budget, and a
    /// client that had [`crate::tenants::refused_tokens::PER_SOURCE`] tokens refused this second
    /// has its further JWTs answered 429 until the next second, without a check.
    ///
    /// `profile`: the endpoint asked (`/mcp/<profile>`; `None`: `/mcp`), whose protected
    /// resource metadata a refusal's challenge names.
    pub async fn authenticate(
        &self,
        authorization: Option<&str>,
        source: &dyn Fn() -> Option<std::net::IpAddr>,
        profile: Option<&str>,
    ) -> Result<Verified, GatewayError> {
        let tenancy = &self.shared.tenancy;
        // A JWT's signature is costly to check: a client that had its share of tokens refused
        // this second gets the rest refused unchecked (a token verified lately still passes).
        let jwt = authorization.is_some_and(|h| h.bytes().filter(|b| *b == b'.').count() == 2);
        let jwt_source = if jwt { source() } else { None };
        if let Some(ip) = jwt_source {
            if tenancy.refused_tokens.spent(ip, tenancy.now_secs()) && !tenancy.verified_lately(authorization) {
                self.shared.metrics.auth_failures.with_label_values(&["refused_tokens"]).inc();
                let retry_after_ms = 1000 - self.shared.clock.now_ms() % 1000;
                return Err(GatewayError::RateLimited {
                    what: format!(
                        "this client had {} tokens refused this second; its further tokens are checked from the next second",
                        crate::tenants::refused_tokens::PER_SOURCE
                    ),
                    retry_after_ms,
                });
            }
        }
        let mut outcome = tenancy.authenticate(authorization);
        match &outcome {
            Err(AuthError::KeysNeeded(issuer)) => {
                // The keys are read again (at most once per cooldown), or another request's read
                // is under way: a rotation's new key is waited for, never a reason to refuse.
                let issuer = issuer.clone();
                let issuers = &self.shared.tenancy.issuers;
                let read = issuers.refresh_now(&issuer).await;
                outcome = self.shared.tenancy.authenticate(authorization);
                if !read && matches!(outcome, Err(AuthError::KeysNeeded(_))) {
                    issuers.await_read(&issuer).await;
                    outcome = self.shared.tenancy.authenticate(authorization);
                }
                if let Err(AuthError::KeysNeeded(_)) = outcome {
                    outcome = Err(AuthError::Token("its authorization server's signing key is not known"));
                }
            }
            Err(AuthError::IntrospectionNeeded) => {
                let token = authorization.and_then(|h| h.split_once(' ')).map_or("", |(_, t)| t.trim());
                match self.shared.tenancy.introspect(token, source()).await {
                    Ok(()) => {}
                    // The client sends more unknown tokens than its share: its own doing.
                    Err(crate::tenants::oauth::NotAsked::OverShare) => {
                        outcome = Err(AuthError::Token(
                            "this client sent more new tokens this second than may be introspected for it",
                        ))
                    }
                    // Not the token's fault: the client retries (503, Retry-After).
                    Err(crate::tenants::oauth::NotAsked::Spent) => {
                        return Err(GatewayError::Overloaded(
                            "too many tokens to introspect at the authorization server this second; retry".into(),
                        ))
                    }
                }
                if matches!(outcome, Err(AuthError::IntrospectionNeeded)) {
                    outcome = self.shared.tenancy.authenticate(authorization);
                }
                if let Err(AuthError::IntrospectionNeeded) = outcome {
                    outcome = Err(AuthError::Token("no authorization server could be asked about it"));
                }
            }
            _ => {}
        }
        // A token issued for a profile's endpoint only (RFC 8707: its audience) is taken there.
        if let Ok(Verified { for_profile: Some(issued_for), .. }) = &outcome {
            if Some(&**issued_for) != profile {
                outcome = Err(AuthError::Token("it was issued for another resource (aud)"));
            }
        }
        if let Ok(verified @ Verified { scopes: Some(_), .. }) = &mut outcome {
            let subjects = &self.shared.tenancy.subjects;
            let token = authorization.and_then(|h| h.split_once(' ')).map_or("", |(_, t)| t.trim());
            // An access token's (a caller without one, the anonymous tenant's, holds none).
            if subjects.wanted() && !token.is_empty() && verified.identity.principal.starts_with("oauth:") {
                subjects.remember(&verified.identity, token, verified.expires_secs);
                // The request's own token goes with it: its exchanges start from it.
                verified.subject =
                    Some(taskgate_upstream::Subject { token: token.into(), expires_secs: verified.expires_secs });
            }
        }
        if let (Some(ip), Err(e)) = (jwt_source, &outcome) {
            if !matches!(e, AuthError::Scope(_)) {
                tenancy.refused_tokens.refused(ip, tenancy.now_secs());
            }
        }
        outcome.map_err(|e| {
            self.shared.metrics.auth_failures.with_label_values(&[e.reason()]).inc();
            if let Some(suppressed) = crate::logs::limiter().allow("credentials_refused") {
                tracing::info!(target: "taskgate::audit", reason = e.reason(), suppressed, "credentials refused");
            }
            self.refusal(&e, profile)
        })
    }

    /// The error and challenge for refused credentials: RFC 6750 section 3.1 (no `error`
    /// attribute when none were sent) with RFC 9728 section 5.1's `resource_metadata` and the
    /// scope needed (MCP authorization, "Protected Resource Metadata Discovery Requirements").
    fn refusal(&self, e: &AuthError, profile: Option<&str>) -> GatewayError {
        let text = self.shared.tenancy.refusal_text(e);
        let (issuers, scopes) = self.shared.tenancy.oauth();
        let mut challenge = match (self.resource(profile), issuers.is_empty()) {
            (Some(url), false) => format!(r#"Bearer resource_metadata="{}""#, resource_metadata_url(&url)),
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
            AuthError::Missing => GatewayError::Unauthorized { message: text, challenge },
            // RFC 6750 section 3.1: a request that is not a bearer token request is malformed.
            AuthError::Malformed => {
                challenge.push_str(r#", error="invalid_request""#);
                GatewayError::MalformedCredentials { message: text, challenge }
            }
            AuthError::Scope(_) => {
                challenge.push_str(r#", error="insufficient_scope""#);
                GatewayError::Forbidden { message: text, challenge }
            }
            _ => {
                challenge.push_str(r#", error="invalid_token""#);
                GatewayError::Unauthorized { message: text, challenge }
            }
        }
    }

    /// Refuses a request for a tool's or an upstream's data whose scopes (`[tenant.tools]
    /// scopes` and `upstream_scopes`) the caller's access token lacks: 403 `insufficient_scope`
    /// naming every scope the call needs (MCP authorization, "Runtime Insufficient Scope
    /// Errors": all of them in one challenge). `tools/call` (plain or as a task) needs its
    /// tool's scopes and its upstream's; `resources/read`, `resources/subscribe`,
    /// `prompts/get` and `completion/complete` need the scopes of every upstream the URI or
    /// name may reach. Fails closed: a name is held to the scopes of every tool it could reach
    /// in any client's catalog (`Catalog::reachable`).
    pub async fn check_scopes(
        &self,
        verified: &Verified,
        method: &str,
        params: Option<&serde_json::Value>,
        profile: Option<&str>,
    ) -> Result<(), GatewayError> {
        use taskgate_protocol::mcp::{methods, CompletionRef};
        if verified.scopes.is_none() {
            return Ok(());
        }
        let policy = self.shared.tenancy.policy(&verified.identity.tenant);
        let Some(rules) = policy.tools.as_ref().filter(|r| !r.scopes.is_empty() || !r.upstream_scopes.is_empty())
        else {
            return Ok(());
        };
        let text = |field: &str| params.and_then(|p| p.get(field)).and_then(serde_json::Value::as_str);
        let mut needed: Vec<&str> = Vec::new();
        match method {
            methods::TOOLS_CALL => {
                let Some(name) = text("name") else {
                    return Ok(()); // refused as invalid params by the session
                };
                if self.shared.catalog.read().resolve(name).is_none() {
                    // Not listed yet: the catalog the session will look in first is loaded.
                    let _ = self.shared.router.send(crate::router::EnsureCatalog(crate::router::Caps::new())).await;
                }
                let found = self.shared.catalog.read().reachable(name, |u| policy.sees(u));
                needed.extend(rules.scopes_for("", name));
                for (exposed, upstream) in &found {
                    needed.extend(rules.scopes_for(upstream, exposed));
                }
            }
            methods::RESOURCES_READ
            | methods::RESOURCES_SUBSCRIBE
            | methods::PROMPTS_GET
            | methods::COMPLETION_COMPLETE => {
                let routes = {
                    let catalog = self.shared.catalog.read();
                    let (naming, separator) = (catalog.naming(), catalog.separator());
                    match (method, CompletionRef::from_params(params)) {
                        (methods::PROMPTS_GET, _) => {
                            text("name").map(|n| crate::offering_names::route_name(naming, separator, n))
                        }
                        (methods::COMPLETION_COMPLETE, Ok(CompletionRef::Prompt(n))) => {
                            Some(crate::offering_names::route_name(naming, separator, n))
                        }
                        (methods::COMPLETION_COMPLETE, Ok(CompletionRef::Resource(uri))) => {
                            Some(crate::offering_names::route_uri(naming, uri))
                        }
                        (methods::COMPLETION_COMPLETE, Err(_)) => None,
                        _ => text("uri").map(|uri| crate::offering_names::route_uri(naming, uri)),
                    }
                };
                let Some(routes) = routes else {
                    return Ok(()); // refused as invalid params by the session
                };
                for (upstream, _) in routes.iter().filter(|(u, _)| policy.sees(u)) {
                    if let Some(scopes) = rules.upstream_scopes.get(upstream) {
                        needed.extend(scopes.split_whitespace());
                    }
                }
            }
            _ => return Ok(()),
        }
        needed.sort_unstable();
        needed.dedup();
        if verified.lacks(&needed).is_none() {
            return Ok(());
        }
        self.shared.metrics.auth_failures.with_label_values(&["insufficient_scope"]).inc();
        let (_, required) = self.shared.tenancy.oauth();
        let mut all: Vec<&str> = required.iter().map(String::as_str).chain(needed.iter().copied()).collect();
        all.sort_unstable();
        all.dedup();
        Err(self.refusal(&AuthError::Scope(all.join(" ")), profile))
    }

    /// The resource identifier of the endpoint of `profile` (`None`: `/mcp`, the gateway's
    /// `server.public_url`): each profile's endpoint is a protected resource of its own (RFC
    /// 9728 section 3.3: the metadata a challenge names is of the URL the client asked). A
    /// name no tenant has is the gateway's.
    fn resource(&self, profile: Option<&str>) -> Option<String> {
        let url = self.shared.config.server.public_url.as_ref()?;
        Some(match profile.filter(|p| self.shared.tenancy.has_profile(p)) {
            Some(profile) => crate::tenants::profiles::resource_of(url, profile),
            None => url.clone(),
        })
    }

    /// The protected resource metadata (RFC 9728) of the endpoint of `profile` (`None`: `/mcp`)
    /// when authorization servers are configured; `None` for a profile no tenant has.
    pub fn protected_resource_metadata(&self, profile: Option<&str>) -> Option<serde_json::Value> {
        if profile.is_some_and(|p| !self.shared.tenancy.has_profile(p)) {
            return None;
        }
        let url = self.resource(profile)?;
        let (issuers, scopes) = self.shared.tenancy.oauth();
        if issuers.is_empty() {
            return None;
        }
        Some(serde_json::json!({
            "resource": url,
            "authorization_servers": issuers,
            "scopes_supported": scopes,
            "bearer_methods_supported": ["header"],
            "resource_name": match profile {
                Some(profile) => format!("taskgate/{profile}"),
                None => "taskgate".to_owned(),
            },
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
