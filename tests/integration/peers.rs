//! One source cannot take the listener: a sustained slow-body attack from one address leaves
//! room for everyone else, and behind a trusted proxy each forwarded client holds at most its
//! share of unfinished requests (the real `taskgate serve` binary, real sockets; sources are
//! told apart by loopback address, 127.0.0.2 being the attacker).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use taskgate_testkit::{DemoUpstream, McpClient, ServedGateway};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::within;

fn config(dir: &tempfile::TempDir, demo: &DemoUpstream, server: &str) -> std::path::PathBuf {
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n{server}\n[store]\nbackend = \"memory\"\n\
         [[upstream]]\nname = \"demo\"\ntransport = \"http\"\nurl = \"{}\"\n",
        demo.http.url
    );
    let file = dir.path().join("taskgate.toml");
    std::fs::write(&file, text).unwrap();
    file
}

/// A connection from `source` to the gateway.
async fn connect_from(source: &str, addr: &str) -> std::io::Result<tokio::net::TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(format!("{source}:0").parse().unwrap())?;
    socket.connect(addr.parse().unwrap()).await
}

/// A POST whose headers arrive at once and whose 100 KB body never does: one byte now and then.
const TRICKLE_HEAD: &str = "POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
                            Accept: application/json, text/event-stream\r\nContent-Length: 100000\r\n";

/// A value of the gateway's metrics.
async fn metric(base: &str, series: &str) -> u64 {
    let text = reqwest::get(format!("{base}/metrics")).await.unwrap().text().await.unwrap();
    text.lines().find_map(|l| l.strip_prefix(series)).and_then(|v| v.trim().parse().ok()).unwrap_or(0)
}

#[actix_rt::test]
async fn one_source_trickling_bodies_cannot_take_the_listener_from_everyone_else() {
    // The attacker's 1,100 sockets are this process's: room for them beside the other tests.
    let open_files = taskgate_testkit::raise_own_open_files();
    assert!(open_files >= 4096, "this test needs an open-file limit of at least 4096 (it is {open_files})");
    let demo = DemoUpstream::start();
    let dir = tempfile::tempdir().unwrap();
    let file = config(&dir, &demo, "");
    // The default open-file limit of many systems: the listener holds 768 connections, one
    // source 192 of them.
    let mut gw = ServedGateway::start_with_open_files(&file, 1024).await;
    let listening = gw.log_line("taskgate listening").await;
    assert!(
        listening.contains("max_connections=768") && listening.contains("max_connections_per_peer=192"),
        "{listening}"
    );
    let addr = gw.url.trim_start_matches("http://").trim_end_matches("/mcp").to_owned();
    let base = format!("http://{addr}");

    // 1,100 connections from 127.0.0.2, each reopened as soon as it is closed, each trickling
    // its body (bounded: at most 20,000 connections in all).
    let stop = Arc::new(AtomicBool::new(false));
    let opened = Arc::new(AtomicU64::new(0));
    let attack: Vec<_> = (0..1100)
        .map(|_| {
            let (stop, opened, addr) = (stop.clone(), opened.clone(), addr.clone());
            actix_rt::spawn(async move {
                while !stop.load(Ordering::Relaxed) && opened.fetch_add(1, Ordering::Relaxed) < 20_000 {
                    let Ok(mut s) = connect_from("127.0.0.2", &addr).await else { continue };
                    if s.write_all(TRICKLE_HEAD.as_bytes()).await.is_err() || s.write_all(b"\r\n").await.is_err() {
                        continue;
                    }
                    let mut buf = [0u8; 256];
                    // Trickle until the gateway closes the connection (at accept, or at the
                    // body timeout), then open another.
                    loop {
                        tokio::select! {
                            read = s.read(&mut buf) => if matches!(read, Ok(0) | Err(_)) { break },
                            () = tokio::time::sleep(Duration::from_millis(500)) => {
                                if s.write_all(b" ").await.is_err() { break }
                            }
                        }
                        if stop.load(Ordering::Relaxed) {
                            return;
                        }
                    }
                }
            })
        })
        .collect();
    // The attacker meets its bound.
    within(async {
        while metric(&base, r#"taskgate_peer_refusals_total{limit="connections"}"#).await < 100 {
            tokio::task::yield_now().await;
        }
    })
    .await;
    // Everyone else is served, each on a new connection, promptly.
    for i in 0..8 {
        let served = tokio::time::timeout(Duration::from_secs(3), async {
            let mut c = McpClient::new(&gw.url);
            c.initialize().await;
            c.request("ping", None).await.outcome().unwrap()
        })
        .await;
        assert_eq!(served.unwrap_or_else(|_| panic!("ping {i} timed out")), json!({}));
    }
    stop.store(true, Ordering::Relaxed);
    for task in attack {
        task.abort();
    }
    // Its places come back once its connections close: the source can connect again.
    within(async {
        loop {
            if let Ok(mut s) = connect_from("127.0.0.2", &addr).await {
                let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
                let head = format!(
                    "POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: ping\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{ping}",
                    ping.len()
                );
                let mut answer = String::new();
                if s.write_all(head.as_bytes()).await.is_ok() && s.read_to_string(&mut answer).await.is_ok() && answer.starts_with("HTTP/1.1") {
                    break;
                }
            }
            tokio::task::yield_now().await;
        }
    })
    .await;
    gw.kill().await;
}

#[actix_rt::test]
async fn behind_a_trusted_proxy_each_client_holds_its_share_of_unfinished_requests() {
    let demo = DemoUpstream::start();
    let dir = tempfile::tempdir().unwrap();
    let file = config(
        &dir,
        &demo,
        // With a trusted proxy the main listener keeps its metrics unless told to show them.
        "trusted_proxies = [\"127.0.0.1\"]\nmax_unfinished_requests_per_peer = 4\nbody_timeout_ms = 60000\npublic_metrics = true",
    );
    let gw = ServedGateway::start(&file).await;
    let addr = gw.url.trim_start_matches("http://").trim_end_matches("/mcp").to_owned();
    let base = format!("http://{addr}");
    // Four unfinished requests forwarded for 198.51.100.7 by the proxy (127.0.0.1).
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut s = connect_from("127.0.0.1", &addr).await.unwrap();
        let head = format!("{TRICKLE_HEAD}X-Forwarded-For: 198.51.100.7, 127.0.0.1\r\n\r\n");
        s.write_all(head.as_bytes()).await.unwrap();
        held.push(s);
    }
    // A fifth is refused at once (once the four are in), naming the client; the connection closes.
    let refused = |forwarded: &'static str| {
        let addr = addr.clone();
        async move {
            reqwest::Client::new()
                .post(format!("http://{addr}/mcp"))
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .header("x-forwarded-for", forwarded)
                .body(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#)
                .send()
                .await
                .unwrap()
        }
    };
    let fifth = within(async {
        loop {
            let r = refused("198.51.100.7").await;
            if r.status() == 429 {
                break r;
            }
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert_eq!(fifth.headers()["retry-after"], "1");
    let body: serde_json::Value = fifth.json().await.unwrap();
    assert_eq!(body["error"]["code"], -32005, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("198.51.100.7"), "{body}");
    assert!(metric(&base, r#"taskgate_peer_refusals_total{limit="unfinished_requests"}"#).await >= 1);
    // Another client behind the same proxy is served.
    assert_eq!(refused("198.51.100.8").await.status(), 200);
    // A peer that is not a trusted proxy cannot borrow another's address: its header is ignored.
    let mut direct = connect_from("127.0.0.2", &addr).await.unwrap();
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nX-Forwarded-For: 198.51.100.7\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{init}",
        init.len()
    );
    direct.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    within(direct.read_to_string(&mut answer)).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // Answered (here: their bodies never come, so the connections close): the client's places
    // come back.
    drop(held);
    within(async {
        while refused("198.51.100.7").await.status() == 429 {
            tokio::task::yield_now().await;
        }
    })
    .await;
    gw.kill().await;
}
