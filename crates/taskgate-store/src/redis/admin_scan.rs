//! The operator's view at Redis: tasks and session records found with `SCAN` (a cursor of its
//! own, pages of about the size asked, in no order), and the leases on running tasks.

use redis::AsyncCommands;

use super::codec::decode;
use super::RedisTaskStore;
use crate::{Leases, Page, SessionEntry, StoreError, StoreInfo, TaskFilter, TaskRecord};

/// `pattern` with Redis' glob characters escaped, then `*`.
fn glob_prefix(prefix: &str) -> String {
    let mut out = String::with_capacity(prefix.len() + 1);
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('*');
    out
}

/// The most `SCAN` steps one page takes.
const MAX_STEPS: usize = 64;

fn scan_cursor(cursor: Option<&str>) -> Result<u64, StoreError> {
    cursor.map_or(Ok(0), |c| c.parse().map_err(|_| StoreError::BadCursor))
}

impl RedisTaskStore {
    /// `SCAN` steps over keys starting with `prefix` until about `count` are found, the scan
    /// ends, or [`MAX_STEPS`] steps were taken (a Redis holding much else): the keys, and the
    /// cursor to go on from.
    async fn scan_keys(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        count: usize,
    ) -> Result<(Vec<String>, Option<String>), StoreError> {
        let mut c = self.connection.clone();
        let mut at = scan_cursor(cursor)?;
        let pattern = glob_prefix(&self.key(&[prefix]));
        let mut found = Vec::new();
        for _ in 0..MAX_STEPS {
            let mut step = redis::cmd("SCAN");
            step.arg(at).arg("MATCH").arg(&pattern).arg("COUNT").arg(count.max(10));
            let (next, keys): (u64, Vec<String>) = self.run(step.query_async(&mut c)).await?;
            found.extend(keys);
            at = next;
            if at == 0 || found.len() >= count {
                break;
            }
        }
        // SCAN may return a key twice (the table grew meanwhile): once is enough.
        found.sort();
        found.dedup();
        Ok((found, (at != 0).then(|| at.to_string())))
    }

    pub(super) async fn scan_tasks_inner(
        &self,
        filter: &TaskFilter,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page<TaskRecord>, StoreError> {
        let (keys, next_cursor) = self.scan_keys("task:", cursor, limit).await?;
        let mut items = Vec::new();
        if !keys.is_empty() {
            let mut c = self.connection.clone();
            let texts: Vec<Option<String>> = self.run(c.mget(&keys)).await?;
            for text in texts.into_iter().flatten() {
                let record = decode(&text)?;
                if filter.matches(&record) {
                    items.push(record);
                }
            }
        }
        items.sort_by(|a, b| (b.created_at_ms, &b.id).cmp(&(a.created_at_ms, &a.id)));
        Ok(Page { items, next_cursor })
    }

    pub(super) async fn scan_sessions_inner(
        &self,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page<SessionEntry>, StoreError> {
        let (keys, next_cursor) = self.scan_keys("session:", cursor, limit).await?;
        let skip = self.key(&["session:"]).len();
        let mut items = Vec::new();
        if !keys.is_empty() {
            // Every record of the page in one exchange.
            let mut pipe = redis::pipe();
            for key in &keys {
                pipe.hgetall(key);
            }
            let mut c = self.connection.clone();
            let hashes: Vec<Vec<(String, String)>> = self.run(pipe.query_async(&mut c)).await?;
            for (key, fields) in keys.iter().zip(hashes) {
                // Gone between the scan and the read: left out.
                if let Some(record) = super::session_hashes::session_of(fields)? {
                    items.push((key[skip..].to_owned(), record));
                }
            }
        }
        items.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(Page { items, next_cursor })
    }

    pub(super) async fn describe_inner(&self) -> Result<StoreInfo, StoreError> {
        let mut c = self.connection.clone();
        let now =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_millis() as u64;
        let (held, lapsed, count): (u64, u64, Option<i64>) = self
            .run(
                redis::pipe()
                    .zcard(self.leases())
                    .zcount(self.leases(), "-inf", now)
                    .get(self.key(&["count"]))
                    .query_async(&mut c),
            )
            .await?;
        Ok(StoreInfo {
            backend: "redis",
            location: self.shown().to_owned(),
            shared: true,
            tasks: count.unwrap_or(0).max(0) as usize,
            leases: Some(Leases { held, lapsed }),
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_prefix_matches_itself_only() {
        assert_eq!(super::glob_prefix("tg:task:"), "tg:task:*");
        assert_eq!(super::glob_prefix("a*[b]?\\"), "a\\*\\[b\\]\\?\\\\*");
    }
}
