//! Browser clients (the Fetch standard's CORS protocol): the origins of `server.allowed_origins`
//! may call the gateway from a page's script, others may not. Checked in a real browser
//! (headless Chromium running the TypeScript SDK's client) and header by header.

use reqwest::header::{HeaderMap, HeaderValue};
use reqwest::{Method, StatusCode};
use serde_json::json;
use taskgate_testkit::{config_with, DemoUpstream, TestGateway};

use crate::interop::run_ts_client_with;

/// A page of an allowed origin lists the tools and calls one through the gateway with the
/// TypeScript SDK's client, in headless Chromium; a page of another origin cannot.
#[actix_rt::test]
async fn the_typescript_sdk_in_a_browser_page_of_an_allowed_origin_uses_the_gateway_and_another_origin_cannot() {
    let demo = DemoUpstream::start();
    let gw = TestGateway::start(config_with(vec![demo.upstream("demo")]));
    let outcome = run_ts_client_with("browser-client.mjs", &[&gw.url]).await;
    let allowed = &outcome["allowed"];
    assert_eq!(allowed["ok"], true, "{outcome}");
    assert!(allowed["tools"].as_array().unwrap().iter().any(|t| t == "demo__echo"), "{outcome}");
    assert_eq!(allowed["text"], "from a browser");
    assert_eq!(outcome["disallowed"]["ok"], false, "{outcome}");
}

fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
    pairs
        .iter()
        .map(|(name, value)| (reqwest::header::HeaderName::from_static(name), HeaderValue::from_str(value).unwrap()))
        .collect()
}

/// A preflight from an allowed origin is answered with the methods and the headers MCP uses (and
/// `Mcp-Param-*`), nothing else asked for; responses to it name the origin and expose the headers a
/// client reads; another origin gets no CORS header and 403.
#[actix_rt::test]
async fn cors_headers_go_to_allowed_origins_only() {
    let demo = DemoUpstream::start();
    let gw = TestGateway::start(config_with(vec![demo.upstream("demo")]));
    let http = reqwest::Client::new();
    let asked = "content-type, authorization, mcp-session-id, mcp-protocol-version, last-event-id, mcp-method, mcp-name, mcp-param-region, x-not-mcp";
    let preflight = |origin: &'static str| {
        http.request(Method::OPTIONS, &gw.url)
            .headers(headers(&[
                ("origin", origin),
                ("access-control-request-method", "POST"),
                ("access-control-request-headers", asked),
            ]))
            .send()
    };

    let ok = preflight("http://localhost:3000").await.unwrap();
    assert_eq!(ok.status(), StatusCode::NO_CONTENT);
    let h = ok.headers();
    assert_eq!(h["access-control-allow-origin"], "http://localhost:3000");
    assert_eq!(h["access-control-allow-methods"], "GET, POST, DELETE, OPTIONS");
    let granted = h["access-control-allow-headers"].to_str().unwrap();
    for name in [
        "content-type",
        "authorization",
        "mcp-session-id",
        "mcp-protocol-version",
        "last-event-id",
        "mcp-method",
        "mcp-name",
        "mcp-param-region",
    ] {
        assert!(granted.split(", ").any(|g| g == name), "{name} not in {granted}");
    }
    assert!(!granted.contains("x-not-mcp"), "{granted}");
    assert_eq!(h["vary"], "Origin");

    let refused = preflight("http://evil.example").await.unwrap();
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    assert!(refused.headers().keys().all(|k| !k.as_str().starts_with("access-control-")), "{:?}", refused.headers());

    // Not a browser's preflight: what the endpoint serves.
    let plain = http.request(Method::OPTIONS, &gw.url).send().await.unwrap();
    assert_eq!(plain.status(), StatusCode::NO_CONTENT);
    assert_eq!(plain.headers()["allow"], "GET, POST, DELETE, OPTIONS");

    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let post = |origin: &'static str| {
        http.post(&gw.url)
            .headers(headers(&[
                ("origin", origin),
                ("content-type", "application/json"),
                ("accept", "application/json, text/event-stream"),
            ]))
            .body(initialize.to_string())
            .send()
    };
    let answered = post("http://127.0.0.1:5173").await.unwrap();
    assert_eq!(answered.status(), StatusCode::OK);
    let h = answered.headers();
    assert_eq!(h["access-control-allow-origin"], "http://127.0.0.1:5173");
    let exposed = h["access-control-expose-headers"].to_str().unwrap().to_ascii_lowercase();
    for name in ["mcp-session-id", "www-authenticate", "mcp-protocol-version"] {
        assert!(exposed.contains(name), "{name} not exposed: {exposed}");
    }
    assert!(h.contains_key("mcp-session-id"));
    let forbidden = post("http://evil.example").await.unwrap();
    assert_eq!(forbidden.status(), StatusCode::FORBIDDEN);
    assert!(forbidden.headers().keys().all(|k| !k.as_str().starts_with("access-control-")));
}
