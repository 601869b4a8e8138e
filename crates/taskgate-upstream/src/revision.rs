//! The revision a session speaks with its upstream: one type for each, behind [`Revision`].
//! The rest of the gateway asks in the 2025-11-25 model; `session::Revision2025` sends
//! that as it is (a session of `initialize`, requests as the text the gateway wrote), and
//! `crate::revision_2026::Revision2026` translates it to stateless 2026-07-28 requests.

use serde_json::Value;
use taskgate_protocol::{Message, Payload};

use crate::wire::Encoded;
use crate::UpstreamError;

/// What a session does in the revision it speaks.
pub(crate) trait Revision {
    /// Sends `request` (a request of the 2025-11-25 model, as its text) and waits for its
    /// outcome.
    async fn send(&self, request: &Encoded, related: Option<&crate::Sender<Message>>)
        -> Result<Payload, UpstreamError>;

    /// Sends a notification of the 2025-11-25 model.
    async fn notify(&self, method: &str, params: Option<Value>) -> Result<(), UpstreamError>;
}
