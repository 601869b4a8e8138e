//! Many replicas: real `taskgate serve` processes sharing a real Redis (started by the test on
//! a free loopback port, with a temporary directory, and stopped after it).

use crate::support::{create, method, within};
use serde_json::{json, Value};
use taskgate_store::testing::RedisServer;
use taskgate_testkit::{DemoUpstream, McpClient, ServedGateway};

pub(crate) const KEY: &str = "acme-replicas-key-000001";

/// Polls `tasks/get` (one real request each time) until the task has `status`.
async fn until_status(c: &mut McpClient, task_id: &str, status: &str) -> Value {
    within(async {
        loop {
            let task = method(c, "tasks/get", task_id).await.unwrap();
            if task["status"] == status {
                return task;
            }
            let _ = c.request("ping", None).await;
        }
    })
    .await
}

/// Replicas' shared configuration: Redis, a short lease, one tenant with `limits`.
fn config(redis: &RedisServer, prefix: &str, native: &DemoUpstream, plain: &DemoUpstream, limits: &str) -> String {
    let hash = taskgate_core::tenants::hash_key(KEY);
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[logging]\nlevel = \"info\"\n\
         [store]\nbackend = \"redis\"\nurl = \"{}\"\nkey_prefix = \"{prefix}\"\nlease_ms = 600\n\
         [[upstream]]\nname = \"native\"\ntransport = \"http\"\nurl = \"{}\"\n\
         [[upstream]]\nname = \"plain\"\ntransport = \"http\"\nurl = \"{}\"\n\
         [[tenant]]\nid = \"acme\"\n[[tenant.api_key]]\nprincipal = \"ci\"\nsha256 = \"{hash}\"\n[tenant.limits]\n{limits}\n",
        redis.url, native.http.url, plain.http.url
    )
}

pub(crate) struct Cluster {
    pub(crate) redis: RedisServer,
    pub(crate) native: DemoUpstream,
    pub(crate) plain: DemoUpstream,
    pub(crate) replicas: Vec<ServedGateway>,
    _dir: tempfile::TempDir,
}

pub(crate) async fn cluster(n: usize, limits: &str) -> Cluster {
    let redis = RedisServer::start();
    let native = DemoUpstream::start_with_tasks();
    let plain = DemoUpstream::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("taskgate.toml");
    std::fs::write(&file, config(&redis, "replicas:", &native, &plain, limits)).unwrap();
    let mut replicas = Vec::new();
    for _ in 0..n {
        replicas.push(ServedGateway::start(&file).await);
    }
    Cluster { redis, native, plain, replicas, _dir: dir }
}

pub(crate) async fn client(gw: &ServedGateway) -> McpClient {
    let mut c = McpClient::with_bearer(&gw.url, KEY);
    c.initialize().await;
    c
}

#[actix_rt::test]
async fn any_replica_answers_for_a_task_another_runs_and_waiters_and_cancels_cross_over() {
    let cl = cluster(2, "").await;
    let (mut a, mut b) = (client(&cl.replicas[0]).await, client(&cl.replicas[1]).await);

    // Created on A: B gets, lists and waits on it; its completion on A releases B's waiter.
    let id = create(&mut a, "plain__wait", json!({"gate": "g1"})).await;
    assert_eq!(method(&mut b, "tasks/get", &id).await.unwrap()["status"], "working");
    let listed = b.request("tasks/list", None).await.outcome().unwrap();
    assert_eq!(listed["tasks"][0]["taskId"], id.as_str());
    let mut b_stream = b.open_stream().await.unwrap();
    let mut waiter = b.clone();
    let waited = id.clone();
    let waiting = actix_rt::spawn(async move { method(&mut waiter, "tasks/result", &waited).await });
    within(cl.plain.demo.wait_in_flight(|n| *n == 1)).await;
    cl.plain.demo.release("g1");
    let result = within(waiting).await.unwrap().unwrap();
    assert_eq!(result["content"][0]["text"], "gate g1 opened");
    // notifications/tasks/status reached the requestor's stream on B.
    let status = within(async {
        loop {
            let message = b_stream.next().await.expect("B's stream stays open");
            if let taskgate_protocol::Message::Notification { method, params: Some(params) } = message {
                if method == "notifications/tasks/status" && params["status"] == "completed" {
                    return params;
                }
            }
        }
    })
    .await;
    assert_eq!(status["taskId"], id.as_str());

    // Cancelled on B while it runs on A: the work stops at the upstream.
    let id = create(&mut a, "plain__wait", json!({"gate": "never"})).await;
    within(cl.plain.demo.wait_in_flight(|n| *n == 1)).await;
    let cancelled = method(&mut b, "tasks/cancel", &id).await.unwrap();
    assert_eq!(cancelled["status"], "cancelled");
    within(cl.plain.demo.wait_in_flight(|n| *n == 0)).await;
    assert_eq!(method(&mut a, "tasks/get", &id).await.unwrap()["status"], "cancelled");

    // A's session is served by B too (loaded from Redis).
    let mut stray = McpClient::with_bearer(&cl.replicas[1].url, KEY);
    stray.session = a.session.clone();
    stray.protocol_version = Some("2025-11-25".into());
    assert_eq!(stray.request("ping", None).await.status, reqwest::StatusCode::OK);
}

#[actix_rt::test]
async fn a_killed_replicas_tasks_are_taken_over_native_ones_finish_and_wrapped_ones_fail() {
    let mut cl = cluster(2, "").await;
    let mut a = client(&cl.replicas[0]).await;
    let native = create(&mut a, "native__wait", json!({"gate": "n1"})).await;
    let wrapped = create(&mut a, "plain__wait", json!({"gate": "never"})).await;
    within(cl.plain.demo.wait_in_flight(|n| *n == 1)).await;
    // A native task whose upstream asks its requestor: A lists the question in Redis.
    let mut asker = McpClient::with_bearer(&cl.replicas[0].url, KEY);
    asker.initialize_with("2025-11-25", json!({"elicitation": {"form": {}}})).await;
    let asking = create(&mut asker, "native__ask", json!({"question": "Still there?"})).await;
    let redis = redis::Client::open(cl.redis.url.as_str()).unwrap();
    let mut conn = redis.get_multiplexed_async_connection().await.unwrap();
    let listed = format!("replicas:inputs:{asking}");
    let exists = |conn: &mut redis::aio::MultiplexedConnection| {
        let (mut conn, key) = (conn.clone(), listed.clone());
        async move { redis::AsyncCommands::exists::<_, bool>(&mut conn, key).await.unwrap() }
    };
    within(async {
        while !exists(&mut conn).await {
            tokio::task::yield_now().await;
        }
    })
    .await;
    let mut b = client(&cl.replicas[1]).await;
    let mut waiter = b.clone();
    let waited = native.clone();
    let waiting = actix_rt::spawn(async move { method(&mut waiter, "tasks/result", &waited).await });

    cl.replicas.remove(0).kill().await;
    // B takes both over once A's leases lapse.
    let failed = until_status(&mut b, &wrapped, "failed").await;
    // It says what happened: another replica died, not "the gateway restarted".
    let message = failed["statusMessage"].as_str().unwrap();
    assert!(message.contains("The gateway replica that ran the task stopped while it ran"), "{failed}");
    cl.native.demo.release("n1");
    let result = within(waiting).await.unwrap().unwrap();
    assert_eq!(result["content"][0]["text"], "gate n1 opened", "{result}");
    assert_eq!(method(&mut b, "tasks/get", &native).await.unwrap()["status"], "completed");
    // The question went with A's session: once B follows the task, no replica lists it.
    within(async {
        while exists(&mut conn).await {
            tokio::task::yield_now().await;
        }
    })
    .await;
    let _ = &mut cl.redis;
}

#[actix_rt::test]
async fn a_lost_redis_gives_clear_errors_and_service_resumes_with_every_acknowledged_task() {
    let mut cl = cluster(1, "").await;
    let mut a = client(&cl.replicas[0]).await;
    let mut acknowledged = Vec::new();
    for i in 0..20 {
        acknowledged.push(create(&mut a, "plain__echo", json!({"text": format!("t{i}")})).await);
    }
    let running = create(&mut a, "plain__wait", json!({"gate": "outage"})).await;
    within(cl.plain.demo.wait_in_flight(|n| *n == 1)).await;
    let admin = cl.replicas[0].url.replace("/mcp", "/readyz");
    assert_eq!(reqwest::get(&admin).await.unwrap().status(), reqwest::StatusCode::OK);

    cl.redis.stop();
    let reply =
        a.request("tools/call", Some(json!({"name": "plain__echo", "arguments": {"text": "x"}, "task": {}}))).await;
    let error = reply.outcome().unwrap_err();
    assert_eq!(error.code, -32002, "{error:?}");
    assert!(error.message.contains("Task store unavailable") && error.message.contains("Redis"), "{}", error.message);
    let get = a.request("tasks/get", Some(json!({"taskId": acknowledged[0]}))).await;
    // A JSON answer is an HTTP 503 with Retry-After, with the JSON-RPC error as its body.
    assert_eq!(get.status, reqwest::StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(get.headers.get("retry-after").map(|v| v.to_str().unwrap()), Some("1"));
    assert_eq!(get.outcome().unwrap_err().code, -32002);
    let ready = reqwest::get(&admin).await.unwrap();
    assert_eq!(ready.status(), reqwest::StatusCode::SERVICE_UNAVAILABLE);
    let body: Value = serde_json::from_str(&ready.text().await.unwrap()).unwrap();
    assert_eq!(body["store"]["reachable"], false, "{body}");
    // Plain calls that need no store still work.
    assert_eq!(a.call("plain__echo", json!({"text": "still"})).await.unwrap()["content"][0]["text"], "still");

    cl.redis.restart();
    let resumed = within(async {
        loop {
            if let Ok(task) = method(&mut a, "tasks/get", &acknowledged[0]).await {
                return task;
            }
        }
    })
    .await;
    assert_eq!(resumed["taskId"], acknowledged[0].as_str());

    // Mid-load: four clients keep creating tasks while Redis is stopped and started again.
    // Every creation either is acknowledged or gets -32002; every acknowledged task is there after.
    let load = Load::start(&a, 4);
    load.until(|acked, _| acked >= 40).await;
    cl.redis.stop();
    load.until(|_, refused| refused >= 8).await;
    cl.redis.restart();
    let (acked_before, _) = load.counts();
    load.until(|acked, _| acked >= acked_before + 40).await;
    acknowledged.extend(load.stop().await);
    for id in &acknowledged {
        let task = method(&mut a, "tasks/get", id).await.unwrap();
        assert!(["working", "completed"].contains(&task["status"].as_str().unwrap()), "{task}");
    }
    assert_eq!(reqwest::get(&admin).await.unwrap().status(), reqwest::StatusCode::OK);
    create(&mut a, "plain__echo", json!({"text": "after"})).await;

    // The outage outlasted the running task's lease (its end set in the past, as time would
    // have it); the replica that runs it takes it back, and after two lease periods of renewals
    // and orphan searches it still runs here and completes.
    let client = redis::Client::open(cl.redis.url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let _: i64 = redis::AsyncCommands::zadd(&mut conn, "replicas:leases", &running, 0).await.unwrap();
    let metrics = cl.replicas[0].url.replace("/mcp", "/metrics");
    let renewals = || async {
        let text = reqwest::get(&metrics).await.unwrap().text().await.unwrap();
        text.lines()
            .filter(|l| l.starts_with("taskgate_store_operation_duration_seconds_count{operation=\"renew_leases\"}"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
    };
    let before = renewals().await;
    within(async {
        while renewals().await < before + 6.0 {
            let _ = a.request("ping", None).await;
        }
    })
    .await;
    assert_eq!(method(&mut a, "tasks/get", &running).await.unwrap()["status"], "working");
    cl.plain.demo.release("outage");
    let done = method(&mut a, "tasks/result", &running).await.unwrap();
    assert_eq!(done["content"][0]["text"], "gate outage opened");
}

#[actix_rt::test]
async fn a_tenants_cap_and_rate_hold_across_three_replicas_under_a_concurrent_burst() {
    let cl = cluster(3, "max_concurrent_tasks = 10\nrate = { per_second = 0.01, burst = 60 }").await;
    let mut clients = Vec::new();
    for gw in &cl.replicas {
        clients.push(client(gw).await);
    }
    // 30 task creations at once, ten through each replica: exactly ten are admitted.
    let mut burst = Vec::new();
    for i in 0..30 {
        let mut c = clients[i % 3].clone();
        burst.push(actix_rt::spawn(async move {
            let args = json!({"name": "plain__wait", "arguments": {"gate": "cap"}, "task": {}});
            c.request("tools/call", Some(args)).await.outcome()
        }));
    }
    let mut admitted = Vec::new();
    let mut refused = 0;
    for outcome in burst {
        match within(outcome).await.unwrap() {
            Ok(created) => admitted.push(created["task"]["taskId"].as_str().unwrap().to_owned()),
            Err(e) => {
                assert_eq!(e.code, -32006, "{e:?}");
                assert!(e.message.contains("max_concurrent_tasks"), "{}", e.message);
                refused += 1;
            }
        }
    }
    assert_eq!((admitted.len(), refused), (10, 20));
    within(cl.plain.demo.wait_in_flight(|n| *n == 10)).await;
    // When they end, their places are free on every replica.
    cl.plain.demo.release("cap");
    for id in &admitted {
        method(&mut clients[1], "tasks/result", id).await.unwrap();
    }
    create(&mut clients[2], "plain__echo", json!({"text": "room again"})).await;

    // The rate is one bucket for the three replicas: 60 requests in all, not 60 each. So far
    // 3 initializes, 30 creations, 10 results and 1 creation took 44; 16 remain.
    let mut admitted = 0;
    let mut limited = 0;
    for i in 0..30 {
        let reply = clients[i % 3].request("ping", None).await;
        match reply.status.as_u16() {
            200 => admitted += 1,
            429 => limited += 1,
            other => panic!("unexpected status {other}"),
        }
    }
    assert_eq!((admitted, limited), (16, 14));
}

#[actix_rt::test]
async fn a_gateway_started_while_redis_is_down_serves_and_recovers_when_it_comes_up() {
    let mut redis = RedisServer::start();
    let (native, plain) = (DemoUpstream::start_with_tasks(), DemoUpstream::start());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("taskgate.toml");
    std::fs::write(&file, config(&redis, "late:", &native, &plain, "")).unwrap();
    redis.stop();
    let gw = ServedGateway::start(&file).await;
    let mut c = client(&gw).await;
    let ready = reqwest::get(gw.url.replace("/mcp", "/readyz")).await.unwrap();
    assert_eq!(ready.status(), reqwest::StatusCode::SERVICE_UNAVAILABLE);
    let refused =
        c.request("tools/call", Some(json!({"name": "plain__echo", "arguments": {"text": "x"}, "task": {}}))).await;
    let refused = refused.outcome().unwrap_err();
    assert_eq!(refused.code, -32002, "{refused:?}");
    assert_eq!(c.call("plain__echo", json!({"text": "plain"})).await.unwrap()["content"][0]["text"], "plain");
    redis.restart();
    let id = within(async {
        loop {
            let reply = c
                .request("tools/call", Some(json!({"name": "plain__echo", "arguments": {"text": "up"}, "task": {}})))
                .await;
            if let Ok(created) = reply.outcome() {
                return created["task"]["taskId"].as_str().unwrap().to_owned();
            }
        }
    })
    .await;
    assert_eq!(method(&mut c, "tasks/result", &id).await.unwrap()["content"][0]["text"], "up");
}

/// Clients creating tasks in a loop (bounded: at most 5000 each), counting what was
/// acknowledged and what was refused with -32002 (anything else fails the test).
struct Load {
    acknowledged: std::sync::Arc<parking_lot::Mutex<Vec<String>>>,
    refused: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    stop: tokio::sync::watch::Sender<bool>,
    workers: Vec<actix_rt::task::JoinHandle<()>>,
    progress: tokio::sync::watch::Receiver<usize>,
}

impl Load {
    fn start(client: &McpClient, n: usize) -> Load {
        let acknowledged = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
        let refused = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let (tick, progress) = tokio::sync::watch::channel(0usize);
        let tick = std::sync::Arc::new(tick);
        let workers = (0..n)
            .map(|w| {
                let (mut c, acknowledged, refused, stopped, tick) =
                    (client.clone(), acknowledged.clone(), refused.clone(), stopped.clone(), tick.clone());
                actix_rt::spawn(async move {
                    for i in 0..5000 {
                        if *stopped.borrow() {
                            return;
                        }
                        let args =
                            json!({"name": "plain__echo", "arguments": {"text": format!("{w}-{i}")}, "task": {}});
                        match c.request("tools/call", Some(args)).await.outcome() {
                            Ok(created) => {
                                acknowledged.lock().push(created["task"]["taskId"].as_str().unwrap().to_owned())
                            }
                            Err(e) => {
                                assert_eq!(e.code, -32002, "only the store's unavailability may refuse: {e:?}");
                                refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            }
                        }
                        tick.send_modify(|n| *n += 1);
                    }
                })
            })
            .collect();
        Load { acknowledged, refused, stop, workers, progress }
    }

    fn counts(&self) -> (usize, usize) {
        (self.acknowledged.lock().len(), self.refused.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Waits (bounded) until the counts satisfy `condition`, woken by each finished request.
    async fn until(&self, condition: impl Fn(usize, usize) -> bool) {
        crate::support::until_counts(&self.progress, || self.counts(), condition).await;
    }

    async fn stop(self) -> Vec<String> {
        self.stop.send_replace(true);
        for worker in self.workers {
            worker.await.unwrap();
        }
        std::mem::take(&mut *self.acknowledged.lock())
    }
}

/// ext-tasks with many replicas: a 2026-07-28 client's requests carry no session, so any replica
/// serves any of them; a task created through one is read, awaited and cancelled through the
/// other (a load balancer may route on `Mcp-Name`, the task id), and a 2025 session's task is
/// the same record.
#[actix_rt::test]
async fn a_2026_client_polls_and_cancels_through_any_replica_the_tasks_another_runs() {
    let cl = cluster(2, "").await;
    let through = |i: usize| crate::modern::Client::over(McpClient::with_bearer(&cl.replicas[i].url, KEY));
    let (a, b) = (through(0), through(1));
    // Created through A (the gateway decides: a task), polled through B to its inlined result.
    let created = a.call("plain__wait", json!({"gate": "r1"})).await;
    assert_eq!(created["resultType"], "task", "{created}");
    let task = created["taskId"].as_str().unwrap().to_owned();
    assert_eq!(b.ok("tasks/get", json!({"taskId": task})).await["status"], "working");
    within(cl.plain.demo.wait_in_flight(|n| *n == 1)).await;
    cl.plain.demo.release("r1");
    let done = b.poll(&task, |t| t["status"] == "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "gate r1 opened", "{done}");
    // A native task created through B, its result read through A.
    let native = b.call("native__wait", json!({"gate": "r2"})).await;
    let native = native["taskId"].as_str().unwrap().to_owned();
    cl.native.demo.release("r2");
    let done = a.poll(&native, |t| t["status"] == "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "gate r2 opened", "{done}");
    // Cancelled through B while it runs on A: the work stops at the upstream.
    let doomed = a.call("plain__wait", json!({"gate": "never"})).await;
    let doomed = doomed["taskId"].as_str().unwrap().to_owned();
    within(cl.plain.demo.wait_in_flight(|n| *n == 1)).await;
    assert_eq!(b.ok("tasks/cancel", json!({"taskId": doomed})).await["resultType"], "complete");
    within(cl.plain.demo.wait_in_flight(|n| *n == 0)).await;
    assert_eq!(a.ok("tasks/get", json!({"taskId": doomed})).await["status"], "cancelled");
    // A 2025-11-25 session's task on A is the same record for the 2026 client on B.
    let mut legacy = client(&cl.replicas[0]).await;
    let old = create(&mut legacy, "plain__wait", json!({"gate": "r3"})).await;
    cl.plain.demo.release("r3");
    let seen = b.poll(&old, |t| t["status"] == "completed").await;
    assert_eq!(seen["result"]["content"][0]["text"], "gate r3 opened");
    // Credentials apply to stateless requests on every replica.
    let stranger = crate::modern::Client::over(McpClient::new(&cl.replicas[1].url));
    let reply = stranger.send("tasks/get", json!({"taskId": task})).await;
    assert_eq!(reply.status, reqwest::StatusCode::UNAUTHORIZED, "{reply:?}");
}

/// Reads messages until a request comes.
async fn next_request(stream: &mut taskgate_testkit::SseReader) -> (taskgate_protocol::RequestId, Value) {
    loop {
        match stream.next().await.expect("the stream ended") {
            taskgate_protocol::Message::Request { id, params: Some(params), .. } => return (id, params),
            _ => continue,
        }
    }
}

/// The only entry of a task's `inputRequests`.
fn only_input(task: &Value) -> (String, Value) {
    let inputs = task["inputRequests"].as_object().unwrap_or_else(|| panic!("no inputRequests: {task}"));
    assert_eq!(inputs.len(), 1, "{task}");
    inputs.iter().next().map(|(k, v)| (k.clone(), v.clone())).unwrap()
}

/// ext-tasks "Task Polling" (all outstanding input requests listed) and "Task Update Requests"
/// through any replica; basic/utilities/tasks "Input Required Status" for a 2025-11-25 client
/// waiting on another replica than the one running the task.
#[actix_rt::test]
async fn a_tasks_input_requests_are_listed_and_answered_through_any_replica() {
    let cl = cluster(2, "").await;
    let through = |i: usize| crate::modern::Client::over(McpClient::with_bearer(&cl.replicas[i].url, KEY));
    let (a, b) = (through(0), through(1));
    // A wrapped task runs on A; B lists its request the moment it says input_required.
    let created = a.call("plain__ask", json!({"question": "Colour?"})).await;
    let task = created["taskId"].as_str().unwrap().to_owned();
    let waiting = b.poll(&task, |t| t["status"] == "input_required").await;
    let (key, request) = only_input(&waiting);
    assert_eq!(request["method"], "elicitation/create", "{request}");
    assert_eq!(request["params"]["message"], "Colour?");
    assert_eq!(request["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"], task.as_str());
    // A lists the same request under the same key.
    assert_eq!(only_input(&a.ok("tasks/get", json!({"taskId": task})).await), (key.clone(), request));
    // Answered through B: no longer listed, and the upstream on A gets the answer.
    let answer = json!({"action": "accept", "content": {"answer": "red"}});
    b.ok("tasks/update", json!({"taskId": task, "inputResponses": {key.clone(): answer}})).await;
    let after = b.ok("tasks/get", json!({"taskId": task})).await;
    assert!(after.get("inputRequests").is_none_or(|r| r.get(&key).is_none()), "{after}");
    let done = b.poll(&task, |t| t["status"] == "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "answer: red", "{done}");

    // A native task runs on B (its upstream asks); listed and answered through A.
    let created = b.call("native__ask", json!({"question": "Size?"})).await;
    let native = created["taskId"].as_str().unwrap().to_owned();
    let waiting = a.poll(&native, |t| t["inputRequests"].as_object().is_some_and(|r| !r.is_empty())).await;
    let (key, request) = only_input(&waiting);
    assert_eq!(request["params"]["message"], "Size?");
    assert!(!request.to_string().contains("demo-task-"), "the upstream's task id stays hidden: {request}");
    let answer = json!({"action": "accept", "content": {"answer": "L"}});
    a.ok("tasks/update", json!({"taskId": native, "inputResponses": {key: answer}})).await;
    let done = a.poll(&native, |t| t["status"] == "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "answer: L", "{done}");

    // A 2025-11-25 client: the task runs on A, its tasks/result waits on B. The question comes
    // after the wait began (the task first waits at a gate): B relays it on that stream, and
    // the answer posted to B reaches the upstream on A.
    let elicits = json!({"elicitation": {"form": {}}});
    let mut on_a = McpClient::with_bearer(&cl.replicas[0].url, KEY);
    on_a.initialize_with("2025-11-25", elicits.clone()).await;
    let mut on_b = McpClient::with_bearer(&cl.replicas[1].url, KEY);
    on_b.initialize_with("2025-11-25", elicits).await;
    let id = create(&mut on_a, "plain__ask", json!({"question": "Shape?", "gate": "q1"})).await;
    within(cl.plain.demo.wait_in_flight(|n| *n == 1)).await;
    let mut result = on_b.request_stream("tasks/result", Some(json!({"taskId": id}))).await;
    cl.plain.demo.release("q1");
    let (asked, params) = within(next_request(&mut result)).await;
    assert_eq!(params["message"], "Shape?");
    assert_eq!(params["_meta"]["io.modelcontextprotocol/related-task"]["taskId"], id.as_str());
    let answer =
        taskgate_protocol::Message::response(asked, json!({"action": "accept", "content": {"answer": "round"}}));
    assert_eq!(on_b.post_message(&answer).await.status, 202);
    let outcome = within(async {
        loop {
            if let taskgate_protocol::Message::Response { result, .. } = result.next().await.expect("the stream ended")
            {
                return result;
            }
        }
    })
    .await;
    assert_eq!(outcome["content"][0]["text"], "answer: round", "{outcome}");
    // Each replica heard of the other's input requests and answers through Redis.
    for replica in &cl.replicas {
        let metrics = reqwest::get(replica.url.replace("/mcp", "/metrics")).await.unwrap().text().await.unwrap();
        for kind in ["input_requested", "input_responses"] {
            let line = format!("taskgate_store_events_total{{direction=\"received\",kind=\"{kind}\"}} ");
            let seen: u64 = metrics.lines().find_map(|l| l.strip_prefix(&line)).and_then(|n| n.parse().ok()).unwrap();
            assert!(seen >= 1, "{kind} on {}: {seen}", replica.url);
        }
    }
    // Nothing is left listed in Redis once every request was answered.
    let client = redis::Client::open(cl.redis.url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let left: Vec<String> = redis::AsyncCommands::keys(&mut conn, "replicas:inputs:*").await.unwrap();
    assert!(left.is_empty(), "{left:?}");
}
