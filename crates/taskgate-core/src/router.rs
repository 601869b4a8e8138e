//! The Router: owns the federated [`Catalog`], keeps it fresh, and knows every upstream's
//! [`Connector`]. One per gateway.
//!
//! It lists each upstream's tools through a catalog session of its own (declaring no client
//! capabilities), at start and whenever an upstream announces `notifications/tools/list_changed`,
//! then tells every client session. Listing happens in spawned futures: the Router's mailbox
//! never waits on an upstream (invariant 2).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use parking_lot::RwLock;
use serde_json::Value;
use taskgate_protocol::mcp::{methods, ToolView};
use taskgate_upstream::{ClientIdentity, Connector, UpstreamError, UpstreamEvent, UpstreamSession};
use tokio::sync::{mpsc, oneshot};

use crate::catalog::Catalog;
use crate::registry::Sessions;
use crate::session::ToolsChanged;
use crate::stream::receiver_stream;

/// How long an upstream whose listing failed is left alone before the next attempt.
const RETRY_AFTER: Duration = Duration::from_secs(5);
/// Upper bounds on what one upstream may list.
const MAX_PAGES: usize = 100;
const MAX_TOOLS: usize = 10_000;

/// The catalog router actor.
pub struct Router {
    connectors: Vec<Connector>,
    catalog: Arc<RwLock<Catalog>>,
    sessions: Arc<Sessions>,
    list_timeout: Duration,
    catalog_sessions: HashMap<String, UpstreamSession>,
    loading: HashSet<String>,
    /// Upstreams that announced a change while being listed: list them again after.
    reload: HashSet<String>,
    failures: HashMap<String, (Instant, UpstreamError)>,
    waiters: Vec<oneshot::Sender<()>>,
    /// The last readiness probe: when, and what it found.
    probed: Option<(Instant, Vec<UpstreamHealth>)>,
    /// A readiness probe is out.
    probing: bool,
}

impl Router {
    pub(crate) fn new(
        connectors: Vec<Connector>,
        catalog: Arc<RwLock<Catalog>>,
        sessions: Arc<Sessions>,
        list_timeout: Duration,
    ) -> Router {
        Router {
            connectors,
            catalog,
            sessions,
            list_timeout,
            catalog_sessions: HashMap::new(),
            loading: HashSet::new(),
            reload: HashSet::new(),
            failures: HashMap::new(),
            waiters: Vec::new(),
            probed: None,
            probing: false,
        }
    }

    fn catalog_session(&mut self, name: &str, ctx: &mut Context<Self>) -> Option<UpstreamSession> {
        if let Some(s) = self.catalog_sessions.get(name) {
            return Some(s.clone());
        }
        let connector = self.connectors.iter().find(|c| c.name() == name)?.clone();
        let (tx, rx) = mpsc::channel(64);
        let upstream = name.to_owned();
        ctx.add_stream(receiver_stream(rx, move |event| (upstream.clone(), event)));
        let session = connector.open(ClientIdentity::gateway(), tx);
        self.catalog_sessions.insert(name.to_owned(), session.clone());
        Some(session)
    }

    fn load(&mut self, name: String, ctx: &mut Context<Self>) {
        if !self.loading.insert(name.clone()) {
            self.reload.insert(name);
            return;
        }
        let Some(session) = self.catalog_session(&name, ctx) else {
            self.loading.remove(&name);
            return;
        };
        let timeout = self.list_timeout;
        let listing = async move {
            match tokio::time::timeout(timeout, list_tools(&session)).await {
                Ok(result) => result,
                Err(_) => Err(UpstreamError::Timeout { upstream: session.upstream().into(), after: timeout }),
            }
        };
        ctx.spawn(listing.into_actor(self).map(move |result, act, ctx| act.loaded(name, result, ctx)));
    }

    fn loaded(&mut self, name: String, result: Result<Listing, UpstreamError>, ctx: &mut Context<Self>) {
        self.loading.remove(&name);
        let changed = match result {
            Ok(Listing { tools, native, capabilities }) => {
                self.failures.remove(&name);
                let mut catalog = self.catalog.write();
                catalog.set_capabilities(&name, capabilities);
                let before = catalog.len();
                let had = catalog.has_tools(&name);
                for collision in catalog.set_tools(&name, tools.clone(), native) {
                    tracing::error!(%collision, "tool name collision");
                }
                tracing::info!(upstream = %name, tools = tools.len(), native_tasks = native, "listed upstream tools");
                had || catalog.len() != before
            }
            Err(error) => {
                tracing::warn!(upstream = %name, %error, "cannot list upstream tools; its tools are left out until it answers");
                self.failures.insert(name.clone(), (Instant::now(), error));
                let mut catalog = self.catalog.write();
                let had = catalog.has_tools(&name);
                catalog.clear_tools(&name);
                had
            }
        };
        if self.reload.remove(&name) {
            self.load(name.clone(), ctx);
        }
        if changed {
            for session in self.sessions.all() {
                // A client cannot drive this path; a session whose queue is full misses one
                // list_changed hint, and its next tools/list is still correct.
                if session.try_send(ToolsChanged).is_err() {
                    tracing::debug!("a session's queue is full; list_changed not delivered");
                }
            }
        }
        if self.loading.is_empty() {
            for waiter in self.waiters.drain(..) {
                let _ = waiter.send(());
            }
        }
    }
}

impl Actor for Router {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.set_mailbox_capacity(1024);
        let names: Vec<String> = self.connectors.iter().map(|c| c.name().to_owned()).collect();
        for name in names {
            self.load(name, ctx);
        }
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        for session in self.catalog_sessions.drain().map(|(_, s)| s) {
            actix::spawn(async move { session.close().await });
        }
    }
}

/// Lists every upstream that is not listed yet (or whose failure is old enough to retry) and
/// resolves when no listing is in progress.
pub(crate) struct EnsureCatalog;

impl Message for EnsureCatalog {
    type Result = ();
}

impl Handler<EnsureCatalog> for Router {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: EnsureCatalog, ctx: &mut Context<Self>) -> Self::Result {
        let missing: Vec<String> = self
            .connectors
            .iter()
            .map(|c| c.name().to_owned())
            .filter(|name| {
                !self.catalog.read().has_tools(name)
                    && self.failures.get(name).is_none_or(|(at, _)| at.elapsed() >= RETRY_AFTER)
            })
            .collect();
        for name in missing {
            if !self.loading.contains(&name) {
                self.load(name, ctx);
            }
        }
        if self.loading.is_empty() {
            return Box::pin(async {});
        }
        let (tx, rx) = oneshot::channel();
        self.waiters.push(tx);
        Box::pin(async move {
            let _ = rx.await;
        })
    }
}

/// An upstream announced that its tools changed.
pub(crate) struct RefreshUpstream(pub String);

impl Message for RefreshUpstream {
    type Result = ();
}

impl Handler<RefreshUpstream> for Router {
    type Result = ();

    fn handle(&mut self, RefreshUpstream(name): RefreshUpstream, ctx: &mut Context<Self>) {
        self.load(name, ctx);
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
                    error: self.failures.get(c.name()).map(|(_, e)| e.to_string()),
                })
                .collect();
            return Box::pin(actix::fut::ready(states));
        }
        self.probing = true;
        let connectors = self.connectors.clone();
        let probes: Vec<_> = connectors
            .iter()
            .map(|c| {
                let session = self.catalog_session(c.name(), ctx);
                let listed = self.catalog.read().has_tools(c.name());
                let failure = self.failures.get(c.name()).map(|(_, e)| e.to_string());
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
        self.failures.get(&name).map(|(_, e)| e.clone())
    }
}

impl StreamHandler<(String, UpstreamEvent)> for Router {
    fn handle(&mut self, (upstream, event): (String, UpstreamEvent), ctx: &mut Context<Self>) {
        match event {
            UpstreamEvent::Notification { method, .. } if method == methods::TOOLS_LIST_CHANGED => {
                self.load(upstream, ctx)
            }
            UpstreamEvent::Request { id, method, .. } => {
                // The catalog session declared no client capabilities: refuse what it cannot answer.
                if let Some(session) = self.catalog_sessions.get(&upstream).cloned() {
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
