//! The Debian package, as an operator installs it: built with `cargo deb` (from the binary the
//! test command built), installed with `dpkg -i` on this machine, its hardened unit checked by
//! `systemd-analyze verify`, the installed binary run as the package's user with the packaged
//! configuration, then purged. Needs root (CI runs as root).

use std::process::{Command, Stdio};

use crate::support::{free_port, within};

fn run(program: &str, args: &[&str]) -> (bool, String) {
    let out = Command::new(program)
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap_or_else(|e| panic!("{program} runs ({e}); .ci/run installs what the package test needs"));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// Purges the package when the test ends, however it ends.
struct Installed;

impl Drop for Installed {
    fn drop(&mut self) {
        let _ = Command::new("dpkg").args(["--purge", "taskgate"]).stdout(Stdio::null()).stderr(Stdio::null()).status();
    }
}

#[actix_rt::test]
async fn the_debian_package_installs_runs_as_its_user_and_purges() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "dpkg -i needs root: run the tests as root (CI does)");
    let dir = tempfile::tempdir().unwrap();
    let deb = dir.path().join("taskgate.deb");
    // The binary the test command built (the release package is `cargo deb -p taskgate`).
    let (built, text) = run(
        "cargo",
        &["deb", "-p", "taskgate", "--no-build", "--profile", "dev", "--fast", "-o", deb.to_str().unwrap()],
    );
    assert!(built, "cargo deb: {text}");
    let (_, contents) = run("dpkg-deb", &["--contents", deb.to_str().unwrap()]);
    for path in [
        "./usr/bin/taskgate",
        "./etc/taskgate/taskgate.toml",
        "./usr/lib/systemd/system/taskgate.service",
        "./usr/share/doc/taskgate/docs/admin.md",
        "./usr/share/taskgate/dashboards/prometheus/alerts.yml",
        "./usr/share/taskgate/dashboards/provisioning/datasources/prometheus.yaml",
    ] {
        assert!(contents.contains(path), "{path} is not in the package: {contents}");
    }
    let (_, conffiles) = run("dpkg-deb", &["--info", deb.to_str().unwrap(), "conffiles"]);
    assert_eq!(conffiles.trim(), "/etc/taskgate/taskgate.toml");

    drop(Installed); // a package left by an earlier run goes first
    let _installed = Installed;
    let (installed, text) = run("dpkg", &["-i", deb.to_str().unwrap()]);
    assert!(installed, "dpkg -i: {text}");
    // Its user, its state directory, its configuration readable by its group only.
    let (_, id) = run("id", &["taskgate"]);
    assert!(id.contains("(taskgate)"), "{id}");
    let (_, listing) =
        run("stat", &["-c", "%U:%G %a %n", "/var/lib/taskgate", "/etc/taskgate", "/etc/taskgate/taskgate.toml"]);
    assert!(listing.contains("taskgate:taskgate 750 /var/lib/taskgate"), "{listing}");
    assert!(listing.contains("root:taskgate 750 /etc/taskgate\n"), "{listing}");
    assert!(listing.contains("root:taskgate 640 /etc/taskgate/taskgate.toml"), "{listing}");

    // The unit: systemd's own check, and the hardening it promises.
    let (verified, text) = run("systemd-analyze", &["verify", "/usr/lib/systemd/system/taskgate.service"]);
    assert!(verified && text.trim().is_empty(), "systemd-analyze verify: {text}");
    let unit = std::fs::read_to_string("/usr/lib/systemd/system/taskgate.service").unwrap();
    for line in [
        "User=taskgate",
        "StateDirectory=taskgate",
        "ProtectSystem=strict",
        "NoNewPrivileges=yes",
        "ExecStart=/usr/bin/taskgate serve --config /etc/taskgate/taskgate.toml",
    ] {
        assert!(unit.lines().any(|l| l == line), "the unit lacks {line}");
    }
    let (checked, text) = run("/usr/bin/taskgate", &["check-config", "/etc/taskgate/taskgate.toml"]);
    assert!(checked, "the packaged configuration: {text}");
    // Every link of the installed documentation to another of its files resolves.
    let mut broken = Vec::new();
    let docs = std::path::Path::new("/usr/share/doc/taskgate");
    let mut pages = vec![docs.join("README.md")];
    pages.extend(std::fs::read_dir(docs.join("docs")).unwrap().map(|e| e.unwrap().path()));
    for page in pages.iter().filter(|p| p.extension().is_some_and(|e| e == "md")) {
        let text = std::fs::read_to_string(page).unwrap();
        for link in text.split("](").skip(1).filter_map(|rest| rest.split(')').next()) {
            let target = link.split('#').next().unwrap();
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            if !page.parent().unwrap().join(target).exists() {
                broken.push(format!("{}: {link}", page.display()));
            }
        }
    }
    assert!(broken.is_empty(), "links that do not resolve where the package installs them: {broken:?}");

    // The installed binary, as the package's user, with the packaged configuration (on free
    // ports): it serves, its store is in its state directory, and SIGTERM stops it cleanly.
    let (main, admin) = (free_port(), free_port());
    let mut child = tokio::process::Command::new("setpriv")
        .args(["--reuid=taskgate", "--regid=taskgate", "--init-groups", "/usr/bin/taskgate", "serve"])
        .args(["--config", "/etc/taskgate/taskgate.toml", "--listen", &format!("127.0.0.1:{main}")])
        .args(["--admin-listen", &format!("127.0.0.1:{admin}")])
        .current_dir("/var/lib/taskgate")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut out = tokio::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    within(tokio::io::AsyncBufReadExt::read_line(&mut out, &mut line)).await.unwrap();
    assert!(line.contains(&format!("127.0.0.1:{main}")), "{line}");
    let http = reqwest::Client::new();
    let ready = http.get(format!("http://127.0.0.1:{admin}/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200);
    let metrics = http.get(format!("http://127.0.0.1:{admin}/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("taskgate_build_info"));
    assert_eq!(http.get(format!("http://127.0.0.1:{main}/metrics")).send().await.unwrap().status(), 404);
    let (_, store) = run("stat", &["-c", "%U", "/var/lib/taskgate/tasks.redb"]);
    assert_eq!(store.trim(), "taskgate");
    // SAFETY: kill only sends a signal to our own child.
    unsafe { libc::kill(child.id().unwrap() as libc::pid_t, libc::SIGTERM) };
    let status = within(child.wait()).await.unwrap();
    assert!(status.success(), "{status}");
    // A run by hand as root left the database root's: the service's user is told it is not
    // damaged and whose it is, never to repair it.
    assert!(run("chown", &["root:root", "/var/lib/taskgate/tasks.redb"]).0);
    let refused = tokio::process::Command::new("setpriv")
        .args(["--reuid=taskgate", "--regid=taskgate", "--init-groups", "/usr/bin/taskgate", "serve"])
        .args(["--config", "/etc/taskgate/taskgate.toml", "--listen", &format!("127.0.0.1:{main}")])
        .args(["--admin-listen", &format!("127.0.0.1:{admin}")])
        .current_dir("/var/lib/taskgate")
        .output();
    let refused = within(refused).await.unwrap();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{said}");
    assert!(said.contains("not damaged") && said.contains("chown") && !said.contains("store repair"), "{said}");
    assert!(run("chown", &["taskgate:taskgate", "/var/lib/taskgate/tasks.redb"]).0);

    // Purged: nothing is left.
    let (purged, text) = run("dpkg", &["--purge", "taskgate"]);
    assert!(purged, "dpkg --purge: {text}");
    for path in ["/usr/bin/taskgate", "/etc/taskgate", "/var/lib/taskgate", "/usr/lib/systemd/system/taskgate.service"]
    {
        assert!(!std::path::Path::new(path).exists(), "{path} is left after purge");
    }
    assert!(!run("id", &["taskgate"]).0, "the user is left after purge");
}
