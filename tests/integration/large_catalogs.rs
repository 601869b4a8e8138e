//! Large catalogs: virtual servers (`[[tenant.profile]]`, each at `/mcp/<profile>` with its own
//! identity and tool set, renames and descriptions) and search mode (`find_tools`, `use_tools`),
//! over real sockets, for clients of both revisions.

use serde_json::{json, Value};
use taskgate_config::{ProfileConfig, TenantConfig, ToolRules};
use taskgate_protocol::Message;
use taskgate_testkit::{config_with, DemoUpstream, McpClient, TestGateway};

use crate::modern::Client as ModernClient;
use crate::support::{first_change, notified, within};

fn names(listed: &Value) -> Vec<&str> {
    listed["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect()
}

/// The demo upstream behind a tenant (anonymous, `demo__fail` denied) with profiles: `math`
/// (`demo__add` shown as `sum`), `talk` (`demo__echo`, `demo__ask`) and `finder` (search mode,
/// every tool).
fn gateway(demo: &DemoUpstream) -> TestGateway {
    TestGateway::start(config(demo))
}

/// The configuration of [`gateway`].
fn config(demo: &DemoUpstream) -> taskgate_config::Config {
    let mut config = config_with(vec![demo.upstream("demo")]);
    let mut tenant = TenantConfig::new("acme");
    tenant.anonymous = true;
    tenant.tools = Some(ToolRules { deny: vec!["demo__fail".into()], ..ToolRules::default() });
    tenant.profiles = vec![
        ProfileConfig {
            name: "math".into(),
            title: Some("Arithmetic".into()),
            instructions: Some("Adds numbers.".into()),
            tools: vec!["demo__add".into()],
            rename: [("demo__add".to_string(), "sum".to_string())].into(),
            describe: [("demo__add".to_string(), "The sum of a and b.".to_string())].into(),
            ..ProfileConfig::default()
        },
        ProfileConfig {
            name: "talk".into(),
            tools: vec!["demo__echo".into(), "demo__ask".into(), "demo__fail".into()],
            ..ProfileConfig::default()
        },
        ProfileConfig { name: "finder".into(), search: true, ..ProfileConfig::default() },
    ];
    config.tenants = vec![tenant];
    config
}

#[actix_rt::test]
async fn two_hosts_see_different_small_catalogs_drawn_from_the_same_upstreams() {
    let demo = DemoUpstream::start();
    let gw = gateway(&demo);
    let at = |profile: &str| format!("{}/{profile}", gw.url);
    // A 2025-11-25 host at /mcp/math: the profile's identity, its one tool under its name.
    let mut math = McpClient::new(&at("math"));
    let init = math.initialize().await;
    assert_eq!(init["serverInfo"]["name"], "taskgate/math", "{init}");
    assert_eq!(init["serverInfo"]["title"], "Arithmetic");
    assert_eq!(init["instructions"], "Adds numbers.");
    let listed = math.request("tools/list", None).await.outcome().unwrap();
    assert_eq!(names(&listed), ["sum"]);
    assert_eq!(listed["tools"][0]["description"], "The sum of a and b.");
    assert_eq!(math.call("sum", json!({"a": 1, "b": 2})).await.unwrap()["content"][0]["text"], "3");
    // Another profile's tool is unknown here, as is the renamed tool under another name.
    for other in ["demo__echo", "add"] {
        let refused = math.call(other, json!({"text": "x", "a": 1, "b": 1})).await.unwrap_err();
        assert_eq!(refused.code, -32602, "{other}: {refused:?}");
    }
    // Its session exists at its own endpoint only.
    let session = math.session.clone().unwrap();
    for elsewhere in [gw.url.clone(), at("talk")] {
        let mut stray = McpClient::new(&elsewhere);
        stray.session = Some(session.clone());
        stray.protocol_version = math.protocol_version.clone();
        let reply = stray.request("tools/list", None).await;
        assert_eq!(reply.status, 404, "{elsewhere}: {reply:?}");
    }
    // A 2026-07-28 host at /mcp/talk: its identity, its tools (the tenant's deny still holds).
    let talk = ModernClient::new(&at("talk"), json!({}));
    let discovered = talk.ok("server/discover", json!({})).await;
    assert_eq!(discovered["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "taskgate/talk", "{discovered}");
    let listed = talk.ok("tools/list", json!({})).await;
    assert_eq!(names(&listed), ["demo__ask", "demo__echo"]);
    let echoed = talk.ok("tools/call", json!({"name": "demo__echo", "arguments": {"text": "hi"}})).await;
    assert_eq!(echoed["content"][0]["text"], "hi");
    let refused = talk.send("tools/call", json!({"name": "demo__add", "arguments": {"a": 1, "b": 1}})).await;
    assert_eq!(refused.outcome().unwrap_err().code, -32602);
    // A renamed tool is called by its shown name at 2026-07-28 too (the Mcp-Name header names it).
    let math_2026 = ModernClient::new(&at("math"), json!({}));
    let summed = math_2026.ok("tools/call", json!({"name": "sum", "arguments": {"a": 2, "b": 5}})).await;
    assert_eq!(summed["content"][0]["text"], "7", "{summed}");
    // The tenant's own endpoint lists every tool it may call; an unknown profile is 404.
    let mut own = McpClient::new(&gw.url);
    own.initialize().await;
    let all = own.request("tools/list", None).await.outcome().unwrap();
    assert!(names(&all).contains(&"demo__add") && names(&all).contains(&"demo__echo") && !names(&all).contains(&"sum"));
    let mut nowhere = McpClient::new(&at("nope"));
    assert_eq!(nowhere.try_initialize().await.status, 404);
    // Requests are counted by profile.
    let metrics = gw.gateway.render_metrics().await;
    for line in [
        r#"taskgate_profile_requests_total{outcome="served",profile="math",tenant="acme"}"#,
        r#"taskgate_profile_requests_total{outcome="refused",profile="math",tenant="acme"}"#,
        r#"taskgate_profile_requests_total{outcome="served",profile="talk",tenant="acme"}"#,
    ] {
        assert!(metrics.lines().any(|l| l.starts_with(line) && !l.ends_with(" 0")), "{line}: {metrics}");
    }
}

#[actix_rt::test]
async fn search_mode_finds_and_activates_tools_and_any_of_them_is_called_by_name() {
    let demo = DemoUpstream::start();
    let gw = gateway(&demo);
    let url = format!("{}/finder", gw.url);
    let mut c = McpClient::new(&url);
    c.initialize().await;
    let mut events = c.open_stream().await.expect("the GET stream opens");
    let listed = c.request("tools/list", None).await.outcome().unwrap();
    assert_eq!(names(&listed), ["find_tools", "use_tools"]);
    // A need in plain words finds its tool, with what calling it takes.
    let found = c.call("find_tools", json!({"query": "add two numbers together", "limit": 3})).await.unwrap();
    let tools = found["structuredContent"]["tools"].as_array().unwrap();
    assert_eq!(tools[0]["name"], "demo__add", "{found}");
    assert_eq!(tools[0]["upstream"], "demo");
    assert_eq!(tools[0]["inputSchema"]["properties"]["a"]["type"], "number");
    assert!(tools.len() <= 3);
    // A tool the tenant may not call is never found.
    let failing = c.call("find_tools", json!({"query": "return a tool error", "limit": 20})).await.unwrap();
    let failing = failing["structuredContent"]["tools"].as_array().unwrap();
    assert!(failing.iter().all(|t| t["name"] != "demo__fail"), "{failing:?}");
    // Bad arguments are the caller's error.
    for bad in [json!({}), json!({"query": 1}), json!({"query": "x", "limit": 0}), json!({"query": "x", "limit": 99})] {
        assert_eq!(c.call("find_tools", bad.clone()).await.unwrap_err().code, -32602, "{bad}");
    }
    // Any tool of the catalog is called by name without activation.
    assert_eq!(c.call("demo__echo", json!({"text": "direct"})).await.unwrap()["content"][0]["text"], "direct");
    // Activated, a tool is listed, and the client is told the list changed.
    let used = c.call("use_tools", json!({"names": ["demo__add", "demo__nothing", "demo__fail"]})).await.unwrap();
    assert_eq!(
        used["structuredContent"],
        json!({"activated": ["demo__add"], "unknown": ["demo__nothing", "demo__fail"]})
    );
    within(async {
        loop {
            match events.next().await.expect("the GET stream ended") {
                Message::Notification { method, .. } if method == "notifications/tools/list_changed" => return,
                _ => continue,
            }
        }
    })
    .await;
    let listed = c.request("tools/list", None).await.outcome().unwrap();
    assert_eq!(names(&listed), ["find_tools", "use_tools", "demo__add"]);
    assert_eq!(c.call("demo__add", json!({"a": 2, "b": 2})).await.unwrap()["content"][0]["text"], "4");
    assert_eq!(c.call("use_tools", json!({"names": []})).await.unwrap_err().code, -32602);
    // A 2026-07-28 client searches too, its answer in its revision's shape.
    let modern = ModernClient::new(&url, json!({}));
    let found =
        modern.ok("tools/call", json!({"name": "find_tools", "arguments": {"query": "echo my text back"}})).await;
    assert_eq!(found["resultType"], "complete", "{found}");
    assert_eq!(found["structuredContent"]["tools"][0]["name"], "demo__echo", "{found}");
    // Its activation is announced on its listen stream (tagged with the subscription), and its
    // next tools/list has the tool. The identity's listen at /mcp and its 2025-11-25 session at
    // the same endpoint hear nothing of it: the first change either hears after it is the
    // resource update the test makes next (each subscribed to the counter).
    let counter = "taskgate://demo/demo://counter";
    let mut listen = modern.stream("subscriptions/listen", json!({"notifications": {"toolsListChanged": true}})).await;
    let at_mcp = ModernClient::new(&gw.url, json!({}));
    let filter = json!({"notifications": {"toolsListChanged": true, "resourceSubscriptions": [counter]}});
    let mut listen_at_mcp = at_mcp.stream("subscriptions/listen", filter).await;
    for stream in [&mut listen, &mut listen_at_mcp] {
        notified(stream, "notifications/subscriptions/acknowledged").await;
    }
    c.request("resources/subscribe", Some(json!({"uri": counter}))).await.outcome().unwrap();
    let used = modern.call("use_tools", json!({"names": ["demo__echo"]})).await;
    assert_eq!(used["structuredContent"]["activated"], json!(["demo__echo"]), "{used}");
    let changed = notified(&mut listen, "notifications/tools/list_changed").await;
    assert!(!changed["_meta"]["io.modelcontextprotocol/subscriptionId"].is_null(), "{changed}");
    let listed = modern.ok("tools/list", json!({})).await;
    assert!(listed["tools"].as_array().unwrap().iter().any(|t| t["name"] == "demo__echo"), "{listed}");
    c.call("demo__touch", json!({})).await.unwrap();
    assert_eq!(first_change(&mut listen_at_mcp).await, "notifications/resources/updated");
    assert_eq!(first_change(&mut events).await, "notifications/resources/updated");
    let metrics = gw.gateway.render_metrics().await;
    let searches = r#"taskgate_tool_searches_total{profile="finder",tenant="acme"} "#;
    assert!(metrics.lines().any(|l| l.starts_with(searches) && !l.ends_with(" 0")), "{metrics}");
}

#[actix_rt::test]
async fn a_search_finds_the_tools_offered_to_the_callers_capabilities() {
    // The demo offers list_roots only to clients that declare roots: the gateway keeps a
    // catalog per set of relayed capabilities, and a search reads the caller's.
    let demo = DemoUpstream::start();
    let gw = gateway(&demo);
    let url = format!("{}/finder", gw.url);
    let need = json!({"query": "ask the client for its roots", "limit": 20});
    let found = |result: &Value| {
        let tools = result["structuredContent"]["tools"].as_array().unwrap();
        tools.iter().filter_map(|t| t["name"].as_str()).map(str::to_owned).collect::<Vec<_>>()
    };
    let mut plain = McpClient::new(&url);
    plain.initialize_with("2025-11-25", json!({})).await;
    assert!(!found(&plain.call("find_tools", need.clone()).await.unwrap()).contains(&"demo__list_roots".into()));
    let mut rooted = McpClient::new(&url);
    rooted.initialize_with("2025-11-25", json!({"roots": {}})).await;
    let results = found(&rooted.call("find_tools", need.clone()).await.unwrap());
    assert_eq!(results.first().map(String::as_str), Some("demo__list_roots"), "{results:?}");
    // Found, it is activated in the caller's session and listed.
    let used = rooted.call("use_tools", json!({"names": ["demo__list_roots"]})).await.unwrap();
    assert_eq!(used["structuredContent"]["activated"], json!(["demo__list_roots"]));
    // A 2026-07-28 request's capabilities choose its catalog alike.
    let modern_plain = ModernClient::new(&url, json!({}));
    let modern_rooted = ModernClient::new(&url, json!({"roots": {}}));
    let called = json!({"name": "find_tools", "arguments": need});
    assert!(!found(&modern_plain.ok("tools/call", called.clone()).await).contains(&"demo__list_roots".into()));
    let results = found(&modern_rooted.ok("tools/call", called).await);
    assert_eq!(results.first().map(String::as_str), Some("demo__list_roots"), "{results:?}");
}

#[actix_rt::test]
async fn a_reload_serves_open_sessions_their_profile_as_it_is_now_and_ends_those_whose_profile_is_gone() {
    let demo = DemoUpstream::start();
    let mut config = config(&demo);
    let profile = |config: &mut taskgate_config::Config, name: &str| {
        config.tenants[0].profiles.iter_mut().find(|p| p.name == name).unwrap().clone()
    };
    // math serves demo__wait too, to hold a call across the reload that removes it.
    config.tenants[0].profiles[0].tools.push("demo__wait".into());
    let gw = TestGateway::start(config.clone());
    let at = |profile: &str| format!("{}/{profile}", gw.url);
    let mut talk = McpClient::new(&at("talk"));
    talk.initialize().await;
    let mut events = talk.open_stream().await.expect("the GET stream opens");
    let mut math = McpClient::new(&at("math"));
    math.initialize().await;
    assert_eq!(names(&talk.request("tools/list", None).await.outcome().unwrap()), ["demo__ask", "demo__echo"]);
    let mut caller = math.clone();
    let held = actix_rt::spawn(async move { caller.call("demo__wait", json!({"gate": "reload"})).await });
    within(demo.demo.wait_in_flight(|n| *n == 1)).await;
    // talk now serves demo__add, shown as plus; math is gone.
    let math_profile = profile(&mut config, "math");
    config.tenants[0].profiles.retain(|p| p.name != "math");
    let talk_profile = config.tenants[0].profiles.iter_mut().find(|p| p.name == "talk").unwrap();
    talk_profile.tools = vec!["demo__echo".into(), "demo__add".into()];
    talk_profile.rename = [("demo__add".to_string(), "plus".to_string())].into();
    gw.gateway.reload(&config).expect("the configuration is valid");
    // basic/server/tools "List Changed Notification", then the profile as it is now.
    assert_eq!(first_change(&mut events).await, "notifications/tools/list_changed");
    assert_eq!(names(&talk.request("tools/list", None).await.outcome().unwrap()), ["plus", "demo__echo"]);
    assert_eq!(talk.call("plus", json!({"a": 1, "b": 4})).await.unwrap()["content"][0]["text"], "5");
    assert_eq!(talk.call("demo__ask", json!({"question": "?"})).await.unwrap_err().code, -32602);
    // The endpoint of math is no more, and its session is over: the call in flight there is
    // answered with why, and cancelled upstream.
    let ended = held.await.unwrap().unwrap_err();
    assert!(ended.message.contains("/mcp/math was removed"), "{ended:?}");
    within(demo.demo.wait_in_flight(|n| *n == 0)).await;
    assert_eq!(McpClient::new(&at("math")).try_initialize().await.status, 404);
    assert_eq!(gw.gateway.session_count(), 1, "talk's session only");
    // basic/transports "Session Management": with math back, its old session is over (404)
    // and a new one is served.
    config.tenants[0].profiles.push(math_profile);
    gw.gateway.reload(&config).expect("math again");
    assert_eq!(math.request("tools/list", None).await.status, 404);
    let mut again = McpClient::new(&at("math"));
    again.initialize().await;
    assert_eq!(names(&again.request("tools/list", None).await.outcome().unwrap()), ["sum", "demo__wait"]);
    // A reload that changes no profile tells no one: the next change the stream hears is a
    // resource update made after it.
    let counter = "taskgate://demo/demo://counter";
    talk.request("resources/subscribe", Some(json!({"uri": counter}))).await.outcome().unwrap();
    gw.gateway.reload(&config).expect("the same configuration again");
    let mut own = McpClient::new(&gw.url);
    own.initialize().await;
    own.call("demo__touch", json!({})).await.unwrap();
    assert_eq!(first_change(&mut events).await, "notifications/resources/updated");
}
