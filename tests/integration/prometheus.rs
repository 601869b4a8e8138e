//! A real Prometheus (Debian's) scrapes a gateway under a scripted load: every panel query of
//! every dashboard returns data, and every alerting rule evaluates, as Prometheus itself runs it.

use std::time::Duration;

use crate::operations::repo;
use serde_json::{json, Value};
use taskgate_config::UpstreamConfig;
use taskgate_testkit::{config_with, DemoUpstream, McpClient, Prometheus, TestGateway};

/// What the dashboards ask, with the variables as Grafana fills them for one instance and all
/// tenants.
fn panel_queries(instance: &str) -> Vec<(String, String)> {
    let mut queries = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(repo("dashboards/grafana")).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    for path in files {
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        for panel in dashboard["panels"].as_array().unwrap() {
            for target in panel["targets"].as_array().unwrap() {
                let expr = target["expr"].as_str().unwrap().replace("$instance", instance).replace("$tenant", ".*");
                queries.push((format!("{file} / {} / {}", panel["title"].as_str().unwrap(), target["refId"]), expr));
            }
        }
    }
    queries
}

/// Traffic that moves every family the dashboards chart: sessions, calls with progress, a task
/// polled and fetched, a failed call, a cancellation of nothing, a refused request.
async fn scripted_load(url: &str) -> McpClient {
    let mut c = McpClient::new(url);
    c.initialize().await;
    assert!(!c.tool_names().await.is_empty());
    for _ in 0..3 {
        let reply = c
            .request(
                "tools/call",
                Some(
                    json!({"name": "demo__slow", "arguments": {"ms": 5, "steps": 2}, "_meta": {"progressToken": "p"}}),
                ),
            )
            .await;
        reply.outcome().unwrap();
    }
    let task = crate::support::create(&mut c, "demo__echo", json!({"text": "t"})).await;
    c.request("tasks/get", Some(json!({"taskId": task}))).await;
    c.request("tasks/result", Some(json!({"taskId": task}))).await.outcome().unwrap();
    c.request("tasks/get", Some(json!({"taskId": "no-such-task"}))).await;
    assert!(c.call("dead__echo", json!({})).await.is_err());
    c.notify("notifications/cancelled", Some(json!({"requestId": "nothing"}))).await;
    c
}

#[actix_rt::test]
async fn prometheus_scraping_a_gateway_under_load_answers_every_panel_and_evaluates_every_alert() {
    let demo = DemoUpstream::start();
    let mut config = config_with(vec![demo.upstream("demo"), UpstreamConfig::http("dead", "http://127.0.0.1:1/mcp")]);
    config.server.admin_listen = Some("127.0.0.1:0".into());
    config.progress.min_interval_ms = 0;
    // The anonymous tenant, with a tool rate that refuses nothing: its series is charted.
    let mut anonymous = taskgate_config::TenantConfig::new("anonymous");
    anonymous.anonymous = true;
    let rate = taskgate_config::ToolRate { per_second: 1e6, burst: 1_000_000, per: taskgate_config::RatePer::Tenant };
    anonymous.tools =
        Some(taskgate_config::ToolRules { rates: [("demo__*".to_owned(), rate)].into(), ..Default::default() });
    // A profile: its series are charted.
    anonymous.profiles = vec![taskgate_config::ProfileConfig { name: "all".into(), ..Default::default() }];
    config.tenants = vec![anonymous];
    let gw = TestGateway::start(config);
    let admin = gw.admin.expect("the admin listener").to_string();
    let prometheus =
        Prometheus::scraping(std::slice::from_ref(&admin), &repo("dashboards/prometheus/alerts.yml")).await;
    prometheus.until_present(r#"up{job="taskgate"} == 1"#, Duration::from_secs(30)).await;

    let _client = scripted_load(&gw.url).await;
    // Two scrapes after the load, so every rate has two samples that saw it.
    let after = r#"count_over_time(taskgate_request_duration_seconds_count{method="tools/call"}[1m]) >= 2"#;
    prometheus.until_present(after, Duration::from_secs(30)).await;
    prometheus
        .until_present(r#"taskgate_request_duration_seconds_count{method="tools/call"} >= 5"#, Duration::from_secs(30))
        .await;

    let instance = admin.replace('.', "\\\\.");
    let mut empty = Vec::new();
    let queries = panel_queries(&instance);
    assert!(queries.len() > 50, "{}", queries.len());
    for (panel, expr) in &queries {
        if prometheus.series(expr).await.is_empty() {
            empty.push(format!("{panel}: {expr}"));
        }
    }
    assert!(empty.is_empty(), "panels with no data:\n{}\n{}", empty.join("\n"), prometheus.log());

    // Every alert expression evaluates, asked directly and as Prometheus runs it.
    let rules_file = std::fs::read_to_string(repo("dashboards/prometheus/alerts.yml")).unwrap();
    let exprs: Vec<&str> = rules_file.lines().filter_map(|l| l.trim().strip_prefix("expr: ")).collect();
    for expr in &exprs {
        prometheus.query(expr).await;
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    loop {
        tick.tick().await;
        let rules: Vec<Value> =
            prometheus.rules().await.iter().flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default()).collect();
        assert_eq!(rules.len(), exprs.len(), "{rules:?}");
        let unhealthy: Vec<_> = rules.iter().filter(|r| r["health"] != "ok").collect();
        if unhealthy.is_empty() {
            // The gateway is healthy, so the alerts that say otherwise are quiet. The dead
            // upstream's alert is pending: it waits its 5 minutes.
            for rule in &rules {
                let name = rule["name"].as_str().unwrap();
                let alerts = rule["alerts"].as_array().cloned().unwrap_or_default();
                let firing = alerts.iter().any(|a| a["state"] == "firing");
                assert!(!firing, "{name} fires: {alerts:?}");
                if name == "TaskgateUpstreamDown" {
                    assert!(
                        alerts.iter().any(|a| a["labels"]["upstream"] == "dead" && a["state"] == "pending"),
                        "{alerts:?}"
                    );
                }
            }
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "rules not evaluated: {unhealthy:?}");
    }
}
