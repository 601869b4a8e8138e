//! [`Revision2025`]: a session of `initialize` with its upstream, its requests sent as the text
//! the gateway wrote them in.

use serde_json::Value;
use taskgate_protocol::{Message, Payload};

use super::{Ready, UpstreamSession, GET_STREAM_WAIT};
use crate::revision::Revision;
use crate::transport::Channel;
use crate::wire::{ChannelError, Encoded};
use crate::UpstreamError;

/// A session with an upstream that speaks 2025-11-25 (or an earlier revision it negotiated).
#[derive(Clone, Copy)]
pub(crate) struct Revision2025<'a> {
    pub(crate) session: &'a UpstreamSession,
    pub(crate) ready: &'a Ready,
}

impl Revision for Revision2025<'_> {
    async fn send(
        &self,
        request: &Encoded,
        related: Option<&crate::Sender<Message>>,
    ) -> Result<Payload, UpstreamError> {
        let (session, ready) = (self.session, self.ready);
        if let (Channel::Http(http), true) = (&ready.channel, request.on_stream) {
            // What follows it comes on the GET stream (a subscription's updates, a new task's
            // progress, sent by the upstream as soon as it starts the task): when something
            // receives it, the stream is open before the request goes, so that none of it is
            // sent to no stream. (Boxed: rare, and a wrapped call's future stays small without
            // it.)
            if session.listening().wanted() {
                Box::pin(http.stream_opened(GET_STREAM_WAIT)).await;
            }
        }
        match ready.channel.request_payload(request, related, &[]).await {
            // basic/transports "Session Management": on 404 start a new session (boxed: rare,
            // and kept out of the state a call waits in, as the outcome it replaces is).
            Err(ChannelError::Expired) => {}
            other => return other.map_err(|e| session.expired_twice(e)),
        }
        Box::pin(session.renewed(request, related)).await
    }

    async fn notify(&self, method: &str, params: Option<Value>) -> Result<(), UpstreamError> {
        self.ready.channel.send(&Message::notification(method, params)).await.map_err(|e| self.session.expired_twice(e))
    }
}
