//! MCP 2026-07-28 at the front door (basic/versioning "Backward Compatibility": a dual-era
//! server on one endpoint). A request whose `_meta` carries
//! `io.modelcontextprotocol/protocolVersion` (or that names a 2026-07-28 method, or comes with
//! a 2026-07-28 `MCP-Protocol-Version` and no session) is served statelessly here; `initialize`
//! and session requests go on as before.
//!
//! This module is where the revision lives on the client side: it checks the per-request
//! `_meta` fields and the standard headers, then turns the request into the internal model
//! (a request to a session pooled per identity and relayed capabilities, with
//! [`taskgate_core::TaskMode::GatewayDecides`] for `tools/call`) and what comes back into
//! 2026-07-28 messages ([`exchange`]); `server/discover` is answered here, the tasks extension's
//! methods in [`tasks`], and `subscriptions/listen` in [`listen`].

mod exchange;
mod listen;
mod relayed;
mod results;
pub mod state;
mod tasks;

pub use exchange::Front2026;
pub use relayed::serve as serve_relayed;

use taskgate_core::tenants::profiles::Endpoint;

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use actix_web::http::header::HeaderMap;
use actix_web::HttpResponse;
use base64::Engine;
use serde_json::{json, Value};
use taskgate_core::{Gateway, GatewayError, Identity, TaskMode};
use taskgate_protocol::mcp::methods;
use taskgate_protocol::method::{self, Method};
use taskgate_protocol::revision_2026::{self, MetaError, PerRequest, RequestMeta};
use taskgate_protocol::{Message, RequestId};

use crate::checks::VERSION_NAME;

/// The `Mcp-Method` header.
pub const METHOD_HEADER: &str = "mcp-method";
const METHOD_NAME: actix_web::http::header::HeaderName =
    actix_web::http::header::HeaderName::from_static(METHOD_HEADER);
/// The `Mcp-Name` header.
pub const NAME_HEADER: &str = "mcp-name";
const NAME_NAME: actix_web::http::header::HeaderName = actix_web::http::header::HeaderName::from_static(NAME_HEADER);

/// Whether a message is to be served as 2026-07-28: its `_meta` says so, or it names a method
/// only that revision has, or it carries that revision's header and no session.
/// (`has_session`: it carries an `Mcp-Session-Id`.)
pub fn is_2026(has_session: bool, headers: &HeaderMap, message: &Message, fields: &PerRequest) -> bool {
    let method = match message {
        Message::Request { method, .. } | Message::Notification { method, .. } => method,
        _ => return !has_session && header_version(headers) == Some(revision_2026::PROTOCOL_VERSION),
    };
    if fields.version.is_some() {
        return true;
    }
    // The core methods only 2026-07-28 has (`tasks/update` is the tasks extension's: a
    // 2025-11-25 session gets -32601 for it).
    if matches!(Method::named(method), Some(Method::ServerDiscover | Method::SubscriptionsListen)) {
        return true;
    }
    !has_session && method != methods::INITIALIZE && header_version(headers) == Some(revision_2026::PROTOCOL_VERSION)
}

fn header_version(headers: &HeaderMap) -> Option<&str> {
    headers.get(&VERSION_NAME).and_then(|v| v.to_str().ok()).map(str::trim)
}

/// Serves one 2026-07-28 message (credentials, body, rates and `Accept` already checked).
pub async fn serve(
    headers: &HeaderMap,
    identity: Identity,
    (message, fields, arguments): taskgate_protocol::front::Front,
    gateway: &Gateway,
    state: Arc<Front2026>,
    (endpoint, scopes): (Endpoint, Option<Arc<[Box<str>]>>),
) -> HttpResponse {
    let (id, method, params) = match message {
        Message::Request { id, method, params } => (id, method, Params { tree: params, arguments }),
        // streamable-http "Sending Messages": an accepted notification gets 202. None is
        // defined over HTTP in this revision (cancellation is closing the stream).
        Message::Notification { method, .. } => {
            tracing::debug!(method = %taskgate_core::logs::Untrusted(&method), "2026-07-28 notification accepted and ignored");
            return HttpResponse::Accepted().finish();
        }
        _ => {
            let e = GatewayError::InvalidRequest(
                "a 2026-07-28 client sends no responses: answers to input requests go in inputResponses on a retry"
                    .into(),
            );
            return crate::reply::error(&e, None);
        }
    };
    // basic/versioning: an unsupported version MUST get -32022 listing the supported ones;
    // basic "`_meta`": a missing required field MUST get -32602 with 400. The fields were taken
    // out of `_meta` as the body was parsed (Message::from_slice_front): they are the gateway's
    // to read, not the upstream's.
    let checked = RequestMeta::checked(fields, params.tree.as_ref())
        .map_err(|e| match e {
            // streamable-http "Server Validation": a header that disagrees with the body MUST
            // get 400 with HeaderMismatch, whichever of the two names a version we speak.
            MetaError::Unsupported(v) if header_version(headers).is_some_and(|h| h != v) => {
                GatewayError::HeaderMismatch(format!(
                    "MCP-Protocol-Version header does not match _meta protocolVersion {}",
                    taskgate_core::logs::Untrusted(&v)
                ))
            }
            MetaError::Unsupported(v) => {
                GatewayError::UnsupportedRevision(taskgate_core::logs::Untrusted(&v).to_string())
            }
            MetaError::Invalid(why) => GatewayError::InvalidMeta(why),
        })
        .and_then(|request_meta| {
            standard_headers(headers, &method, params.tree.as_ref(), request_meta.version, &endpoint)?;
            Ok(request_meta)
        });
    let request_meta = match checked {
        Ok(request_meta) => request_meta,
        Err(e) => return crate::reply::error(&e, Some(id)),
    };
    if method == methods::TOOLS_CALL {
        let called = Called { identity: &identity, endpoint: &endpoint, capabilities: &request_meta.capabilities };
        if let Err(e) = custom_headers(gateway, called, headers, &params).await {
            return crate::reply::error(&e, Some(id));
        }
    }
    match serve_request(identity, &id, method, params, request_meta, gateway, Arrival { state, endpoint, scopes }).await
    {
        Ok(response) => response,
        Err(e) => crate::reply::error(&e, Some(id)),
    }
}

/// A request's params as the front door read them: a `tools/call`'s arguments as the client
/// wrote them apart from the rest ([`Message::from_slice_front`]).
struct Params {
    tree: Option<Value>,
    arguments: Option<taskgate_protocol::RawArguments>,
}

impl Params {
    /// The params whole, as a tree.
    fn whole(self) -> Option<Value> {
        let Params { mut tree, arguments } = self;
        if let Some(arguments) = arguments {
            arguments.restore(&mut tree);
        }
        tree
    }
}

/// Where a request came in: the front door's state, and the endpoint (the tenant's own or a
/// profile's).
struct Arrival {
    state: Arc<Front2026>,
    endpoint: Endpoint,
    /// The scopes of the caller's access token, if it has any (search mode's `find_tools`).
    scopes: Option<Arc<[Box<str>]>>,
}

async fn serve_request(
    identity: Identity,
    id: &RequestId,
    method: String,
    params: Params,
    request_meta: RequestMeta,
    gateway: &Gateway,
    at: Arrival,
) -> Result<HttpResponse, GatewayError> {
    let Arrival { state, endpoint, scopes } = at;
    // The table says what this revision serves and how (taskgate_protocol::method).
    let served = Method::named(&method).filter(|m| m.row().at_2026.is_some());
    match served {
        Some(Method::ServerDiscover) => Ok(discover(gateway, &identity, id, &endpoint)),
        Some(Method::SubscriptionsListen) => {
            listen::serve(gateway, identity, id.clone(), params.whole(), &request_meta, &state, &endpoint).await
        }
        Some(Method::TasksGet | Method::TasksCancel | Method::TasksUpdate) => {
            // ext-tasks "Error Handling": -32021 for a client that did not declare the extension.
            if !request_meta.declares_tasks() {
                return Err(missing_tasks_extension(&method));
            }
            tasks::serve(gateway, &identity, id.clone(), &method, params.whole(), &request_meta, state).await
        }
        Some(m) if m.row().forwarded => {
            forward(gateway, identity, id.clone(), method, params, request_meta, Arrival { state, endpoint, scopes })
                .await
        }
        // streamable-http "Protocol Version Header": a method not implemented MUST get 404 and
        // -32601 (ping, logging/setLevel, resources/subscribe, tasks/list and tasks/result are
        // not part of this revision).
        _ => Err(GatewayError::UnknownMethod(format!(
            "{} is not a method of protocol version {} at taskgate, which serves {}",
            taskgate_core::logs::Untrusted(&method),
            revision_2026::PROTOCOL_VERSION,
            method::served_at_2026()
        ))),
    }
}

fn missing_tasks_extension(method: &str) -> GatewayError {
    GatewayError::MissingClientCapability {
        message: format!(
            "{method} needs the tasks extension ({}) declared on the request",
            revision_2026::TASKS_EXTENSION
        ),
        required: json!({ "extensions": { revision_2026::TASKS_EXTENSION: {} } }),
    }
}

/// streamable-http "Server Validation": `MCP-Protocol-Version`, `Mcp-Method` and (for the
/// methods that have it) `Mcp-Name` MUST be present and match the body, `Mcp-Name` decoded
/// from its Base64 sentinel first; a mismatch, a missing header or invalid characters get 400
/// with -32020.
fn standard_headers(
    headers: &HeaderMap,
    method: &str,
    params: Option<&Value>,
    version: &str,
    endpoint: &Endpoint,
) -> Result<(), GatewayError> {
    let get = |name: &actix_web::http::header::HeaderName| -> Result<Option<Cow<'_, str>>, GatewayError> {
        let mut values = headers.get_all(name);
        let Some(first) = values.next() else { return Ok(None) };
        if values.next().is_some() {
            return Err(GatewayError::HeaderMismatch(format!("the {name} header is sent more than once")));
        }
        // The common case, a plain value, is compared where it lies.
        if let Some(plain) = revision_2026::plain_header_value(first.as_bytes()) {
            return Ok(Some(Cow::Borrowed(plain)));
        }
        revision_2026::decode_header_value(first.as_bytes(), |b| {
            base64::engine::general_purpose::STANDARD.decode(b).ok()
        })
        .map(|v| Some(Cow::Owned(v)))
        .map_err(|why| GatewayError::HeaderMismatch(format!("{name}: {why}")))
    };
    match get(&VERSION_NAME)? {
        None => return Err(GatewayError::HeaderMismatch("the MCP-Protocol-Version header is required".into())),
        Some(v) if v.trim() != version => {
            return Err(GatewayError::HeaderMismatch(format!(
                "MCP-Protocol-Version header {:?} does not match _meta protocolVersion {version:?}",
                taskgate_core::logs::Untrusted(&v).to_string()
            )))
        }
        Some(_) => {}
    }
    match get(&METHOD_NAME)? {
        None => return Err(GatewayError::HeaderMismatch("the Mcp-Method header is required".into())),
        Some(m) if m.as_ref() != method => {
            return Err(GatewayError::HeaderMismatch(format!(
                "Mcp-Method header value {} does not match body value {}",
                taskgate_core::logs::Untrusted(&m),
                taskgate_core::logs::Untrusted(method)
            )))
        }
        Some(_) => {}
    }
    if let Some(source) = revision_2026::name_source(method) {
        let body = params.and_then(|p| p.get(source)).and_then(Value::as_str);
        match (get(&NAME_NAME)?, body) {
            (None, _) => {
                return Err(GatewayError::HeaderMismatch(format!(
                    "the Mcp-Name header is required for {method} (the value of params.{source})"
                )))
            }
            // A profile's renamed tool: the front door has put the gateway's name in the body,
            // the client named it as shown.
            (Some(name), Some(body)) if name.as_ref() == body || name.as_ref() == endpoint.shown_name(body) => {}
            (Some(name), _) => {
                return Err(GatewayError::HeaderMismatch(format!(
                    "Mcp-Name header value {} does not match body value params.{source}",
                    taskgate_core::logs::Untrusted(&name)
                )))
            }
        }
    }
    Ok(())
}

/// Who calls a tool, and where: what the tool is looked up as.
struct Called<'a> {
    identity: &'a Identity,
    endpoint: &'a Endpoint,
    capabilities: &'a Value,
}

/// streamable-http "Server Behavior for Custom Headers": a call's `Mcp-Param-*` headers MUST
/// match, decoded, the arguments its tool annotates with `x-mcp-header`, MUST be sent for each
/// such argument that has a value and not for one that has none; otherwise 400 and -32020.
/// The arguments are read only for a tool that has such annotations (the same tool the call
/// reaches: a tool the caller may not call has none here, and is unknown to it after).
async fn custom_headers(
    gateway: &Gateway,
    called: Called<'_>,
    headers: &HeaderMap,
    params: &Params,
) -> Result<(), GatewayError> {
    let Some(name) = params.tree.as_ref().and_then(|p| p.get("name")).and_then(Value::as_str) else { return Ok(()) };
    let Called { identity, endpoint, capabilities } = called;
    let specs = gateway.tool_param_headers(&identity.tenant, endpoint, capabilities, name).await;
    if specs.is_empty() {
        return Ok(());
    }
    let parsed: Option<Value>;
    let arguments = match &params.arguments {
        Some(raw) => {
            parsed = Some(serde_json::from_str(raw.get()).map_err(|e| GatewayError::InvalidParams(e.to_string()))?);
            parsed.as_ref()
        }
        None => params.tree.as_ref().and_then(|p| p.get("arguments")),
    };
    let header = |name: &str| {
        let mut values = headers.get_all(name);
        let first = values.next()?;
        if values.next().is_some() {
            return Some(Err("the header is sent more than once".to_owned()));
        }
        Some(revision_2026::decode_header_value(first.as_bytes(), |b| {
            base64::engine::general_purpose::STANDARD.decode(b).ok()
        }))
    };
    taskgate_protocol::param_headers::check_params(&specs, arguments, header).map_err(GatewayError::HeaderMismatch)
}

/// `server/discover` (server/discover "Response"): the versions, what the tenant's upstreams
/// offer through the gateway with the tasks extension, and the gateway's identity.
fn discover(gateway: &Gateway, identity: &Identity, id: &RequestId, endpoint: &Endpoint) -> HttpResponse {
    let mut capabilities = gateway.server_capabilities(&identity.tenant);
    if !capabilities.get("extensions").is_some_and(Value::is_object) {
        capabilities["extensions"] = json!({});
    }
    capabilities["extensions"][revision_2026::TASKS_EXTENSION] = json!({});
    let mut result = json!({
        "supportedVersions": revision_2026::ALL_VERSIONS,
        "capabilities": capabilities,
    });
    if let Some(instructions) = endpoint.profile.as_ref().and_then(|p| p.config.instructions.as_deref()) {
        result["instructions"] = Value::from(instructions);
    }
    if let Some(result) = result.as_object_mut() {
        results::finish_result(revision_2026::methods::SERVER_DISCOVER, result);
    }
    if endpoint.profile.is_some() {
        result["_meta"][revision_2026::meta::SERVER_INFO] = taskgate_core::gateway::server_info_at(endpoint);
    }
    crate::reply::json(&Message::response(id.clone(), result))
}

/// Forwards a request to the identity's pooled session, as the internal request model has it.
async fn forward(
    gateway: &Gateway,
    identity: Identity,
    client_id: RequestId,
    method: String,
    params: Params,
    request_meta: RequestMeta,
    at: Arrival,
) -> Result<HttpResponse, GatewayError> {
    let Arrival { state, endpoint, scopes } = at;
    // Search mode's find_tools is the gateway's own tool, answered here.
    if endpoint.finds_tools(&method, params.tree.as_ref()) {
        let arguments = params.whole().and_then(|mut p| p.get_mut("arguments").map(Value::take));
        let catalog = gateway.tool_catalog_for(&request_meta.capabilities).await;
        let mut result =
            gateway.find_tools(&identity, scopes.as_deref(), &endpoint, &catalog, arguments.as_ref()).await?;
        if let Value::Object(r) = &mut result {
            results::finish_result(methods::TOOLS_CALL, r);
        }
        return Ok(crate::reply::json(&Message::response(client_id, result)));
    }
    // The digest binds a requestState to this request; a client that declared none of the
    // capabilities input requests need is never sent one (basic/patterns/mrtr: inputRequests
    // only for declared capabilities), so it has none to bind. Were one issued all the same,
    // it would be bound to the empty digest, which no retry matches.
    let may_be_asked = ["elicitation", "sampling", "roots"].iter().any(|c| request_meta.capabilities.get(c).is_some());
    // The digest and a retry read the arguments as a tree (the same whatever the spacing a
    // client writes them with); otherwise they go on as written.
    let retry = params.tree.as_ref().is_some_and(|p| p.get("requestState").is_some());
    let (params, arguments) =
        if may_be_asked || retry { (params.whole(), None) } else { (params.tree, params.arguments) };
    let mut params = params.unwrap_or_else(|| json!({}));
    let first_wait = Duration::from_millis(gateway.config().server.first_message_wait_ms);
    let client_token = params.get("_meta").and_then(|m| m.get(taskgate_protocol::mcp::meta::PROGRESS_TOKEN)).cloned();
    // A retry (basic/patterns/mrtr): it resumes the exchange its requestState names, held
    // here or at the replica the state names (a balancer may send a retry anywhere).
    if retry {
        let request_state = params.get("requestState").and_then(Value::as_str).unwrap_or_default();
        if let Some(holder) = state.key.holder_elsewhere(request_state) {
            let request =
                json!({"jsonrpc": "2.0", "id": client_id.to_value(), "method": &method, "params": &params}).to_string();
            if let Some(forwarded) = gateway.forward_retry(&holder, &identity, request)? {
                return Ok(relayed::relay(forwarded, client_id, first_wait).await);
            }
        }
        return Ok(exchange::resume(state, client_id, &identity, &method, &params, client_token, first_wait).await);
    }
    let digest = if may_be_asked { state::digest(&method, Some(&params)) } else { String::new() };
    let session = gateway
        .pooled_session(&identity, &request_meta.capabilities, request_meta.client_info.as_ref(), &endpoint)
        .await?;
    let internal_id = state.internal_id();
    // Client ids and tokens are unique per client only: in a shared session they are the
    // gateway's own, mapped back on the way out.
    let internal_token = client_token.as_ref().map(|_| internal_id.to_value());
    if let Some(object) = params.as_object_mut() {
        // Answers without a requestState (a retry went to resume above) go to the upstream as
        // sent: a stateless 2026-07-28 server may take answers given before it asks
        // (basic/patterns/mrtr), and one that does not ignores them.
        // The per-request fields are out already (Message::from_slice_front).
        if let Some(Value::Object(m)) = object.get_mut("_meta") {
            if let Some(token) = &internal_token {
                m.insert(taskgate_protocol::mcp::meta::PROGRESS_TOKEN.into(), token.clone());
            }
            if m.is_empty() {
                object.remove("_meta");
            }
        }
    }
    let mode = if method == methods::TOOLS_CALL {
        TaskMode::GatewayDecides { accepts: request_meta.declares_tasks() }
    } else {
        TaskMode::Requested
    };
    let call = exchange::Call {
        client_id,
        internal_id: internal_id.clone(),
        method: method.clone(),
        client_token,
        log_rank: request_meta.log_level.and_then(revision_2026::log_rank),
        session,
        identity,
        digest,
    };
    let messages = call.session.request_with(internal_id, method, Some(params), arguments, mode).await?;
    Ok(exchange::respond(state, call, messages, first_wait).await)
}
