//! The stdio transport toward an upstream (basic/transports "stdio"): a child process speaking
//! newline-delimited JSON-RPC on stdin/stdout, its stderr captured into the log.

// foldhash: the maps of ids and names on every request's path hash in a few instructions,
// not SipHash's hundreds; its seeds are random per map.
use foldhash::HashMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::Value;
use taskgate_config::UpstreamConfig;
use taskgate_protocol::{Message, Payload, Reply, RequestId};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, oneshot, watch};

use crate::endpoint::{ProcessPlace, StopSignals};
use crate::routes::{Incoming, Routes};
use crate::wire::{ChannelError, Encoded};
use crate::UpstreamError;

/// Lines queued for the process's stdin.
const STDIN_BUFFER: usize = 256;
/// How long a process may take to exit after its stdin closes, and again after SIGTERM,
/// before the next step.
const EXIT_GRACE: Duration = Duration::from_secs(2);

/// The requests waiting for their responses, each with whether its result is passed through
/// (kept as the text it comes as: [`Payload::Raw`]).
/// A request's answer is boxed: the channel's shared state is allocated with room for its
/// value, and a wrapped task's call keeps that state for its whole life.
type Pending = Arc<Mutex<HashMap<RequestId, (oneshot::Sender<Box<Reply>>, bool)>>>;

/// One running upstream process.
pub(crate) struct StdioChannel {
    name: String,
    stdin: Mutex<Option<mpsc::Sender<Bytes>>>,
    pending: Pending,
    alive: Arc<AtomicBool>,
    exit: Arc<Mutex<Option<String>>>,
    /// Dropped (with the channel, or by `shutdown`) to tell the supervisor to stop the process.
    stop: Mutex<Option<oneshot::Sender<()>>>,
}

impl StdioChannel {
    /// Starts the process; `permit` (its place under the upstream's `max_processes`) is held
    /// until it exits.
    pub(crate) fn spawn(
        config: &UpstreamConfig,
        permit: ProcessPlace,
        incoming: mpsc::Sender<Box<Incoming>>,
        routes: Arc<Routes>,
        stop_signals: StopSignals,
    ) -> Result<StdioChannel, UpstreamError> {
        let name = config.name.clone();
        let program = config.command.clone().unwrap_or_default();
        let mut command = Command::new(&program);
        command
            .args(&config.args)
            .envs(&config.env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        // The gateway's own pid, read before the fork: in a container the gateway may be pid 1.
        let gateway = std::process::id() as libc::pid_t;
        // SAFETY: between fork and exec only async-signal-safe calls (prctl, getppid, _exit).
        unsafe {
            command.pre_exec(move || {
                // No process outlives the gateway, even one killed with SIGKILL: the child gets
                // SIGTERM when the gateway's thread that started it ends (the arbiter threads
                // that start them live as long as the process).
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::getppid() != gateway {
                    libc::_exit(1); // the gateway died before the prctl took effect
                }
                Ok(())
            });
        }
        let mut child = command.spawn().map_err(|e| UpstreamError::Unavailable {
            upstream: name.clone(),
            reason: format!("cannot start {program:?}: {e}"),
        })?;
        match child.id() {
            Some(pid) => tracing::info!(upstream = %name, pid, "started stdio upstream process"),
            None => tracing::info!(upstream = %name, "started stdio upstream process"),
        }

        let pending: Pending = Arc::default();
        let alive = Arc::new(AtomicBool::new(true));
        let exit = Arc::new(Mutex::new(None));
        let (stdin_tx, stdin_rx) = mpsc::channel::<Bytes>(STDIN_BUFFER);

        tokio::spawn(write_stdin(child.stdin.take().expect("piped stdin"), stdin_rx, stop_signals.clone()));
        tokio::spawn(read_stdout(
            name.clone(),
            child.stdout.take().expect("piped stdout"),
            config.max_message_bytes,
            pending.clone(),
            incoming,
            routes,
        ));
        tokio::spawn(log_stderr(name.clone(), child.stderr.take().expect("piped stderr")));
        let (stop_tx, stop_rx) = oneshot::channel();
        let supervised =
            Supervised { name: name.clone(), pending: pending.clone(), alive: alive.clone(), exit: exit.clone() };
        tokio::spawn(supervise(supervised, child, permit, stop_rx, stop_signals));

        Ok(StdioChannel {
            name,
            stdin: Mutex::new(Some(stdin_tx)),
            pending,
            alive,
            exit,
            stop: Mutex::new(Some(stop_tx)),
        })
    }

    pub(crate) fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Relaxed)
    }

    fn gone(&self) -> UpstreamError {
        let why = self.exit.lock().clone().unwrap_or_else(|| "its stdin is closed".into());
        UpstreamError::Unavailable { upstream: self.name.clone(), reason: format!("the process {why}") }
    }

    async fn write(&self, json: Bytes) -> Result<(), ChannelError> {
        let tx = self.stdin.lock().clone().ok_or_else(|| self.gone())?;
        // Messages MUST NOT contain embedded newlines: compact JSON never does.
        tx.send(json).await.map_err(|_| self.gone())?;
        Ok(())
    }

    pub(crate) async fn request(self: &Arc<Self>, request: &Encoded) -> Result<Payload, ChannelError> {
        self.start(request).await?.await
    }

    /// Writes `request` and returns what waits for its answer: the request's text is not
    /// kept (a process has no session to expire and keeps its revision for life, so nothing
    /// sends it again), and the wait is a few words, not the state of the call that made it.
    pub(crate) async fn start(self: &Arc<Self>, request: &Encoded) -> Result<StdioWait, ChannelError> {
        let (tx, rx) = oneshot::channel();
        self.pending.lock().insert(request.id.clone(), (tx, request.pass));
        // Removes the entry whichever way the wait ends (answered, failed, dropped).
        let wait = StdioWait { channel: self.clone(), id: request.id.clone(), rx };
        // Boxed: the write is over in a moment.
        Box::pin(self.write(request.json.clone())).await?;
        Ok(wait)
    }

    pub(crate) async fn send(&self, message: &Message) -> Result<(), ChannelError> {
        self.write(message.to_json().into()).await
    }

    /// Keeps a 2026-07-28 `subscriptions/listen` request open while `filter` names something
    /// (basic/patterns/subscriptions): its notifications arrive like any other the process
    /// sends; a new filter cancels it (`notifications/cancelled`, stdio "Cancellation") and
    /// sends a new one. Ends with the process.
    pub(crate) fn subscribe(
        &self,
        mut filter: watch::Receiver<Option<Value>>,
        request: Box<dyn Fn(Value) -> Message + Send>,
    ) {
        let Some(stdin) = self.stdin.lock().clone() else { return };
        let pending = self.pending.clone();
        let alive = self.alive.clone();
        tokio::spawn(async move {
            loop {
                if !alive.load(Ordering::Relaxed) {
                    return;
                }
                let wanted = filter.borrow_and_update().clone();
                let Some(wanted) = wanted else {
                    if filter.changed().await.is_err() {
                        return;
                    }
                    continue;
                };
                let message = request(wanted);
                let id = message.id().cloned().expect("a request");
                let (tx, rx) = oneshot::channel();
                pending.lock().insert(id.clone(), (tx, false));
                if stdin.send(message.to_json().into()).await.is_err() {
                    pending.lock().remove(&id);
                    return;
                }
                tokio::select! {
                    changed = filter.changed() => {
                        pending.lock().remove(&id);
                        let cancel = Message::notification(
                            taskgate_protocol::mcp::methods::CANCELLED,
                            Some(serde_json::json!({ "requestId": id.to_value() })),
                        );
                        if changed.is_err() || stdin.send(cancel.to_json().into()).await.is_err() {
                            return;
                        }
                    }
                    answer = rx => {
                        // The server ended the subscription (or the process is gone): listen
                        // again after a pause, while the process lives.
                        if answer.is_err() {
                            return;
                        }
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            }
        });
    }

    /// Closes stdin; the supervisor kills the process if it has not exited after a grace period.
    pub(crate) fn shutdown(&self) {
        self.stdin.lock().take();
        self.stop.lock().take();
    }
}

/// A request written to the process, waiting for its answer: its entry in the pending table
/// (removed when this is dropped, answered or not) and the channel its answer comes on.
pub(crate) struct StdioWait {
    channel: Arc<StdioChannel>,
    id: RequestId,
    rx: oneshot::Receiver<Box<Reply>>,
}

impl std::future::Future for StdioWait {
    type Output = Result<Payload, ChannelError>;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Self::Output> {
        let answer = std::task::ready!(std::pin::Pin::new(&mut self.rx).poll(cx));
        std::task::Poll::Ready(match answer.map(|reply| *reply) {
            Ok(Reply::Passed { result, .. }) => Ok(Payload::Raw(result)),
            Ok(Reply::Message(Message::Response { result, .. })) => Ok(Payload::Value(result)),
            Ok(Reply::Message(Message::Error { error, .. })) => {
                Err(UpstreamError::Rpc { upstream: self.channel.name.clone(), error: Box::new(error) }.into())
            }
            Ok(_) => unreachable!("only responses are routed to pending requests"),
            Err(_) => Err(self.channel.gone().into()),
        })
    }
}

impl Drop for StdioWait {
    fn drop(&mut self) {
        crate::remove_and_shrink(&mut self.channel.pending.lock(), &self.id);
    }
}

async fn write_stdin(
    mut stdin: tokio::process::ChildStdin,
    mut lines: mpsc::Receiver<Bytes>,
    mut stop_signals: StopSignals,
) {
    loop {
        let line = tokio::select! {
            line = lines.recv() => line,
            _ = stop_signals.fired() => None,
        };
        let Some(line) = line else { break };
        let written = async {
            stdin.write_all(&line).await?;
            stdin.write_all(b"\n").await?;
            stdin.flush().await
        };
        if written.await.is_err() {
            return;
        }
    }
    // Dropping stdin closes it: the first step of stdio shutdown (basic/lifecycle "Shutdown").
}

async fn read_stdout(
    name: String,
    stdout: tokio::process::ChildStdout,
    max_line: usize,
    pending: Pending,
    incoming: mpsc::Sender<Box<Incoming>>,
    routes: Arc<Routes>,
) {
    let mut lines = LineReader::new(stdout, max_line);
    loop {
        let line = match lines.next().await {
            Ok(Some(line)) => line,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(upstream = %name, error = %e, "stopped reading the upstream's stdout");
                return;
            }
        };
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        // A result goes as the text it came as to a request that passes it through.
        let passes = pending.clone();
        let parsed = crate::decode_reply(line, move |id| passes.lock().get(id).is_some_and(|(_, pass)| *pass)).await;
        let message = match parsed {
            Ok(Ok(m)) => m,
            _ => {
                // The server MUST NOT write anything to stdout that is not an MCP message.
                tracing::warn!(upstream = %name, "upstream wrote a non-MCP line to stdout; ignored");
                continue;
            }
        };
        if message.is_response() {
            let waiter = message.id().and_then(|id| crate::remove_and_shrink(&mut pending.lock(), id));
            match waiter {
                Some((tx, _)) => {
                    let _ = tx.send(Box::new(message));
                }
                None => {
                    tracing::debug!(upstream = %name, id = ?message.id(), "response to no pending request; dropped")
                }
            }
            continue;
        }
        // Lines are handled in order, so a request's progress reaches its sink before its
        // response reaches the waiting request.
        if !routes.deliver(message.into_message(), &incoming).await {
            return;
        }
    }
}

async fn log_stderr(name: String, stderr: tokio::process::ChildStderr) {
    let mut lines = LineReader::new(stderr, 64 * 1024);
    while let Ok(Some(line)) = lines.next().await {
        // stderr is for logging and SHOULD NOT be taken as an error condition.
        tracing::info!(target: "taskgate::upstream_stderr", upstream = %name, "{}", String::from_utf8_lossy(&line).trim_end());
    }
}

/// What the supervisor reports a process's end to.
struct Supervised {
    name: String,
    pending: Pending,
    alive: Arc<AtomicBool>,
    exit: Arc<Mutex<Option<String>>>,
}

/// Waits for the process. When told to stop (its session ended, or the gateway shuts down),
/// it stops it as basic/lifecycle "Shutdown" says for stdio: stdin closed (by the writer),
/// then SIGTERM after a grace period, then SIGKILL after another.
async fn supervise(
    supervised: Supervised,
    mut child: Child,
    permit: ProcessPlace,
    stop: oneshot::Receiver<()>,
    mut stop_signals: StopSignals,
) {
    let Supervised { name, pending, alive, exit } = supervised;
    let stopping = async {
        tokio::select! {
            _ = stop => {}
            _ = stop_signals.fired() => {}
        }
    };
    let status = tokio::select! {
        status = child.wait() => status,
        _ = stopping => match tokio::time::timeout(EXIT_GRACE, child.wait()).await {
            Ok(status) => status,
            Err(_) => {
                // The spec's order for stdio (basic/lifecycle "Shutdown"): many servers (Python's,
                // those under uv or npx) take longer than the grace to go by themselves.
                let grace_secs = EXIT_GRACE.as_secs();
                tracing::info!(upstream = %name, grace_secs, "stdio upstream did not exit once its stdin closed; sending SIGTERM");
                if let Some(pid) = child.id() {
                    // SAFETY: kill only sends a signal to the child we started and still own.
                    unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
                }
                match tokio::time::timeout(EXIT_GRACE, child.wait()).await {
                    Ok(status) => status,
                    Err(_) => {
                        tracing::warn!(upstream = %name, "stdio upstream did not exit after SIGTERM; killing it");
                        let _ = child.start_kill();
                        child.wait().await
                    }
                }
            }
        },
    };
    let why = match status {
        Ok(s) => format!("exited ({s})"),
        Err(e) => format!("could not be waited for: {e}"),
    };
    tracing::info!(upstream = %name, "stdio upstream process {why}");
    *exit.lock() = Some(why);
    alive.store(false, Ordering::Relaxed);
    // Dropping the senders fails every request still waiting, with the exit reason.
    pending.lock().clear();
    drop(permit);
}

/// Reads `\n`-terminated lines with a bound on their length, in linear time however the
/// bytes arrive: each byte is scanned once and copied out once.
struct LineReader<R> {
    reader: R,
    buffer: Vec<u8>,
    /// Where the next line starts in `buffer` (what lies before it was handed out).
    start: usize,
    /// How far from `start` the buffer is known to hold no `\n`.
    scanned: usize,
    max_line: usize,
    eof: bool,
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    fn new(reader: R, max_line: usize) -> Self {
        LineReader { reader, buffer: Vec::with_capacity(8 * 1024), start: 0, scanned: 0, max_line, eof: false }
    }

    async fn next(&mut self) -> std::io::Result<Option<Vec<u8>>> {
        loop {
            let from = self.start + self.scanned;
            if let Some(pos) = self.buffer[from..].iter().position(|b| *b == b'\n') {
                let end = from + pos;
                let line = self.buffer[self.start..end].to_vec();
                self.start = end + 1;
                self.scanned = 0;
                return Ok(Some(line));
            }
            self.scanned = self.buffer.len() - self.start;
            if self.eof {
                let rest = self.buffer.split_off(self.start);
                self.buffer.clear();
                self.start = 0;
                self.scanned = 0;
                return Ok((!rest.is_empty()).then_some(rest));
            }
            if self.scanned > self.max_line {
                return Err(std::io::Error::other(format!("a line exceeds {} bytes", self.max_line)));
            }
            // What was handed out goes before reading more (amortised: at most once per byte).
            if self.start > 0 && self.start >= self.buffer.len() / 2 {
                self.buffer.drain(..self.start);
                self.start = 0;
            }
            let mut chunk = [0u8; 8192];
            let n = self.reader.read(&mut chunk).await?;
            if n == 0 {
                self.eof = true;
            } else {
                self.buffer.extend_from_slice(&chunk[..n]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::LineReader;

    #[tokio::test]
    async fn lines_of_every_size_arrive_whole_and_in_order() {
        let mut input = Vec::new();
        for i in 0..500 {
            input.extend_from_slice(format!("line {i}\n").as_bytes());
        }
        input.extend(std::iter::repeat_n(b'x', 100_000));
        input.extend_from_slice(b"\nlast without newline");
        let mut lines = LineReader::new(&input[..], 1 << 20);
        for i in 0..500 {
            assert_eq!(lines.next().await.unwrap().unwrap(), format!("line {i}").into_bytes());
        }
        assert_eq!(lines.next().await.unwrap().unwrap().len(), 100_000);
        assert_eq!(lines.next().await.unwrap().unwrap(), b"last without newline");
        assert!(lines.next().await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_line_over_the_bound_is_an_error() {
        let input = vec![b'x'; 50_000];
        let mut lines = LineReader::new(&input[..], 10_000);
        assert!(lines.next().await.is_err());
    }
}
