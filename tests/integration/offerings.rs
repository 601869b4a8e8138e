//! Everything an MCP server offers besides tools passes through (server/resources,
//! server/prompts, server/utilities/completion, server/utilities/logging): federated listings
//! with cursors, names and URIs namespaced per upstream and routed back, subscriptions and log
//! messages relayed, capabilities declared as the upstreams offer them.

use serde_json::{json, Value};
use taskgate_config::{ApiKeyConfig, TenantConfig};
use taskgate_protocol::Message;
use taskgate_testkit::{config_with, DemoUpstream, McpClient, TestGateway};

use crate::support::within;

/// Every item of a listing, following the gateway's cursors.
pub(crate) async fn all(c: &mut McpClient, method: &str, key: &str) -> (Vec<Value>, usize) {
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let params = cursor.as_ref().map(|c| json!({ "cursor": c }));
        let page = c.request(method, params).await.outcome().unwrap();
        pages += 1;
        items.extend(page[key].as_array().unwrap().iter().cloned());
        match page.get("nextCursor").and_then(Value::as_str) {
            // Short enough to send back, whatever the upstream's own cursor (the demo's are
            // 300 bytes long).
            Some(next) if next.len() + 2 > taskgate_protocol::mcp::MAX_ID_BYTES => panic!("cursor too long: {next}"),
            Some(next) => cursor = Some(next.to_owned()),
            None => return (items, pages),
        }
        assert!(pages < 20, "the listing does not end");
    }
}

pub(crate) fn field(items: &[Value], key: &str) -> Vec<String> {
    items.iter().map(|i| i[key].as_str().unwrap().to_owned()).collect()
}

#[actix_rt::test]
async fn a_listing_page_fills_from_every_upstream_and_ends_mid_page_with_a_cursor_that_goes_on() {
    let (a, b) = (DemoUpstream::start(), DemoUpstream::start());
    let mut config = config_with(vec![a.upstream("alpha"), b.upstream("beta")]);
    config.federation.page_size = 4;
    let gw = TestGateway::start(config);
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    // The upstreams page two at a time: alpha's two pages and the first of beta's, cut after
    // one entry; the next page goes on from there.
    let first = c.request("resources/list", None).await.outcome().unwrap();
    assert_eq!(
        field(first["resources"].as_array().unwrap(), "uri"),
        [
            "taskgate://alpha/demo://readme",
            "taskgate://alpha/demo://counter",
            "taskgate://alpha/demo://colors",
            "taskgate://beta/demo://readme"
        ]
    );
    let (resources, pages) = all(&mut c, "resources/list", "resources").await;
    assert_eq!(pages, 2);
    assert_eq!(
        field(&resources, "uri"),
        [
            "taskgate://alpha/demo://readme",
            "taskgate://alpha/demo://counter",
            "taskgate://alpha/demo://colors",
            "taskgate://beta/demo://readme",
            "taskgate://beta/demo://counter",
            "taskgate://beta/demo://colors"
        ],
        "each once, in order"
    );
}

#[actix_rt::test]
async fn resources_prompts_and_completion_of_two_upstreams_pass_through_namespaced() {
    let (a, b) = (DemoUpstream::start(), DemoUpstream::start());
    let gw = TestGateway::start(config_with(vec![a.upstream("alpha"), b.upstream("beta")]));
    let mut c = McpClient::new(&gw.url);
    let init = c.initialize().await;
    let caps = &init["capabilities"];
    assert_eq!(caps["resources"], json!({"subscribe": true, "listChanged": true}), "{init}");
    assert_eq!(caps["prompts"], json!({"listChanged": true}));
    assert!(caps["completions"].is_object() && caps["logging"].is_object(), "{init}");

    // Resources: each upstream pages two at a time; the gateway's page fills from both, in
    // order, so a client that never follows a cursor sees them all.
    let (resources, pages) = all(&mut c, "resources/list", "resources").await;
    assert_eq!(
        field(&resources, "uri"),
        [
            "taskgate://alpha/demo://readme",
            "taskgate://alpha/demo://counter",
            "taskgate://alpha/demo://colors",
            "taskgate://beta/demo://readme",
            "taskgate://beta/demo://counter",
            "taskgate://beta/demo://colors"
        ]
    );
    assert_eq!(pages, 1, "one page holds both upstreams' resources");
    let (templates, _) = all(&mut c, "resources/templates/list", "resourceTemplates").await;
    assert_eq!(
        field(&templates, "uriTemplate"),
        ["taskgate://alpha/demo://echo/{text}", "taskgate://beta/demo://echo/{text}"]
    );

    // Reads go to the owner, and the contents name the URI the client knows.
    let read =
        c.request("resources/read", Some(json!({"uri": "taskgate://beta/demo://readme"}))).await.outcome().unwrap();
    assert_eq!(read["contents"][0]["uri"], "taskgate://beta/demo://readme");
    assert!(read["contents"][0]["text"].as_str().unwrap().contains("taskgate demo"));
    // An expanded template reverses like the template.
    let echo =
        c.request("resources/read", Some(json!({"uri": "taskgate://alpha/demo://echo/hi"}))).await.outcome().unwrap();
    assert_eq!(
        echo["contents"][0],
        json!({"uri": "taskgate://alpha/demo://echo/hi", "mimeType": "text/plain", "text": "hi"})
    );
    // Unknown: the upstream's -32002, or the gateway's for a URI of no upstream.
    for uri in ["taskgate://alpha/demo://nothing", "taskgate://nobody/demo://readme", "demo://readme"] {
        let error = c.request("resources/read", Some(json!({ "uri": uri }))).await.outcome().unwrap_err();
        assert_eq!(error.code, -32002, "{uri}: {error:?}");
    }
    let bad = c.request("resources/read", Some(json!({"uri": 7}))).await.outcome().unwrap_err();
    assert_eq!(bad.code, -32602);
    let bad = c.request("resources/list", Some(json!({"cursor": "not-ours"}))).await.outcome().unwrap_err();
    assert_eq!(bad.code, -32602);
    // A cursor standing for a long upstream cursor that this session does not keep: -32602.
    let forgotten = taskgate_core::offering_names::ListCursor::encode_stashed("resources", 999_999);
    let bad = c.request("resources/list", Some(json!({ "cursor": forgotten }))).await.outcome().unwrap_err();
    assert!(bad.code == -32602 && bad.message.contains("expired"), "{bad:?}");

    // Prompts: named like tools.
    let (prompts, _) = all(&mut c, "prompts/list", "prompts").await;
    assert_eq!(field(&prompts, "name"), ["alpha__greet", "alpha__summarize", "beta__greet", "beta__summarize"]);
    let greet = c
        .request("prompts/get", Some(json!({"name": "beta__greet", "arguments": {"name": "Ada"}})))
        .await
        .outcome()
        .unwrap();
    assert_eq!(greet["messages"][0]["content"]["text"], "Say hello to Ada.");
    let summary = c.request("prompts/get", Some(json!({"name": "alpha__summarize"}))).await.outcome().unwrap();
    assert_eq!(summary["messages"][0]["content"]["resource"]["uri"], "taskgate://alpha/demo://readme");
    for name in ["alpha__nope", "nope"] {
        let error = c.request("prompts/get", Some(json!({ "name": name }))).await.outcome().unwrap_err();
        assert_eq!(error.code, -32602, "{name}");
    }

    // Completion follows the prompt's name or the template's URI to its upstream.
    let names = c
        .request(
            "completion/complete",
            Some(json!({"ref": {"type": "ref/prompt", "name": "alpha__greet"}, "argument": {"name": "name", "value": "car"}})),
        )
        .await
        .outcome()
        .unwrap();
    assert_eq!(names["completion"]["values"], json!(["carol", "carlos"]));
    let words = c
        .request(
            "completion/complete",
            Some(json!({"ref": {"type": "ref/resource", "uri": "taskgate://beta/demo://echo/{text}"},
                        "argument": {"name": "text", "value": "he"}})),
        )
        .await
        .outcome()
        .unwrap();
    assert_eq!(words["completion"]["values"], json!(["hello", "help"]));
    let bad = c.request("completion/complete", Some(json!({"ref": {"type": "ref/tool"}}))).await.outcome().unwrap_err();
    assert_eq!(bad.code, -32602);
}

#[actix_rt::test]
async fn subscriptions_updates_and_log_levels_reach_the_owning_upstream_and_come_back_named() {
    let (a, b) = (DemoUpstream::start(), DemoUpstream::start());
    let gw = TestGateway::start(config_with(vec![a.upstream("alpha"), b.upstream("beta")]));
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    let mut stream = c.open_stream().await.unwrap();
    let uri = "taskgate://beta/demo://counter";
    c.request("resources/subscribe", Some(json!({ "uri": uri }))).await.outcome().unwrap();
    c.call("beta__touch", json!({})).await.unwrap();
    let updated = loop {
        match within(stream.next()).await.expect("the GET stream ended") {
            Message::Notification { method, params } if method == "notifications/resources/updated" => break params,
            _ => continue,
        }
    };
    assert_eq!(updated.unwrap()["uri"], uri);
    let read = c.request("resources/read", Some(json!({ "uri": uri }))).await.outcome().unwrap();
    assert_eq!(read["contents"][0]["text"], "1");
    c.request("resources/unsubscribe", Some(json!({ "uri": uri }))).await.outcome().unwrap();
    // A prompt list change reaches the GET stream, and the listing has the new prompt.
    c.call("beta__toggle_prompt", json!({})).await.unwrap();
    loop {
        match within(stream.next()).await.expect("the GET stream ended") {
            Message::Notification { method, .. } if method == "notifications/prompts/list_changed" => break,
            _ => continue,
        }
    }
    let (prompts, _) = all(&mut c, "prompts/list", "prompts").await;
    assert!(field(&prompts, "name").contains(&"beta__extra".to_string()), "{prompts:?}");

    // The level reaches every upstream session the client has and ones opened later.
    c.request("logging/setLevel", Some(json!({"level": "error"}))).await.outcome().unwrap();
    assert_eq!(b.demo.stats().log_levels, ["error"]);
    c.call("alpha__echo", json!({"text": "opens alpha's session"})).await.unwrap();
    assert_eq!(a.demo.stats().log_levels, ["error"]);
    let quiet =
        c.request("tools/call", Some(json!({"name": "alpha__chatter", "arguments": {"count": 3, "bytes": 5}}))).await;
    assert!(quiet.notifications().is_empty(), "{:?}", quiet.notifications());
    c.request("logging/setLevel", Some(json!({"level": "debug"}))).await.outcome().unwrap();
    let chatty =
        c.request("tools/call", Some(json!({"name": "alpha__chatter", "arguments": {"count": 3, "bytes": 5}}))).await;
    let logs = chatty.notifications();
    assert_eq!(logs.len(), 3);
    for log in logs {
        let Message::Notification { method, params } = log else { panic!() };
        assert_eq!(method, "notifications/message");
        assert_eq!(params.as_ref().unwrap()["logger"], "alpha/chatter");
    }
    let bad = c.request("logging/setLevel", Some(json!({"level": "loud"}))).await.outcome().unwrap_err();
    assert_eq!(bad.code, -32602);
}

#[actix_rt::test]
async fn the_gateway_declares_only_what_its_upstreams_offer_and_upstreams_see_only_what_it_relays() {
    let tools = DemoUpstream::start_tools_only();
    let gw = TestGateway::start(config_with(vec![tools.upstream("plain")]));
    let mut c = McpClient::new(&gw.url);
    let client_caps = json!({
        "roots": {"listChanged": true}, "sampling": {}, "elicitation": {},
        "tasks": {"requests": {"elicitation": {"create": {}}}}, "experimental": {"x": {}},
        "extensions": {"io.modelcontextprotocol/tasks": {}}
    });
    let init = c.initialize_with("2025-11-25", client_caps).await;
    let caps = init["capabilities"].as_object().unwrap();
    for absent in ["resources", "prompts", "completions", "logging"] {
        assert!(!caps.contains_key(absent), "{absent} declared: {init}");
    }
    // Nothing to list is an empty list, never -32601.
    let listed = c.request("resources/list", None).await.outcome().unwrap();
    assert_eq!(listed, json!({"resources": []}));
    c.call("plain__echo", json!({"text": "x"})).await.unwrap();
    // basic/lifecycle "Capability Negotiation": the upstream is told only what the gateway
    // relays for the client; never tasks, experimental or extensions it does not implement.
    assert_eq!(
        tools.demo.stats().last_client_capabilities,
        json!({"roots": {"listChanged": true}, "sampling": {}, "elicitation": {}})
    );
}

#[actix_rt::test]
async fn a_tenant_sees_only_its_upstreams_offerings_and_unprefixed_uris_pass_unchanged() {
    let (a, b) = (DemoUpstream::start(), DemoUpstream::start());
    let mut plain = b.upstream("beta");
    plain.prefix = false;
    let mut config = config_with(vec![a.upstream("alpha"), plain]);
    let mut team = TenantConfig::new("team");
    team.api_keys.push(ApiKeyConfig { principal: "bot".into(), sha256: taskgate_core::tenants::hash_key("team-key") });
    team.upstreams = Some(vec!["beta".into()]);
    config.tenants.push(team);
    config.tenants.push(TenantConfig { anonymous: true, ..TenantConfig::new("open") });
    let gw = TestGateway::start(config);
    let mut c = McpClient::with_bearer(&gw.url, "team-key");
    c.initialize().await;
    let (resources, _) = all(&mut c, "resources/list", "resources").await;
    assert_eq!(field(&resources, "uri"), ["demo://readme", "demo://counter", "demo://colors"]);
    let read = c.request("resources/read", Some(json!({"uri": "demo://colors"}))).await.outcome().unwrap();
    assert_eq!(read["contents"][0]["uri"], "demo://colors");
    let (prompts, _) = all(&mut c, "prompts/list", "prompts").await;
    assert_eq!(field(&prompts, "name"), ["greet", "summarize"]);
    // alpha is not the tenant's: its resources and prompts do not exist for it.
    let error = c
        .request("resources/read", Some(json!({"uri": "taskgate://alpha/demo://readme"})))
        .await
        .outcome()
        .unwrap_err();
    assert_eq!(error.code, -32002);
    let error = c
        .request("prompts/get", Some(json!({"name": "alpha__greet", "arguments": {"name": "x"}})))
        .await
        .outcome()
        .unwrap_err();
    assert_eq!(error.code, -32602);
    assert_eq!(a.demo.stats().initializes, 1, "only the gateway's own catalog session reached alpha");
}

#[actix_rt::test]
async fn a_request_the_upstream_sends_on_its_get_stream_during_a_cold_sessions_first_call_reaches_the_call() {
    // The upstream sends its elicitation on its GET stream and drops it when none is open, as
    // SDK servers do; the gateway's upstream session is new (cold) at this call. The client has
    // no GET stream: the question comes on the call's own stream, the only request at that
    // upstream.
    let demo = DemoUpstream::start();
    let mut upstream = demo.upstream("demo");
    upstream.timeout_secs = 10;
    let gw = TestGateway::start(config_with(vec![upstream]));
    let mut c = McpClient::new(&gw.url);
    c.initialize_with("2025-11-25", json!({"elicitation": {}})).await;
    let mut call = c
        .request_stream(
            "tools/call",
            Some(json!({"name": "demo__ask", "arguments": {"question": "Name?", "stream": "get"}})),
        )
        .await;
    let asked = within(call.next()).await.expect("the call's stream ended before the question");
    let Message::Request { id, method, params } = asked else { panic!("expected the elicitation, got {asked:?}") };
    assert_eq!(method, "elicitation/create");
    assert_eq!(params.unwrap()["message"], "Name?");
    let answer = Message::response(id, json!({"action": "accept", "content": {"answer": "Ada"}}));
    assert_eq!(c.post_message(&answer).await.status.as_u16(), 202);
    let result = within(call.next()).await.expect("the result");
    let Message::Response { result, .. } = result else { panic!("expected the result, got {result:?}") };
    assert_eq!(result["content"][0]["text"], "answer: Ada");
}

#[actix_rt::test]
async fn a_client_sees_the_tools_offered_to_its_capabilities_and_its_roots_reach_the_upstream() {
    // The demo offers list_roots only to clients that declare roots (as server-everything offers
    // its elicitation, sampling and roots tools). The gateway keeps a catalog per set of relayed
    // client capabilities, two at most here: the base one and one more.
    let demo = DemoUpstream::start();
    let mut config = config_with(vec![demo.upstream("demo")]);
    config.federation.max_tool_catalogs = 2;
    let gw = TestGateway::start(config);
    let fallbacks = || gw.gateway.metrics().tool_catalog_fallbacks.with_label_values::<&str>(&[]).get();

    let mut plain = McpClient::new(&gw.url);
    plain.initialize_with("2025-11-25", json!({})).await;
    assert!(!plain.tool_names().await.contains(&"demo__list_roots".to_string()));
    let unknown = plain.call("demo__list_roots", json!({})).await.unwrap_err();
    assert_eq!(unknown.code, -32602, "{unknown:?}");

    let mut rooted = McpClient::new(&gw.url);
    rooted.initialize_with("2025-11-25", json!({"roots": {"listChanged": true}})).await;
    // Listening, as a host does: it keeps its (pooled) upstream session between calls.
    let _listening = rooted.open_stream().await.unwrap();
    assert!(rooted.tool_names().await.contains(&"demo__list_roots".to_string()));
    assert_eq!(gw.gateway.metrics().tool_catalogs.get(), 2);
    // client/roots: the upstream's roots/list reaches the client on the call's stream, and the
    // client's answer comes back to the upstream.
    let mut call =
        rooted.request_stream("tools/call", Some(json!({"name": "demo__list_roots", "arguments": {}}))).await;
    let asked = within(call.next()).await.expect("the roots request");
    let Message::Request { id, method, .. } = asked else { panic!("expected roots/list, got {asked:?}") };
    assert_eq!(method, "roots/list");
    let roots = json!({"roots": [{"uri": "file:///work/project", "name": "project"}]});
    assert_eq!(rooted.post_message(&Message::response(id, roots)).await.status.as_u16(), 202);
    let Some(Message::Response { result, .. }) = within(call.next()).await else { panic!("expected the result") };
    assert_eq!(result["content"][0]["text"], "file:///work/project");
    // The client's notifications/roots/list_changed reaches the upstream session it holds.
    let before = demo.demo.stats().roots_list_changed;
    assert_eq!(rooted.notify("notifications/roots/list_changed", None).await.as_u16(), 202);
    within(async {
        while demo.demo.stats().roots_list_changed == before {
            tokio::task::yield_now().await;
        }
    })
    .await;

    // The same set declared in another order is the same catalog; a third set is over the cap:
    // that client sees what a client declaring nothing sees, and the fallback is counted.
    let mut same = McpClient::new(&gw.url);
    same.initialize_with("2025-11-25", json!({"roots": {"listChanged": true}})).await;
    assert!(same.tool_names().await.contains(&"demo__list_roots".to_string()));
    assert_eq!(fallbacks(), 0);
    let mut over = McpClient::new(&gw.url);
    over.initialize_with("2025-11-25", json!({"roots": {}, "sampling": {}})).await;
    assert!(!over.tool_names().await.contains(&"demo__list_roots".to_string()));
    assert_eq!(fallbacks(), 1);
    assert_eq!(gw.gateway.metrics().tool_catalogs.get(), 2);

    // Once no session uses the roots catalog, a new set takes its place. (A session's actor
    // ends shortly after its DELETE: retry a fresh client until it does.)
    for c in [&rooted, &same, &over] {
        assert_eq!(c.delete().await.as_u16(), 200);
    }
    within(async {
        loop {
            let mut next = McpClient::new(&gw.url);
            next.initialize_with("2025-11-25", json!({"sampling": {}, "roots": {}})).await;
            if next.tool_names().await.contains(&"demo__list_roots".to_string()) {
                break;
            }
            next.delete().await;
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert_eq!(gw.gateway.metrics().tool_catalogs.get(), 2);
}
