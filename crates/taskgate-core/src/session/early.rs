//! What an upstream says of a task before the gateway knows the task: while a native task
//! creation is in flight at an upstream, a message naming a task not known yet is held until
//! the creation settles (the upstream may speak of its task before its `CreateTaskResult`
//! reaches the gateway).

use foldhash::{HashMap, HashMapExt};
use taskgate_upstream::UpstreamEvent;

/// Upstream messages held while a native task creation is in flight, per session.
const MAX_HELD: usize = 256;

pub(super) struct Early {
    /// Native task creations in flight, by upstream.
    creating: HashMap<String, usize>,
    /// Upstream messages held until a creation settles.
    held: Vec<(String, UpstreamEvent)>,
}

impl Early {
    pub fn new() -> Early {
        Early { creating: HashMap::new(), held: Vec::new() }
    }

    /// A native task creation at `upstream` started.
    pub fn creating(&mut self, upstream: &str) {
        *self.creating.entry(upstream.to_owned()).or_default() += 1;
    }

    /// Whether a creation is in flight at `upstream`.
    pub fn is_creating(&self, upstream: &str) -> bool {
        self.creating.get(upstream).is_some_and(|n| *n > 0)
    }

    /// Holds `event` of `upstream` (where a creation is in flight): false when as many are
    /// held as a session may hold, and it is dropped.
    pub fn hold(&mut self, upstream: String, event: UpstreamEvent) -> bool {
        if self.held.len() >= MAX_HELD {
            return false;
        }
        self.held.push((upstream, event));
        true
    }

    /// A creation at `upstream` settled: what was held, in order, to look at again.
    pub fn created(&mut self, upstream: &str) -> Vec<(String, UpstreamEvent)> {
        if let Some(n) = self.creating.get_mut(upstream) {
            *n = n.saturating_sub(1);
        }
        std::mem::take(&mut self.held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(n: u64) -> UpstreamEvent {
        UpstreamEvent::Notification { method: format!("m{n}"), params: None, related: None }
    }

    #[test]
    fn messages_wait_for_a_creation_in_order_and_within_a_bound() {
        let mut early = Early::new();
        assert!(!early.is_creating("a"));
        early.creating("a");
        assert!(early.is_creating("a"));
        assert!(!early.is_creating("b"), "only the upstream creating holds");
        assert!(early.hold("a".into(), event(1)));
        assert!(early.hold("a".into(), event(2)));
        let replayed = early.created("a");
        let methods: Vec<String> = replayed
            .into_iter()
            .map(|(_, e)| match e {
                UpstreamEvent::Notification { method, .. } => method,
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(methods, ["m1", "m2"]);
        assert!(!early.is_creating("a"));
        early.creating("a");
        for n in 0..MAX_HELD as u64 {
            assert!(early.hold("a".into(), event(n)));
        }
        assert!(!early.hold("a".into(), event(0)), "dropped over the bound");
    }
}
