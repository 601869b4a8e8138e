//! The demo server over stdio: newline-delimited JSON-RPC on stdin/stdout, logs on stderr.

use taskgate_protocol::{ErrorObject, Message};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use crate::DemoServer;

/// Serves `demo` on this process's stdin/stdout until stdin closes.
pub async fn serve(demo: DemoServer) -> std::io::Result<()> {
    let connection = demo.connection();
    let (out, mut outgoing) = mpsc::channel::<Message>(256);
    demo.add_listener(connection, out.clone());
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
