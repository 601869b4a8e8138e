//! The requests upstreams asked the client through one session (elicitation, sampling, roots),
//! by the id the gateway gave each: who asked, for which task, on which stream, and the ids
//! the next ones go under.

use foldhash::{HashMap, HashMapExt};
use serde_json::Value;
use taskgate_protocol::RequestId;

use crate::outbound::Outbound;

/// Requests relayed to the client and not yet answered, per session.
pub(super) const MAX_ASKED: usize = 1024;

/// A request an upstream sent that was relayed to the client.
pub(super) struct Relayed {
    /// Who asked, and takes the answer.
    pub asker: Asker,
    pub task: Option<String>,
    /// The progress token in the upstream's request: client progress naming it goes back there.
    pub progress_token: Option<Value>,
    /// The stream it went on (empty while queued): its cancellation follows it there.
    pub stream: Option<Outbound>,
}

/// Where the answer to a relayed request goes.
#[derive(PartialEq)]
pub(super) enum Asker {
    /// An upstream of this session, under its own id for the request.
    Upstream { upstream: String, id: RequestId },
    /// A task that runs on another replica: its input request, by its key there (read from
    /// the shared store; the answer goes back through the store's events).
    Replica { key: String },
}

/// The unanswered requests, by the gateway's id for each.
pub(super) struct Asked {
    by_id: HashMap<RequestId, Relayed>,
    next: u64,
    /// This session's own part of every relayed id: a task's input request keys MUST be unique
    /// over the task's lifetime (ext-tasks "Task Update Requests"), and a long task's requests
    /// may be relayed by several sessions (a pooled session re-created, a task taken over by
    /// another replica), each counting from 1.
    prefix: String,
}

impl Asked {
    pub fn new() -> Asked {
        Asked { by_id: HashMap::new(), next: 1, prefix: format!("{:016x}", uuid::Uuid::new_v4().as_u64_pair().0) }
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    pub fn contains(&self, id: &RequestId) -> bool {
        self.by_id.contains_key(id)
    }

    /// Whether one more may wait for the client's answer.
    pub fn has_room(&self) -> bool {
        self.by_id.len() < MAX_ASKED
    }

    /// The id the next relayed request goes under.
    pub fn next_id(&self) -> RequestId {
        RequestId::String(format!("taskgate-{}-{}", self.prefix, self.next))
    }

    /// The request sent under [`Asked::next_id`]; the next one gets a new id.
    pub fn sent(&mut self, id: RequestId, relayed: Relayed) {
        self.next += 1;
        self.by_id.insert(id, relayed);
    }

    /// The request answered (or withdrawn) under `id`.
    pub fn answered(&mut self, id: &RequestId) -> Option<Relayed> {
        self.by_id.remove(id)
    }

    /// The gateway's id of the request `asker` sent, if it still waits.
    pub fn id_of(&self, asker: &Asker) -> Option<RequestId> {
        self.by_id.iter().find(|(_, r)| r.asker == *asker).map(|(id, _)| id.clone())
    }

    /// Whether `asker`'s request for `task` is already relayed.
    pub fn has(&self, asker: &Asker, task: &str) -> bool {
        self.by_id.values().any(|r| r.asker == *asker && r.task.as_deref() == Some(task))
    }

    /// Whether a request of `task` waits for the client's answer.
    pub fn for_task(&self, task: &str) -> bool {
        self.by_id.values().any(|r| r.task.as_deref() == Some(task))
    }

    /// The request whose progress token is `token`.
    pub fn with_progress_token(&self, token: &Value) -> Option<&Relayed> {
        self.by_id.values().find(|r| r.progress_token.as_ref() == Some(token))
    }

    /// Forgets every request of `task`.
    pub fn forget_task(&mut self, task: &str) {
        self.by_id.retain(|_, r| r.task.as_deref() != Some(task));
    }

    /// Forgets the requests of `task` that a replica running it asked: relayed for a
    /// `tasks/result` that no longer waits, their answers have nowhere to go.
    pub fn forget_replicas(&mut self, task: &str) {
        self.by_id.retain(|_, r| !(matches!(r.asker, Asker::Replica { .. }) && r.task.as_deref() == Some(task)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn by(upstream: &str, id: i64, task: Option<&str>) -> Relayed {
        let asker = Asker::Upstream { upstream: upstream.into(), id: RequestId::Number(id) };
        Relayed { asker, task: task.map(str::to_owned), progress_token: None, stream: None }
    }

    #[test]
    fn each_request_gets_an_id_of_its_own_and_is_answered_once() {
        let mut asked = Asked::new();
        let first = asked.next_id();
        assert_eq!(asked.next_id(), first, "an id is taken only when a request is sent under it");
        asked.sent(first.clone(), by("a", 1, None));
        let second = asked.next_id();
        assert_ne!(first, second);
        asked.sent(second.clone(), by("a", 1, Some("t")));
        // Ids differ between sessions too: each has its own prefix.
        assert_ne!(Asked::new().next_id(), first);
        let asker = Asker::Upstream { upstream: "a".into(), id: RequestId::Number(1) };
        assert!(asked.has(&asker, "t"));
        assert!(asked.answered(&first).is_some());
        assert!(asked.answered(&first).is_none(), "answered once");
        assert_eq!(asked.id_of(&asker), Some(second));
        asked.forget_task("t");
        assert!(asked.is_empty());
    }

    #[test]
    fn a_replicas_requests_are_forgotten_apart_from_the_upstreams() {
        let mut asked = Asked::new();
        let mut token = by("a", 1, Some("t"));
        token.progress_token = Some(Value::from("p"));
        asked.sent(asked.next_id(), token);
        let replica = Relayed {
            asker: Asker::Replica { key: "k".into() },
            task: Some("t".into()),
            progress_token: None,
            stream: None,
        };
        asked.sent(asked.next_id(), replica);
        assert!(asked.with_progress_token(&Value::from("p")).is_some());
        asked.forget_replicas("t");
        assert_eq!(asked.len(), 1);
        assert!(asked.with_progress_token(&Value::from("p")).is_some(), "the upstream's stays");
        while asked.has_room() {
            asked.sent(asked.next_id(), by("b", 2, None));
        }
        assert_eq!(asked.len(), MAX_ASKED);
    }
}
