//! The record operations the [`TaskStore`](crate::TaskStore) methods are made of: read,
//! compare-and-set, create, delete, page, sweep, claim and renew.

use std::sync::atomic::Ordering;

use redis::AsyncCommands;
use taskgate_protocol::tasks::TaskStatus;

use crate::{decode_cursor, encode_cursor, ListPage, Owner, StoreError, TaskRecord, Update};

use super::codec::{decode, encode};
use super::{RedisTaskStore, BATCH, EXPIRY_GRACE_MS, MAX_CAS_ATTEMPTS};

impl RedisTaskStore {
    pub(super) async fn read(&self, id: &str) -> Result<Option<(String, TaskRecord)>, StoreError> {
        let mut c = self.connection.clone();
        let text: Option<String> = self.run(c.get(self.task_key(id))).await?;
        text.map(|t| decode(&t).map(|r| (t, r))).transpose()
    }

    pub(super) async fn replace(&self, old: &str, record: &TaskRecord) -> Result<i64, StoreError> {
        let mut c = self.connection.clone();
        let new = encode(record);
        let terminal = if record.status.is_terminal() { "1" } else { "0" };
        let (tenant_running, owner_running) = self.running_keys(&record.owner);
        let mut invocation = self.scripts.replace.key(self.task_key(&record.id));
        invocation.key(self.leases()).key(self.holders()).key(tenant_running).key(owner_running);
        invocation.arg(old).arg(new).arg(terminal).arg(&record.id);
        self.run(invocation.invoke_async(&mut c)).await
    }

    pub(super) async fn delete_one(&self, id: &str) -> Result<Option<TaskRecord>, StoreError> {
        let record = self.read(id).await?.map(|(_, r)| r);
        let member = record.as_ref().map(|r| format!("{:020}:{}", r.created_at_ms, r.id)).unwrap_or_default();
        let owner = record.as_ref().map(|r| self.owner_key(&r.owner)).unwrap_or_else(|| self.key(&["owner:none"]));
        let (tenant_running, owner_running) = match &record {
            Some(r) => self.running_keys(&r.owner),
            None => (self.key(&["running:none"]), self.key(&["running:none"])),
        };
        let mut c = self.connection.clone();
        let mut invocation = self.scripts.delete.key(self.task_key(id));
        invocation
            .key(owner)
            .key(self.leases())
            .key(self.holders())
            .key(self.key(&["count"]))
            .key(self.key(&["expiry"]))
            .key(tenant_running)
            .key(owner_running)
            .key(self.inputs_key(id));
        invocation.arg(id).arg(member);
        let removed: Option<String> = self.run(invocation.invoke_async(&mut c)).await?;
        if removed.is_some() || record.is_some() {
            let _ = self.held.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| Some(n.saturating_sub(1)));
        }
        removed.map(|t| decode(&t)).transpose()
    }

    pub(super) async fn create_inner(&self, record: TaskRecord) -> Result<(), StoreError> {
        let mut c = self.connection.clone();
        let expires = record.expires_at_ms().map(|at| at.to_string()).unwrap_or_default();
        let pexpire = record.ttl_ms.map(|ttl| ttl.saturating_add(EXPIRY_GRACE_MS).to_string()).unwrap_or_default();
        let member = format!("{:020}:{}", record.created_at_ms, record.id);
        let live = if record.status.is_terminal() { "0" } else { "1" };
        let mut invocation = self.scripts.create.key(self.task_key(&record.id));
        invocation
            .key(self.owner_key(&record.owner))
            .key(self.key(&["expiry"]))
            .key(self.leases())
            .key(self.holders())
            .key(self.key(&["count"]));
        let (tenant_running, owner_running) = self.running_keys(&record.owner);
        invocation.key(tenant_running).key(owner_running);
        invocation
            .arg(encode(&record))
            .arg(member)
            .arg(expires)
            .arg(&record.id)
            .arg(record.replica.as_deref().unwrap_or_default())
            .arg(self.lease_ms)
            .arg(self.max_tasks)
            .arg(pexpire)
            .arg(live);
        let held: i64 = self.run(invocation.invoke_async(&mut c)).await?;
        match held {
            -2 => Err(StoreError::Backend(format!("task id {} already exists", record.id))),
            -1 => Err(StoreError::Full { limit: self.max_tasks }),
            n => {
                self.held.store(n.max(0) as usize, Ordering::Relaxed);
                Ok(())
            }
        }
    }

    pub(super) async fn cas(&self, id: &str, expected: TaskStatus, update: Update) -> Result<TaskRecord, StoreError> {
        for _ in 0..MAX_CAS_ATTEMPTS {
            let Some((old, mut record)) = self.read(id).await? else { return Err(StoreError::NotFound) };
            crate::apply_update(&mut record, expected, update.clone())?;
            match self.replace(&old, &record).await? {
                1 => return Ok(record),
                0 => return Err(StoreError::NotFound),
                _ => continue, // changed meanwhile: read and decide again
            }
        }
        Err(StoreError::Backend(format!("task {id} kept changing; the change was not applied")))
    }

    pub(super) async fn page(&self, owner: &Owner, cursor: Option<&str>, limit: usize) -> Result<ListPage, StoreError> {
        let start = match cursor {
            None => "-".to_owned(),
            Some(c) => {
                let (created, id) = decode_cursor(c).ok_or(StoreError::BadCursor)?;
                format!("({created:020}:{id}")
            }
        };
        let key = self.owner_key(owner);
        let mut c = self.connection.clone();
        let members: Vec<String> = self
            .run(
                redis::cmd("ZRANGE")
                    .arg(&key)
                    .arg(&start)
                    .arg("+")
                    .arg("BYLEX")
                    .arg("LIMIT")
                    .arg(0)
                    .arg(limit + 1)
                    .query_async(&mut c),
            )
            .await?;
        let more = members.len() > limit;
        let members = &members[..members.len().min(limit)];
        let ids: Vec<&str> = members.iter().map(|m| m.split_once(':').map_or(m.as_str(), |(_, id)| id)).collect();
        let mut tasks = Vec::with_capacity(ids.len());
        if !ids.is_empty() {
            let keys: Vec<String> = ids.iter().map(|id| self.task_key(id)).collect();
            let texts: Vec<Option<String>> = self.run(redis::cmd("MGET").arg(&keys).query_async(&mut c)).await?;
            let mut stale = Vec::new();
            for (text, member) in texts.into_iter().zip(members) {
                match text {
                    Some(text) => tasks.push(decode(&text)?),
                    // Its record expired in Redis: the index entry goes too.
                    None => stale.push(member.clone()),
                }
            }
            if !stale.is_empty() {
                let _: i64 = self.run(c.zrem(&key, stale)).await?;
            }
        }
        let next_cursor = match (more, tasks.last()) {
            (true, Some(last)) => Some(encode_cursor(last.created_at_ms, &last.id)),
            _ => None,
        };
        Ok(ListPage { tasks, next_cursor })
    }

    pub(super) async fn sweep(&self, now_ms: u64) -> Result<Vec<TaskRecord>, StoreError> {
        let mut removed = Vec::new();
        loop {
            let mut c = self.connection.clone();
            let due: Vec<String> =
                self.run(c.zrangebyscore_limit(self.key(&["expiry"]), "-inf", now_ms, 0, BATCH as isize)).await?;
            for id in &due {
                if let Some(record) = self.delete_one(id).await? {
                    removed.push(record);
                }
            }
            if due.len() < BATCH {
                return Ok(removed);
            }
        }
    }

    pub(super) async fn claim(&self, replica: &str) -> Result<Vec<TaskRecord>, StoreError> {
        let mut claimed = Vec::new();
        loop {
            let mut c = self.connection.clone();
            let mut invocation = self.scripts.claim.key(self.leases());
            invocation.key(self.holders()).arg(replica).arg(self.lease_ms).arg(BATCH);
            let due: Vec<String> = self.run(invocation.invoke_async(&mut c)).await?;
            for id in &due {
                match self.read(id).await? {
                    Some((text, mut record)) if !record.status.is_terminal() => {
                        record.replica = Some(replica.to_owned());
                        if self.replace(&text, &record).await? == 1 {
                            claimed.push(record);
                        }
                    }
                    // Gone, or it ended: nothing to run and no lease to hold.
                    _ => {
                        let _: () = self
                            .run(redis::pipe().zrem(self.leases(), id).hdel(self.holders(), id).query_async(&mut c))
                            .await?;
                    }
                }
            }
            if due.len() < BATCH {
                return Ok(claimed);
            }
        }
    }

    pub(super) async fn renew(&self, replica: &str, ids: &[String]) -> Result<Vec<String>, StoreError> {
        let mut lost = Vec::new();
        let mut c = self.connection.clone();
        for chunk in ids.chunks(BATCH) {
            let mut invocation = self.scripts.renew.key(self.leases());
            invocation.key(self.holders()).arg(replica).arg(self.lease_ms);
            for id in chunk {
                invocation.arg(id);
            }
            let gone: Vec<String> = self.run(invocation.invoke_async(&mut c)).await?;
            lost.extend(gone);
        }
        Ok(lost)
    }
}
