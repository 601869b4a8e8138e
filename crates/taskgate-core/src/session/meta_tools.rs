//! The search mode's `use_tools`: the client activates tools for its session, which then lists
//! them and tells it the list changed. (`find_tools` is answered at the front door, which holds
//! the caller's scopes: [`crate::Gateway::find_tools`].)

use actix::prelude::*;
use serde_json::{json, Value};
use taskgate_config::profiles::USE_TOOLS;
use taskgate_protocol::mcp::{methods, ToolCallView};
use taskgate_protocol::{Message as RpcMessage, RequestId};
use taskgate_store::{SessionChange, StoreEvent};

use std::sync::Arc;

use super::shown::MAX_ACTIVATED;
use super::SessionActor;
use crate::GatewayError;

/// Names one `use_tools` may activate, at most.
const MAX_NAMES: usize = 64;

impl SessionActor {
    /// A call of one of the search mode's meta-tools.
    pub(super) fn meta_tool(
        &mut self,
        id: RequestId,
        params: Option<Value>,
        view: ToolCallView,
        ctx: &mut Context<Self>,
    ) {
        let arguments = match &view.arguments {
            Some(raw) => raw.to_value(),
            None => params.as_ref().and_then(|p| p.get("arguments")).cloned().unwrap_or_else(|| json!({})),
        };
        match view.name.as_str() {
            USE_TOOLS => self.use_tools(id, &arguments, ctx),
            other => self.finish(id, Err(GatewayError::InvalidParams(format!("Unknown tool: {other}")))),
        }
    }

    fn use_tools(&mut self, id: RequestId, arguments: &Value, ctx: &mut Context<Self>) {
        let names = arguments
            .get("names")
            .and_then(Value::as_array)
            .filter(|n| (1..=MAX_NAMES).contains(&n.len()))
            .and_then(|n| n.iter().map(Value::as_str).collect::<Option<Vec<&str>>>())
            .filter(|n| n.iter().all(|name| name.len() <= 128));
        let Some(names) = names else {
            let why = format!("{USE_TOOLS} needs \"names\": 1 to {MAX_NAMES} tool names of at most 128 bytes");
            return self.finish(id, Err(GatewayError::InvalidParams(why)));
        };
        let policy = self.shared.tenancy.policy(&self.identity.tenant);
        let endpoint = self.shown.endpoint.clone();
        let (mut found, mut unknown) = (Vec::new(), Vec::new());
        {
            let catalog = self.catalog.catalog.read();
            for shown in names {
                let name = endpoint.gateway_name(shown);
                match catalog.resolve(name).filter(|e| policy.serves_at(&endpoint, &e.upstream, name)) {
                    Some(_) => found.push((shown, name.to_owned())),
                    None => unknown.push(shown),
                }
            }
        }
        let before: Vec<bool> = found.iter().map(|(_, name)| self.shown.is_activated(name)).collect();
        let added = self.shown.activate(found.iter().map(|(_, name)| name.as_str()));
        let full = added.is_err();
        let new: Vec<String> = found
            .iter()
            .zip(before)
            .filter(|((_, name), was)| !was && self.shown.is_activated(name))
            .map(|((_, name), _)| name.clone())
            .collect();
        let activated: Vec<&str> =
            found.iter().filter(|(_, name)| self.shown.is_activated(name)).map(|(shown, _)| *shown).collect();
        let mut text =
            format!("Activated: {}.", if activated.is_empty() { "none".into() } else { activated.join(", ") });
        if !unknown.is_empty() {
            text.push_str(&format!(" Not found here: {}.", unknown.join(", ")));
        }
        if full {
            text.push_str(&format!(" A session activates at most {MAX_ACTIVATED} tools."));
        }
        let result = json!({
            "content": [{"type": "text", "text": text}],
            "structuredContent": {"activated": activated, "unknown": unknown},
            "isError": activated.is_empty(),
        });
        // Kept for other replicas before the client hears of a change, so that whichever
        // replica its next `tools/list` reaches lists them; kept again on every activation (a
        // write that failed is made again, and a 2026-07-28 client's keep their time).
        let changed = !new.is_empty();
        let kept: Vec<String> =
            found.into_iter().map(|(_, name)| name).filter(|name| self.shown.is_activated(name)).collect();
        let (tasks, session) = (self.shared.tasks.clone(), self.id.clone());
        let keep_ms = Self::keep_ms(&self.shared.config);
        let write: Option<futures_util::future::BoxFuture<'static, ()>> = if kept.is_empty() {
            None
        } else if let Some(key) = self.identity_activations() {
            // A 2026-07-28 client's: kept for its identity at this endpoint, and its listen
            // streams at every replica told.
            let owner = crate::tasks::owner(&self.identity);
            let profile = self.shown.endpoint.profile_name().map(str::to_owned);
            Some(Box::pin(async move {
                if let Err(e) = tasks.store().activate(&key, &kept, keep_ms).await {
                    tracing::warn!(error = %e, "tools activated were not recorded; other replicas do not list them");
                }
                if changed {
                    tasks.publish(StoreEvent::IdentityActivated { owner, profile });
                }
            }))
        } else if self.replicated() {
            Some(Box::pin(async move {
                match tasks.store().change_session(&session, SessionChange::Activate(kept), keep_ms).await {
                    Ok(true) if changed => {
                        tasks.publish(StoreEvent::SessionChanged { session });
                    }
                    Ok(true) => {}
                    Ok(false) => tracing::debug!(session = %session, "tools activated in a session no longer recorded"),
                    Err(e) => {
                        tracing::warn!(session = %session, error = %e, "tools activated were not recorded; other replicas do not list them")
                    }
                }
            }))
        } else {
            None
        };
        let Some(write) = write else {
            if changed {
                self.tools_changed_here();
            }
            return self.finish(id, Ok(result));
        };
        ctx.spawn(write.into_actor(self).map(move |(), act, _| {
            if changed {
                act.tools_changed_here();
            }
            act.finish(id, Ok(result));
        }));
    }

    /// Where a pooled session serving 2026-07-28 requests keeps the tools its identity
    /// activated at its endpoint, so that every replica lists them (a shared store only).
    fn identity_activations(&self) -> Option<String> {
        if !self.stateless || !self.shared.tasks.store().shared() {
            return None;
        }
        let identity = &self.identity;
        let profile = self.shown.endpoint.profile_name().unwrap_or("");
        Some(crate::tenants::hash_key(&format!("{}\n{}\n{profile}", identity.tenant, identity.principal)))
    }

    /// The tools kept for other replicas as activated by this session's client: in the
    /// session's record, or (a 2026-07-28 client's) for its identity at this endpoint. None
    /// without a shared store.
    pub(super) fn kept_activations(
        &self,
    ) -> Option<futures_util::future::BoxFuture<'static, Result<Vec<String>, taskgate_store::StoreError>>> {
        let tasks = self.shared.tasks.clone();
        if self.replicated() {
            let session = self.id.clone();
            return Some(Box::pin(async move {
                Ok(tasks.store().session(&session).await?.map(|record| record.activated).unwrap_or_default())
            }));
        }
        let key = self.identity_activations()?;
        let keep_ms = Self::keep_ms(&self.shared.config);
        Some(Box::pin(async move { tasks.store().activated(&key, keep_ms).await }))
    }

    /// basic/server/tools "List Changed Notification", for the tools this session activated.
    fn tools_changed_here(&mut self) {
        let changed = RpcMessage::notification(methods::TOOLS_LIST_CHANGED, None);
        match self.streams.get() {
            Some(stream) => {
                let _ = stream.send(&changed);
            }
            // A 2026-07-28 client's: it hears of changes on its listen streams.
            None if self.stateless => {
                self.shared.sessions.activated(&self.identity, self.shown.endpoint.profile_name());
            }
            None => {
                self.to_stream_elsewhere(&changed);
            }
        }
    }
}

/// A 2026-07-28 client activated tools at the endpoint of this profile (`None`: `/mcp`) in the
/// session the gateway pools for its identity: the identity's listen sessions at that endpoint
/// pass `notifications/tools/list_changed` on (basic/patterns/subscriptions: they carry the
/// `toolsListChanged` the client subscribed to).
pub(crate) struct IdentityActivated(pub Option<Arc<str>>);

impl Message for IdentityActivated {
    type Result = ();
}

impl Handler<IdentityActivated> for SessionActor {
    type Result = ();

    fn handle(&mut self, IdentityActivated(profile): IdentityActivated, _: &mut Context<Self>) {
        if self.listens && self.shown.endpoint.profile_name() == profile.as_deref() {
            if let Some(stream) = self.streams.get() {
                let _ = stream.send(&RpcMessage::notification(methods::TOOLS_LIST_CHANGED, None));
            }
        }
    }
}
