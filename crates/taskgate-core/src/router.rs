//! The Router: owns the federated [`Catalog`], keeps it fresh, and knows every upstream's
//! [`Connector`]. One per gateway.
//!
//! It lists each upstream's tools through a catalog session of its own (declaring no client
//! capabilities), at start and whenever an upstream announces `notifications/tools/list_changed`,
//! then tells every client session. Clients that declare capabilities the gateway relays (roots,
//! sampling, elicitation) get a catalog per distinct set, listed through catalog sessions that
//! declare it, because servers may offer some tools only to such clients; at most
//! `federation.max_tool_catalogs`. Listing happens in spawned futures: the Router's mailbox
//! never waits on an upstream (invariant 2).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use parking_lot::RwLock;
use serde_json::Value;
use taskgate_config::FederationConfig;
use taskgate_protocol::mcp::{methods, ToolView};
use taskgate_upstream::{ClientIdentity, Connector, UpstreamError, UpstreamEvent, UpstreamSession};
use tokio::sync::oneshot;

use crate::catalog::Catalog;
use crate::metrics::Metrics;

/// How long an upstream whose listing failed is left alone before the next attempt.
const RETRY_AFTER: Duration = Duration::from_secs(5);
/// Upper bounds on what one upstream may list.
const MAX_PAGES: usize = 100;
const MAX_TOOLS: usize = 10_000;

/// A tool catalog's identity: the client capabilities its listing sessions declare, as
/// canonical JSON; empty for the catalog of a client declaring none (the base catalog).
pub(crate) type Caps = String;

/// Who hears that the tools of a catalog changed: the client sessions, whose own catalog it may
/// be (a port: the session layer implements it).
pub(crate) trait CatalogListeners: Send + Sync {
    /// The tools of the catalog of clients declaring `caps` changed.
    fn tools_changed(&self, caps: &Caps);
}
/// One upstream's listing in one catalog.
type Key = (Caps, String);

/// The key of the catalog for a client's relayable capabilities (roots, sampling, elicitation):
/// canonical JSON, so that the same set declared in another order is the same catalog.
pub(crate) fn capability_key(relayable: &Value) -> Caps {
    fn canonical(value: &Value) -> Value {
        match value {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                Value::Object(keys.into_iter().map(|k| (k.clone(), canonical(&map[k]))).collect())
            }
            Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
            other => other.clone(),
        }
    }
    match relayable {
        Value::Object(map) if !map.is_empty() => canonical(relayable).to_string(),
        _ => Caps::new(),
    }
}

/// A session's tool catalog: which one, and the catalog itself.
#[derive(Clone)]
pub struct ToolCatalog {
    pub(crate) caps: Caps,
    pub(crate) catalog: Arc<RwLock<Catalog>>,
}

/// The catalog router actor.
pub struct Router {
    connectors: Vec<Connector>,
    /// The catalog of a client declaring no capabilities: also what naming, the upstreams'
    /// capabilities and health are read from.
    catalog: Arc<RwLock<Catalog>>,
    /// The catalogs of clients declaring relayable capabilities, by [`capability_key`].
    variants: HashMap<Caps, Arc<RwLock<Catalog>>>,
    /// Catalogs kept at most, the base one included (`federation.max_tool_catalogs`).
    max_catalogs: usize,
    metrics: Arc<Metrics>,
    /// Told when a catalog's tools change (the client sessions).
    listeners: Arc<dyn CatalogListeners>,
    list_timeout: Duration,
    catalog_sessions: HashMap<Key, UpstreamSession>,
    loading: HashSet<Key>,
    /// Listings whose upstream announced a change while being listed: list them again after.
    reload: HashSet<Key>,
    failures: HashMap<Key, (Instant, UpstreamError)>,
    waiters: Vec<(Caps, oneshot::Sender<()>)>,
    /// The last readiness probe: when, and what it found.
    probed: Option<(Instant, Vec<UpstreamHealth>)>,
    /// A readiness probe is out.
    probing: bool,
}

fn base(name: &str) -> Key {
    (Caps::new(), name.to_owned())
}

impl Router {
    pub(crate) fn new(
        connectors: Vec<Connector>,
        catalog: Arc<RwLock<Catalog>>,
        listeners: Arc<dyn CatalogListeners>,
        federation: &FederationConfig,
        metrics: Arc<Metrics>,
    ) -> Router {
        metrics.tool_catalogs.set(1);
        Router {
            connectors,
            catalog,
            variants: HashMap::new(),
            max_catalogs: federation.max_tool_catalogs.max(1),
            metrics,
            listeners,
            list_timeout: Duration::from_secs(federation.list_timeout_secs),
            catalog_sessions: HashMap::new(),
            loading: HashSet::new(),
            reload: HashSet::new(),
            failures: HashMap::new(),
            waiters: Vec::new(),
            probed: None,
            probing: false,
        }
    }

    fn catalog_of(&self, caps: &str) -> Option<Arc<RwLock<Catalog>>> {
        if caps.is_empty() {
            Some(self.catalog.clone())
        } else {
            self.variants.get(caps).cloned()
        }
    }

    fn catalog_session(&mut self, key: &Key, ctx: &mut Context<Self>) -> Option<UpstreamSession> {
        if let Some(s) = self.catalog_sessions.get(key) {
            return Some(s.clone());
        }
        let connector = self.connectors.iter().find(|c| c.name() == key.1)?.clone();
        let (tx, rx) = taskgate_upstream::event_channel(64);
        let tag = key.clone();
        ctx.add_stream(crate::stream::event_stream(rx, move |event: Box<UpstreamEvent>| (tag.clone(), *event)));
        let mut identity = ClientIdentity::gateway();
        if !key.0.is_empty() {
            identity.capabilities = serde_json::from_str(&key.0).unwrap_or_default();
        }
        let session = connector.open(identity, tx);
        // A catalog session learns of list changes on its GET stream.
        session.keep_listening();
        self.catalog_sessions.insert(key.clone(), session.clone());
        Some(session)
    }

    fn load(&mut self, key: Key, ctx: &mut Context<Self>) {
        if !self.loading.insert(key.clone()) {
            self.reload.insert(key);
            return;
        }
        let Some(session) = self.catalog_session(&key, ctx) else {
            self.loading.remove(&key);
            return;
        };
        let timeout = self.list_timeout;
        let listing = async move {
            match tokio::time::timeout(timeout, list_tools(&session)).await {
                Ok(result) => result,
                Err(_) => Err(UpstreamError::Timeout { upstream: session.upstream().into(), after: timeout }),
            }
        };
        ctx.spawn(listing.into_actor(self).map(move |result, act, ctx| act.loaded(key, result, ctx)));
    }

    fn loaded(&mut self, key: Key, result: Result<Listing, UpstreamError>, ctx: &mut Context<Self>) {
        self.loading.remove(&key);
        let (caps, name) = (&key.0, &key.1);
        let Some(catalog) = self.catalog_of(caps) else {
            // Its catalog was dropped while it was being listed.
            self.reload.remove(&key);
            return;
        };
        let changed = match result {
            Ok(Listing { mut tools, native, capabilities }) => {
                self.failures.remove(&key);
                let mut catalog = catalog.write();
                if let Some(naming) = catalog.naming().iter().find(|n| n.upstream == *name).cloned() {
                    tools.iter_mut().for_each(|tool| crate::offering_names::expose_tool_ui(&naming, &mut tool.raw));
                }
                catalog.set_capabilities(name, capabilities);
                let before = catalog.len();
                let had = catalog.has_tools(name);
                for collision in catalog.set_tools(name, tools.clone(), native) {
                    // Reported once, by the base catalog (the variants repeat its names).
                    if caps.is_empty() {
                        tracing::error!(%collision, "tool name collision");
                    }
                }
                tracing::info!(upstream = %name, client_capabilities = %caps, tools = tools.len(), native_tasks = native, "listed upstream tools");
                had || catalog.len() != before
            }
            Err(error) => {
                tracing::warn!(upstream = %name, client_capabilities = %caps, %error, "cannot list upstream tools; its tools are left out until it answers");
                self.failures.insert(key.clone(), (Instant::now(), error));
                let mut catalog = catalog.write();
                let had = catalog.has_tools(name);
                catalog.clear_tools(name);
                had
            }
        };
        if self.reload.remove(&key) {
            self.load(key.clone(), ctx);
        }
        if changed {
            self.listeners.tools_changed(caps);
        }
        let loading = &self.loading;
        let (ready, waiting): (Vec<_>, Vec<_>) =
            self.waiters.drain(..).partition(|(caps, _)| !loading.iter().any(|(c, _)| c == caps));
        self.waiters = waiting;
        for (_, waiter) in ready {
            let _ = waiter.send(());
        }
    }

    /// Drops one catalog no session holds any more (only the Router has it), with its catalog
    /// sessions, so that a new set of capabilities can have its place.
    fn evict_unused(&mut self) {
        let Some(caps) = self.variants.iter().find(|(_, c)| Arc::strong_count(c) == 1).map(|(k, _)| k.clone()) else {
            return;
        };
        self.variants.remove(&caps);
        self.metrics.tool_catalogs.set(1 + self.variants.len() as i64);
        let ours = |key: &Key| key.0 == caps;
        let sessions: Vec<Key> = self.catalog_sessions.keys().filter(|k| ours(k)).cloned().collect();
        for key in sessions {
            if let Some(session) = self.catalog_sessions.remove(&key) {
                actix::spawn(async move { session.close().await });
            }
        }
        self.loading.retain(|k| !ours(k));
        self.reload.retain(|k| !ours(k));
        self.failures.retain(|k, _| !ours(k));
        // Nobody holds the catalog, so nobody waits on it; a stale waiter is answered at once.
        for (_, waiter) in self.waiters.extract_if(.., |(c, _)| *c == caps) {
            let _ = waiter.send(());
        }
        tracing::info!(client_capabilities = %caps, "a tool catalog no session uses was dropped to make room");
    }

    /// Lists, in the catalog `caps`, every upstream not listed yet (or whose failure is old
    /// enough to retry); answers whether a listing of that catalog is in progress.
    fn ensure(&mut self, caps: &str, ctx: &mut Context<Self>) -> bool {
        let Some(catalog) = self.catalog_of(caps) else { return false };
        let missing: Vec<Key> = self
            .connectors
            .iter()
            .map(|c| (caps.to_owned(), c.name().to_owned()))
            .filter(|key| {
                !catalog.read().has_tools(&key.1)
                    && self.failures.get(key).is_none_or(|(at, _)| at.elapsed() >= RETRY_AFTER)
            })
            .collect();
        for key in missing {
            if !self.loading.contains(&key) {
                self.load(key, ctx);
            }
        }
        self.loading.iter().any(|(c, _)| c == caps)
    }
}

impl Actor for Router {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.set_mailbox_capacity(1024);
        let names: Vec<String> = self.connectors.iter().map(|c| c.name().to_owned()).collect();
        for name in names {
            self.load(base(&name), ctx);
        }
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        for session in self.catalog_sessions.drain().map(|(_, s)| s) {
            actix::spawn(async move { session.close().await });
        }
    }
}

/// Lists, in the catalog given, every upstream that is not listed yet (or whose failure is old
/// enough to retry) and resolves when no listing of that catalog is in progress.
pub(crate) struct EnsureCatalog(pub Caps);

impl Message for EnsureCatalog {
    type Result = ();
}

impl Handler<EnsureCatalog> for Router {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, EnsureCatalog(caps): EnsureCatalog, ctx: &mut Context<Self>) -> Self::Result {
        if !self.ensure(&caps, ctx) {
            return Box::pin(async {});
        }
        let (tx, rx) = oneshot::channel();
        self.waiters.push((caps, tx));
        Box::pin(async move {
            let _ = rx.await;
        })
    }
}

/// The tool catalog for a client that declared these relayable capabilities (server/tools: a
/// server may offer tools only to clients that declare what they need). A new set gets a catalog
/// of its own, listed through catalog sessions that declare it, up to
/// `federation.max_tool_catalogs`; beyond, the base catalog. Listing starts; it is not awaited.
pub(crate) struct CatalogFor(pub Value);

impl Message for CatalogFor {
    type Result = ToolCatalog;
}

impl Handler<CatalogFor> for Router {
    type Result = MessageResult<CatalogFor>;

    fn handle(&mut self, CatalogFor(relayable): CatalogFor, ctx: &mut Context<Self>) -> Self::Result {
        let mut caps = capability_key(&relayable);
        if !caps.is_empty() && !self.variants.contains_key(&caps) {
            if self.variants.len() + 1 >= self.max_catalogs {
                self.evict_unused();
            }
            if self.variants.len() + 1 >= self.max_catalogs {
                self.metrics.tool_catalog_fallbacks.with_label_values::<&str>(&[]).inc();
                tracing::warn!(client_capabilities = %caps, max = self.max_catalogs, "federation.max_tool_catalogs reached: this client sees the tools offered to a client declaring no capabilities");
                caps = Caps::new();
            } else {
                let base = self.catalog.read();
                let variant = Catalog::new(base.separator(), base.naming().to_vec());
                drop(base);
                self.variants.insert(caps.clone(), Arc::new(RwLock::new(variant)));
                self.metrics.tool_catalogs.set(1 + self.variants.len() as i64);
            }
        }
        self.ensure(&caps, ctx);
        let catalog = self.catalog_of(&caps).expect("the catalog exists");
        MessageResult(ToolCatalog { caps, catalog })
    }
}

/// An upstream announced that its tools changed: every catalog lists it again.
pub(crate) struct RefreshUpstream(pub String);

impl Message for RefreshUpstream {
    type Result = ();
}

impl Handler<RefreshUpstream> for Router {
    type Result = ();

    fn handle(&mut self, RefreshUpstream(name): RefreshUpstream, ctx: &mut Context<Self>) {
        let catalogs: Vec<Caps> = std::iter::once(Caps::new()).chain(self.variants.keys().cloned()).collect();
        for caps in catalogs {
            self.load((caps, name.clone()), ctx);
        }
    }
}

/// One upstream's health, for `/readyz`.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamHealth {
    /// The upstream's name.
    pub name: String,
    /// Whether readiness requires it.
    pub required: bool,
    /// Whether it answers now (a `ping`) and its tools are listed.
    pub reachable: bool,
    /// The last failure, if it is not reachable.
    pub error: Option<String>,
}

/// Every upstream's health.
pub(crate) struct UpstreamStates;

impl Message for UpstreamStates {
    type Result = Vec<UpstreamHealth>;
}

/// How long an answer to [`UpstreamStates`] is reused (scrapes and probes come often).
const PROBE_FRESH: Duration = Duration::from_secs(1);
/// How long an upstream may take to answer the readiness `ping`.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

impl Handler<UpstreamStates> for Router {
    type Result = ResponseActFuture<Self, Vec<UpstreamHealth>>;

    /// Each upstream is asked now (`ping` in its catalog session, bounded in time, the answer
    /// reused for a second): an upstream that died since its last listing is unreachable at
    /// once, not when a client next calls it.
    fn handle(&mut self, _: UpstreamStates, ctx: &mut Context<Self>) -> Self::Result {
        if let Some((at, states)) = &self.probed {
            // Fresh, or a probe is already out: a flood of /readyz never multiplies the pings
            // (a dead upstream's probe takes up to PROBE_TIMEOUT).
            if at.elapsed() < PROBE_FRESH || self.probing {
                return Box::pin(actix::fut::ready(states.clone()));
            }
        }
        if self.probing {
            // The first probe is out and none has finished: what the listings say.
            let catalog = self.catalog.read();
            let states = self
                .connectors
                .iter()
                .map(|c| UpstreamHealth {
                    name: c.name().to_owned(),
                    required: c.config().required,
                    reachable: catalog.has_tools(c.name()),
                    error: self.failures.get(&base(c.name())).map(|(_, e)| e.to_string()),
                })
                .collect();
            return Box::pin(actix::fut::ready(states));
        }
        self.probing = true;
        let connectors = self.connectors.clone();
        let probes: Vec<_> = connectors
            .iter()
            .map(|c| {
                let session = self.catalog_session(&base(c.name()), ctx);
                let listed = self.catalog.read().has_tools(c.name());
                let failure = self.failures.get(&base(c.name())).map(|(_, e)| e.to_string());
                let (name, required) = (c.name().to_owned(), c.config().required);
                async move {
                    let answered = match session {
                        Some(session) => {
                            match tokio::time::timeout(PROBE_TIMEOUT, session.request(methods::PING, None)).await {
                                Ok(Ok(_)) => Ok(()),
                                Ok(Err(e)) => Err(e.to_string()),
                                Err(_) => Err(format!(
                                    "upstream '{name}' did not answer ping within {}s",
                                    PROBE_TIMEOUT.as_secs()
                                )),
                            }
                        }
                        None => Err("no connector".to_owned()),
                    };
                    let reachable = answered.is_ok() && listed;
                    let error = answered.err().or(if listed { None } else { failure });
                    UpstreamHealth { name, required, reachable, error }
                }
            })
            .collect();
        Box::pin(futures_util::future::join_all(probes).into_actor(self).map(|states, act, _| {
            act.probing = false;
            act.probed = Some((Instant::now(), states.clone()));
            states
        }))
    }
}

/// Why an upstream's tools are missing from the catalog, if they are.
pub(crate) struct UpstreamFailure(pub String);

impl Message for UpstreamFailure {
    type Result = Option<UpstreamError>;
}

impl Handler<UpstreamFailure> for Router {
    type Result = Option<UpstreamError>;

    fn handle(&mut self, UpstreamFailure(name): UpstreamFailure, _: &mut Context<Self>) -> Option<UpstreamError> {
        self.failures.get(&base(&name)).map(|(_, e)| e.clone())
    }
}

impl StreamHandler<(Key, UpstreamEvent)> for Router {
    fn handle(&mut self, (key, event): (Key, UpstreamEvent), ctx: &mut Context<Self>) {
        let upstream = &key.1;
        match event {
            UpstreamEvent::Notification { method, .. } if method == methods::TOOLS_LIST_CHANGED => self.load(key, ctx),
            UpstreamEvent::Request { id, method, .. } => {
                // A catalog session has no client to ask (a variant's declares capabilities only
                // so that the upstream lists what it offers with them): refuse.
                if let Some(session) = self.catalog_sessions.get(&key).cloned() {
                    let reply = taskgate_protocol::Message::error(
                        Some(id),
                        taskgate_protocol::ErrorObject::method_not_found(&method),
                    );
                    actix::spawn(async move {
                        let _ = session.respond(reply).await;
                    });
                }
            }
            UpstreamEvent::Notification { method, .. } => {
                tracing::debug!(%upstream, %method, "catalog session notification ignored")
            }
        }
    }

    fn finished(&mut self, _: &mut Context<Self>) {
        // A catalog session's event stream ends when the session is dropped; nothing to do.
    }
}

/// What listing one upstream found: its tools, whether it runs task-augmented `tools/call`
/// natively, and the capabilities it declared.
struct Listing {
    tools: Vec<ToolView>,
    native: bool,
    capabilities: Value,
}

/// Follows `nextCursor` through every page of an upstream's `tools/list`, within bounds; also
/// tells whether the upstream supports task-augmented `tools/call` natively.
async fn list_tools(session: &UpstreamSession) -> Result<Listing, UpstreamError> {
    let capabilities = session.server_capabilities().await?;
    let native = taskgate_protocol::mcp::declares_task_tool_calls(&capabilities);
    let mut tools = Vec::new();
    if capabilities.get("tools").is_none() {
        // A server of resources or prompts only: nothing to list, nothing failed.
        return Ok(Listing { tools, native, capabilities });
    }
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let params = cursor.as_ref().map(|c| serde_json::json!({ "cursor": c }));
        let result = session.request(methods::TOOLS_LIST, params).await?;
        let Some(Value::Array(page)) = result.get("tools").cloned() else {
            return Err(UpstreamError::Protocol {
                upstream: session.upstream().into(),
                reason: "tools/list result has no \"tools\" array".into(),
            });
        };
        for tool in page {
            match ToolView::from_value(tool) {
                Some(view) => tools.push(view),
                None => tracing::warn!(
                    upstream = session.upstream(),
                    "upstream listed a tool without a string name; skipped"
                ),
            }
        }
        if tools.len() > MAX_TOOLS {
            return Err(UpstreamError::Protocol {
                upstream: session.upstream().into(),
                reason: format!("it lists more than {MAX_TOOLS} tools"),
            });
        }
        match result.get("nextCursor").and_then(Value::as_str) {
            Some(next) if cursor.as_deref() != Some(next) => cursor = Some(next.to_owned()),
            _ => return Ok(Listing { tools, native, capabilities }),
        }
    }
    Err(UpstreamError::Protocol {
        upstream: session.upstream().into(),
        reason: format!("tools/list did not end within {MAX_PAGES} pages"),
    })
}

#[cfg(test)]
mod tests {
    use super::capability_key;
    use serde_json::json;

    #[test]
    fn the_same_capabilities_in_any_order_are_one_catalog_and_none_is_the_base() {
        assert_eq!(capability_key(&json!({})), "");
        assert_eq!(capability_key(&json!(null)), "");
        let a = capability_key(&json!({"roots": {"listChanged": true}, "elicitation": {"form": {}, "url": {}}}));
        let b = capability_key(&json!({"elicitation": {"url": {}, "form": {}}, "roots": {"listChanged": true}}));
        assert_eq!(a, b);
        assert_eq!(a, r#"{"elicitation":{"form":{},"url":{}},"roots":{"listChanged":true}}"#);
        assert_ne!(a, capability_key(&json!({"roots": {}})));
    }
}
