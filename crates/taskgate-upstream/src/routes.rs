//! Where what an upstream sends goes while requests are in flight: a message read with the
//! request whose stream carried it ([`Incoming`]), progress routed by token to a request's
//! caller ([`Routes`], [`ProgressRoute`]), and the holds that keep a session's GET stream open.

use std::sync::Arc;

use serde_json::Value;
use taskgate_protocol::mcp;
use taskgate_protocol::{Message, RequestId};
use tokio::sync::{mpsc, watch};

/// A message read from an upstream, with the request whose stream carried it.
#[derive(Debug)]
pub(crate) struct Incoming {
    pub message: Message,
    pub related: Option<RequestId>,
}

/// Where notifications about an in-flight request go, so that they reach its caller before
/// its response: the caller's sink, found by the request's progress token. (Notifications on
/// a request's own SSE response stream go to its sink directly.)
#[derive(Default)]
pub(crate) struct Routes {
    pub(crate) by_token: parking_lot::Mutex<foldhash::HashMap<String, crate::Sender<Message>>>,
}

impl Routes {
    /// The sink for a notification that names a progress token of an in-flight request.
    pub(crate) fn sink_for(&self, message: &Message) -> Option<crate::Sender<Message>> {
        let Message::Notification { params: Some(params), .. } = message else { return None };
        let token = params.get(mcp::meta::PROGRESS_TOKEN)?;
        self.by_token.lock().get(&token.to_string()).cloned()
    }

    /// Delivers an unattributed message: to a request's sink when its token matches, else to
    /// the session's owner.
    pub(crate) async fn deliver(&self, message: Message, incoming: &mpsc::Sender<Box<Incoming>>) -> bool {
        let message = match self.sink_for(&message) {
            Some(sink) => match sink.send(message).await {
                Ok(()) => return true,
                // The request it belonged to has just ended: the owner decides (and drops it).
                Err(crate::NotSent(message)) => message,
            },
            None => message,
        };
        incoming.send(Box::new(Incoming { message, related: None })).await.is_ok()
    }
}

/// Routes progress naming `token` to a sink for as long as it is held (a native task's token
/// stays valid for the task's lifetime, beyond the request that created it).
pub struct ProgressRoute {
    pub(crate) routes: Arc<Routes>,
    pub(crate) key: String,
    /// The progress of a task the upstream runs may come on its GET stream.
    pub(crate) _listening: StreamHold,
}

/// Keeps an upstream session's GET stream open while held (see [`UpstreamSession::hold_stream`](crate::UpstreamSession::hold_stream)).
pub struct StreamHold {
    pub(crate) holds: Arc<watch::Sender<usize>>,
}

impl Drop for StreamHold {
    fn drop(&mut self) {
        self.holds.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// When an upstream session's GET stream is open (streamable-http "Listening for Messages from
/// the Server"): always for a client that can be asked things (an upstream may ask on it), and
/// otherwise while something holds it: the client's own GET stream, a native task's progress
/// route, a catalog session. With nothing to receive what it carries, it closes after the
/// upstream's `stream_idle_secs`.
pub(crate) struct Listening {
    pub(crate) always: bool,
    pub(crate) holds: watch::Receiver<usize>,
}

impl Listening {
    pub(crate) fn wanted(&self) -> bool {
        self.always || *self.holds.borrow() > 0
    }
}

impl Drop for ProgressRoute {
    fn drop(&mut self) {
        self.routes.by_token.lock().remove(&self.key);
    }
}

/// Registers a request's progress token while the request is in flight.
pub(crate) struct TokenRoute<'a> {
    routes: &'a Routes,
    key: Option<String>,
}

impl<'a> TokenRoute<'a> {
    pub(crate) fn new(
        routes: &'a Routes,
        params: Option<&Value>,
        sink: Option<&crate::Sender<Message>>,
    ) -> TokenRoute<'a> {
        let key = match (mcp::progress_token(params), sink) {
            (Some(token), Some(sink)) => {
                let key = token.to_string();
                routes.by_token.lock().insert(key.clone(), sink.clone());
                Some(key)
            }
            _ => None,
        };
        TokenRoute { routes, key }
    }
}

impl TokenRoute<'_> {
    /// Hands the route to a [`WaitingCall`]: its key, if a route was made.
    pub(crate) fn keep(mut self) -> Option<String> {
        self.key.take()
    }
}

impl Drop for TokenRoute<'_> {
    fn drop(&mut self) {
        if let Some(key) = &self.key {
            self.routes.by_token.lock().remove(key);
        }
    }
}
