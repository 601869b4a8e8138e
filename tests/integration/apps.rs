//! MCP Apps (`io.modelcontextprotocol/ui`) through the gateway, against the Python SDK's Apps
//! extension (tests/interop/python/apps_server.py) as stdio upstreams: the UI resource a tool
//! names is one a read through the gateway serves, with the `ui://` scheme, its MIME type and
//! `_meta.ui` as the server sends them; two prefixed upstreams offering the same `ui://` URI stay
//! apart, and an unprefixed upstream's UI resources keep their URIs.

use std::process::Stdio;

use serde_json::{json, Value};
use taskgate_config::UpstreamConfig;
use taskgate_testkit::{config_with, interop_dir, McpClient, TestGateway};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::offerings::{all, field};
use crate::support::within;

fn python() -> String {
    let python = interop_dir().join(".venv/bin/python");
    assert!(python.exists(), "the Python SDK is not installed: run tests/interop/install");
    python.display().to_string()
}

fn script() -> String {
    interop_dir().join("python/apps_server.py").display().to_string()
}

fn apps_upstream(name: &str) -> UpstreamConfig {
    UpstreamConfig::stdio(name, python(), vec![script(), name.into()])
}

/// The result of `resources/read` of `uri` from the server named `name`, talked to directly
/// over stdio.
async fn read_directly(name: &str, uri: &str) -> Value {
    let mut child = tokio::process::Command::new(python())
        .args([&script(), name])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let messages = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25",
            "capabilities": {"extensions": {"io.modelcontextprotocol/ui": {"mimeTypes": ["text/html;profile=mcp-app"]}}},
            "clientInfo": {"name": "direct", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "resources/read", "params": {"uri": uri}}),
    ];
    for message in messages {
        stdin.write_all(format!("{message}\n").as_bytes()).await.unwrap();
    }
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    loop {
        let line = within(lines.next_line()).await.unwrap().expect("the server answers the read");
        let message: Value = serde_json::from_str(&line).unwrap();
        if message["id"] == 2 {
            return message["result"].clone();
        }
    }
}

#[actix_rt::test]
async fn a_tools_ui_resource_is_read_through_the_gateway_as_the_server_serves_it() {
    let mut plain = apps_upstream("plain");
    plain.prefix = false;
    let gw = TestGateway::start(config_with(vec![apps_upstream("east"), apps_upstream("west"), plain]));
    let mut c = McpClient::new(&gw.url);
    c.initialize_with(
        "2025-11-25",
        json!({"extensions": {"io.modelcontextprotocol/ui": {"mimeTypes": ["text/html;profile=mcp-app"]}}}),
    )
    .await;
    let listed = c.request("tools/list", None).await.outcome().unwrap();
    let tools = listed["tools"].as_array().unwrap();
    for upstream in ["east", "west"] {
        let direct = read_directly(upstream, "ui://clock/app.html").await;
        for tool in ["clock", "refresh"] {
            let name = format!("{upstream}__{tool}");
            let listed =
                tools.iter().find(|t| t["name"] == name.as_str()).unwrap_or_else(|| panic!("{name}: {listed}"));
            // apps.mdx, UI Resource Format: "URI MUST start with `ui://` scheme"; the tool
            // names the URI the gateway serves, and keeps its visibility.
            let uri = listed["_meta"]["ui"]["resourceUri"].as_str().unwrap();
            assert_eq!(uri, format!("ui://{upstream}/clock/app.html"));
            if tool == "refresh" {
                assert_eq!(listed["_meta"]["ui"]["visibility"], json!(["app"]));
            }
            // apps.mdx, Resource Discovery: "Host MUST use resources/read to fetch the
            // referenced resource URI".
            let read = c.request("resources/read", Some(json!({"uri": uri}))).await.outcome().unwrap();
            let content = &read["contents"][0];
            assert_eq!(content["uri"], uri);
            let mut expected = direct["contents"][0].clone();
            expected["uri"] = Value::from(uri);
            assert_eq!(content.to_string(), expected.to_string(), "value for value, the URI aside");
            assert!(content["text"].as_str().unwrap().contains(&format!("<h1>{upstream}</h1>")));
            assert_eq!(content["mimeType"], "text/html;profile=mcp-app");
            assert_eq!(content["_meta"]["ui"]["prefersBorder"], true);
        }
        let called = c.call(&format!("{upstream}__clock"), json!({})).await.unwrap();
        assert_eq!(called["structuredContent"]["result"], format!("{upstream}: 12:00"));
    }
    // Listings agree with what the tools name.
    let (resources, _) = all(&mut c, "resources/list", "resources").await;
    assert_eq!(
        field(&resources, "uri"),
        ["ui://east/clock/app.html", "ui://west/clock/app.html", "ui://clock/app.html"]
    );
    // An unprefixed upstream's UI resource keeps its URI, in its tools and in reads.
    let plain = tools.iter().find(|t| t["name"] == "clock").unwrap();
    assert_eq!(plain["_meta"]["ui"]["resourceUri"], "ui://clock/app.html");
    let read = c.request("resources/read", Some(json!({"uri": "ui://clock/app.html"}))).await.outcome().unwrap();
    assert_eq!(read["contents"][0], read_directly("plain", "ui://clock/app.html").await["contents"][0]);
    // A `ui://` URI whose authority names no prefixed upstream is the unprefixed upstream's to
    // answer: it does not know it, and its own error (the SDK's -32602) comes back.
    let error =
        c.request("resources/read", Some(json!({"uri": "ui://north/clock/app.html"}))).await.outcome().unwrap_err();
    assert_eq!((error.code, error.message.as_str()), (-32602, "Unknown resource: ui://north/clock/app.html"));
    // One whose authority is a prefixed upstream's goes to that upstream only.
    let error =
        c.request("resources/read", Some(json!({"uri": "ui://east/nothing.html"}))).await.outcome().unwrap_err();
    assert_eq!(error.message, "Unknown resource: ui://nothing.html", "east's own answer, for its own URI");
}

const UI: &str = "io.modelcontextprotocol/ui";

fn ui_capabilities() -> Value {
    json!({"extensions": {UI: {"mimeTypes": ["text/html;profile=mcp-app"]}}})
}

#[actix_rt::test]
async fn the_apps_extension_is_negotiated_end_to_end_and_app_only_tools_are_for_apps() {
    let gw = TestGateway::start(config_with(vec![apps_upstream("east"), apps_upstream("west")]));
    // What the gateway declares comes from its upstreams once they are listed ("initialize"
    // waits for that a bounded time, the listing itself as long as it takes).
    let mut plain = McpClient::new(&gw.url);
    plain.initialize_with("2025-11-25", json!({})).await;
    plain.request("tools/list", None).await.outcome().unwrap();
    // A host declaring MCP Apps: the gateway declares it back (its upstreams do), and each
    // upstream session serving the host sees the host's declaration.
    let mut host = McpClient::new(&gw.url);
    let init = host.initialize_with("2025-11-25", ui_capabilities()).await;
    assert_eq!(init["capabilities"]["extensions"][UI], json!({}), "{init}");
    for upstream in ["east", "west"] {
        let seen = host.call(&format!("{upstream}__host"), json!({})).await.unwrap();
        let seen: Value = serde_json::from_str(seen["structuredContent"]["result"].as_str().unwrap()).unwrap();
        assert_eq!(seen, json!({"mimeTypes": ["text/html;profile=mcp-app"]}));
        // apps.mdx, Visibility: an app-only tool is callable by apps.
        let refreshed = host.call(&format!("{upstream}__refresh"), json!({})).await.unwrap();
        assert_eq!(refreshed["structuredContent"]["result"], format!("{upstream}: refreshed"));
    }
    // A View calls its server's tools by the server's own names: two upstreams have this one.
    let error = host.call("refresh", json!({})).await.unwrap_err();
    assert_eq!(error.code, -32602);
    assert!(error.message.contains("call one of east__refresh, west__refresh"), "{}", error.message);

    // A client that did not declare MCP Apps: its upstream sessions see no declaration, the
    // app-only tools stay listed with their `_meta` (a host filters them), and calling one is
    // refused by the gateway.
    let mut plain = McpClient::new(&gw.url);
    let init = plain.initialize_with("2025-11-25", json!({})).await;
    assert_eq!(init["capabilities"]["extensions"][UI], json!({}), "{init}");
    let seen = plain.call("east__host", json!({})).await.unwrap();
    assert_eq!(seen["structuredContent"]["result"], "null");
    let listed = plain.request("tools/list", None).await.outcome().unwrap();
    let refresh = listed["tools"].as_array().unwrap().iter().find(|t| t["name"] == "east__refresh").unwrap();
    assert_eq!(refresh["_meta"]["ui"]["visibility"], json!(["app"]));
    let error = plain.call("east__refresh", json!({})).await.unwrap_err();
    assert_eq!(error.code, -32602);
    assert!(error.message.contains("for MCP Apps only"), "{}", error.message);
    assert!(plain.call("refresh", json!({})).await.unwrap_err().message.starts_with("Unknown tool: refresh"));
    assert_eq!(plain.call("east__clock", json!({})).await.unwrap()["structuredContent"]["result"], "east: 12:00");

    // 2026-07-28: the same, request by request.
    let modern = crate::modern::Client::new(&gw.url, json!({}));
    let discovered = modern.send("server/discover", json!({})).await.outcome().unwrap();
    let extensions = &discovered["capabilities"]["extensions"];
    assert_eq!((&extensions[UI], &extensions["io.modelcontextprotocol/tasks"]), (&json!({}), &json!({})));
    // ext-tasks "Capability Negotiation" shape: -32021 names the capability it needs.
    let error = modern.send("tools/call", json!({"name": "east__refresh", "arguments": {}})).await;
    let error = error.outcome().unwrap_err();
    assert_eq!(error.code, -32021, "{}", error.message);
    assert_eq!(
        error.data.unwrap()["requiredCapabilities"]["extensions"][UI]["mimeTypes"][0],
        "text/html;profile=mcp-app"
    );
    let app = crate::modern::Client::new(&gw.url, ui_capabilities());
    let refreshed = app.send("tools/call", json!({"name": "west__refresh", "arguments": {}})).await.outcome().unwrap();
    assert_eq!(refreshed["structuredContent"]["result"], "west: refreshed");
    let seen = app.send("tools/call", json!({"name": "west__host", "arguments": {}})).await.outcome().unwrap();
    let seen: Value = serde_json::from_str(seen["structuredContent"]["result"].as_str().unwrap()).unwrap();
    assert_eq!(seen, json!({"mimeTypes": ["text/html;profile=mcp-app"]}));
}
