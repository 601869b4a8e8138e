//! Clients for upstream MCP servers.
//!
//! - [`Connector`]: one per configured upstream; holds what its sessions share (the HTTP
//!   connection pool, the stdio process bound) and opens [`UpstreamSession`]s.
//! - [`UpstreamSession`]: one MCP session with an upstream, opened lazily on first use with the
//!   capabilities it was given, re-initialized transparently when the upstream expires it (HTTP
//!   404) or its process exits. Requests get upstream-local ids from the session, so ids of
//!   different clients never collide at the upstream.
//! - [`http`]: the Streamable HTTP transport (JSON and SSE responses, the GET stream).
//! - [`stdio`]: the stdio transport (a child process, newline-delimited JSON, stderr to the log).
//!
//! Messages the upstream sends on its own (notifications, requests) arrive as
//! [`UpstreamEvent`]s on a bounded channel given to the session's owner.

mod error;
pub mod http;
mod modern;
mod session;
pub mod stdio;

pub use error::UpstreamError;

use taskgate_protocol::{Message, MessageError};

/// Messages larger than this are parsed on tokio's blocking pool, so a multi-megabyte event
/// never holds up the I/O worker that serves other clients' streams.
const LARGE_MESSAGE: usize = 256 * 1024;

/// Parses one JSON-RPC message an upstream sent; a large one off the I/O worker.
pub(crate) async fn decode(bytes: Vec<u8>) -> Result<Result<Message, MessageError>, serde_json::Error> {
    if bytes.len() < LARGE_MESSAGE {
        return Message::from_slice(&bytes);
    }
    match tokio::task::spawn_blocking(move || Message::from_slice(&bytes)).await {
        Ok(parsed) => parsed,
        Err(e) => Err(<serde_json::Error as serde::de::Error>::custom(format!("the parser stopped: {e}"))),
    }
}
pub use session::{
    ClientIdentity, Connector, ProgressRoute, RequestObserver, SessionResume, StreamHold, UpstreamEvent,
    UpstreamSession, WeakUpstreamSession,
};
