//! [`Channel`]: an upstream session's transport, Streamable HTTP or stdio.

use std::sync::Arc;

use serde_json::Value;
use taskgate_protocol::{Message, Payload};

use crate::http::HttpChannel;
use crate::stdio::StdioChannel;
use crate::wire::{ChannelError, Encoded};

/// One connection of an upstream session.
#[derive(Clone)]
pub(crate) enum Channel {
    Http(Arc<HttpChannel>),
    Stdio(Arc<StdioChannel>),
}

impl Channel {
    pub(crate) async fn request(
        &self,
        request: &Encoded,
        sink: Option<&crate::Sender<Message>>,
        headers: &[(reqwest::header::HeaderName, reqwest::header::HeaderValue)],
    ) -> Result<Value, ChannelError> {
        self.request_payload(request, sink, headers).await.map(Payload::into_value)
    }

    /// [`Channel::request`], a result passed through (`request.pass`) kept as text.
    pub(crate) async fn request_payload(
        &self,
        request: &Encoded,
        sink: Option<&crate::Sender<Message>>,
        headers: &[(reqwest::header::HeaderName, reqwest::header::HeaderValue)],
    ) -> Result<Payload, ChannelError> {
        match self {
            // Boxed: the HTTP path's future is large, and a stdio call should not carry its size.
            Channel::Http(c) => Box::pin(c.request(request, sink, headers)).await,
            Channel::Stdio(c) => c.request(request).await,
        }
    }

    pub(crate) async fn send(&self, message: &Message) -> Result<(), ChannelError> {
        match self {
            Channel::Http(c) => c.send(message).await,
            Channel::Stdio(c) => c.send(message).await,
        }
    }

    pub(crate) fn is_alive(&self) -> bool {
        match self {
            Channel::Http(c) => c.is_alive(),
            Channel::Stdio(c) => c.is_alive(),
        }
    }

    pub(crate) async fn shutdown(&self) {
        match self {
            Channel::Http(c) => c.delete().await,
            Channel::Stdio(c) => c.shutdown(),
        }
    }
}
