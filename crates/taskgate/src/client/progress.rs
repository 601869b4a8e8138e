//! What a call shows while it runs: on a terminal, a progress bar (indicatif) fed by the
//! server's progress notifications and a task's status; anywhere else (a pipe, a log), one line
//! per change on stderr.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use serde_json::Value;

/// Progress is drawn as whole steps of a thousandth of the total when it is not a whole number.
const SCALE: f64 = 1000.0;

pub struct Progress {
    /// The bar, on a terminal.
    bar: Option<ProgressBar>,
    /// Whether the bar knows its total.
    bounded: bool,
    status: Option<String>,
}

impl Progress {
    /// A bar on stderr when it is a terminal, else progress lines.
    pub fn new(what: &str) -> Progress {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new_spinner();
            bar.set_style(ProgressStyle::with_template("{spinner} {prefix} {msg}").expect("a valid template"));
            bar.set_prefix(what.to_owned());
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        });
        Progress { bar, bounded: false, status: None }
    }

    /// A `notifications/progress`'s params.
    pub fn update(&mut self, params: &Value) {
        let Some(progress) = params.get("progress").and_then(Value::as_f64) else { return };
        let total = params.get("total").and_then(Value::as_f64).filter(|t| *t > 0.0);
        let message =
            super::printable(params.get("message").and_then(Value::as_str).unwrap_or_default()).replace('\n', " ");
        let message = message.as_str();
        let Some(bar) = &self.bar else {
            match total {
                Some(total) => eprintln!("progress {progress}/{total} {message}"),
                None => eprintln!("progress {progress} {message}"),
            }
            return;
        };
        match total {
            Some(total) => {
                if !self.bounded {
                    self.bounded = true;
                    let style = ProgressStyle::with_template("{prefix} [{bar:40.cyan/blue}] {percent:>3}% {msg}")
                        .expect("a valid template")
                        .progress_chars("=> ");
                    bar.set_style(style);
                }
                bar.set_length((total * SCALE) as u64);
                bar.set_position((progress.min(total) * SCALE) as u64);
            }
            None => bar.set_prefix(format!("{progress}")),
        }
        bar.set_message(self.with_status(message));
    }

    /// A task's status (and its message) as `tasks/get` says it.
    pub fn status(&mut self, task: &Value) {
        let status = task.get("status").and_then(Value::as_str).unwrap_or("unknown").to_owned();
        let message =
            super::printable(task.get("statusMessage").and_then(Value::as_str).unwrap_or_default()).replace('\n', " ");
        let shown = if message.is_empty() { status.clone() } else { format!("{status}: {message}") };
        if self.status.as_deref() == Some(shown.as_str()) {
            return;
        }
        self.status = Some(shown.clone());
        match &self.bar {
            Some(bar) => bar.set_message(shown),
            None => eprintln!(
                "task {} {shown}",
                super::printable(task.get("taskId").and_then(Value::as_str).unwrap_or_default())
            ),
        }
    }

    fn with_status(&self, message: &str) -> String {
        match &self.status {
            Some(status) if message.is_empty() => status.clone(),
            Some(status) => format!("{message} ({status})"),
            None => message.to_owned(),
        }
    }

    /// Clears the bar (what follows is the result).
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
