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
    /// The admin listener's base URL (`http://ADDR`), when the config sets `server.admin_listen`.
    pub admin: Option<String>,
}

impl ServedGateway {
    /// Starts it and waits until it listens (it prints its address once it serves).
    pub async fn start(config: &Path) -> ServedGateway {
        ServedGateway::try_start(config).await.unwrap_or_else(|stderr| panic!("taskgate serve did not start: {stderr}"))
    }

    /// Starts it; `Err` holds what it printed on stderr when it exited instead of serving.
    pub async fn try_start(config: &Path) -> Result<ServedGateway, String> {
        ServedGateway::try_start_with(config, None, &[]).await
    }

    /// Starts it with its open-file limit (soft and hard) set to `open_files`.
    pub async fn start_with_open_files(config: &Path, open_files: u64) -> ServedGateway {
        ServedGateway::try_start_with(config, Some(open_files), &[])
            .await
            .unwrap_or_else(|stderr| panic!("taskgate serve did not start: {stderr}"))
    }

    /// Starts it with these environment variables set (on top of the test's own).
    pub async fn start_with_env(config: &Path, env: &[(&str, &str)]) -> ServedGateway {
        ServedGateway::try_start_with(config, None, env)
            .await
            .unwrap_or_else(|stderr| panic!("taskgate serve did not start: {stderr}"))
    }

    async fn try_start_with(
        config: &Path,
        open_files: Option<u64>,
        env: &[(&str, &str)],
    ) -> Result<ServedGateway, String> {
        let mut command = tokio::process::Command::new(taskgate_bin());
        command
            // The gateway's own malloc settings, whatever the test runner's environment holds
            // (a test gives its own through `env`).
            .env_remove("GLIBC_TUNABLES")
            .env_remove("TASKGATE_MALLOC_TUNED")
            .envs(env.iter().copied())
            .args(["serve", "--config"])
            .arg(config)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(n) = open_files {
            // SAFETY: setrlimit is async-signal-safe.
            unsafe {
                command.pre_exec(move || {
                    let limit = libc::rlimit { rlim_cur: n as libc::rlim_t, rlim_max: n as libc::rlim_t };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let mut child = command.spawn().expect("the taskgate binary runs");
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
        let url = first.rsplit(' ').next().unwrap_or_default().to_owned();
        // The admin listener's line follows at once when one is configured.
        let admin = if std::fs::read_to_string(config).unwrap_or_default().contains("admin_listen") {
            let line = tokio::time::timeout(Duration::from_secs(10), out.next_line()).await;
            let line = line.ok().and_then(Result::ok).flatten().unwrap_or_default();
            line.split(' ').find(|w| w.starts_with("http://")).map(str::to_owned)
        } else {
            None
        };
        tokio::spawn(async move { while let Ok(Some(_)) = out.next_line().await {} });
        Ok(ServedGateway { child, url, config: config.to_owned(), logs, seen: Vec::new(), admin })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id().expect("running")
    }

    /// Sends SIGTERM, as an orchestrator stopping it would.
    pub fn terminate(&self) {
        // SAFETY: kill only sends a signal to our own child.
        unsafe { libc::kill(self.pid() as libc::pid_t, libc::SIGTERM) };
    }

    /// Waits for it to exit (bounded: a hang fails the test).
    pub async fn exited(&mut self) -> std::process::ExitStatus {
        tokio::time::timeout(Duration::from_secs(60), self.child.wait())
            .await
            .expect("taskgate did not exit within 60 s")
            .expect("waitable")
    }

    /// The processes it started (its stdio upstreams), by pid.
    pub fn children(&self) -> Vec<u32> {
        let mut pids = Vec::new();
        let tasks = std::fs::read_dir(format!("/proc/{}/task", self.pid())).into_iter().flatten().flatten();
        for task in tasks {
            let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            pids.extend(children.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
        }
        pids
    }

    /// Its open file descriptors now.
    pub fn open_files(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid())).map_or(0, |d| d.count())
    }

    /// Its resident memory now, in bytes.
    pub fn rss_bytes(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        let kb = status.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| l.split_whitespace().nth(1));
        kb.and_then(|k| k.parse::<u64>().ok()).unwrap_or(0) * 1024
    }

    /// Kills it with SIGKILL, as a crash or an OOM kill would, and waits until it is gone.
    pub async fn kill(mut self) {
        self.child.kill().await.expect("SIGKILL");
    }

    /// Every log line not read yet, up to the end of the log (call after it exited).
    pub async fn rest_of_log(&mut self) -> Vec<String> {
        let mut lines = Vec::new();
        while let Ok(Some(line)) = tokio::time::timeout(Duration::from_secs(10), self.logs.recv()).await {
            lines.push(line);
        }
        lines
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
