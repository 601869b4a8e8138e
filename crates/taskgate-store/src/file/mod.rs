//! The embedded, crash-safe [`TaskStore`]: one redb database file in a data directory.
//!
//! - Durability: every change is committed with `Durability::Immediate` (fsync) before the
//!   operation's future resolves, so a task handle is only returned once the task is on disk.
//! - Group commit: one writer thread takes the changes waiting in its queue (at most
//!   [`MAX_BATCH`]), applies them in order in one write transaction and commits once; a burst
//!   of creations costs one fsync, not one each. Each change still succeeds or fails on its own.
//! - Reads (`get`, `list`) run inline on a read transaction (MVCC: they never wait for the
//!   writer) and see every change whose future has resolved.
//! - redb is copy-on-write with checksummed pages: a crash at any moment leaves the last
//!   committed state, which it repairs to on the next open.
//! - Damage is never taken for an empty store: an existing file that is empty or fails redb's
//!   integrity check stops the open with an error naming the file. Damage found while running
//!   (a page changed under the process: a redb error saying so, or a panic inside redb) fails
//!   that one operation, and every later one of the same kind fails the same way; the store
//!   then reports itself damaged ([`TaskStore::health`]) until it is repaired offline
//!   ([`check_file`], [`repair_file`]).
//!
//! Tables: `tasks` (id → record as JSON), `by_owner` (owner ‖ created ‖ id, for `tasks/list`),
//! `by_expiry` (expiry ‖ id, for the sweep) and `live` (ids of tasks not yet terminal, for the
//! restart).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition, WriteTransaction};
use taskgate_protocol::tasks::TaskStatus;
use tokio::sync::{mpsc, oneshot};

use crate::{ListPage, Owner, StoreError, StoreFuture, TaskRecord, TaskStore, Update};

mod handle;
mod open;
mod repair;

use handle::{Damage, Handle, DAMAGED, DISK_FAILED};
use open::{check_a_copy, open_database, refuse_a_file_of_another_user, refuse_an_empty_file};
pub use open::{DEFAULT_CACHE_BYTES, FILE_NAME};

pub use repair::{check_file, repair_file, Inspection};

pub(crate) const TASKS: TableDefinition<&str, &[u8]> = TableDefinition::new("tasks");
pub(crate) const BY_OWNER: TableDefinition<&[u8], ()> = TableDefinition::new("by_owner");
pub(crate) const BY_EXPIRY: TableDefinition<&[u8], ()> = TableDefinition::new("by_expiry");
pub(crate) const LIVE: TableDefinition<&str, ()> = TableDefinition::new("live");

/// Changes committed together at most.
const MAX_BATCH: usize = 512;
/// Changes waiting for the writer at most; a full queue makes callers wait (backpressure).
const QUEUE: usize = 4096;

/// The file-backed store.
pub struct FileTaskStore {
    db: Handle,
    /// `None` only while dropping.
    writer: Option<mpsc::Sender<Op>>,
    thread: Option<std::thread::JoinHandle<()>>,
    count: Arc<AtomicUsize>,
    path: PathBuf,
    damage: Damage,
}

impl Drop for FileTaskStore {
    /// Closes the queue and waits for the writer to finish what it took, so the database is
    /// closed (and may be opened again) once the store is gone.
    fn drop(&mut self) {
        self.writer = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// One change, with where its outcome goes.
enum Op {
    Create(Box<TaskRecord>, oneshot::Sender<Result<(), StoreError>>),
    Cas(String, TaskStatus, Box<Update>, oneshot::Sender<Result<TaskRecord, StoreError>>),
    Expire(u64, oneshot::Sender<Result<Vec<TaskRecord>, StoreError>>),
    Delete(String, oneshot::Sender<Result<Option<TaskRecord>, StoreError>>),
    Claim(String, oneshot::Sender<Result<Vec<TaskRecord>, StoreError>>),
}

impl Op {
    fn fail(self, e: &StoreError) {
        match self {
            Op::Create(_, tx) => drop(tx.send(Err(e.clone()))),
            Op::Cas(_, _, _, tx) => drop(tx.send(Err(e.clone()))),
            Op::Expire(_, tx) | Op::Claim(_, tx) => drop(tx.send(Err(e.clone()))),
            Op::Delete(_, tx) => drop(tx.send(Err(e.clone()))),
        }
    }
}

/// An applied change's outcome, sent once the batch is committed (or failed with it).
enum Done {
    Unit(oneshot::Sender<Result<(), StoreError>>, Result<(), StoreError>),
    Record(oneshot::Sender<Result<TaskRecord, StoreError>>, Result<TaskRecord, StoreError>),
    Removed(oneshot::Sender<Result<Option<TaskRecord>, StoreError>>, Result<Option<TaskRecord>, StoreError>),
    Records(oneshot::Sender<Result<Vec<TaskRecord>, StoreError>>, Result<Vec<TaskRecord>, StoreError>),
}

impl Done {
    fn send(self, failed: Option<&StoreError>) {
        // A failed commit fails every change of its batch: none of them is on disk.
        match self {
            Done::Unit(tx, r) => drop(tx.send(failed.map_or(r, |e| Err(e.clone())))),
            Done::Record(tx, r) => drop(tx.send(failed.map_or(r, |e| Err(e.clone())))),
            Done::Removed(tx, r) => drop(tx.send(failed.map_or(r, |e| Err(e.clone())))),
            Done::Records(tx, r) => drop(tx.send(failed.map_or(r, |e| Err(e.clone())))),
        }
    }
}

/// A redb failure: one that says the file is damaged (a checksum or structure that does not
/// hold) is marked as such, and so is a failure of the disk (an I/O error, or an earlier one
/// that left the database unusable until it is opened again).
pub(crate) fn backend(e: impl Into<redb::Error>) -> StoreError {
    let e: redb::Error = e.into();
    match e {
        redb::Error::Corrupted(_) => StoreError::Backend(format!("{DAMAGED}: {e}")),
        redb::Error::Io(_) | redb::Error::PreviousIo => StoreError::Backend(format!("{DISK_FAILED}: {e}")),
        e => StoreError::Backend(e.to_string()),
    }
}

fn owner_prefix(owner: &Owner) -> Vec<u8> {
    // Length-prefixed, so no owner's prefix is a prefix of another's.
    let mut key = Vec::with_capacity(8 + owner.tenant.len() + owner.principal.len() + 8 + 36);
    for part in [&owner.tenant, &owner.principal] {
        key.extend_from_slice(&(part.len() as u32).to_be_bytes());
        key.extend_from_slice(part.as_bytes());
    }
    key
}

fn owner_key(owner: &Owner, created_ms: u64, id: &str) -> Vec<u8> {
    let mut key = owner_prefix(owner);
    key.extend_from_slice(&created_ms.to_be_bytes());
    key.extend_from_slice(id.as_bytes());
    key
}

fn expiry_key(at_ms: u64, id: &str) -> Vec<u8> {
    let mut key = at_ms.to_be_bytes().to_vec();
    key.extend_from_slice(id.as_bytes());
    key
}

pub(crate) fn decode(bytes: &[u8]) -> Result<TaskRecord, StoreError> {
    serde_json::from_slice(bytes).map_err(|e| StoreError::Backend(format!("a stored task does not decode: {e}")))
}

fn encode(record: &TaskRecord) -> Vec<u8> {
    serde_json::to_vec(record).expect("a task record always encodes")
}

impl FileTaskStore {
    /// Opens (or creates) the store in `dir`, holding at most `max_tasks` tasks, with redb's
    /// default cache of [`DEFAULT_CACHE_BYTES`]: [`FileTaskStore::open_with`].
    pub fn open(dir: &Path, max_tasks: usize) -> Result<FileTaskStore, StoreError> {
        FileTaskStore::open_with(dir, max_tasks, DEFAULT_CACHE_BYTES)
    }

    /// Opens (or creates) the store in `dir`, holding at most `max_tasks` tasks and caching at
    /// most `cache_bytes` of the file in memory. Fails with a message naming the file when the
    /// directory cannot be created or written, when another process has the database open,
    /// or when an existing file is empty, is not a database or fails redb's integrity check
    /// (what was stored is never taken for an empty store).
    pub fn open_with(dir: &Path, max_tasks: usize, cache_bytes: usize) -> Result<FileTaskStore, StoreError> {
        let shown = dir.display();
        std::fs::create_dir_all(dir)
            .map_err(|e| StoreError::Backend(format!("cannot create the data directory {shown}: {e}")))?;
        let path = dir.join(FILE_NAME);
        if refuse_an_empty_file(&path)? {
            refuse_a_file_of_another_user(&path)?;
            check_a_copy(&path)?;
        }
        let db = open_database(&path, cache_bytes)?;
        let count = {
            let txn = db.begin_write().map_err(backend)?;
            let count = {
                let tasks = txn.open_table(TASKS).map_err(backend)?;
                txn.open_table(BY_OWNER).map_err(backend)?;
                txn.open_table(BY_EXPIRY).map_err(backend)?;
                txn.open_table(LIVE).map_err(backend)?;
                tasks.len().map_err(backend)? as usize
            };
            txn.commit().map_err(|e| StoreError::Backend(format!("cannot write to {}: {e}", path.display())))?;
            count
        };
        let db = Handle::new(db, path.clone(), cache_bytes);
        let count = Arc::new(AtomicUsize::new(count));
        let damage = Damage::default();
        let (writer, queue) = mpsc::channel(QUEUE);
        let worker =
            Writer { db: db.clone(), count: count.clone(), max_tasks, damage: damage.clone(), path: path.clone() };
        let thread = std::thread::Builder::new()
            .name("taskgate-store-writer".into())
            .spawn(move || worker.run(queue))
            .map_err(|e| StoreError::Backend(format!("cannot start the store's writer thread: {e}")))?;
        Ok(FileTaskStore { db, writer: Some(writer), thread: Some(thread), count, path, damage })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn submit<'a, T: Send + 'a>(
        &'a self,
        op: impl FnOnce(oneshot::Sender<Result<T, StoreError>>) -> Op,
    ) -> StoreFuture<'a, T> {
        let (tx, rx) = oneshot::channel();
        let op = op(tx);
        Box::pin(async move {
            let writer = self.writer.as_ref().ok_or_else(|| StoreError::Backend("the store is closing".into()))?;
            writer.send(op).await.map_err(|_| StoreError::Backend("the store's writer has stopped".into()))?;
            rx.await.map_err(|_| {
                let why = self.damage.seen().unwrap_or_else(|| "it failed while applying the change".into());
                StoreError::Failed(format!("the task database {}: {why}", self.path.display()))
            })?
        })
    }

    fn read_record(&self, id: &str) -> Result<Option<TaskRecord>, StoreError> {
        let db = self.db.current()?;
        let txn = db.begin_read().map_err(backend)?;
        let tasks = txn.open_table(TASKS).map_err(backend)?;
        let found = tasks.get(id).map_err(backend)?;
        found.map(|bytes| decode(bytes.value())).transpose()
    }

    fn read_page(&self, owner: &Owner, cursor: Option<&str>, limit: usize) -> Result<ListPage, StoreError> {
        let prefix = owner_prefix(owner);
        let start = match cursor {
            None => prefix.clone(),
            Some(c) => {
                let (created, id) = crate::decode_cursor(c).ok_or(StoreError::BadCursor)?;
                // Just after the cursor's key.
                let mut key = owner_key(owner, created, &id);
                key.push(0);
                key
            }
        };
        let start_of_id = prefix.len() + 8;
        let mut end = prefix;
        end.extend_from_slice(&[0xFF; 9]);
        let db = self.db.current()?;
        let txn = db.begin_read().map_err(backend)?;
        let index = txn.open_table(BY_OWNER).map_err(backend)?;
        let tasks_table = txn.open_table(TASKS).map_err(backend)?;
        let mut tasks = Vec::new();
        let mut more = false;
        for entry in index.range(start.as_slice()..end.as_slice()).map_err(backend)? {
            let (key, _) = entry.map_err(backend)?;
            if tasks.len() == limit {
                more = true;
                break;
            }
            // The key is the owner's prefix, the creation time, then the id.
            let id = String::from_utf8_lossy(key.value().get(start_of_id..).unwrap_or_default()).into_owned();
            if let Some(bytes) = tasks_table.get(id.as_str()).map_err(backend)? {
                tasks.push(decode(bytes.value())?);
            }
        }
        let next_cursor = match (more, tasks.last()) {
            (true, Some(last)) => Some(crate::encode_cursor(last.created_at_ms, &last.id)),
            _ => None,
        };
        Ok(ListPage { tasks, next_cursor })
    }
}

/// Every task of the file matching `filter`, newest first after `cursor`: one read
/// transaction, one pass.
fn scan(
    db: &Database,
    filter: &crate::TaskFilter,
    cursor: Option<&str>,
    limit: usize,
) -> Result<crate::Page<TaskRecord>, StoreError> {
    let txn = db.begin_read().map_err(backend)?;
    let table = txn.open_table(TASKS).map_err(backend)?;
    let records = table.iter().map_err(backend)?.map(|entry| {
        let (_, bytes) = entry.map_err(backend)?;
        decode(bytes.value())
    });
    crate::newest_first(records, filter, cursor, limit)
}

impl TaskStore for FileTaskStore {
    fn create(&self, record: TaskRecord) -> StoreFuture<'_, ()> {
        self.submit(|tx| Op::Create(Box::new(record), tx))
    }

    fn get<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<TaskRecord>> {
        Box::pin(std::future::ready(self.damage.guard(&self.path, || self.read_record(id))))
    }

    fn compare_and_set<'a>(&'a self, id: &'a str, expected: TaskStatus, update: Update) -> StoreFuture<'a, TaskRecord> {
        self.submit(|tx| Op::Cas(id.to_owned(), expected, Box::new(update), tx))
    }

    fn list<'a>(&'a self, owner: &'a Owner, cursor: Option<&'a str>, limit: usize) -> StoreFuture<'a, ListPage> {
        Box::pin(std::future::ready(self.damage.guard(&self.path, || self.read_page(owner, cursor, limit))))
    }

    fn expire(&self, now_ms: u64) -> StoreFuture<'_, Vec<TaskRecord>> {
        self.submit(|tx| Op::Expire(now_ms, tx))
    }

    fn delete<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<TaskRecord>> {
        self.submit(|tx| Op::Delete(id.to_owned(), tx))
    }

    fn claim_orphans<'a>(&'a self, replica: &'a str, _now_ms: u64) -> StoreFuture<'a, Vec<TaskRecord>> {
        self.submit(|tx| Op::Claim(replica.to_owned(), tx))
    }

    fn health(&self) -> StoreFuture<'_, ()> {
        let outcome = match (self.damage.seen(), self.db.failing()) {
            (Some(why), _) => Err(StoreError::Failed(format!(
                "the task database {} is damaged ({why}); stop taskgate, then run `taskgate store repair`",
                self.path.display()
            ))),
            (None, Some(why)) => Err(StoreError::Unavailable(format!(
                "the task database {} cannot be written ({why}); changes wait until the disk takes writes",
                self.path.display()
            ))),
            (None, None) => Ok(()),
        };
        Box::pin(std::future::ready(outcome))
    }

    fn len(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    fn scan_tasks<'a>(
        &'a self,
        filter: &'a crate::TaskFilter,
        cursor: Option<&'a str>,
        limit: usize,
    ) -> StoreFuture<'a, crate::Page<TaskRecord>> {
        // A pass over every task: on a blocking thread, not the caller's worker.
        let (db, damage, path) = (self.db.clone(), self.damage.clone(), self.path.clone());
        let (filter, cursor) = (filter.clone(), cursor.map(str::to_owned));
        Box::pin(async move {
            let scanned = tokio::task::spawn_blocking(move || {
                damage.guard(&path, || scan(&*db.current()?, &filter, cursor.as_deref(), limit))
            });
            scanned.await.map_err(|e| StoreError::Backend(format!("the task scan stopped: {e}")))?
        })
    }

    fn describe(&self) -> StoreFuture<'_, crate::StoreInfo> {
        let info = crate::StoreInfo {
            backend: "file",
            location: self.path.display().to_string(),
            shared: false,
            tasks: self.len(),
            leases: None,
        };
        Box::pin(std::future::ready(Ok(info)))
    }
}

/// The writer thread's state.
struct Writer {
    db: Handle,
    count: Arc<AtomicUsize>,
    max_tasks: usize,
    damage: Damage,
    path: PathBuf,
}

impl Writer {
    fn run(self, mut queue: mpsc::Receiver<Op>) {
        // Ends when the store is dropped (every sender gone).
        while let Some(first) = queue.blocking_recv() {
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match queue.try_recv() {
                    Ok(op) => batch.push(op),
                    Err(_) => break,
                }
            }
            self.commit(batch);
        }
    }

    fn commit(&self, batch: Vec<Op>) {
        let mut count = self.count.load(Ordering::Relaxed);
        let mut done = Vec::with_capacity(batch.len());
        let mut ops = batch.into_iter();
        let db = match self.db.writable() {
            Ok(db) => db,
            Err(e) => return ops.for_each(|op| op.fail(&e)),
        };
        // A panic inside redb drops the changes it held (their callers learn of the damage);
        // the writer goes on with the next batch.
        let outcome = self.damage.guard(&self.path, || {
            let txn = db.begin_write().map_err(backend)?;
            for op in ops.by_ref() {
                done.push(self.apply(&txn, op, &mut count)?);
            }
            txn.commit().map_err(backend)
        });
        match outcome {
            Ok(()) => {
                self.db.committed();
                self.count.store(count, Ordering::Relaxed);
                done.into_iter().for_each(|d| d.send(None));
            }
            Err(e) => {
                drop(db);
                match &e {
                    // The disk refused: redb takes nothing more until the database is opened
                    // again, which the next batch does once the disk takes writes.
                    StoreError::Unavailable(why) if why.contains(DISK_FAILED) => self.db.disk_failed(why),
                    StoreError::Unavailable(_) => {}
                    e => {
                        tracing::error!(error = %e, "the task store could not commit a batch of changes; none was applied")
                    }
                }
                // Nothing of the batch is on disk: every change in it fails with the error.
                done.into_iter().for_each(|d| d.send(Some(&e)));
                ops.for_each(|op| op.fail(&e));
            }
        }
    }

    /// Applies one change in `txn`. `Err` is a storage failure that aborts the whole batch;
    /// a change refused on its own (not found, conflict, full) is an `Ok(Done)` carrying it.
    fn apply(&self, txn: &WriteTransaction, op: Op, count: &mut usize) -> Result<Done, StoreError> {
        let mut tasks = txn.open_table(TASKS).map_err(backend)?;
        let mut by_owner = txn.open_table(BY_OWNER).map_err(backend)?;
        let mut by_expiry = txn.open_table(BY_EXPIRY).map_err(backend)?;
        let mut live = txn.open_table(LIVE).map_err(backend)?;
        Ok(match op {
            Op::Create(record, tx) => {
                let result = if *count >= self.max_tasks {
                    Err(StoreError::Full { limit: self.max_tasks })
                } else if tasks.get(record.id.as_str()).map_err(backend)?.is_some() {
                    Err(StoreError::Backend(format!("task id {} already exists", record.id)))
                } else {
                    insert(&mut tasks, &mut by_owner, &mut by_expiry, &mut live, &record)?;
                    *count += 1;
                    Ok(())
                };
                Done::Unit(tx, result)
            }
            Op::Cas(id, expected, update, tx) => {
                let current = tasks.get(id.as_str()).map_err(backend)?.map(|b| decode(b.value())).transpose()?;
                let result = match current {
                    None => Err(StoreError::NotFound),
                    Some(mut record) => match crate::apply_update(&mut record, expected, *update) {
                        Ok(()) => {
                            tasks.insert(id.as_str(), encode(&record).as_slice()).map_err(backend)?;
                            if record.status.is_terminal() {
                                live.remove(id.as_str()).map_err(backend)?;
                            }
                            Ok(record)
                        }
                        Err(e) => Err(e),
                    },
                };
                Done::Record(tx, result)
            }
            Op::Expire(now_ms, tx) => {
                let mut due = Vec::new();
                for entry in by_expiry.range(..expiry_key(now_ms.saturating_add(1), "").as_slice()).map_err(backend)? {
                    let (key, _) = entry.map_err(backend)?;
                    due.push(String::from_utf8_lossy(&key.value()[8..]).into_owned());
                }
                let mut removed = Vec::with_capacity(due.len());
                for id in due {
                    if let Some(record) = remove(&mut tasks, &mut by_owner, &mut by_expiry, &mut live, &id)? {
                        *count = count.saturating_sub(1);
                        removed.push(record);
                    }
                }
                Done::Records(tx, Ok(removed))
            }
            Op::Delete(id, tx) => {
                let removed = remove(&mut tasks, &mut by_owner, &mut by_expiry, &mut live, &id)?;
                if removed.is_some() {
                    *count = count.saturating_sub(1);
                }
                Done::Removed(tx, Ok(removed))
            }
            Op::Claim(replica, tx) => {
                let mut ids = Vec::new();
                for entry in live.iter().map_err(backend)? {
                    let (id, _) = entry.map_err(backend)?;
                    ids.push(id.value().to_owned());
                }
                let mut claimed = Vec::new();
                for id in ids {
                    let Some(mut record) =
                        tasks.get(id.as_str()).map_err(backend)?.map(|b| decode(b.value())).transpose()?
                    else {
                        live.remove(id.as_str()).map_err(backend)?;
                        continue;
                    };
                    if record.replica.as_deref() == Some(replica.as_str()) || record.status.is_terminal() {
                        continue;
                    }
                    record.replica = Some(replica.clone());
                    tasks.insert(id.as_str(), encode(&record).as_slice()).map_err(backend)?;
                    claimed.push(record);
                }
                Done::Records(tx, Ok(claimed))
            }
        })
    }
}

type Table<'t, K, V> = redb::Table<'t, K, V>;

/// Adds a task to every table.
pub(crate) fn insert(
    tasks: &mut Table<'_, &'static str, &'static [u8]>,
    by_owner: &mut Table<'_, &'static [u8], ()>,
    by_expiry: &mut Table<'_, &'static [u8], ()>,
    live: &mut Table<'_, &'static str, ()>,
    record: &TaskRecord,
) -> Result<(), StoreError> {
    tasks.insert(record.id.as_str(), encode(record).as_slice()).map_err(backend)?;
    by_owner.insert(owner_key(&record.owner, record.created_at_ms, &record.id).as_slice(), ()).map_err(backend)?;
    if let Some(at) = record.expires_at_ms() {
        by_expiry.insert(expiry_key(at, &record.id).as_slice(), ()).map_err(backend)?;
    }
    if !record.status.is_terminal() {
        live.insert(record.id.as_str(), ()).map_err(backend)?;
    }
    Ok(())
}

/// Removes a task from every table.
fn remove(
    tasks: &mut Table<'_, &'static str, &'static [u8]>,
    by_owner: &mut Table<'_, &'static [u8], ()>,
    by_expiry: &mut Table<'_, &'static [u8], ()>,
    live: &mut Table<'_, &'static str, ()>,
    id: &str,
) -> Result<Option<TaskRecord>, StoreError> {
    let Some(bytes) = tasks.remove(id).map_err(backend)? else { return Ok(None) };
    let record = decode(bytes.value())?;
    drop(bytes);
    by_owner.remove(owner_key(&record.owner, record.created_at_ms, &record.id).as_slice()).map_err(backend)?;
    if let Some(at) = record.expires_at_ms() {
        by_expiry.remove(expiry_key(at, &record.id).as_slice()).map_err(backend)?;
    }
    live.remove(id).map_err(backend)?;
    Ok(Some(record))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance::{owner, record, run};

    fn store(max_tasks: usize) -> FileTaskStore {
        // The directory is removed as this returns: the open file keeps the store usable, and
        // nothing is left behind (a kept directory stayed after every run).
        let dir = tempfile::tempdir().unwrap();
        FileTaskStore::open(dir.path(), max_tasks).unwrap()
    }

    crate::store_conformance!(store);

    #[test]
    fn orphans_are_claimed_once_and_terminal_tasks_never() {
        run(async { crate::conformance::orphans_are_claimed_once_and_terminal_tasks_never(&store(10)).await });
    }

    #[test]
    fn tasks_survive_reopening_and_unfinished_ones_become_orphans() {
        let dir = tempfile::tempdir().unwrap();
        run(async {
            let s = FileTaskStore::open(dir.path(), 10).unwrap();
            s.create(record("done", owner("p"), 0, Some(60_000))).await.unwrap();
            let update = Update {
                status: TaskStatus::Completed,
                status_message: None,
                outcome: Some(crate::TaskOutcome::Result(serde_json::json!({"content": []}))),
                upstream_task_id: None,
                upstream_session: None,
                now_ms: 5,
            };
            s.compare_and_set("done", TaskStatus::Working, update).await.unwrap();
            s.create(record("running", owner("p"), 1, None)).await.unwrap();
        });
        // Reopened, as a restarted process would.
        run(async {
            let s = FileTaskStore::open(dir.path(), 10).unwrap();
            assert_eq!(s.len(), 2);
            let done = s.get("done").await.unwrap().unwrap();
            assert_eq!((done.status, done.last_updated_at_ms), (TaskStatus::Completed, 5));
            assert_eq!(s.list(&owner("p"), None, 10).await.unwrap().tasks.len(), 2);
            let orphans = s.claim_orphans("after-restart", 10).await.unwrap();
            assert_eq!(orphans.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(), ["running"]);
        });
    }

    #[test]
    fn concurrent_changes_are_committed_together_and_each_answered() {
        run(async {
            let s = store(10_000);
            let creates = (0..500).map(|i| s.create(record(&format!("t{i:03}"), owner("p"), i, None)));
            let results = futures_util::future::join_all(creates).await;
            assert!(results.iter().all(Result::is_ok));
            // A conflicting change in a batch fails alone.
            let a = s.compare_and_set("t001", TaskStatus::Working, crate::conformance::cancel(9));
            let b = s.compare_and_set("t001", TaskStatus::Working, crate::conformance::cancel(9));
            let (a, b) = futures_util::future::join(a, b).await;
            assert!(a.is_ok() != b.is_ok(), "exactly one of two racing changes wins: {a:?} {b:?}");
            assert_eq!(s.len(), 500);
        });
    }

    #[test]
    fn check_and_repair_refuse_a_file_a_gateway_has_open() {
        let dir = tempfile::tempdir().unwrap();
        let open = FileTaskStore::open(dir.path(), 10).unwrap();
        for e in [check_file(dir.path()).unwrap_err(), repair_file(dir.path()).unwrap_err()] {
            assert!(e.to_string().contains("open in a running taskgate process"), "{e}");
        }
        drop(open);
        assert!(check_file(dir.path()).unwrap().healthy());
    }

    #[test]
    fn a_second_process_on_the_same_directory_is_refused_with_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let _first = FileTaskStore::open(dir.path(), 10).unwrap();
        let second = FileTaskStore::open(dir.path(), 10).err().unwrap().to_string();
        assert!(second.contains("already open in another taskgate process"), "{second}");
    }

    /// A store in `dir` holding `n` tasks (a few hundred bytes each, some of them terminal),
    /// closed; the file's length.
    fn filled(dir: &Path, n: usize) -> u64 {
        run(async {
            let s = FileTaskStore::open(dir, 100_000).unwrap();
            for i in 0..n {
                let mut r = record(&format!("task-{i:05}"), owner(&format!("p{}", i % 7)), i as u64, Some(3_600_000));
                r.status_message = Some("x".repeat(300));
                s.create(r).await.unwrap();
            }
        });
        std::fs::metadata(dir.join(FILE_NAME)).unwrap().len()
    }

    /// Overwrites 4 KiB at `at` with `byte`.
    fn damage(file: &Path, at: u64, byte: u8) {
        damage_bytes(file, at, &[byte; 4096]);
    }

    fn damage_bytes(file: &Path, at: u64, bytes: &[u8]) {
        use std::io::{Seek, Write};
        let mut f = std::fs::OpenOptions::new().write(true).open(file).unwrap();
        f.seek(std::io::SeekFrom::Start(at)).unwrap();
        f.write_all(bytes).unwrap();
        f.sync_all().unwrap();
    }

    #[test]
    fn an_empty_file_is_refused_never_taken_for_an_empty_store() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE_NAME), b"").unwrap();
        let e = FileTaskStore::open(dir.path(), 10).err().expect("an empty file is refused").to_string();
        assert!(e.contains("is empty") && e.contains(FILE_NAME) && e.contains("backup"), "{e}");
        assert_eq!(std::fs::metadata(dir.path().join(FILE_NAME)).unwrap().len(), 0, "left as it was");
    }

    #[test]
    fn a_damaged_page_anywhere_is_refused_at_open_or_every_task_reads_back() {
        // Pages of zeros or of other bytes at many places of a file of ~1,500 tasks: the open
        // either refuses, naming the file and what to do, or every task reads back whole.
        let template = tempfile::tempdir().unwrap();
        let len = filled(template.path(), 1500);
        let mut refused = 0;
        for (i, at) in (4096..len).step_by(61_440).enumerate() {
            let dir = tempfile::tempdir().unwrap();
            let file = dir.path().join(FILE_NAME);
            std::fs::copy(template.path().join(FILE_NAME), &file).unwrap();
            damage(&file, at, if i % 2 == 0 { 0 } else { 0xA5 });
            match FileTaskStore::open(dir.path(), 100_000) {
                Err(e) => {
                    let e = e.to_string();
                    assert!(e.contains(FILE_NAME) && (e.contains("repair") || e.contains("backup")), "{e}");
                    refused += 1;
                }
                Ok(s) => run(async {
                    assert_eq!(s.len(), 1500, "damage at {at}");
                    for p in 0..7 {
                        let mut seen = 0;
                        let mut cursor = None;
                        loop {
                            let page = s.list(&owner(&format!("p{p}")), cursor.as_deref(), 500).await.unwrap();
                            seen += page.tasks.len();
                            match page.next_cursor {
                                Some(c) => cursor = Some(c),
                                None => break,
                            }
                        }
                        assert!(seen >= 214, "damage at {at}: owner p{p} lists {seen}");
                    }
                }),
            }
        }
        assert!(refused > 0, "some of the damage is in pages the tasks live in");
    }

    #[test]
    fn damage_under_a_running_store_fails_each_operation_never_panics_and_health_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let len = filled(dir.path(), 1500);
        // No cache: every read goes to the file, as reads of pages not cached would.
        let s = FileTaskStore::open_with(dir.path(), 100_000, 0).unwrap();
        run(async { assert!(s.health().await.is_ok()) });
        for at in (4096..len).step_by(4096) {
            damage(&s.path, at, 0);
        }
        run(async {
            let mut failures = 0;
            for p in 0..7 {
                if let Err(e) = s.list(&owner(&format!("p{p}")), None, 1000).await {
                    let e = e.to_string();
                    assert!(e.contains(FILE_NAME) && e.contains("damaged"), "{e}");
                    failures += 1;
                }
            }
            assert!(failures > 0);
            let health = s.health().await.unwrap_err().to_string();
            assert!(health.contains("damaged") && health.contains("taskgate store repair"), "{health}");
            // The writer also fails cleanly, and goes on.
            for i in 0..3 {
                let outcome = s.create(record(&format!("new-{i}"), owner("p0"), 9, None)).await;
                if let Err(e) = outcome {
                    assert!(e.to_string().contains(FILE_NAME), "{e}");
                }
            }
        });
    }

    #[test]
    fn check_reports_damage_and_repair_keeps_the_damaged_file_and_salvages_what_reads() {
        let dir = tempfile::tempdir().unwrap();
        let len = filled(dir.path(), 1500);
        let healthy = check_file(dir.path()).unwrap();
        assert!(healthy.healthy() && healthy.tasks == 1500, "{healthy:?}");
        assert_eq!(repair_file(dir.path()).unwrap().1, None, "nothing to repair");
        // Bytes changed inside a page that holds tasks (bit rot; a stray write).
        let file = dir.path().join(FILE_NAME);
        damage_bytes(&file, len / 2 / 4096 * 4096 + 512, &[0x5a; 64]);
        let before = std::fs::read(&file).unwrap();
        let damaged = check_file(dir.path()).unwrap();
        assert!(!damaged.healthy() && !damaged.intact, "{damaged:?}");
        assert!(std::fs::read(&file).unwrap() == before, "check changes nothing");
        let e = FileTaskStore::open(dir.path(), 100_000).err().expect("refused at open").to_string();
        assert!(e.contains("damaged") && e.contains("taskgate store repair"), "{e}");
        assert!(std::fs::read(&file).unwrap() == before, "a refused open changes nothing");
        let (after, kept) = repair_file(dir.path()).unwrap();
        let kept = kept.expect("the damaged file is kept");
        assert!(kept.file_name().unwrap().to_string_lossy().starts_with("tasks.redb.damaged-"), "{kept:?}");
        assert!(std::fs::read(&kept).unwrap() == before, "kept as it was");
        assert!(after.intact && after.tasks >= 1400 && after.tasks + after.unreadable.len() == 1500, "{after:?}");
        // The repaired store opens and serves what was salvaged.
        let s = FileTaskStore::open(dir.path(), 100_000).unwrap();
        assert_eq!(s.len(), after.tasks);
        // No scratch files are left beside it.
        let names: Vec<String> =
            std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
        assert_eq!(names.len(), 2, "{names:?}");
    }

    #[test]
    fn a_file_redb_cannot_open_is_salvaged_from_its_bytes_and_a_file_with_nothing_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let len = filled(dir.path(), 1500);
        let file = dir.path().join(FILE_NAME);
        damage(&file, len / 2 / 4096 * 4096, 0);
        let before = std::fs::read(&file).unwrap();
        let report = check_file(dir.path()).unwrap();
        assert!(!report.intact && report.findings[0].contains("redb cannot open it"), "{report:?}");
        // The records are looked for in its bytes: all but the few on the page of zeros.
        let (after, kept) = repair_file(dir.path()).unwrap();
        assert!(std::fs::read(kept.unwrap()).unwrap() == before, "the damaged file is kept as it was");
        assert!(after.intact && (1400..=1500).contains(&after.tasks), "{after:?}");
        assert_eq!(FileTaskStore::open(dir.path(), 100_000).unwrap().len(), after.tasks);
        // A file with no record left in it: nothing to salvage, and it is left alone.
        let empty = tempfile::tempdir().unwrap();
        std::fs::write(
            empty.path().join(FILE_NAME),
            [b'r', b'e', b'd', b'b', 0x1A, 0x0A, 0xA9, 0x0D, 0x0A].repeat(1000),
        )
        .unwrap();
        let e = repair_file(empty.path()).unwrap_err().to_string();
        assert!(e.contains("nothing can be salvaged") && e.contains("backup"), "{e}");
    }

    #[test]
    fn a_corrupt_file_is_a_clear_error_at_open() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE_NAME), vec![0x5a; 64 * 1024]).unwrap();
        let e = FileTaskStore::open(dir.path(), 10).err().expect("a corrupt file is refused").to_string();
        assert!(e.contains("cannot open the task database") && e.contains(FILE_NAME), "{e}");
    }

    #[test]
    fn an_unwritable_directory_is_a_clear_error_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("not-a-dir");
        std::fs::write(&file, b"x").unwrap();
        let e = FileTaskStore::open(&file.join("data"), 10).err().unwrap().to_string();
        assert!(e.contains("cannot create the data directory"), "{e}");
    }
}
#[cfg(test)]
mod full_disk {
    use super::*;
    use crate::conformance::{cancel, owner, record, run};
    use crate::testing::SmallDisk;

    #[test]
    fn a_full_disk_refuses_changes_as_unavailable_and_loses_nothing_once_space_returns() {
        let disk = SmallDisk::mount(8);
        run(async {
            let s = FileTaskStore::open(&disk.path.join("data"), 100_000).unwrap();
            for i in 0..20 {
                s.create(record(&format!("before{i}"), owner("p"), i, None)).await.unwrap();
            }
            disk.fill();
            let mut refused = None;
            for i in 0..10_000 {
                if let Err(e) = s.create(record(&format!("during{i}"), owner("p"), i, None)).await {
                    refused = Some(e);
                    break;
                }
            }
            let refused = refused.expect("a full disk refuses a change");
            assert!(
                matches!(&refused, StoreError::Unavailable(why) if why.contains("No space left on device")),
                "{refused:?}"
            );
            // Every later change is refused the same way, reads still answer, and the store says
            // why it cannot write (not that it is damaged).
            let change = s.compare_and_set("before0", TaskStatus::Working, cancel(30)).await.unwrap_err();
            assert!(matches!(change, StoreError::Unavailable(_)), "{change:?}");
            let health = s.health().await.unwrap_err();
            assert!(matches!(&health, StoreError::Unavailable(why) if why.contains("cannot be written")), "{health:?}");
            let written = s.len();

            disk.free();
            // The same change, tried again (as a task actor does, while the store opens the
            // database again), lands; so do new ones.
            let mut tries = 0;
            let cancelled = loop {
                match s.compare_and_set("before0", TaskStatus::Working, cancel(30)).await {
                    Err(StoreError::Unavailable(why)) if tries < 200 => {
                        tries += 1;
                        assert!(why.contains("cannot be written"), "{why}");
                        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                    }
                    outcome => break outcome.unwrap(),
                }
            };
            assert_eq!(cancelled.status, TaskStatus::Cancelled);
            s.create(record("after", owner("p"), 40, None)).await.unwrap();
            s.health().await.unwrap();
            assert_eq!(s.len(), written + 1);
            assert_eq!(s.get("before19").await.unwrap().unwrap().status, TaskStatus::Working);
            drop(s);
            // And all of it is on disk.
            let reopened = FileTaskStore::open(&disk.path.join("data"), 100_000).unwrap();
            assert_eq!(reopened.get("before0").await.unwrap().unwrap().status, TaskStatus::Cancelled);
            assert!(reopened.get("after").await.unwrap().is_some());
            assert_eq!(reopened.len(), written + 1);
        });
    }
}
