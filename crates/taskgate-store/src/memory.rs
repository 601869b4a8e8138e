//! The in-memory [`TaskStore`]: one process, no persistence.

use std::collections::{BTreeSet, HashMap};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use parking_lot::Mutex;
use taskgate_protocol::tasks::transition;

use crate::{ListPage, Owner, StoreError, StoreFuture, TaskRecord, TaskStore, Update};

/// Tasks in a map, with an index per owner (for listing) and one by expiry time.
pub struct MemoryTaskStore {
    inner: Mutex<Inner>,
    max_tasks: usize,
}

#[derive(Default)]
struct Inner {
    by_id: HashMap<String, TaskRecord>,
    by_owner: HashMap<Owner, BTreeSet<(u64, String)>>,
    by_expiry: BTreeSet<(u64, String)>,
}

impl Inner {
    fn remove(&mut self, id: &str) -> Option<TaskRecord> {
        let record = self.by_id.remove(id)?;
        if let Some(set) = self.by_owner.get_mut(&record.owner) {
            set.remove(&(record.created_at_ms, record.id.clone()));
            if set.is_empty() {
                self.by_owner.remove(&record.owner);
            }
        }
        if let Some(at) = record.expires_at_ms() {
            self.by_expiry.remove(&(at, record.id.clone()));
        }
        Some(record)
    }
}

impl MemoryTaskStore {
    /// A store holding at most `max_tasks` tasks.
    pub fn new(max_tasks: usize) -> MemoryTaskStore {
        MemoryTaskStore { inner: Mutex::new(Inner::default()), max_tasks }
    }
}

fn ready<'a, T: Send + 'a>(value: Result<T, StoreError>) -> StoreFuture<'a, T> {
    Box::pin(std::future::ready(value))
}

fn encode_cursor(created: u64, id: &str) -> String {
    URL_SAFE_NO_PAD.encode(format!("tasks:{created}:{id}"))
}

fn decode_cursor(cursor: &str) -> Option<(u64, String)> {
    let text = String::from_utf8(URL_SAFE_NO_PAD.decode(cursor).ok()?).ok()?;
    let rest = text.strip_prefix("tasks:")?;
    let (created, id) = rest.split_once(':')?;
    Some((created.parse().ok()?, id.to_owned()))
}

impl TaskStore for MemoryTaskStore {
    fn create(&self, record: TaskRecord) -> StoreFuture<'_, ()> {
        let mut inner = self.inner.lock();
        if inner.by_id.len() >= self.max_tasks {
            return ready(Err(StoreError::Full { limit: self.max_tasks }));
        }
        if inner.by_id.contains_key(&record.id) {
            return ready(Err(StoreError::Backend(format!("task id {} already exists", record.id))));
        }
        inner.by_owner.entry(record.owner.clone()).or_default().insert((record.created_at_ms, record.id.clone()));
        if let Some(at) = record.expires_at_ms() {
            inner.by_expiry.insert((at, record.id.clone()));
        }
        inner.by_id.insert(record.id.clone(), record);
        ready(Ok(()))
    }

    fn get<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<TaskRecord>> {
        ready(Ok(self.inner.lock().by_id.get(id).cloned()))
    }

    fn compare_and_set<'a>(
        &'a self,
        id: &'a str,
        expected: crate::TaskStatus,
        update: Update,
    ) -> StoreFuture<'a, TaskRecord> {
        let mut inner = self.inner.lock();
        let Some(record) = inner.by_id.get_mut(id) else { return ready(Err(StoreError::NotFound)) };
        if record.status != expected {
            return ready(Err(StoreError::Conflict { current: record.status }));
        }
        if let Err(invalid) = transition(record.status, update.status) {
            return ready(Err(StoreError::Invalid(invalid)));
        }
        record.status = update.status;
        record.status_message = update.status_message;
        record.last_updated_at_ms = update.now_ms.max(record.last_updated_at_ms);
        if update.outcome.is_some() {
            record.outcome = update.outcome;
        }
        if update.upstream_task_id.is_some() {
            record.upstream_task_id = update.upstream_task_id;
        }
        ready(Ok(record.clone()))
    }

    fn list<'a>(&'a self, owner: &'a Owner, cursor: Option<&'a str>, limit: usize) -> StoreFuture<'a, ListPage> {
        let after = match cursor {
            None => None,
            Some(c) => match decode_cursor(c) {
                Some(position) => Some(position),
                None => return ready(Err(StoreError::BadCursor)),
            },
        };
        let inner = self.inner.lock();
        let Some(set) = inner.by_owner.get(owner) else {
            return ready(Ok(ListPage { tasks: Vec::new(), next_cursor: None }));
        };
        let mut iter: Box<dyn Iterator<Item = &(u64, String)>> = match &after {
            None => Box::new(set.iter()),
            Some(position) => {
                Box::new(set.range((std::ops::Bound::Excluded(position.clone()), std::ops::Bound::Unbounded)))
            }
        };
        let tasks: Vec<TaskRecord> =
            iter.by_ref().take(limit).filter_map(|(_, id)| inner.by_id.get(id).cloned()).collect();
        let next_cursor = match (iter.next(), tasks.last()) {
            (Some(_), Some(last)) => Some(encode_cursor(last.created_at_ms, &last.id)),
            _ => None,
        };
        ready(Ok(ListPage { tasks, next_cursor }))
    }

    fn expire(&self, now_ms: u64) -> StoreFuture<'_, Vec<TaskRecord>> {
        let mut inner = self.inner.lock();
        let due: Vec<String> =
            inner.by_expiry.iter().take_while(|(at, _)| *at <= now_ms).map(|(_, id)| id.clone()).collect();
        let removed = due.iter().filter_map(|id| inner.remove(id)).collect();
        ready(Ok(removed))
    }

    fn delete<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<TaskRecord>> {
        ready(Ok(self.inner.lock().remove(id)))
    }

    fn len(&self) -> usize {
        self.inner.lock().by_id.len()
    }

    fn compact(&self) {
        let mut inner = self.inner.lock();
        inner.by_id.shrink_to_fit();
        inner.by_owner.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{TaskOutcome, TaskStatus};
    use serde_json::json;

    fn owner(name: &str) -> Owner {
        Owner { tenant: "t".into(), principal: name.into() }
    }

    fn record(id: &str, owner: Owner, created: u64, ttl: Option<u64>) -> TaskRecord {
        TaskRecord {
            id: id.into(),
            owner,
            status: TaskStatus::Working,
            status_message: None,
            created_at_ms: created,
            last_updated_at_ms: created,
            ttl_ms: ttl,
            poll_interval_ms: 1000,
            upstream: "u".into(),
            upstream_task_id: None,
            outcome: None,
        }
    }

    fn block<T>(f: StoreFuture<'_, T>) -> Result<T, StoreError> {
        // Memory futures are ready at once.
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        let mut f = f;
        match f.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(v) => v,
            std::task::Poll::Pending => panic!("memory store futures are ready"),
        }
    }

    fn update(status: TaskStatus, now: u64) -> Update {
        Update { status, status_message: None, outcome: None, upstream_task_id: None, now_ms: now }
    }

    #[test]
    fn compare_and_set_checks_expected_status_and_lifecycle() {
        let s = MemoryTaskStore::new(10);
        block(s.create(record("a", owner("p"), 0, None))).unwrap();
        let done =
            Update { outcome: Some(TaskOutcome::Result(json!({"ok": true}))), ..update(TaskStatus::Completed, 5) };
        let r = block(s.compare_and_set("a", TaskStatus::Working, done)).unwrap();
        assert_eq!((r.status, r.last_updated_at_ms), (TaskStatus::Completed, 5));
        // A racing cancel that still expects `working` loses.
        assert_eq!(
            block(s.compare_and_set("a", TaskStatus::Working, update(TaskStatus::Cancelled, 6))),
            Err(StoreError::Conflict { current: TaskStatus::Completed })
        );
        // Terminal is final even when the expected status matches.
        assert!(matches!(
            block(s.compare_and_set("a", TaskStatus::Completed, update(TaskStatus::Working, 7))),
            Err(StoreError::Invalid(_))
        ));
        assert_eq!(
            block(s.compare_and_set("zz", TaskStatus::Working, update(TaskStatus::Failed, 1))),
            Err(StoreError::NotFound)
        );
    }

    #[test]
    fn listing_is_per_owner_in_creation_order_with_cursors() {
        let s = MemoryTaskStore::new(100);
        for i in 0..7 {
            block(s.create(record(&format!("a{i}"), owner("alice"), i, None))).unwrap();
        }
        block(s.create(record("b0", owner("bob"), 3, None))).unwrap();
        let mut seen = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let page = block(s.list(&owner("alice"), cursor.as_deref(), 3)).unwrap();
            seen.extend(page.tasks.iter().map(|t| t.id.clone()));
            match page.next_cursor {
                Some(c) => cursor = Some(c),
                None => break,
            }
        }
        assert_eq!(seen, ["a0", "a1", "a2", "a3", "a4", "a5", "a6"]);
        assert_eq!(block(s.list(&owner("bob"), None, 10)).unwrap().tasks.len(), 1);
        assert!(block(s.list(&owner("carol"), None, 10)).unwrap().tasks.is_empty());
        assert_eq!(block(s.list(&owner("alice"), Some("bogus"), 3)), Err(StoreError::BadCursor));
    }

    #[test]
    fn expiry_removes_exactly_the_due_tasks_from_every_index() {
        let s = MemoryTaskStore::new(100);
        block(s.create(record("short", owner("p"), 0, Some(100)))).unwrap();
        block(s.create(record("long", owner("p"), 0, Some(1000)))).unwrap();
        block(s.create(record("forever", owner("p"), 0, None))).unwrap();
        assert!(block(s.expire(99)).unwrap().is_empty());
        let gone: Vec<_> = block(s.expire(100)).unwrap().into_iter().map(|r| r.id).collect();
        assert_eq!(gone, ["short"]);
        assert_eq!(block(s.get("short")).unwrap(), None);
        assert_eq!(block(s.list(&owner("p"), None, 10)).unwrap().tasks.len(), 2);
        block(s.expire(u64::MAX)).unwrap();
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn capacity_is_bounded() {
        let s = MemoryTaskStore::new(1);
        block(s.create(record("a", owner("p"), 0, None))).unwrap();
        assert_eq!(block(s.create(record("b", owner("p"), 0, None))), Err(StoreError::Full { limit: 1 }));
        block(s.delete("a")).unwrap();
        block(s.create(record("b", owner("p"), 0, None))).unwrap();
    }
}
