//! Pooled upstream sessions: client sessions that can be asked things (roots, sampling,
//! elicitation: every real host) take an upstream session
//! from a pool, theirs alone until their client stops listening and they hold nothing (nothing
//! in flight, no stream), then the next client session of the same identity takes it. Processes grow with the work in flight,
//! not with the client sessions ever opened, and what an upstream asks reaches exactly the
//! client whose call it belongs to.

use std::time::Instant;

use serde_json::{json, Value};
use taskgate_protocol::Message;
use taskgate_testkit::{config_with, stdio_demo_upstream, DemoUpstream, McpClient, SseReader, TestGateway};

use crate::support::within;

const ASKABLE: &str = r#"{"roots": {"listChanged": true}, "elicitation": {"form": {}}}"#;

fn askable() -> Value {
    serde_json::from_str(ASKABLE).unwrap()
}

/// The question a call's stream carries (an `elicitation/create`), and its id.
async fn question(stream: &mut SseReader) -> (taskgate_protocol::RequestId, Value) {
    within(async {
        loop {
            match stream.next().await.expect("the call's stream ended before its question") {
                Message::Request { id, method, params: Some(params) } if method == "elicitation/create" => {
                    return (id, params)
                }
                _ => continue,
            }
        }
    })
    .await
}

/// The call's result, once its stream carries it.
async fn result(stream: &mut SseReader) -> Value {
    within(async {
        loop {
            match stream.next().await.expect("the call's stream ended before its result") {
                Message::Response { result, .. } => return result,
                Message::Error { error, .. } => panic!("the call failed: {error:?}"),
                _ => continue,
            }
        }
    })
    .await
}

/// Waits until the demo's `idle` pooled sessions are all let go (their client sessions hold
/// nothing, which they find out once their clients' GET streams have ended).
async fn released(gw: &TestGateway, idle: usize) {
    within(async {
        while gw.gateway.pooled_upstream_sessions("demo") != Some((0, idle)) {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    })
    .await;
}

async fn ask(c: &mut McpClient, question: &str) -> SseReader {
    c.request_stream("tools/call", Some(json!({"name": "demo__ask", "arguments": {"question": question}}))).await
}

async fn answer(c: &McpClient, id: taskgate_protocol::RequestId, name: &str) {
    let reply = Message::response(id, json!({"action": "accept", "content": {"answer": name}}));
    assert_eq!(c.post_message(&reply).await.status, 202);
}

#[actix_rt::test]
async fn clients_that_can_be_asked_take_pooled_sessions_in_turn_and_each_is_asked_its_own_questions() {
    let demo = DemoUpstream::start();
    let gw = TestGateway::start(config_with(vec![demo.upstream("demo")]));
    let mut a = McpClient::new(&gw.url);
    a.initialize_with("2025-11-25", askable()).await;
    a.tool_names().await;
    let before = demo.demo.stats().initializes;

    // One after another: a listens (as hosts do) and calls; once it no longer listens (its
    // client gone), b takes the upstream session a held, and is asked its own question.
    let listening_a = a.open_stream().await.unwrap();
    let mut call = ask(&mut a, "a's question").await;
    let (id, params) = question(&mut call).await;
    assert_eq!(params["message"], "a's question");
    answer(&a, id, "Ada").await;
    assert_eq!(result(&mut call).await["content"][0]["text"], "answer: Ada");
    assert_eq!(gw.gateway.pooled_upstream_sessions("demo"), Some((1, 0)), "a holds it while it listens");
    drop(listening_a);
    released(&gw, 1).await;
    let mut b = McpClient::new(&gw.url);
    b.initialize_with("2025-11-25", askable()).await;
    let listening_b = b.open_stream().await.unwrap();
    let mut call = ask(&mut b, "b's question").await;
    let (id, params) = question(&mut call).await;
    assert_eq!(params["message"], "b's question");
    answer(&b, id, "Bea").await;
    assert_eq!(result(&mut call).await["content"][0]["text"], "answer: Bea");
    assert_eq!(demo.demo.stats().initializes, before + 1, "one upstream session served both in turn");
    // The upstream was told the roots may have changed: the client now holding it is another.
    assert_eq!(demo.demo.stats().roots_list_changed, 1);

    // At once (b still listening, a back): the pool grows, and each question reaches the
    // client whose call asked it.
    let listening_a = a.open_stream().await.unwrap();
    let mut first = ask(&mut a, "for a").await;
    let (id_a, params_a) = question(&mut first).await;
    let mut second = ask(&mut b, "for b").await;
    let (id_b, params_b) = question(&mut second).await;
    assert_eq!((&params_a["message"], &params_b["message"]), (&json!("for a"), &json!("for b")));
    answer(&b, id_b, "Bea").await;
    answer(&a, id_a, "Ada").await;
    assert_eq!(result(&mut second).await["content"][0]["text"], "answer: Bea");
    assert_eq!(result(&mut first).await["content"][0]["text"], "answer: Ada");
    assert_eq!(demo.demo.stats().initializes, before + 2, "a second one, for a while b holds the first");
    let pooled = gw.gateway.metrics().upstream_sessions.with_label_values(&["demo", "false"]).get();
    assert_eq!(pooled, 4, "the catalogs' own (base, and for clients that can be asked) and the two pooled");
    // Let go once each session holds nothing (its client stopped listening): idle, kept for
    // the next.
    drop((listening_a, listening_b));
    released(&gw, 2).await;
}

/// The target: 1,000 one-shot clients that declare roots and elicitation, each opening its GET
/// stream, making one call to a stdio upstream and going away without DELETE, 8 at a time: no
/// failure, and the processes held never more than the calls in flight can need (the catalogs'
/// two, for clients declaring nothing and for these, and one per client at once).
#[actix_rt::test]
async fn a_thousand_one_shot_clients_run_on_the_processes_their_calls_need() {
    const CLIENTS: usize = 1000;
    const AT_ONCE: usize = 8;
    let mut local = stdio_demo_upstream("local");
    local.max_processes = 2 + AT_ONCE;
    let gw = TestGateway::start(config_with(vec![local]));
    // One HTTP client's connection pool for all (each session its own connections all the same:
    // a GET stream holds its connection until it is dropped).
    let http = McpClient::new(&gw.url);
    let started = Instant::now();
    let mut most = 0;
    for batch in 0..CLIENTS / AT_ONCE {
        most = most.max(one_shot_clients(&gw, &http, batch, AT_ONCE).await);
    }
    assert!(most <= 2 + AT_ONCE, "{most} processes for {AT_ONCE} calls at once");
    let metrics = gw.gateway.render_metrics().await;
    println!("{CLIENTS} one-shot clients in {:?}; at most {most} processes", started.elapsed());
    let sessions = format!("taskgate_sessions_active{{tenant=\"anonymous\"}} {CLIENTS}");
    assert!(metrics.contains(&sessions), "the sessions stay, holding nothing: {metrics}");
}

/// `at_once` clients that can be asked things, at once, each listening and making one call to
/// the stdio upstream `local`, then going away without DELETE; then waits until their sessions
/// hold nothing at the upstream (the gateway noticed their GET streams closed). Returns the
/// processes running after their calls.
async fn one_shot_clients(gw: &TestGateway, http: &McpClient, batch: usize, at_once: usize) -> usize {
    let clients = (0..at_once).map(|i| {
        let mut c = McpClient::sharing_connections(http);
        actix_rt::spawn(within(async move {
            c.initialize_with("2025-11-25", askable()).await;
            let _listening = c.open_stream().await.expect("the GET stream opens");
            let text = format!("client {batch}-{i}");
            let echoed = c.call("local__echo", json!({"text": text})).await.expect("the call succeeds");
            assert_eq!(echoed["content"][0]["text"], text);
            // Gone: its GET stream closes with it, and no DELETE is sent.
        }))
    });
    for client in clients.collect::<Vec<_>>() {
        client.await.expect("a client ran to its end");
    }
    let processes = gw.gateway.upstream_processes("local").unwrap_or_default();
    within(async {
        while gw.gateway.pooled_upstream_sessions("local").is_some_and(|(held, _)| held > 0) {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    })
    .await;
    processes
}

/// One-shot clients that can be asked things but never listen (no GET stream) and never send
/// DELETE (scripts, some agent frameworks), one after another against a stdio upstream with
/// `max_processes = 16`: each gives its pooled upstream session back once its call is over, so
/// the next takes it: all 60 run on one process beside the catalogs'. (Each holding its own
/// until it idled, they took all 16, and from then on each waited for one to be reclaimed.)
#[actix_rt::test]
async fn one_shot_clients_that_never_listen_give_their_upstream_session_back_after_their_call() {
    const CLIENTS: usize = 60;
    let mut local = stdio_demo_upstream("local");
    local.max_processes = 16;
    let gw = TestGateway::start(config_with(vec![local]));
    let http = McpClient::new(&gw.url);
    let mut most = 0;
    for i in 0..CLIENTS {
        let mut c = McpClient::sharing_connections(&http);
        c.initialize_with("2025-11-25", askable()).await;
        let text = format!("client {i}");
        let echoed = c.call("local__echo", json!({"text": text})).await;
        assert_eq!(echoed.unwrap_or_else(|e| panic!("{text}: {e:?}"))["content"][0]["text"], text);
        most = most.max(gw.gateway.upstream_processes("local").unwrap_or_default());
        // Gone: no DELETE, and it never listened.
    }
    // The catalogs' two, and the pooled ones the calls took (one, but for a release still
    // waiting on a call's last handle as the next client came).
    assert!(most < 16, "{most} processes for one call at a time");
    within(async {
        while gw.gateway.pooled_upstream_sessions("local").is_some_and(|(held, _)| held > 0) {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    })
    .await;
    let sessions = gw.gateway.render_metrics().await;
    assert!(sessions.contains(&format!("taskgate_sessions_active{{tenant=\"anonymous\"}} {CLIENTS}")), "{sessions}");
}
