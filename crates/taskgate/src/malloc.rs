//! glibc's malloc, tuned to give memory back after a burst of tasks.
//!
//! The Supervisor calls `malloc_trim` once the tasks of a burst have gone, which returns every
//! free page of glibc's arenas to the system but those under the chunks each thread keeps for
//! itself (its tcache: glibc keeps 7 freed chunks of each small size per thread, by default).
//! After 100,000 tasks expire, those few hundred chunks lie scattered over the arena the tasks
//! grew, and each keeps its page resident: the gateway stayed at 1.10–1.12× its baseline RSS.
//! With 2 chunks of each size a thread, it goes back to 1.04–1.05×, for about 3% more
//! instructions a proxied call (BENCHMARKS.md, "Session 20", with jemalloc and mimalloc).
//!
//! glibc reads its tunables from the environment when a process starts, so `serve` and `demo`
//! run themselves again with `GLIBC_TUNABLES` set, once, before any thread exists, and take it
//! out of their environment again so that stdio upstreams start with the operator's. An
//! operator who sets `GLIBC_TUNABLES` (even empty) keeps exactly what they set.

use taskgate_config::defaults::GLIBC_TUNABLES as TUNABLES;

/// In the environment of the process run again: `GLIBC_TUNABLES` is ours, not the operator's.
const MARK: &str = "TASKGATE_MALLOC_TUNED";

/// How this process's malloc is set up, for the log.
#[derive(Debug, PartialEq, Eq)]
pub enum Tuning {
    /// Running with [`TUNABLES`].
    Tuned,
    /// The operator's own `GLIBC_TUNABLES` (possibly empty).
    Operators(String),
    /// Not glibc's malloc (another allocator, another C library).
    NotGlibc,
    /// Running again failed; glibc's defaults.
    Failed(String),
}

/// Runs this process again with [`TUNABLES`] unless it already runs with them or the operator
/// set `GLIBC_TUNABLES`. Must be called before any thread is started: it changes the
/// environment.
pub fn tune() -> Tuning {
    if !cfg!(all(target_os = "linux", target_env = "gnu", not(feature = "mimalloc"), not(feature = "jemalloc"))) {
        return Tuning::NotGlibc;
    }
    if std::env::var_os(MARK).is_some() {
        // The process run again: glibc has read the tunables; children start without them.
        std::env::remove_var(MARK);
        std::env::remove_var("GLIBC_TUNABLES");
        return Tuning::Tuned;
    }
    if let Some(theirs) = std::env::var_os("GLIBC_TUNABLES") {
        return Tuning::Operators(theirs.to_string_lossy().into_owned());
    }
    Tuning::Failed(run_again().to_string())
}

/// Replaces this process with the same program and arguments and [`TUNABLES`]; returns only
/// if that failed.
#[cfg(unix)]
fn run_again() -> std::io::Error {
    use std::os::unix::process::CommandExt;
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => return e,
    };
    let mut args = std::env::args_os();
    let mut command = std::process::Command::new(exe);
    if let Some(arg0) = args.next() {
        command.arg0(arg0);
    }
    command.args(args).env("GLIBC_TUNABLES", TUNABLES).env(MARK, "1").exec()
}

#[cfg(not(unix))]
fn run_again() -> std::io::Error {
    std::io::Error::other("not supported on this system")
}

impl Tuning {
    /// Logs how malloc is set up, once the log exists.
    pub fn log(&self) {
        match self {
            Tuning::Tuned => tracing::info!(tunables = TUNABLES, "glibc malloc tuned (GLIBC_TUNABLES)"),
            Tuning::Operators(theirs) => {
                tracing::info!(tunables = %theirs, "glibc malloc: the operator's GLIBC_TUNABLES kept")
            }
            Tuning::NotGlibc => {}
            Tuning::Failed(why) => tracing::warn!(
                tunables = TUNABLES,
                error = %why,
                "could not run again with glibc's tunables: memory freed after a burst of tasks is given back less fully"
            ),
        }
    }
}
