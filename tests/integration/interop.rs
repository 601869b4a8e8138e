//! Interop with the official TypeScript SDK (`@modelcontextprotocol/sdk`, pinned in
//! tests/interop/package.json): its client talks through the gateway to its server over
//! Streamable HTTP and over stdio, and to the demo upstream.

use std::process::Stdio;

use serde_json::Value;
use taskgate_config::UpstreamConfig;
use taskgate_testkit::{config_with, interop_dir, DemoUpstream, TestGateway};
use tokio::io::{AsyncBufReadExt, BufReader};

/// Starts `node server.mjs` on a free port and returns it with its MCP URL.
pub async fn start_ts_server() -> (tokio::process::Child, String) {
    start_node_server("server.mjs").await
}

/// Starts a TypeScript SDK server script that prints `{"port": N}`; returns it and its URL.
async fn start_node_server(script: &str) -> (tokio::process::Child, String) {
    let (child, url, _) = start_node_server_with_output(script).await;
    (child, url)
}

/// [`start_node_server`], with the lines the server prints after its port.
pub async fn start_node_server_with_output(
    script: &str,
) -> (tokio::process::Child, String, tokio::io::Lines<BufReader<tokio::process::ChildStdout>>) {
    start_node_server_with(script, &[]).await
}

/// [`start_node_server_with_output`], with environment variables for the server.
pub async fn start_node_server_with(
    script: &str,
    envs: &[(&str, &str)],
) -> (tokio::process::Child, String, tokio::io::Lines<BufReader<tokio::process::ChildStdout>>) {
    let mut child = tokio::process::Command::new("node")
        .arg(script)
        .envs(envs.iter().copied())
        .current_dir(interop_dir())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("node is installed");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next_line().await.unwrap().expect("the server prints its port");
    let port = serde_json::from_str::<Value>(&first).unwrap()["port"].as_u64().unwrap();
    (child, format!("http://127.0.0.1:{port}/mcp"), lines)
}

/// Runs `node client.mjs URL` and returns what it printed.
pub async fn run_ts_client(script: &str, url: &str) -> Value {
    run_ts_client_with(script, &[url]).await
}

/// Runs `node client.mjs ARGS…` and returns the JSON it printed last.
pub async fn run_ts_client_with(script: &str, args: &[&str]) -> Value {
    let mut command = tokio::process::Command::new("node");
    command.arg(script).args(args);
    run_client(command).await
}

/// Runs a client program in tests/interop (bounded in time) and returns the JSON it printed last.
pub async fn run_client(mut command: tokio::process::Command) -> Value {
    let run = command.current_dir(interop_dir()).kill_on_drop(true).output();
    let out =
        tokio::time::timeout(std::time::Duration::from_secs(60), run).await.expect("the client finished").unwrap();
    assert!(out.status.success(), "client failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("client output is not JSON ({e}): {stdout}"))
}

#[actix_rt::test]
async fn typescript_client_through_the_gateway_to_typescript_servers_over_http_and_stdio() {
    let (_server, ts_url) = start_ts_server().await;
    let demo = DemoUpstream::start();
    let stdio = UpstreamConfig::stdio(
        "tsstdio",
        "node",
        vec![interop_dir().join("server.mjs").display().to_string(), "--stdio".into()],
    );
    let mut config = config_with(vec![UpstreamConfig::http("ts", ts_url), stdio, demo.upstream("demo")]);
    config.progress.min_interval_ms = 0;
    let gw = TestGateway::start(config);
    let out = run_ts_client("client.mjs", &gw.url).await;

    assert_eq!(out["serverInfo"]["name"], "taskgate");
    let tools: Vec<&str> = out["tools"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    for expected in ["ts__greet", "ts__count", "tsstdio__greet", "tsstdio__boom", "demo__add"] {
        assert!(tools.contains(&expected), "{expected} missing from {tools:?}");
    }
    assert_eq!(out["greetHttp"]["content"][0]["text"], "Hello, gateway!");
    assert_eq!(out["greetStdio"]["content"][0]["text"], "Hello, stdio!");
    assert_eq!(out["demoAdd"]["structuredContent"]["sum"], 42.0);
    assert_eq!(out["count"]["structuredContent"]["n"], 3);
    assert_eq!(out["progress"], serde_json::json!([1, 2, 3]));
    assert_eq!(out["boom"]["isError"], true);
    // A tool the server does not list goes to it: the SDK server's own answer to an unknown
    // tool (a tool error naming it) reaches the client, as directly.
    assert_eq!(out["unknown"]["isError"], true, "{}", out["unknown"]);
    assert!(out["unknown"]["content"][0]["text"].as_str().unwrap().contains("nope"), "{}", out["unknown"]);
    // A name no upstream's prefix claims is unknown to the gateway (several unprefixed
    // upstreams: none is its owner).
    assert_eq!(out["unclaimed"]["code"], -32602, "{}", out["unclaimed"]);
    assert!(
        out["unclaimed"]["message"].as_str().unwrap().contains("Unknown tool: nobody__nope"),
        "{}",
        out["unclaimed"]
    );
}

/// Starts `node task-server.mjs` (native tasks) on a free port and returns it with its URL.
pub async fn start_ts_task_server() -> (tokio::process::Child, String) {
    start_node_server("task-server.mjs").await
}

#[actix_rt::test]
async fn typescript_task_client_through_the_gateway_to_native_and_wrapped_tasks() {
    let (_plain, plain_url) = start_ts_server().await;
    let (_tasks, tasks_url) = start_ts_task_server().await;
    let mut config =
        config_with(vec![UpstreamConfig::http("ts", plain_url), UpstreamConfig::http("tstask", tasks_url)]);
    config.tasks.poll_interval_ms = 20;
    let gw = TestGateway::start(config);
    let out = run_ts_client("task-client.mjs", &gw.url).await;

    assert_eq!(out["capabilities"]["tasks"]["requests"]["tools"]["call"], serde_json::json!({}));
    // (a) A TypeScript SDK server with a native task tool.
    let native = &out["native"];
    assert_eq!(native["result"]["content"][0]["text"], "waited 30 ms", "{native}");
    let events: Vec<&str> = native["events"].as_array().unwrap().iter().map(|e| e.as_str().unwrap()).collect();
    assert_eq!(events.first(), Some(&"taskCreated"));
    assert_eq!(events.last(), Some(&"result"));
    // (b) A server with only plain tools: the gateway wraps the call as a task.
    let wrapped = &out["wrapped"];
    assert_eq!(wrapped["result"]["content"][0]["text"], "Hello, task!", "{wrapped}");
    let wrapped_id = wrapped["taskId"].as_str().unwrap();
    assert_eq!(out["getTask"]["status"], "completed");
    assert_eq!(out["getTaskResult"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"], wrapped_id);
    let listed: Vec<&str> = out["listed"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    assert!(listed.contains(&wrapped_id) && listed.contains(&native["taskId"].as_str().unwrap()), "{listed:?}");
    assert_eq!(out["cancelled"]["status"], "cancelled");
    assert_eq!(out["cancelAgain"]["code"], -32602, "{}", out["cancelAgain"]);
}

/// Writes a test CA and a certificate it signed for 127.0.0.1 and localhost (with openssl's
/// command line); returns (the CA's certificate, the server's certificate, the server's key).
fn test_certificates(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let run = |args: &[&str]| {
        let out = std::process::Command::new("openssl").args(args).current_dir(dir).output().expect("openssl runs");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    run(&[
        &["req", "-x509"][..],
        &key,
        &["-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=taskgate test CA"],
    ]
    .concat());
    run(&[&["req"][..], &key, &["-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost"]].concat());
    let extensions =
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n";
    std::fs::write(dir.join("server.ext"), extensions).unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "server.ext",
    ]);
    (dir.join("ca.pem"), dir.join("server.pem"), dir.join("server.key"))
}

/// An upstream over HTTPS (the TypeScript SDK's server behind node's TLS) with a certificate
/// from a private CA, which the gateway's process is given as `SSL_CERT_FILE` (the trust store
/// of the OpenSSL its TLS uses): calls reach it. A gateway that does not trust the CA reaches
/// none of it and logs why.
#[actix_rt::test]
async fn an_https_upstream_is_reached_when_its_private_ca_is_trusted_and_refused_when_not() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = test_certificates(dir.path());
    let tls = [("TLS_CERT", cert.to_str().unwrap()), ("TLS_KEY", key.to_str().unwrap())];
    let (_server, url, _) = start_node_server_with("server.mjs", &tls).await;
    let url = url.replacen("http://", "https://", 1);
    let config = dir.path().join("taskgate.toml");
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[logging]\nlevel = \"info\"\n[store]\nbackend = \"memory\"\n\
         [[upstream]]\nname = \"ts\"\ntransport = \"http\"\nurl = \"{url}\"\n"
    );
    std::fs::write(&config, text).unwrap();
    let greet = serde_json::json!({"name": "ts__greet", "arguments": {"name": "TLS"}});

    let served =
        taskgate_testkit::ServedGateway::start_with_env(&config, &[("SSL_CERT_FILE", ca.to_str().unwrap())]).await;
    let mut c = taskgate_testkit::McpClient::new(&served.url);
    c.initialize().await;
    let result = c.request("tools/call", Some(greet.clone())).await.outcome().unwrap();
    assert_eq!(result["content"][0]["text"], "Hello, TLS!");
    let listed = c.request("tools/list", None).await.outcome().unwrap();
    assert!(listed["tools"].as_array().unwrap().iter().any(|t| t["name"] == "ts__greet"), "{listed}");

    // Trusting no CA at all (an empty trust file): the upstream is refused, and the log says why.
    let none = dir.path().join("none.pem");
    std::fs::write(&none, "").unwrap();
    let mut untrusting =
        taskgate_testkit::ServedGateway::start_with_env(&config, &[("SSL_CERT_FILE", none.to_str().unwrap())]).await;
    let mut c = taskgate_testkit::McpClient::new(&untrusting.url);
    c.initialize().await;
    assert!(c.request("tools/call", Some(greet)).await.outcome().is_err());
    let why = untrusting.log_line("certificate").await;
    assert!(why.contains("upstream 'ts' is unavailable"), "{why}");
    assert!(why.contains("unable to get local issuer certificate"), "{why}");
    assert_eq!(why.matches("certificate verify failed").count(), 1, "each cause once: {why}");
}

/// The TypeScript SDK's streamable HTTP transport, with no event store, drops what it sends
/// on no request's stream while its GET stream is not open. A task it runs reports progress
/// there from its start: the progress reaches the client because the gateway opens the
/// upstream session's GET stream (held by the task's progress route) before the call goes,
/// here where the server takes each GET up 300 ms late. (A new upstream session waits for its
/// stream at `initialize`; this one was initialized without one, by a first task.)
#[actix_rt::test]
async fn a_typescript_servers_task_progress_sent_as_the_task_starts_reaches_the_client() {
    use taskgate_protocol::Message;
    let (_tasks, tasks_url, _) = start_node_server_with("task-server.mjs", &[("SLOW_GET_MS", "300")]).await;
    let mut config = config_with(vec![UpstreamConfig::http("tstask", tasks_url)]);
    // Every value passed on (none coalesced), so that each one's arrival is checked.
    config.progress.min_interval_ms = 0;
    let gw = TestGateway::start(config);
    for round in 0..2 {
        // A new client each round, and its own upstream session: initialized by a first task
        // with no progress token, while nothing holds the session's GET stream.
        let mut c = taskgate_testkit::McpClient::new(&gw.url);
        c.initialize().await;
        let first =
            serde_json::json!({"name": "tstask__progress_task", "arguments": {"steps": 1, "ms": 0}, "task": {}});
        c.request("tools/call", Some(first)).await.outcome().unwrap();
        // The client's stream opens the upstream's (300 ms late at the server) …
        let mut stream = c.open_stream().await.unwrap();
        // … while this task, at once, reports its progress there.
        let token = format!("ts-tok-{round}");
        let params = serde_json::json!({"name": "tstask__progress_task", "arguments": {"steps": 3, "ms": 20},
            "task": {}, "_meta": {"progressToken": token}});
        let created = c.request("tools/call", Some(params)).await.outcome().unwrap();
        let id = created["task"]["taskId"].as_str().unwrap().to_owned();
        let mut values = Vec::new();
        while values.last() != Some(&3.0) {
            if let Some(Message::Notification { method, params: Some(p) }) = stream.next().await {
                if method == "notifications/progress" {
                    assert_eq!(p["progressToken"], token.as_str());
                    assert_eq!(p["_meta"]["io.modelcontextprotocol/related-task"]["taskId"], id.as_str());
                    values.push(p["progress"].as_f64().unwrap());
                }
            }
        }
        assert_eq!(values, [1.0, 2.0, 3.0], "round {round}");
    }
}

#[actix_rt::test]
async fn typescript_abort_signal_stops_the_upstream_handler_and_onprogress_sees_task_progress() {
    let (_server, ts_url) = start_ts_server().await;
    let demo = DemoUpstream::start();
    let mut config = config_with(vec![UpstreamConfig::http("ts", ts_url), demo.upstream("demo")]);
    config.tasks.poll_interval_ms = 20;
    config.progress.min_interval_ms = 0;
    let gw = TestGateway::start(config);
    let out = run_ts_client("cancel-client.mjs", &gw.url).await;
    // The SDK client's AbortSignal sent notifications/cancelled; the gateway forwarded it to the
    // SDK server, whose handler observed the abort.
    assert!(out["aborted"].is_object(), "{}", out["aborted"]);
    assert_eq!(out["aborts"], 1, "{out}");
    // Task progress reached the SDK client's onprogress under its own token.
    assert_eq!(out["taskResult"]["content"][0]["text"], "slept 150 ms", "{out}");
    assert_eq!(out["taskProgress"], serde_json::json!([1, 2, 3]), "{out}");
    assert_eq!(gw.gateway.live_requests(), 0);
}

/// An upstream entry for `@modelcontextprotocol/server-everything` over stdio, names unprefixed.
fn everything_over_stdio() -> UpstreamConfig {
    let everything = interop_dir().join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    UpstreamConfig {
        prefix: false,
        ..UpstreamConfig::stdio("everything", "node", vec![everything.display().to_string(), "stdio".into()])
    }
}

#[actix_rt::test]
async fn the_typescript_client_sees_server_everything_through_the_gateway_as_it_does_directly() {
    // server/resources, server/prompts, completion, logging, client/roots, sampling and
    // elicitation, with the official peers on both sides: the TypeScript SDK 1.32 client and
    // server-everything 2026.8.31, over HTTP and over stdio, directly and through the gateway
    // (names unprefixed, so that what the client sees can be compared as it is).
    let (_server, url) = start_node_server("everything-server.mjs").await;
    let direct = run_ts_client_with("everything-client.mjs", &[&url]).await;
    assert_eq!(run_ts_client_with("everything-client.mjs", &["stdio"]).await, direct, "HTTP vs stdio, directly");
    // Its tools for clients that declare roots, sampling and elicitation are there, and were used.
    for tool in
        ["get-roots-list", "trigger-elicitation-request", "trigger-sampling-request", "toggle-subscriber-updates"]
    {
        assert!(direct["tools"].as_array().unwrap().contains(&Value::from(tool)), "{tool}: {}", direct["tools"]);
    }
    assert_eq!(direct["asked"]["sampling"], 1);
    assert_eq!(direct["asked"]["elicitation"], 1);
    assert!(direct["roots"].as_str().unwrap().contains("file:///interop/project"), "{}", direct["roots"]);

    let http = UpstreamConfig { prefix: false, ..UpstreamConfig::http("everything", url.clone()) };
    for (transport, upstream) in [("http", http), ("stdio", everything_over_stdio())] {
        let gw = TestGateway::start(config_with(vec![upstream]));
        let through = run_ts_client_with("everything-client.mjs", &[&gw.url]).await;
        for (key, value) in direct.as_object().unwrap() {
            assert_eq!(&through[key], value, "{key} through the gateway ({transport}) differs from directly");
        }
        gw.stop().await;
    }
}

/// `taskgate serve` on the default configuration but for its store's place, in front of the
/// upstreams of `before` and server-everything over stdio (its entry ending with `more`).
async fn served_before_everything(before: &str, more: &str) -> (taskgate_testkit::ServedGateway, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let everything = interop_dir().join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let file = dir.path().join("taskgate.toml");
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[store]\npath = \"{}\"\n{before}\
         [[upstream]]\nname = \"everything\"\ntransport = \"stdio\"\ncommand = \"node\"\nargs = [\"{}\", \"stdio\"]\n{more}",
        dir.path().join("data").display(),
        everything.display()
    );
    std::fs::write(&file, text).unwrap();
    (taskgate_testkit::ServedGateway::start(&file).await, dir)
}

/// A client that never follows `nextCursor` (the Inspector CLI, the Python SDK's
/// `list_resources()`) sees the first resources of every upstream in the first page: the
/// demo's and server-everything's, each listed by its own server, through the real gateway.
#[actix_rt::test]
async fn the_first_listing_page_holds_every_upstreams_resources() {
    let demo = DemoUpstream::start();
    let more = format!("[[upstream]]\nname = \"demo\"\ntransport = \"http\"\nurl = \"{}\"\n", demo.http.url);
    let (gw, _dir) = served_before_everything(&more, "prefix = false\n").await;
    let inspector = interop_dir().join("node_modules/@modelcontextprotocol/inspector-cli/build/index.js");
    let out = tokio::process::Command::new("node")
        .arg(&inspector)
        .arg(&gw.url)
        .args(["--method", "resources/list"])
        .kill_on_drop(true)
        .output();
    let out = crate::support::within(out).await.unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let page: Value = serde_json::from_slice(&out.stdout).unwrap();
    let uris: Vec<&str> = page["resources"].as_array().unwrap().iter().filter_map(|r| r["uri"].as_str()).collect();
    assert!(uris.iter().any(|u| u.starts_with("taskgate://demo/")), "the demo's: {uris:?}");
    assert!(uris.iter().any(|u| !u.starts_with("taskgate://")), "server-everything's: {uris:?}");
    gw.kill().await;
}

/// One-shot clients on the default configuration (each a session that declares nothing, makes
/// one call and goes away without DELETE, as the Inspector CLI of Node 20's `npx` does) in
/// front of an npm stdio server: 30 in a row and 20 four at a time all get their answer (the
/// 17th in a row found every one of the 16 places taken before).
#[actix_rt::test]
async fn one_shot_clients_on_the_defaults_never_run_a_stdio_server_out_of_processes() {
    let gw = TestGateway::start(config_with(vec![everything_over_stdio()]));
    let one_shot = |url: String| async move {
        let mut c = taskgate_testkit::McpClient::new(&url);
        c.initialize().await;
        c.call("echo", serde_json::json!({"message": "one shot"})).await
        // dropped without DELETE, and without ever listening
    };
    for n in 0..30 {
        let answer = one_shot(gw.url.clone()).await;
        assert!(answer.is_ok(), "run {n}: {answer:?}");
    }
    for batch in 0..5 {
        let runs = (0..4).map(|_| one_shot(gw.url.clone()));
        for (n, answer) in futures_util::future::join_all(runs).await.into_iter().enumerate() {
            assert!(answer.is_ok(), "batch {batch}, run {n}: {answer:?}");
        }
    }
}

/// The MCP Inspector's CLI (0.15, what Node 20's `npx @modelcontextprotocol/inspector --cli`
/// runs: it never ends its sessions) calling an npm stdio server through the real gateway on
/// the default configuration, 30 times in a row and 20 times four at a time: every call answered.
#[actix_rt::test]
async fn the_inspector_cli_in_a_loop_never_runs_a_stdio_server_out_of_processes() {
    let (gw, _dir) = served_before_everything("", "").await;
    let inspector = interop_dir().join("node_modules/@modelcontextprotocol/inspector-cli/build/index.js");
    let call = |n: usize| {
        let (inspector, url) = (inspector.clone(), gw.url.clone());
        async move {
            let out = tokio::process::Command::new("node")
                .arg(&inspector)
                .arg(&url)
                .args([
                    "--method",
                    "tools/call",
                    "--tool-name",
                    "everything__echo",
                    "--tool-arg",
                    &format!("message=run {n}"),
                ])
                .kill_on_drop(true)
                .output();
            let out = crate::support::within(out).await.unwrap();
            let said = String::from_utf8_lossy(&out.stdout).into_owned();
            assert!(
                out.status.success() && said.contains(&format!("run {n}")),
                "run {n}: {said}\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    };
    for n in 0..30 {
        call(n).await;
    }
    for batch in 0..5 {
        futures_util::future::join_all((0..4).map(|i| call(100 + batch * 4 + i))).await;
    }
    gw.kill().await;
}
