//! A request as it goes on the wire ([`Encoded`]), and a transport's failure before it becomes
//! an [`UpstreamError`] ([`ChannelError`]): what an upstream session and its transports share.

use serde_json::Value;
use taskgate_protocol::mcp::{self, methods};
use taskgate_protocol::{Message, RawArguments, RequestId};

use crate::UpstreamError;

/// A transport-level failure, before it becomes an [`UpstreamError`].
#[derive(Debug)]
pub(crate) enum ChannelError {
    /// The upstream no longer knows our session (HTTP 404): initialize again and retry.
    Expired,
    Failed(UpstreamError),
}

impl From<UpstreamError> for ChannelError {
    fn from(e: UpstreamError) -> Self {
        ChannelError::Failed(e)
    }
}

/// A request as it goes on the wire, written once. A call holds this rather than its message
/// while it waits for the answer (a wrapped task's call waits for its task's whole life): the
/// JSON text is one allocation and a fraction of the size of the parsed params, and a retry
/// (after a 404, or in a new revision) sends it again as it is.
pub(crate) struct Encoded {
    pub(crate) id: RequestId,
    /// An `initialize` (its response names the HTTP session).
    pub(crate) initialize: bool,
    /// Followed on the GET stream after its response: a `resources/subscribe` (the updates),
    /// or a call creating a task with a progress token (the task's progress). When something
    /// receives what that stream carries, it opens first.
    pub(crate) on_stream: bool,
    /// Its result is passed through: kept as the text it comes as ([`Payload::Raw`]).
    pub(crate) pass: bool,
    pub(crate) json: bytes::Bytes,
}

impl Encoded {
    /// A request from its parts.
    pub(crate) fn request(id: RequestId, method: &str, params: Option<&Value>) -> Encoded {
        Encoded::passing(id, method, params, None)
    }

    /// [`Encoded::request`] with a `tools/call`'s arguments as the client wrote them.
    pub(crate) fn passing(
        id: RequestId,
        method: &str,
        params: Option<&Value>,
        arguments: Option<&RawArguments>,
    ) -> Encoded {
        // The call's trace context goes in `_meta` too, where stdio upstreams find it.
        let traced = crate::trace_context::current().map(|trace| {
            let mut params = params.cloned();
            crate::trace_context::into_meta(&mut params, &trace);
            params
        });
        let params = match &traced {
            Some(traced) => traced.as_ref(),
            None => params,
        };
        let json = Message::request_bytes_passing(&id, method, params, arguments).into();
        let initialize = method == methods::INITIALIZE;
        let creates_task = params.is_some_and(|p| p.get("task").is_some());
        let on_stream =
            method == methods::RESOURCES_SUBSCRIBE || (creates_task && mcp::progress_token(params).is_some());
        Encoded { id, initialize, on_stream, pass: false, json }
    }

    /// `message`, a request.
    pub(crate) fn of(message: &Message) -> Encoded {
        let Message::Request { id, method, params } = message else { unreachable!("a request") };
        Encoded::request(id.clone(), method, params.as_ref())
    }
}
