//! Any replica serves any session: three real `taskgate serve` processes sharing a real Redis,
//! behind Debian's nginx sending each request to the next replica (round robin, no affinity),
//! with real clients (the TypeScript SDK 1.32 and the Python SDK 1.29) running their whole
//! flows through it.

use serde_json::{json, Value};
use taskgate_store::testing::RedisServer;
use taskgate_testkit::{interop_dir, DemoUpstream, McpClient, Nginx, ServedGateway};

use crate::interop::run_client;
use crate::modern::Client;
use crate::support::{first_change, notified, within};

const KEY: &str = "acme-any-replica-key-0001";
const OTHER_KEY: &str = "acme-any-replica-key-0002";

struct Cluster {
    redis: RedisServer,
    demo: DemoUpstream,
    replicas: Vec<ServedGateway>,
    nginx: Nginx,
    _dir: tempfile::TempDir,
}

/// Three replicas of one configuration (Redis, the demo upstream over HTTP with the
/// conformance fixtures, one tenant with two principals) behind round-robin nginx.
async fn cluster() -> Cluster {
    cluster_with("", "").await
}

/// [`cluster`], with more settings for the server and for the demo upstream.
async fn cluster_with(server: &str, upstream: &str) -> Cluster {
    cluster_of(server, upstream, "").await
}

/// [`cluster_with`], with more settings for the tenant.
async fn cluster_of(server: &str, upstream: &str, tenant: &str) -> Cluster {
    let redis = RedisServer::start();
    let demo = DemoUpstream::start_conformance();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("taskgate.toml");
    let (one, two) = (taskgate_core::tenants::hash_key(KEY), taskgate_core::tenants::hash_key(OTHER_KEY));
    std::fs::write(
        &file,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n{server}\n[logging]\nlevel = \"info\"\n\
             [store]\nbackend = \"redis\"\nurl = \"{}\"\nkey_prefix = \"any:\"\nlease_ms = 600\n\
             [[upstream]]\nname = \"demo\"\ntransport = \"http\"\nurl = \"{}\"\n{upstream}\n\
             [[tenant]]\nid = \"acme\"\n\
             [[tenant.api_key]]\nprincipal = \"ada\"\nsha256 = \"{one}\"\n\
             [[tenant.api_key]]\nprincipal = \"bob\"\nsha256 = \"{two}\"\n{tenant}\n",
            redis.url, demo.http.url
        ),
    )
    .unwrap();
    let mut replicas = Vec::new();
    for _ in 0..3 {
        replicas.push(ServedGateway::start(&file).await);
    }
    let backends: Vec<String> =
        replicas.iter().map(|r| r.url.trim_start_matches("http://").trim_end_matches("/mcp").to_owned()).collect();
    let nginx = Nginx::round_robin(&backends);
    Cluster { redis, demo, replicas, nginx, _dir: dir }
}

/// A metric's value at one replica (summed over its series).
async fn metric(replica: &ServedGateway, name: &str) -> f64 {
    let url = replica.url.replace("/mcp", "/metrics");
    let text = reqwest::get(url).await.unwrap().text().await.unwrap();
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The session loads across the replicas (each replica that served the session without having
/// created it loaded it once).
async fn loads(cl: &Cluster) -> f64 {
    let mut sum = 0.0;
    for replica in &cl.replicas {
        sum += metric(replica, "taskgate_sessions_loaded_total").await;
    }
    sum
}

/// A request of session `id` with `key` sent straight to `replica`: its HTTP status.
async fn status_at(replica: &ServedGateway, key: &str, id: &str) -> u16 {
    let answer = reqwest::Client::new()
        .post(&replica.url)
        .bearer_auth(key)
        .header("Mcp-Session-Id", id)
        .header("MCP-Protocol-Version", "2025-11-25")
        .header("Accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
        .send()
        .await
        .unwrap();
    answer.status().as_u16()
}

/// The session was served by more than the replica that created it, and the client's answers
/// through one replica reached the one that asked.
async fn crossed_replicas(cl: &Cluster) {
    assert!(loads(cl).await >= 2.0, "the other two replicas loaded the session");
    let (mut to_stream, mut from_client) = (0.0, 0.0);
    for replica in &cl.replicas {
        let text = reqwest::get(replica.url.replace("/mcp", "/metrics")).await.unwrap().text().await.unwrap();
        for line in text.lines().filter(|l| l.starts_with("taskgate_store_events_total{direction=\"received\"")) {
            let value: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
            if line.contains("kind=\"session_message\"") {
                to_stream += value;
            }
            if line.contains("kind=\"session_client\"") {
                from_client += value;
            }
        }
    }
    // Which replica runs a call, and which holds the GET stream, is the balancer's choice: the
    // answers to the questions the upstream asked during calls crossed (each answer is the
    // client's next request); what reaches a GET stream across replicas is tested on its own.
    assert!(from_client >= 1.0, "the client's answers crossed: {from_client} (and {to_stream} messages to its stream)");
}

/// Waits until `replica` answers 404 for session `id`: the end reaches the other replicas as
/// an event (a copy there serves until it arrives).
async fn ended_at(replica: &ServedGateway, id: &str) {
    within(async { while status_at(replica, KEY, id).await != 404 {} }).await;
}

fn assert_flows(out: &Value, who: &str) {
    assert_eq!(out["errors"], json!([]), "{who}: every step succeeds: {out}");
    assert_eq!(out["sums"], json!(["1", "2", "3", "4", "5", "6"]), "{who}: {out}");
    // Progress is coalesced when the client reads slower than it comes: increasing, ending at 3.
    let progress: Vec<f64> = out["progress"].as_array().unwrap().iter().filter_map(Value::as_f64).collect();
    assert!(progress.windows(2).all(|w| w[0] < w[1]) && progress.last() == Some(&3.0), "{who}: {out}");
    assert_eq!(out["cancelled"], true, "{who}: {out}");
    assert_eq!(out["task"]["result"], "slept 60 ms", "{who}: {out}");
    for answer in out["elicited"].as_array().unwrap() {
        assert!(answer.as_str().unwrap().contains("ada"), "{who}: the client's answer came back: {out}");
    }
    assert_eq!(out["elicitedUnrelated"], true, "{who}: questions asked outside a call reached the client: {out}");
    for answer in out["sampled"].as_array().unwrap() {
        assert!(answer.as_str().unwrap().contains("sampled by the client"), "{who}: {out}");
    }
    assert_eq!(out["resources"]["updated"], true, "{who}: the subscription's update arrived: {out}");
    assert_eq!(out["resources"]["uri"], true, "{who}: {out}");
    assert_eq!(out["logging"], true, "{who}: {out}");
    assert_eq!(out["listChanged"], true, "{who}: {out}");
    assert_eq!(out["sessionAfter"], out["sessionId"], "{who}: one session throughout, never initialized again");
}

#[actix_rt::test]
async fn three_replicas_behind_round_robin_serve_the_typescript_clients_whole_flow_in_one_session() {
    let cl = cluster().await;
    let mut command = tokio::process::Command::new("node");
    command.args(["replicas-client.mjs", &cl.nginx.url, KEY, "flows"]);
    let out = run_client(command).await;
    assert_flows(&out, "TypeScript SDK");
    crossed_replicas(&cl).await;
    // The cancelled call stopped at the upstream.
    within(cl.demo.demo.wait_in_flight(|n| *n == 0)).await;
    // Ended (DELETE through one replica): no replica serves it.
    let id = out["sessionId"].as_str().unwrap();
    for replica in &cl.replicas {
        ended_at(replica, id).await;
    }
    let _ = &cl.redis;
}

#[actix_rt::test]
async fn three_replicas_behind_round_robin_serve_the_python_clients_whole_flow_in_one_session() {
    let cl = cluster().await;
    let mut command = tokio::process::Command::new(interop_dir().join(".venv-v1/bin/python"));
    command.args(["python/replicas_client.py", &cl.nginx.url, KEY]);
    let out = run_client(command).await;
    assert_flows(&out, "Python SDK");
    crossed_replicas(&cl).await;
    within(cl.demo.demo.wait_in_flight(|n| *n == 0)).await;
    let id = out["sessionId"].as_str().unwrap();
    for replica in &cl.replicas {
        ended_at(replica, id).await;
    }
}

/// The TypeScript client in steady mode: commands in, one JSON line out per command.
struct Steady {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

impl Steady {
    async fn start(url: &str) -> (Steady, String) {
        let mut child = tokio::process::Command::new("node")
            .args(["replicas-client.mjs", url, KEY, "steady"])
            .current_dir(interop_dir())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("node is installed");
        let stdin = child.stdin.take().unwrap();
        let lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(child.stdout.take().unwrap()));
        let mut steady = Steady { child, stdin, lines };
        let ready = steady.line().await;
        let id = ready["ready"].as_str().expect("the client connected").to_owned();
        (steady, id)
    }

    async fn line(&mut self) -> Value {
        let line = within(self.lines.next_line()).await.unwrap().expect("the client prints a line");
        serde_json::from_str(&line).unwrap()
    }

    async fn send(&mut self, command: &str) {
        tokio::io::AsyncWriteExt::write_all(&mut self.stdin, format!("{command}\n").as_bytes()).await.unwrap();
    }
}

#[actix_rt::test]
async fn a_replica_killed_mid_run_fails_only_its_requests_in_flight_and_the_session_goes_on_without_initialize() {
    let mut cl = cluster().await;
    let (mut client, id) = Steady::start(&cl.nginx.url).await;
    client.send("calls").await;
    let before = client.line().await;
    assert_eq!((before["ok"].as_u64(), &before["errors"]), (Some(6), &json!([])), "{before}");

    // Three long calls at once, spread over the replicas; one replica dies while they wait.
    client.send("slow 3").await;
    assert_eq!(client.line().await["started"], 3);
    within(cl.demo.demo.wait_in_flight(|n| *n == 3)).await;
    let on_killed = metric(&cl.replicas[0], "taskgate_requests_in_progress").await as usize;
    let killed = cl.replicas.remove(0);
    killed.kill().await;
    cl.demo.demo.release("steady");
    let outcomes = client.line().await;
    let outcomes: Vec<&str> = outcomes["outcomes"].as_array().unwrap().iter().map(|o| o.as_str().unwrap()).collect();
    let failed = outcomes.iter().filter(|o| o.starts_with("failed")).count();
    assert_eq!(failed, on_killed, "exactly the killed replica's requests in flight failed: {outcomes:?}");
    assert_eq!(outcomes.len() - failed, 3 - on_killed, "{outcomes:?}");

    // The same session goes on through the two left: no initialize, no error.
    for _ in 0..2 {
        client.send("calls").await;
        let after = client.line().await;
        assert_eq!((after["ok"].as_u64(), &after["errors"]), (Some(6), &json!([])), "{after}");
        assert_eq!(after["sessionId"], id.as_str(), "the client never initialized again");
    }
    client.send("end").await;
    assert_eq!(client.line().await["ended"], id.as_str());
    let _ = client.child.wait().await;
}

#[actix_rt::test]
async fn another_principals_session_id_is_not_found_at_any_replica_and_nothing_secret_is_logged() {
    let mut cl = cluster().await;
    let mut ada = McpClient::with_bearer(&cl.replicas[0].url, KEY);
    ada.initialize().await;
    let id = ada.session.clone().unwrap();
    // Bob replays Ada's id: at the replica holding it, and at one that would have to load it.
    for replica in &cl.replicas[..2] {
        assert_eq!(status_at(replica, OTHER_KEY, &id).await, 404);
    }
    // Exactly what an id that never existed gets.
    let forged = "6f1e3a52-0000-4000-8000-000000000000";
    let answer = |key: &'static str, id: String, url: String| async move {
        let reply = reqwest::Client::new()
            .post(url)
            .bearer_auth(key)
            .header("Mcp-Session-Id", id)
            .header("MCP-Protocol-Version", "2025-11-25")
            .header("Accept", "application/json, text/event-stream")
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
            .send()
            .await
            .unwrap();
        (reply.status().as_u16(), reply.text().await.unwrap())
    };
    let replayed = answer(OTHER_KEY, id.clone(), cl.replicas[1].url.clone()).await;
    let unknown = answer(OTHER_KEY, forged.into(), cl.replicas[1].url.clone()).await;
    assert_eq!(replayed, unknown, "another's session is told exactly what an unknown one is");
    // Nor is a DELETE of it taken, or a GET stream opened on it.
    let deleted = reqwest::Client::new()
        .delete(&cl.replicas[2].url)
        .bearer_auth(OTHER_KEY)
        .header("Mcp-Session-Id", &id)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status().as_u16(), 404);
    let line = cl.replicas[1].log_line("a session id of another principal").await;
    for secret in [KEY, OTHER_KEY] {
        assert!(cl.replicas[1].seen.iter().all(|l| !l.contains(secret)), "no credential in the log");
    }
    assert!(line.contains("principal=key:") && !line.contains(KEY), "{line}");
    // Ada's session is whole, at every replica.
    for replica in &cl.replicas {
        ada.url = replica.url.clone();
        assert_eq!(ada.call("demo__add", json!({"a": 1, "b": 1})).await.unwrap()["content"][0]["text"], "2");
    }
}

#[actix_rt::test]
async fn with_redis_down_a_session_not_held_gets_503_naming_the_store_and_service_resumes_by_itself() {
    let mut cl = cluster().await;
    let mut ada = McpClient::with_bearer(&cl.replicas[0].url, KEY);
    ada.initialize().await;
    cl.redis.stop();
    // The replica holding the session serves it on.
    assert_eq!(ada.call("demo__add", json!({"a": 2, "b": 2})).await.unwrap()["content"][0]["text"], "4");
    // Another must read the record: a 503 naming the store, with Retry-After.
    let mut elsewhere = ada.clone();
    elsewhere.url = cl.replicas[1].url.clone();
    let refused = elsewhere.request("ping", None).await;
    assert_eq!(refused.status.as_u16(), 503);
    assert!(refused.headers.contains_key("retry-after"));
    let error = refused.outcome().unwrap_err();
    assert_eq!(error.code, -32002, "{error:?}");
    assert!(error.message.contains("Redis"), "{error:?}");
    // A new session is served by the replica that made it, which cannot record it yet: the
    // others answer 503 for it too.
    let mut late = McpClient::with_bearer(&cl.replicas[2].url, KEY);
    late.initialize().await;
    assert_eq!(late.call("demo__add", json!({"a": 1, "b": 0})).await.unwrap()["content"][0]["text"], "1");
    let mut late_elsewhere = late.clone();
    late_elsewhere.url = cl.replicas[0].url.clone();
    assert_eq!(late_elsewhere.request("ping", None).await.status.as_u16(), 503);
    cl.redis.restart();
    // Back by itself: the first session loads at the other replica; the new one is recorded
    // at its next request where it was made, and loads elsewhere from then on.
    within(async { while elsewhere.request("ping", None).await.status.as_u16() != 200 {} }).await;
    assert_eq!(elsewhere.call("demo__add", json!({"a": 3, "b": 3})).await.unwrap()["content"][0]["text"], "6");
    within(async {
        loop {
            late.request("ping", None).await;
            if late_elsewhere.request("ping", None).await.status.as_u16() == 200 {
                break;
            }
        }
    })
    .await;
    assert_eq!(late_elsewhere.call("demo__add", json!({"a": 2, "b": 0})).await.unwrap()["content"][0]["text"], "2");
}

/// The tools listed to a session (their names).
async fn listed(client: &mut McpClient) -> Vec<String> {
    let listed = client.request("tools/list", None).await.outcome().unwrap();
    listed["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_owned()).collect()
}

#[actix_rt::test]
async fn tools_activated_through_one_replica_are_listed_by_every_replica_after_the_client_hears_of_them() {
    let cl = cluster_of("", "", "[tenant.tools]\nsearch = true").await;
    let mut at_a = McpClient::with_bearer(&cl.replicas[0].url, KEY);
    at_a.initialize().await;
    assert_eq!(listed(&mut at_a).await, ["find_tools", "use_tools"]);
    // The client's GET stream is at B; it activates a tool through C.
    let (mut at_b, mut at_c) = (at_a.clone(), at_a.clone());
    at_b.url = cl.replicas[1].url.clone();
    at_c.url = cl.replicas[2].url.clone();
    let mut stream_b = at_b.open_stream().await.unwrap();
    assert_eq!(listed(&mut at_b).await, ["find_tools", "use_tools"]);
    let used = at_c.call("use_tools", json!({"names": ["demo__add"]})).await.unwrap();
    assert_eq!(used["structuredContent"]["activated"], json!(["demo__add"]));
    // basic/server/tools "List Changed Notification": on the stream at B.
    let heard = within(stream_b.next()).await.expect("the notification");
    assert_eq!(heard.method(), Some("notifications/tools/list_changed"));
    // From then on every replica lists it, whichever copy of the session it holds.
    for client in [&mut at_a, &mut at_b, &mut at_c] {
        assert_eq!(listed(client).await, ["find_tools", "use_tools", "demo__add"], "at {}", client.url);
    }
    // The record holds it, for copies loaded later.
    let key = format!("any:session:{}", at_a.session.clone().unwrap());
    let redis = redis::Client::open(cl.redis.url.as_str()).unwrap();
    let mut conn = redis.get_multiplexed_async_connection().await.unwrap();
    let recorded: Option<String> = redis::AsyncCommands::hget(&mut conn, &key, "a").await.unwrap();
    assert_eq!(recorded.as_deref(), Some(r#"["demo__add"]"#));
    // One more, through A: heard at B, listed at C.
    let again = at_a.call("use_tools", json!({"names": ["demo__add", "demo__echo"]})).await.unwrap();
    assert_eq!(again["structuredContent"]["activated"], json!(["demo__add", "demo__echo"]));
    let heard = within(stream_b.next()).await.expect("the second notification");
    assert_eq!(heard.method(), Some("notifications/tools/list_changed"));
    assert_eq!(listed(&mut at_c).await, ["find_tools", "use_tools", "demo__add", "demo__echo"]);
}

#[actix_rt::test]
async fn a_2026_clients_activation_through_one_replica_is_heard_on_its_listen_stream_at_another_and_listed_by_all() {
    let cl = cluster_of("", "", "[tenant.tools]\nsearch = true").await;
    let at = |n: usize, key: &str| Client::declaring(McpClient::with_bearer(&cl.replicas[n].url, key), json!({}));
    let listed = |client: Client| async move {
        let listed = client.ok("tools/list", json!({})).await;
        listed["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_owned()).collect::<Vec<_>>()
    };
    // Its listen stream is at B; bob's (same tenant) at C, subscribed to the counter too.
    let counter = "taskgate://demo/demo://counter";
    let mut listen =
        at(1, KEY).stream("subscriptions/listen", json!({"notifications": {"toolsListChanged": true}})).await;
    let filter = json!({"notifications": {"toolsListChanged": true, "resourceSubscriptions": [counter]}});
    let mut bobs = at(2, OTHER_KEY).stream("subscriptions/listen", filter).await;
    for stream in [&mut listen, &mut bobs] {
        notified(stream, "notifications/subscriptions/acknowledged").await;
    }
    for n in 0..3 {
        assert_eq!(listed(at(n, KEY)).await, ["find_tools", "use_tools"]);
    }
    // It activates a tool through C.
    let used = at(2, KEY).call("use_tools", json!({"names": ["demo__add"]})).await;
    assert_eq!(used["structuredContent"]["activated"], json!(["demo__add"]), "{used}");
    let changed = notified(&mut listen, "notifications/tools/list_changed").await;
    assert!(!changed["_meta"]["io.modelcontextprotocol/subscriptionId"].is_null(), "{changed}");
    // Every replica lists it for ada; for bob, none.
    for n in 0..3 {
        assert_eq!(listed(at(n, KEY)).await, ["find_tools", "use_tools", "demo__add"], "at replica {n}");
        assert_eq!(listed(at(n, OTHER_KEY)).await, ["find_tools", "use_tools"], "bob at replica {n}");
    }
    // Bob's listen stream heard nothing of it: the first change it hears is the counter's
    // update made after it, then his own activation.
    at(0, OTHER_KEY).call("demo__touch", json!({})).await;
    assert_eq!(first_change(&mut bobs).await, "notifications/resources/updated");
    at(0, OTHER_KEY).call("use_tools", json!({"names": ["demo__echo"]})).await;
    assert_eq!(first_change(&mut bobs).await, "notifications/tools/list_changed");
    assert_eq!(listed(at(1, OTHER_KEY)).await, ["find_tools", "use_tools", "demo__echo"]);
}

/// Reloads every replica's configuration (SIGHUP) and waits until each has applied it.
async fn reload_all(cl: &mut Cluster) {
    for replica in &mut cl.replicas {
        let pid = replica.pid().to_string();
        assert!(std::process::Command::new("kill").args(["-HUP", &pid]).status().unwrap().success());
        replica.log_line("configuration reloaded").await;
    }
}

#[actix_rt::test]
async fn a_profile_removed_at_a_reload_ends_its_sessions_at_every_replica_and_their_records() {
    let profile = "[[tenant.profile]]\nname = \"math\"\ntools = [\"demo__add\"]\n";
    let mut cl = cluster_of("config_poll_ms = 0", "", profile).await;
    let urls: Vec<String> = cl.replicas.iter().map(|r| format!("{}/math", r.url)).collect();
    let math = |n: usize| urls[n].clone();
    let mut at_a = McpClient::with_bearer(&math(0), KEY);
    at_a.initialize().await;
    let mut at_b = at_a.clone();
    at_b.url = math(1);
    assert_eq!(at_b.call("demo__add", json!({"a": 1, "b": 1})).await.unwrap()["content"][0]["text"], "2");
    let key = format!("any:session:{}", at_a.session.clone().unwrap());
    let redis = redis::Client::open(cl.redis.url.as_str()).unwrap();
    let mut conn = redis.get_multiplexed_async_connection().await.unwrap();
    assert!(redis::AsyncCommands::exists::<_, bool>(&mut conn, &key).await.unwrap());
    // The profile is removed: the record goes, and no replica serves the session.
    let file = cl.replicas[0].config.clone();
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, text.replace(profile, "")).unwrap();
    reload_all(&mut cl).await;
    within(async {
        while redis::AsyncCommands::exists::<_, bool>(&mut conn, &key).await.unwrap() {
            tokio::task::yield_now().await;
        }
    })
    .await;
    // Back again, the profile serves new sessions only: the old one is over at every replica
    // (basic/transports "Session Management": 404).
    std::fs::write(&file, &text).unwrap();
    reload_all(&mut cl).await;
    for n in 0..3 {
        let mut old = at_a.clone();
        old.url = math(n);
        assert_eq!(old.request("tools/list", None).await.status, 404, "replica {n}");
    }
    let mut again = McpClient::with_bearer(&math(2), KEY);
    again.initialize().await;
    assert_eq!(again.call("demo__add", json!({"a": 2, "b": 2})).await.unwrap()["content"][0]["text"], "4");
}

#[actix_rt::test]
async fn what_an_upstream_says_at_one_replica_reaches_the_get_stream_at_another_and_one_stream_is_open_at_a_time() {
    let cl = cluster().await;
    let mut at_a = McpClient::with_bearer(&cl.replicas[0].url, KEY);
    at_a.initialize_with("2025-11-25", json!({"elicitation": {}})).await;
    // A holds an upstream session for it (a call), and no GET stream.
    assert_eq!(at_a.call("demo__add", json!({"a": 1, "b": 2})).await.unwrap()["content"][0]["text"], "3");
    // The client's GET stream is at B, which has never served the session before.
    let mut at_b = at_a.clone();
    at_b.url = cl.replicas[1].url.clone();
    let mut stream_b = at_b.open_stream().await.unwrap();
    // A hears that the stream is at B (an event through Redis).
    within(async {
        while metric(&cl.replicas[0], "taskgate_store_events_total{direction=\"received\",kind=\"session_stream\"}")
            .await
            < 1.0
        {}
    })
    .await;
    // The upstream announces to its sessions; the one at A has no client stream there: the
    // announcement reaches the stream at B, once.
    at_a.call("demo__toggle_prompt", json!({})).await.unwrap();
    let heard = within(stream_b.next()).await.expect("the announcement");
    assert_eq!(heard.method(), Some("notifications/prompts/list_changed"));
    // basic/transports "Multiple Connections": each message on one stream only. A GET stream
    // opened at C ends the one at B.
    let mut at_c = at_a.clone();
    at_c.url = cl.replicas[2].url.clone();
    let mut stream_c = at_c.open_stream().await.unwrap();
    assert!(within(stream_b.next()).await.is_none(), "the stream at B ended");
    at_a.call("demo__toggle_prompt", json!({})).await.unwrap();
    let heard = within(stream_c.next()).await.expect("the next announcement");
    assert_eq!(heard.method(), Some("notifications/prompts/list_changed"));
}

/// A session made at replica 0 of a cluster whose upstream sessions are not shared, that has
/// called once (its own upstream session open, and bound in its record): the client, the
/// upstream's session count before it, and the binding as Redis holds it.
async fn bound_session(cl: &Cluster) -> (McpClient, usize, String) {
    // Each replica has listed the upstream (its catalog sessions are open).
    for replica in &cl.replicas {
        McpClient::with_bearer(&replica.url, KEY).initialize().await;
    }
    let mut c = McpClient::with_bearer(&cl.replicas[0].url, KEY);
    c.initialize().await;
    let before = cl.demo.http.sessions();
    assert_eq!(c.call("demo__add", json!({"a": 1, "b": 1})).await.unwrap()["content"][0]["text"], "2");
    within(cl.demo.http.wait_sessions(|n| *n == before + 1)).await;
    // The record names it once the upstream has given its id.
    let key = format!("any:session:{}", c.session.clone().unwrap());
    let redis = redis::Client::open(cl.redis.url.as_str()).unwrap();
    let mut conn = redis.get_multiplexed_async_connection().await.unwrap();
    let bound = within(async {
        loop {
            let value: Option<String> = redis::AsyncCommands::hget(&mut conn, &key, "b:demo").await.unwrap();
            if let Some(value) = value {
                return value;
            }
            c.request("ping", None).await;
        }
    })
    .await;
    (c, before, bound)
}

#[actix_rt::test]
async fn a_sessions_own_upstream_session_made_at_one_replica_is_continued_at_the_others_and_ended_once() {
    let cl = cluster_with("", "share_sessions = \"never\"").await;
    let (c, before, bound) = bound_session(&cl).await;
    let id = c.session.clone().unwrap();
    let redis = redis::Client::open(cl.redis.url.as_str()).unwrap();
    let mut conn = redis.get_multiplexed_async_connection().await.unwrap();
    let key = format!("any:session:{id}");
    // The other replicas continue it: the upstream sees no new session.
    for replica in &cl.replicas[1..] {
        let mut there = c.clone();
        there.url = replica.url.clone();
        assert_eq!(there.call("demo__add", json!({"a": 2, "b": 2})).await.unwrap()["content"][0]["text"], "4");
    }
    assert_eq!(cl.demo.http.sessions(), before + 1, "one upstream session for the client session, at every replica");
    let still: String = redis::AsyncCommands::hget(&mut conn, &key, "b:demo").await.unwrap();
    assert_eq!(still, bound);
    // Ended by the client through one replica: ended at the upstream too.
    let mut last = c.clone();
    last.url = cl.replicas[2].url.clone();
    let ended =
        reqwest::Client::new().delete(&last.url).bearer_auth(KEY).header("Mcp-Session-Id", &id).send().await.unwrap();
    assert_eq!(ended.status().as_u16(), 200);
    within(cl.demo.http.wait_sessions(|n| *n == before)).await;
}

#[actix_rt::test]
async fn a_session_ended_through_a_replica_that_never_served_it_ends_its_upstream_session_there() {
    let mut cl = cluster_with("", "share_sessions = \"never\"").await;
    let (c, before, _) = bound_session(&cl).await;
    let id = c.session.clone().unwrap();
    // The replica holding the session dies (its upstream session stays at the upstream); the
    // client ends the session through one that never served it.
    let holder = cl.replicas.remove(0);
    holder.kill().await;
    assert_eq!(cl.demo.http.sessions(), before + 1);
    let ended = reqwest::Client::new()
        .delete(&cl.replicas[1].url)
        .bearer_auth(KEY)
        .header("Mcp-Session-Id", &id)
        .send()
        .await
        .unwrap();
    assert_eq!(ended.status().as_u16(), 200);
    within(cl.demo.http.wait_sessions(|n| *n == before)).await;
}

/// A stateless (2026-07-28) client's retry of an `input_required` goes wherever the balancer
/// sends it: the replica that gets it passes it on to the replica holding the exchange (the
/// upstream request waiting for the answer), which serves it and sends its answer back.
#[actix_rt::test]
async fn a_2026_retry_reaches_the_replica_holding_its_exchange_wherever_the_balancer_sends_it() {
    // No first wait: an answer not there at once is streamed (SSE).
    let mut cl = cluster_with("first_message_wait_ms = 0", "").await;
    let ask =
        |n: &str| json!({"name": "demo__test_elicitation", "arguments": {"message": format!("Who are you, {n}?")}});
    let answer = |first: &Value, n: &str| {
        let key = first["inputRequests"].as_object().unwrap().keys().next().unwrap().clone();
        let mut retry = ask(n);
        retry["requestState"] = first["requestState"].clone();
        retry["inputResponses"] = json!({ key: {"action": "accept", "content": {"username": n, "email": "x@y"}} });
        retry
    };
    // Round robin over three replicas: each retry reaches another replica than its request.
    let client = asking(McpClient::with_bearer(&cl.nginx.url, KEY));
    for n in ["ada", "eve", "kim"] {
        let first = client.ok("tools/call", ask(n)).await;
        assert_eq!(first["resultType"], "input_required", "{first}");
        let done = client.ok("tools/call", answer(&first, n)).await;
        assert_eq!(done["resultType"], "complete", "{done}");
        let text = done["content"][0]["text"].as_str().unwrap();
        assert!(text.contains("action=accept") && text.contains(&format!("\"username\":\"{n}\"")), "{text}");
    }
    let mut passed_on = 0.0;
    for replica in &cl.replicas {
        let name = "taskgate_store_events_total{direction=\"published\",kind=\"retry_forwarded\"}";
        passed_on += metric(replica, name).await;
    }
    assert_eq!(passed_on, 3.0, "every retry was passed on once");
    // At the replica holding the exchange, another principal's retry is refused as it is there,
    // and the exchange waits on for its own client's.
    let (ada, bob) = (
        asking(McpClient::with_bearer(&cl.replicas[0].url, KEY)),
        asking(McpClient::with_bearer(&cl.replicas[1].url, OTHER_KEY)),
    );
    let first = ada.ok("tools/call", ask("ada")).await;
    let refused = bob.send("tools/call", answer(&first, "bob")).await;
    let error = refused.outcome().unwrap_err();
    assert_eq!((refused.status.as_u16(), error.code), (200, -32602), "{error:?}");
    assert!(error.message.contains("another principal"), "{error:?}");
    let ada_at_another = asking(McpClient::with_bearer(&cl.replicas[1].url, KEY));
    let done = ada_at_another.ok("tools/call", answer(&first, "ada")).await;
    assert_eq!(done["resultType"], "complete", "{done}");
    // An answer that takes a while comes as a stream from the holder, relayed as it comes; and
    // a client that closes the relayed stream cancels the request at the holder.
    let gated = |gate: &str| json!({"name": "demo__ask", "arguments": {"question": "Name?", "then_gate": gate}});
    for (gate, close) in [("relayed-read", false), ("relayed-closed", true)] {
        let first = ada.ok("tools/call", gated(gate)).await;
        assert_eq!(first["resultType"], "input_required", "{first}");
        let key = first["inputRequests"].as_object().unwrap().keys().next().unwrap().clone();
        let mut retry = gated(gate);
        retry["requestState"] = first["requestState"].clone();
        retry["inputResponses"] = json!({ key: {"action": "accept", "content": {"answer": "Ada"}} });
        let mut stream = ada_at_another.stream("tools/call", retry).await;
        assert!(stream.is_sse(), "the holder's stream is relayed as a stream");
        if close {
            let (demo, before) = (cl.demo.demo.clone(), cl.demo.demo.stats().cancelled);
            drop(stream);
            within(cl.demo.demo.wait_in_flight(|_| demo.stats().cancelled > before)).await;
            continue;
        }
        cl.demo.demo.release(gate);
        let done = within(stream.next()).await.expect("the result");
        assert_eq!(done.to_value()["result"]["content"][0]["text"], "answer: Ada", "{done:?}");
    }
    // The replica holding an exchange stops: a retry elsewhere is told at once to start over.
    let first = asking(McpClient::with_bearer(&cl.replicas[2].url, KEY)).ok("tools/call", ask("ada")).await;
    cl.replicas.pop().unwrap().kill().await;
    let orphaned = ada.send("tools/call", answer(&first, "ada")).await;
    let error = orphaned.outcome().unwrap_err();
    assert_eq!(error.code, -32602, "{error:?}");
    assert!(error.message.contains("send the request again without it"), "{error:?}");
    // And the request again, without it, is served.
    let again = ada.ok("tools/call", ask("ada")).await;
    assert_eq!(again["resultType"], "input_required", "{again}");
}

/// A stateless client that declares elicitation (and no tasks: the gateway answers at once).
fn asking(http: McpClient) -> Client {
    Client::declaring(http, json!({"elicitation": {"form": {}}}))
}
