//! `taskgate call` and `taskgate tasks`, the command-line MCP client, as a person runs them:
//! the real binary against a real gateway (API keys, and OAuth client credentials from a real
//! authorization server), against a third-party server (`server-everything`), in both
//! revisions, with its progress bar drawn on a pseudo-terminal and Ctrl-C sent as SIGINT.

use std::process::Stdio;

use serde_json::{json, Value};
use taskgate_testkit::{taskgate_bin, DemoUpstream, McpClient, ServedGateway};

use crate::support::within;

const KEY: &str = "acme-cli-key-000000001";

/// What a finished command printed and how it ended.
struct Ran {
    code: i32,
    stdout: String,
    stderr: String,
}

async fn taskgate(args: &[&str], env: &[(&str, &str)]) -> Ran {
    let out = tokio::process::Command::new(taskgate_bin())
        .args(args)
        .env_remove("TASKGATE_TOKEN")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = within(out).await.unwrap();
    Ran {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A served gateway with one tenant and its API key, in front of the demo over HTTP.
async fn gateway(demo: &DemoUpstream, dir: &std::path::Path) -> ServedGateway {
    let file = dir.join("taskgate.toml");
    std::fs::write(
        &file,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n[store]\npath = \"{}\"\n\
             [[upstream]]\nname = \"demo\"\ntransport = \"http\"\nurl = \"{}\"\n\
             [[tenant]]\nid = \"acme\"\n[[tenant.api_key]]\nprincipal = \"ada\"\nsha256 = \"{}\"\n",
            dir.join("data").display(),
            demo.http.url,
            taskgate_core::tenants::hash_key(KEY)
        ),
    )
    .unwrap();
    ServedGateway::start(&file).await
}

#[actix_rt::test]
async fn a_call_prints_its_result_and_its_progress_in_both_revisions() {
    let demo = DemoUpstream::start();
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(&demo, dir.path()).await;
    for revision in ["2025-11-25", "2026-07-28", "auto"] {
        let ran = taskgate(
            &[
                "call",
                &gw.url,
                "demo__slow",
                "--arg",
                "ms=450",
                "--arg",
                "steps=3",
                "--bearer",
                KEY,
                "--revision",
                revision,
            ],
            &[],
        )
        .await;
        assert_eq!(ran.code, 0, "{revision}: {}", ran.stderr);
        assert_eq!(ran.stdout.trim(), "slept 450 ms", "{revision}");
        // Not a terminal: one line per progress notification (150 ms apart: none coalesced).
        for step in 1..=3 {
            assert!(ran.stderr.contains(&format!("progress {step}/3 step {step} of 3")), "{revision}: {}", ran.stderr);
        }
    }
    // Arguments as JSON, the result as JSON, a tool's error as exit status 1.
    let ran = taskgate(
        &["call", &gw.url, "demo__echo", "--arguments", r#"{"text": "typed"}"#, "--json", "--bearer", KEY],
        &[],
    )
    .await;
    let result: Value = serde_json::from_str(&ran.stdout).unwrap();
    assert_eq!(result["content"][0]["text"], "typed");
    let ran = taskgate(&["call", &gw.url, "demo__fail", "--arg", "message=broken", "--bearer", KEY], &[]).await;
    assert_eq!((ran.code, ran.stdout.trim()), (1, "broken"));
    // The token from the environment; without one, a clear refusal.
    let ran = taskgate(&["call", &gw.url, "demo__echo", "--arg", "text=env"], &[("TASKGATE_TOKEN", KEY)]).await;
    assert_eq!((ran.code, ran.stdout.trim()), (0, "env"), "{}", ran.stderr);
    let ran = taskgate(&["call", &gw.url, "demo__echo", "--arg", "text=x"], &[]).await;
    assert_eq!(ran.code, 1);
    assert!(ran.stderr.contains("requires authorization") && ran.stderr.contains("--bearer"), "{}", ran.stderr);
    let ran = taskgate(&["call", &gw.url, "demo__echo", "--arg", "novalue", "--bearer", KEY], &[]).await;
    assert!(ran.code != 0 && ran.stderr.contains("KEY=VALUE"), "{}", ran.stderr);
}

#[actix_rt::test]
async fn a_task_shows_its_status_and_progress_until_it_ends_and_the_tasks_commands_find_it() {
    let demo = DemoUpstream::start();
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(&demo, dir.path()).await;
    // 2025-11-25: status and progress; 2026-07-28: status (its tasks carry no progress).
    for revision in ["2025-11-25", "2026-07-28"] {
        let ran = taskgate(
            &[
                "call",
                &gw.url,
                "demo__slow",
                "--arg",
                "ms=30",
                "--arg",
                "steps=2",
                "--task",
                "--bearer",
                KEY,
                "--revision",
                revision,
            ],
            &[],
        )
        .await;
        assert_eq!((ran.code, ran.stdout.trim()), (0, "slept 30 ms"), "{revision}: {}", ran.stderr);
        assert!(ran.stderr.contains(" working"), "{revision}: {}", ran.stderr);
        if revision == "2025-11-25" {
            assert!(ran.stderr.contains("progress 2/2"), "{}", ran.stderr);
        }
    }
    // A task waiting at a gate: listed, shown, cancelled; another's result waited for.
    let mut c = McpClient::with_bearer(&gw.url, KEY);
    c.initialize().await;
    let waiting = crate::support::create(&mut c, "demo__wait", json!({"gate": "cli"})).await;
    let listed = taskgate(&["tasks", "list", &gw.url, "--bearer", KEY], &[]).await;
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    let line = listed.stdout.lines().find(|l| l.starts_with(&waiting)).unwrap_or_else(|| panic!("{}", listed.stdout));
    assert!(line.contains("working"), "{line}");
    assert_eq!(listed.stdout.lines().count(), 3, "the two tasks before and this one: {}", listed.stdout);
    let got = taskgate(&["tasks", "get", &gw.url, &waiting, "--bearer", KEY, "--json"], &[]).await;
    assert_eq!(serde_json::from_str::<Value>(&got.stdout).unwrap()["status"], "working");
    let cancelled = taskgate(&["tasks", "cancel", &gw.url, &waiting, "--bearer", KEY], &[]).await;
    assert!(cancelled.stdout.contains("cancelled"), "{}", cancelled.stdout);
    within(demo.demo.wait_in_flight(|n| *n == 0)).await;
    let later = crate::support::create(&mut c, "demo__wait", json!({"gate": "cli-result"})).await;
    let result = tokio::spawn({
        let url = gw.url.clone();
        async move { taskgate(&["tasks", "result", &url, &later, "--bearer", KEY, "--revision", "2025-11-25"], &[]).await }
    });
    within(demo.demo.wait_in_flight(|n| *n == 1)).await;
    demo.demo.release("cli-result");
    let result = result.await.unwrap();
    assert_eq!((result.code, result.stdout.trim()), (0, "gate cli-result opened"), "{}", result.stderr);
    let unknown = taskgate(&["tasks", "get", &gw.url, "no-such-task", "--bearer", KEY], &[]).await;
    assert_eq!(unknown.code, 1);
    assert!(unknown.stderr.contains("-32602"), "{}", unknown.stderr);
    // A task followed by `call --task` and cancelled elsewhere: said so, in both revisions.
    for (n, revision) in ["2026-07-28", "2025-11-25"].into_iter().enumerate() {
        let gate = format!("cancelled-elsewhere-{n}");
        let args = [
            "call",
            &gw.url,
            "demo__wait",
            "--arg",
            &format!("gate={gate}"),
            "--task",
            "--bearer",
            KEY,
            "--revision",
            revision,
        ]
        .map(str::to_owned);
        let followed = tokio::spawn(async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            taskgate(&args, &[]).await
        });
        within(demo.demo.wait_in_flight(|n| *n == 1)).await;
        let tasks = c.request("tasks/list", None).await.outcome().unwrap();
        let working = tasks["tasks"].as_array().unwrap().iter().find(|t| t["status"] == "working").unwrap()["taskId"]
            .as_str()
            .unwrap()
            .to_owned();
        c.request("tasks/cancel", Some(json!({ "taskId": working }))).await.outcome().unwrap();
        let ran = followed.await.unwrap();
        assert_eq!(ran.code, 1, "{revision}: {}", ran.stderr);
        assert!(ran.stderr.contains("was cancelled") && !ran.stderr.contains("-32603"), "{revision}: {}", ran.stderr);
        within(demo.demo.wait_in_flight(|n| *n == 0)).await;
    }
}

/// Sends SIGINT to a running command, as Ctrl-C at a terminal does.
async fn interrupt(child: &tokio::process::Child) {
    // SAFETY: kill only sends a signal to our own child.
    unsafe { libc::kill(child.id().unwrap() as libc::pid_t, libc::SIGINT) };
}

#[actix_rt::test]
async fn ctrl_c_cancels_the_call_or_the_task() {
    let demo = DemoUpstream::start();
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(&demo, dir.path()).await;
    for task in [false, true] {
        let mut args =
            vec!["call", &gw.url, "demo__wait", "--arg", "gate=never", "--bearer", KEY, "--revision", "2025-11-25"];
        if task {
            args.push("--task");
        }
        let mut child = tokio::process::Command::new(taskgate_bin())
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        within(demo.demo.wait_in_flight(|n| *n == 1)).await;
        if task {
            // The task exists (and is followed) before Ctrl-C comes.
            let mut c = McpClient::with_bearer(&gw.url, KEY);
            c.initialize().await;
            within(async {
                loop {
                    let page = c.request("tasks/list", None).await.outcome().unwrap();
                    if page["tasks"].as_array().unwrap().iter().any(|t| t["status"] == "working") {
                        break;
                    }
                }
            })
            .await;
        }
        interrupt(&child).await;
        let status = within(child.wait()).await.unwrap();
        assert_eq!(status.code(), Some(130), "task: {task}");
        // The upstream call stops either way: the call's cancellation, or the task's.
        within(demo.demo.wait_in_flight(|n| *n == 0)).await;
        let mut stderr = String::new();
        tokio::io::AsyncReadExt::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).await.unwrap();
        assert!(stderr.contains("cancelled"), "task: {task}: {stderr}");
    }
    let listed = taskgate(&["tasks", "list", &gw.url, "--bearer", KEY, "--json"], &[]).await;
    let tasks: Value = serde_json::from_str(&listed.stdout).unwrap();
    assert_eq!(tasks[0]["status"], "cancelled", "{tasks}");
}

/// On a terminal the progress is a bar (indicatif), drawn and then cleared for the result.
#[actix_rt::test]
async fn on_a_terminal_progress_is_a_bar() {
    let demo = DemoUpstream::start();
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(&demo, dir.path()).await;
    // script(1) runs the command on a pseudo-terminal and copies what it draws.
    let command =
        format!("{} call {} demo__slow --arg ms=600 --arg steps=3 --bearer {KEY}", taskgate_bin().display(), gw.url);
    let out =
        tokio::process::Command::new("script").args(["-qefc", &command, "/dev/null"]).stdin(Stdio::null()).output();
    let out = within(out).await.unwrap();
    let drawn = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{drawn}");
    assert!(drawn.contains("slept 600 ms"), "{drawn}");
    assert!(drawn.contains("[") && drawn.contains("%") && drawn.contains("=>"), "no bar drawn: {drawn:?}");
    assert!(drawn.contains("step 1 of 3") && !drawn.contains("progress 1/3"), "{drawn:?}");
}

/// A third-party server: server-everything's progress and its native task, in both directions
/// of revision negotiation (it speaks 2025-11-25: auto finds that).
#[actix_rt::test]
async fn against_server_everything_progress_and_a_native_task() {
    let (_server, url, _) = crate::interop::start_node_server_with_output("everything-server.mjs").await;
    let ran =
        taskgate(&["call", &url, "trigger-long-running-operation", "--arg", "duration=0.3", "--arg", "steps=3"], &[])
            .await;
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert!(ran.stdout.contains("Long running operation completed"), "{}", ran.stdout);
    assert!(ran.stderr.contains("progress 3/3"), "{}", ran.stderr);
    let ran = taskgate(&["call", &url, "simulate-research-query", "--arg", "topic=gateways", "--task"], &[]).await;
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert!(ran.stderr.contains("Gathering sources"), "its status messages: {}", ran.stderr);
    assert!(ran.stdout.contains("gateways"), "{}", ran.stdout);
}

/// OAuth client credentials: the token endpoint found from the gateway's protected resource
/// metadata, the token asked of a real authorization server (oidc-provider).
#[actix_rt::test]
async fn oauth_client_credentials_find_the_token_endpoint_and_call() {
    let auth = crate::oauth::AuthServer::start();
    let setup = crate::oauth::gateway_env(&auth.issuer, "", &[]).await;
    let args = [
        "call",
        &setup.public_url,
        "demo__echo",
        "--arg",
        "text=oauth",
        "--client-id",
        "gateway-test",
        "--scope",
        "mcp",
    ];
    let ran = taskgate(&args, &[("TASKGATE_CLIENT_SECRET", "secret-1")]).await;
    assert_eq!((ran.code, ran.stdout.trim()), (0, "oauth"), "{}", ran.stderr);
    // Without --scope: the scopes the server's metadata lists (it requires `mcp`).
    let ran = taskgate(&args[..7], &[("TASKGATE_CLIENT_SECRET", "secret-1")]).await;
    assert_eq!((ran.code, ran.stdout.trim()), (0, "oauth"), "{}", ran.stderr);
    // A wrong secret is refused by the authorization server, and said so.
    let ran = taskgate(&args, &[("TASKGATE_CLIENT_SECRET", "wrong")]).await;
    assert_eq!(ran.code, 1);
    assert!(ran.stderr.contains("refused the client id or its secret"), "{}", ran.stderr);
    assert!(!ran.stderr.contains("wrong"), "the secret is never printed: {}", ran.stderr);
    // A bearer token it does not take: the server's own reason, not a request for one.
    let ran = taskgate(&["call", &setup.public_url, "demo__echo", "--bearer", "not-a-token-it-takes"], &[]).await;
    assert_eq!(ran.code, 1);
    assert!(
        ran.stderr.contains("refused the credentials")
            && ran.stderr.contains("not valid")
            && !ran.stderr.contains("give --bearer"),
        "{}",
        ran.stderr
    );
}

/// A server whose authorization server metadata names another issuer (RFC 8414 section 3.3)
/// never gets the client's secret: the CLI refuses before asking for a token.
#[actix_rt::test]
async fn metadata_naming_another_issuer_is_not_trusted_with_the_secret() {
    use actix_web::{web, App, HttpResponse, HttpServer};
    let asked = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (base_for, asked_for) = (base.clone(), asked.clone());
    let server = HttpServer::new(move || {
        let (base, asked) = (base_for.clone(), asked_for.clone());
        App::new()
            .route(
                "/.well-known/oauth-protected-resource/mcp",
                web::get().to({
                    let base = base.clone();
                    move || {
                        let body =
                            json!({"resource": format!("{base}/mcp"), "authorization_servers": [format!("{base}/as")]});
                        async move { HttpResponse::Ok().json(body) }
                    }
                }),
            )
            .route(
                "/.well-known/oauth-authorization-server/as",
                web::get().to(move || {
                    let body = json!({"issuer": "http://elsewhere.example", "token_endpoint": format!("{base}/token")});
                    async move { HttpResponse::Ok().json(body) }
                }),
            )
            .route(
                "/token",
                web::post().to(move || {
                    asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    async { HttpResponse::Ok().json(json!({"access_token": "t", "token_type": "Bearer"})) }
                }),
            )
    })
    .workers(1)
    .listen(listener)
    .unwrap()
    .run();
    let handle = server.handle();
    actix_rt::spawn(server);
    let url = format!("{base}/mcp");
    let ran =
        taskgate(&["call", &url, "echo", "--client-id", "cli"], &[("TASKGATE_CLIENT_SECRET", "s3cret-value")]).await;
    assert_eq!(ran.code, 1);
    assert!(ran.stderr.contains("not trusted with the client secret"), "{}", ran.stderr);
    assert!(!ran.stderr.contains("s3cret-value"));
    assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 0, "the token endpoint was never asked");
    handle.stop(true).await;
}

/// A server not on this machine never chooses where the client secret goes: without
/// --issuer or --token-url the CLI refuses before sending anything anywhere.
#[actix_rt::test]
async fn a_remote_server_never_chooses_where_the_client_secret_goes() {
    let ran = taskgate(
        &["call", "https://gw.example.invalid/mcp", "echo", "--client-id", "cli"],
        &[("TASKGATE_CLIENT_SECRET", "s3cret-value")],
    )
    .await;
    assert_eq!(ran.code, 1);
    assert!(ran.stderr.contains("--issuer"), "{}", ran.stderr);
    for token_url in ["http://127.0.0.1:1@evil.example/token", "http://as.example/token", "ftp://127.0.0.1/token"] {
        let ran = taskgate(
            &["call", "http://127.0.0.1:9/mcp", "echo", "--client-id", "cli", "--token-url", token_url],
            &[("TASKGATE_CLIENT_SECRET", "s3cret-value")],
        )
        .await;
        assert_eq!(ran.code, 1, "{token_url}");
        assert!(ran.stderr.contains("--token-url"), "{token_url}: {}", ran.stderr);
    }
}

/// --issuer names the authorization server: the one the server's metadata names is not
/// asked; and a redirect from the server's metadata is not followed.
#[actix_rt::test]
async fn the_issuer_named_is_the_one_asked_and_redirects_are_not_followed() {
    let (named, other) = (crate::oauth::AuthServer::start(), crate::oauth::AuthServer::start());
    // Through the gateway, which trusts the issuer named.
    let setup = crate::oauth::gateway_env(&named.issuer, "", &[]).await;
    let call = |url: &str, issuer: Option<&str>| {
        let mut args: Vec<String> =
            ["call", url, "demo__echo", "--arg", "text=named", "--client-id", "gateway-test", "--scope", "mcp"]
                .map(str::to_owned)
                .to_vec();
        if let Some(issuer) = issuer {
            args.extend(["--issuer".to_owned(), issuer.to_owned()]);
        }
        args
    };
    let run = |args: Vec<String>| async move {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        taskgate(&args, &[("TASKGATE_CLIENT_SECRET", "secret-1")]).await
    };
    let ran = run(call(&setup.public_url, Some(&named.issuer))).await;
    assert_eq!((ran.code, ran.stdout.trim()), (0, "named"), "{}", ran.stderr);
    // A server (on this machine) whose metadata names the other authorization server, first
    // redirecting its metadata elsewhere, then not.
    let followed = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let redirect = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let base = std::sync::Arc::new(std::sync::OnceLock::<String>::new());
    let (base_for, followed_for, redirect_for, other_issuer) =
        (base.clone(), followed.clone(), redirect.clone(), other.issuer.clone());
    let url = crate::support::raw_http_server(move |head, _| {
        let base = base_for.get().cloned().unwrap_or_default();
        let reply = |status: &str, more: &str, body: String| {
            crate::support::Answer::Reply(format!(
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{more}\r\n{body}",
                body.len()
            ))
        };
        if head.starts_with("get /.well-known/oauth-protected-resource/mcp ") {
            if redirect_for.load(std::sync::atomic::Ordering::SeqCst) {
                return reply("302 Found", &format!("location: {base}/elsewhere\r\n"), String::new());
            }
            let metadata = json!({"resource": format!("{base}/mcp"), "authorization_servers": [other_issuer]});
            return reply("200 OK", "", metadata.to_string());
        }
        if head.starts_with("get /elsewhere ") {
            followed_for.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            return reply("200 OK", "", json!({"authorization_servers": ["http://127.0.0.1:9"]}).to_string());
        }
        reply("404 Not Found", "", String::new())
    })
    .await;
    base.set(url.trim_end_matches("/mcp").to_owned()).unwrap();
    let ran = run(call(&url, None)).await;
    assert_eq!(ran.code, 1);
    assert!(ran.stderr.contains("302"), "{}", ran.stderr);
    assert_eq!(followed.load(std::sync::atomic::Ordering::SeqCst), 0, "the redirect was not followed");
    redirect.store(false, std::sync::atomic::Ordering::SeqCst);
    // --issuer given: the server's own choice is never asked for a token.
    let asked = named.tokens_asked().await;
    let _ = run(call(&url, Some(&named.issuer))).await;
    assert_eq!((named.tokens_asked().await, other.tokens_asked().await), (asked + 1, 0));
    // Without it, a server on this machine chooses: the other one is asked.
    let _ = run(call(&url, None)).await;
    assert_eq!(other.tokens_asked().await, 1, "the metadata's authorization server");
    setup.gw.kill().await;
}
