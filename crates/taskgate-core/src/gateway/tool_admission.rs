//! Tool calls admitted by the rates of `[tenant.tools]` (`rates`, `upstream_rates`), at the
//! front door before a call reaches a session, for clients of both revisions; and what a
//! 2026-07-28 call's `Mcp-Param-*` headers are checked against there.

use serde_json::Value;
use std::sync::Arc;
use taskgate_config::RatePer;
use taskgate_protocol::mcp::{self, methods};
use taskgate_protocol::param_headers::ParamHeader;

use crate::tenants::profiles::Endpoint;

use super::Gateway;
use crate::identity::Identity;
use crate::tenants::tool_rates;
use crate::GatewayError;

impl Gateway {
    /// Admits a `tools/call` of `identity` by its tenant's tool rates: every glob its name
    /// matches, and the rate of each upstream it may reach. Over one: 429 with `Retry-After`,
    /// naming the tool and the glob, and nothing taken from the other buckets. With a shared
    /// store the buckets are every replica's; while the store is unreachable each replica's
    /// own apply.
    pub async fn admit_tool(
        &self,
        identity: &Identity,
        method: &str,
        params: Option<&Value>,
    ) -> Result<(), GatewayError> {
        if method != methods::TOOLS_CALL {
            return Ok(());
        }
        let policy = self.shared.tenancy.policy(&identity.tenant);
        let Some(rules) = policy.tools.as_ref().filter(|r| !r.rates.is_empty() || !r.upstream_rates.is_empty()) else {
            return Ok(());
        };
        let Some(tool) = params.and_then(|p| p.get("name")).and_then(Value::as_str) else {
            return Ok(()); // refused as invalid params by the session
        };
        // A tool the tenant may not call is answered by the session as an unknown one; a
        // 2026-07-28 retry carrying the client's answers continues a call already admitted.
        if !rules.permits(tool) || params.is_some_and(|p| p.get("inputResponses").is_some()) {
            return Ok(());
        }
        let mut upstreams = Vec::new();
        if !rules.upstream_rates.is_empty() {
            if self.shared.catalog.read().resolve(tool).is_none() {
                // Not listed yet: the catalog the session will look in first is loaded.
                let _ = self.shared.router.send(crate::router::EnsureCatalog(crate::router::Caps::new())).await;
            }
            let found = self.shared.catalog.read().reachable(tool, |u| policy.sees(u));
            upstreams = found.into_iter().map(|(_, upstream)| upstream).collect();
        }
        let reached: Vec<&str> = upstreams.iter().map(String::as_str).collect();
        let buckets = tool_rates::buckets(rules, identity, tool, &reached);
        if buckets.is_empty() {
            return Ok(());
        }
        let now = || self.shared.clock.now_ms();
        let store = self.shared.tasks.store();
        let refused = if store.shared() {
            let names: Vec<taskgate_store::RateBucket> = buckets
                .iter()
                .map(|b| taskgate_store::RateBucket {
                    name: b.key.clone(),
                    per_second: b.rate.per_second,
                    burst: b.rate.burst,
                })
                .collect();
            match store.admit_rates(&names).await {
                Ok(refused) => refused,
                Err(e) => {
                    tracing::debug!(error = %e, "shared rate buckets unreachable; this replica's own apply");
                    self.shared.tenancy.tool_rates.check(&buckets, now()).err()
                }
            }
        } else {
            self.shared.tenancy.tool_rates.check(&buckets, now()).err()
        };
        let Some((index, retry_after_ms)) = refused else {
            return Ok(());
        };
        let bucket = &buckets[index];
        self.shared.metrics.tool_rate_limited.with_label_values(&[&*identity.tenant, bucket.pattern.as_str()]).inc();
        tracing::debug!(target: "taskgate::audit", tenant = %identity.tenant, principal = %identity.principal, pattern = %bucket.pattern, "tool call rate limited");
        // The name is the client's: as long as an identifier may be.
        let tool: String = tool.chars().take(mcp::MAX_ID_BYTES).collect();
        let who = match bucket.per {
            RatePer::Tenant => format!("tenant \"{}\"", identity.tenant),
            RatePer::Principal => format!("principal \"{}\"", identity.principal),
        };
        let (calls, key) = match bucket.pattern.strip_prefix("upstream:") {
            Some(upstream) => (format!("calls of upstream \"{upstream}\"'s tools"), "tools.upstream_rates"),
            None => (format!("calls of tools matching \"{}\"", bucket.pattern), "tools.rates"),
        };
        Err(GatewayError::ToolRateLimited {
            what: format!(
                "{calls} by {who} exceed {} per second (burst {}; {key}); {tool} was not called",
                bucket.rate.per_second, bucket.rate.burst
            ),
            tool,
            pattern: bucket.pattern.clone(),
            retry_after_ms,
        })
    }

    /// The `x-mcp-header` annotations of the tool `name` as a call at `endpoint` finds it (none
    /// for a tool the tenant's rules or the profile leave out, or that no upstream lists: what
    /// the call gets then is "Unknown tool", never a header check that tells such a tool
    /// exists). A tool offered only to clients declaring some capability is found in the
    /// catalog of the request's `capabilities`, listed first if need be.
    pub async fn tool_param_headers(
        &self,
        tenant: &str,
        endpoint: &Endpoint,
        capabilities: &Value,
        name: &str,
    ) -> Arc<[ParamHeader]> {
        if endpoint.is_meta_tool(name) {
            return Arc::from([]);
        }
        let policy = self.shared.tenancy.policy(tenant);
        let exact = |catalog: &parking_lot::RwLock<crate::catalog::Catalog>| {
            let catalog = catalog.read();
            let entry = catalog.resolve(name).filter(|e| policy.serves_at(endpoint, &e.upstream, name));
            entry.map(|e| e.tool.param_headers.clone())
        };
        if let Some(found) = exact(&self.shared.catalog) {
            return found;
        }
        let relayable = mcp::relayable_client_capabilities(capabilities);
        let Ok(variant) = self.shared.router.send(crate::router::CatalogFor(relayable)).await else {
            return Arc::from([]);
        };
        let _ = self.shared.router.send(crate::router::EnsureCatalog(variant.caps.clone())).await;
        if let Some(found) = exact(&variant.catalog) {
            return found;
        }
        // An MCP App's View calls a tool by the name its server gave it: the one tool a single
        // prefixed upstream has under that name in the client's catalog is the call's, as the
        // session resolves it (after the exact name).
        if !mcp::declares_ui(capabilities) {
            return Arc::from([]);
        }
        let catalog = variant.catalog.read();
        let mut found = catalog.by_original_name(name, |exposed, e| policy.serves_at(endpoint, &e.upstream, exposed));
        match found.len() {
            1 => found.remove(0).1.tool.param_headers.clone(),
            _ => Arc::from([]),
        }
    }
}
