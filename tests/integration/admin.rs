//! The operator's view (`/admin/api/...`) of real `taskgate serve` processes: who may use it,
//! what it lists (sessions, tasks, upstreams, the store), what it does (end a session, cancel a
//! task, restart an upstream's processes), that every action is audited, and that with Redis
//! any replica's view spans them all.

use serde_json::{json, Value};
use taskgate_store::testing::RedisServer;
use taskgate_testkit::{taskgate_bin, DemoUpstream, McpClient, ServedGateway};

use crate::support::within;

const TOKEN: &str = "ops-admin-token-0123456789";

/// An operator's client of one admin listener.
struct Admin {
    base: String,
    http: reqwest::Client,
}

impl Admin {
    fn of(gateway: &ServedGateway) -> Admin {
        Admin { base: gateway.admin.clone().expect("an admin listener"), http: reqwest::Client::new() }
    }

    async fn get(&self, path: &str) -> Value {
        let response = self.http.get(format!("{}{path}", self.base)).bearer_auth(TOKEN).send().await.unwrap();
        let status = response.status();
        let body: Value = response.json().await.unwrap();
        assert_eq!(status, 200, "GET {path}: {body}");
        body
    }

    async fn post(&self, path: &str) -> (u16, Value) {
        let response = self.http.post(format!("{}{path}", self.base)).bearer_auth(TOKEN).send().await.unwrap();
        (response.status().as_u16(), response.json().await.unwrap())
    }

    /// Asks `path` until `done` holds of the answer (bounded).
    async fn until(&self, path: &str, done: impl Fn(&Value) -> bool) -> Value {
        within(async {
            let mut tick = tokio::time::interval(std::time::Duration::from_millis(50));
            loop {
                tick.tick().await;
                let body = self.get(path).await;
                if done(&body) {
                    return body;
                }
            }
        })
        .await
    }
}

/// A configuration with an admin listener, one operator, the demo upstream over HTTP
/// (`demo`) and as a stdio process (`local`, marked by `mark` in its environment); the file
/// store in `dir` unless `store` says otherwise.
fn config(dir: &std::path::Path, demo: &DemoUpstream, mark: &str, store: &str) -> std::path::PathBuf {
    let file = dir.join("taskgate.toml");
    let own = format!("[store]\npath = \"{}\"", dir.join("data").display());
    let store = if store.is_empty() { own.as_str() } else { store };
    let hash = taskgate_core::tenants::hash_key(TOKEN);
    std::fs::write(
        &file,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n[logging]\nlevel = \"info\"\n{store}\n\
             [admin]\nrefresh_ms = 100\n[[admin.key]]\nname = \"ops\"\nsha256 = \"{hash}\"\n\
             [[upstream]]\nname = \"demo\"\ntransport = \"http\"\nurl = \"{}\"\n\
             [[upstream]]\nname = \"local\"\ntransport = \"stdio\"\ncommand = \"{}\"\nargs = [\"demo-upstream\", \"--stdio\"]\n\
             env = {{ TASKGATE_TEST_MARK = \"{mark}\" }}\n",
            demo.http.url,
            taskgate_bin().display()
        ),
    )
    .unwrap();
    file
}

/// The stdio processes of `gateway` carrying `mark`.
fn marked_children(gateway: &ServedGateway, mark: &str) -> Vec<u32> {
    let wanted = format!("TASKGATE_TEST_MARK={mark}");
    gateway
        .children()
        .into_iter()
        .filter(|pid| {
            let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            environ.split(|b| *b == 0).any(|v| v == wanted.as_bytes())
        })
        .collect()
}

#[actix_rt::test]
async fn only_an_operator_reaches_the_view_and_only_on_the_admin_listener() {
    let demo = DemoUpstream::start();
    let dir = tempfile::tempdir().unwrap();
    let gateway = ServedGateway::start(&config(dir.path(), &demo, "auth", "")).await;
    let admin = gateway.admin.clone().unwrap();
    let http = reqwest::Client::new();
    let url = format!("{admin}/admin/api/sessions");
    // No credentials: 401 with the Basic challenge a browser answers.
    let none = http.get(&url).send().await.unwrap();
    assert_eq!(none.status(), 401);
    assert!(none.headers()["www-authenticate"].to_str().unwrap().starts_with("Basic realm=\"taskgate admin\""));
    for refused in [
        http.get(&url).bearer_auth("wrong").send().await.unwrap(),
        http.get(&url).basic_auth("mallory", Some(TOKEN)).send().await.unwrap(),
        http.get(&url).header("authorization", "Basic !!!").send().await.unwrap(),
    ] {
        assert_eq!(refused.status(), 401);
    }
    assert_eq!(http.get(&url).basic_auth("ops", Some(TOKEN)).send().await.unwrap().status(), 200);
    assert_eq!(http.get(&url).bearer_auth(TOKEN).send().await.unwrap().status(), 200);
    // The main listener has no admin view.
    let main = gateway.url.replace("/mcp", "/admin/api/sessions");
    assert_eq!(http.get(&main).bearer_auth(TOKEN).send().await.unwrap().status(), 404);
    // A change another site asks a browser to make is refused, with valid credentials.
    let change = format!("{admin}/admin/api/upstreams/local/restart");
    let forged = http.post(&change).basic_auth("ops", Some(TOKEN)).header("origin", "http://evil.example").send();
    assert_eq!(forged.await.unwrap().status(), 403);
    let cross = http.post(&change).basic_auth("ops", Some(TOKEN)).header("sec-fetch-site", "cross-site").send();
    assert_eq!(cross.await.unwrap().status(), 403);
    let host = admin.trim_start_matches("http://");
    let same = http.post(&change).basic_auth("ops", Some(TOKEN)).header("origin", format!("http://{host}")).send();
    assert_eq!(same.await.unwrap().status(), 200);
    // Bad queries are 400 with a reason.
    let bad = http.get(format!("{admin}/admin/api/tasks?status=sleeping")).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(bad.status(), 400);
    let bad = http.get(format!("{admin}/admin/api/tasks?cursor=%%%")).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(bad.status(), 400);
}

#[actix_rt::test]
async fn an_operator_lists_sessions_tasks_upstreams_and_the_store_and_acts_on_them() {
    let demo = DemoUpstream::start();
    let dir = tempfile::tempdir().unwrap();
    let mut gateway = ServedGateway::start(&config(dir.path(), &demo, "acts", "")).await;
    let admin = Admin::of(&gateway);
    let mut c = McpClient::new(&gateway.url);
    c.initialize().await;
    // A call at the stdio upstream starts its process; a task waits at gates, reporting progress.
    assert!(c.call("local__echo", json!({"text": "hi"})).await.is_ok());
    let created = c
        .request(
            "tools/call",
            Some(json!({"name": "demo__slow", "arguments": {"steps": 3, "gate": "admin"}, "task": {}, "_meta": {"progressToken": "t"}})),
        )
        .await
        .outcome()
        .unwrap();
    let task = created["task"]["taskId"].as_str().unwrap().to_owned();

    let sessions = admin.get("/admin/api/sessions").await;
    let session = &sessions["sessions"][0];
    assert_eq!(sessions["sessions"].as_array().unwrap().len(), 1, "{sessions}");
    assert_eq!(session["sessionId"], c.session.clone().unwrap());
    assert_eq!((session["tenant"].as_str(), session["principal"].as_str()), (Some("anonymous"), Some("anonymous")));
    assert_eq!(session["client"]["name"], "taskgate-tests");
    assert_eq!(
        (session["protocolVersion"].as_str(), session["servedHere"].as_bool()),
        (Some("2025-11-25"), Some(true))
    );
    assert_eq!(session["processes"], 1, "{session}");
    let held: Vec<&str> =
        session["upstreamSessions"].as_array().unwrap().iter().map(|u| u["upstream"].as_str().unwrap()).collect();
    assert!(held.contains(&"local"), "{session}");
    assert!(admin.get("/admin/api/sessions?tenant=nobody").await["sessions"].as_array().unwrap().is_empty());

    // The task's progress shows as it moves.
    demo.demo.release("admin-1");
    let at_one = |body: &Value| body["tasks"][0]["progress"]["progress"].as_f64() == Some(1.0);
    let tasks = admin.until("/admin/api/tasks?status=working", at_one).await;
    let listed = &tasks["tasks"][0];
    assert_eq!((listed["taskId"].as_str(), listed["tool"].as_str()), (Some(task.as_str()), Some("slow")));
    assert_eq!((listed["upstream"].as_str(), listed["progress"]["total"].as_f64()), (Some("demo"), Some(3.0)));
    demo.demo.release("admin-2");
    admin
        .until("/admin/api/tasks?status=working", |b| b["tasks"][0]["progress"]["progress"].as_f64() == Some(2.0))
        .await;
    for query in ["?status=completed", "?tenant=nobody", "?upstream=local", "?principal=nobody"] {
        assert!(
            admin.get(&format!("/admin/api/tasks{query}")).await["tasks"].as_array().unwrap().is_empty(),
            "{query}"
        );
    }

    let upstreams = admin.get("/admin/api/upstreams").await;
    let local = upstreams["upstreams"].as_array().unwrap().iter().find(|u| u["name"] == "local").unwrap().clone();
    // The catalog's own session has a process too.
    assert_eq!((local["transport"].as_str(), local["processes"].as_u64()), (Some("stdio"), Some(2)), "{local}");
    assert_eq!(local["sessions"]["own"], 2, "{local}");
    assert_eq!(local["reachable"], true);
    let store = admin.get("/admin/api/store").await;
    assert_eq!(
        (store["reachable"].as_bool(), store["store"]["backend"].as_str()),
        (Some(true), Some("file")),
        "{store}"
    );
    assert_eq!(store["store"]["tasks"], 1);

    // Cancel the task: the client sees it cancelled.
    let (status, cancelled) = admin.post(&format!("/admin/api/tasks/{task}/cancel")).await;
    assert_eq!((status, cancelled["status"].as_str()), (200, Some("cancelled")), "{cancelled}");
    let seen = c.request("tasks/get", Some(json!({"taskId": task}))).await.outcome().unwrap();
    assert_eq!(seen["status"], "cancelled");
    let (status, again) = admin.post(&format!("/admin/api/tasks/{task}/cancel")).await;
    assert_eq!(status, 400, "a terminal task is not cancelled again: {again}");
    assert_eq!(admin.post("/admin/api/tasks/no-such-task/cancel").await.0, 404);

    // Restart the stdio upstream's process: a new one serves the next call.
    let before = marked_children(&gateway, "acts");
    assert_eq!(before.len(), 2);
    let (status, restarted) = admin.post("/admin/api/upstreams/local/restart").await;
    assert_eq!((status, restarted["stopping"].as_u64()), (200, Some(2)), "{restarted}");
    admin
        .until("/admin/api/upstreams", |b| {
            b["upstreams"].as_array().unwrap().iter().any(|u| u["name"] == "local" && u["processes"] == 0)
        })
        .await;
    assert!(c.call("local__echo", json!({"text": "again"})).await.is_ok());
    let after = marked_children(&gateway, "acts");
    assert!(!after.is_empty() && after.iter().all(|pid| !before.contains(pid)), "{before:?} then {after:?}");
    assert_eq!(admin.post("/admin/api/upstreams/demo/restart").await.0, 400, "an HTTP upstream has no processes");
    assert_eq!(admin.post("/admin/api/upstreams/nothing/restart").await.0, 400);

    // End the session: its client's next request finds none.
    let id = c.session.clone().unwrap();
    let (status, ended) = admin.post(&format!("/admin/api/sessions/{id}/end")).await;
    assert_eq!((status, ended["ended"].as_bool()), (200, Some(true)));
    assert_eq!(c.request("tools/list", None).await.status, 404);
    assert_eq!(admin.post(&format!("/admin/api/sessions/{id}/end")).await.0, 404);

    // Every action is in the audit trail, with the operator's name.
    for action in ["cancel_task", "restart_upstream", "end_session"] {
        let line = gateway.log_line(&format!("action=\"{action}\"")).await;
        assert!(line.contains("taskgate::audit") && line.contains("operator=ops"), "{line}");
    }
}

/// Listing pages meet every task once.
#[actix_rt::test]
async fn task_pages_follow_their_cursor_to_the_end() {
    let demo = DemoUpstream::start();
    let dir = tempfile::tempdir().unwrap();
    let gateway = ServedGateway::start(&config(dir.path(), &demo, "pages", "")).await;
    let admin = Admin::of(&gateway);
    let mut c = McpClient::new(&gateway.url);
    c.initialize().await;
    let mut created = Vec::new();
    for i in 0..7 {
        created.push(crate::support::create(&mut c, "demo__echo", json!({"text": format!("{i}")})).await);
    }
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let query = match &cursor {
            Some(c) => format!("/admin/api/tasks?limit=3&cursor={c}"),
            None => "/admin/api/tasks?limit=3".to_owned(),
        };
        let page = admin.get(&query).await;
        assert!(page["tasks"].as_array().unwrap().len() <= 3);
        seen.extend(page["tasks"].as_array().unwrap().iter().map(|t| t["taskId"].as_str().unwrap().to_owned()));
        match page["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    created.reverse();
    assert_eq!(seen, created, "newest first, each once");
}

/// With Redis, any replica's view spans them all: it lists another replica's session and
/// task, and ends, cancels and restarts there.
#[actix_rt::test]
async fn with_redis_any_replica_sees_and_acts_on_every_replica() {
    let redis = RedisServer::start();
    let demo = DemoUpstream::start();
    let dir = tempfile::tempdir().unwrap();
    let store = format!("[store]\nbackend = \"redis\"\nurl = \"{}\"\nkey_prefix = \"admin:\"", redis.url);
    let file = config(dir.path(), &demo, "replicas", &store);
    let a = ServedGateway::start(&file).await;
    let b = ServedGateway::start(&file).await;
    let (admin_a, admin_b) = (Admin::of(&a), Admin::of(&b));
    let mut c = McpClient::new(&a.url);
    c.initialize().await;
    assert!(c.call("local__echo", json!({"text": "hi"})).await.is_ok());
    let task = crate::support::create(&mut c, "demo__wait", json!({"gate": "never"})).await;

    // B lists A's session (from its record) and A's task (from the store).
    let sessions = admin_b.get("/admin/api/sessions").await;
    let session = &sessions["sessions"][0];
    assert_eq!((session["sessionId"].as_str(), session["servedHere"].as_bool()), (c.session.as_deref(), Some(false)));
    assert_eq!(session["client"]["name"], "taskgate-tests");
    let tasks = admin_b.get("/admin/api/tasks").await;
    assert_eq!(tasks["tasks"][0]["taskId"], task);
    assert_eq!(tasks["tasks"][0]["status"], "working");
    let store = admin_b.get("/admin/api/store").await;
    assert_eq!(store["store"]["backend"], "redis");
    assert_eq!(store["store"]["leases"]["held"], 1, "{store}");
    let a_replica = admin_a.get("/admin/api/store").await["replica"].clone();
    assert_eq!(tasks["tasks"][0]["replica"], a_replica, "the task's owner replica");

    // B cancels A's task: the upstream call stops at A.
    let (status, cancelled) = admin_b.post(&format!("/admin/api/tasks/{task}/cancel")).await;
    assert_eq!((status, cancelled["status"].as_str()), (200, Some("cancelled")), "{cancelled}");
    within(demo.demo.wait_in_flight(|n| *n == 0)).await;

    // B restarts the stdio upstream: A's process stops too.
    assert!(!marked_children(&a, "replicas").is_empty());
    assert_eq!(admin_b.post("/admin/api/upstreams/local/restart").await.0, 200);
    admin_a
        .until("/admin/api/upstreams", |b| {
            b["upstreams"].as_array().unwrap().iter().any(|u| u["name"] == "local" && u["processes"] == 0)
        })
        .await;

    // B ends A's session: A's client finds it gone.
    let id = c.session.clone().unwrap();
    assert_eq!(admin_b.post(&format!("/admin/api/sessions/{id}/end")).await.0, 200);
    admin_a.until("/admin/api/sessions", |b| b["sessions"].as_array().unwrap().is_empty()).await;
    assert_eq!(c.request("tools/list", None).await.status, 404);
}

/// The admin page in headless Chromium: signed in with the operator's Basic credentials, it
/// shows a task's progress bar move as the task goes on, then the task completed, with the
/// sessions per tenant and the upstreams' health, all without being loaded again (SSE). The
/// screenshots it takes are the README's.
#[actix_rt::test]
async fn the_admin_page_in_a_browser_follows_a_task_to_its_end() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

    // Its tasks native: the page shows what the task says it is doing.
    let demo = DemoUpstream::start_with_tasks();
    let dir = tempfile::tempdir().unwrap();
    let gateway = ServedGateway::start(&config(dir.path(), &demo, "page", "")).await;
    let mut c = McpClient::new(&gateway.url);
    c.initialize().await;
    crate::support::create(&mut c, "demo__slow", json!({"ms": 1})).await;
    let task = c
        .request(
            "tools/call",
            Some(json!({"name": "demo__slow", "arguments": {"steps": 3, "gate": "page"}, "task": {}, "_meta": {"progressToken": "p"}})),
        )
        .await
        .outcome()
        .unwrap()["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    demo.demo.release("page-1");
    // The native task's own status message, once a poll has brought it.
    let said_by_task = |tasks: &Value| {
        tasks["tasks"].as_array().is_some_and(|all| {
            all.iter().any(|t| t["taskId"] == task.as_str() && t["statusMessage"] == "The demo tool is running.")
        })
    };
    Admin::of(&gateway).until("/admin/api/tasks", said_by_task).await;

    let shots = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/screenshots");
    let shots = std::env::var_os("CARGO_TARGET_DIR").map_or(shots, |t| std::path::PathBuf::from(t).join("screenshots"));
    std::fs::create_dir_all(&shots).unwrap();
    let mut browser = tokio::process::Command::new("node")
        .arg("admin-page.mjs")
        .arg(gateway.admin.clone().unwrap())
        .arg(&task)
        .arg(&shots)
        .env("ADMIN_USER", "ops")
        .env("ADMIN_TOKEN", TOKEN)
        .current_dir(taskgate_testkit::interop_dir())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("node runs the browser");
    let mut stdin = browser.stdin.take().unwrap();
    let mut out = tokio::io::BufReader::new(browser.stdout.take().unwrap()).lines();
    async fn said(out: &mut tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>) -> Value {
        let line = within(out.next_line()).await.unwrap().expect("the browser script said something");
        serde_json::from_str::<Value>(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    }

    let working = said(&mut out).await;
    assert_eq!(working["seen"]["status"], "working", "{working}");
    assert_eq!((working["seen"]["value"].as_f64(), working["seen"]["max"].as_f64()), (Some(1.0), Some(3.0)));
    assert!(working["seen"]["label"].as_str().unwrap().contains("step 1 of 3"), "{working}");
    // What the native task says it is doing, beside its progress.
    assert_eq!(working["seen"]["message"], "The demo tool is running.", "{working}");
    assert_eq!(working["seen"]["cancel"], true, "a live task can be cancelled from the page");
    demo.demo.release("page-2");
    stdin.write_all(b"next\n").await.unwrap();

    let moved = said(&mut out).await;
    assert_eq!(moved["seen"]["value"].as_f64(), Some(2.0), "{moved}");
    demo.demo.release("page-3");
    stdin.write_all(b"next\n").await.unwrap();

    let done = said(&mut out).await;
    assert_eq!(done["completed"]["status"], "completed", "{done}");
    assert_eq!(done["completed"]["cancel"], false, "{done}");
    assert_eq!(done["reloaded"], false, "the page changed over its stream, not by loading again");
    assert_eq!(done["sessions"], json!([{"tenant": "anonymous", "here": 1}]), "{done}");
    let upstreams = done["upstreams"].as_array().unwrap();
    assert!(upstreams.iter().any(|u| u["name"] == "demo" && u["reachable"] == true && u["restart"] == false), "{done}");
    assert!(upstreams.iter().any(|u| u["name"] == "local" && u["restart"] == true), "{done}");
    assert!(done["store"].as_str().unwrap().contains("file"), "{done}");
    assert_eq!(done["state"], "live");
    drop(stdin);
    let status = within(browser.wait()).await.unwrap();
    assert!(status.success());
    assert!(shots.join("admin-page.png").metadata().unwrap().len() > 10_000);
}

/// Operators change with a reload: a new key works at once, a removed one no longer does, and
/// with no key left the view is gone.
#[actix_rt::test]
async fn a_reload_changes_who_may_use_the_view() {
    use taskgate_config::AdminKey;
    let demo = DemoUpstream::start();
    let mut config = taskgate_testkit::config_with(vec![demo.upstream("demo")]);
    config.server.admin_listen = Some("127.0.0.1:0".into());
    let key = |name: &str, token: &str| AdminKey { name: name.into(), sha256: taskgate_core::tenants::hash_key(token) };
    config.admin.keys = vec![key("ops", TOKEN)];
    let gw = taskgate_testkit::TestGateway::start(config.clone());
    let url = format!("http://{}/admin/api/store", gw.admin.unwrap());
    let http = reqwest::Client::new();
    let status = |token: &'static str| {
        let request = http.get(&url).bearer_auth(token);
        async move { request.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(status(TOKEN).await, 200);
    let mut next = config.clone();
    next.admin.keys = vec![key("ada", "ada-admin-token-987654321")];
    gw.gateway.reload(&next).unwrap();
    assert_eq!(status(TOKEN).await, 401, "a removed key is refused");
    assert_eq!(status("ada-admin-token-987654321").await, 200, "a new key is taken");
    next.admin.keys.clear();
    gw.gateway.reload(&next).unwrap();
    assert_eq!(status("ada-admin-token-987654321").await, 404, "no operator: no view");
}
