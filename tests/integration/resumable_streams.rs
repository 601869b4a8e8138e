//! Resumable reply streams at 2025-11-25 (basic/transports "Sending Messages to the Server" 6,
//! "Resumability and Redelivery"): a reply stream is primed and its events carry ids; a stream
//! its client's connection left is held and resumed by `GET` with `Last-Event-ID`, by its own
//! session only; an upstream that closes a call's stream early is resumed, and the client's
//! stream closes the same way. Against the demo and the official TypeScript and Python clients.

use std::time::Duration;

use serde_json::{json, Value};
use taskgate_config::UpstreamConfig;
use taskgate_protocol::sse::{Decoder, Event};
use taskgate_testkit::{config_with, interop_dir, DemoUpstream, McpClient, TestGateway};

use crate::interop::{run_client, run_ts_client};
use crate::support::within;

/// Reads SSE events (priming ones included) until `n` have come or the stream ends.
async fn events(response: &mut reqwest::Response, decoder: &mut Decoder, n: usize) -> Vec<Event> {
    let mut got = Vec::new();
    while got.len() < n {
        let Some(chunk) = within(response.chunk()).await.expect("an SSE chunk") else { break };
        got.extend(decoder.feed(&chunk).unwrap());
    }
    got
}

fn stream_request(client: &McpClient, body: Value) -> reqwest::RequestBuilder {
    reqwest::Client::new().post(&client.url).headers(client.headers()).body(body.to_string())
}

fn resumption(client: &McpClient, last_event_id: &str) -> reqwest::RequestBuilder {
    let mut headers = client.headers();
    headers.remove("content-type");
    headers.insert("accept", "text/event-stream".parse().unwrap());
    headers.insert("last-event-id", last_event_id.parse().unwrap());
    reqwest::Client::new().get(&client.url).headers(headers)
}

async fn held_by(client: &McpClient, count: usize) {
    let session = client.session.clone().expect("a session");
    within(async {
        while taskgate_http::resumable::held_by(&session) != count {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
}

#[actix_rt::test]
async fn a_reply_stream_its_client_left_is_resumed_with_last_event_id_by_its_own_session_only() {
    let demo = DemoUpstream::start();
    let gw = TestGateway::start(config_with(vec![UpstreamConfig { prefix: false, ..demo.upstream("demo") }]));
    let mut owner = McpClient::new(&gw.url);
    owner.initialize().await;
    let mut other = McpClient::new(&gw.url);
    other.initialize().await;

    // Two notifications, then the call waits at its gate.
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "chatter", "arguments": {"count": 2, "bytes": 8, "gate": "left"}}});
    let mut response = stream_request(&owner, call).send().await.unwrap();
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut decoder = Decoder::new(1 << 20);
    let got = events(&mut response, &mut decoder, 3).await;
    // "The server SHOULD immediately send an SSE event consisting of an event ID and an empty
    // data field": first, with the `retry` a client waits before reconnecting.
    assert_eq!(got[0].data, "", "{got:?}");
    assert_eq!(decoder.retry_ms(), Some(1000));
    let stream = got[0].id.clone().expect("the priming event has an id");
    let stream = stream.strip_suffix("-0").expect("the priming event is the stream's event 0");
    let ids: Vec<String> = got.iter().map(|e| e.id.clone().unwrap()).collect();
    assert_eq!(ids, [0, 1, 2].map(|n| format!("{stream}-{n}")));
    // The client leaves after the first notification was read (the second may be lost).
    drop(response);
    held_by(&owner, 1).await;
    demo.demo.release("left");

    // An id names one stream of one session: another session gets nothing of it.
    let refused = resumption(&other, &ids[1]).send().await.unwrap();
    assert_eq!(refused.status(), 400);
    assert!(refused.text().await.unwrap().contains("no reply stream of this session"));
    let malformed = resumption(&owner, "not-ours").send().await.unwrap();
    assert_eq!(malformed.status(), 400);
    held_by(&owner, 1).await;

    // The owner resumes after the first notification: the second again, then the response.
    let mut resumed = resumption(&owner, &ids[1]).send().await.unwrap();
    assert_eq!(resumed.status(), 200);
    let mut decoder = Decoder::new(1 << 20);
    let rest = events(&mut resumed, &mut decoder, 3).await;
    assert_eq!(rest.iter().map(|e| e.id.clone().unwrap()).collect::<Vec<_>>(), [2, 3].map(|n| format!("{stream}-{n}")));
    assert_eq!(rest[0].data, got[2].data, "the notification after Last-Event-ID, again");
    let answer: Value = serde_json::from_str(&rest[1].data).unwrap();
    assert_eq!(answer["id"], 7);
    assert!(answer["result"]["content"].is_array(), "{answer}");
    // Ended: nothing left to resume.
    let again = resumption(&owner, &ids[2]).send().await.unwrap();
    assert_eq!(again.status(), 400);
    assert!(again.text().await.unwrap().contains("no reply stream of this session"));
    gw.stop().await;
}

#[actix_rt::test]
async fn a_call_whose_upstream_closes_its_stream_early_reaches_the_official_clients_through_the_gateway() {
    // The demo's test_reconnection closes the call's stream after a priming event with
    // `retry: 200`, and answers on the GET with Last-Event-ID. The gateway resumes it after the
    // retry and closes the client's stream the same way; the SDK clients resume theirs.
    let demo = DemoUpstream::start_conformance();
    let gw = TestGateway::start(config_with(vec![UpstreamConfig { prefix: false, ..demo.upstream("demo") }]));
    let expected = "Reconnection test completed successfully. If you received this, the client properly reconnected after stream closure.";
    for url in [&demo.http.url, &gw.url] {
        let ts = run_ts_client("reconnect-client.mjs", url).await;
        assert_eq!(ts, json!({"text": expected}), "TypeScript SDK 1.32 at {url}");
        let mut python = tokio::process::Command::new(interop_dir().join(".venv-v1/bin/python"));
        python.args(["python/reconnect_client.py", url]);
        assert_eq!(run_client(python).await, json!({"text": expected}), "Python SDK 1.29 at {url}");
    }

    // The gateway's own reply stream closed before the response, as the upstream's did.
    let mut client = McpClient::new(&gw.url);
    client.initialize().await;
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "test_reconnection", "arguments": {}}});
    let mut response = stream_request(&client, call).send().await.unwrap();
    let mut decoder = Decoder::new(1 << 20);
    let got = events(&mut response, &mut decoder, usize::MAX).await;
    assert_eq!(got.len(), 1, "only the priming event before the stream closed: {got:?}");
    assert_eq!(decoder.retry_ms(), Some(200), "the upstream's retry, passed on");
    let primed = got[0].id.clone().unwrap();
    let mut resumed = resumption(&client, &primed).send().await.unwrap();
    let rest = events(&mut resumed, &mut Decoder::new(1 << 20), 1).await;
    let answer: Value = serde_json::from_str(&rest[0].data).unwrap();
    assert_eq!(answer["result"]["content"][0]["text"], expected);
    gw.stop().await;
}

/// Held streams are one of the gateway's pools shared among tenants: a tenant holds at most
/// its share of them (its share of the client streams, at least what one session may hold),
/// however many sessions it spreads them over; past it a left stream is not held (its
/// resumption finds nothing), and another tenant's still is.
#[actix_rt::test]
async fn a_tenant_holds_no_more_than_its_share_of_left_streams_and_others_still_hold_theirs() {
    let demo = DemoUpstream::start();
    let mut config = config_with(vec![UpstreamConfig { prefix: false, ..demo.upstream("demo") }]);
    let mut greedy = crate::tenants::tenant("greedy", &[("ci", "greedy-held-streams-0001")]);
    // 1% of the client streams: its share of held streams is the least, one session's (32).
    greedy.limits.share_percent = Some(1);
    config.tenants = vec![greedy, crate::tenants::tenant("polite", &[("ci", "polite-held-streams-0001")])];
    let gw = TestGateway::start(config);
    let session = |key: &'static str| {
        let url = gw.url.clone();
        async move {
            let mut c = McpClient::with_bearer(&url, key);
            c.initialize().await;
            c
        }
    };
    // A streamed call left after its first notification: the id of its last event read.
    let next = std::sync::atomic::AtomicU64::new(1);
    let leave = |c: &McpClient| {
        let id = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "chatter", "arguments": {"count": 1, "bytes": 8, "gate": "finish"}}});
        let request = stream_request(c, call);
        async move {
            let mut response = request.send().await.unwrap();
            let got = events(&mut response, &mut Decoder::new(1 << 20), 2).await;
            got[1].id.clone().expect("an event id")
        }
    };
    let (a, b) = (session("greedy-held-streams-0001").await, session("greedy-held-streams-0001").await);
    for n in 1..=20 {
        leave(&a).await;
        held_by(&a, n).await;
    }
    for n in 1..=12 {
        leave(&b).await;
        held_by(&b, n).await;
    }
    // The tenant's 33rd, though its session holds only 12: not held.
    let over = leave(&b).await;
    let refused = resumption(&b, &over).send().await.unwrap();
    assert_eq!(refused.status(), 400);
    assert!(refused.text().await.unwrap().contains("no reply stream of this session"));
    assert_eq!(
        (
            taskgate_http::resumable::held_by(a.session.as_deref().unwrap()),
            taskgate_http::resumable::held_by(b.session.as_deref().unwrap())
        ),
        (20, 12)
    );
    // Another tenant's is held, and resumed.
    let polite = session("polite-held-streams-0001").await;
    let last = leave(&polite).await;
    held_by(&polite, 1).await;
    demo.demo.release("finish");
    let mut resumed = resumption(&polite, &last).send().await.unwrap();
    assert_eq!(resumed.status(), 200);
    let rest = events(&mut resumed, &mut Decoder::new(1 << 20), 1).await;
    let answer: Value = serde_json::from_str(&rest[0].data).unwrap();
    assert!(answer["result"]["content"].is_array(), "{answer}");
    gw.stop().await;
}
