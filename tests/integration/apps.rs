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
