//! The container image (deploy/Containerfile) and the Helm chart (deploy/helm/taskgate), as a
//! platform team uses them: the chart rendered, linted and validated against Kubernetes' schemas
//! with Helm 4 as a library (tests/deploy/chart.py, in tests/interop/.venv-helm); the image built
//! with podman on a Debian base made here with debootstrap (no registry is reachable), run, and
//! the rendered chart played with `podman kube play`: three replicas sharing a Redis, each ready
//! and serving, a session started at one served by another, and nothing left after `kube down`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::{json, Value};
use taskgate_testkit::{interop_dir, taskgate_bin, McpClient};

use crate::support::free_port;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn chart() -> PathBuf {
    root().join("deploy/helm/taskgate")
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// Renders the chart with `values` files and `set` values into `out`: its report, or why it
/// refused.
fn render(out: &Path, values: &[&Path], set: Value) -> Result<String, String> {
    let python = interop_dir().join(".venv-helm/bin/python");
    let mut command = Command::new(&python);
    command.arg(root().join("tests/deploy/chart.py")).arg(chart()).arg(out).args(values);
    command.arg(format!("--set-json={set}"));
    let output =
        command.output().unwrap_or_else(|e| panic!("{} runs ({e}): tests/interop/install makes it", python.display()));
    match output.status.success() {
        true => Ok(String::from_utf8_lossy(&output.stdout).into_owned()),
        false => Err(text(&output)),
    }
}

/// The configuration a rendering holds, as `taskgate check-config` judges it here (the stdio
/// command named as the image has it, at this build's path).
fn check_rendered_config(rendered: &Path) {
    let toml = std::fs::read_to_string(rendered.with_extension("yaml.toml")).expect("the rendered taskgate.toml");
    let local = toml.replace("/usr/bin/taskgate", &taskgate_bin().display().to_string());
    let file = rendered.with_extension("check.toml");
    std::fs::write(&file, local).unwrap();
    let out = Command::new(taskgate_bin())
        .arg("check-config")
        .arg(&file)
        .env("TASKGATE_REDIS_URL", "redis://127.0.0.1:1")
        .output()
        .unwrap();
    assert!(out.status.success(), "the chart's configuration is refused: {}\n{toml}", text(&out));
}

fn documents(rendered: &Path) -> String {
    std::fs::read_to_string(rendered).unwrap()
}

#[test]
fn the_chart_renders_lints_and_validates_and_refuses_replicas_without_redis() {
    let dir = tempfile::tempdir().unwrap();
    // Default values: one replica on the file store, hardened, probed on the operators' port.
    let default = dir.path().join("default.yaml");
    let report = render(&default, &[], json!({})).unwrap_or_else(|e| panic!("{e}"));
    for kind in ["ConfigMap taskgate", "Deployment taskgate", "Service taskgate", "Service taskgate-admin"] {
        assert!(report.lines().any(|l| l == kind), "{kind} missing from:\n{report}");
    }
    assert!(report.contains("PodDisruptionBudget taskgate"), "{report}");
    check_rendered_config(&default);
    let manifests = documents(&default);
    for needed in [
        "readOnlyRootFilesystem: true",
        "allowPrivilegeEscalation: false",
        "runAsNonRoot: true",
        "type: RuntimeDefault",
        "- ALL",
        "path: /healthz",
        "path: /readyz",
        // shutdown_grace_secs 30 + the preStop pause 5 + 5 to exit
        "terminationGracePeriodSeconds: 40",
        "type: Recreate",
        "shareProcessNamespace: true",
    ] {
        assert!(manifests.contains(needed), "{needed:?} missing from the default rendering:\n{manifests}");
    }

    // Three replicas sharing Redis, with the monitoring kinds and the dashboards.
    let replicas = dir.path().join("replicas.yaml");
    let profile = chart().join("ci/replicas-redis.yaml");
    let report = render(&replicas, &[&profile], json!({})).unwrap_or_else(|e| panic!("{e}"));
    for kind in ["ServiceMonitor taskgate", "PrometheusRule taskgate", "ConfigMap taskgate-dashboard-overview"] {
        assert!(report.lines().any(|l| l.starts_with(kind)), "{kind} missing from:\n{report}");
    }
    check_rendered_config(&replicas);
    let manifests = documents(&replicas);
    assert!(manifests.contains("replicas: 3") && manifests.contains("name: TASKGATE_REDIS_URL"), "{manifests}");
    assert!(!manifests.contains("type: Recreate"), "replicas on Redis roll one at a time");
    // The rules and dashboards are the repository's own files, whole.
    let alerts = std::fs::read_to_string(root().join("dashboards/prometheus/alerts.yml")).unwrap();
    let first_alert = alerts.lines().find_map(|l| l.trim().strip_prefix("- alert: ")).unwrap();
    assert!(manifests.contains(&format!("alert: {first_alert}")), "{first_alert} missing from the PrometheusRule");
    assert!(manifests.contains("grafana_dashboard: '1'"), "the dashboards carry the sidecar's label");
    let rules =
        Command::new("promtool").arg("check").arg("rules").arg(replicas.with_extension("yaml.rules.yml")).output();
    let rules = rules.expect("promtool runs (.ci/run installs prometheus)");
    assert!(rules.status.success(), "the PrometheusRule's rules: {}", text(&rules));

    // More than one replica on the file store: refused, saying why.
    let refused = render(&dir.path().join("refused.yaml"), &[], json!({"replicas": 3})).expect_err("refused");
    assert!(refused.contains("replicas: 3 needs config.store.backend \"redis\""), "{refused}");
}

/// podman with its storage in a directory of the test's own, removed with it.
struct Podman {
    dir: tempfile::TempDir,
}

impl Podman {
    fn new() -> Podman {
        let dir = tempfile::tempdir().unwrap();
        // runc and cgroupfs (crun refuses this machine's cgroups), and limits within the host's:
        // a container may not raise them.
        let (mut nofile, mut nproc) =
            (libc::rlimit { rlim_cur: 0, rlim_max: 0 }, libc::rlimit { rlim_cur: 0, rlim_max: 0 });
        // SAFETY: getrlimit writes the struct it is given.
        unsafe {
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut nofile);
            libc::getrlimit(libc::RLIMIT_NPROC, &mut nproc);
        }
        let (nofile, nproc) = (nofile.rlim_max.min(65536), nproc.rlim_max.min(4096));
        let conf = format!(
            "[containers]\ndefault_ulimits = [\"nofile={nofile}:{nofile}\", \"nproc={nproc}:{nproc}\"]\n\
             [engine]\nruntime = \"runc\"\ncgroup_manager = \"cgroupfs\"\nevents_logger = \"file\"\n"
        );
        std::fs::write(dir.path().join("containers.conf"), conf).unwrap();
        Podman { dir }
    }

    fn command(&self) -> Command {
        let mut command = Command::new("podman");
        command
            .env("CONTAINERS_CONF", self.dir.path().join("containers.conf"))
            .arg("--root")
            .arg(self.dir.path().join("storage"))
            .arg("--runroot")
            .arg(self.dir.path().join("run"))
            .args(["--storage-driver", "vfs"]);
        command
    }

    fn run(&self, args: &[&str]) -> String {
        let out = self.command().args(args).output().unwrap();
        assert!(out.status.success(), "podman {args:?}: {}", text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Podman {
    /// Every container's name and state, and the end of its log.
    fn containers(&self) -> String {
        let out = self.command().args(["ps", "-a", "--format", "{{.Names}} {{.Status}}"]).output().unwrap();
        let mut shown = text(&out);
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let name = line.split_whitespace().next().unwrap_or_default();
            let logs = self.command().args(["logs", "--tail", "40", name]).output().unwrap();
            shown += &format!("--- {name}\n{}", text(&logs));
        }
        shown
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        let _ = self.command().args(["pod", "rm", "-af"]).output();
        let _ = self.command().args(["rm", "-af"]).output();
    }
}

/// Waits until the operators' listener at `admin` says ready; past the bound, fails showing
/// every container's state and the end of its log. (A container starts on a machine busy
/// with the rest of the suite: the bound is wider than the other tests' 30 s.)
async fn ready(podman: &Podman, admin: &str) -> Value {
    let client = reqwest::Client::new();
    let report = async {
        loop {
            if let Ok(response) = client.get(format!("{admin}/readyz")).send().await {
                if let Ok(report) = response.json::<Value>().await {
                    if report["ready"] == true && report["upstreams"][0]["reachable"] == true {
                        return report;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    match tokio::time::timeout(Duration::from_secs(90), report).await {
        Ok(report) => report,
        Err(_) => panic!("{admin} was not ready within 90 s:\n{}", podman.containers()),
    }
}

#[actix_rt::test]
async fn the_image_runs_alone_and_the_chart_runs_three_replicas_under_podman() {
    let missing: Vec<&str> = ["podman", "debootstrap", "runc"]
        .into_iter()
        .filter(|tool| Command::new(tool).arg("--version").output().is_err())
        .collect();
    if !missing.is_empty() {
        eprintln!("SKIPPED: the image and chart test needs {missing:?} (.ci/run installs them)");
        return;
    }
    let podman = Podman::new();
    let work = podman.dir.path();

    // A Debian base made here: glibc, OpenSSL 3 and CA certificates, as the distroless default
    // has them.
    let rootfs = work.join("rootfs");
    let out = Command::new("debootstrap")
        .args(["--variant=minbase", "--include=libssl3,ca-certificates", "bookworm"])
        .arg(&rootfs)
        .arg("http://deb.debian.org/debian")
        .output()
        .unwrap();
    assert!(out.status.success(), "debootstrap: {}", text(&out));
    let tar = Command::new("tar").arg("-C").arg(&rootfs).args(["-cf", "-", "."]).output().unwrap();
    let mut import = podman
        .command()
        .args(["import", "-", "localhost/taskgate-base:test"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(import.stdin.as_mut().unwrap(), &tar.stdout).unwrap();
    drop(import.stdin.take());
    assert!(import.wait().unwrap().success(), "podman import");
    std::fs::remove_dir_all(&rootfs).unwrap();

    // The image, from this build's binary (BINARY_FROM=prebuilt) on that base.
    let context = work.join("context");
    std::fs::create_dir_all(context.join("target/release")).unwrap();
    std::fs::create_dir_all(context.join("deploy/state")).unwrap();
    for file in ["deploy/Containerfile", "deploy/taskgate.toml", "deploy/state/README.md"] {
        std::fs::copy(root().join(file), context.join(file)).unwrap();
    }
    std::fs::copy(taskgate_bin(), context.join("target/release/taskgate")).unwrap();
    let context = context.display().to_string();
    podman.run(&[
        "build",
        "-q",
        "-f",
        "deploy/Containerfile",
        "--build-arg",
        "BINARY_FROM=prebuilt",
        "--build-arg",
        "BASE=localhost/taskgate-base:test",
        "-t",
        "localhost/taskgate:test",
        &context,
    ]);
    let labels = podman.run(&["image", "inspect", "localhost/taskgate:test", "--format", "{{json .Labels}}"]);
    assert!(labels.contains("\"org.opencontainers.image.title\":\"taskgate\""), "{labels}");
    let config = podman.run(&[
        "image",
        "inspect",
        "localhost/taskgate:test",
        "--format",
        "{{.Config.User}} {{json .Config.Volumes}}",
    ]);
    assert!(config.starts_with("65532:65532") && config.contains("/var/lib/taskgate"), "{config}");

    // Run alone, its default configuration: the demo upstream over stdio inside the container.
    let (mcp, admin) = (free_port(), free_port());
    podman.run(&[
        "run",
        "-d",
        "--name",
        "alone",
        "--network",
        "host",
        "-e",
        &format!("TASKGATE_LISTEN=127.0.0.1:{mcp}"),
        "-e",
        &format!("TASKGATE_ADMIN_LISTEN=127.0.0.1:{admin}"),
        "localhost/taskgate:test",
    ]);
    ready(&podman, &format!("http://127.0.0.1:{admin}")).await;
    let mut client = McpClient::new(&format!("http://127.0.0.1:{mcp}/mcp"));
    client.initialize().await;
    let echoed = client.call("demo__echo", json!({"text": "from a container"})).await.unwrap();
    assert_eq!(echoed["content"][0]["text"], "from a container");
    let check = podman.run(&["exec", "alone", "/usr/bin/taskgate", "check-config", "/etc/taskgate/taskgate.toml"]);
    assert!(check.contains("ok"), "{check}");
    podman.run(&["rm", "-f", "-v", "alone"]);

    // The chart's three-replica Redis profile, played with a Redis beside it.
    let mut redis = taskgate_store::testing::RedisServer::start();
    let rendered = podman.dir.path().join("replicas.yaml");
    let image = json!({"image": {"repository": "localhost/taskgate", "tag": "test", "pullPolicy": "Never"}});
    render(&rendered, &[&chart().join("ci/replicas-redis.yaml")], image).unwrap_or_else(|e| panic!("{e}"));
    let ports: Vec<u16> = (0..6).map(|_| free_port()).collect();
    let played = podman.dir.path().join("played.yaml");
    let list = ports.iter().map(u16::to_string).collect::<Vec<_>>().join(",");
    let out = Command::new(interop_dir().join(".venv-helm/bin/python"))
        .arg(root().join("tests/deploy/play.py"))
        .args([rendered.as_os_str(), played.as_os_str()])
        .args([list.as_str(), redis.url.as_str()])
        .output()
        .unwrap();
    assert!(out.status.success(), "play.py: {}", text(&out));
    let played = played.display().to_string();
    podman.run(&["kube", "play", "--network", "host", &played]);
    let urls: Vec<String> = (0..3).map(|i| format!("http://127.0.0.1:{}/mcp", ports[2 * i])).collect();
    for i in 0..3 {
        let report = ready(&podman, &format!("http://127.0.0.1:{}", ports[2 * i + 1])).await;
        assert_eq!(report["store"]["reachable"], true, "replica {i}: {report}");
        let mut client = McpClient::new(&urls[i]);
        client.initialize().await;
        let echoed = client.call("demo__echo", json!({"text": format!("replica {i}")})).await.unwrap();
        assert_eq!(echoed["content"][0]["text"], format!("replica {i}"));
    }
    // A session started at one replica is served by another: the store is shared.
    let mut first = McpClient::new(&urls[0]);
    first.initialize().await;
    let mut second = McpClient::new(&urls[1]);
    second.session = first.session.clone();
    second.protocol_version = first.protocol_version.clone();
    let echoed = second.call("demo__echo", json!({"text": "another replica"})).await.unwrap();
    assert_eq!(echoed["content"][0]["text"], "another replica");

    podman.run(&["kube", "down", &played]);
    let left = podman.run(&["ps", "-aq"]) + &podman.run(&["pod", "ps", "-q"]);
    assert!(left.trim().is_empty(), "kube down left: {left}");
    redis.stop();
}
