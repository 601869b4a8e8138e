//! What a run measures: the sections, the counts of the full and the quick run, the arguments.

use anyhow::Result;

/// Counts for one run.
pub(crate) struct Plan {
    pub(crate) quick: bool,
    pub(crate) only: Option<String>,
    pub(crate) sequential: usize,
    pub(crate) concurrent_total: usize,
    pub(crate) concurrency: usize,
    pub(crate) tasks: usize,
    pub(crate) progress_values: usize,
    pub(crate) cancellations: usize,
}

impl Plan {
    pub(crate) fn new(quick: bool) -> Plan {
        if quick {
            Plan {
                quick,
                only: None,
                sequential: 50,
                concurrent_total: 256,
                concurrency: 64,
                tasks: 500,
                progress_values: 500,
                cancellations: 300,
            }
        } else {
            Plan {
                quick,
                only: None,
                sequential: 2000,
                concurrent_total: 20_000,
                concurrency: 64,
                tasks: 100_000,
                progress_values: 20_000,
                cancellations: 10_000,
            }
        }
    }
}

/// The sections, in the order a full run takes them.
pub(crate) const SECTIONS: [&str; 16] = [
    "proxy",
    "polling",
    "tasks",
    "progress",
    "cancellation",
    "stores",
    "soak",
    "revisions",
    "instructions",
    "sessions",
    "one-shot",
    "credentials",
    "refusals",
    "replicas",
    "spread",
    "catalog",
];

pub(crate) const USAGE: &str = "usage: taskgate-bench [--quick] [--only SECTION] [--tasks N]

Runs taskgate's benchmarks against the taskgate binary beside this one (build the workspace
first: cargo build --release --workspace) and prints the report as Markdown.

  --quick          every measurement with small counts: checks that each works (CI runs this);
                   the figures mean nothing
  --only SECTION   one section: proxy, polling, tasks, progress, cancellation, stores, soak,
                   revisions, instructions, sessions, one-shot, credentials, refusals, replicas,
                   spread, catalog
  --tasks N        the number of live tasks of the task-scale section (default 100000)
  --help           this text

nginx (the reverse-proxy comparison), redis-server (the Redis rows) and valgrind (instruction
counts) are used when installed and skipped with a note otherwise.

Environment: TASKGATE_BENCH_WRAP runs the gateway under a profiler (e.g. \"valgrind
--tool=massif\"); TASKGATE_BENCH_CALLGRIND_DIR keeps the callgrind profiles of the
instruction and refusal sections in that directory; TASKGATE_BENCH_PREVIOUS=/path/to/taskgate also runs the refusals
section against that (older) build.";

/// Reads the command line; `Err` carries the message for a bad one.
pub(crate) fn parse_args(args: &[String]) -> Result<Option<Plan>, String> {
    let mut quick = false;
    let mut only = None;
    let mut tasks = None;
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--help" | "-h" => return Ok(None),
            "--quick" => quick = true,
            "--only" => {
                let section = rest.next().ok_or("--only needs a section")?;
                if !SECTIONS.contains(&section.as_str()) {
                    return Err(format!("unknown section {section:?}; the sections are {}", SECTIONS.join(", ")));
                }
                only = Some(section.clone());
            }
            "--tasks" => {
                let n = rest.next().ok_or("--tasks needs a count")?;
                tasks = Some(
                    n.parse::<usize>().ok().filter(|n| *n > 0).ok_or(format!("--tasks {n:?}: not a positive count"))?,
                );
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let mut plan = Plan::new(quick);
    plan.only = only;
    if let Some(n) = tasks {
        plan.tasks = n;
    }
    Ok(Some(plan))
}
