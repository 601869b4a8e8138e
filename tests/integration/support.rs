//! Helpers shared by the tests: bounded waits, tasks driven across processes (restart.rs,
//! replicas.rs), a hand-written HTTP server (upstreams.rs, passing.rs).

use std::time::Duration;

use serde_json::{json, Value};
use taskgate_protocol::ErrorObject;
use taskgate_testkit::McpClient;

/// A loopback port free now, below the kernel's range of ephemeral ports (32768 and up): a port
/// the system picks is free only until the next outgoing connection of any test takes it as its
/// source port, and the processes these ports are for (a gateway, an authorization server, a
/// container) bind them a while after they are chosen. Each call in this process gets another
/// port.
pub fn free_port() -> u16 {
    static NEXT: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);
    const LOW: u16 = 20_000;
    const SPAN: u16 = 12_000;
    let base = (std::process::id() % 120) as u16 * 100;
    (0..SPAN)
        .map(|_| LOW + (base + NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % SPAN) % SPAN)
        .find(|port| std::net::TcpListener::bind(("127.0.0.1", *port)).is_ok())
        .expect("a free port below the ephemeral range")
}

/// Bounds a wait on an event so that a bug fails the test instead of hanging it.
pub async fn within<F: std::future::Future>(event: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(30), event).await.expect("the awaited event did not happen within 30 s")
}

/// Creates a task of `tool` (ttl ten minutes) and returns its id.
pub async fn create(c: &mut McpClient, tool: &str, args: Value) -> String {
    let created =
        c.request("tools/call", Some(json!({"name": tool, "arguments": args, "task": {"ttl": 600_000}}))).await;
    created.outcome().expect("CreateTaskResult")["task"]["taskId"].as_str().unwrap().to_owned()
}

/// A task method (`tasks/get`, `tasks/result`, `tasks/cancel`) on one task.
pub async fn method(c: &mut McpClient, name: &str, task_id: &str) -> Result<Value, ErrorObject> {
    c.request(name, Some(json!({"taskId": task_id}))).await.outcome()
}

/// What [`raw_http_server`] does with a request.
pub enum Answer {
    /// Writes this raw reply; the connection stays open for the next request.
    Reply(String),
    /// Never answers: the connection is held until the other side closes it, then this runs.
    Hold(Box<dyn FnOnce() + Send>),
}

/// A hand-written HTTP/1.1 server on 127.0.0.1:0 for upstreams no SDK would be: each request
/// (its head, lower-cased, and its body, read whole by `content-length`) gets what `answer`
/// says; connections are kept alive. Returns its MCP endpoint URL.
pub async fn raw_http_server(answer: impl Fn(&str, &[u8]) -> Answer + Send + Sync + 'static) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let answer = std::sync::Arc::new(answer);
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let answer = answer.clone();
            tokio::spawn(async move {
                let mut seen = Vec::new();
                let mut buf = [0u8; 8192];
                loop {
                    let head_end = seen.windows(4).position(|w| w == b"\r\n\r\n");
                    if let Some(end) = head_end {
                        let head = String::from_utf8_lossy(&seen[..end]).to_ascii_lowercase();
                        let length = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        if seen.len() >= end + 4 + length {
                            let reply = answer(&head, &seen[end + 4..end + 4 + length]);
                            seen.drain(..end + 4 + length);
                            match reply {
                                Answer::Reply(reply) => {
                                    if socket.write_all(reply.as_bytes()).await.is_err() {
                                        return;
                                    }
                                }
                                Answer::Hold(closed) => {
                                    while !matches!(socket.read(&mut buf).await, Ok(0) | Err(_)) {}
                                    closed();
                                    return;
                                }
                            }
                            continue;
                        }
                    }
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
            });
        }
    });
    url
}

/// Waits (bounded) until a load's counts satisfy `condition`, woken by each `progress` tick (a
/// finished request).
pub async fn until_counts(
    progress: &tokio::sync::watch::Receiver<usize>,
    counts: impl Fn() -> (usize, usize),
    condition: impl Fn(usize, usize) -> bool,
) {
    let mut progress = progress.clone();
    within(async {
        while !{
            let (a, b) = counts();
            condition(a, b)
        } {
            progress.changed().await.expect("the load runs");
        }
    })
    .await;
}

/// The next notification called `method` on `stream`, its params (others are skipped), within
/// the bounded wait.
pub async fn notified(stream: &mut taskgate_testkit::SseReader, method: &str) -> Value {
    within(async {
        loop {
            match stream.next().await {
                Some(taskgate_protocol::Message::Notification { method: m, params }) if m == method => {
                    return params.unwrap_or_default()
                }
                Some(_) => continue,
                None => panic!("the stream ended before {method}"),
            }
        }
    })
    .await
}

/// The first list change or resource update `stream` hears.
pub async fn first_change(stream: &mut taskgate_testkit::SseReader) -> String {
    within(async {
        loop {
            match stream.next().await {
                Some(taskgate_protocol::Message::Notification { method, .. })
                    if method.ends_with("list_changed") || method == "notifications/resources/updated" =>
                {
                    return method
                }
                Some(_) => continue,
                None => panic!("the stream ended"),
            }
        }
    })
    .await
}
