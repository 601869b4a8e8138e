//! Opening the database file without ever taking damage for an empty store: an empty file is
//! refused, redb's integrity check runs on a copy (so a file it refuses is left as it was), and
//! a copy is only made under a shared lock that a running gateway's exclusive one refuses.

use std::panic::AssertUnwindSafe;
use std::path::Path;

use redb::Database;

use crate::StoreError;

/// What to do with a damaged file, as the errors say it.
pub(super) const WHAT_TO_DO: &str =
    "restore it from a backup, or run `taskgate store repair` (it keeps a copy of the damaged \
                          file and salvages every task it can read), or move the file aside to start with no tasks";

/// Refuses an existing file with nothing in it (a taskgate database never is: an empty file is
/// a failed copy or a full disk, and taking it for a new store would lose every task silently).
/// Returns whether the file exists.
pub(super) fn refuse_an_empty_file(path: &Path) -> Result<bool, StoreError> {
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_file() && meta.len() == 0 => Err(StoreError::Backend(format!(
            "the task database {} is empty, so the tasks it held are gone (a copy that failed, a full disk?): \
             restore it from a backup, or remove the empty file to start with no tasks",
            path.display()
        ))),
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(StoreError::Backend(format!("cannot read the task database {}: {e}", path.display()))),
    }
}

/// Refuses a file this process may not write, saying whose it is: a file left by a run as
/// another user (root, by hand) is not damaged, and is not to be repaired.
pub(super) fn refuse_a_file_of_another_user(path: &Path) -> Result<(), StoreError> {
    use std::os::unix::fs::MetadataExt;
    match std::fs::OpenOptions::new().read(true).write(true).open(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            let owner = std::fs::metadata(path).map(|m| (m.uid(), m.gid())).unwrap_or_default();
            // SAFETY: geteuid only reads this process's effective user id.
            let me = unsafe { libc::geteuid() };
            Err(StoreError::Backend(format!(
                "cannot write the task database {}: permission denied (the file belongs to uid {}, gid {}; taskgate \
                 runs as uid {me}). It is not damaged: give it back to the user taskgate runs as (for the package: \
                 `chown -R taskgate:taskgate {}`), and run taskgate by hand as that user \
                 (`sudo -u taskgate taskgate serve --config /etc/taskgate/taskgate.toml`)",
                path.display(),
                owner.0,
                owner.1,
                path.parent().map_or_else(|| path.display().to_string(), |d| d.display().to_string())
            )))
        }
        Err(_) => Ok(()), // said by what opens it next
    }
}

/// Opens (or creates) the database file; a crash's unfinished commit is rolled back here.
pub(super) fn open_database(path: &Path, cache_bytes: usize) -> Result<Database, StoreError> {
    let opened = catch_quietly(|| Database::builder().set_cache_size(cache_bytes).create(path));
    let opened = opened.map_err(|panic| {
        StoreError::Backend(format!(
            "the task database {} is damaged (redb failed inside: {}): {WHAT_TO_DO}",
            path.display(),
            panic_text(&*panic)
        ))
    })?;
    opened.map_err(|e| {
        StoreError::Backend(match e {
            redb::DatabaseError::DatabaseAlreadyOpen => {
                format!(
                    "{} is already open in another taskgate process (one data directory per process)",
                    path.display()
                )
            }
            e => format!(
                "cannot open the task database {}: {e} (is it a taskgate data directory, and writable?); \
                 if it is damaged: {WHAT_TO_DO}",
                path.display()
            ),
        })
    })
}

/// redb's integrity check (every page's checksum) of an existing file, run on a copy beside it,
/// so a file that fails it is left exactly as it was (redb's check repairs what it checks, and
/// its failure leaves the file harder to salvage): a file that fails it stops the start.
pub(super) fn check_a_copy(path: &Path) -> Result<(), StoreError> {
    let copy = path.with_file_name(format!("{FILE_NAME}.check-{}", std::process::id()));
    if let Err(e) = copy_exclusively(path, &copy) {
        let _ = std::fs::remove_file(&copy);
        return Err(if e.to_string().contains("open in a running taskgate process") {
            StoreError::Backend(format!(
                "{} is already open in another taskgate process (one data directory per process)",
                path.display()
            ))
        } else {
            e
        });
    }
    let shown = |e: StoreError| match e {
        StoreError::Backend(why) => {
            StoreError::Backend(why.replace(&copy.display().to_string(), &path.display().to_string()))
        }
        e => e,
    };
    let outcome = open_database(&copy, DEFAULT_CACHE_BYTES).map_err(shown).and_then(|mut db| {
        let checked = catch_quietly(|| db.check_integrity())
            .unwrap_or_else(|panic| Err(redb::StorageError::Corrupted(panic_text(&*panic)).into()));
        match checked {
            Ok(true) => Ok(()),
            Ok(false) => Err(StoreError::Backend(format!(
                "the task database {} failed its integrity check (redb could go back to its last intact commit, \
                 losing the latest changes of some tasks): {WHAT_TO_DO}",
                path.display()
            ))),
            Err(e) => {
                Err(StoreError::Backend(format!("the task database {} is damaged ({e}): {WHAT_TO_DO}", path.display())))
            }
        }
    });
    let _ = std::fs::remove_file(&copy);
    outcome
}

/// The database file's name inside the data directory.
pub const FILE_NAME: &str = "tasks.redb";
/// Memory for redb's page cache by default (redb's own default is 1 GiB). redb holds up to
/// about twice it: its read cache and its write buffer, each bounded by it.
pub const DEFAULT_CACHE_BYTES: usize = 32 << 20;

/// The text of a panic's payload.
pub(crate) fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".to_owned())
}

/// Copies the file, refusing when a gateway has it open: the copy holds a shared lock on it
/// (redb's writer takes an exclusive one), so a gateway cannot start on it meanwhile either.
pub(super) fn copy_exclusively(path: &Path, to: &Path) -> Result<(), StoreError> {
    use std::os::fd::AsRawFd;
    let file =
        std::fs::File::open(path).map_err(|e| StoreError::Backend(format!("cannot read {}: {e}", path.display())))?;
    // SAFETY: flock only changes the lock state of this open file, closed when `file` is dropped.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) } != 0 {
        return Err(StoreError::Backend(format!(
            "{} is open in a running taskgate process: stop it first",
            path.display()
        )));
    }
    let copied = std::fs::copy(path, to);
    drop(file);
    copied.map(drop).map_err(|e| {
        StoreError::Backend(format!(
            "cannot copy {} to {} (is there room on the disk?): {e}",
            path.display(),
            to.display()
        ))
    })
}

thread_local! {
    /// Set while this thread runs redb where its panics are caught and reported by the caller.
    static QUIET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// `catch_unwind`, with the panic kept off stderr (the process's panic hook stays as it was
/// for every other thread and every panic not caught here): the caller reports it in one line.
pub(crate) fn catch_quietly<T>(work: impl FnOnce() -> T) -> std::thread::Result<T> {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.with(std::cell::Cell::get) {
                previous(info);
            }
        }));
    });
    /// Puts the flag back however `work` ends.
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            QUIET.with(|q| q.set(self.0));
        }
    }
    let _restore = Restore(QUIET.with(|q| q.replace(true)));
    std::panic::catch_unwind(AssertUnwindSafe(work))
}
