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

mod client;
mod connector;
mod credentials;
mod endpoint;
mod error;
mod events;
pub mod http;
mod identity;
mod observer;
mod pool;
mod revision;
mod revision_2026;
mod routes;
mod session;
mod shared;
pub mod stdio;
pub mod trace_context;
mod transport;
mod wire;

pub use error::UpstreamError;

use taskgate_protocol::{Message, MessageError, Reply, RequestId};

/// Messages larger than this are parsed on tokio's blocking pool, so a multi-megabyte event
/// never holds up the I/O worker that serves other clients' streams.
const LARGE_MESSAGE: usize = 256 * 1024;

/// Parses one JSON-RPC message an upstream sent; a large one off the I/O worker.
pub(crate) async fn decode(bytes: Vec<u8>) -> Result<Result<Message, MessageError>, serde_json::Error> {
    parse_sized(bytes.len(), move || Message::from_slice(&bytes)).await
}

/// [`decode`], a result to a request that `passing` names kept as the text it came as, in the
/// message's own bytes ([`Reply::from_vec`]).
pub(crate) async fn decode_reply<F>(
    bytes: Vec<u8>,
    passing: F,
) -> Result<Result<Reply, MessageError>, serde_json::Error>
where
    F: Fn(&RequestId) -> bool + Send + 'static,
{
    parse_sized(bytes.len(), move || Reply::from_vec(bytes, passing)).await
}

/// [`decode_reply`] of text (an SSE event's data, already UTF-8).
pub(crate) async fn decode_text<F>(text: String, passing: F) -> Result<Result<Reply, MessageError>, serde_json::Error>
where
    F: Fn(&RequestId) -> bool + Send + 'static,
{
    parse_sized(text.len(), move || Reply::from_string(text, passing)).await
}

/// Runs `parse` of a message of `len` bytes here, or on tokio's blocking pool when it is large.
async fn parse_sized<T, P>(len: usize, parse: P) -> Result<T, serde_json::Error>
where
    T: Send + 'static,
    P: FnOnce() -> Result<T, serde_json::Error> + Send + 'static,
{
    if len < LARGE_MESSAGE {
        return parse();
    }
    match tokio::task::spawn_blocking(parse).await {
        Ok(parsed) => parsed,
        Err(e) => Err(<serde_json::Error as serde::de::Error>::custom(format!("the parser stopped: {e}"))),
    }
}

pub use connector::Connector;
pub use endpoint::{ProcessShare, Reclaim};
pub use events::{channel, event_channel, EventReceiver, EventSender, NotSent, Receiver, Sender, UpstreamEvent};
pub use identity::{current_subject, for_subject, made_for, Caller, ClientIdentity, SessionResume, Subject};
pub use observer::RequestObserver;
pub use routes::{ProgressRoute, StreamHold};
pub use session::{CallState, UpstreamSession, WaitingCall, WeakUpstreamSession};

/// A table that emptied after a burst keeps its peak capacity until told otherwise: one whose
/// last entry just went gives it back above this many slots.
const SHRINK_EMPTY_ABOVE: usize = 64;

/// Removes `key`; a table left empty gives back a large capacity (see [`SHRINK_EMPTY_ABOVE`]).
pub(crate) fn remove_and_shrink<K, V, Q>(map: &mut foldhash::HashMap<K, V>, key: &Q) -> Option<V>
where
    K: std::borrow::Borrow<Q> + std::hash::Hash + Eq,
    Q: std::hash::Hash + Eq + ?Sized,
{
    let removed = map.remove(key);
    if map.is_empty() && map.capacity() > SHRINK_EMPTY_ABOVE {
        map.shrink_to_fit();
    }
    removed
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_table_emptied_after_a_burst_gives_its_capacity_back() {
        let mut map = foldhash::HashMap::default();
        for i in 0..10_000u32 {
            map.insert(i, ());
        }
        for i in 0..9_999u32 {
            assert_eq!(super::remove_and_shrink(&mut map, &i), Some(()));
        }
        // Not shrunk while an entry is left. (Not `>= 10_000`: a removal that leaves a
        // tombstone takes its slot out of the reported capacity until the table is rebuilt, so
        // the figure falls below the entries once held by a hash-dependent amount.)
        assert!(map.capacity() > 1_000, "not shrunk while an entry is left: {}", map.capacity());
        assert_eq!(super::remove_and_shrink(&mut map, &9_999), Some(()));
        assert!(map.capacity() <= super::SHRINK_EMPTY_ABOVE, "{}", map.capacity());
        assert_eq!(super::remove_and_shrink(&mut map, &1), None);
    }
}
