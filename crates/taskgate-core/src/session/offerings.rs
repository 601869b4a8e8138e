//! What upstreams offer besides tools: `resources/*`, `prompts/*`, `completion/complete` and
//! `logging/setLevel`. Listings are federated one upstream page at a time; every other method
//! goes to the one upstream its name or URI belongs to (see [`crate::offering_names`]), through the
//! same relay as `tools/call`, so what the upstream sends before its result reaches the
//! client on the request's stream.

use actix::prelude::*;
use serde_json::{json, Value};
use taskgate_protocol::mcp::methods;
use taskgate_protocol::{mcp, ErrorObject, RequestId};
use taskgate_upstream::{UpstreamError, UpstreamSession};

use super::SessionActor;
use crate::catalog::Naming;
use crate::forwarded_call::{relay_call, ForwardedCall, ProgressEnds, ResultAs};
use crate::offering_names::{self as names, CursorRef, ListCursor};
use crate::progress::Abandon;
use crate::router::EnsureCatalog;
use crate::GatewayError;

/// Upstream listing requests made for one page of a federated listing, at most.
const MAX_FETCHES_PER_PAGE: usize = 64;

/// RFC 5424 severities, least severe first (server/utilities/logging "Log Levels").
const LEVELS: [&str; 8] = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"];

/// A federated listing.
#[derive(Clone, Copy, Debug)]
enum Listing {
    Resources,
    Templates,
    Prompts,
}

impl Listing {
    fn method(self) -> &'static str {
        match self {
            Listing::Resources => methods::RESOURCES_LIST,
            Listing::Templates => methods::RESOURCES_TEMPLATES_LIST,
            Listing::Prompts => methods::PROMPTS_LIST,
        }
    }

    fn capability(self) -> &'static str {
        match self {
            Listing::Resources | Listing::Templates => "resources",
            Listing::Prompts => "prompts",
        }
    }

    /// The result's array.
    fn key(self) -> &'static str {
        match self {
            Listing::Resources => "resources",
            Listing::Templates => "resourceTemplates",
            Listing::Prompts => "prompts",
        }
    }

    /// The kind its cursors are bound to.
    fn kind(self) -> &'static str {
        match self {
            Listing::Resources => "resources",
            Listing::Templates => "templates",
            Listing::Prompts => "prompts",
        }
    }

    /// Gives an entry its client-visible URI or name; false when it has none (malformed).
    fn expose(self, naming: &Naming, separator: &str, item: &mut Value) -> bool {
        let (field, uri) = match self {
            Listing::Resources => ("uri", true),
            Listing::Templates => ("uriTemplate", true),
            Listing::Prompts => ("name", false),
        };
        match item.get_mut(field) {
            Some(Value::String(v)) => {
                *v = if uri { names::expose_uri(naming, v) } else { names::expose_name(naming, separator, v) };
                true
            }
            _ => false,
        }
    }
}

/// Errors that mean "not this upstream's": the next candidate is tried.
fn not_found(error: &UpstreamError) -> bool {
    matches!(error, UpstreamError::Rpc { error, .. } if matches!(error.code, -32002 | -32602 | -32601))
}

/// One attempt per route: the request's params with the name or URI at `pointer` (which
/// exists: it was read from there) replaced by the one the upstream knows.
pub(super) fn retarget(params: Option<&Value>, routes: Vec<(String, String)>, pointer: &str) -> Vec<(String, Value)> {
    routes
        .into_iter()
        .map(|(upstream, original)| {
            let mut p = params.cloned().unwrap_or_else(|| json!({}));
            if let Some(slot) = p.pointer_mut(pointer) {
                *slot = Value::from(original);
            }
            (upstream, p)
        })
        .collect()
}

impl SessionActor {
    /// The upstreams this session's tenant sees, in configuration order, that declared
    /// `capability` (or whose capabilities are not known yet: they are asked all the same).
    fn offering_upstreams(&self, capability: &str) -> Vec<Naming> {
        let policy = self.shared.tenancy.policy(&self.identity.tenant);
        let catalog = self.shared.catalog.read();
        catalog
            .naming()
            .iter()
            .filter(|n| policy.sees(&n.upstream))
            .filter(|n| catalog.capabilities(&n.upstream).is_some_and(|c| c.get(capability).is_some()))
            .cloned()
            .collect()
    }

    pub(super) fn naming_of(&self, upstream: &str) -> Naming {
        let catalog = self.shared.catalog.read();
        catalog
            .naming()
            .iter()
            .find(|n| n.upstream == upstream)
            .cloned()
            .unwrap_or(Naming { upstream: upstream.to_owned(), prefix: false })
    }

    /// `resources/list`, `resources/templates/list` or `prompts/list` (`method`; the dispatch
    /// sends only these three here).
    pub(super) fn list_offered(&mut self, id: RequestId, method: &str, params: Option<Value>, ctx: &mut Context<Self>) {
        let listing = match method {
            methods::RESOURCES_LIST => Listing::Resources,
            methods::RESOURCES_TEMPLATES_LIST => Listing::Templates,
            _ => Listing::Prompts,
        };
        self.list_offerings(id, listing, params, ctx);
    }

    /// A federated listing: pages filled from the upstreams in configuration order
    /// (server/utilities/pagination: the cursor is opaque).
    fn list_offerings(&mut self, id: RequestId, listing: Listing, params: Option<Value>, ctx: &mut Context<Self>) {
        let cursor = match mcp::cursor(params.as_ref()) {
            Ok(None) => None,
            Ok(Some(c)) => match ListCursor::decode(listing.kind(), c) {
                Some(CursorRef::At(c)) => Some(c),
                Some(CursorRef::Stashed(n)) => match self.stash.get(n) {
                    Some(c) => Some(c.clone()),
                    None => {
                        let why = "Invalid cursor: it has expired (this session keeps its most recent long cursors only); list again from the start";
                        return self.finish(id, Err(GatewayError::InvalidParams(why.into())));
                    }
                },
                None => {
                    let why =
                        format!("Invalid cursor: {} is not a cursor this gateway issued", crate::logs::Untrusted(c));
                    return self.finish(id, Err(GatewayError::InvalidParams(why)));
                }
            },
            Err(e) => return self.finish(id, Err(GatewayError::InvalidParams(e))),
        };
        let router = self.shared.router.clone();
        let ensure = async move {
            let _ = router.send(EnsureCatalog(String::new())).await;
        };
        ctx.spawn(ensure.into_actor(self).map(move |(), act, ctx| act.list_pages(id, listing, cursor, ctx)));
    }

    fn list_pages(&mut self, id: RequestId, listing: Listing, cursor: Option<ListCursor>, ctx: &mut Context<Self>) {
        if !self.requests.contains(&id) {
            return;
        }
        let upstreams = self.offering_upstreams(listing.capability());
        let (start, mut upstream_cursor, mut skip) = match cursor {
            None => (0, None, 0),
            Some(c) => match upstreams.iter().position(|n| n.upstream == c.upstream) {
                Some(i) => (i, c.cursor, c.skip),
                // The upstream went away (or out of sight) since: the listing ends.
                None => return self.finish(id, Ok(json!({ listing.key(): [] }))),
            },
        };
        let separator = self.shared.catalog.read().separator().to_owned();
        let page_size = self.shared.config.federation.page_size;
        let list_timeout = std::time::Duration::from_secs(self.shared.config.federation.list_timeout_secs);
        let sessions: Vec<(Naming, UpstreamSession)> = upstreams[start..]
            .iter()
            .filter_map(|n| self.upstream_session(&n.upstream, ctx).map(|s| (n.clone(), s)))
            .collect();
        // A page fills up to `federation.page_size` from every upstream in turn (following each
        // one's own pages), so a client that never follows `nextCursor` still sees the first
        // page of everything; it ends mid-page of an upstream with a cursor that skips what it
        // gave. An upstream paging without end is asked at most `MAX_FETCHES_PER_PAGE` times.
        let work = async move {
            let mut items: Vec<Value> = Vec::new();
            let (mut i, mut fetches) = (0, 0);
            while let Some((naming, session)) = sessions.get(i) {
                if fetches == MAX_FETCHES_PER_PAGE {
                    let at = ListCursor { upstream: naming.upstream.clone(), cursor: upstream_cursor, skip };
                    return Ok((json!({ listing.key(): items }), Some(at)));
                }
                fetches += 1;
                let params = upstream_cursor.clone().map(|c| json!({ "cursor": c }));
                // Each upstream within `federation.list_timeout_secs`: one that hangs is left
                // out of the page, never holds it.
                let asked = tokio::time::timeout(list_timeout, session.request(listing.method(), params)).await;
                let asked = asked.unwrap_or_else(|_| {
                    Err(taskgate_upstream::UpstreamError::Unavailable {
                        upstream: naming.upstream.clone(),
                        reason: format!(
                            "no listing within {} s (federation.list_timeout_secs)",
                            list_timeout.as_secs()
                        ),
                    })
                });
                let result = match asked {
                    Ok(result) => result,
                    Err(error) => {
                        // Like a tool listing: an upstream that does not answer is left out.
                        tracing::warn!(upstream = %naming.upstream, %error, method = listing.method(), "upstream listing failed; left out of this page");
                        (i, upstream_cursor, skip) = (i + 1, None, 0);
                        continue;
                    }
                };
                let Some(Value::Array(listed)) = result.get(listing.key()).cloned() else {
                    tracing::warn!(upstream = %naming.upstream, method = listing.method(), "upstream listing has no array; left out");
                    (i, upstream_cursor, skip) = (i + 1, None, 0);
                    continue;
                };
                // Only well-formed entries (an object naming its URI, template or name) pass.
                let listed_count = listed.len();
                let exposed: Vec<Value> = listed
                    .into_iter()
                    .filter_map(|mut item| listing.expose(naming, &separator, &mut item).then_some(item))
                    .collect();
                if exposed.len() < listed_count {
                    tracing::warn!(upstream = %naming.upstream, method = listing.method(), dropped = listed_count - exposed.len(), "upstream listed malformed entries; left out");
                }
                let fresh = exposed.len().saturating_sub(skip);
                let room = page_size - items.len();
                if fresh > room {
                    // Full mid-page: the next page starts with the rest of this one.
                    items.extend(exposed.into_iter().skip(skip).take(room));
                    let at =
                        ListCursor { upstream: naming.upstream.clone(), cursor: upstream_cursor, skip: skip + room };
                    return Ok((json!({ listing.key(): items }), Some(at)));
                }
                items.extend(exposed.into_iter().skip(skip));
                skip = 0;
                match result.get("nextCursor").and_then(Value::as_str) {
                    // A cursor that goes nowhere (the one sent, or empty) ends its listing.
                    Some(c) if !c.is_empty() && upstream_cursor.as_deref() != Some(c) => {
                        upstream_cursor = Some(c.to_owned())
                    }
                    _ => (i, upstream_cursor) = (i + 1, None),
                }
                if items.len() == page_size {
                    let next = sessions.get(i).map(|(n, _)| ListCursor {
                        upstream: n.upstream.clone(),
                        cursor: upstream_cursor.take(),
                        skip: 0,
                    });
                    return Ok((json!({ listing.key(): items }), next));
                }
            }
            Ok((json!({ listing.key(): items }), None))
        };
        let work = self.for_request(&id, work);
        ctx.spawn(work.into_actor(self).map(move |page: Result<(Value, Option<ListCursor>), GatewayError>, act, _| {
            let page = page.map(|(mut page, next)| {
                if let Some(next) = next {
                    page["nextCursor"] = Value::from(act.cursor_text(listing.kind(), next));
                }
                page
            });
            act.finish(id, page)
        }));
    }

    /// The cursor a client gets for `next`: the position itself, or, when the upstream's own
    /// cursor would make it longer than a client may send (`mcp::MAX_ID_BYTES`), a number
    /// standing for it that the session keeps (bounded by `Stash::MAX`).
    fn cursor_text(&mut self, kind: &str, next: ListCursor) -> String {
        let inline = next.encode(kind);
        if inline.len() + 2 <= mcp::MAX_ID_BYTES {
            return inline;
        }
        ListCursor::encode_stashed(kind, self.stash.keep(next))
    }

    /// `resources/read`, `resources/subscribe`, `resources/unsubscribe`: to the upstream the URI
    /// belongs to.
    pub(super) fn resource_request(
        &mut self,
        id: RequestId,
        method: &'static str,
        params: Option<Value>,
        ctx: &mut Context<Self>,
    ) {
        let uri = match mcp::required_string(params.as_ref(), method, "uri") {
            Ok(uri) => uri.to_owned(),
            Err(why) => return self.finish(id, Err(GatewayError::InvalidParams(why))),
        };
        // Routed before the candidates are filtered: the catalog is read once at a time (a second
        // read while a writer waits would deadlock).
        let routes = names::route_uri(self.shared.catalog.read().naming(), &uri);
        let candidates = self.candidates("resources", routes);
        let attempts = retarget(params.as_ref(), candidates, "/uri");
        if method == methods::RESOURCES_SUBSCRIBE {
            // Subscriptions are upstream-session state: this client's are its own, and kept.
            self.go_private(ctx);
            self.upstreams.subscribe();
            if !attempts.is_empty() {
                self.subscribed_here(&uri, ctx);
            }
        } else if method == methods::RESOURCES_UNSUBSCRIBE {
            self.unsubscribed_here(&uri, ctx);
        }
        if attempts.is_empty() {
            // server/resources "Error Handling": -32002 for a resource that is not found.
            let error =
                ErrorObject { code: -32002, message: "Resource not found".into(), data: Some(json!({ "uri": uri })) };
            return self.finish(id, Err(GatewayError::Rpc(Box::new(error))));
        }
        self.forward_to(id, method, attempts, 0, None, ctx);
    }

    /// `prompts/get`: to the upstream the name belongs to.
    pub(super) fn get_prompt(&mut self, id: RequestId, params: Option<Value>, ctx: &mut Context<Self>) {
        let name = match mcp::required_string(params.as_ref(), methods::PROMPTS_GET, "name") {
            Ok(name) => name.to_owned(),
            Err(why) => return self.finish(id, Err(GatewayError::InvalidParams(why))),
        };
        let routes = {
            let catalog = self.shared.catalog.read();
            names::route_name(catalog.naming(), catalog.separator(), &name)
        };
        let attempts = retarget(params.as_ref(), self.candidates("prompts", routes), "/name");
        if attempts.is_empty() {
            // server/prompts "Error Handling": an invalid prompt name is -32602.
            return self.finish(
                id,
                Err(GatewayError::InvalidParams(format!("Unknown prompt: {}", crate::logs::Untrusted(&name)))),
            );
        }
        self.forward_to(id, methods::PROMPTS_GET, attempts, 0, None, ctx);
    }

    /// `completion/complete`: to the upstream of the prompt or resource template it names.
    pub(super) fn complete(&mut self, id: RequestId, params: Option<Value>, ctx: &mut Context<Self>) {
        let reference = match mcp::CompletionRef::from_params(params.as_ref()) {
            Ok(reference) => reference,
            Err(why) => return self.finish(id, Err(GatewayError::InvalidParams(why))),
        };
        let field = reference.field();
        let routes = {
            let catalog = self.shared.catalog.read();
            match reference {
                mcp::CompletionRef::Prompt(name) => names::route_name(catalog.naming(), catalog.separator(), name),
                mcp::CompletionRef::Resource(uri) => names::route_uri(catalog.naming(), uri),
            }
        };
        let attempts = retarget(params.as_ref(), self.candidates("completions", routes), &format!("/ref/{field}"));
        if attempts.is_empty() {
            let why = format!("completion/complete: no upstream offers completion for that {field}");
            return self.finish(id, Err(GatewayError::InvalidParams(why)));
        }
        self.forward_to(id, methods::COMPLETION_COMPLETE, attempts, 0, None, ctx);
    }

    /// The routes to upstreams this session's tenant sees: first those that offer
    /// `capability` (or have not been listed yet), then the others, since a server's declared
    /// capabilities can be incomplete (a 2026-07-28 `server/discover` that leaves out
    /// `completions` a server serves all the same). An upstream that does not serve the
    /// method answers -32601 and the next is asked ([`not_found`]).
    pub(super) fn candidates(&self, capability: &str, routes: Vec<(String, String)>) -> Vec<(String, String)> {
        let policy = self.shared.tenancy.policy(&self.identity.tenant);
        let catalog = self.shared.catalog.read();
        let (mut declared, undeclared): (Vec<_>, Vec<_>) = routes
            .into_iter()
            .filter(|(u, _)| policy.sees(u) && self.shared.connectors.contains_key(u))
            .partition(|(u, _)| catalog.capabilities(u).is_none_or(|c| c.get(capability).is_some()));
        declared.extend(undeclared);
        declared
    }

    /// Forwards attempt `index` of `attempts`; an answer meaning "not mine" moves on to the
    /// next, and when none knows it the first such answer is the client's.
    fn forward_to(
        &mut self,
        id: RequestId,
        method: &'static str,
        attempts: Vec<(String, Value)>,
        index: usize,
        first_error: Option<UpstreamError>,
        ctx: &mut Context<Self>,
    ) {
        let Some(request) = self.requests.get(&id) else { return };
        let reply = request.reply.clone();
        let (upstream, mut params) = attempts[index].clone();
        let Some(session) = self.upstream_session(&upstream, ctx) else {
            let e = GatewayError::Internal(format!("upstream '{upstream}' has no connector"));
            return self.finish(id, Err(e));
        };
        let upstream_id = session.next_request_id();
        self.requests.sent(&id, &upstream, &upstream_id);
        let progress = self.request_progress(&mut params, &reply);
        if let Some(previous) =
            self.requests.get_mut(&id).and_then(|r| std::mem::replace(&mut r.progress, progress.clone()))
        {
            let _ = previous.try_send(Abandon);
        }
        let span = self.upstream_span(&id, method, &upstream);
        let call = tracing::Instrument::instrument(
            relay_call(ForwardedCall {
                session,
                method,
                upstream_id,
                params,
                arguments: None,
                reply: Some(reply),
                progress,
                progress_ends: ProgressEnds::WithTheCall,
                relay: self.myself.clone(),
                result: ResultAs::Read,
            }),
            span,
        );
        let call = self.for_request(&id, call);
        let naming = self.naming_of(&upstream);
        let finished = id.clone();
        let handle = ctx.spawn(call.into_actor(self).map(move |outcome, act, ctx| match outcome {
            Err(e) if not_found(&e) && index + 1 < attempts.len() => {
                act.forward_to(finished, method, attempts, index + 1, first_error.or(Some(e)), ctx)
            }
            Err(e) => act.finish(finished, Err(GatewayError::from(first_error.unwrap_or(e)))),
            Ok(result) => {
                let mut result = result.into_value();
                names::expose_uris_in(&naming, &mut result);
                act.finish(finished, Ok(result))
            }
        }));
        if let Some(request) = self.requests.get_mut(&id) {
            request.running = Some(handle);
        }
    }

    /// `logging/setLevel`: kept for the session and applied to every upstream session that
    /// offers logging, now and when one opens later.
    pub(super) fn set_level(&mut self, id: RequestId, params: Option<Value>, ctx: &mut Context<Self>) {
        let level = params.as_ref().and_then(|p| p.get("level")).and_then(Value::as_str);
        let Some(level) = level.filter(|l| LEVELS.contains(l)) else {
            let why = format!("logging/setLevel needs \"level\", one of {}", LEVELS.join(", "));
            return self.finish(id, Err(GatewayError::InvalidParams(why)));
        };
        // A log level is upstream-session state: this client's is its own.
        self.go_private(ctx);
        self.upstreams.set_level(Some(level.to_owned()));
        self.record_change(taskgate_store::SessionChange::Level(level.to_owned()), ctx);
        let sessions: Vec<UpstreamSession> =
            self.upstreams.iter().filter(|(name, _)| self.offers_logging(name)).map(|(_, s)| s.clone()).collect();
        let params = json!({ "level": level });
        let apply = async move {
            for session in sessions {
                if let Err(error) = session.request(methods::LOGGING_SET_LEVEL, Some(params.clone())).await {
                    tracing::info!(upstream = session.upstream(), %error, "an upstream did not take the log level");
                }
            }
            Ok(json!({}))
        };
        self.answer_with(id, apply, ctx);
    }

    pub(super) fn offers_logging(&self, upstream: &str) -> bool {
        self.shared.catalog.read().capabilities(upstream).is_some_and(|c| c.get("logging").is_some())
    }

    /// A newly opened upstream session takes the level the client set.
    pub(super) fn apply_level(&mut self, upstream: &str, session: &UpstreamSession, ctx: &mut Context<Self>) {
        let Some(level) = self.upstreams.log_level().filter(|_| self.offers_logging(upstream)).map(str::to_owned)
        else {
            return;
        };
        let session = session.clone();
        ctx.spawn(
            async move {
                let params = json!({ "level": level });
                if let Err(error) = session.request(methods::LOGGING_SET_LEVEL, Some(params)).await {
                    tracing::info!(upstream = session.upstream(), %error, "an upstream did not take the log level");
                }
            }
            .into_actor(self),
        );
    }
}
