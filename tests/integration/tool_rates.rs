//! Rates of tool calls (`[tenant.tools] rates`, `upstream_rates`): per glob and per upstream,
//! tenant-wide or per principal, refused with 429, `Retry-After` and the tool and glob named,
//! counted by glob in the metrics; for clients of both revisions, and shared by replicas through
//! Redis.

use std::sync::Arc;

use reqwest::StatusCode;
use serde_json::json;
use taskgate_config::{ApiKeyConfig, Config, RatePer, StoreBackend, TenantConfig, ToolRate, ToolRules};
use taskgate_core::clock::ManualClock;
use taskgate_core::tenants::hash_key;
use taskgate_testkit::{config_with, DemoUpstream, McpClient, TestGateway};

use crate::modern::Client;

fn rated(a: &DemoUpstream) -> Config {
    let mut config = config_with(vec![a.upstream("a")]);
    let mut acme = TenantConfig::new("acme");
    for (principal, key) in [("alice", "acme-alice-key-0001"), ("bob", "acme-bob-key-00002")] {
        acme.api_keys.push(ApiKeyConfig { principal: principal.into(), sha256: hash_key(key) });
    }
    let rate = |burst, per| ToolRate { per_second: 1.0, burst, per };
    acme.tools = Some(ToolRules {
        rates: [("a__echo".to_owned(), rate(2, RatePer::Principal))].into(),
        upstream_rates: [("a".to_owned(), rate(4, RatePer::Tenant))].into(),
        ..ToolRules::default()
    });
    config.tenants = vec![acme];
    config
}

async fn metric(gw: &TestGateway, line_start: &str) -> Option<f64> {
    let text = gw.gateway.render_metrics().await;
    text.lines().find(|l| l.starts_with(line_start)).and_then(|l| l.rsplit(' ').next()).map(|v| v.parse().unwrap())
}

#[actix_rt::test]
async fn tool_calls_over_a_glob_or_upstream_rate_get_429_naming_the_tool_and_the_glob() {
    let a = DemoUpstream::start();
    let clock = Arc::new(ManualClock::new(1_000_000));
    let gw = TestGateway::start_with_clock(rated(&a), clock.clone());
    let by_glob = "taskgate_tool_rate_limited_total{pattern=\"a__echo\",tenant=\"acme\"}";
    let by_upstream = "taskgate_tool_rate_limited_total{pattern=\"upstream:a\",tenant=\"acme\"}";
    assert_eq!(metric(&gw, by_glob).await, Some(0.0), "each configured rate's series exists from the start");
    assert_eq!(metric(&gw, by_upstream).await, Some(0.0));

    let mut alice = McpClient::with_bearer(&gw.url, "acme-alice-key-0001");
    alice.initialize().await;
    let echo = json!({"name": "a__echo", "arguments": {"text": "hi"}});
    for _ in 0..2 {
        assert!(alice.request("tools/call", Some(echo.clone())).await.outcome().is_ok());
    }
    // Alice's own burst of two echoes is spent: 429, Retry-After, the tool and glob in data.
    let reply = alice.request("tools/call", Some(echo.clone())).await;
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(reply.headers.get("retry-after").unwrap(), "1");
    let error = reply.outcome().unwrap_err();
    assert_eq!(error.code, -32005);
    assert!(
        error.message.contains("tools matching \"a__echo\"") && error.message.contains("tools.rates"),
        "{}",
        error.message
    );
    let data = error.data.unwrap();
    assert_eq!(
        (data["tool"].as_str(), data["pattern"].as_str(), data["retryAfterMs"].as_u64()),
        (Some("a__echo"), Some("a__echo"), Some(1000))
    );
    // Other methods and other tools are not counted in that glob.
    assert!(alice.request("ping", None).await.outcome().is_ok());
    let add = json!({"name": "a__add", "arguments": {"a": 1, "b": 2}});
    assert!(alice.request("tools/call", Some(add.clone())).await.outcome().is_ok());
    // Bob has his own echo bucket; the upstream's tenant-wide rate (4) is spent by his call.
    let mut bob = McpClient::with_bearer(&gw.url, "acme-bob-key-00002");
    bob.initialize().await;
    assert!(bob.request("tools/call", Some(echo.clone())).await.outcome().is_ok());
    let upstream_wide = bob.request("tools/call", Some(add.clone())).await.outcome().unwrap_err();
    assert!(
        upstream_wide.message.contains("upstream \"a\"") && upstream_wide.message.contains("tenant \"acme\""),
        "{}",
        upstream_wide.message
    );
    assert_eq!(upstream_wide.data.unwrap()["pattern"], "upstream:a");
    // A 2026-07-28 client of the same principal is held to the same buckets.
    let modern = Client::over(McpClient::with_bearer(&gw.url, "acme-bob-key-00002"));
    let reply = modern.send("tools/call", json!({"name": "a__add", "arguments": {"a": 1, "b": 2}})).await;
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(reply.outcome().unwrap_err().data.unwrap()["tool"], "a__add");
    // Waiting as told is enough: a second later each bucket admits one more.
    clock.advance(1000);
    assert!(alice.request("tools/call", Some(echo.clone())).await.outcome().is_ok());
    assert_eq!(alice.request("tools/call", Some(echo)).await.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(metric(&gw, by_glob).await, Some(2.0));
    assert_eq!(metric(&gw, by_upstream).await, Some(2.0));
}

#[actix_rt::test]
async fn replicas_sharing_redis_share_the_tool_rates() {
    let a = DemoUpstream::start();
    let redis = taskgate_store::testing::RedisServer::start();
    let mut config = rated(&a);
    // A bucket that refills in minutes: the three calls meet the burst, however slow the machine.
    let rules = config.tenants[0].tools.as_mut().unwrap();
    rules.rates.get_mut("a__echo").unwrap().per_second = 0.01;
    config.store.backend = StoreBackend::Redis;
    config.store.url = Some(redis.url.clone());
    let (one, two) = (TestGateway::start(config.clone()), TestGateway::start(config));
    let echo = json!({"name": "a__echo", "arguments": {"text": "hi"}});
    let mut at_one = McpClient::with_bearer(&one.url, "acme-alice-key-0001");
    at_one.initialize().await;
    let mut at_two = McpClient::with_bearer(&two.url, "acme-alice-key-0001");
    at_two.initialize().await;
    // Alice's burst of two, one call at each replica; the third is refused at either.
    assert!(at_one.request("tools/call", Some(echo.clone())).await.outcome().is_ok());
    assert!(at_two.request("tools/call", Some(echo.clone())).await.outcome().is_ok());
    let refused = at_one.request("tools/call", Some(echo)).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS, "two replicas do not grant twice the rate");
}
