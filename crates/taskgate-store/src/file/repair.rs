//! Offline care of a damaged database file: [`check_file`] looks without changing anything,
//! [`repair_file`] keeps the damaged file and mends it (redb's own repair, else a salvage of
//! every task that can still be read into a new file). Both run while no gateway has the file
//! open (`taskgate store check|repair`).

use std::path::{Path, PathBuf};

use redb::{Database, ReadableDatabase, ReadableTable};

use super::open::{
    catch_quietly, copy_exclusively, open_database, panic_text, refuse_an_empty_file, DEFAULT_CACHE_BYTES, FILE_NAME,
};
use super::{backend, decode, insert, BY_EXPIRY, BY_OWNER, LIVE, TASKS};
use crate::{StoreError, TaskRecord};

/// What [`check_file`] or [`repair_file`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inspection {
    /// The file looked at.
    pub path: PathBuf,
    /// redb's integrity check: every page of the last commit is intact.
    pub intact: bool,
    /// Tasks read and decoded.
    pub tasks: usize,
    /// Task ids the indexes name whose record could not be read or decoded (lost in a repair).
    pub unreadable: Vec<String>,
    /// What else was found, one line each.
    pub findings: Vec<String>,
}

impl Inspection {
    /// Whether the file needs nothing done.
    pub fn healthy(&self) -> bool {
        self.intact && self.unreadable.is_empty() && self.findings.is_empty()
    }
}

/// Checks the store in `dir` without changing it (the gateway must not be running on it): redb's
/// integrity check on a copy of the file beside it, then every task read and every index
/// compared with the tasks.
pub fn check_file(dir: &Path) -> Result<Inspection, StoreError> {
    let path = dir.join(FILE_NAME);
    if !refuse_an_empty_file(&path)? {
        return Err(StoreError::Backend(format!("there is no task database at {}", path.display())));
    }
    let copy = dir.join(format!("{FILE_NAME}.check-{}", std::process::id()));
    let outcome = copy_exclusively(&path, &copy).and_then(|()| inspect(&copy, &path));
    let _ = std::fs::remove_file(&copy);
    outcome
}

/// Opens `file` (a copy: it may be changed) and inspects it, reporting as `shown`.
fn inspect(file: &Path, shown: &Path) -> Result<Inspection, StoreError> {
    let (mut db, mut findings) = match open_copy(file) {
        Ok(opened) => opened,
        Err(e) => {
            let why = e.to_string().replace(&file.display().to_string(), &shown.display().to_string());
            return Ok(Inspection {
                path: shown.to_owned(),
                intact: false,
                tasks: 0,
                unreadable: Vec::new(),
                findings: vec![format!("redb cannot open it: {why}")],
            });
        }
    };
    let intact = findings.is_empty() && matches!(catch_quietly(|| db.check_integrity()), Ok(Ok(true)));
    let salvaged = salvage(&db);
    if !intact && findings.is_empty() {
        findings.push("redb's integrity check failed: pages of the last commit are damaged".into());
    }
    findings.extend(salvaged.findings);
    Ok(Inspection {
        path: shown.to_owned(),
        intact,
        tasks: salvaged.records.len(),
        unreadable: salvaged.unreadable,
        findings,
    })
}

/// Opens a copy of a damaged file. A file an earlier open left marked as not closed cleanly
/// makes redb repair it as it opens, which verifies every page and fails on a damaged one: the
/// copy is first opened with that mark cleared (redb then loads the state it saved of free
/// pages, and reads only what is asked), then with it set (redb rebuilds that state when its own
/// is damaged). The mark is redb's header flag (its file format, `docs/design.md` in its
/// repository). Says so in the findings.
fn open_copy(file: &Path) -> Result<(Database, Vec<String>), StoreError> {
    let first = match open_database(file, DEFAULT_CACHE_BYTES) {
        Ok(db) => return Ok((db, Vec::new())),
        Err(e) => e,
    };
    for (recovery, how) in [(false, "its not-closed-cleanly mark cleared"), (true, "redb's crash recovery")] {
        if set_recovery(file, recovery).is_ok() {
            if let Ok(db) = open_database(file, DEFAULT_CACHE_BYTES) {
                return Ok((db, vec![format!("redb cannot open it as it is ({first}); it was opened with {how}")]));
            }
        }
    }
    Err(first)
}

/// Sets or clears redb's "recovery required" flag (bit 2 of the byte after the 9-byte magic).
fn set_recovery(file: &Path, on: bool) -> std::io::Result<()> {
    use std::io::{Read, Seek, SeekFrom, Write};
    const MAGIC: [u8; 9] = [b'r', b'e', b'd', b'b', 0x1A, 0x0A, 0xA9, 0x0D, 0x0A];
    let mut f = std::fs::OpenOptions::new().read(true).write(true).open(file)?;
    let mut head = [0u8; 10];
    f.read_exact(&mut head)?;
    if head[..9] != MAGIC {
        return Err(std::io::Error::other("it does not begin as a redb database"));
    }
    f.seek(SeekFrom::Start(9))?;
    f.write_all(&[if on { head[9] | 2 } else { head[9] & !2 }])?;
    f.sync_all()
}

/// Every task that can be read from a database, however damaged: ids are gathered from each
/// table on its own (a damaged page ends one walk, not the others), then each task is read
/// on its own.
struct Salvaged {
    records: Vec<TaskRecord>,
    unreadable: Vec<String>,
    findings: Vec<String>,
}

/// Unreadable tasks reported one line each at most; the rest are counted.
const MAX_LINES: usize = 20;

fn salvage(db: &Database) -> Salvaged {
    let mut findings = Vec::new();
    let mut ids = std::collections::BTreeSet::new();
    // The last key each walk read, to say where a table stops being readable.
    let last = std::cell::RefCell::new(String::new());
    let mut walk = |name: &str, collect: &mut dyn FnMut(&redb::ReadTransaction) -> Result<(), StoreError>| {
        last.borrow_mut().clear();
        let outcome = catch_quietly(|| {
            let txn = db.begin_read().map_err(backend)?;
            collect(&txn)
        })
        .unwrap_or_else(|panic| Err(StoreError::Backend(format!("redb failed inside: {}", panic_text(&*panic)))));
        if let Err(e) = outcome {
            let place = match last.borrow().as_str() {
                "" => "from its first key".to_owned(),
                key => format!("after key {key:?}"),
            };
            findings.push(format!("the table '{name}' could not be read {place}: {e}"));
        }
    };
    let seen = |key: &[u8]| *last.borrow_mut() = String::from_utf8_lossy(key).into_owned();
    let mut indexed = std::collections::BTreeSet::new();
    walk("tasks", &mut |txn| {
        for entry in txn.open_table(TASKS).map_err(backend)?.iter().map_err(backend)? {
            let id = entry.map_err(backend)?.0.value().to_owned();
            seen(id.as_bytes());
            ids.insert(id);
        }
        Ok(())
    });
    walk("by_owner", &mut |txn| {
        for entry in txn.open_table(BY_OWNER).map_err(backend)?.iter().map_err(backend)? {
            let key = entry.map_err(backend)?.0.value().to_vec();
            if let Some(id) = id_of_owner_key(&key) {
                seen(id.as_bytes());
                indexed.insert(id);
            }
        }
        Ok(())
    });
    walk("by_expiry", &mut |txn| {
        for entry in txn.open_table(BY_EXPIRY).map_err(backend)?.iter().map_err(backend)? {
            let key = entry.map_err(backend)?.0.value().to_vec();
            seen(key.get(8..).unwrap_or_default());
            indexed.insert(String::from_utf8_lossy(key.get(8..).unwrap_or_default()).into_owned());
        }
        Ok(())
    });
    walk("live", &mut |txn| {
        for entry in txn.open_table(LIVE).map_err(backend)?.iter().map_err(backend)? {
            let id = entry.map_err(backend)?.0.value().to_owned();
            seen(id.as_bytes());
            indexed.insert(id);
        }
        Ok(())
    });
    let missing_from_tasks = indexed.difference(&ids).count();
    if missing_from_tasks > 0 {
        findings.push(format!("{missing_from_tasks} task ids named by an index were not found walking the tasks"));
    }
    ids.extend(indexed);
    let (mut records, mut unreadable) = (Vec::new(), Vec::new());
    for id in ids {
        let read = catch_quietly(|| {
            let txn = db.begin_read().map_err(backend)?;
            let tasks = txn.open_table(TASKS).map_err(backend)?;
            let found = tasks.get(id.as_str()).map_err(backend)?;
            found.map(|bytes| decode(bytes.value())).transpose()
        });
        let why = match read {
            Ok(Ok(Some(record))) if record.id == id => {
                records.push(record);
                continue;
            }
            Ok(Ok(Some(record))) => format!("it holds the record of task {:?}", record.id),
            Ok(Ok(None)) => "an index names it, the table holds no record".to_owned(),
            Ok(Err(e)) => e.to_string(),
            Err(panic) => format!("redb failed inside: {}", panic_text(&*panic)),
        };
        if unreadable.len() < MAX_LINES {
            findings.push(format!("the table 'tasks' cannot give key {id:?}: {why}"));
        }
        unreadable.push(id);
    }
    if unreadable.len() > MAX_LINES {
        findings.push(format!("{} more tasks cannot be read", unreadable.len() - MAX_LINES));
    }
    Salvaged { records, unreadable, findings }
}

/// The task id at the end of a `by_owner` key.
fn id_of_owner_key(key: &[u8]) -> Option<String> {
    let mut at = 0;
    for _ in 0..2 {
        let len = u32::from_be_bytes(key.get(at..at + 4)?.try_into().ok()?) as usize;
        at += 4 + len;
    }
    Some(String::from_utf8_lossy(key.get(at + 8..)?).into_owned())
}

/// Repairs the store in `dir` (the gateway must not be running on it). The damaged file is
/// kept first, as `tasks.redb.damaged-<unix time>` beside it. Then redb's own repair, which
/// goes back to the last intact commit; when that cannot mend the file, every task that can
/// still be read is written to a new database that takes the file's place. Returns what the
/// repaired store holds, and the damaged copy's path (`None` when the file was intact).
pub fn repair_file(dir: &Path) -> Result<(Inspection, Option<PathBuf>), StoreError> {
    let path = dir.join(FILE_NAME);
    if !refuse_an_empty_file(&path)? {
        return Err(StoreError::Backend(format!("there is no task database at {}", path.display())));
    }
    let before = check_file(dir)?;
    if before.healthy() {
        return Ok((before, None));
    }
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let kept = dir.join(format!("{FILE_NAME}.damaged-{stamp}"));
    copy_exclusively(&path, &kept)?;
    // redb's repair first: when it mends the file, nothing more is lost than its last commit.
    let mended = open_database(&path, DEFAULT_CACHE_BYTES).ok().and_then(|mut db| {
        catch_quietly(|| db.check_integrity()).ok()?.ok()?;
        Some(())
    });
    if mended.is_some() {
        let after = check_file(dir)?;
        if after.healthy() {
            return Ok((after, Some(kept)));
        }
    }
    // Then salvage what a copy of the damaged file still holds into a new file (opening a
    // copy: redb may change what it opens, and the kept one stays as it was).
    let scratch = dir.join(format!("{FILE_NAME}.salvage-{}", std::process::id()));
    copy_exclusively(&kept, &scratch)?;
    let salvaged = open_copy(&scratch).map(|(source, _)| salvage(&source));
    let _ = std::fs::remove_file(&scratch);
    // When redb cannot open it at all, the records themselves are looked for in its bytes.
    let salvaged = match salvaged {
        Ok(salvaged) => salvaged,
        Err(e) => {
            let bytes = std::fs::read(&kept)
                .map_err(|e| StoreError::Backend(format!("cannot read {}: {e}", kept.display())))?;
            let records = scan_records(&bytes);
            if records.is_empty() {
                return Err(StoreError::Backend(format!(
                    "{e}; nothing can be salvaged from it: restore {} from a backup, or move it aside to start with no tasks",
                    path.display()
                )));
            }
            Salvaged { records, unreadable: Vec::new(), findings: Vec::new() }
        }
    };
    let fresh = dir.join(format!("{FILE_NAME}.repairing"));
    let _ = std::fs::remove_file(&fresh);
    write_records(&fresh, &salvaged.records)?;
    std::fs::rename(&fresh, &path)
        .map_err(|e| StoreError::Backend(format!("cannot move {} to {}: {e}", fresh.display(), path.display())))?;
    let mut after = check_file(dir)?;
    after.unreadable = salvaged.unreadable;
    Ok((after, Some(kept)))
}

/// The task records in a database file's bytes, for a file redb cannot open: each JSON object
/// that reads as a record, the latest version of each task (copy-on-write leaves older ones in
/// pages since freed; a task deleted shortly before may come back, and one past its ttl is
/// swept at the next start).
fn scan_records(bytes: &[u8]) -> Vec<TaskRecord> {
    let mut latest: std::collections::HashMap<String, TaskRecord> = std::collections::HashMap::new();
    let mut from = 0;
    while let Some(found) = memchr::memmem::find(&bytes[from..], br#"{"id":""#) {
        let at = from + found;
        let mut stream = serde_json::Deserializer::from_slice(&bytes[at..]).into_iter::<TaskRecord>();
        if let Some(Ok(record)) = stream.next() {
            let newer = latest.get(&record.id).is_none_or(|kept| kept.last_updated_at_ms <= record.last_updated_at_ms);
            if newer {
                latest.insert(record.id.clone(), record);
            }
        }
        from = at + 1;
    }
    let mut records: Vec<TaskRecord> = latest.into_values().collect();
    records.sort_by(|a, b| a.created_at_ms.cmp(&b.created_at_ms).then_with(|| a.id.cmp(&b.id)));
    records
}

/// A new database at `path` holding `records`, with every index.
fn write_records(path: &Path, records: &[TaskRecord]) -> Result<(), StoreError> {
    let db =
        Database::create(path).map_err(|e| StoreError::Backend(format!("cannot create {}: {e}", path.display())))?;
    let txn = db.begin_write().map_err(backend)?;
    {
        let mut tasks = txn.open_table(TASKS).map_err(backend)?;
        let mut by_owner = txn.open_table(BY_OWNER).map_err(backend)?;
        let mut by_expiry = txn.open_table(BY_EXPIRY).map_err(backend)?;
        let mut live = txn.open_table(LIVE).map_err(backend)?;
        for record in records {
            insert(&mut tasks, &mut by_owner, &mut by_expiry, &mut live, record)?;
        }
    }
    txn.commit().map_err(backend)
}
