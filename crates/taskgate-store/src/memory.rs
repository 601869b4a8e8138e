//! The in-memory [`TaskStore`]: one process, no persistence.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::{decode_cursor, encode_cursor, ListPage, Owner, StoreError, StoreFuture, TaskRecord, TaskStore, Update};

/// Tasks in a map, with an index per owner (for listing) and one by expiry time.
pub struct MemoryTaskStore {
    inner: Mutex<Inner>,
    max_tasks: usize,
}

#[derive(Default)]
struct Inner {
    /// Boxed: a record is about 400 bytes, and a table holds its entries inline with room to
    /// spare (up to half its slots free after it grows). The three indexes share one copy of
    /// each id.
    by_id: HashMap<Arc<str>, Box<TaskRecord>>,
    by_owner: HashMap<Owner, BTreeSet<(u64, Arc<str>)>>,
    by_expiry: BTreeSet<(u64, Arc<str>)>,
}

impl Inner {
    fn remove(&mut self, id: &str) -> Option<TaskRecord> {
        let (id, record) = self.by_id.remove_entry(id)?;
        if let Some(set) = self.by_owner.get_mut(&record.owner) {
            set.remove(&(record.created_at_ms, id.clone()));
            if set.is_empty() {
                self.by_owner.remove(&record.owner);
            }
        }
        if let Some(at) = record.expires_at_ms() {
            self.by_expiry.remove(&(at, id));
        }
        Some(*record)
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

impl TaskStore for MemoryTaskStore {
    fn create(&self, record: TaskRecord) -> StoreFuture<'_, ()> {
        let mut inner = self.inner.lock();
        if inner.by_id.len() >= self.max_tasks {
            return ready(Err(StoreError::Full { limit: self.max_tasks }));
        }
        if inner.by_id.contains_key(record.id.as_str()) {
            return ready(Err(StoreError::Backend(format!("task id {} already exists", record.id))));
        }
        let id: Arc<str> = record.id.as_str().into();
        inner.by_owner.entry(record.owner.clone()).or_default().insert((record.created_at_ms, id.clone()));
        if let Some(at) = record.expires_at_ms() {
            inner.by_expiry.insert((at, id.clone()));
        }
        inner.by_id.insert(id, Box::new(record));
        ready(Ok(()))
    }

    fn get<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<TaskRecord>> {
        ready(Ok(self.inner.lock().by_id.get(id).map(|r| TaskRecord::clone(r))))
    }

    fn compare_and_set<'a>(
        &'a self,
        id: &'a str,
        expected: crate::TaskStatus,
        update: Update,
    ) -> StoreFuture<'a, TaskRecord> {
        let mut inner = self.inner.lock();
        let Some(record) = inner.by_id.get_mut(id) else { return ready(Err(StoreError::NotFound)) };
        ready(crate::apply_update(record, expected, update).map(|()| TaskRecord::clone(record)))
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
        let mut iter: Box<dyn Iterator<Item = &(u64, Arc<str>)>> = match after {
            None => Box::new(set.iter()),
            Some((at, id)) => {
                let position = (at, Arc::from(id));
                Box::new(set.range((std::ops::Bound::Excluded(position), std::ops::Bound::Unbounded)))
            }
        };
        let tasks: Vec<TaskRecord> = iter
            .by_ref()
            .take(limit)
            .filter_map(|(_, id)| inner.by_id.get(&**id).map(|r| TaskRecord::clone(r)))
            .collect();
        let next_cursor = match (iter.next(), tasks.last()) {
            (Some(_), Some(last)) => Some(encode_cursor(last.created_at_ms, &last.id)),
            _ => None,
        };
        ready(Ok(ListPage { tasks, next_cursor }))
    }

    fn expire(&self, now_ms: u64) -> StoreFuture<'_, Vec<TaskRecord>> {
        let mut inner = self.inner.lock();
        let due: Vec<Arc<str>> =
            inner.by_expiry.iter().take_while(|(at, _)| *at <= now_ms).map(|(_, id)| id.clone()).collect();
        let removed = due.iter().filter_map(|id| inner.remove(id)).collect();
        ready(Ok(removed))
    }

    fn delete<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<TaskRecord>> {
        ready(Ok(self.inner.lock().remove(id)))
    }

    fn claim_orphans<'a>(&'a self, replica: &'a str, _now_ms: u64) -> StoreFuture<'a, Vec<TaskRecord>> {
        let mut inner = self.inner.lock();
        let claimed = inner
            .by_id
            .values_mut()
            .filter(|r| !r.status.is_terminal() && r.replica.as_deref() != Some(replica))
            .map(|r| {
                r.replica = Some(replica.to_owned());
                TaskRecord::clone(r)
            })
            .collect();
        ready(Ok(claimed))
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
