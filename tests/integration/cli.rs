//! The `taskgate` command: check-config and the demo, run as a user would.

use std::process::Stdio;

use serde_json::json;
use taskgate_testkit::{taskgate_bin, McpClient, ServedGateway};
use tokio::io::{AsyncBufReadExt, BufReader};

fn repo_file(path: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

#[test]
fn the_example_config_is_valid() {
    let check = || {
        let mut command = std::process::Command::new(taskgate_bin());
        command.args(["check-config"]).arg(repo_file("config/taskgate.toml"));
        command
    };
    let out = check().env("ACME_JWT_SECRET", "an-hs256-secret-of-at-least-32-bytes").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok (2 upstreams, 2 tenants)"));
    // Secrets are checked as the gateway would load them.
    let out = check().env_remove("ACME_JWT_SECRET").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("tenant[0] (\"acme\").jwt[0].secret_env"), "{err}");
    let config = taskgate_config::Config::load(&repo_file("config/taskgate.toml")).unwrap();
    assert_eq!(config.upstreams[1].name, "files");
    assert!(!config.upstreams[1].prefix);
    assert_eq!(config.tenants.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(), ["acme", "globex"]);
    assert!(config.tenants.iter().all(|t| !t.anonymous), "no anonymous access in production");
    let first = std::fs::read_to_string(repo_file("config/taskgate.toml")).unwrap();
    assert!(first.lines().next().unwrap().contains("ACME_JWT_SECRET"), "its first line says what it needs");
    // The demo's file checks as `taskgate demo` runs it, with its built-in upstreams.
    let out = std::process::Command::new(taskgate_bin())
        .args(["check-config"])
        .arg(repo_file("config/demo.toml"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("the demo's 2 built-in upstreams"));
}

#[test]
fn hash_key_prints_the_sha256_of_a_key_given_or_piped() {
    let out = std::process::Command::new(taskgate_bin()).args(["hash-key", "demo-key-0123456789"]).output().unwrap();
    let given = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert_eq!(given, taskgate_core::tenants::hash_key("demo-key-0123456789"));
    let mut child = std::process::Command::new(taskgate_bin())
        .arg("hash-key")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(b"demo-key-0123456789\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), given);
    // A short key (the demo's, as config/demo.toml suggests) is hashed, with a warning.
    let short = std::process::Command::new(taskgate_bin()).args(["hash-key", "demo-key"]).output().unwrap();
    assert!(short.status.success(), "{}", String::from_utf8_lossy(&short.stderr));
    let demo = std::fs::read_to_string(repo_file("config/demo.toml")).unwrap();
    let hashed = String::from_utf8_lossy(&short.stdout).trim().to_owned();
    assert!(demo.contains(&format!("sha256 = \"{hashed}\"")), "config/demo.toml's hash of demo-key: {hashed}");
    assert!(String::from_utf8_lossy(&short.stderr).contains("at least 16"));
    let empty = std::process::Command::new(taskgate_bin()).args(["hash-key", ""]).output().unwrap();
    assert!(!empty.status.success());
}

#[test]
fn check_config_prints_every_problem_with_its_location() {
    let dir = std::env::temp_dir().join(format!("taskgate-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad.toml");
    std::fs::write(&file, "[server]\nlisten = \"everywhere\"\n[[upstream]]\nname = \"a b\"\ntransport = \"http\"\n")
        .unwrap();
    let out = std::process::Command::new(taskgate_bin()).arg("check-config").arg(&file).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("3 problem(s)"), "{err}");
    for location in ["server.listen", "upstream[0] (\"a b\").name", "upstream[0] (\"a b\").url"] {
        assert!(err.contains(location), "missing {location} in {err}");
    }
    std::fs::write(&file, "[server]\nlisen = 1\n").unwrap();
    let out = std::process::Command::new(taskgate_bin()).arg("check-config").arg(&file).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("lisen") && err.contains("line 2"), "{err}");
    // A wrong key in one section hides neither another section's problem nor what validation
    // finds in the sections read, nor a stdio command that is not there.
    std::fs::write(
        &file,
        "[server]\nlisen = 1\n[tasks]\nmax_tasks = \"many\"\n[federation]\nseparator = \"\"\n\
         [[upstream]]\nname = \"time\"\ntransport = \"stdio\"\ncommand = \"no-such-mcp-server-anywhere\"\n",
    )
    .unwrap();
    let out = std::process::Command::new(taskgate_bin()).arg("check-config").arg(&file).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("4 problem(s)"), "{err}");
    for part in ["lisen", "line 2", "max_tasks", "line 4", "federation.separator", "upstream[0] (\"time\").command"] {
        assert!(err.contains(part), "missing {part} in {err}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// `listen` takes a host name as well as an address (`localhost:PORT`).
#[actix_rt::test]
async fn serve_listens_on_a_host_name() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let (dir, file) = config_file("listen-name");
    std::fs::write(&file, format!("[server]\nlisten = \"localhost:{port}\"\n[store]\nbackend = \"memory\"\n")).unwrap();
    let check = std::process::Command::new(taskgate_bin()).arg("check-config").arg(&file).output().unwrap();
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));
    let gw = ServedGateway::start(&file).await;
    assert!(gw.url.contains(&format!("127.0.0.1:{port}")), "{}", gw.url);
    let mut client = McpClient::new(&gw.url);
    client.initialize().await;
    gw.kill().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// A port in use is a clear error, with no panic on the way out.
#[test]
fn serve_on_a_port_in_use_says_so_and_nothing_else() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let (dir, file) = config_file("port-in-use");
    // A stdio upstream that leaves a mark when it starts: it never does, the port being
    // refused first.
    let mark = dir.join("started");
    std::fs::write(
        &file,
        format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\n[store]\nbackend = \"memory\"\n\
             [[upstream]]\nname = \"marker\"\ntransport = \"stdio\"\ncommand = \"sh\"\nargs = [\"-c\", \"touch {}; cat\"]\n",
            mark.display()
        ),
    )
    .unwrap();
    let out = std::process::Command::new(taskgate_bin()).args(["serve", "-c"]).arg(&file).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("cannot start the front door"), "{err}");
    assert!(err.contains("in use") && !err.contains("panicked") && !err.contains("backtrace"), "{err}");
    assert!(err.contains(&format!("127.0.0.1:{port}")), "the address is named: {err}");
    assert!(!mark.exists(), "no upstream process was started");
    drop(taken);
    let _ = std::fs::remove_dir_all(dir);
}

/// `demo-upstream` without a transport says what it needs rather than listening somewhere.
#[test]
fn demo_upstream_without_a_transport_says_what_it_needs() {
    let out = std::process::Command::new(taskgate_bin()).arg("demo-upstream").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--stdio") && err.contains("--listen"), "{err}");
}

#[test]
fn check_config_names_an_unset_redis_url_variable() {
    let (dir, file) = config_file("redis-url-env");
    std::fs::write(&file, "[store]\nbackend = \"redis\"\nurl_env = \"TASKGATE_TEST_REDIS_URL_NOT_SET\"\n").unwrap();
    let check = || {
        let mut command = std::process::Command::new(taskgate_bin());
        command.arg("check-config").arg(&file).env_remove("TASKGATE_TEST_REDIS_URL_NOT_SET");
        command
    };
    let out = check().output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("store.url_env") && err.contains("is not set"), "{err}");
    let out = check().env("TASKGATE_TEST_REDIS_URL_NOT_SET", "redis://:secret@127.0.0.1:1").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("secret"));
    let _ = std::fs::remove_dir_all(dir);
}

/// Runs `taskgate demo --listen 127.0.0.1:0`; returns it and the URL it prints.
async fn start_demo(data: &std::path::Path) -> (tokio::process::Child, String) {
    let mut child = tokio::process::Command::new(taskgate_bin())
        .args(["demo", "--listen", "127.0.0.1:0", "--data"])
        .arg(data)
        .env("TASKGATE_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next_line().await.unwrap().expect("the demo prints its address");
    // Keep reading: the demo prints more, and a closed pipe would make it fail.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, first.rsplit(' ').next().unwrap().to_owned())
}

#[actix_rt::test]
async fn the_demo_answers_initialize_tools_list_and_tools_call() {
    let data = tempfile::tempdir().unwrap();
    let (mut child, url) = start_demo(data.path()).await;
    assert!(url.starts_with("http://127.0.0.1:") && url.ends_with("/mcp"), "{url}");
    let mut c = McpClient::new(&url);
    c.initialize().await;
    let names = c.tool_names().await;
    assert!(names.contains(&"demo__add".to_string()) && names.contains(&"local__echo".to_string()), "{names:?}");
    assert_eq!(c.call("demo__add", json!({"a": 1, "b": 2})).await.unwrap()["structuredContent"]["sum"], 3.0);
    assert_eq!(c.call("local__echo", json!({"text": "stdio"})).await.unwrap()["content"][0]["text"], "stdio");
    assert_eq!(c.call("demo__fail", json!({})).await.unwrap()["isError"], true);
    // The demo's second tenant: an API key, and only the "demo" upstream.
    let mut team = McpClient::with_bearer(&url, "demo-key");
    team.initialize().await;
    let names = team.tool_names().await;
    assert!(names.iter().all(|n| n.starts_with("demo__")), "{names:?}");
    let wrong = McpClient::with_bearer(&url, "not-the-demo-key").try_initialize().await;
    assert_eq!(wrong.status, reqwest::StatusCode::UNAUTHORIZED);
    child.kill().await.unwrap();
}

/// A fresh folder for one test's config file, and the file's path in it.
fn config_file(test: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("taskgate-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("taskgate.toml");
    (dir, file)
}

/// Replaces the file in one step (a rename), so the gateway's watcher never reads half of it.
fn write_atomic(file: &std::path::Path, text: String) {
    let tmp = file.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, file).unwrap();
}

fn serve_config(upstream: &str, keys: &[(&str, &str)], max_tasks: usize, poll_ms: u64) -> String {
    let mut text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nconfig_poll_ms = {poll_ms}\n[logging]\nlevel = \"info\"\n\
         [store]\nbackend = \"memory\"\n\
         [[upstream]]\nname = \"a\"\ntransport = \"http\"\nurl = \"{upstream}\"\n\
         [[tenant]]\nid = \"acme\"\n[tenant.limits]\nmax_concurrent_tasks = {max_tasks}\n"
    );
    for (principal, key) in keys {
        let hash = taskgate_core::tenants::hash_key(key);
        text.push_str(&format!("[[tenant.api_key]]\nprincipal = \"{principal}\"\nsha256 = \"{hash}\"\n"));
    }
    text
}

#[actix_rt::test]
async fn serve_reloads_tenants_when_the_file_changes_and_keeps_sessions_tasks_and_bad_files_out() {
    let upstream = taskgate_testkit::DemoUpstream::start();
    let (dir, file) = config_file("reload");
    let (ci, ops) = ("acme-ci-key-0000000001", "acme-ops-key-000000002");
    std::fs::write(&file, serve_config(&upstream.http.url, &[("ci", ci)], 5, 50)).unwrap();
    let mut served = ServedGateway::start(&file).await;
    let mut c = McpClient::with_bearer(&served.url, ci);
    c.initialize().await;
    let created =
        c.request("tools/call", Some(json!({"name": "a__wait", "arguments": {"gate": "g"}, "task": {}}))).await;
    let task = created.outcome().unwrap()["task"]["taskId"].as_str().unwrap().to_owned();
    assert_eq!(
        McpClient::with_bearer(&served.url, ops).try_initialize().await.status,
        reqwest::StatusCode::UNAUTHORIZED
    );
    // A new key and a lower cap, by editing the file.
    write_atomic(&file, serve_config(&upstream.http.url, &[("ci", ci), ("ops", ops)], 1, 50));
    served.log_line("configuration reloaded").await;
    McpClient::with_bearer(&served.url, ops).initialize().await;
    let capped =
        c.request("tools/call", Some(json!({"name": "a__echo", "arguments": {"text": "x"}, "task": {}}))).await;
    assert_eq!(capped.outcome().unwrap_err().code, -32006, "the new cap applies to new requests");
    // An invalid file is refused with its problems logged; the running tenants stay.
    write_atomic(&file, serve_config(&upstream.http.url, &[], 0, 50));
    let refused = served.log_line("configuration reload rejected").await;
    assert!(refused.contains("max_concurrent_tasks") || refused.contains("problem"), "{refused}");
    McpClient::with_bearer(&served.url, ops).initialize().await;
    // The session and the task lived through it all.
    upstream.demo.release("g");
    let done = c.request("tasks/result", Some(json!({"taskId": task}))).await.outcome().unwrap();
    assert_eq!(done["content"][0]["text"], "gate g opened");
    served.log_line("task finished").await;
    // Audit lines carry tenant and principal, and never a key.
    assert!(served.seen.iter().any(|l| l.contains("task created") && l.contains("acme") && l.contains("ci")));
    assert!(served.seen.iter().all(|l| !l.contains(ci) && !l.contains(ops)), "a key was logged");
    served.child.kill().await.unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

#[actix_rt::test]
async fn serve_reloads_tenants_on_sighup() {
    let upstream = taskgate_testkit::DemoUpstream::start();
    let (dir, file) = config_file("hup");
    let (old, new) = ("acme-old-key-000000001", "acme-new-key-000000002");
    // config_poll_ms = 0: only SIGHUP reloads.
    std::fs::write(&file, serve_config(&upstream.http.url, &[("old", old)], 5, 0)).unwrap();
    let mut served = ServedGateway::start(&file).await;
    let mut session = McpClient::with_bearer(&served.url, old);
    session.initialize().await;
    std::fs::write(&file, serve_config(&upstream.http.url, &[("new", new)], 5, 0)).unwrap();
    let pid = served.child.id().unwrap().to_string();
    assert!(std::process::Command::new("kill").args(["-HUP", &pid]).status().unwrap().success());
    let line = served.log_line("reloading the configuration").await;
    assert!(line.contains("SIGHUP"), "{line}");
    served.log_line("configuration reloaded").await;
    McpClient::with_bearer(&served.url, new).initialize().await;
    // The old key is gone: its session is still there, but its requests are refused.
    assert_eq!(session.request("ping", None).await.status, reqwest::StatusCode::UNAUTHORIZED);
    served.child.kill().await.unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

#[actix_rt::test]
async fn the_typescript_sdk_client_works_against_the_demo() {
    let data = tempfile::tempdir().unwrap();
    let (mut child, url) = start_demo(data.path()).await;
    let run = tokio::process::Command::new("node")
        .arg("demo-client.mjs")
        .arg(&url)
        .current_dir(taskgate_testkit::interop_dir())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(std::time::Duration::from_secs(60), run).await.unwrap().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let out: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(out["serverInfo"]["name"], "taskgate");
    assert!(out["tools"].as_array().unwrap().iter().any(|t| t == "demo__job"));
    assert_eq!(out["add"]["structuredContent"]["sum"], 5.0);
    assert_eq!(out["echo"]["content"][0]["text"], "from the SDK");
    child.kill().await.unwrap();
}

#[test]
fn every_config_file_the_docs_name_exists() {
    let mut named = Vec::new();
    let mut sources: Vec<std::path::PathBuf> = std::fs::read_dir(repo_file("config"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    sources.push(repo_file("README.md"));
    sources.push(repo_file("ARCHITECTURE.md"));
    sources.extend(
        std::fs::read_dir(repo_file("docs"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "md")),
    );
    for source in sources {
        let text = std::fs::read_to_string(&source).unwrap();
        for (i, _) in text.match_indices("config/") {
            let rest = &text[i..];
            let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || "/_-.".contains(c))).unwrap_or(rest.len());
            let path = rest[..end].trim_end_matches('.');
            if path.ends_with(".toml") {
                named.push((source.display().to_string(), path.to_owned()));
            }
        }
    }
    assert!(named.len() >= 3, "{named:?}");
    for (source, path) in named {
        assert!(repo_file(&path).exists(), "{source} names {path}, which does not exist");
    }
}

#[tokio::test]
async fn the_stdio_demo_upstream_exits_when_its_stdin_closes() {
    use tokio::io::AsyncWriteExt;
    let mut child = tokio::process::Command::new(taskgate_bin())
        .args(["demo-upstream", "--stdio"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    stdin.write_all(format!("{ping}\n").as_bytes()).await.unwrap();
    let answer = out.next_line().await.unwrap().unwrap();
    assert!(answer.contains(r#""id":1"#), "{answer}");
    // A call still running when stdin closes (it waits for its gate) must not keep it alive.
    let call =
        json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"wait","arguments":{"gate":"never"}}});
    stdin.write_all(format!("{call}\n").as_bytes()).await.unwrap();
    drop(stdin);
    let status = tokio::time::timeout(std::time::Duration::from_secs(20), child.wait())
        .await
        .expect("the stdio demo upstream did not exit after its stdin closed")
        .unwrap();
    assert!(status.success(), "{status}");
}

/// The admin listener's announcement lists the admin view only when an operator can sign in.
#[actix_rt::test]
async fn the_admin_listener_announces_its_view_only_with_an_admin_key() {
    let (dir, file) = config_file("admin-announce");
    let admin = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let write = |keys: &str| {
        std::fs::write(
            &file,
            format!(
                "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"{admin}\"\n[store]\nbackend = \"memory\"\n{keys}"
            ),
        )
        .unwrap()
    };
    write("");
    let mut served = ServedGateway::start(&file).await;
    let line = served.log_line("admin listener").await;
    assert!(!line.contains("/admin/,") && line.contains("no /admin/"), "{line}");
    served.kill().await;
    write(&format!(
        "[[admin.key]]\nname = \"ops\"\nsha256 = \"{}\"\n",
        taskgate_core::tenants::hash_key("ops-admin-key-000000000001")
    ));
    let mut served = ServedGateway::start(&file).await;
    let line = served.log_line("admin listener").await;
    assert!(line.contains("/readyz, /admin/"), "{line}");
    served.kill().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// An OAuth issuer written with a trailing slash passes check-config with a note saying why it
/// may not match its authorization server's metadata.
#[test]
fn check_config_notes_an_issuer_with_a_trailing_slash() {
    let (dir, file) = config_file("issuer-slash");
    let text = "[server]\npublic_url = \"https://gw.example.com/mcp\"\n[store]\nbackend = \"memory\"\n\
                [[tenant]]\nid = \"acme\"\n[[tenant.oauth]]\nissuer = \"https://idp.example.com/\"\n";
    std::fs::write(&file, text).unwrap();
    let out = std::process::Command::new(taskgate_bin()).arg("check-config").arg(&file).output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(said.contains("note: tenant[0] (\"acme\").oauth[0].issuer") && said.contains("ends with '/'"), "{said}");
    let _ = std::fs::remove_dir_all(dir);
}
