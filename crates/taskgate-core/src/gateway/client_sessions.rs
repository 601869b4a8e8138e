//! The gateway's client sessions: `initialize` (a session of 2025-11-25), the pooled sessions
//! that serve 2026-07-28 requests, finding a session for a request, ending one, and what the
//! gateway declares to clients.

use crate::identity::Identity;
use crate::outbound::Limits;
use crate::router::ToolCatalog;
use crate::session::registry::{Full, SessionEntry};
use crate::session::{Close, CloseIfIdle, EndpointReloaded, SessionActor};
use crate::tenants::profiles::Endpoint;
use crate::GatewayError;
use actix::prelude::*;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use taskgate_config::SessionCapPolicy;
use taskgate_protocol::mcp::{self, InitializeView};
use taskgate_upstream::ClientIdentity;

use super::handle::SessionHandle;
use super::Gateway;

/// How long `initialize` waits for the upstreams to be listed before it declares what they offer.
/// How many of a principal's sessions, the longest idle first, are asked to make room.
const RECLAIM_CANDIDATES: usize = 8;
/// How long one of them may take to answer.
const RECLAIM_WAIT: Duration = Duration::from_secs(2);
/// When idle sessions never close (`server.session_idle_timeout_secs = 0`), the `Retry-After`
/// of a refusal at the cap.
const NO_IDLE_RETRY: Duration = Duration::from_secs(60);

const CATALOG_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Whom a session serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SessionKind {
    /// A 2025-11-25 client's session.
    V2025,
    /// 2026-07-28 requests (their clients read a task's input requests with `tasks/get`, never
    /// from a `tasks/result` stream).
    Stateless,
    /// A 2026-07-28 client's `subscriptions/listen`.
    Listener,
}

impl Gateway {
    /// Handles `initialize`: negotiates the version, starts a session actor and returns the
    /// new session id with the `InitializeResult`.
    /// `catalog` is the session's tool catalog, from [`Gateway::catalog_ready`] (`None`: the
    /// catalog of a client declaring no capabilities).
    pub async fn initialize(
        &self,
        identity: Identity,
        params: Option<&Value>,
        catalog: Option<ToolCatalog>,
    ) -> Result<(String, Value), GatewayError> {
        let endpoint = self.endpoint(&identity, None)?;
        self.initialize_at(identity, params, catalog, endpoint).await
    }

    /// [`Gateway::initialize`] at an endpoint of the tenant ([`Gateway::endpoint`]): the
    /// session serves what it serves, and `initialize` names it.
    pub async fn initialize_at(
        &self,
        identity: Identity,
        params: Option<&Value>,
        catalog: Option<ToolCatalog>,
        endpoint: Endpoint,
    ) -> Result<(String, Value), GatewayError> {
        self.start_session(identity, params, catalog, SessionKind::V2025, endpoint).await
    }

    /// The session behind a 2026-07-28 client's `subscriptions/listen` at `endpoint`: as
    /// [`Gateway::initialize`], its upstream sessions speaking 2026-07-28 wherever the upstream
    /// does (what they announce is what the client subscribed to). The tools its identity
    /// activates at that endpoint (search mode) are announced on it too.
    pub async fn initialize_listener(
        &self,
        identity: Identity,
        params: Option<&Value>,
        catalog: Option<ToolCatalog>,
        endpoint: Endpoint,
    ) -> Result<(String, Value), GatewayError> {
        self.start_session(identity, params, catalog, SessionKind::Listener, endpoint).await
    }

    /// [`Gateway::initialize`], for a session of `kind`.
    pub(super) async fn start_session(
        &self,
        identity: Identity,
        params: Option<&Value>,
        catalog: Option<ToolCatalog>,
        kind: SessionKind,
        endpoint: Endpoint,
    ) -> Result<(String, Value), GatewayError> {
        let view = InitializeView::from_params(params).map_err(GatewayError::InvalidParams)?;
        if self.sessions.is_full() {
            self.shared.metrics.admission_rejected.with_label_values(&[&identity.tenant, "max_sessions"]).inc();
            return Err(GatewayError::Overloaded(format!(
                "the gateway has its maximum of {} sessions open (server.max_sessions)",
                self.shared.config.server.max_sessions
            )));
        }
        // basic/lifecycle "Version Negotiation": the requested version if supported, else ours.
        let version = mcp::negotiate_version(&view.protocol_version);
        // A v4 UUID comes from the OS CSPRNG and is visible ASCII (basic/transports "Session Management").
        let id = uuid::Uuid::new_v4().to_string();
        // Upstream sessions declare only what the gateway relays (roots, sampling, elicitation).
        let client = ClientIdentity {
            capabilities: mcp::relayable_client_capabilities(&view.capabilities),
            client_info: view.client_info,
            speaks_2025: kind == SessionKind::V2025,
        };
        // A 2026-07-28 client's listen session is its request's alone, its id never given out.
        let replicated = kind == SessionKind::V2025 && self.shared.tasks.store().shared();
        // Kept where every replica reads it before the client learns the id: a request of the
        // session may reach any of them.
        let mut record = replicated.then(|| self.session_record(&identity, version, &client));
        if let Some(record) = &mut record {
            record.profile = endpoint.profile_name().map(str::to_owned);
        }
        let shown = endpoint.clone();
        let session =
            Placed { id: id.clone(), identity: identity.clone(), version: version.to_owned(), client, endpoint };
        self.place_session(session, catalog, kind, None).await?;
        if let Some(record) = record {
            self.record_new_session(&id, record).await?;
            // A reload that removed its profile meanwhile ended it, perhaps before the record
            // was written: no replica may load it.
            if !self.sessions.contains(&id) {
                let _ = self.shared.tasks.store().delete_session(&id).await;
                let profile = shown.profile_name().unwrap_or_default();
                return Err(GatewayError::UnknownProfile(crate::logs::Untrusted(profile).to_string()));
            }
        }
        let tenant = identity.tenant.clone();
        let mut capabilities = json!({
            // basic/utilities/tasks "Capabilities": list, cancel and task-augmented tools/call.
            "tasks": { "list": {}, "cancel": {}, "requests": { "tools": { "call": {} } } },
        });
        if let (Value::Object(c), Value::Object(more)) = (&mut capabilities, self.server_capabilities(&tenant)) {
            c.extend(more);
        }
        let mut result = json!({
            "protocolVersion": version,
            "capabilities": capabilities,
            "serverInfo": server_info_at(&shown),
        });
        if let Some(instructions) = shown.profile.as_ref().and_then(|p| p.config.instructions.as_deref()) {
            result["instructions"] = Value::from(instructions);
        }
        Ok((id, result))
    }

    /// Starts a session's actor and adds it to the table, under the tenant's and the gateway's
    /// caps (a tenant at its cap may reclaim an idle session, `limits.at_max_sessions`).
    /// `restored`: a session loaded from its record keeps the level its client set and
    /// continues its upstream sessions.
    pub(super) async fn place_session(
        &self,
        session: Placed,
        catalog: Option<ToolCatalog>,
        kind: SessionKind,
        restored: Option<taskgate_store::SessionRecord>,
    ) -> Result<(), GatewayError> {
        let stateless = kind == SessionKind::Stateless;
        let Placed { id, identity, version, client, endpoint } = session;
        // The tenant's own limit, or its share of server.max_sessions, whichever is lower.
        let tenant_cap = Some(self.shared.tenancy.policy(&identity.tenant).shares.sessions);
        let catalog =
            catalog.unwrap_or_else(|| ToolCatalog { caps: String::new(), catalog: self.shared.catalog.clone() });
        let mut actor = SessionActor::new(id.clone(), self.shared.clone(), identity.clone(), client, catalog.clone());
        actor.stateless = stateless;
        actor.listens = kind == SessionKind::Listener;
        let profile: Option<Arc<str>> = endpoint.profile_name().map(Arc::from);
        actor.shown = crate::session::shown::Shown::new(endpoint);
        let loaded = restored.is_some();
        let now_ms = self.shared.clock.now_ms();
        let created_ms = restored.as_ref().map_or(now_ms, |r| r.created_ms);
        if let Some(record) = restored {
            actor.restore(record);
        }
        let actor = actor.start();
        let last_seen_ms = Arc::new(std::sync::atomic::AtomicU64::new(now_ms));
        let tenant = identity.tenant.clone();
        let budget = crate::outbound::SessionBudget::new(self.shared.config.server.session_buffer_bytes);
        let replicated = kind == SessionKind::V2025 && self.shared.tasks.store().shared();
        let entry = || SessionEntry {
            addr: actor.clone(),
            identity: identity.clone(),
            protocol_version: version.clone(),
            created_ms,
            last_seen_ms: last_seen_ms.clone(),
            budget: budget.clone(),
            release_asked_ms: Default::default(),
            profile: profile.clone(),
            catalog: catalog.clone(),
            record: replicated.then(|| crate::session::registry::Recorded {
                // A loaded copy looks at its record at its first request (an end it has not
                // heard of yet is found then).
                touched_ms: std::sync::atomic::AtomicU64::new(if loaded { 0 } else { now_ms }),
                pending: Default::default(),
                writing: Default::default(),
            }),
        };
        let mut inserted = self.sessions.insert(id.clone(), entry(), tenant_cap);
        if let Err(Full::Tenant(_)) = inserted {
            let policy = self.shared.tenancy.policy(&tenant).limits.at_max_sessions.unwrap_or_default();
            if policy == SessionCapPolicy::ReclaimIdle && self.reclaim_idle(&identity).await {
                inserted = self.sessions.insert(id.clone(), entry(), tenant_cap);
            }
        }
        if let Err(Full::Present) = inserted {
            // Loaded by another request meanwhile: that copy serves.
            actor.do_send(Close);
            return Ok(());
        }
        if let Err(full) = inserted {
            actor.do_send(Close);
            return Err(match full {
                Full::Present => unreachable!("handled above"),
                Full::Gateway => GatewayError::Overloaded(
                    "the gateway has its maximum of sessions open (server.max_sessions)".into(),
                ),
                Full::Tenant(cap) => {
                    self.shared.metrics.admission_rejected.with_label_values(&[&tenant, "tenant_max_sessions"]).inc();
                    let idle_ms = self.shared.config.server.session_idle_timeout_secs.saturating_mul(1000);
                    let retry_after_ms = match idle_ms {
                        // Idle sessions are never closed: a client ends one, or waits a minute.
                        0 => NO_IDLE_RETRY.as_millis() as u64,
                        _ => {
                            self.sessions.soonest_idle(&tenant, idle_ms, self.shared.clock.now_ms()).unwrap_or(idle_ms)
                        }
                    };
                    GatewayError::SessionCap {
                        what: format!(
                            "tenant \"{tenant}\" has its maximum of {cap} sessions open (limits.max_sessions, or its share of server.max_sessions); end one (DELETE) first"
                        ),
                        retry_after_ms: retry_after_ms.max(1000),
                    }
                }
            });
        }
        // Its endpoint was read before it was in the table: a reload meanwhile told every
        // session but this one. It reads its endpoint again (as it is now, or gone).
        actor.do_send(EndpointReloaded);
        Ok(())
    }

    /// Closes the longest-idle session of `identity` that holds nothing (no request since, none
    /// in flight, no GET stream, no relayed request waiting), to make room for a new one
    /// (`limits.at_max_sessions = "reclaim_idle"`); whether one closed.
    async fn reclaim_idle(&self, identity: &Identity) -> bool {
        for (id, entry) in self.sessions.idle_first(identity).into_iter().take(RECLAIM_CANDIDATES) {
            let cutoff_ms = self.shared.clock.now_ms().saturating_add(1);
            let check = CloseIfIdle { cutoff_ms, last_seen_ms: entry.last_seen_ms.clone() };
            if let Ok(Ok(true)) = tokio::time::timeout(RECLAIM_WAIT, entry.addr.send(check)).await {
                self.sessions.remove(&id);
                self.shared.metrics.sessions_reclaimed.with_label_values(&[&identity.tenant]).inc();
                tracing::info!(target: "taskgate::audit", session = %id, tenant = %identity.tenant, principal = %identity.principal, "idle session closed to make room for a new one (limits.at_max_sessions)");
                return true;
            }
        }
        false
    }

    /// What the gateway offers `tenant` whatever the revision: tools (listChanged), and the
    /// union of what its upstreams offer besides (see `Gateway::offered_capabilities`).
    /// Tasks are declared by each revision's own means.
    pub fn server_capabilities(&self, tenant: &str) -> Value {
        let mut capabilities = json!({ "tools": { "listChanged": true } });
        if let (Value::Object(c), Value::Object(more)) = (&mut capabilities, self.offered_capabilities(tenant)) {
            c.extend(more);
        }
        capabilities
    }

    /// A session serving stateless requests of `identity` with these client capabilities:
    /// one per identity and set of relayed capabilities, shared by all their requests (so
    /// their upstream sessions are too), started on first use and started again when the
    /// Supervisor closed it idle. It counts against the session limits like any other.
    pub async fn pooled_session(
        &self,
        identity: &Identity,
        capabilities: &Value,
        client_info: Option<&Value>,
        endpoint: &Endpoint,
    ) -> Result<SessionHandle, GatewayError> {
        // The common case, a client that can be asked nothing, needs no key built.
        let relays_any =
            ["roots", "sampling", "elicitation"].iter().any(|c| capabilities.get(c).is_some_and(Value::is_object))
                || mcp::declares_ui(capabilities);
        let relayable = if relays_any { mcp::relayable_client_capabilities(capabilities) } else { json!({}) };
        let mut caps = if relays_any { crate::router::capability_key(&relayable) } else { crate::router::Caps::new() };
        // One pool entry per endpoint too: a profile's session serves what the profile serves.
        if let Some(profile) = endpoint.profile_name() {
            caps.push_str("\n@");
            caps.push_str(profile);
        }
        let (tenant, principal) = (&*identity.tenant, &*identity.principal);
        let pooled = self.pool.lock().get(tenant, principal, &caps).and_then(|id| self.session(id, identity).ok());
        if let Some(handle) = pooled {
            return Ok(handle);
        }
        let params = json!({
            "protocolVersion": mcp::LATEST_PROTOCOL_VERSION,
            "capabilities": relayable,
            // clientInfo is optional per request and its shape unchecked there: one without a
            // string name is not passed on (initialize would refuse it).
            "clientInfo": client_info
                .filter(|c| c.get("name").is_some_and(Value::is_string))
                .cloned()
                .unwrap_or_else(|| json!({"name": "stateless", "version": "0"})),
        });
        let catalog = self.catalog_ready(Some(&params)).await;
        {
            let mut pool = self.pool.lock();
            // Another request may have started it meanwhile.
            if let Some(handle) = pool.get(tenant, principal, &caps).and_then(|id| self.session(id, identity).ok()) {
                return Ok(handle);
            }
            pool.retain(|id| self.sessions.contains(id));
        }
        // Started without the pool's lock held (a start may wait for a session to make room).
        let (id, _) = self
            .start_session(identity.clone(), Some(&params), catalog, SessionKind::Stateless, endpoint.clone())
            .await?;
        let mut pool = self.pool.lock();
        let started_meanwhile =
            pool.get(tenant, principal, &caps).filter(|other| self.sessions.contains(other)).cloned();
        if let Some(other) = started_meanwhile {
            // Another request started one meanwhile: it serves, and this one ends.
            drop(pool);
            if let Some(entry) = self.sessions.remove(&id) {
                entry.addr.do_send(Close);
            }
            return self.session(&other, identity);
        }
        pool.insert(tenant, principal, &caps, id.clone());
        drop(pool);
        self.session(&id, identity)
    }

    /// Stateless sessions in the pool now.
    pub fn pooled_sessions(&self) -> usize {
        self.pool.lock().len()
    }

    /// The tool catalog for a client initializing with `params` (one per distinct set of the
    /// client capabilities the gateway relays), after waiting (a bounded time) until every
    /// upstream has been listed in it once, so `initialize` declares what they offer and the
    /// first `tools/list` has them. `None` for params `initialize` will refuse.
    pub async fn catalog_ready(&self, params: Option<&Value>) -> Option<ToolCatalog> {
        let view = InitializeView::from_params(params).ok()?;
        let relayable = mcp::relayable_client_capabilities(&view.capabilities);
        let catalog = self.shared.router.send(crate::router::CatalogFor(relayable)).await.ok()?;
        let ready = self.shared.router.send(crate::router::EnsureCatalog(catalog.caps.clone()));
        // What the gateway declares is read from the base catalog: it is waited for too.
        let base = self.shared.router.send(crate::router::EnsureCatalog(crate::router::Caps::new()));
        let _ = tokio::time::timeout(CATALOG_WAIT, futures_util::future::join(ready, base)).await;
        Some(catalog)
    }

    /// What the upstreams `tenant` sees offer besides tools, as the gateway declares it: the union
    /// of their `resources` (subscribe, listChanged), `prompts`, `completions` and `logging`.
    /// An upstream not listed yet (down, or slow to answer) counts as offering everything, so
    /// nothing it offers is hidden for the session's life; a listing then comes back empty.
    pub(super) fn offered_capabilities(&self, tenant: &str) -> Value {
        let policy = self.shared.tenancy.policy(tenant);
        let catalog = self.shared.catalog.read();
        let mut offered = serde_json::Map::new();
        for naming in catalog.naming().iter().filter(|n| policy.sees(&n.upstream)) {
            let everything = json!({"resources": {"subscribe": true, "listChanged": true}, "prompts": {"listChanged": true}, "completions": {}, "logging": {}});
            let declared = catalog.capabilities(&naming.upstream).unwrap_or(&everything);
            if let Some(resources) = declared.get("resources") {
                let entry = offered.entry("resources").or_insert_with(|| json!({}));
                for flag in ["subscribe", "listChanged"] {
                    if resources.get(flag) == Some(&Value::Bool(true)) {
                        entry[flag] = Value::Bool(true);
                    }
                }
            }
            if let Some(prompts) = declared.get("prompts") {
                let entry = offered.entry("prompts").or_insert_with(|| json!({}));
                if prompts.get("listChanged") == Some(&Value::Bool(true)) {
                    entry["listChanged"] = Value::Bool(true);
                }
            }
            for plain in ["completions", "logging"] {
                if declared.get(plain).is_some() {
                    offered.entry(plain).or_insert_with(|| json!({}));
                }
            }
            // ext-apps "Client<>Server Capability Negotiation": MCP Apps is offered when an
            // upstream offers it (its UI resources and tools pass through), with the MIME
            // types any of them names.
            if let Some(Value::Object(ui)) = declared.get("extensions").and_then(|e| e.get(mcp::UI_EXTENSION)) {
                let entry = offered.entry("extensions").or_insert_with(|| json!({}));
                let mine =
                    entry.as_object_mut().expect("an object").entry(mcp::UI_EXTENSION).or_insert_with(|| json!({}));
                if let Some(Value::Array(types)) = ui.get("mimeTypes") {
                    let known =
                        mine.as_object_mut().expect("an object").entry("mimeTypes").or_insert_with(|| json!([]));
                    let known = known.as_array_mut().expect("an array");
                    for t in types.iter().filter(|t| t.is_string()).take(8) {
                        if !known.contains(t) {
                            known.push(t.clone());
                        }
                    }
                }
            }
        }
        Value::Object(offered)
    }

    /// The session `id` of `identity`; another identity's session is not found, exactly like
    /// one that never existed.
    pub fn session(&self, id: &str, identity: &Identity) -> Result<SessionHandle, GatewayError> {
        let now = self.shared.clock.now_ms();
        let entry = self.sessions.get(id, identity, now).ok_or(GatewayError::SessionNotFound)?;
        self.keep_recorded(id, &entry, now);
        let server = &self.shared.config.server;
        let share = self.shared.tenancy.policy(&entry.identity.tenant).shares.streams;
        Ok(SessionHandle {
            entry,
            metrics: self.shared.metrics.clone(),
            limits: Limits {
                messages: server.stream_buffer,
                bytes: server.stream_buffer_bytes,
                stall: Duration::from_secs(server.stream_stall_secs),
            },
            streams: (self.shared.streams.clone(), share, server.max_streams),
        })
    }
}

/// A session to place in the table: its id, owner, revision and client.
pub(super) struct Placed {
    pub id: String,
    pub identity: Identity,
    pub version: String,
    pub client: ClientIdentity,
    /// The endpoint it was opened at.
    pub endpoint: Endpoint,
}

/// The identity an endpoint gives itself: the gateway's, or for a profile its name (and its
/// title) with the gateway's version.
pub fn server_info_at(endpoint: &Endpoint) -> Value {
    let Some(profile) = &endpoint.profile else { return server_info() };
    let mut info = server_info();
    info["name"] = Value::from(format!("taskgate/{}", profile.name()));
    info["title"] =
        Value::from(profile.config.title.clone().unwrap_or_else(|| format!("taskgate: {}", profile.name())));
    info
}

/// The gateway's name and version, as `initialize` and stateless results carry them.
pub fn server_info() -> Value {
    static INFO: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    INFO.get_or_init(
        || json!({ "name": "taskgate", "title": "taskgate MCP gateway", "version": env!("CARGO_PKG_VERSION") }),
    )
    .clone()
}
