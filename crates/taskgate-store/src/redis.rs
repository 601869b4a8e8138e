//! The [`TaskStore`] many replicas share: Redis.
//!
//! Keys, under the configured prefix `P`:
//! - `P task:{id}`: the record (JSON); `PEXPIRE` at its ttl plus a grace period, a safety net
//!   for when no gateway sweeps (the sweep, by the gateway's clock, deletes it first);
//! - `P owner:{owner}`: a sorted set of `{created:020}:{id}` (lexical order is creation order),
//!   for `tasks/list` cursors;
//! - `P expiry`: a sorted set of ids by expiry time, for the sweep;
//! - `P leases`: the tasks not yet terminal, scored by when their lease ends (Redis's clock),
//!   and `P holders`: which replica holds each lease. The holder renews it every third of
//!   `store.lease_ms`; a task whose lease ended is an orphan another replica takes over. Finding
//!   orphans costs in proportion to the leases that ended, not to the tasks running;
//! - `P count`: tasks held, for `tasks.max_tasks` across replicas;
//! - `P inputs:{id}`: a hash of the task's input requests not answered yet, by key (the
//!   replica running the task writes them; any replica lists them); `PEXPIRE`d, and deleted
//!   with the task;
//! - `P events`: the pub/sub channel of [`StoreEvent`]s between replicas.
//!
//! A status change is decided in Rust by the one transition rule ([`crate::apply_update`]) on
//! the record as read, and written by a script only if the record is still exactly what was
//! read (compare-and-set by value; on a race it is read and decided again).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::ConnectionManager;
use redis::{AsyncCommands, Script};
use serde_json::Value;
use taskgate_protocol::tasks::TaskStatus;
use tokio::sync::mpsc;

use crate::{
    decode_cursor, encode_cursor, CapRefused, Caps, EventEnvelope, ListPage, Owner, RateBucket, StoreError,
    StoreFuture, TaskRecord, TaskStore, Update,
};

/// How long Redis keeps a record after its ttl if no gateway sweeps it.
const EXPIRY_GRACE_MS: u64 = 60 * 60 * 1000;
/// Attempts of a compare-and-set that keeps losing races before it gives up.
const MAX_CAS_ATTEMPTS: usize = 32;
/// Ids handled per round trip when sweeping, claiming and renewing.
const BATCH: usize = 500;
/// Events buffered for the gateway from the subscription.
const EVENTS_BUFFER: usize = 4096;

/// KEYS: task, owner index, expiry, leases, holders, count, running (tenant), running
/// (principal). ARGV: record, owner index member, expiry or '', id, replica, lease ms,
/// max tasks, PEXPIRE ms or '', '1' when not terminal.
const CREATE: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 1 then return -2 end
local held = tonumber(redis.call('GET', KEYS[6]) or '0')
if held >= tonumber(ARGV[7]) then return -1 end
redis.call('SET', KEYS[1], ARGV[1])
if ARGV[3] ~= '' then
  redis.call('PEXPIRE', KEYS[1], ARGV[8])
  redis.call('ZADD', KEYS[3], ARGV[3], ARGV[4])
end
redis.call('ZADD', KEYS[2], 0, ARGV[2])
if ARGV[9] == '1' then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('ZADD', KEYS[4], now + tonumber(ARGV[6]), ARGV[4])
  redis.call('HSET', KEYS[5], ARGV[4], ARGV[5])
  redis.call('ZADD', KEYS[7], '+inf', ARGV[4])
  redis.call('ZADD', KEYS[8], '+inf', ARGV[4])
end
return redis.call('INCR', KEYS[6])
"#;

/// Replaces the record if it is still exactly `ARGV[1]`; a terminal one leaves the leases and
/// the caps' counts. 1 done, 0 gone, -1 changed meanwhile. KEYS: task, leases, holders,
/// running (tenant), running (principal). ARGV: old, new, '1' when terminal, id.
const REPLACE: &str = r#"
local current = redis.call('GET', KEYS[1])
if not current then return 0 end
if current ~= ARGV[1] then return -1 end
redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')
if ARGV[3] == '1' then
  redis.call('ZREM', KEYS[2], ARGV[4])
  redis.call('HDEL', KEYS[3], ARGV[4])
  redis.call('ZREM', KEYS[4], ARGV[4])
  redis.call('ZREM', KEYS[5], ARGV[4])
end
return 1
"#;

/// Deletes a task from every key; returns the record, if it was still there.
/// KEYS: task, owner index, leases, holders, count, expiry, running (tenant), running (principal),
/// input requests. ARGV: id, owner index member.
const DELETE: &str = r#"
local current = redis.call('GET', KEYS[1])
redis.call('DEL', KEYS[1])
redis.call('DEL', KEYS[9])
redis.call('ZREM', KEYS[7], ARGV[1])
redis.call('ZREM', KEYS[8], ARGV[1])
if ARGV[2] ~= '' then redis.call('ZREM', KEYS[2], ARGV[2]) end
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
local indexed = redis.call('ZREM', KEYS[6], ARGV[1])
if current or indexed == 1 then
  local left = redis.call('DECR', KEYS[5])
  if left < 0 then redis.call('SET', KEYS[5], 0) end
end
return current
"#;

/// Takes up to ARGV[3] tasks whose lease ended: they are `ARGV[1]`'s for `ARGV[2]` ms; returns
/// their ids. KEYS: leases, holders.
const CLAIM: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[3]))
for _, id in ipairs(due) do
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), id)
  redis.call('HSET', KEYS[2], id, ARGV[1])
end
return due
"#;

/// Renews this replica's leases; returns the ids it no longer holds (another replica took the
/// task, or it ended elsewhere). A lease that ended while Redis was out of reach, and that no
/// one took meanwhile, is still this replica's and is renewed. KEYS: leases, holders. ARGV:
/// replica, lease ms, then the ids.
const RENEW: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lost = {}
for i = 3, #ARGV do
  local id = ARGV[i]
  if redis.call('HGET', KEYS[2], id) == ARGV[1] and redis.call('ZSCORE', KEYS[1], id) then
    redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), id)
  else
    table.insert(lost, id)
  end
end
return lost
"#;

/// Reserves a place for a task under its tenant's caps, before anything reaches the upstream.
/// KEYS: running (tenant), running (principal). ARGV: id, tenant cap or '', principal cap or
/// '', how long the reservation holds (ms). Returns 'ok', 'tenant' or 'principal'.
const RESERVE: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if ARGV[2] ~= '' and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 'tenant' end
if ARGV[3] ~= '' and redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[3]) then return 'principal' end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[4]), ARGV[1])
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[4]), ARGV[1])
return 'ok'
"#;

/// GCRA over several buckets, all or nothing, by Redis's clock. KEYS: the buckets. ARGV: per
/// bucket its emission interval and its tolerance (ms). Returns {} when admitted, else
/// {index of the refusing bucket (1-based), ms until it admits}.
const RATES: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local next = {}
for i, key in ipairs(KEYS) do
  local interval = tonumber(ARGV[2 * i - 1])
  local tau = tonumber(ARGV[2 * i])
  local tat = math.max(tonumber(redis.call('GET', key) or '0'), now)
  if tat - now > tau then return {i, math.max(1, math.ceil(tat - now - tau))} end
  next[i] = tat + interval
end
for i, key in ipairs(KEYS) do
  redis.call('SET', key, tostring(next[i]), 'PX', math.ceil(next[i] - now) + 1)
end
return {}
"#;

/// The Redis store.
pub struct RedisTaskStore {
    connection: ConnectionManager,
    client: redis::Client,
    prefix: String,
    /// The URL without credentials, for messages.
    shown: String,
    max_tasks: usize,
    lease_ms: u64,
    timeout: Duration,
    /// Tasks held, as last seen (a create or a sweep tells).
    held: Arc<AtomicUsize>,
    scripts: Scripts,
}

struct Scripts {
    create: Script,
    replace: Script,
    delete: Script,
    claim: Script,
    renew: Script,
    reserve: Script,
    rates: Script,
}

/// The URL as it may be shown: scheme, host, port and database, never credentials.
pub fn redact(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => format!("{scheme}://{}", rest.rsplit('@').next().unwrap_or_default()),
        None => "redis".into(),
    }
}

impl RedisTaskStore {
    /// A store on the Redis at `url`. It connects lazily and reconnects by itself: Redis being
    /// down at start is not an error here (requests fail with a clear error until it is back).
    pub fn open(
        url: &str,
        prefix: &str,
        max_tasks: usize,
        lease_ms: u64,
        timeout: Duration,
    ) -> Result<RedisTaskStore, StoreError> {
        let shown = redact(url);
        let client =
            redis::Client::open(url).map_err(|e| StoreError::Backend(format!("invalid Redis URL {shown}: {e}")))?;
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_secs(2));
        let connection = client
            .get_connection_manager_lazy(config)
            .map_err(|e| StoreError::Backend(format!("cannot use the Redis at {shown}: {e}")))?;
        Ok(RedisTaskStore {
            connection,
            client,
            prefix: prefix.to_owned(),
            shown,
            max_tasks,
            lease_ms,
            timeout,
            held: Arc::default(),
            scripts: Scripts {
                create: Script::new(CREATE),
                replace: Script::new(REPLACE),
                delete: Script::new(DELETE),
                claim: Script::new(CLAIM),
                renew: Script::new(RENEW),
                reserve: Script::new(RESERVE),
                rates: Script::new(RATES),
            },
        })
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Where it is, for messages (no credentials).
    pub fn shown(&self) -> &str {
        &self.shown
    }

    fn key(&self, parts: &[&str]) -> String {
        let mut key = self.prefix.clone();
        for part in parts {
            key.push_str(part);
        }
        key
    }

    fn task_key(&self, id: &str) -> String {
        self.key(&["task:", id])
    }

    fn inputs_key(&self, id: &str) -> String {
        self.key(&["inputs:", id])
    }

    fn leases(&self) -> String {
        self.key(&["leases"])
    }

    fn holders(&self) -> String {
        self.key(&["holders"])
    }

    fn owner_key(&self, owner: &Owner) -> String {
        self.key(&["owner:", &hex_parts(&[&owner.tenant, &owner.principal])])
    }

    /// The running tasks (and reservations) of the owner's tenant, and of the owner.
    fn running_keys(&self, owner: &Owner) -> (String, String) {
        (
            self.key(&["running:t:", &hex_parts(&[&owner.tenant])]),
            self.key(&["running:p:", &hex_parts(&[&owner.tenant, &owner.principal])]),
        )
    }

    fn channel(&self) -> String {
        self.key(&["events"])
    }

    fn failed(&self, e: redis::RedisError) -> StoreError {
        if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_timeout() {
            StoreError::Unavailable(format!("Redis at {} is unreachable ({e})", self.shown))
        } else {
            StoreError::Backend(format!("Redis at {}: {e}", self.shown))
        }
    }

    /// Runs one Redis exchange under the store's time limit.
    async fn run<T>(&self, work: impl std::future::Future<Output = redis::RedisResult<T>>) -> Result<T, StoreError> {
        match tokio::time::timeout(self.timeout, work).await {
            Ok(result) => result.map_err(|e| self.failed(e)),
            Err(_) => Err(StoreError::Unavailable(format!(
                "Redis at {} did not answer within {} ms (store.timeout_ms)",
                self.shown,
                self.timeout.as_millis()
            ))),
        }
    }

    async fn read(&self, id: &str) -> Result<Option<(String, TaskRecord)>, StoreError> {
        let mut c = self.connection.clone();
        let text: Option<String> = self.run(c.get(self.task_key(id))).await?;
        text.map(|t| decode(&t).map(|r| (t, r))).transpose()
    }

    async fn replace(&self, old: &str, record: &TaskRecord) -> Result<i64, StoreError> {
        let mut c = self.connection.clone();
        let new = encode(record);
        let terminal = if record.status.is_terminal() { "1" } else { "0" };
        let (tenant_running, owner_running) = self.running_keys(&record.owner);
        let mut invocation = self.scripts.replace.key(self.task_key(&record.id));
        invocation.key(self.leases()).key(self.holders()).key(tenant_running).key(owner_running);
        invocation.arg(old).arg(new).arg(terminal).arg(&record.id);
        self.run(invocation.invoke_async(&mut c)).await
    }

    async fn delete_one(&self, id: &str) -> Result<Option<TaskRecord>, StoreError> {
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

    async fn create_inner(&self, record: TaskRecord) -> Result<(), StoreError> {
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

    async fn cas(&self, id: &str, expected: TaskStatus, update: Update) -> Result<TaskRecord, StoreError> {
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

    async fn page(&self, owner: &Owner, cursor: Option<&str>, limit: usize) -> Result<ListPage, StoreError> {
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

    async fn sweep(&self, now_ms: u64) -> Result<Vec<TaskRecord>, StoreError> {
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

    async fn claim(&self, replica: &str) -> Result<Vec<TaskRecord>, StoreError> {
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

    async fn renew(&self, replica: &str, ids: &[String]) -> Result<Vec<String>, StoreError> {
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

/// Hex of length-prefixed parts: any tenant or principal text makes a safe, unambiguous key.
fn hex_parts(parts: &[&str]) -> String {
    let mut hex = String::new();
    for part in parts {
        for byte in (part.len() as u32).to_be_bytes().iter().chain(part.as_bytes()) {
            hex.push_str(&format!("{byte:02x}"));
        }
    }
    hex
}

fn decode(text: &str) -> Result<TaskRecord, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Backend(format!("a stored task does not decode: {e}")))
}

fn encode(record: &TaskRecord) -> String {
    serde_json::to_string(record).expect("a task record always encodes")
}

impl TaskStore for RedisTaskStore {
    fn create(&self, record: TaskRecord) -> StoreFuture<'_, ()> {
        Box::pin(self.create_inner(record))
    }

    fn get<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<TaskRecord>> {
        Box::pin(async move { Ok(self.read(id).await?.map(|(_, r)| r)) })
    }

    fn compare_and_set<'a>(&'a self, id: &'a str, expected: TaskStatus, update: Update) -> StoreFuture<'a, TaskRecord> {
        Box::pin(self.cas(id, expected, update))
    }

    fn list<'a>(&'a self, owner: &'a Owner, cursor: Option<&'a str>, limit: usize) -> StoreFuture<'a, ListPage> {
        Box::pin(self.page(owner, cursor, limit))
    }

    fn expire(&self, now_ms: u64) -> StoreFuture<'_, Vec<TaskRecord>> {
        Box::pin(self.sweep(now_ms))
    }

    fn delete<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<TaskRecord>> {
        Box::pin(self.delete_one(id))
    }

    fn claim_orphans<'a>(&'a self, replica: &'a str, _now_ms: u64) -> StoreFuture<'a, Vec<TaskRecord>> {
        Box::pin(self.claim(replica))
    }

    fn renew_leases<'a>(&'a self, replica: &'a str, ids: &'a [String]) -> StoreFuture<'a, Vec<String>> {
        Box::pin(self.renew(replica, ids))
    }

    fn shared(&self) -> bool {
        true
    }

    fn lease_ms(&self) -> Option<u64> {
        Some(self.lease_ms)
    }

    fn publish(&self, envelope: EventEnvelope) -> StoreFuture<'_, ()> {
        Box::pin(async move {
            let mut c = self.connection.clone();
            let text = serde_json::to_string(&envelope).expect("an event always encodes");
            let _: i64 = self.run(c.publish(self.channel(), text)).await?;
            Ok(())
        })
    }

    fn subscribe(&self) -> Option<mpsc::Receiver<EventEnvelope>> {
        let (tx, rx) = mpsc::channel(EVENTS_BUFFER);
        let (client, channel, shown) = (self.client.clone(), self.channel(), self.shown.clone());
        tokio::spawn(async move {
            let mut backoff = Duration::from_millis(100);
            // Reconnects until the gateway stops listening.
            while !tx.is_closed() {
                match client.get_async_pubsub().await {
                    Ok(mut pubsub) => {
                        if pubsub.subscribe(&channel).await.is_ok() {
                            backoff = Duration::from_millis(100);
                            let mut messages = pubsub.on_message();
                            while let Some(message) = messages.next().await {
                                let Ok(text) = message.get_payload::<String>() else { continue };
                                match serde_json::from_str::<EventEnvelope>(&text) {
                                    Ok(envelope) => {
                                        if tx.send(envelope).await.is_err() {
                                            return;
                                        }
                                    }
                                    Err(e) => {
                                        tracing::warn!(error = %e, "an event from another replica does not decode; dropped")
                                    }
                                }
                            }
                        }
                        tracing::warn!(redis = %shown, "the subscription to other replicas' events ended; reconnecting");
                    }
                    Err(e) => {
                        tracing::debug!(redis = %shown, error = %e, "cannot subscribe to other replicas' events yet")
                    }
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        });
        Some(rx)
    }

    fn reserve<'a>(
        &'a self,
        owner: &'a Owner,
        task_id: &'a str,
        caps: Caps,
        hold_ms: u64,
    ) -> StoreFuture<'a, Result<(), CapRefused>> {
        Box::pin(async move {
            let (tenant_running, owner_running) = self.running_keys(owner);
            let cap = |c: Option<usize>| c.map(|n| n.to_string()).unwrap_or_default();
            let mut invocation = self.scripts.reserve.key(tenant_running);
            invocation.key(owner_running).arg(task_id).arg(cap(caps.tenant)).arg(cap(caps.principal)).arg(hold_ms);
            let mut c = self.connection.clone();
            let answer: String = self.run(invocation.invoke_async(&mut c)).await?;
            Ok(match answer.as_str() {
                "tenant" => Err(CapRefused::Tenant),
                "principal" => Err(CapRefused::Principal),
                _ => Ok(()),
            })
        })
    }

    fn release<'a>(&'a self, owner: &'a Owner, task_id: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let (tenant_running, owner_running) = self.running_keys(owner);
            let mut c = self.connection.clone();
            let _: () = self
                .run(redis::pipe().zrem(tenant_running, task_id).zrem(owner_running, task_id).query_async(&mut c))
                .await?;
            Ok(())
        })
    }

    fn admit_rates<'a>(&'a self, buckets: &'a [RateBucket]) -> StoreFuture<'a, Option<(usize, u64)>> {
        Box::pin(async move {
            if buckets.is_empty() {
                return Ok(None);
            }
            let mut invocation = self.scripts.rates.prepare_invoke();
            for bucket in buckets {
                invocation.key(self.key(&["rate:", &hex_parts(&[&bucket.name])]));
            }
            for bucket in buckets {
                let interval = 1000.0 / bucket.per_second;
                invocation.arg(interval).arg(interval * f64::from(bucket.burst.saturating_sub(1)));
            }
            let mut c = self.connection.clone();
            let refused: Vec<u64> = self.run(invocation.invoke_async(&mut c)).await?;
            Ok(match refused.as_slice() {
                [index, retry] => Some((*index as usize - 1, *retry)),
                _ => None,
            })
        })
    }

    fn put_input<'a>(
        &'a self,
        task_id: &'a str,
        key: &'a str,
        request: &'a Value,
        keep_ms: u64,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let mut c = self.connection.clone();
            let hash = self.inputs_key(task_id);
            let text = serde_json::to_string(request).expect("a JSON value always encodes");
            let keep = keep_ms.max(1);
            let _: () = self
                .run(
                    redis::pipe()
                        .hset(&hash, key, text)
                        .ignore()
                        .pexpire(&hash, keep as i64)
                        .ignore()
                        .query_async(&mut c),
                )
                .await?;
            Ok(())
        })
    }

    fn remove_inputs<'a>(&'a self, task_id: &'a str, keys: &'a [String]) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let mut c = self.connection.clone();
            let hash = self.inputs_key(task_id);
            let _: i64 =
                if keys.is_empty() { self.run(c.del(hash)).await? } else { self.run(c.hdel(hash, keys)).await? };
            Ok(())
        })
    }

    fn inputs<'a>(&'a self, task_id: &'a str) -> StoreFuture<'a, Vec<(String, Value)>> {
        Box::pin(async move {
            let mut c = self.connection.clone();
            let stored: Vec<(String, String)> = self.run(c.hgetall(self.inputs_key(task_id))).await?;
            let mut inputs: Vec<(String, Value)> = stored
                .into_iter()
                .filter_map(|(key, text)| serde_json::from_str(&text).ok().map(|request| (key, request)))
                .collect();
            inputs.sort_by(|a, b| a.0.cmp(&b.0));
            Ok(inputs)
        })
    }

    fn health(&self) -> StoreFuture<'_, ()> {
        Box::pin(async move {
            let mut c = self.connection.clone();
            let held: Option<i64> = self.run(c.get(self.key(&["count"]))).await?;
            self.held.store(held.unwrap_or(0).max(0) as usize, Ordering::Relaxed);
            Ok(())
        })
    }

    fn len(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }
}
