//! The `taskgate` command: check-config and the demo, run as a user would.

use std::process::Stdio;

use serde_json::json;
use taskgate_testkit::{taskgate_bin, McpClient};
use tokio::io::{AsyncBufReadExt, BufReader};

fn repo_file(path: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

#[test]
fn the_example_config_is_valid() {
    let out = std::process::Command::new(taskgate_bin())
        .args(["check-config"])
        .arg(repo_file("config/taskgate.toml"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok (2 upstreams)"));
    let config = taskgate_config::Config::load(&repo_file("config/taskgate.toml")).unwrap();
    assert_eq!(config.upstreams[1].name, "files");
    assert!(!config.upstreams[1].prefix);
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
    let _ = std::fs::remove_dir_all(dir);
}

/// Runs `taskgate demo --listen 127.0.0.1:0`; returns it and the URL it prints.
async fn start_demo() -> (tokio::process::Child, String) {
    let mut child = tokio::process::Command::new(taskgate_bin())
        .args(["demo", "--listen", "127.0.0.1:0"])
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
    let (mut child, url) = start_demo().await;
    assert!(url.starts_with("http://127.0.0.1:") && url.ends_with("/mcp"), "{url}");
    let mut c = McpClient::new(&url);
    c.initialize().await;
    let names = c.tool_names().await;
    assert!(names.contains(&"demo__add".to_string()) && names.contains(&"local__echo".to_string()), "{names:?}");
    assert_eq!(c.call("demo__add", json!({"a": 1, "b": 2})).await.unwrap()["structuredContent"]["sum"], 3.0);
    assert_eq!(c.call("local__echo", json!({"text": "stdio"})).await.unwrap()["content"][0]["text"], "stdio");
    assert_eq!(c.call("demo__fail", json!({})).await.unwrap()["isError"], true);
    child.kill().await.unwrap();
}

#[actix_rt::test]
async fn the_typescript_sdk_client_works_against_the_demo() {
    let (mut child, url) = start_demo().await;
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
