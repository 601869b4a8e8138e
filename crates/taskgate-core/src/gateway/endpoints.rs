//! The tenant's endpoints: its own (`/mcp`) and its profiles' (`/mcp/<profile>`), and the
//! search mode's `find_tools`, answered here where the caller's scopes are known.

use serde_json::{json, Value};
use taskgate_config::profiles::FIND_TOOLS;

use super::Gateway;
use crate::router::ToolCatalog;
use crate::tenants::profiles::Endpoint;
use crate::tool_search::{MAX_QUERY_BYTES, MAX_RESULTS};
use crate::{GatewayError, Identity};

/// Matches `find_tools` returns unless asked for another number.
const DEFAULT_RESULTS: usize = 5;

impl Gateway {
    /// What the endpoint of `profile` serves the caller's tenant (`None`: its own endpoint).
    pub fn endpoint(&self, identity: &Identity, profile: Option<&str>) -> Result<Endpoint, GatewayError> {
        let policy = self.shared.tenancy.policy(&identity.tenant);
        let endpoint = policy.endpoint(profile).ok_or_else(|| {
            GatewayError::UnknownProfile(crate::logs::Untrusted(profile.unwrap_or_default()).to_string())
        })?;
        Ok(endpoint)
    }

    /// The tool catalog of a client declaring `capabilities` (a 2026-07-28 request's; a
    /// session's is [`crate::SessionHandle::tool_catalog`]).
    pub async fn tool_catalog_for(&self, capabilities: &Value) -> ToolCatalog {
        let relayable = taskgate_protocol::mcp::relayable_client_capabilities(capabilities);
        match self.shared.router.send(crate::router::CatalogFor(relayable)).await {
            Ok(catalog) => catalog,
            Err(_) => ToolCatalog { caps: String::new(), catalog: self.shared.catalog.clone() },
        }
    }

    /// `find_tools` (search mode), called with `arguments`: the best matches in the caller's
    /// `catalog` for its need, among the tools it may call here: the tenant's rules, the
    /// endpoint's tools and, for an OAuth access token, the scopes the tool needs (a search
    /// never shows a tool its caller cannot call).
    pub async fn find_tools(
        &self,
        identity: &Identity,
        scopes: Option<&[Box<str>]>,
        endpoint: &Endpoint,
        catalog: &ToolCatalog,
        arguments: Option<&Value>,
    ) -> Result<Value, GatewayError> {
        let query = arguments.and_then(|a| a.get("query")).and_then(Value::as_str).ok_or_else(|| {
            GatewayError::InvalidParams(format!("{FIND_TOOLS} needs \"query\": what you need to do, in plain words"))
        })?;
        let limit = match arguments.and_then(|a| a.get("limit")) {
            None | Some(Value::Null) => DEFAULT_RESULTS,
            Some(n) => n.as_u64().filter(|n| (1..=MAX_RESULTS as u64).contains(n)).ok_or_else(|| {
                GatewayError::InvalidParams(format!("\"limit\" must be a whole number from 1 to {MAX_RESULTS}"))
            })? as usize,
        };
        let policy = self.shared.tenancy.policy(&identity.tenant);
        let _ = self.shared.router.send(crate::router::EnsureCatalog(catalog.caps.clone())).await;
        let rules = policy.tools.as_ref().filter(|r| !r.scopes.is_empty() || !r.upstream_scopes.is_empty());
        let granted = scopes;
        let may_call = |upstream: &str, name: &str| {
            let (Some(rules), Some(granted)) = (rules, granted) else { return true };
            rules.scopes_for(upstream, name).iter().all(|s| granted.iter().any(|g| &**g == *s))
        };
        let started = std::time::Instant::now();
        // The index of the catalog as it is now: built (outside the catalog's lock) when the
        // catalog changed since the last one.
        let search = self.shared.search.of(&catalog.catalog);
        let (generation, copy) = {
            let catalog = catalog.catalog.read();
            let generation = catalog.generation();
            let stale = search.of(generation).is_none();
            let copy = stale.then(|| catalog.entries().map(|(n, e)| (n.clone(), e.tool.clone())).collect::<Vec<_>>());
            (generation, copy)
        };
        let index = match copy {
            Some(tools) => search.for_generation(generation, tools).await,
            // (Replaced meanwhile by a newer one: that one.)
            None => match search.of(generation).or_else(|| search.latest()) {
                Some(index) => index,
                None => search.for_generation(generation, Vec::new()).await,
            },
        };
        let catalog = catalog.catalog.read();
        // App-only tools (MCP Apps) are for the host's views, never the model's choice.
        let mut tools = crate::tool_search::matches(&catalog, &index, query, limit, |name, e| {
            policy.serves_at(endpoint, &e.upstream, name)
                && may_call(&e.upstream, name)
                && !crate::offering_names::app_only(&e.tool.raw)
        });
        for tool in &mut tools {
            endpoint.show(tool);
        }
        drop(catalog);
        let profile = endpoint.profile_name().unwrap_or("");
        self.shared.metrics.tool_searches.with_label_values(&[&identity.tenant, profile]).inc();
        self.shared.metrics.tool_search_seconds.observe(started.elapsed().as_secs_f64());
        let cut = if query.len() > MAX_QUERY_BYTES { " (the query was cut to its first 1,024 bytes)" } else { "" };
        let text = if tools.is_empty() {
            format!("No tool matches that need{cut}. Try other words.")
        } else {
            format!(
                "{} matching tools{cut}, best first (call one by its name, or activate it with use_tools):\n{}",
                tools.len(),
                serde_json::to_string_pretty(&tools).unwrap_or_default()
            )
        };
        Ok(json!({
            "content": [{"type": "text", "text": text}],
            "structuredContent": {"tools": tools},
            "isError": false,
        }))
    }
}
