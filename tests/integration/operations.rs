//! Operating taskgate: /metrics, /healthz, /readyz, the admin listener, and the dashboards and
//! alert rules in dashboards/ (every metric they use must be one the gateway exports).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::{json, Value};
use taskgate_config::UpstreamConfig;
use taskgate_core::metrics::Metrics;
use taskgate_testkit::{config_with, DemoUpstream, McpClient, TestGateway};

pub(crate) fn repo(path: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// Every `taskgate_*` and `process_*` identifier in a PromQL expression.
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = prefixed_names(expr, "taskgate_");
    names.extend(prefixed_names(expr, "process_"));
    names
}

fn prefixed_names(expr: &str, prefix: &str) -> Vec<String> {
    let mut names = Vec::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    while let Some(at) = expr[i..].find(prefix) {
        let start = i + at;
        let boundary = start == 0 || !(bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_');
        let mut end = start;
        while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_') {
            end += 1;
        }
        if boundary {
            names.push(expr[start..end].to_owned());
        }
        i = end;
    }
    names
}

fn collect_exprs(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(o) => {
            for (k, v) in o {
                if (k == "expr" || k == "query") && v.is_string() {
                    out.push(v.as_str().unwrap().to_owned());
                } else {
                    collect_exprs(v, out);
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| collect_exprs(v, out)),
        _ => {}
    }
}

#[test]
fn every_dashboard_and_alert_rule_uses_only_exported_metrics() {
    let exported: BTreeSet<String> = Metrics::new().exported_names().into_iter().collect();
    let mut checked = 0;
    let mut dashboards = 0;
    for entry in std::fs::read_dir(repo("dashboards/grafana")).unwrap() {
        let path = entry.unwrap().path();
        let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
            .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
        assert!(dashboard["uid"].is_string() && dashboard["title"].is_string(), "{}", path.display());
        assert!(!dashboard["panels"].as_array().unwrap().is_empty(), "{}", path.display());
        let mut exprs = Vec::new();
        collect_exprs(&dashboard, &mut exprs);
        assert!(!exprs.is_empty(), "{}", path.display());
        for expr in exprs {
            for name in metric_names(&expr) {
                assert!(exported.contains(&name), "{}: {name} is not exported (in {expr})", path.display());
                checked += 1;
            }
        }
        dashboards += 1;
    }
    assert_eq!(dashboards, 3);
    let rules = std::fs::read_to_string(repo("dashboards/prometheus/alerts.yml")).unwrap();
    let exprs: Vec<&str> = rules.lines().filter_map(|l| l.trim().strip_prefix("expr:")).collect();
    assert!(exprs.len() >= 4, "alert rules for upstream down, errors, rejections, p99 latency");
    for expr in exprs {
        let names = metric_names(expr);
        // Only the scrape's own `up` may stand alone.
        assert!(!names.is_empty() || expr.contains(r#"up{job="taskgate"}"#), "rule without a taskgate metric: {expr}");
        for name in names {
            assert!(exported.contains(&name), "alerts.yml: {name} is not exported (in {expr})");
            checked += 1;
        }
    }
    assert!(checked > 20);
    // Every counter is charted or alerted on (what cannot be seen is not operated).
    let mut used = BTreeSet::new();
    for entry in std::fs::read_dir(repo("dashboards/grafana")).unwrap() {
        let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(entry.unwrap().path()).unwrap()).unwrap();
        let mut exprs = Vec::new();
        collect_exprs(&dashboard, &mut exprs);
        exprs.iter().for_each(|e| used.extend(metric_names(e)));
    }
    rules.lines().filter_map(|l| l.trim().strip_prefix("expr:")).for_each(|e| used.extend(metric_names(e)));
    for counter in exported.iter().filter(|n| n.ends_with("_total")) {
        assert!(used.contains(counter), "{counter} is in no dashboard and no alert rule");
    }
    let scrape = std::fs::read_to_string(repo("dashboards/prometheus/prometheus.yml")).unwrap();
    assert!(scrape.contains("metrics_path: /metrics") && scrape.contains("alerts.yml"));
}

/// The label names of each metric the gateway exports, read from a registry in which every
/// metric has a series.
fn label_names() -> BTreeMap<String, BTreeSet<String>> {
    let m = Metrics::new();
    m.initialise(&["acme".into()], &["files".into()]);
    m.tenant_upstreams(&[("acme".into(), "files".into())]);
    m.initialise_tool_rates(&[("acme".into(), "files__*".into())]);
    m.initialise_profiles(&[("acme".into(), String::new()), ("acme".into(), "research".into())]);
    drop(m.requests.meter("acme", "tools/call"));
    m.upstream_request("files", "tools/call", std::time::Duration::from_millis(1), None);
    m.store_duration.with_label_values(&["get"]).observe(0.001);
    m.tasks.with_label_values(&["acme", "working"]).set(1);
    m.sessions_active.with_label_values(&["acme"]).set(1);
    m.result_bytes.with_label_values(&["acme"]).set(1);
    m.upstream_reachable.with_label_values(&["files"]).set(1);
    m.upstream_exchanged_tokens.with_label_values(&["files"]).set(1);
    m.http_responses.with_label_values(&["POST", "200"]).inc();
    let mut labels: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in m.render().lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
        let (name, rest) = line.split_once(['{', ' ']).unwrap();
        let entry = labels.entry(name.to_owned()).or_default();
        if let Some((inner, _)) = rest.split_once('}') {
            entry.extend(inner.split(',').filter_map(|kv| kv.split_once('=')).map(|(k, _)| k.to_owned()));
        }
    }
    labels
}

/// Every panel of every dashboard honours the `instance` and `tenant` variables: each series it
/// selects is of the chosen instances, of the chosen tenants where it has a tenant, and of the
/// upstreams the chosen tenants may use where it has an upstream but no tenant. A panel of the
/// whole gateway (no tenant or upstream in any series) says so in its description.
#[test]
fn every_dashboard_panel_honours_the_instance_and_tenant_variables() {
    let labels = label_names();
    let tenant_join = r#"taskgate_tenant_upstream{instance=~"$instance", tenant=~"$tenant"}"#;
    for entry in std::fs::read_dir(repo("dashboards/grafana")).unwrap() {
        let path = entry.unwrap().path();
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let variables: Vec<&str> =
            dashboard["templating"]["list"].as_array().unwrap().iter().filter_map(|v| v["name"].as_str()).collect();
        assert!(variables.contains(&"instance") && variables.contains(&"tenant"), "{file}: {variables:?}");
        for panel in dashboard["panels"].as_array().unwrap() {
            let title = panel["title"].as_str().unwrap();
            let mut per_tenant = false;
            for target in panel["targets"].as_array().unwrap() {
                let expr = target["expr"].as_str().unwrap();
                for name in metric_names(expr) {
                    let known = labels
                        .get(&name)
                        .unwrap_or_else(|| panic!("{file} / {title}: no series of {name} to read its labels"));
                    // Each selector of the metric (the name, then its braces).
                    for (at, _) in expr.match_indices(&name) {
                        let after = &expr[at + name.len()..];
                        if after.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_') {
                            continue;
                        }
                        let selector = after.strip_prefix('{').and_then(|a| a.split_once('}')).map(|(s, _)| s);
                        let selector = selector.unwrap_or_else(|| panic!("{file} / {title}: {name} without matchers"));
                        assert!(
                            selector.contains(r#"instance=~"$instance""#),
                            "{file} / {title}: {name} ignores $instance"
                        );
                        if known.contains("tenant") {
                            per_tenant = true;
                            assert!(
                                selector.contains(r#"tenant=~"$tenant""#),
                                "{file} / {title}: {name} ignores $tenant"
                            );
                        } else if known.contains("upstream") {
                            per_tenant = true;
                            assert!(
                                expr.contains(tenant_join),
                                "{file} / {title}: {name} is not joined on the tenant's upstreams"
                            );
                        }
                    }
                }
            }
            if !per_tenant {
                let description = panel["description"].as_str().unwrap_or_default();
                assert!(
                    description.contains("not filtered by tenant"),
                    "{file} / {title}: a panel of the whole gateway says so in its description"
                );
            }
        }
    }
}

/// Parses the text exposition into `name{labels}` → value.
fn parse_metrics(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (key, value) = l.rsplit_once(' ')?;
            Some((key.to_owned(), value.parse().ok()?))
        })
        .collect()
}

fn value(metrics: &BTreeMap<String, f64>, name: &str, labels: &[(&str, &str)]) -> f64 {
    metrics
        .iter()
        .filter(|(k, _)| {
            k.split('{').next() == Some(name) && labels.iter().all(|(l, v)| k.contains(&format!("{l}=\"{v}\"")))
        })
        .map(|(_, v)| v)
        .sum()
}

#[actix_rt::test]
async fn metrics_move_with_traffic_and_operations_endpoints_answer() {
    let demo = DemoUpstream::start();
    let mut required = demo.upstream("demo");
    required.required = true;
    let mut dead = UpstreamConfig::http("dead", "http://127.0.0.1:1/mcp");
    dead.required = false;
    let mut config = config_with(vec![required, dead]);
    config.server.admin_listen = Some("127.0.0.1:0".into());
    config.progress.min_interval_ms = 0;
    config.tasks.poll_interval_ms = 60_000;
    let gw = TestGateway::start(config);
    let admin = gw.admin.expect("admin listener");
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    let names = c.tool_names().await;
    assert!(!names.is_empty());
    // Traffic: a call with progress, a task polled twice quickly, a failed call, a cancellation.
    c.request(
        "tools/call",
        Some(json!({"name": "demo__slow", "arguments": {"ms": 10, "steps": 3}, "_meta": {"progressToken": "p"}})),
    )
    .await;
    let created = c
        .request("tools/call", Some(json!({"name": "demo__echo", "arguments": {"text": "t"}, "task": {}})))
        .await
        .outcome()
        .unwrap();
    let task = created["task"]["taskId"].as_str().unwrap().to_owned();
    c.request("tasks/get", Some(json!({"taskId": task}))).await;
    c.request("tasks/get", Some(json!({"taskId": task}))).await;
    c.request("tasks/result", Some(json!({"taskId": task}))).await.outcome().unwrap();
    assert!(c.call("dead__echo", json!({})).await.is_err());
    c.notify("notifications/cancelled", Some(json!({"requestId": "nothing"}))).await;

    let http = reqwest::Client::new();
    let text = http.get(format!("http://{admin}/metrics")).send().await.unwrap().text().await.unwrap();
    // With an admin listener, the metrics are its own: the main listener has none.
    let main = http.get(format!("http://{}/metrics", gw.addr)).send().await.unwrap();
    assert_eq!(main.status(), 404);
    let m = parse_metrics(&text);
    // Client requests by tenant and method: every one counted and timed, the failed call an error.
    let requests = |name: &str, method: &str| value(&m, name, &[("tenant", "anonymous"), ("method", method)]);
    assert_eq!(requests("taskgate_requests_total", "tools/call"), 3.0);
    assert_eq!(requests("taskgate_request_duration_seconds_count", "tools/call"), 3.0);
    assert_eq!(requests("taskgate_request_errors_total", "tools/call"), 1.0);
    assert_eq!(requests("taskgate_requests_total", "tasks/get"), 2.0);
    assert_eq!(requests("taskgate_request_errors_total", "tasks/get"), 0.0);
    assert_eq!(requests("taskgate_requests_total", "initialize"), 1.0);
    assert!(text.contains("# TYPE taskgate_build_info gauge"));
    assert_eq!(value(&m, "taskgate_build_info", &[]), 1.0);
    assert!(value(&m, "process_resident_memory_bytes", &[]) > 1e6);
    assert!(value(&m, "process_open_fds", &[]) > 3.0);
    assert!(value(&m, "process_start_time_seconds", &[]) > 1.7e9);
    assert_eq!(value(&m, "taskgate_ready", &[]), 1.0);
    assert_eq!(value(&m, "taskgate_tenant_upstream", &[("tenant", "anonymous"), ("upstream", "demo")]), 1.0);
    assert_eq!(value(&m, "taskgate_sessions_active", &[("tenant", "anonymous")]), 1.0);
    assert_eq!(value(&m, "taskgate_tasks_created_total", &[("tenant", "anonymous"), ("upstream", "demo")]), 1.0);
    assert_eq!(value(&m, "taskgate_tasks_finished_total", &[("status", "completed")]), 1.0);
    assert_eq!(value(&m, "taskgate_tasks", &[("status", "completed")]), 1.0);
    assert_eq!(value(&m, "taskgate_tasks", &[("status", "working")]), 0.0);
    assert!(value(&m, "taskgate_task_duration_seconds_count", &[]) >= 1.0);
    assert_eq!(value(&m, "taskgate_task_polls_total", &[("tenant", "anonymous")]), 2.0);
    assert_eq!(value(&m, "taskgate_task_polls_early_total", &[("tenant", "anonymous")]), 1.0);
    assert_eq!(value(&m, "taskgate_task_result_waiters", &[]), 0.0);
    assert!(value(&m, "taskgate_progress_notifications_total", &[("outcome", "relayed")]) >= 3.0);
    assert!(
        value(
            &m,
            "taskgate_upstream_request_duration_seconds_count",
            &[("upstream", "demo"), ("method", "tools/call")]
        ) >= 2.0
    );
    assert!(value(&m, "taskgate_upstream_errors_total", &[("upstream", "dead"), ("reason", "unavailable")]) >= 1.0);
    assert_eq!(
        value(&m, "taskgate_cancellations_total", &[("outcome", "ignored"), ("reason", "unknown_request")]),
        1.0
    );
    assert!(value(&m, "taskgate_http_responses_total", &[("http_method", "POST"), ("code", "200")]) >= 8.0);
    assert_eq!(value(&m, "taskgate_upstream_reachable", &[("upstream", "demo")]), 1.0);
    assert_eq!(value(&m, "taskgate_upstream_reachable", &[("upstream", "dead")]), 0.0);
    assert_eq!(value(&m, "taskgate_task_actors", &[]), 0.0);
    assert_eq!(value(&m, "taskgate_progress_actors", &[]), 0.0);
    // Labels never carry an id (session, task, request or token).
    let session = c.session.clone().unwrap();
    assert!(!text.contains(&session) && !text.contains(&task), "an id leaked into a label");

    // /healthz and /readyz on both listeners: ready, since the dead upstream is not required.
    // The admin listener's /readyz says why; the main listener's says ready, and nothing else.
    for base in [format!("http://{admin}"), format!("http://{}", gw.addr)] {
        assert_eq!(http.get(format!("{base}/healthz")).send().await.unwrap().status(), 200);
        let ready = http.get(format!("{base}/readyz")).send().await.unwrap();
        assert_eq!(ready.status(), 200);
        let body: Value = serde_json::from_str(&ready.text().await.unwrap()).unwrap();
        assert_eq!(body["ready"], true);
        if base.contains(&gw.addr.to_string()) {
            assert_eq!(body, json!({"ready": true}));
            continue;
        }
        let dead = body["upstreams"].as_array().unwrap().iter().find(|u| u["name"] == "dead").unwrap().clone();
        assert_eq!((dead["reachable"].clone(), dead["required"].clone()), (json!(false), json!(false)));
        assert!(dead["error"].as_str().unwrap().contains("unavailable"));
    }
}

#[actix_rt::test]
async fn the_main_listener_keeps_metrics_and_readiness_details_unless_public_metrics_is_set() {
    let mut dead = UpstreamConfig::http("dead", "http://127.0.0.1:1/mcp");
    dead.required = true;
    let http = reqwest::Client::new();
    // No admin listener: everything is on the main one, as before.
    // An admin listener: the main one says ready or not, nothing more.
    // An admin listener and public_metrics = true: both have everything.
    for (admin, public, metrics_status, details) in [
        (false, None, 200, true),
        (true, None, 404, false),
        (true, Some(true), 200, true),
        (false, Some(false), 404, false),
    ] {
        let mut config = config_with(vec![dead.clone()]);
        if admin {
            config.server.admin_listen = Some("127.0.0.1:0".into());
        }
        config.server.public_metrics = public;
        let gw = TestGateway::start(config);
        let base = format!("http://{}", gw.addr);
        assert_eq!(http.get(format!("{base}/metrics")).send().await.unwrap().status(), metrics_status);
        let ready = http.get(format!("{base}/readyz")).send().await.unwrap();
        assert_eq!(ready.status(), 503);
        let body = ready.text().await.unwrap();
        assert_eq!(body.contains("127.0.0.1:1") || body.contains("dead"), details, "{body}");
        if !details {
            assert_eq!(serde_json::from_str::<Value>(&body).unwrap(), json!({"ready": false}));
        }
        if let Some(admin) = gw.admin {
            let body = http.get(format!("http://{admin}/readyz")).send().await.unwrap().text().await.unwrap();
            assert!(body.contains("\"dead\""), "{body}");
            let metrics = http.get(format!("http://{admin}/metrics")).send().await.unwrap().text().await.unwrap();
            assert!(metrics.contains("taskgate_ready 0"), "{metrics}");
        }
    }
}

#[actix_rt::test]
async fn readyz_is_503_while_a_required_upstream_is_down() {
    let mut dead = UpstreamConfig::http("dead", "http://127.0.0.1:1/mcp");
    dead.required = true;
    let gw = TestGateway::start(config_with(vec![dead]));
    let http = reqwest::Client::new();
    // The first listing of the upstream fails (connection refused); readiness follows it.
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    assert!(c.tool_names().await.is_empty());
    let ready = http.get(format!("http://{}/readyz", gw.addr)).send().await.unwrap();
    assert_eq!(ready.status(), 503);
    let body: Value = serde_json::from_str(&ready.text().await.unwrap()).unwrap();
    assert_eq!(body["ready"], false);
    assert_eq!(body["upstreams"][0]["name"], "dead");
}

#[test]
fn promtool_accepts_the_alert_rules_and_their_unit_tests_pass() {
    let dir = repo("dashboards/prometheus");
    for args in [&["check", "rules", "alerts.yml"][..], &["test", "rules", "alerts_test.yml"][..]] {
        let out = std::process::Command::new("promtool")
            .args(args)
            .current_dir(&dir)
            .output()
            .unwrap_or_else(|e| panic!("promtool is needed: apt-get install prometheus ({e})"));
        assert!(
            out.status.success(),
            "promtool {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Every alert has a runbook section in docs/alerts.md that its annotation points to, and a
/// unit test in which it fires.
#[test]
fn every_alert_has_a_runbook_and_a_unit_test_where_it_fires() {
    let rules = std::fs::read_to_string(repo("dashboards/prometheus/alerts.yml")).unwrap();
    let tests = std::fs::read_to_string(repo("dashboards/prometheus/alerts_test.yml")).unwrap();
    let runbooks = std::fs::read_to_string(repo("docs/alerts.md")).unwrap();
    let alerts: Vec<&str> = rules.lines().filter_map(|l| l.trim().strip_prefix("- alert: ")).collect();
    assert!(alerts.len() >= 15, "{alerts:?}");
    for alert in &alerts {
        assert!(runbooks.contains(&format!("\n## {alert}\n")), "docs/alerts.md has no section for {alert}");
        let anchor = format!("runbook_url: \"docs/alerts.md#{}\"", alert.to_lowercase());
        let rule = rules.split("- alert: ").find(|r| r.starts_with(&format!("{alert}\n"))).unwrap();
        assert!(rule.contains(&anchor), "{alert} does not point to its runbook ({anchor})");
        // A test case where it fires: its name followed by expected alerts that are not empty.
        let fires = tests.split("alertname: ").any(|case| {
            case.starts_with(&format!("{alert}\n")) && case.lines().nth(1).is_some_and(|l| l.trim() == "exp_alerts:")
        });
        assert!(fires, "alerts_test.yml has no case where {alert} fires");
    }
    for line in runbooks.lines().filter_map(|l| l.strip_prefix("## ")) {
        assert!(alerts.contains(&line), "docs/alerts.md has a section for no alert: {line}");
    }
}

#[actix_rt::test]
async fn a_fresh_gateway_exports_its_known_series_at_zero() {
    let demo = DemoUpstream::start();
    let gw = TestGateway::start(config_with(vec![demo.upstream("demo")]));
    let text = gw.gateway.render_metrics().await;
    for series in [
        r#"taskgate_cancellations_total{outcome="forwarded",reason="none"} 0"#,
        r#"taskgate_admission_rejected_total{reason="max_tasks",tenant="anonymous"} 0"#,
        r#"taskgate_upstream_errors_total{reason="unavailable",upstream="demo"} 0"#,
        r#"taskgate_tasks_finished_total{status="completed",tenant="anonymous",upstream="demo"} 0"#,
        r#"taskgate_task_duration_seconds_count{status="failed",tenant="anonymous",upstream="demo"} 0"#,
        r#"taskgate_mailbox_full_total{reason="session_mailbox"} 0"#,
    ] {
        assert!(text.contains(series), "a fresh /metrics lacks {series}");
    }
}

#[actix_rt::test]
async fn readyz_reports_an_upstream_killed_since_its_listing_as_unreachable() {
    let demo = DemoUpstream::start();
    let mut upstream = demo.upstream("demo");
    upstream.required = true;
    let gw = TestGateway::start(config_with(vec![upstream]));
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    assert!(!c.tool_names().await.is_empty(), "listed while it ran");
    demo.http.stop().await;
    let ready = reqwest::get(format!("http://{}/readyz", gw.addr)).await.unwrap();
    assert_eq!(ready.status(), 503);
    let body: Value = serde_json::from_str(&ready.text().await.unwrap()).unwrap();
    assert_eq!(body["upstreams"][0]["reachable"], false, "{body}");
    assert!(body["upstreams"][0]["error"].as_str().unwrap().contains("demo"), "{body}");
}

#[actix_rt::test]
async fn a_burst_of_readiness_probes_pings_each_upstream_once() {
    let demo = DemoUpstream::start();
    let gw = TestGateway::start(config_with(vec![demo.upstream("demo")]));
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    c.tool_names().await;
    let before = demo.demo.stats().pings;
    let http = reqwest::Client::new();
    let burst = (0..50).map(|_| http.get(format!("http://{}/readyz", gw.addr)).send());
    for answer in futures_util::future::join_all(burst).await {
        assert_eq!(answer.unwrap().status(), 200);
    }
    // Fresh answers are reused and a probe in flight is not repeated: at most one or two
    // pings (a second only if the burst outlived the one-second freshness).
    let pings = demo.demo.stats().pings - before;
    assert!((1..=2).contains(&pings), "{pings} pings for 50 probes");
}
