//! MCP Apps through the gateway with the ext-apps example servers from npm (pinned in
//! tests/interop/package.json), `server-basic-vanillajs` over Streamable HTTP and
//! `server-system-monitor` over stdio, both prefixed, and the TypeScript SDK client as a host:
//! every tool's UI resource read through the gateway is byte for byte the one read directly
//! (its URI aside), every call comes out the same, the Python SDK sees the same over
//! 2026-07-28, and an app-only tool is refused to a client that does not run apps.

use std::process::Stdio;

use serde_json::{json, Value};
use taskgate_config::UpstreamConfig;
use taskgate_testkit::{config_with, interop_dir, McpClient, TestGateway};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::interop::run_ts_client_with;
use crate::support::within;

const VANILLA: &str = "@modelcontextprotocol/server-basic-vanillajs";
const MONITOR: &str = "@modelcontextprotocol/server-system-monitor";

fn example(package: &str) -> String {
    interop_dir().join("node_modules").join(package).join("dist/index.js").display().to_string()
}

/// Serves an example server's own `createServer` over Streamable HTTP on a free loopback port
/// (tests/interop/apps-http.mjs: the example's entry point would listen on every interface);
/// returns it and its URL.
async fn start_http_example(package: &str) -> (tokio::process::Child, String) {
    let mut child = tokio::process::Command::new("node")
        .args(["apps-http.mjs", package])
        .current_dir(interop_dir())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("node is installed");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = within(lines.next_line()).await.unwrap().expect("the server prints its port");
    let port = serde_json::from_str::<Value>(&first).unwrap()["port"].as_u64().unwrap();
    (child, format!("http://127.0.0.1:{port}/mcp"))
}

/// `ui://<rest>` as the gateway exposes a prefixed upstream's UI resource.
fn exposed(upstream: &str, uri: &Value) -> Value {
    Value::from(uri.as_str().unwrap().replacen("ui://", &format!("ui://{upstream}/"), 1))
}

/// What the client saw of `upstream`'s tools directly, as it must see them through the gateway.
fn as_exposed(upstream: &str, direct: &Value) -> Vec<Value> {
    let mut tools = Vec::new();
    for tool in direct["tools"].as_array().unwrap() {
        let mut tool = tool.clone();
        tool["name"] = Value::from(format!("{upstream}__{}", tool["name"].as_str().unwrap()));
        if let Some(uri) = tool["meta"]["ui"].get("resourceUri").cloned() {
            tool["meta"]["ui"]["resourceUri"] = exposed(upstream, &uri);
            tool["meta"]["ui/resourceUri"] = exposed(upstream, &tool["meta"]["ui/resourceUri"]);
        }
        if let Some(Value::Array(reads)) = tool.get_mut("read") {
            for read in reads {
                read["uri"] = exposed(upstream, &read["uri"]);
            }
        }
        tools.push(tool);
    }
    tools
}

#[actix_rt::test]
async fn the_ext_apps_example_servers_work_through_the_gateway_as_directly() {
    let (_vanilla, vanilla_url) = start_http_example(VANILLA).await;
    let monitor = UpstreamConfig::stdio("monitor", "node", vec![example(MONITOR), "--stdio".into()]);
    let gw = TestGateway::start(config_with(vec![UpstreamConfig::http("vanilla", vanilla_url.clone()), monitor]));

    let direct = [
        ("vanilla", run_ts_client_with("apps-client.mjs", &[&vanilla_url]).await),
        ("monitor", run_ts_client_with("apps-client.mjs", &[&format!("stdio:{MONITOR}")]).await),
    ];
    let through = run_ts_client_with("apps-client.mjs", &[&gw.url]).await;
    let mut expected: Vec<Value> = direct.iter().flat_map(|(upstream, seen)| as_exposed(upstream, seen)).collect();
    expected.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    let seen = through["tools"].as_array().unwrap();
    assert_eq!(seen.len(), 3, "{through}");
    for (seen, expected) in seen.iter().zip(&expected) {
        let name = &expected["name"];
        // apps.mdx, UI Resource Format: the URI keeps `ui://`; the HTML, its MIME type and
        // `_meta` are the server's, byte for byte.
        assert_eq!(seen["meta"], expected["meta"], "{name}: the tool's _meta");
        assert_eq!(seen["read"], expected["read"], "{name}: the UI resource read");
        assert_eq!(seen["call"], expected["call"], "{name}: the call");
        if let Some(read) = seen["read"].get(0) {
            assert!(read["uri"].as_str().unwrap().starts_with("ui://"));
            assert_eq!(read["mimeType"], "text/html;profile=mcp-app");
            assert!(read["text"].as_str().unwrap().len() > 100_000, "{name}: the whole app");
        }
    }
    assert_eq!(expected.iter().filter(|t| t.get("read").is_some()).count(), 2, "both apps were read");
    assert_eq!(through["server"], direct[0].1["server"]);

    // The Python SDK as a host over 2026-07-28: the same tools, resources and calls.
    let mut python = tokio::process::Command::new(interop_dir().join(".venv/bin/python"));
    python.args(["python/apps_client.py", &gw.url]);
    let modern = crate::interop::run_client(python).await;
    assert_eq!(modern["version"], "2026-07-28");
    let modern_tools = modern["tools"].as_array().unwrap();
    assert_eq!(modern_tools.len(), expected.len(), "{modern}");
    for (seen, expected) in modern_tools.iter().zip(&expected) {
        assert_eq!((&seen["name"], &seen["meta"]), (&expected["name"], &expected["meta"]));
        assert_eq!(seen.get("read"), expected.get("read"), "{}: the UI resource read", expected["name"]);
        assert_eq!(seen["call"]["isError"], false, "{seen}");
    }

    // A client that runs no apps sees the app-only tool listed as the server lists it, and the
    // gateway refuses to call it; its other tools answer as directly.
    let plain = run_ts_client_with("apps-client.mjs", &[&gw.url, "plain"]).await;
    for (tool, expected) in plain["tools"].as_array().unwrap().iter().zip(&expected) {
        assert_eq!(tool["meta"], expected["meta"]);
        if tool["name"] == "monitor__poll-system-stats" {
            assert_eq!(tool["call"]["code"], -32602, "{tool}");
            assert!(tool["call"]["message"].as_str().unwrap().contains("for MCP Apps only"), "{tool}");
        } else {
            assert_eq!(tool["call"], expected["call"], "{}", tool["name"]);
        }
    }

    // A View calls its server's tools by the names the server gave them; through the gateway,
    // such a name reaches the one upstream that has it.
    let mut host = McpClient::new(&gw.url);
    host.initialize_with(
        "2025-11-25",
        json!({"extensions": {"io.modelcontextprotocol/ui": {"mimeTypes": ["text/html;profile=mcp-app"]}}}),
    )
    .await;
    let stats = host.call("poll-system-stats", json!({})).await.unwrap();
    assert!(stats["structuredContent"]["memory"]["usedBytes"].is_number(), "{stats}");
    let time = host.call("get-time", json!({})).await.unwrap();
    assert!(time["structuredContent"]["time"].is_string(), "{time}");
    gw.stop().await;
}
