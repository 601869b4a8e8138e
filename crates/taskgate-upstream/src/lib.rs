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
mod session;
pub mod stdio;

pub use error::UpstreamError;
pub use session::{
    ClientIdentity, Connector, ProgressRoute, RequestObserver, SessionResume, UpstreamEvent, UpstreamSession,
    WeakUpstreamSession,
};
