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
//! - `P session:{id}`: a client session's record (`session_hashes.rs`), expiring when no replica
//!   has served it for its idle timeout;
//! - `P activated:{key}`: the tools a 2026-07-28 client activated at one endpoint (a set,
//!   expiring when the client has neither listed nor activated tools there for its idle time);
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
    CapRefused, Caps, EventEnvelope, ListPage, Owner, RateBucket, StoreError, StoreFuture, TaskRecord, TaskStore,
    Update,
};

mod admin_scan;
mod codec;
mod records;
mod scripts;
mod session_hashes;

use codec::hex_parts;
use scripts::{Scripts, CLAIM, CREATE, DELETE, RATES, RENEW, REPLACE, RESERVE};

/// How long Redis keeps a record after its ttl if no gateway sweeps it.
pub(super) const EXPIRY_GRACE_MS: u64 = 60 * 60 * 1000;
/// Attempts of a compare-and-set that keeps losing races before it gives up.
pub(super) const MAX_CAS_ATTEMPTS: usize = 32;
/// Ids handled per round trip when sweeping, claiming and renewing.
pub(super) const BATCH: usize = 500;
/// Events buffered for the gateway from the subscription.
const EVENTS_BUFFER: usize = 4096;

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
                session: Script::new(scripts::SESSION_CHANGE),
                activate: Script::new(scripts::ACTIVATE),
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
        // A Redis that is starting (LOADING), a replica not yet promoted (READONLY, MASTERDOWN),
        // one out of memory (OOM) or busy with a script (BUSY, TRYAGAIN) answers again later.
        let passing = matches!(e.code(), Some("LOADING" | "READONLY" | "MASTERDOWN" | "OOM" | "BUSY" | "TRYAGAIN"));
        if passing || e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_timeout() {
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

    fn put_session<'a>(&'a self, id: &'a str, record: &'a crate::SessionRecord, keep_ms: u64) -> StoreFuture<'a, ()> {
        Box::pin(self.put_session_inner(id, record, keep_ms))
    }

    fn session<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<crate::SessionRecord>> {
        Box::pin(self.session_inner(id))
    }

    fn change_session<'a>(&'a self, id: &'a str, change: crate::SessionChange, keep_ms: u64) -> StoreFuture<'a, bool> {
        Box::pin(self.change_session_inner(id, change, keep_ms))
    }

    fn delete_session<'a>(&'a self, id: &'a str) -> StoreFuture<'a, bool> {
        Box::pin(self.delete_session_inner(id))
    }

    fn activate<'a>(&'a self, key: &'a str, names: &'a [String], keep_ms: u64) -> StoreFuture<'a, ()> {
        Box::pin(self.activate_inner(key, names, keep_ms))
    }

    fn activated<'a>(&'a self, key: &'a str, keep_ms: u64) -> StoreFuture<'a, Vec<String>> {
        Box::pin(self.activated_inner(key, keep_ms))
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

    fn scan_tasks<'a>(
        &'a self,
        filter: &'a crate::TaskFilter,
        cursor: Option<&'a str>,
        limit: usize,
    ) -> StoreFuture<'a, crate::Page<TaskRecord>> {
        Box::pin(self.scan_tasks_inner(filter, cursor, limit))
    }

    fn scan_sessions<'a>(
        &'a self,
        cursor: Option<&'a str>,
        limit: usize,
    ) -> StoreFuture<'a, crate::Page<crate::SessionEntry>> {
        Box::pin(self.scan_sessions_inner(cursor, limit))
    }

    fn describe(&self) -> StoreFuture<'_, crate::StoreInfo> {
        Box::pin(self.describe_inner())
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
