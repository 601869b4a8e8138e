//! The calls of a session whose wrapped tasks are made and not yet shown, while they may ask
//! their first questions in the call (the behaviour is `asking_first.rs`).

use std::time::Duration;

use actix::SpawnHandle;
use foldhash::{HashMap, HashMapExt};
use serde_json::Value;
use taskgate_protocol::RequestId;

/// The calls whose tasks wait to be shown: none in most sessions, so one word until then.
#[derive(Default)]
pub(super) struct Unshown(Option<Box<HashMap<RequestId, Pending>>>);

/// A call's task, made and not yet shown.
pub(super) struct Pending {
    pub task: String,
    /// The `CreateTaskResult` the call is answered with.
    pub result: Value,
    /// How long the call waits once no question is outstanding.
    pub wait: Duration,
    /// Shows the task when the wait is over.
    pub timer: Option<SpawnHandle>,
    /// Shows the task when it ends.
    pub ended: Option<SpawnHandle>,
}

impl Unshown {
    pub(super) fn get_mut(&mut self, id: &RequestId) -> Option<&mut Pending> {
        self.0.as_mut()?.get_mut(id)
    }

    pub(super) fn take(&mut self, id: &RequestId) -> Option<Pending> {
        let calls = self.0.as_mut()?;
        let pending = calls.remove(id);
        if calls.is_empty() {
            self.0 = None;
        }
        pending
    }

    /// Whether `task` is one a call waits to show (its questions go on that call's stream).
    pub(super) fn holds_task(&self, task: &str) -> bool {
        self.call_of(task).is_some()
    }

    pub(super) fn call_of(&self, task: &str) -> Option<RequestId> {
        self.0.as_ref()?.iter().find(|(_, p)| p.task == task).map(|(id, _)| id.clone())
    }

    pub(super) fn insert(&mut self, id: RequestId, pending: Pending) {
        self.0.get_or_insert_with(|| Box::new(HashMap::new())).insert(id, pending);
    }

    /// Every call's task, the table emptied.
    pub(super) fn take_all(&mut self) -> Vec<Pending> {
        self.0.take().map(|calls| calls.into_values().collect()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(task: &str) -> Pending {
        Pending { task: task.into(), result: Value::Null, wait: Duration::from_millis(1), timer: None, ended: None }
    }

    #[test]
    fn a_call_is_found_by_its_task_until_taken_and_an_empty_table_holds_nothing() {
        let mut unshown = Unshown::default();
        unshown.insert(RequestId::Number(1), pending("t1"));
        unshown.insert(RequestId::Number(2), pending("t2"));
        assert_eq!(unshown.call_of("t2"), Some(RequestId::Number(2)));
        assert!(unshown.holds_task("t1") && !unshown.holds_task("t3"));
        assert_eq!(unshown.take(&RequestId::Number(1)).map(|p| p.task), Some("t1".into()));
        assert!(unshown.take(&RequestId::Number(1)).is_none(), "taken once");
        assert!(unshown.0.is_some());
        unshown.take(&RequestId::Number(2));
        assert!(unshown.0.is_none(), "the table goes with its last call");
        unshown.insert(RequestId::Number(3), pending("t3"));
        assert_eq!(unshown.take_all().len(), 1);
        assert!(unshown.0.is_none() && !unshown.holds_task("t3"));
    }
}
