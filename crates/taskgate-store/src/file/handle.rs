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
/// The least time between two tries to open the database again while the disk refuses.
const REOPEN_EVERY: Duration = Duration::from_millis(200);
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
    /// When the database was last tried to be opened again.
    tried: Option<Instant>,
}

impl Handle {
    pub(super) fn new(db: Database, path: PathBuf, cache_bytes: usize) -> Handle {
        let state = State { db: Some(Arc::new(db)), failing: None, tried: None };
        Handle { state: Arc::new(RwLock::new(state)), path, cache_bytes }
    }

    /// The open database, for a read.
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
    /// closed it (at most every [`REOPEN_EVERY`]; meanwhile, the batch fails as unavailable).
    pub(super) fn writable(&self) -> Result<Arc<Database>, StoreError> {
        let mut state = self.state.write();
        if let Some(db) = &state.db {
            return Ok(db.clone());
        }
        if state.tried.is_some_and(|at| at.elapsed() < REOPEN_EVERY) {
            return Err(self.unavailable(state.failing.as_deref()));
        }
        state.tried = Some(Instant::now());
        match open_database(&self.path, self.cache_bytes) {
            Ok(db) => {
                // Writes are known to work again once a batch commits ([`Handle::committed`]).
                let db = Arc::new(db);
                state.db = Some(db.clone());
                Ok(db)
            }
            Err(e) => {
                let why = e.to_string();
                tracing::debug!(error = %why, "the task database cannot be opened again yet");
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
    /// again, so it is closed here (once reads in progress let it go) and opened again before
    /// the next batch.
    pub(super) fn disk_failed(&self, why: &str) {
        let prefix = format!("the task database {}: ", self.path.display());
        let why = why.strip_prefix(&prefix).unwrap_or(why);
        let closing = {
            let mut state = self.state.write();
            if state.failing.is_none() {
                tracing::error!(path = %self.path.display(), error = %why, "the task database could not be written; changes are refused (and task actors retry theirs) until the disk takes writes again");
            }
            state.failing = Some(why.to_owned());
            state.tried = None;
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
        // Opened again at once, so reads go on while the disk refuses writes.
        let _ = self.writable();
    }
}
