//! One forwarded upstream call with everything the upstream sends before its result: progress
//! to the call's [`ProgressActor`], requests for the client to the client session that made the
//! call ([`RelayFromCall`]), anything else to the call's reply stream. Both client sessions and
//! task actors run their calls through here; the client session handles the messages defined
//! here ([`RelayFromCall`], [`ClientResponse`]).

use std::sync::Arc;

use actix::prelude::*;
use actix::WeakRecipient;
use serde_json::Value;
use taskgate_protocol::mcp::methods;
use taskgate_protocol::{Message as RpcMessage, Payload, RawArguments, RequestId};
use taskgate_upstream::UpstreamSession;

use crate::outbound::Outbound;
use crate::progress::{Finish, Progress, ProgressActor};
use crate::GatewayError;

/// Messages buffered from an upstream about one call before its forwarding waits.
pub(crate) const UPSTREAM_EVENTS: usize = 256;

/// One upstream request to forward, and where what the upstream sends before its result goes.
pub(crate) struct ForwardedCall {
    pub session: UpstreamSession,
    pub method: &'static str,
    /// Its id at the upstream.
    pub upstream_id: RequestId,
    pub params: Value,
    /// A `tools/call`'s arguments as the client wrote them, apart from `params`.
    pub arguments: Option<RawArguments>,
    /// The client's stream for the request: notifications other than progress go there.
    pub reply: Option<Outbound>,
    /// The actor of the request's progress token.
    pub progress: Option<Addr<ProgressActor>>,
    pub progress_ends: ProgressEnds,
    /// The client session that relays the requests the upstream sends on the call's stream;
    /// without one, they go to the upstream session's owner.
    pub relay: Option<Arc<WeakRecipient<RelayFromCall>>>,
    pub result: ResultAs,
}

/// When the call's progress actor delivers what it has pending and stops.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProgressEnds {
    /// Before the call's result is returned.
    WithTheCall,
    /// When its owner says (a task's, at the task's end).
    Later,
}

/// How the result comes back.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResultAs {
    /// Read into a tree.
    Read,
    /// As the upstream wrote it, when it can be ([`Payload::Raw`], see
    /// [`UpstreamSession::request_payload`]): a result the client gets as it came.
    Passed,
}

/// Runs an upstream request (`tools/call`, `resources/read`, `prompts/get`…), forwarding the
/// notifications that belong to it, all before the result: progress to its [`ProgressActor`]
/// (awaited, so order holds), anything else to the client's stream for the request.
pub(crate) async fn relay_call(call: ForwardedCall) -> Result<Payload, taskgate_upstream::UpstreamError> {
    let ForwardedCall {
        session,
        method,
        upstream_id,
        params,
        arguments,
        reply,
        progress,
        progress_ends,
        relay,
        result,
    } = call;
    let pass = result == ResultAs::Passed;
    let (related, mut notes) = taskgate_upstream::channel(UPSTREAM_EVENTS);
    let call = session.request_payload(upstream_id.clone(), method, Some(params), arguments, Some(related), pass);
    tokio::pin!(call);
    let forward = |note: RpcMessage| {
        let progress = progress.clone();
        let reply = reply.clone();
        let (relay, session, related) = (relay.clone(), session.clone(), upstream_id.clone());
        async move {
            match (note, &progress) {
                // A request the upstream sent on the call's stream: relayed (awaited) before
                // anything after it, so the client sees it before the response.
                (request @ RpcMessage::Request { .. }, _) => match relay.and_then(|r| r.upgrade()) {
                    Some(client_session) => {
                        let upstream = session.upstream().to_owned();
                        let _ = client_session.send(RelayFromCall { upstream, request, related }).await;
                    }
                    None => session.hand_over(request, related).await,
                },
                (RpcMessage::Notification { method, params: Some(params) }, Some(actor))
                    if method == methods::PROGRESS =>
                {
                    let _ = actor.send(Progress(params)).await;
                }
                (RpcMessage::Notification { method, .. }, _) if method == methods::PROGRESS => {}
                // The upstream closed the call's stream early and resumes it: the client's
                // stream of this call may close the same way (never a message to it).
                (RpcMessage::Notification { method, params }, _) if method == taskgate_protocol::sse::PAUSED => {
                    let retry = params.as_ref().and_then(|p| p.get("retryMs")).and_then(Value::as_u64);
                    if let Some(reply) = &reply {
                        let _ = reply.send_frame(crate::outbound::Frame::paused(retry.unwrap_or(1_000)));
                    }
                }
                (mut note, _) => {
                    if let RpcMessage::Notification { method, params } = &mut note {
                        tag_log(session.upstream(), method, params);
                    }
                    // A client that stopped reading overflows its stream: the session is told
                    // and cancels the call.
                    if let Some(reply) = &reply {
                        if reply.send(&note).is_err() {
                            tracing::debug!("client stream overflowed or closed; a notification was dropped");
                        }
                    }
                }
            }
        }
    };
    // The call first: its timeout must fire on time even while the upstream floods
    // notifications. What it sent before its response is already queued and goes first.
    let outcome = loop {
        tokio::select! {
            biased;
            outcome = &mut call => {
                while let Some(note) = notes.try_recv() {
                    forward(note).await;
                }
                break outcome;
            }
            Some(note) = notes.recv() => forward(note).await,
        }
    };
    if let (ProgressEnds::WithTheCall, Some(actor)) = (progress_ends, &progress) {
        let _ = actor.send(Finish).await;
    }
    outcome
}

/// A log message names the upstream it came from in `logger` (`<upstream>` or
/// `<upstream>/<its logger>`), so a client reading one stream of many servers can tell them apart.
pub(crate) fn tag_log(upstream: &str, method: &str, params: &mut Option<Value>) {
    if method != methods::LOG_MESSAGE {
        return;
    }
    if let Some(Value::Object(p)) = params {
        let logger = match p.get("logger").and_then(Value::as_str) {
            Some(own) => format!("{upstream}/{own}"),
            None => upstream.to_owned(),
        };
        p.insert("logger".into(), Value::from(logger));
    }
}

/// The client's response to a request an upstream sent through the gateway.
/// With the access token it came with (or its task's creator's), while an upstream exchanges
/// callers' tokens.
pub(crate) struct ClientResponse(pub RpcMessage, pub Option<taskgate_upstream::Subject>);

impl Message for ClientResponse {
    type Result = Result<(), GatewayError>;
}

/// A request an upstream sent on the response stream of a call, for the client session that
/// made the call to relay.
pub(crate) struct RelayFromCall {
    pub upstream: String,
    pub request: RpcMessage,
    /// The call's upstream-local id.
    pub related: RequestId,
}

impl Message for RelayFromCall {
    type Result = ();
}
