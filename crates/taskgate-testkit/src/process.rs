//! [`ServedGateway`]: the real `taskgate serve` binary as a child process, for tests of what
//! only a process shows: signals, reloads, restarts after SIGKILL.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};

use crate::taskgate_bin;

/// `taskgate serve --config FILE`, its stderr (logs) delivered line by line.
pub struct ServedGateway {
    /// The process.
    pub child: tokio::process::Child,
    /// Its MCP endpoint.
    pub url: String,
    /// The config file it was started with.
    pub config: PathBuf,
    logs: tokio::sync::mpsc::UnboundedReceiver<String>,
    /// Log lines read so far by [`ServedGateway::log_line`].
    pub seen: Vec<String>,
}

impl ServedGateway {
    /// Starts it and waits until it listens (it prints its address once it serves).
    pub async fn start(config: &Path) -> ServedGateway {
        ServedGateway::try_start(config).await.unwrap_or_else(|stderr| panic!("taskgate serve did not start: {stderr}"))
    }

    /// Starts it; `Err` holds what it printed on stderr when it exited instead of serving.
    pub async fn try_start(config: &Path) -> Result<ServedGateway, String> {
        let mut child = tokio::process::Command::new(taskgate_bin())
            .args(["serve", "--config"])
            .arg(config)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the taskgate binary runs");
        let mut out = BufReader::new(child.stdout.take().expect("piped")).lines();
        let (tx, logs) = tokio::sync::mpsc::unbounded_channel();
        let mut err = BufReader::new(child.stderr.take().expect("piped")).lines();
        tokio::spawn(async move {
            while let Ok(Some(line)) = err.next_line().await {
                let _ = tx.send(line);
            }
        });
        let first = tokio::time::timeout(Duration::from_secs(60), out.next_line()).await;
        let Ok(Ok(Some(first))) = first else {
            let _ = child.wait().await;
            // Everything it printed, up to the end of its stderr.
            let mut logs = logs;
            let mut stderr = Vec::new();
            while let Ok(Some(line)) = tokio::time::timeout(Duration::from_secs(10), logs.recv()).await {
                stderr.push(line);
            }
            return Err(stderr.join("\n"));
        };
        tokio::spawn(async move { while let Ok(Some(_)) = out.next_line().await {} });
        let url = first.rsplit(' ').next().unwrap_or_default().to_owned();
        Ok(ServedGateway { child, url, config: config.to_owned(), logs, seen: Vec::new() })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id().expect("running")
    }

    /// Kills it with SIGKILL, as a crash or an OOM kill would, and waits until it is gone.
    pub async fn kill(mut self) {
        self.child.kill().await.expect("SIGKILL");
    }

    /// Reads log lines until one contains `text` (bounded: a missing line fails the test).
    pub async fn log_line(&mut self, text: &str) -> String {
        let read = async {
            loop {
                let line = self.logs.recv().await.expect("the gateway's log ended");
                self.seen.push(line.clone());
                if line.contains(text) {
                    return line;
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(30), read)
            .await
            .unwrap_or_else(|_| panic!("no log line with {text:?}"))
    }
}
