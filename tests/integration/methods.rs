//! The table of methods (`taskgate_protocol::method`) is what the gateway serves: every method
//! it lists for a revision is answered at that revision (an answer or an error of its own, never
//! -32601), every other method, listed or not, gets -32601 there.

use serde_json::{json, Value};
use taskgate_protocol::method::{Method, TABLE};
use taskgate_testkit::{config_with, DemoUpstream, McpClient, TestGateway};

use crate::modern::Client;

/// Names the table does not have: what servers ask clients, what the next revision may add.
const UNLISTED: [&str; 4] = ["sampling/createMessage", "elicitation/create", "tools/describe", "x/y"];

/// Params that get a quick answer or a quick error of the method's own.
fn params(method: &str) -> Value {
    match method {
        "tools/call" | "prompts/get" => json!({"name": "demo__echo", "arguments": {"text": "hi"}}),
        "tasks/get" | "tasks/result" | "tasks/cancel" | "tasks/update" => json!({"taskId": "no-such-task"}),
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => json!({"uri": "demo://no-such"}),
        "completion/complete" => {
            json!({"ref": {"type": "ref/prompt", "name": "no-such"}, "argument": {"name": "a", "value": ""}})
        }
        "logging/setLevel" => json!({"level": "info"}),
        "subscriptions/listen" => json!({"notifications": {"taskIds": ["x"]}}),
        _ => json!({}),
    }
}

#[actix_rt::test]
async fn each_method_is_served_at_the_revisions_the_table_names_and_no_other() {
    let demo = DemoUpstream::start();
    let gw = TestGateway::start(config_with(vec![demo.upstream("demo")]));
    let mut session = McpClient::new(&gw.url);
    session.initialize().await;
    let stateless = Client::over(McpClient::new(&gw.url));
    let names = TABLE.iter().map(|row| row.name).chain(UNLISTED);
    for name in names {
        let row = Method::named(name).map(Method::row);
        // A 2025-11-25 session. (server/discover and subscriptions/listen are served as
        // 2026-07-28 requests whatever else the request carries.)
        if !matches!(Method::named(name), Some(Method::ServerDiscover | Method::SubscriptionsListen)) {
            let reply = session.request(name, Some(params(name))).await;
            let code = reply.outcome().err().map(|e| e.code);
            match row.and_then(|r| r.at_2025) {
                Some(_) => assert_ne!(code, Some(-32601), "{name} is listed at 2025-11-25 and not served: {reply:?}"),
                None => assert_eq!(code, Some(-32601), "{name} is served at 2025-11-25 and not listed: {reply:?}"),
            }
        }
        // A 2026-07-28 request.
        if name == "subscriptions/listen" {
            // Its answer is a stream that stays open: its first message says it is served.
            let mut stream = stateless.stream(name, params(name)).await;
            let first = crate::support::within(stream.next()).await.expect("a first message");
            assert!(matches!(first, taskgate_protocol::Message::Notification { .. }), "{first:?}");
            continue;
        }
        let reply = stateless.send(name, params(name)).await;
        let code = reply.outcome().err().map(|e| e.code);
        match row.and_then(|r| r.at_2026) {
            Some(_) => assert_ne!(code, Some(-32601), "{name} is listed at 2026-07-28 and not served: {reply:?}"),
            None => {
                assert_eq!(code, Some(-32601), "{name} is served at 2026-07-28 and not listed: {reply:?}");
                assert_eq!(reply.status, 404, "{name}");
            }
        }
    }
}
