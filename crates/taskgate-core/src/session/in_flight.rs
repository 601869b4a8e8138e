//! The client's requests in flight in one session, and their routing: which upstream request
//! stands for each, so that what an upstream sends about its request reaches the client's.

use actix::{Addr, SpawnHandle};
// foldhash: the maps of ids on every request's path hash in a few instructions, not SipHash's
// hundreds; its seeds are random per map.
use foldhash::{HashMap, HashMapExt};
use taskgate_protocol::RequestId;

use crate::outbound::Outbound;
use crate::progress::ProgressActor;

/// Who decides whether a `tools/call` becomes a task: part of the internal request model, set
/// by the front door from the client's revision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TaskMode {
    /// The client: a `task` param asks for one (2025-11-25 "Tool-Level Negotiation").
    #[default]
    Requested,
    /// The gateway: a tool that may run as a task does when the client can take a task
    /// (`accepts`); a tool that must run as a task is refused (-32021) to a client that cannot.
    /// A `task` param is ignored.
    GatewayDecides {
        /// The client declared it can take a task.
        accepts: bool,
    },
}

/// A client request in flight.
pub(super) struct InFlight {
    pub reply: Outbound,
    /// The upstream and its id for the request, once it was sent there.
    upstream: Option<(String, RequestId)>,
    /// For `tasks/result`: the task waited on (requests for that task go on this stream).
    pub task: Option<String>,
    /// A task-augmented request: `notifications/cancelled` does not apply (tasks/cancel does).
    pub task_augmented: bool,
    /// Who decides whether a `tools/call` becomes a task.
    pub mode: TaskMode,
    /// The running upstream call, stopped on cancellation.
    pub running: Option<SpawnHandle>,
    /// The request's progress token's actor.
    pub progress: Option<Addr<ProgressActor>>,
    /// The client request's span.
    pub span: tracing::Span,
    /// The client request's OAuth access token, while an upstream exchanges callers' tokens.
    pub subject: Option<taskgate_upstream::Subject>,
}

impl InFlight {
    pub fn new(
        reply: Outbound,
        task: Option<String>,
        task_augmented: bool,
        mode: TaskMode,
        span: tracing::Span,
        subject: Option<taskgate_upstream::Subject>,
    ) -> InFlight {
        InFlight { reply, upstream: None, task, task_augmented, mode, running: None, progress: None, span, subject }
    }

    /// The upstream the request was sent to, and its id there.
    pub fn upstream(&self) -> Option<&(String, RequestId)> {
        self.upstream.as_ref()
    }
}

/// The requests in flight, by the client's id, and the route from each upstream request back.
#[derive(Default)]
pub(super) struct Requests {
    by_client: HashMap<RequestId, InFlight>,
    /// (upstream, upstream-local id) → the client's id.
    by_upstream: HashMap<(String, RequestId), RequestId>,
}

/// Removes `key`; a table left empty gives its memory back, so that an idle session holds
/// none for its requests (a first insert reserves room for several: about 600 bytes for the
/// requests, 300 for their routes, kept for the session's life though most sessions are idle
/// most of the time). The next request allocates again: one allocation per request.
fn remove_freeing<K: std::hash::Hash + Eq, V>(map: &mut HashMap<K, V>, key: &K) -> Option<V> {
    let removed = map.remove(key);
    if map.is_empty() {
        map.shrink_to_fit();
    }
    removed
}

impl Requests {
    pub fn new() -> Requests {
        Requests { by_client: HashMap::new(), by_upstream: HashMap::new() }
    }

    pub fn len(&self) -> usize {
        self.by_client.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_client.is_empty()
    }

    pub fn contains(&self, id: &RequestId) -> bool {
        self.by_client.contains_key(id)
    }

    pub fn get(&self, id: &RequestId) -> Option<&InFlight> {
        self.by_client.get(id)
    }

    pub fn get_mut(&mut self, id: &RequestId) -> Option<&mut InFlight> {
        self.by_client.get_mut(id)
    }

    /// The client's ids of every request in flight.
    pub fn ids(&self) -> Vec<RequestId> {
        self.by_client.keys().cloned().collect()
    }

    /// A request the session admitted.
    pub fn admit(&mut self, id: RequestId, request: InFlight) {
        self.by_client.insert(id, request);
    }

    /// Forgets a request and its route.
    pub fn end(&mut self, id: &RequestId) -> Option<InFlight> {
        let request = remove_freeing(&mut self.by_client, id)?;
        if let Some(key) = &request.upstream {
            remove_freeing(&mut self.by_upstream, key);
        }
        Some(request)
    }

    /// Request `id` goes to `upstream` as its `upstream_id` (in place of where it went before,
    /// for a request tried at one upstream after another).
    pub fn sent(&mut self, id: &RequestId, upstream: &str, upstream_id: &RequestId) {
        let Some(request) = self.by_client.get_mut(id) else { return };
        if let Some(old) = request.upstream.replace((upstream.to_owned(), upstream_id.clone())) {
            self.by_upstream.remove(&old);
        }
        self.by_upstream.insert((upstream.to_owned(), upstream_id.clone()), id.clone());
    }

    /// The client's request that `upstream`'s request `upstream_id` stands for.
    pub fn for_upstream(&self, upstream: &str, upstream_id: &RequestId) -> Option<&InFlight> {
        self.by_upstream.get(&(upstream.to_owned(), upstream_id.clone())).and_then(|id| self.by_client.get(id))
    }

    /// A `tasks/result` request of the client waiting on `task`.
    pub fn waiting_on(&self, task: &str) -> Option<&InFlight> {
        self.by_client.values().find(|r| r.task.as_deref() == Some(task))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(task: Option<&str>) -> InFlight {
        let limits = crate::outbound::Limits { messages: 4, bytes: 1 << 16, stall: std::time::Duration::from_secs(1) };
        let budget = crate::outbound::SessionBudget::new(1 << 16);
        let (reply, _rx) = crate::outbound::channel(limits, budget, Box::new(|_| {}));
        InFlight::new(reply, task.map(str::to_owned), false, TaskMode::Requested, tracing::Span::none(), None)
    }

    #[test]
    fn a_request_is_found_by_its_upstream_id_until_it_ends_or_moves() {
        let mut requests = Requests::new();
        let (client, first, second) = (RequestId::Number(7), RequestId::Number(1), RequestId::Number(2));
        requests.admit(client.clone(), request(None));
        assert!(requests.for_upstream("a", &first).is_none());
        requests.sent(&client, "a", &first);
        assert!(requests.for_upstream("a", &first).is_some());
        assert!(requests.for_upstream("b", &first).is_none(), "an id is an upstream's own");
        // Tried again at another upstream: the old route goes.
        requests.sent(&client, "b", &second);
        assert!(requests.for_upstream("a", &first).is_none());
        assert_eq!(requests.get(&client).and_then(InFlight::upstream), Some(&("b".to_owned(), second.clone())));
        assert!(requests.end(&client).is_some());
        assert!(requests.for_upstream("b", &second).is_none());
        assert!(requests.end(&client).is_none(), "ended once");
        assert!(requests.is_empty());
    }

    #[test]
    fn tasks_result_requests_are_found_by_their_task() {
        let mut requests = Requests::new();
        requests.admit(RequestId::Number(1), request(Some("t1")));
        requests.admit(RequestId::Number(2), request(None));
        assert!(requests.waiting_on("t1").is_some());
        assert!(requests.waiting_on("t2").is_none());
        // A request that never went upstream ends without a route to forget.
        requests.sent(&RequestId::Number(9), "a", &RequestId::Number(1));
        assert!(requests.for_upstream("a", &RequestId::Number(1)).is_none(), "no route for an unknown request");
        requests.end(&RequestId::Number(1));
        assert!(requests.waiting_on("t1").is_none());
        assert_eq!(requests.len(), 1);
    }
}
