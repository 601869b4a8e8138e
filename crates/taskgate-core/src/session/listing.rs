//! `tools/list`: the tools a session's endpoint serves, as it shows them ([`super::shown`]).

use actix::prelude::*;
use serde_json::{json, Value};
use taskgate_protocol::{mcp, RequestId};

use super::SessionActor;
use crate::catalog::{Page, ToolEntry};
use crate::router::{EnsureCatalog, ToolCatalog};
use crate::{tasks, GatewayError};

impl SessionActor {
    /// `tools/list`: the tools the endpoint serves, shown as it shows them; in search mode the
    /// meta-tools and the tools the client activated.
    pub(super) fn list_tools(&mut self, id: RequestId, params: Option<Value>, ctx: &mut Context<Self>) {
        let cursor = match mcp::cursor(params.as_ref()) {
            Ok(c) => c.map(str::to_owned),
            Err(e) => return self.finish(id, Err(GatewayError::InvalidParams(e))),
        };
        let router = self.shared.router.clone();
        let shared = self.shared.clone();
        let ToolCatalog { caps, catalog } = self.catalog.clone();
        let policy = self.shared.tenancy.policy(&self.identity.tenant);
        let endpoint = self.shown.endpoint.clone();
        // In search mode: the meta-tools, then the tools the client activated (one page),
        // with those kept for other replicas (activated through another one moments ago,
        // maybe not heard of here yet).
        let mut activated: Option<std::collections::BTreeSet<String>> =
            endpoint.search.then(|| self.shown.names().cloned().collect());
        let kept = endpoint.search.then(|| self.kept_activations()).flatten();
        let listing = async move {
            if let (Some(kept), Some(activated)) = (kept, activated.as_mut()) {
                match kept.await {
                    Ok(kept) => activated.extend(kept),
                    Err(e) => tracing::warn!(error = %e, "the tools activated elsewhere could not be read"),
                }
            }
            let _ = router.send(EnsureCatalog(caps)).await;
            let support =
                |e: &ToolEntry| tasks::task_support(e, shared.connectors.get(&e.upstream).map(|c| c.config()));
            let serves = |name: &str, e: &ToolEntry| policy.serves_at(&endpoint, &e.upstream, name);
            let mut page = match &activated {
                Some(activated) => {
                    let visible = |name: &str, e: &ToolEntry| activated.contains(name) && serves(name, e);
                    let mut page = catalog.read().page(None, super::shown::MAX_ACTIVATED, visible, support);
                    if let Ok(page) = &mut page {
                        page.tools.splice(0..0, crate::tenants::profiles::meta_tools());
                    }
                    page
                }
                None => catalog.read().page(cursor.as_deref(), shared.config.federation.page_size, serves, support),
            }
            .map_err(GatewayError::InvalidParams)?;
            for tool in &mut page.tools {
                endpoint.show(tool);
            }
            Ok(page)
        };
        ctx.spawn(listing.into_actor(self).map(move |page, act, _| {
            act.finish(
                id,
                page.map(|Page { tools, next_cursor }| {
                    let mut result = json!({ "tools": tools });
                    if let Some(next) = next_cursor {
                        result["nextCursor"] = Value::from(next);
                    }
                    result
                }),
            )
        }));
    }
}
