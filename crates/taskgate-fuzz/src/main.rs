//! `taskgate-fuzz`: the long fuzzing run, bounded in cases and time.
//!
//! ```text
//! cargo run --release -p taskgate-fuzz -- [--cases N] [--seconds S] [--seed X] [--target NAME]
//! ```
//!
//! Defaults: 1,000,000 cases per target, at most 600 s per target, seed 1. Prints one row per
//! target (cases, cases per second, failures); an input that fails is written to
//! `crates/taskgate-fuzz/regressions/<target>/`, and the run exits 1.

use std::process::ExitCode;
use std::time::{Duration, Instant};

fn main() -> ExitCode {
    let mut cases: u64 = 1_000_000;
    let mut seconds: u64 = 600;
    let mut seed: u64 = 1;
    let mut only: Option<String> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| usage(&format!("{arg} needs a value")));
        match arg.as_str() {
            "--cases" => cases = value().parse().unwrap_or_else(|_| usage("--cases takes a number")),
            "--seconds" => seconds = value().parse().unwrap_or_else(|_| usage("--seconds takes a number")),
            "--seed" => seed = value().parse().unwrap_or_else(|_| usage("--seed takes a number")),
            "--target" => only = Some(value()),
            "--help" | "-h" => usage(""),
            other => usage(&format!("unknown argument {other}")),
        }
    }
    let targets: Vec<_> = match &only {
        Some(name) => vec![taskgate_fuzz::target(name).unwrap_or_else(|| usage(&format!("no target {name}")))],
        None => taskgate_fuzz::TARGETS.iter().collect(),
    };
    // Failures are reported below, not printed once per case.
    std::panic::set_hook(Box::new(|_| {}));
    println!("| target | cases | cases/s | failures | what it reads |");
    println!("| --- | ---: | ---: | ---: | --- |");
    let mut failed = false;
    for target in targets {
        let deadline = Instant::now() + Duration::from_secs(seconds);
        let outcome = taskgate_fuzz::run(target, seed, cases, Some(deadline));
        let rate = outcome.cases as f64 / outcome.elapsed.as_secs_f64().max(1e-9);
        println!(
            "| {} | {} | {:.0} | {} | {} |",
            target.name,
            outcome.cases,
            rate,
            outcome.failures.len(),
            target.what
        );
        for (input, why) in &outcome.failures {
            failed = true;
            match taskgate_fuzz::keep_regression(target, input) {
                Ok(path) => eprintln!("{}: {why}\n  input kept as {}", target.name, path.display()),
                Err(e) => eprintln!("{}: {why}\n  (could not keep the input: {e})", target.name),
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn usage(problem: &str) -> ! {
    if !problem.is_empty() {
        eprintln!("taskgate-fuzz: {problem}");
    }
    eprintln!("usage: taskgate-fuzz [--cases N] [--seconds S] [--seed X] [--target NAME]");
    let names: Vec<_> = taskgate_fuzz::TARGETS.iter().map(|t| t.name).collect();
    eprintln!("targets: {}", names.join(", "));
    std::process::exit(if problem.is_empty() { 0 } else { 2 })
}
