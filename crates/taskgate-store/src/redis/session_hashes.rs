//! Client sessions' records at Redis: `P session:{id}`, a hash of the record as `initialize`
//! made it (`r`, JSON), the client's log level (`l`), one field per subscribed URI (`s:{uri}`),
//! one per upstream session of its own (`b:{upstream}`, JSON) and the tools activated in search
//! mode (`a`, a sorted JSON array), so that a change is one field written, never a record read
//! and written back (two replicas changing one session at once both keep their change). The
//! hash expires when no replica has served the session for its idle timeout.
//!
//! `P activated:{key}`: the tools a 2026-07-28 client activated in search mode at one endpoint
//! (it has no session to record them in), a set whose expiry each activation and each listing
//! pushes back, as requests push a session record's.

use redis::AsyncCommands;

use super::RedisTaskStore;
use crate::{SessionChange, SessionRecord, StoreError, MAX_ACTIVATED, MAX_SUBSCRIPTIONS};

impl RedisTaskStore {
    fn session_key(&self, id: &str) -> String {
        self.key(&["session:", id])
    }

    pub(super) async fn put_session_inner(
        &self,
        id: &str,
        record: &SessionRecord,
        keep_ms: u64,
    ) -> Result<(), StoreError> {
        let key = self.session_key(id);
        let mut core = record.clone();
        core.log_level = None;
        core.subscriptions.clear();
        core.upstream_sessions.clear();
        core.stream = None;
        core.activated.clear();
        let mut pipe = redis::pipe();
        pipe.atomic()
            .del(&key)
            .ignore()
            .hset(&key, "r", serde_json::to_string(&core).expect("a record encodes"))
            .ignore();
        if let Some(level) = &record.log_level {
            pipe.hset(&key, "l", level).ignore();
        }
        if let Some(replica) = &record.stream {
            pipe.hset(&key, "g", replica).ignore();
        }
        if !record.activated.is_empty() {
            let activated: Vec<&String> = record.activated.iter().take(MAX_ACTIVATED).collect();
            pipe.hset(&key, "a", serde_json::to_string(&activated).expect("names encode")).ignore();
        }
        for uri in record.subscriptions.iter().take(MAX_SUBSCRIPTIONS) {
            pipe.hset(&key, format!("s:{uri}"), "").ignore();
        }
        for (upstream, session) in &record.upstream_sessions {
            pipe.hset(&key, format!("b:{upstream}"), serde_json::to_string(session).expect("encodes")).ignore();
        }
        if keep_ms > 0 {
            pipe.pexpire(&key, keep_ms as i64).ignore();
        }
        let mut c = self.connection.clone();
        self.run(pipe.query_async::<()>(&mut c)).await
    }

    pub(super) async fn session_inner(&self, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        let mut c = self.connection.clone();
        let fields: Vec<(String, String)> = self.run(c.hgetall(self.session_key(id))).await?;
        session_of(fields)
    }

    pub(super) async fn change_session_inner(
        &self,
        id: &str,
        change: SessionChange,
        keep_ms: u64,
    ) -> Result<bool, StoreError> {
        let key = self.session_key(id);
        let mut c = self.connection.clone();
        let (op, value) = match change {
            // The common change is one command.
            SessionChange::Touch if keep_ms > 0 => {
                return self.run(c.pexpire::<_, bool>(&key, keep_ms as i64)).await;
            }
            SessionChange::Touch => return self.run(c.exists::<_, bool>(&key)).await,
            SessionChange::Level(level) => ("l", level),
            SessionChange::Subscribe(uri) => ("s", uri),
            SessionChange::Unsubscribe(uri) => ("u", uri),
            SessionChange::StreamAt(replica) => ("g", replica),
            SessionChange::StreamGone(replica) => ("x", replica),
            SessionChange::Activate(names) => {
                let mut invocation = self.scripts.session.key(key);
                let names = serde_json::to_string(&names).expect("names encode");
                invocation.arg(keep_ms).arg("a").arg(names).arg(MAX_ACTIVATED);
                let done: i64 = self.run(invocation.invoke_async(&mut c)).await?;
                return Ok(done == 1);
            }
            SessionChange::Upstream(upstream, session) => {
                let mut invocation = self.scripts.session.key(key);
                let session = serde_json::to_string(&session).expect("encodes");
                invocation.arg(keep_ms).arg("b").arg(upstream).arg(MAX_SUBSCRIPTIONS).arg(session);
                let done: i64 = self.run(invocation.invoke_async(&mut c)).await?;
                return Ok(done == 1);
            }
        };
        let mut invocation = self.scripts.session.key(key);
        invocation.arg(keep_ms).arg(op).arg(value).arg(MAX_SUBSCRIPTIONS);
        let done: i64 = self.run(invocation.invoke_async(&mut c)).await?;
        Ok(done == 1)
    }

    fn activated_key(&self, key: &str) -> String {
        self.key(&["activated:", key])
    }

    pub(super) async fn activate_inner(&self, key: &str, names: &[String], keep_ms: u64) -> Result<(), StoreError> {
        if names.is_empty() {
            return Ok(());
        }
        let mut invocation = self.scripts.activate.key(self.activated_key(key));
        invocation.arg(keep_ms).arg(MAX_ACTIVATED);
        for name in names {
            invocation.arg(name);
        }
        let mut c = self.connection.clone();
        self.run(invocation.invoke_async::<i64>(&mut c)).await.map(drop)
    }

    pub(super) async fn activated_inner(&self, key: &str, keep_ms: u64) -> Result<Vec<String>, StoreError> {
        let key = self.activated_key(key);
        let mut pipe = redis::pipe();
        pipe.atomic().smembers(&key);
        if keep_ms > 0 {
            pipe.pexpire(&key, keep_ms as i64).ignore();
        }
        let mut c = self.connection.clone();
        let (mut names,): (Vec<String>,) = self.run(pipe.query_async(&mut c)).await?;
        names.sort();
        Ok(names)
    }

    pub(super) async fn delete_session_inner(&self, id: &str) -> Result<bool, StoreError> {
        let mut c = self.connection.clone();
        let removed: i64 = self.run(c.del(self.session_key(id))).await?;
        Ok(removed > 0)
    }
}

/// A session's record from its hash's fields (none without the record itself).
pub(super) fn session_of(fields: Vec<(String, String)>) -> Result<Option<SessionRecord>, StoreError> {
    let mut record: Option<SessionRecord> = None;
    let (mut level, mut subscriptions, mut upstreams) = (None, Vec::new(), std::collections::BTreeMap::new());
    let (mut stream, mut activated) = (None, Vec::new());
    for (field, value) in fields {
        match field.as_str() {
            "r" => {
                record = Some(
                    serde_json::from_str(&value)
                        .map_err(|e| StoreError::Backend(format!("a stored session does not decode: {e}")))?,
                )
            }
            "l" => level = Some(value),
            "g" => stream = Some(value),
            // A list that does not decode is no activation, not a lost session.
            "a" => activated = serde_json::from_str(&value).unwrap_or_default(),
            other => {
                if let Some(uri) = other.strip_prefix("s:") {
                    subscriptions.push(uri.to_owned());
                } else if let Some(upstream) = other.strip_prefix("b:") {
                    if let Ok(session) = serde_json::from_str(&value) {
                        upstreams.insert(upstream.to_owned(), session);
                    }
                }
            }
        }
    }
    // (Sorted here: a script's `table.sort` may follow Redis's collation, not bytes.)
    activated.sort();
    Ok(record.map(|mut r| {
        subscriptions.sort();
        r.log_level = level;
        r.subscriptions = subscriptions;
        r.upstream_sessions = upstreams;
        r.stream = stream;
        r.activated = activated;
        r
    }))
}
