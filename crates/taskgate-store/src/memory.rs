//! The in-memory [`TaskStore`]: one process, no persistence.
//!
//! Every live task has a record here, so a record is kept small (it is most of what a task
//! costs beside its actor): the names many records share (owner, upstream, tool, replica) are
//! held once and counted, the id is the one copy the indexes share, and what a working task
//! rarely has (a status message, an outcome, an upstream task) is boxed apart.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::{
    decode_cursor, encode_cursor, ListPage, Owner, StoreError, StoreFuture, TaskOutcome, TaskRecord, TaskStatus,
    TaskStore, Update, UpstreamSessionRef,
};

/// Tasks in a map, with an index per owner (for listing) and one by expiry time.
pub struct MemoryTaskStore {
    inner: Mutex<Inner>,
    max_tasks: usize,
}

#[derive(Default)]
struct Inner {
    /// Boxed: a table holds its entries inline with room to spare (up to half its slots free
    /// after it grows). The three indexes share one copy of each id.
    by_id: HashMap<Arc<str>, Box<Stored>>,
    /// Keyed by the one copy of each owner the records share.
    by_owner: HashMap<Arc<Owner>, BTreeSet<(u64, Arc<str>)>>,
    by_expiry: BTreeSet<(u64, Arc<str>)>,
    /// Upstream, tool and replica names in use, one copy each.
    names: Names,
    /// Client sessions' records (kept until deleted: the conformance suite's backend).
    sessions: HashMap<String, crate::SessionRecord>,
    activated: HashMap<String, std::collections::BTreeSet<String>>,
}

/// A record as the table keeps it (its id is the table's key).
struct Stored {
    owner: Arc<Owner>,
    upstream: Arc<str>,
    tool: Arc<str>,
    replica: Option<Arc<str>>,
    status: TaskStatus,
    created_at_ms: u64,
    last_updated_at_ms: u64,
    ttl_ms: Option<u64>,
    poll_interval_ms: u64,
    rare: Option<Box<Extras>>,
}

/// The fields a working task usually has none of.
#[derive(Default)]
struct Extras {
    status_message: Option<String>,
    upstream_task_id: Option<String>,
    upstream_session: Option<UpstreamSessionRef>,
    outcome: Option<TaskOutcome>,
}

impl Extras {
    fn boxed(rare: Extras) -> Option<Box<Extras>> {
        let empty = rare.status_message.is_none()
            && rare.upstream_task_id.is_none()
            && rare.upstream_session.is_none()
            && rare.outcome.is_none();
        (!empty).then(|| Box::new(rare))
    }
}

/// Names shared by many records, each held once while a record uses it.
#[derive(Default)]
struct Names(HashSet<Arc<str>>);

impl Names {
    fn intern(&mut self, name: String) -> Arc<str> {
        if let Some(held) = self.0.get(name.as_str()) {
            return held.clone();
        }
        let held: Arc<str> = name.into();
        self.0.insert(held.clone());
        held
    }

    /// Lets go of a record's copy of a name: the last copy out takes the name out.
    fn release(&mut self, name: Arc<str>) {
        // The set's copy and this one.
        if Arc::strong_count(&name) <= 2 {
            self.0.remove(&name);
        }
    }
}

impl Stored {
    fn expires_at_ms(&self) -> Option<u64> {
        self.ttl_ms.map(|ttl| self.created_at_ms.saturating_add(ttl))
    }

    fn record(&self, id: &str) -> TaskRecord {
        let rare = self.rare.as_deref();
        TaskRecord {
            id: id.to_owned(),
            owner: Owner::clone(&self.owner),
            status: self.status,
            status_message: rare.and_then(|r| r.status_message.clone()),
            created_at_ms: self.created_at_ms,
            last_updated_at_ms: self.last_updated_at_ms,
            ttl_ms: self.ttl_ms,
            poll_interval_ms: self.poll_interval_ms,
            upstream: self.upstream.to_string(),
            tool: self.tool.to_string(),
            upstream_task_id: rare.and_then(|r| r.upstream_task_id.clone()),
            upstream_session: rare.and_then(|r| r.upstream_session.clone()),
            replica: self.replica.as_deref().map(str::to_owned),
            outcome: rare.and_then(|r| r.outcome.clone()),
        }
    }

    /// Takes what an update may change from `record` (this record, updated).
    fn take_changes(&mut self, names: &mut Names, record: &TaskRecord) {
        self.status = record.status;
        self.last_updated_at_ms = record.last_updated_at_ms;
        let upstream_session = self.rare.take().and_then(|r| r.upstream_session);
        self.rare = Extras::boxed(Extras {
            status_message: record.status_message.clone(),
            upstream_task_id: record.upstream_task_id.clone(),
            upstream_session,
            outcome: record.outcome.clone(),
        });
        if record.replica.is_none() {
            if let Some(replica) = self.replica.take() {
                names.release(replica);
            }
        }
    }
}

impl Inner {
    fn insert(&mut self, record: TaskRecord) {
        let TaskRecord {
            id,
            owner,
            status,
            status_message,
            created_at_ms,
            last_updated_at_ms,
            ttl_ms,
            poll_interval_ms,
            upstream,
            tool,
            upstream_task_id,
            upstream_session,
            replica,
            outcome,
        } = record;
        let id: Arc<str> = id.into();
        let owner = match self.by_owner.get_key_value(&owner) {
            Some((held, _)) => held.clone(),
            None => Arc::new(owner),
        };
        self.by_owner.entry(owner.clone()).or_default().insert((created_at_ms, id.clone()));
        let stored = Stored {
            owner,
            upstream: self.names.intern(upstream),
            tool: self.names.intern(tool),
            replica: replica.map(|r| self.names.intern(r)),
            status,
            created_at_ms,
            last_updated_at_ms,
            ttl_ms,
            poll_interval_ms,
            rare: Extras::boxed(Extras { status_message, upstream_task_id, upstream_session, outcome }),
        };
        if let Some(at) = stored.expires_at_ms() {
            self.by_expiry.insert((at, id.clone()));
        }
        self.by_id.insert(id, Box::new(stored));
    }

    fn remove(&mut self, id: &str) -> Option<TaskRecord> {
        let (id, stored) = self.by_id.remove_entry(id)?;
        let record = stored.record(&id);
        if let Some(set) = self.by_owner.get_mut(&stored.owner) {
            set.remove(&(stored.created_at_ms, id.clone()));
            if set.is_empty() {
                self.by_owner.remove(&stored.owner);
            }
        }
        if let Some(at) = stored.expires_at_ms() {
            self.by_expiry.remove(&(at, id));
        }
        let Stored { upstream, tool, replica, .. } = *stored;
        self.names.release(upstream);
        self.names.release(tool);
        if let Some(replica) = replica {
            self.names.release(replica);
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

impl TaskStore for MemoryTaskStore {
    fn create(&self, record: TaskRecord) -> StoreFuture<'_, ()> {
        let mut inner = self.inner.lock();
        if inner.by_id.len() >= self.max_tasks {
            return ready(Err(StoreError::Full { limit: self.max_tasks }));
        }
        if inner.by_id.contains_key(record.id.as_str()) {
            return ready(Err(StoreError::Backend(format!("task id {} already exists", record.id))));
        }
        inner.insert(record);
        ready(Ok(()))
    }

    fn get<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<TaskRecord>> {
        ready(Ok(self.inner.lock().by_id.get_key_value(id).map(|(id, stored)| stored.record(id))))
    }

    fn compare_and_set<'a>(&'a self, id: &'a str, expected: TaskStatus, update: Update) -> StoreFuture<'a, TaskRecord> {
        let mut guard = self.inner.lock();
        let Inner { by_id, names, .. } = &mut *guard;
        let Some(stored) = by_id.get_mut(id) else { return ready(Err(StoreError::NotFound)) };
        let mut record = stored.record(id);
        if let Err(e) = crate::apply_update(&mut record, expected, update) {
            return ready(Err(e));
        }
        stored.take_changes(names, &record);
        ready(Ok(record))
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
            .filter_map(|(_, id)| inner.by_id.get(&**id).map(|stored| stored.record(id)))
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
        let mut guard = self.inner.lock();
        let Inner { by_id, names, .. } = &mut *guard;
        let mut claimed = Vec::new();
        for (id, stored) in by_id.iter_mut() {
            if stored.status.is_terminal() || stored.replica.as_deref() == Some(replica) {
                continue;
            }
            if let Some(previous) = stored.replica.replace(names.intern(replica.to_owned())) {
                names.release(previous);
            }
            claimed.push(stored.record(id));
        }
        ready(Ok(claimed))
    }

    fn len(&self) -> usize {
        self.inner.lock().by_id.len()
    }

    fn scan_tasks<'a>(
        &'a self,
        filter: &'a crate::TaskFilter,
        cursor: Option<&'a str>,
        limit: usize,
    ) -> StoreFuture<'a, crate::Page<TaskRecord>> {
        let before = match cursor {
            None => None,
            Some(c) => match decode_cursor(c) {
                Some(position) => Some(position),
                None => return ready(Err(StoreError::BadCursor)),
            },
        };
        // Matched and ordered on the stored fields; only the page's records are made (a
        // result is copied for those alone), so the table is held for a pass over it.
        let inner = self.inner.lock();
        let matches = |stored: &Stored| {
            filter.tenant.as_ref().is_none_or(|t| *t == stored.owner.tenant)
                && filter.principal.as_ref().is_none_or(|p| *p == stored.owner.principal)
                && filter.status.is_none_or(|s| s == stored.status)
                && filter.upstream.as_ref().is_none_or(|u| **u == *stored.upstream)
        };
        let mut positions: Vec<(u64, &Arc<str>)> = inner
            .by_id
            .iter()
            .filter(|(id, stored)| {
                matches(stored)
                    && before.as_ref().is_none_or(|(at, b)| (stored.created_at_ms, &***id) < (*at, b.as_str()))
            })
            .map(|(id, stored)| (stored.created_at_ms, id))
            .collect();
        let wanted = (limit + 1).min(positions.len());
        if wanted > 0 && wanted < positions.len() {
            positions.select_nth_unstable_by(wanted - 1, |a, b| (b.0, &**b.1).cmp(&(a.0, &**a.1)));
        }
        positions.truncate(wanted);
        positions.sort_unstable_by(|a, b| (b.0, &**b.1).cmp(&(a.0, &**a.1)));
        let more = positions.len() > limit;
        positions.truncate(limit);
        let items: Vec<TaskRecord> = positions.iter().map(|(_, id)| inner.by_id[*id].record(id)).collect();
        let next_cursor = match (more, items.last()) {
            (true, Some(last)) => Some(encode_cursor(last.created_at_ms, &last.id)),
            _ => None,
        };
        ready(Ok(crate::Page { items, next_cursor }))
    }

    fn scan_sessions<'a>(
        &'a self,
        cursor: Option<&'a str>,
        limit: usize,
    ) -> StoreFuture<'a, crate::Page<crate::SessionEntry>> {
        let inner = self.inner.lock();
        let mut ids: Vec<&String> = inner.sessions.keys().filter(|id| cursor.is_none_or(|c| id.as_str() > c)).collect();
        ids.sort();
        let more = ids.len() > limit;
        ids.truncate(limit);
        let items: Vec<crate::SessionEntry> =
            ids.iter().map(|id| ((*id).clone(), inner.sessions[*id].clone())).collect();
        let next_cursor = if more { items.last().map(|(id, _)| id.clone()) } else { None };
        ready(Ok(crate::Page { items, next_cursor }))
    }

    fn describe(&self) -> StoreFuture<'_, crate::StoreInfo> {
        let info = crate::StoreInfo {
            backend: "memory",
            location: "this process".into(),
            shared: self.shared(),
            tasks: self.len(),
            leases: None,
        };
        ready(Ok(info))
    }

    fn put_session<'a>(&'a self, id: &'a str, record: &'a crate::SessionRecord, _keep_ms: u64) -> StoreFuture<'a, ()> {
        self.inner.lock().sessions.insert(id.to_owned(), record.clone());
        ready(Ok(()))
    }

    fn session<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<crate::SessionRecord>> {
        ready(Ok(self.inner.lock().sessions.get(id).cloned()))
    }

    fn change_session<'a>(&'a self, id: &'a str, change: crate::SessionChange, _keep_ms: u64) -> StoreFuture<'a, bool> {
        let mut inner = self.inner.lock();
        let Some(record) = inner.sessions.get_mut(id) else { return ready(Ok(false)) };
        record.apply(&change);
        ready(Ok(true))
    }

    fn delete_session<'a>(&'a self, id: &'a str) -> StoreFuture<'a, bool> {
        ready(Ok(self.inner.lock().sessions.remove(id).is_some()))
    }

    fn activate<'a>(&'a self, key: &'a str, names: &'a [String], _keep_ms: u64) -> StoreFuture<'a, ()> {
        let mut inner = self.inner.lock();
        let held = inner.activated.entry(key.to_owned()).or_default();
        for name in names {
            if held.len() < crate::MAX_ACTIVATED {
                held.insert(name.clone());
            }
        }
        ready(Ok(()))
    }

    fn activated<'a>(&'a self, key: &'a str, _keep_ms: u64) -> StoreFuture<'a, Vec<String>> {
        ready(Ok(self.inner.lock().activated.get(key).map(|held| held.iter().cloned().collect()).unwrap_or_default()))
    }

    fn compact(&self) {
        let mut inner = self.inner.lock();
        inner.by_id.shrink_to_fit();
        inner.by_owner.shrink_to_fit();
        inner.names.0.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, tenant: &str, upstream: &str, tool: &str) -> TaskRecord {
        TaskRecord {
            id: id.into(),
            owner: Owner { tenant: tenant.into(), principal: "p".into() },
            status: TaskStatus::Working,
            status_message: None,
            created_at_ms: 1,
            last_updated_at_ms: 1,
            ttl_ms: Some(10),
            poll_interval_ms: 1000,
            upstream: upstream.into(),
            tool: tool.into(),
            upstream_task_id: None,
            upstream_session: None,
            replica: Some("r1".into()),
            outcome: None,
        }
    }

    fn names(store: &MemoryTaskStore) -> Vec<String> {
        let mut names: Vec<String> = store.inner.lock().names.0.iter().map(|n| n.to_string()).collect();
        names.sort();
        names
    }

    #[tokio::test]
    async fn records_share_one_copy_of_each_name_and_the_last_record_out_takes_it() {
        let store = MemoryTaskStore::new(10);
        // A tool named as its upstream: one name, two uses in one record.
        store.create(record("a", "t1", "echo", "echo")).await.unwrap();
        store.create(record("b", "t1", "echo", "wait")).await.unwrap();
        store.create(record("c", "t2", "other", "wait")).await.unwrap();
        assert_eq!(names(&store), ["echo", "other", "r1", "wait"]);
        {
            let inner = store.inner.lock();
            let (a, b) = (&inner.by_id["a"], &inner.by_id["b"]);
            assert!(Arc::ptr_eq(&a.upstream, &b.upstream) && Arc::ptr_eq(&a.owner, &b.owner));
            assert!(Arc::ptr_eq(&a.upstream, &a.tool));
            assert_eq!(inner.by_owner.len(), 2);
        }
        store.delete("c").await.unwrap();
        assert_eq!(names(&store), ["echo", "r1", "wait"]);
        assert_eq!(store.inner.lock().by_owner.len(), 1);
        // A terminal task lets go of its replica.
        let done = Update {
            status: TaskStatus::Completed,
            status_message: None,
            outcome: Some(TaskOutcome::Result(serde_json::json!({"content": []}))),
            upstream_task_id: None,
            upstream_session: None,
            now_ms: 2,
        };
        store.compare_and_set("a", TaskStatus::Working, done.clone()).await.unwrap();
        store.compare_and_set("b", TaskStatus::Working, done).await.unwrap();
        assert_eq!(names(&store), ["echo", "wait"]);
        let a = store.get("a").await.unwrap().unwrap();
        assert_eq!((a.status, a.replica, a.tool.as_str()), (TaskStatus::Completed, None, "echo"));
        assert!(a.outcome.is_some());
        assert_eq!(store.expire(100).await.unwrap().len(), 2);
        assert!(names(&store).is_empty() && store.inner.lock().by_owner.is_empty());
    }

    #[tokio::test]
    async fn a_record_reads_back_as_it_was_written_rare_fields_included() {
        let store = MemoryTaskStore::new(10);
        let mut full = record("a", "t1", "up", "tool");
        full.status = TaskStatus::InputRequired;
        full.status_message = Some("waiting".into());
        full.upstream_task_id = Some("u-1".into());
        full.upstream_session =
            Some(UpstreamSessionRef { session_id: "s".into(), protocol_version: "2025-11-25".into() });
        full.ttl_ms = None;
        store.create(full.clone()).await.unwrap();
        assert_eq!(store.get("a").await.unwrap(), Some(full.clone()));
        let plain = record("b", "t1", "up", "tool");
        store.create(plain.clone()).await.unwrap();
        assert_eq!(store.get("b").await.unwrap(), Some(plain));
        assert!(store.inner.lock().by_id["b"].rare.is_none());
        // An update keeps what it does not change (the upstream session).
        let working = Update {
            status: TaskStatus::Working,
            status_message: None,
            outcome: None,
            upstream_task_id: None,
            upstream_session: None,
            now_ms: 5,
        };
        let after = store.compare_and_set("a", TaskStatus::InputRequired, working).await.unwrap();
        assert_eq!(after.upstream_session, full.upstream_session);
        assert_eq!(after.upstream_task_id, full.upstream_task_id);
        assert_eq!(store.get("a").await.unwrap(), Some(after));
    }
}
