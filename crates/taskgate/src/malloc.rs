//! glibc's malloc, tuned to give memory back after a burst of tasks.
//!
//! The Supervisor calls `malloc_trim` once the tasks of a burst have gone, which returns every
//! free page of glibc's arenas to the system but those under the chunks each thread keeps for
//! itself (its tcache: glibc keeps 7 freed chunks of each small size per thread, by default).
//! After 100,000 tasks expire, those few hundred chunks lie scattered over the arena the tasks
//! grew, and each keeps its page resident: the gateway stayed at 1.10–1.12× its baseline RSS.
//! With 2 chunks of each size a thread, it goes back to 1.04–1.05×, for about 3% more
//! instructions a proxied call (BENCHMARKS.md, "Memory after tasks expire", which also measures jemalloc and
//! mimalloc: both kept more).
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
    /// Run by something a second `exec` would leave (the dynamic loader named on the command
    /// line, valgrind): glibc's defaults, and why.
    Wrapped(&'static str),
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
    let marked = std::env::var_os(MARK).is_some();
    let tunables = std::env::var_os("GLIBC_TUNABLES");
    if marked {
        std::env::remove_var(MARK);
        if ran_again(marked, tunables.as_deref()) {
            // The process run again: glibc has read the tunables; children start without them.
            std::env::remove_var("GLIBC_TUNABLES");
            return Tuning::Tuned;
        }
        // A mark without our tunables came from elsewhere: dropped, and on as if it were not.
    }
    if let Some(theirs) = tunables {
        return Tuning::Operators(theirs.to_string_lossy().into_owned());
    }
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => return Tuning::Failed(e.to_string()),
    };
    if let Some(why) = wrapped(&exe, std::env::var_os("LD_PRELOAD").as_deref()) {
        return Tuning::Wrapped(why);
    }
    Tuning::Failed(run_again(exe).to_string())
}

/// Whether this is the process run again: marked, with exactly [`TUNABLES`] (a mark the
/// operator's environment happened to hold, with their tunables or none, is not).
fn ran_again(marked: bool, tunables: Option<&std::ffi::OsStr>) -> bool {
    marked && tunables == Some(std::ffi::OsStr::new(TUNABLES))
}

/// Why running `exe` again would not run this program as it runs now, if it would not:
/// started as `ld-linux… taskgate serve`, `exe` is the loader, which would not find the
/// program again; under valgrind (its preload library in `LD_PRELOAD`), the program run
/// again would run outside it.
fn wrapped(exe: &std::path::Path, preload: Option<&std::ffi::OsStr>) -> Option<&'static str> {
    let name = exe.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
    if name.starts_with("ld-linux") || name.starts_with("ld.so") || name.starts_with("ld-musl") {
        return Some("started by the dynamic loader");
    }
    if preload.is_some_and(|p| p.to_string_lossy().contains("vgpreload")) {
        return Some("running under valgrind");
    }
    None
}

/// Replaces this process with the same program and arguments and [`TUNABLES`]; returns only
/// if that failed.
#[cfg(unix)]
fn run_again(exe: std::path::PathBuf) -> std::io::Error {
    use std::os::unix::process::CommandExt;
    let mut args = std::env::args_os();
    let mut command = std::process::Command::new(exe);
    if let Some(arg0) = args.next() {
        command.arg0(arg0);
    }
    command.args(args).env("GLIBC_TUNABLES", TUNABLES).env(MARK, "1").exec()
}

#[cfg(not(unix))]
fn run_again(_exe: std::path::PathBuf) -> std::io::Error {
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
            Tuning::Wrapped(why) => tracing::info!(
                tunables = TUNABLES,
                "glibc malloc keeps its defaults ({why}): set GLIBC_TUNABLES to choose"
            ),
            Tuning::Failed(why) => tracing::warn!(
                tunables = TUNABLES,
                error = %why,
                "could not run again with glibc's tunables: memory freed after a burst of tasks is given back less fully"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;
    use std::path::Path;

    use super::{ran_again, wrapped, TUNABLES};

    #[test]
    fn the_program_is_run_again_only_when_that_runs_it_as_it_runs_now() {
        assert_eq!(wrapped(Path::new("/usr/local/bin/taskgate"), None), None);
        assert_eq!(wrapped(Path::new("/opt/gw/my-gateway"), Some(OsStr::new("/usr/lib/libfoo.so"))), None);
        assert_eq!(
            wrapped(Path::new("/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"), None),
            Some("started by the dynamic loader")
        );
        assert_eq!(wrapped(Path::new("/lib/ld-musl-x86_64.so.1"), None), Some("started by the dynamic loader"));
        let valgrind = OsStr::new("/usr/libexec/valgrind/vgpreload_core-amd64-linux.so");
        assert_eq!(wrapped(Path::new("/work/target/release/taskgate"), Some(valgrind)), Some("running under valgrind"));
    }

    #[test]
    fn only_a_mark_with_our_tunables_is_the_process_run_again() {
        assert!(ran_again(true, Some(OsStr::new(TUNABLES))));
        assert!(!ran_again(true, None));
        assert!(!ran_again(true, Some(OsStr::new("glibc.malloc.arena_max=2"))));
        assert!(!ran_again(false, Some(OsStr::new(TUNABLES))));
    }
}
