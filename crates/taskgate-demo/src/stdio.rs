//! The demo server over stdio: newline-delimited JSON-RPC on stdin/stdout, logs on stderr.

use taskgate_protocol::{ErrorObject, Message};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use crate::modern::Checked;
use crate::{DemoServer, Revisions};

/// Serves `demo` on this process's stdin/stdout until stdin closes.
pub async fn serve(demo: DemoServer) -> std::io::Result<()> {
    let connection = demo.connection();
    let (out, mut outgoing) = mpsc::channel::<Message>(256);
    // What the server announces goes to a legacy client only: a modern one listens with
    // `subscriptions/listen` for what it asked for (a dual-era demo's legacy client is one
    // once it sends `initialize`).
    let mut legacy_listener = demo.revisions() == Revisions::Legacy;
    if legacy_listener {
        demo.add_listener(connection, out.clone());
    }
    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Some(message) = outgoing.recv().await {
            let line = message.to_json() + "\n";
            if stdout.write_all(line.as_bytes()).await.is_err() || stdout.flush().await.is_err() {
                return;
            }
        }
    });
    eprintln!("taskgate demo upstream: serving MCP on stdio");
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await? {
        if line.trim().is_empty() {
            continue;
        }
        let message = match Message::from_slice(line.as_bytes()) {
            Ok(Ok(m)) => m,
            Ok(Err(e)) => {
                let _ = out.send(Message::error(None, ErrorObject::new(-32600, e.to_string()))).await;
                continue;
            }
            Err(e) => {
                let _ = out.send(Message::error(None, ErrorObject::new(-32700, e.to_string()))).await;
                continue;
            }
        };
        if demo.speaks_modern(&message, None, false) {
            modern(&demo, connection, message, &out).await;
            continue;
        }
        if !legacy_listener && message.method() == Some(taskgate_protocol::mcp::methods::INITIALIZE) {
            legacy_listener = true;
            demo.add_listener(connection, out.clone());
        }
        let demo = demo.clone();
        let out = out.clone();
        tokio::spawn(async move {
            if let Some(reply) = demo.handle(connection, message, &out).await {
                let _ = out.send(reply).await;
            }
        });
    }
    drop(out);
    eprintln!("taskgate demo upstream: stdin closed, exiting");
    // Replies already on their way get a moment to be written; calls still running (one may
    // wait for a client's answer that can no longer come) are abandoned: with stdin closed the
    // client is gone (basic/lifecycle "Shutdown", stdio).
    let _ = tokio::time::timeout(std::time::Duration::from_millis(500), writer).await;
    Ok(())
}

/// A modern message on the process's channel: requests run concurrently; a listen stream
/// shares stdout with everything else (its messages tagged with its id); the client cancels a
/// request or a listen stream with `notifications/cancelled`.
async fn modern(demo: &DemoServer, connection: u64, message: Message, out: &mpsc::Sender<Message>) {
    match demo.check_modern(message, None) {
        Checked::Refused(_, error) => {
            let _ = out.send(error).await;
        }
        Checked::Notification(message) => {
            let cancelled = match &message {
                Message::Notification { method, params } if method == taskgate_protocol::mcp::methods::CANCELLED => {
                    params.as_ref().and_then(|p| p.get("requestId")).and_then(taskgate_protocol::RequestId::from_value)
                }
                _ => None,
            };
            match cancelled {
                Some(id) => {
                    if !demo.end_listen(connection, &id) {
                        demo.cancel_modern(connection, &id);
                    }
                }
                None => {
                    demo.handle(connection, message, out).await;
                }
            }
        }
        Checked::Listen(id, filter) => demo.listen(connection, id, filter, out.clone()),
        Checked::Request(id, method, params, meta) => {
            let (demo, out) = (demo.clone(), out.clone());
            tokio::spawn(async move {
                let (_, reply) = demo.run_modern(connection, id, &method, params, meta, &out).await;
                let _ = out.send(reply).await;
            });
        }
    }
}
