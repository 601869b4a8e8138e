//! The open database, and what the store saw go wrong with it: damage (kept until an offline
//! repair) or a failed write to the disk (a full disk, EIO), after which redb refuses every
//! operation until the database is opened again, so the writer closes it and opens it again
//! before its next change, for as long as the disk refuses.

use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use redb::Database;

use super::open::{open_database, panic_text};
use crate::StoreError;

/// How a failure that says the file is damaged begins.
pub(super) const DAMAGED: &str = "the database file is damaged";
/// How a failure of the disk under the file (a write refused, an I/O error) begins.
pub(super) const DISK_FAILED: &str = "the disk refused a write";
/// The least time between two tries to open the database again while the disk refuses; each
/// try that fails doubles it, up to [`REOPEN_AT_MOST`].
const REOPEN_EVERY: Duration = Duration::from_millis(100);
const REOPEN_AT_MOST: Duration = Duration::from_secs(2);
/// How long closing waits for reads in progress to let the database go.
const CLOSE_WAIT: Duration = Duration::from_secs(10);

/// What the store saw of damage to its file while running: the first sign, kept until the
/// process ends (only an offline repair mends a damaged file).
#[derive(Clone, Default)]
pub(super) struct Damage(Arc<Mutex<Option<String>>>);

impl Damage {
    fn note(&self, what: &str) {
        let mut seen = self.0.lock();
        if seen.is_none() {
            tracing::error!(damage = %what, "the task database is damaged: stop taskgate and run `taskgate store repair`");
            *seen = Some(what.to_owned());
        }
    }

    pub(super) fn seen(&self) -> Option<String> {
        self.0.lock().clone()
    }

    /// Runs one redb operation: a panic inside redb, or an error saying the file is damaged,
    /// is noted and becomes this operation's error; a failure of the disk is one that may pass.
    pub(super) fn guard<T>(&self, path: &Path, work: impl FnOnce() -> Result<T, StoreError>) -> Result<T, StoreError> {
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(work)).unwrap_or_else(|panic| {
            let why = panic_text(&*panic);
            Err(StoreError::Backend(format!("{DAMAGED}: redb failed inside ({why})")))
        });
        match outcome {
            Err(StoreError::Backend(why)) if why.starts_with(DAMAGED) => {
                self.note(&why);
                Err(StoreError::Failed(format!("the task database {}: {why}", path.display())))
            }
            Err(StoreError::Backend(why)) if why.starts_with(DISK_FAILED) => {
                Err(StoreError::Unavailable(format!("the task database {}: {why}", path.display())))
            }
            outcome => outcome,
        }
    }
}

/// The database while it is open; closed after a failure of the disk until it opens again.
#[derive(Clone)]
pub(super) struct Handle {
    state: Arc<RwLock<State>>,
    path: PathBuf,
    cache_bytes: usize,
}

struct State {
    db: Option<Arc<Database>>,
    /// Why writes fail, while they do.
    failing: Option<String>,
    /// When the database may next be tried to be opened again, and the wait after that.
    next_try: Option<(Instant, Duration)>,
    /// Being opened again (by the writer, outside the lock).
    opening: bool,
}

impl Handle {
    pub(super) fn new(db: Database, path: PathBuf, cache_bytes: usize) -> Handle {
        let state = State { db: Some(Arc::new(db)), failing: None, next_try: None, opening: false };
        Handle { state: Arc::new(RwLock::new(state)), path, cache_bytes }
    }

    /// The open database, for a read: the caller keeps it until its read transaction ends, so
    /// a close waits for the read.
    pub(super) fn current(&self) -> Result<Arc<Database>, StoreError> {
        let state = self.state.read();
        state.db.clone().ok_or_else(|| self.unavailable(state.failing.as_deref()))
    }

    /// Why writes fail now, if they do.
    pub(super) fn failing(&self) -> Option<String> {
        self.state.read().failing.clone()
    }

    fn unavailable(&self, why: Option<&str>) -> StoreError {
        StoreError::Unavailable(format!(
            "the task database {} cannot be written ({}); it is opened again once the disk takes writes",
            self.path.display(),
            why.unwrap_or("it is being opened again")
        ))
    }

    /// The database for the writer's next batch: opened again first when a failure of the disk
    /// closed it (the tries spaced from [`REOPEN_EVERY`] up to [`REOPEN_AT_MOST`]; meanwhile,
    /// the batch fails as unavailable). The opening (redb's repair of the file) runs outside
    /// the lock, so reads are refused at once meanwhile, never held.
    pub(super) fn writable(&self) -> Result<Arc<Database>, StoreError> {
        let wait = {
            let mut state = self.state.write();
            if let Some(db) = &state.db {
                return Ok(db.clone());
            }
            let now = Instant::now();
            match state.next_try {
                Some((at, _)) if now < at => return Err(self.unavailable(state.failing.as_deref())),
                _ if state.opening => return Err(self.unavailable(state.failing.as_deref())),
                _ => {}
            }
            state.opening = true;
            state.next_try.map_or(REOPEN_EVERY, |(_, wait)| wait)
        };
        let opened = open_database(&self.path, self.cache_bytes);
        let mut state = self.state.write();
        state.opening = false;
        match opened {
            Ok(db) => {
                // Writes are known to work again once a batch commits ([`Handle::committed`]).
                let db = Arc::new(db);
                state.db = Some(db.clone());
                state.next_try = None;
                Ok(db)
            }
            Err(e) => {
                tracing::debug!(error = %e, "the task database cannot be opened again yet");
                state.next_try = Some((Instant::now() + wait, (wait * 2).min(REOPEN_AT_MOST)));
                Err(self.unavailable(state.failing.as_deref()))
            }
        }
    }

    /// A batch was committed: the disk takes writes.
    pub(super) fn committed(&self) {
        if self.state.read().failing.is_none() {
            return;
        }
        if self.state.write().failing.take().is_some() {
            tracing::warn!(path = %self.path.display(), "the task database takes writes again");
        }
    }

    /// After a failure of the disk: redb refuses every operation until the database is opened
    /// again, so it is closed here (once reads in progress let it go) and opened again at once,
    /// so that reads go on while the disk refuses writes.
    pub(super) fn disk_failed(&self, why: &str) {
        let prefix = format!("the task database {}: ", self.path.display());
        let why = why.strip_prefix(&prefix).unwrap_or(why);
        let closing = {
            let mut state = self.state.write();
            if state.failing.is_none() {
                tracing::error!(path = %self.path.display(), error = %why, "the task database could not be written; changes are refused (and task actors retry theirs) until the disk takes writes again");
            }
            state.failing = Some(why.to_owned());
            state.db.take()
        };
        let Some(mut db) = closing else { return };
        let started = Instant::now();
        loop {
            match Arc::try_unwrap(db) {
                Ok(db) => break drop(db),
                Err(shared) if started.elapsed() < CLOSE_WAIT => {
                    db = shared;
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(_) => {
                    tracing::error!(path = %self.path.display(), "a read held the task database for {CLOSE_WAIT:?}; it is opened again once that read ends");
                    return;
                }
            }
        }
        let _ = self.writable();
    }
}
