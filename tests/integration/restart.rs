//! Durable tasks across a crash: the real `taskgate serve` binary is killed with SIGKILL and
//! started again on the same data directory (ext-tasks: a task handle is returned only once the
//! task is durably created; basic/utilities/tasks: tasks are durable state machines).

use crate::support::{create, method, within};
use serde_json::json;
use taskgate_testkit::{stdio_demo_upstream, DemoUpstream, McpClient, ServedGateway};

use crate::interop::run_ts_client_with;

const ACME: &str = "acme-restart-key-000001";
const GLOBEX: &str = "globex-restart-key-00002";

/// A config with two tenants, a native-task HTTP upstream, a plain HTTP one and a stdio one,
/// and the file store in `data`.
fn config(native: &DemoUpstream, plain: &DemoUpstream, data: &std::path::Path) -> String {
    let stdio = stdio_demo_upstream("local");
    let mut text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nshutdown_grace_secs = 1\n[logging]\nlevel = \"info\"\n[store]\npath = {:?}\n\
         [[upstream]]\nname = \"native\"\ntransport = \"http\"\nurl = \"{}\"\n\
         [[upstream]]\nname = \"plain\"\ntransport = \"http\"\nurl = \"{}\"\n\
         [[upstream]]\nname = \"local\"\ntransport = \"stdio\"\ncommand = {:?}\nargs = [\"demo-upstream\", \"--stdio\"]\n",
        data.display().to_string(),
        native.http.url,
        plain.http.url,
        stdio.command.unwrap(),
    );
    for (tenant, key) in [("acme", ACME), ("globex", GLOBEX)] {
        let hash = taskgate_core::tenants::hash_key(key);
        text.push_str(&format!(
            "[[tenant]]\nid = \"{tenant}\"\n[[tenant.api_key]]\nprincipal = \"{tenant}-ci\"\nsha256 = \"{hash}\"\n"
        ));
    }
    text
}

/// The upstreams (in this process: they outlive the gateway) and the config file of a gateway
/// that is killed and started again on the same data.
struct Setup {
    native: DemoUpstream,
    plain: DemoUpstream,
    _dir: tempfile::TempDir,
    file: std::path::PathBuf,
}

fn setup() -> Setup {
    let native = DemoUpstream::start_with_tasks();
    let plain = DemoUpstream::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("taskgate.toml");
    std::fs::write(&file, config(&native, &plain, &dir.path().join("data"))).unwrap();
    Setup { native, plain, _dir: dir, file }
}

#[actix_rt::test]
async fn after_sigkill_finished_tasks_answer_as_before_native_ones_finish_and_the_rest_fail_saying_why() {
    let Setup { native, plain, _dir, file } = setup();
    let gw = ServedGateway::start(&file).await;
    let mut a = McpClient::with_bearer(&gw.url, ACME);
    a.initialize().await;
    let mut g = McpClient::with_bearer(&gw.url, GLOBEX);
    g.initialize().await;

    // Finished before the crash: a completed and a failed task, and one of another tenant.
    let done = create(&mut a, "plain__echo", json!({"text": "kept"})).await;
    let done_result = method(&mut a, "tasks/result", &done).await.unwrap();
    let failed = create(&mut a, "plain__fail", json!({})).await;
    method(&mut a, "tasks/result", &failed).await.unwrap();
    let theirs = create(&mut g, "plain__echo", json!({"text": "globex"})).await;
    method(&mut g, "tasks/result", &theirs).await.unwrap();
    // Running at the crash: a native task, a wrapped task on HTTP and one on stdio.
    let following = create(&mut a, "native__wait", json!({"gate": "after-restart"})).await;
    let wrapped = create(&mut a, "plain__wait", json!({"gate": "never"})).await;
    let on_stdio = create(&mut a, "local__wait", json!({"gate": "never"})).await;
    within(plain.demo.wait_in_flight(|n| *n == 1)).await;
    let before_done = method(&mut a, "tasks/get", &done).await.unwrap();
    let before_list = a.request("tasks/list", None).await.outcome().unwrap();
    assert_eq!(before_list["tasks"].as_array().unwrap().len(), 5);

    let old_session = a.session.clone();
    gw.kill().await;
    let gw = ServedGateway::start(&file).await;

    // The session died with the process: 404, and the client initializes again (basic/transports).
    let mut stale = McpClient::with_bearer(&gw.url, ACME);
    stale.session = old_session;
    stale.protocol_version = Some("2025-11-25".into());
    assert_eq!(stale.request("ping", None).await.status, reqwest::StatusCode::NOT_FOUND);
    let mut a = McpClient::with_bearer(&gw.url, ACME);
    a.initialize().await;

    // Terminal tasks answer exactly as before.
    assert_eq!(method(&mut a, "tasks/get", &done).await.unwrap(), before_done);
    assert_eq!(method(&mut a, "tasks/result", &done).await.unwrap(), done_result);
    assert_eq!(method(&mut a, "tasks/get", &failed).await.unwrap()["status"], "failed");

    // Wrapped tasks, on HTTP and stdio, died with the process: failed, saying so.
    for id in [&wrapped, &on_stdio] {
        let task = method(&mut a, "tasks/get", id).await.unwrap();
        assert_eq!(task["status"], "failed", "{task}");
        let message = task["statusMessage"].as_str().unwrap();
        assert!(message.contains("gateway restarted while the task ran"), "{message}");
        let error = method(&mut a, "tasks/result", id).await.unwrap_err();
        assert!(error.message.contains("gateway restarted"), "{}", error.message);
    }

    // The native task is followed again in its upstream session and finishes normally; a
    // waiter on it is released by its completion.
    assert_eq!(method(&mut a, "tasks/get", &following).await.unwrap()["status"], "working");
    let mut waiter = a.clone();
    let id = following.clone();
    let waiting = actix_rt::spawn(async move { method(&mut waiter, "tasks/result", &id).await });
    native.demo.release("after-restart");
    let result = within(waiting).await.unwrap().unwrap();
    assert_eq!(result["content"][0]["text"], "gate after-restart opened", "{result}");
    assert_eq!(result["_meta"]["io.modelcontextprotocol/related-task"]["taskId"], following.as_str());
    assert_eq!(method(&mut a, "tasks/get", &following).await.unwrap()["status"], "completed");

    // The same principal lists all its tasks; the other tenant still sees only its own.
    let listed = a.request("tasks/list", None).await.outcome().unwrap();
    let ids: Vec<&str> = listed["tasks"].as_array().unwrap().iter().map(|t| t["taskId"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 5, "{listed}");
    for id in [&done, &failed, &following, &wrapped, &on_stdio] {
        assert!(ids.contains(&id.as_str()), "{id} missing from {listed}");
    }
    let mut g = McpClient::with_bearer(&gw.url, GLOBEX);
    g.initialize().await;
    let theirs_listed = g.request("tasks/list", None).await.outcome().unwrap();
    assert_eq!(theirs_listed["tasks"].as_array().unwrap().len(), 1);
    assert_eq!(theirs_listed["tasks"][0]["taskId"], theirs.as_str());
    assert_eq!(
        method(&mut g, "tasks/get", &done).await.unwrap_err().message,
        "Failed to retrieve task: Task not found"
    );
    gw.kill().await;
}

/// A wrapped task running when the gateway is stopped (SIGTERM) ends with the gateway: after a
/// restart it reads `failed` saying the gateway shut down or restarted while it ran, not that its
/// upstream failed (stopping a stdio upstream's process is the gateway's doing).
#[actix_rt::test]
async fn after_sigterm_and_a_restart_a_task_cut_short_says_the_gateway_stopped_not_that_its_upstream_failed() {
    let Setup { native: _native, plain, _dir, file } = setup();
    let mut gw = ServedGateway::start(&file).await;
    let mut a = McpClient::with_bearer(&gw.url, ACME);
    a.initialize().await;
    let on_stdio = create(&mut a, "local__wait", json!({"gate": "never"})).await;
    let on_http = create(&mut a, "plain__wait", json!({"gate": "never"})).await;
    within(plain.demo.wait_in_flight(|n| *n == 1)).await;
    // The process's id is logged as a number.
    let started = gw.log_line("started stdio upstream process").await;
    assert!(started.contains("pid=") && !started.contains("Some("), "{started}");
    // A tasks/result waiter in flight when the grace runs out: told the gateway is shutting down.
    let mut waiter = a.request_stream("tasks/result", Some(json!({"taskId": on_stdio}))).await;
    gw.terminate();
    match within(waiter.next()).await.expect("an answer") {
        taskgate_protocol::Message::Error { error, .. } => {
            assert_eq!(error.data.as_ref().unwrap()["reason"], "shutting_down", "{error:?}");
        }
        other => panic!("expected the shutting-down error, got {other:?}"),
    }
    assert!(within(gw.exited()).await.success());
    let gw = ServedGateway::start(&file).await;
    let mut a = McpClient::with_bearer(&gw.url, ACME);
    a.initialize().await;
    for id in [&on_stdio, &on_http] {
        let task = method(&mut a, "tasks/get", id).await.unwrap();
        assert_eq!(task["status"], "failed", "{task}");
        let message = task["statusMessage"].as_str().unwrap();
        assert!(
            message.contains("The gateway shut down while the task ran")
                || message.contains("The gateway restarted while the task ran"),
            "{message}"
        );
        assert!(!message.contains("unavailable") && !message.contains("exited"), "{message}");
    }
    gw.kill().await;
}

#[actix_rt::test]
async fn a_data_directory_that_cannot_be_used_stops_the_start_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("taskgate.toml");
    // A file where the data directory should be.
    let blocked = dir.path().join("blocked");
    std::fs::write(&blocked, b"not a directory").unwrap();
    std::fs::write(
        &file,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n[store]\npath = {:?}\n",
            blocked.join("data").display().to_string()
        ),
    )
    .unwrap();
    let err = ServedGateway::try_start(&file).await.err().expect("the gateway refuses to start");
    assert!(err.contains("store.path") && err.contains("cannot create the data directory"), "{err}");

    // A corrupt database file.
    let data = dir.path().join("corrupt");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("tasks.redb"), vec![0x42; 8192]).unwrap();
    std::fs::write(
        &file,
        format!("[server]\nlisten = \"127.0.0.1:0\"\n[store]\npath = {:?}\n", data.display().to_string()),
    )
    .unwrap();
    let err = ServedGateway::try_start(&file).await.err().expect("the gateway refuses to start");
    assert!(err.contains("cannot open the task database") && err.contains("tasks.redb"), "{err}");

    // Two processes on one directory: the second is refused.
    let shared = dir.path().join("shared");
    std::fs::write(
        &file,
        format!("[server]\nlisten = \"127.0.0.1:0\"\n[store]\npath = {:?}\n", shared.display().to_string()),
    )
    .unwrap();
    let first = ServedGateway::start(&file).await;
    let err = ServedGateway::try_start(&file).await.err().expect("the second gateway refuses to start");
    assert!(err.contains("already open in another taskgate process"), "{err}");
    first.kill().await;
}

#[actix_rt::test]
async fn the_typescript_sdk_client_gets_its_task_results_from_a_new_connection_after_a_restart() {
    let Setup { native, _dir, file, .. } = setup();
    let gw = ServedGateway::start(&file).await;
    let created = run_ts_client_with("restart-client.mjs", &[&gw.url, ACME, "create"]).await;
    let id = |key: &str| created[key].as_str().unwrap_or_else(|| panic!("no {key} task in {created}")).to_owned();
    let (done, running) = (id("done"), id("running"));
    assert_eq!(created["doneResult"]["content"][0]["text"], "slept 5 ms", "{created}");
    within(native.demo.wait_in_flight(|n| *n == 1)).await;
    gw.kill().await;

    let gw = ServedGateway::start(&file).await;
    native.demo.release("ts-restart");
    let after = run_ts_client_with("restart-client.mjs", &[&gw.url, ACME, "results", &done, &running]).await;
    assert_eq!(after["done"]["content"][0]["text"], "slept 5 ms", "{after}");
    assert_eq!(after["running"]["content"][0]["text"], "gate ts-restart opened", "{after}");
    let listed = after["listed"].as_array().unwrap();
    assert_eq!(listed.len(), 2, "{after}");
    assert!(listed.iter().all(|t| t["status"] == "completed"), "{after}");
    gw.kill().await;
}

#[actix_rt::test]
async fn a_native_task_on_a_stdio_upstream_fails_after_a_restart_saying_its_process_ended() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("taskgate.toml");
    let script = taskgate_testkit::interop_dir().join("task-server.mjs");
    std::fs::write(
        &file,
        format!(
            "[store]\npath = {:?}\n[[upstream]]\nname = \"tsstdio\"\ntransport = \"stdio\"\ncommand = \"node\"\nargs = [{:?}, \"--stdio\"]\n",
            dir.path().join("data").display().to_string(),
            script.display().to_string()
        ),
    )
    .unwrap();
    let gw = ServedGateway::start(&file).await;
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    // The SDK server runs it natively; the gateway follows it under its own id.
    let id = create(&mut c, "tsstdio__delay", json!({"ms": 600_000})).await;
    assert_eq!(method(&mut c, "tasks/get", &id).await.unwrap()["status"], "working");
    gw.kill().await;

    let gw = ServedGateway::start(&file).await;
    let mut c = McpClient::new(&gw.url);
    c.initialize().await;
    let task = method(&mut c, "tasks/get", &id).await.unwrap();
    assert_eq!(task["status"], "failed", "{task}");
    let message = task["statusMessage"].as_str().unwrap();
    assert!(
        message.contains("stdio upstream 'tsstdio' ran it in a process that ended with that gateway process"),
        "{message}"
    );
    gw.kill().await;
}
