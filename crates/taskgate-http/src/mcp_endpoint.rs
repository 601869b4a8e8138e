//! `POST`, `GET` and `DELETE` on the MCP endpoint (basic/transports "Streamable HTTP").

use actix_web::http::header::HeaderMap;
use actix_web::{web, HttpRequest, HttpResponse};
use taskgate_core::logs::Untrusted;
use taskgate_core::outbound::Frame;
use taskgate_core::{Gateway, GatewayError, Identity};
use taskgate_protocol::mcp::methods;
use taskgate_protocol::{Message, MessageError};

use crate::checks::{self, SESSION_HEADER};
use crate::{reply, sse};

/// The caller's identity from `Authorization: Bearer` (an API key, a JWT, or an OAuth access
/// token), or the anonymous tenant's when there is no header and one is configured; otherwise
/// 401 (or 403 for a token without the scope needed, 400 for a header that is not a bearer
/// token) with its challenge.
async fn identity(req: &HttpRequest, gateway: &Gateway) -> Result<Identity, GatewayError> {
    verified(req, gateway).await.map(|v| v.identity)
}

/// [`identity`], with what an OAuth access token grants.
async fn verified(req: &HttpRequest, gateway: &Gateway) -> Result<taskgate_core::tenants::Verified, GatewayError> {
    let headers = req.headers();
    let authorization = headers.get(actix_web::http::header::AUTHORIZATION).map(|v| v.to_str().unwrap_or(""));
    // The client, as the connection's peer or the client a trusted proxy names.
    let source = || {
        let peer = req.peer_addr()?.ip();
        Some(match req.app_data::<web::Data<crate::peers::Peers>>() {
            Some(peers) => peers.client_source(peer, headers),
            None => peer,
        })
    };
    gateway.authenticate(authorization, &source, path_profile(req)).await
}

/// The profile a request's path names (`/mcp/<profile>`; `None` at `/mcp`).
fn path_profile(req: &HttpRequest) -> Option<&str> {
    req.match_info().get("profile")
}

/// A session is served at the endpoint it was opened at: at another, it does not exist.
fn same_endpoint(session: &taskgate_core::SessionHandle, profile: Option<&str>) -> Result<(), GatewayError> {
    if session.profile() == profile {
        Ok(())
    } else {
        Err(GatewayError::SessionNotFound)
    }
}

/// The largest body of a refused request that is read (and dropped) to keep its connection.
const DRAINED_AT_MOST: usize = 16 << 10;
/// The longest such a body is waited for (an unauthenticated client holds its connection no
/// longer than this; a slower one has it closed).
const DRAIN_TIME: std::time::Duration = std::time::Duration::from_secs(1);

/// `POST /mcp`: one JSON-RPC message per request.
pub async fn post(
    req: HttpRequest,
    payload: web::Payload,
    gateway: web::Data<Gateway>,
    front: web::Data<crate::revision_2026::Front2026>,
) -> HttpResponse {
    let headers = req.headers();
    let config = gateway.config();
    let timeout = std::time::Duration::from_millis(config.server.body_timeout_ms);
    let admitted = async {
        checks::origin(headers, &config.server.allowed_origins)?;
        checks::content_type(headers)?;
        // Credentials before the body: the body limit is the tenant's.
        verified(&req, &gateway).await
    };
    let verified = match admitted.await {
        Ok(verified) => verified,
        Err(e) => {
            // A small body is read and dropped, so the connection stays open for the client's
            // next request (a refusal costs no new connection); a larger one closes it unread.
            // Its request's id, when it has one, goes back with the error (JSON-RPC 2.0: the
            // member is required).
            let mut id = None;
            if checks::content_length(headers).is_some_and(|length| length <= DRAINED_AT_MOST) {
                if let Ok(body) = checks::body(headers, payload, DRAINED_AT_MOST, timeout.min(DRAIN_TIME)).await {
                    id = match Message::from_slice_front(&body) {
                        Ok(Ok((Message::Request { id, .. }, _, _))) => Some(id),
                        _ => None,
                    };
                }
            }
            return reply::error(&e, id);
        }
    };
    let checked = async {
        let body = checks::body(headers, payload, gateway.max_body_bytes(&verified.identity), timeout).await?;
        let parsed = match Message::from_slice_front(&body) {
            Err(e) => Err(GatewayError::Parse(e.to_string())),
            Ok(Err(MessageError::Batch)) => {
                Err(GatewayError::InvalidRequest(MessageError::Batch.to_string().replace("Invalid Request: ", "")))
            }
            Ok(Err(MessageError::Invalid(why))) => Err(GatewayError::InvalidRequest(why)),
            Ok(Ok(parsed)) => Ok(parsed),
        }?;
        Ok::<_, GatewayError>((verified, parsed))
    };
    let (verified, (message, fields, arguments)) = match checked.await {
        Ok(m) => m,
        Err(e) => return reply::error(&e, None),
    };
    // Only credentials that carry scopes are held to them (after the rates, in `dispatch`).
    let scoped = verified.scopes.is_some().then(|| verified.clone());
    // The endpoint: the tenant's own, or one of its profiles (404 for another name).
    let endpoint = match gateway.endpoint(&verified.identity, path_profile(&req)) {
        Ok(endpoint) => endpoint,
        Err(e) => return reply::error(&e, message.id().cloned()),
    };
    let subject = verified.subject;
    let identity = verified.identity;
    // A span per request: tenant, principal, session, JSON-RPC method (upstream spans nest in
    // the core).
    // The session id and the method are the client's: cut and escaped in the log.
    // Read once: it is visible ASCII checked byte by byte.
    let session_id = checks::session_id(headers);
    let span = tracing::info_span!(
        "mcp_request",
        tenant = %identity.tenant,
        principal = %Untrusted(&identity.principal),
        session = %Untrusted(session_id.unwrap_or("-")),
        method = %Untrusted(message.method().unwrap_or("response")),
        tool = tracing::field::Empty,
        task = tracing::field::Empty,
    );
    if taskgate_upstream::trace_context::enabled() {
        crate::traced::request_span(&span, headers, &message);
    }
    let front = front.into_inner();
    // A request is counted and timed by tenant and method until its response is sent.
    let meter = match &message {
        Message::Request { method, .. } => Some(gateway.metrics().requests.meter(&identity.tenant, method)),
        _ => None,
    };
    // Counted by profile once answered: served, or refused (an HTTP error, or a JSON-RPC error
    // answered at once).
    let counted = endpoint.profile.clone().map(|p| (identity.tenant.clone(), p));
    let request = Request { headers, session_id, identity, scoped, endpoint, message, fields, arguments };
    let dispatched = tracing::Instrument::instrument(dispatch(request, &gateway, front), span);
    // An upstream that exchanges callers' tokens gets one exchanged from this request's own.
    let dispatched = match subject {
        Some(subject) => futures_util::future::Either::Left(taskgate_upstream::for_subject(Some(subject), dispatched)),
        None => futures_util::future::Either::Right(dispatched),
    };
    let response = match dispatched.await {
        Ok(response) => response,
        Err((e, id)) => reply::error(&e, id),
    };
    if let Some((tenant, profile)) = counted {
        let refused = response.status().is_client_error()
            || response.status().is_server_error()
            || response.extensions().contains::<crate::metered::RpcError>();
        let outcome = if refused { "refused" } else { "served" };
        gateway.metrics().profile_requests.with_label_values(&[&tenant, profile.name(), outcome]).inc();
    }
    match meter {
        Some(meter) => crate::metered::metered(response, meter),
        None => response,
    }
}

type Refusal = (GatewayError, Option<taskgate_protocol::RequestId>);

/// A POST's message, its headers and what was read of them.
struct Request<'a> {
    headers: &'a HeaderMap,
    /// `Mcp-Session-Id`, when present and visible ASCII.
    session_id: Option<&'a str>,
    identity: Identity,
    /// The credentials, when they carry scopes (an OAuth access token).
    scoped: Option<taskgate_core::tenants::Verified>,
    /// The endpoint it came to.
    endpoint: taskgate_core::tenants::profiles::Endpoint,
    message: Message,
    fields: taskgate_protocol::revision_2026::PerRequest,
    /// A `tools/call`'s arguments as the client wrote them, apart from the message's params.
    arguments: Option<taskgate_protocol::RawArguments>,
}

async fn dispatch(
    request: Request<'_>,
    gateway: &Gateway,
    front: std::sync::Arc<crate::revision_2026::Front2026>,
) -> Result<HttpResponse, Refusal> {
    let Request { headers, session_id, identity, scoped, endpoint, mut message, fields, mut arguments } = request;
    let accepts = checks::accepts(headers);
    checks::identifiers(&message)?;
    // basic/versioning "Backward Compatibility": a request with the 2026-07-28 `_meta` is served
    // statelessly, beside the sessions of initialize.
    let message_2026 = crate::revision_2026::is_2026(session_id.is_some(), headers, &message, &fields);
    // A call's arguments pass on as written only in a request; a notification that names the
    // method has them back in its params.
    if let Message::Notification { params, .. } = &mut message {
        if let Some(passed) = arguments.take() {
            passed.restore(params);
        }
    }
    // Anything else goes on as the client sent it: a 2025-11-25 message gets back whatever
    // per-request fields of the other revision it carried.
    let fields = if message_2026 {
        fields
    } else {
        if let Message::Request { params, .. } | Message::Notification { params, .. } = &mut message {
            fields.restore(params);
        }
        Default::default()
    };
    let id = message.id().cloned();
    if let Message::Request { id, .. } = &message {
        // Shutting down: requests go elsewhere (notifications and responses still reach the
        // requests in flight).
        if gateway.draining() {
            return Err((shutting_down(), Some(id.clone())));
        }
    }
    // A profile shows some tools under other names: a call names the tool as the gateway does
    // from here on (its scopes, its rates, its session).
    if let Message::Request { method, params: Some(params), .. } = &mut message {
        if method == methods::TOOLS_CALL {
            let shown = params.get("name").and_then(serde_json::Value::as_str);
            if let Some(name) = shown.map(|n| endpoint.gateway_name(n)).filter(|n| Some(*n) != shown) {
                params["name"] = serde_json::Value::from(name.to_owned());
            }
        }
    }
    if let Message::Request { id, method, params } = &message {
        // Rates per tenant and principal (polling in its own bucket): 429 with Retry-After.
        gateway.admit(&identity, method).await.map_err(|e| (e, Some(id.clone())))?;
        // A call of a tool whose scopes the access token lacks: 403 with the scopes to ask for.
        if let Some(verified) = &scoped {
            gateway
                .check_scopes(verified, method, params.as_ref(), endpoint.profile_name())
                .await
                .map_err(|e| (e, Some(id.clone())))?;
        }
        // A call over a rate of its tool or upstream: 429 with Retry-After, naming both.
        gateway.admit_tool(&identity, method, params.as_ref()).await.map_err(|e| (e, Some(id.clone())))?;
        // The client MUST accept both JSON and SSE; a gateway can answer with either one it accepts.
        if !accepts.json && !accepts.sse {
            return Err((
                GatewayError::NotAcceptable("Accept must allow application/json and text/event-stream".into()),
                Some(id.clone()),
            ));
        }
        // (A 2026-07-28 message is served below, `initialize` included: that revision has none.)
        if method == methods::INITIALIZE && !message_2026 {
            if session_id.is_some() {
                return Err((
                    GatewayError::InvalidRequest(
                        "initialize starts a new session: send it without Mcp-Session-Id".into(),
                    ),
                    Some(id.clone()),
                ));
            }
            let catalog = gateway.catalog_ready(params.as_ref()).await;
            return match gateway.initialize_at(identity, params.as_ref(), catalog, endpoint).await {
                Ok((session, result)) => {
                    let mut response = reply::json(&Message::response(id.clone(), result));
                    let value = actix_web::http::header::HeaderValue::from_str(&session)
                        .expect("session ids are visible ASCII");
                    response
                        .headers_mut()
                        .insert(actix_web::http::header::HeaderName::from_static(SESSION_HEADER), value);
                    Ok(response)
                }
                Err(e @ GatewayError::InvalidParams(_)) => {
                    Ok(reply::json(&Message::error(Some(id.clone()), e.error_object())))
                }
                Err(e) => Err((e, Some(id.clone()))),
            };
        }
    }
    if message_2026 {
        let scopes = scoped.as_ref().and_then(|v| v.scopes.clone());
        // Boxed: its states are the largest of this future's, which actix moves whole for
        // every request; a session's call then moves only what its own path holds.
        return Ok(Box::pin(crate::revision_2026::serve(
            headers,
            identity,
            (message, fields, arguments),
            gateway,
            front,
            (endpoint, scopes),
        ))
        .await);
    }
    let session_id = session_id.ok_or((GatewayError::MissingSession, id.clone()))?;
    let session = gateway.find_session(session_id, &identity).await.map_err(|e| (e, id.clone()))?;
    same_endpoint(&session, endpoint.profile_name()).map_err(|e| (e, id.clone()))?;
    checks::protocol_version(headers, session.protocol_version()).map_err(|e| (e, id.clone()))?;
    match message {
        Message::Notification { method, params } => {
            session.notify(method, params).await.map_err(|e| (e, None))?;
            Ok(HttpResponse::Accepted().finish())
        }
        response @ (Message::Response { .. } | Message::Error { .. }) => {
            session.respond(response).await.map_err(|e| (e, None))?;
            Ok(HttpResponse::Accepted().finish())
        }
        // Search mode's find_tools is the gateway's own tool, answered here (it reads the
        // caller's scopes).
        Message::Request { id, method, params } if endpoint.finds_tools(&method, params.as_ref()) => {
            let scopes = scoped.as_ref().and_then(|v| v.scopes.as_deref());
            let written = arguments.as_ref().map(taskgate_protocol::RawArguments::to_value);
            let called_with = written.as_ref().or_else(|| params.as_ref().and_then(|p| p.get("arguments")));
            let catalog = session.tool_catalog();
            match gateway.find_tools(&identity, scopes, &endpoint, &catalog, called_with).await {
                Ok(result) => Ok(reply::json(&Message::response(id, result))),
                Err(e) => Err((e, Some(id))),
            }
        }
        Message::Request { id, method, params } => {
            // Calls and every method relayed to one upstream may produce progress and upstream
            // requests before their result, and
            // tasks/result may wait long (keep-alives hold the stream open): stream them when the
            // client accepts SSE. Quick methods, tasks/get among them, answer with one JSON object,
            // unless the client ranks a stream first.
            let streams = taskgate_protocol::method::row(&method).is_some_and(|row| row.streams);
            let only_sse = !accepts.json || accepts.prefers_sse;
            let stream = accepts.sse && (only_sse || streams);
            let mut messages = session
                .request_passing(id.clone(), method, params, arguments)
                .await
                .map_err(|e| (e, Some(id.clone())))?;
            // basic/transports "Resumability and Redelivery": at 2025-11-25 a reply stream
            // can be resumed, and closes as its upstream's does (a pause) to be resumed.
            let resume_secs = gateway.config().server.stream_resume_secs;
            let resumable = stream && crate::resumable::offered(session.protocol_version(), resume_secs);
            let (share, size) = session.stream_share();
            let owner = crate::resumable::Owner {
                tenant: identity.tenant.clone(),
                share: crate::resumable::tenant_share(share, size),
            };
            let reply_stream = |first: Option<Frame>, messages| match resumable {
                true => crate::resumable::response(session_id, owner.clone(), first, messages, resume_secs),
                false => sse::response_after(first, messages),
            };
            // An upstream's early close is passed on only where the client's resumption comes
            // back here: with replicas (Redis) it may reach another, so the stream stays open
            // and the gateway's own resumption of the upstream brings the response onto it.
            let replicas = gateway.config().store.backend == taskgate_config::StoreBackend::Redis;
            if resumable && !replicas {
                messages.take_pauses();
            }
            if stream && only_sse {
                // A quick method's answer is one event: a plain stream, nothing to resume.
                return Ok(if streams { reply_stream(None, messages) } else { sse::response(messages) });
            }
            if stream {
                // A client that accepts both, JSON no lower than SSE, gets one JSON object when
                // the response is the first thing to send (one write, no chunked stream); the
                // stream starts as soon as anything else comes first (progress, a relayed
                // request) or the response takes longer than `server.first_message_wait_ms`
                // (basic/transports "Sending Messages to the Server": a request MUST be
                // answered with `text/event-stream` or `application/json`; the server chooses).
                let wait = std::time::Duration::from_millis(gateway.config().server.first_message_wait_ms);
                match tokio::time::timeout(wait, messages.recv()).await {
                    Ok(Some(frame)) if frame.response => return Ok(reply::frame(frame)),
                    Ok(Some(frame)) => return Ok(reply_stream(Some(frame), messages)),
                    // Cancelled (or its session closed): no response (basic/utilities/
                    // cancellation), a stream that ends, as before it started.
                    Ok(None) => return Ok(sse::response(messages)),
                    Err(_) => return Ok(reply_stream(None, messages)),
                }
            }
            while let Some(frame) = messages.recv().await {
                if frame.response {
                    return Ok(reply::frame(frame));
                }
            }
            Err((GatewayError::SessionNotFound, Some(id)))
        }
    }
}

/// `GET /mcp`: the session's standalone SSE stream.
pub async fn get(req: HttpRequest, gateway: web::Data<Gateway>) -> HttpResponse {
    let headers = req.headers();
    let opened = async {
        checks::origin(headers, &gateway.config().server.allowed_origins)?;
        if !checks::accepts(headers).sse {
            return Err(GatewayError::NotAcceptable(
                "the GET stream is text/event-stream; Accept must allow it".into(),
            ));
        }
        let identity = identity(&req, &gateway).await?;
        // While draining, a reply stream is still taken back (its call runs on), but no new
        // stream is opened.
        let resuming = headers.contains_key("last-event-id");
        if gateway.draining() && !resuming {
            return Err(shutting_down());
        }
        let session_id = checks::session_id(headers).ok_or(GatewayError::MissingSession)?;
        let session = gateway.find_session(session_id, &identity).await?;
        same_endpoint(&session, path_profile(&req))?;
        checks::protocol_version(headers, session.protocol_version())?;
        // basic/transports "Resumability and Redelivery": "Resumption is always via HTTP GET
        // with Last-Event-ID", and the server "MUST NOT replay messages that would have been
        // delivered on a different stream": an id names one reply stream of this session.
        if let Some(last) = headers.get("last-event-id") {
            let last = last.to_str().unwrap_or_default();
            return match crate::resumable::resume_waiting(session_id, last).await {
                Ok(resumed) => Ok(Resumed(resumed)),
                Err(crate::resumable::NotResumed::Malformed) => Err(GatewayError::InvalidRequest(format!(
                    "Last-Event-ID \"{}\" is not an event id of this gateway's reply streams",
                    Untrusted(last)
                ))),
                Err(crate::resumable::NotResumed::NotHeld) => Err(GatewayError::InvalidRequest(format!(
                    "no reply stream of this session to resume after \"{}\": it ended, was held longer than server.stream_resume_secs ({} s), or another replica holds it",
                    Untrusted(last),
                    gateway.config().server.stream_resume_secs
                ))),
                Err(crate::resumable::NotResumed::Attached) => Err(GatewayError::InvalidRequest(format!(
                    "the reply stream of \"{}\" still has a connection after 2 s: resume it once that connection is closed",
                    Untrusted(last)
                ))),
            };
        }
        session.open_stream().await.map(Opened)
    };
    match opened.await {
        Ok(Opened(messages)) => sse::response(messages),
        Ok(Resumed(response)) => response,
        Err(e) => reply::error(&e, None),
    }
}

/// What a `GET` opens: the session's own stream, or a reply stream taken back.
enum GetStream {
    Opened(taskgate_core::outbound::OutboundReceiver),
    Resumed(HttpResponse),
}
use GetStream::{Opened, Resumed};

fn shutting_down() -> GatewayError {
    GatewayError::Overloaded(
        "the gateway is shutting down; retry (another replica, or this one after its restart)".into(),
    )
}

/// `DELETE /mcp`: ends the session.
pub async fn delete(req: HttpRequest, gateway: web::Data<Gateway>) -> HttpResponse {
    let headers = req.headers();
    let ended = async {
        checks::origin(headers, &gateway.config().server.allowed_origins)?;
        let identity = identity(&req, &gateway).await?;
        let session_id = checks::session_id(headers).ok_or(GatewayError::MissingSession)?;
        same_endpoint(&gateway.find_session(session_id, &identity).await?, path_profile(&req))?;
        gateway.end_session(session_id, &identity).await?;
        crate::resumable::forget(session_id);
        Ok(())
    };
    match ended.await {
        Ok(()) => HttpResponse::Ok().finish(),
        Err(e) => reply::error(&e, None),
    }
}

/// Any other HTTP method on the endpoint.
pub async fn other(req: HttpRequest) -> HttpResponse {
    reply::error(
        &GatewayError::HttpMethodNotAllowed(format!(
            "{} is not served at {}; use POST, GET or DELETE",
            req.method(),
            req.path()
        )),
        None,
    )
}
