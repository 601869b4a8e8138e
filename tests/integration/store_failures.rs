//! The store failing at the wrong moment: a disk that fills under the file store, and a Redis
//! killed and started again at random moments under two replicas. Every acknowledged task
//! ends with exactly what its upstream produced once the store takes writes again; new work
//! meanwhile gets a clear error.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde_json::{json, Value};
use taskgate_store::testing::SmallDisk;
use taskgate_testkit::{DemoUpstream, McpClient, ServedGateway};

use crate::replicas::{client, cluster};
use crate::support::{create, method, within};

const KEY: &str = "acme-store-failures-key-01";
/// Clients creating tasks at once in the Redis test.
const WORKERS: usize = 4;
/// A result's size in the full-disk test.
const BLOB: usize = 512 << 10;

/// A metric's value from `/metrics` (0 when absent).
async fn metric(gw: &ServedGateway, line_start: &str) -> f64 {
    let text = reqwest::get(gw.url.replace("/mcp", "/metrics")).await.unwrap().text().await.unwrap();
    text.lines().filter(|l| l.starts_with(line_start)).filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum()
}

/// Creates echo tasks until one is refused: the refusal. Each task taken is kept in `echoed`
/// with the text it must end with.
async fn echo_tasks_until_refused(
    c: &mut McpClient,
    label: &str,
    echoed: &mut Vec<(String, String)>,
) -> taskgate_protocol::ErrorObject {
    loop {
        let text = format!("{label}-{}", echoed.len());
        let params = json!({"name": "demo__echo", "arguments": {"text": text}, "task": {"ttl": 600_000}});
        match c.request("tools/call", Some(params)).await.outcome() {
            Ok(created) => echoed.push((created["task"]["taskId"].as_str().unwrap().to_owned(), text)),
            Err(e) => return e,
        }
    }
}

#[actix_rt::test]
async fn a_full_disk_holds_finished_tasks_until_space_returns_and_refuses_new_ones_clearly() {
    let disk = SmallDisk::mount(16);
    let demo = DemoUpstream::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("taskgate.toml");
    let hash = taskgate_core::tenants::hash_key(KEY);
    std::fs::write(
        &file,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n[logging]\nlevel = \"info\"\n[store]\npath = {:?}\n\
             [[upstream]]\nname = \"demo\"\ntransport = \"http\"\nurl = \"{}\"\n\
             [[tenant]]\nid = \"acme\"\n[[tenant.api_key]]\nprincipal = \"ci\"\nsha256 = \"{hash}\"\n",
            disk.path.join("data").display().to_string(),
            demo.http.url
        ),
    )
    .unwrap();
    let gw = ServedGateway::start(&file).await;
    let mut c = McpClient::with_bearer(&gw.url, KEY);
    c.initialize().await;
    let done = create(&mut c, "demo__echo", json!({"text": "before"})).await;
    let running: Vec<String> = {
        let mut ids = Vec::new();
        for i in 0..5 {
            ids.push(create(&mut c, "demo__blob", json!({"bytes": BLOB, "gate": format!("g{i}")})).await);
        }
        ids
    };
    within(demo.demo.wait_in_flight(|n| *n == 5)).await;
    let waiters: Vec<_> = running
        .iter()
        .map(|id| {
            let (mut w, id) = (c.clone(), id.clone());
            actix_rt::spawn(async move { method(&mut w, "tasks/result", &id).await })
        })
        .collect();
    // Each waiter is blocked in tasks/result (its task read, found working) before the disk fills.
    within(async {
        while metric(&gw, "taskgate_task_result_waiters{tenant=\"acme\"}").await < 5.0 {
            let _ = c.request("ping", None).await;
        }
    })
    .await;

    disk.fill();
    // The file may still have room inside it: new tasks take it until the disk refuses.
    let mut echoed = Vec::new();
    let refused = within(echo_tasks_until_refused(&mut c, "during", &mut echoed)).await;
    assert_eq!(refused.code, -32002, "{refused:?}");
    assert!(refused.message.contains("No space left on device"), "{}", refused.message);
    for i in 0..5 {
        demo.demo.release(&format!("g{i}"));
    }
    // The five results (larger than any room left in the file) wait to be written (the store
    // refuses them), counted as such.
    within(async {
        while metric(&gw, "taskgate_store_unwritten_bytes ").await < (5 * BLOB) as f64 {
            let _ = c.request("ping", None).await;
        }
    })
    .await;
    assert!(metric(&gw, "taskgate_store_unwritten_changes ").await >= 5.0);
    // Cancelling a task whose change waits is refused at once, saying why (that the change
    // waits, or, while the disk refuses even to open the database again, that it cannot be).
    let refused = method(&mut c, "tasks/cancel", &running[0]).await.unwrap_err();
    let why = refused.message.contains("waits for the task store") || refused.message.contains("cannot be written");
    assert!(refused.code == -32002 && why, "{refused:?}");
    // New work is refused, saying why. (A small record may still fit in a page the database
    // freed meanwhile: each task taken is acknowledged, and checked once the disk has room.)
    let error = within(echo_tasks_until_refused(&mut c, "later", &mut echoed)).await;
    assert_eq!(error.code, -32002, "{error:?}");
    assert!(error.message.contains("cannot be written") || error.message.contains("No space"), "{}", error.message);
    // Reads answer while the database is open; while the disk refuses even to open it again,
    // they are refused the same clear way.
    match method(&mut c, "tasks/result", &done).await {
        Ok(result) => assert_eq!(result["content"][0]["text"], "before"),
        Err(e) => assert!(e.code == -32002 && e.message.contains("cannot be written"), "{e:?}"),
    }
    // Plain calls need no store.
    assert_eq!(c.call("demo__echo", json!({"text": "plain"})).await.unwrap()["content"][0]["text"], "plain");
    assert!(waiters.iter().all(|w| !w.is_finished()), "no waiter hears of a result the store does not hold");

    disk.free();
    for (i, waiter) in waiters.into_iter().enumerate() {
        let result = within(waiter).await.unwrap().unwrap();
        let text = result["content"][0]["text"].as_str().unwrap();
        assert!(text.len() == BLOB && text.bytes().all(|b| b == b'b'), "result {i}: {} bytes", text.len());
    }
    for id in &running {
        assert_eq!(method(&mut c, "tasks/get", id).await.unwrap()["status"], "completed");
    }
    for (id, text) in &echoed {
        assert_eq!(method(&mut c, "tasks/result", id).await.unwrap()["content"][0]["text"], text.as_str());
    }
    assert_eq!(metric(&gw, "taskgate_store_unwritten_changes ").await, 0.0);
    create(&mut c, "demo__echo", json!({"text": "after"})).await;
    assert_eq!(reqwest::get(gw.url.replace("/mcp", "/readyz")).await.unwrap().status(), reqwest::StatusCode::OK);
}

/// What an acknowledged task must end with.
#[derive(Clone, Debug)]
enum Expect {
    Text(String),
    Cancelled,
}

/// A deterministic random sequence (xorshift), so a failing run can be replayed.
struct Dice(u64);

impl Dice {
    fn roll(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % below
    }
}

/// Clients that keep creating tasks (wrapped echoes, native tasks reporting progress, tasks
/// cancelled at once) through both replicas, recording each acknowledged task and what it must
/// end with; a refusal is only ever the store's unavailability.
struct Load {
    acknowledged: Arc<parking_lot::Mutex<Vec<(String, Expect)>>>,
    refused: Arc<AtomicUsize>,
    stop: tokio::sync::watch::Sender<bool>,
    progress: tokio::sync::watch::Receiver<usize>,
    workers: Vec<actix_rt::task::JoinHandle<()>>,
}

/// Creates one task; `None` when the store's unavailability refused it.
async fn create_one(c: &mut McpClient, w: usize, i: usize) -> Option<(String, Expect)> {
    let text = format!("{w}-{i}");
    let (params, expect) = match i % 10 {
        8 => (
            json!({"name": "native__slow", "arguments": {"ms": 20, "steps": 2}, "task": {"ttl": 600_000},
                   "_meta": {"progressToken": text}}),
            Expect::Text("slept 20 ms".into()),
        ),
        9 => (
            json!({"name": "plain__wait", "arguments": {"gate": format!("never-{text}")}, "task": {"ttl": 600_000}}),
            Expect::Cancelled,
        ),
        // Running when Redis goes: finished while it is away.
        n if n % 2 == 1 => (
            json!({"name": "plain__slow", "arguments": {"ms": 40 + n, "steps": 1}, "task": {"ttl": 600_000}}),
            Expect::Text(format!("slept {} ms", 40 + n)),
        ),
        _ => (
            json!({"name": "plain__echo", "arguments": {"text": text}, "task": {"ttl": 600_000}}),
            Expect::Text(text.clone()),
        ),
    };
    match c.request("tools/call", Some(params)).await.outcome() {
        Ok(created) => Some((created["task"]["taskId"].as_str().unwrap().to_owned(), expect)),
        Err(e) => {
            assert_eq!(e.code, -32002, "only the store's unavailability may refuse: {e:?}");
            None
        }
    }
}

/// Cancels a task until the gateway says it is cancelled (a refusal while the store is away is
/// tried again).
async fn cancel(c: &mut McpClient, id: &str) {
    loop {
        match method(c, "tasks/cancel", id).await {
            Ok(task) => return assert_eq!(task["status"], "cancelled", "{task}"),
            Err(e) if e.code == -32002 => pause().await,
            // An earlier try that was applied though its answer was lost.
            Err(e) if e.message.contains("already in terminal status 'cancelled'") => return,
            Err(e) => panic!("cancelling {id}: {e:?}"),
        }
    }
}

impl Load {
    fn start(clients: Vec<McpClient>) -> Load {
        let acknowledged = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let refused = Arc::new(AtomicUsize::new(0));
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let (tick, progress) = tokio::sync::watch::channel(0usize);
        let tick = Arc::new(tick);
        let workers = clients
            .into_iter()
            .enumerate()
            .map(|(w, mut c)| {
                let (acknowledged, refused, stopped, tick) =
                    (acknowledged.clone(), refused.clone(), stopped.clone(), tick.clone());
                actix_rt::spawn(async move {
                    for i in 0..100_000 {
                        if *stopped.borrow() {
                            return;
                        }
                        match create_one(&mut c, w, i).await {
                            Some((id, expect)) => {
                                if matches!(expect, Expect::Cancelled) {
                                    cancel(&mut c, &id).await;
                                }
                                acknowledged.lock().push((id, expect));
                            }
                            None => drop(refused.fetch_add(1, Ordering::Relaxed)),
                        }
                        tick.send_modify(|n| *n += 1);
                    }
                })
            })
            .collect();
        Load { acknowledged, refused, stop, progress, workers }
    }

    fn counts(&self) -> (usize, usize) {
        (self.acknowledged.lock().len(), self.refused.load(Ordering::Relaxed))
    }

    async fn until(&self, condition: impl Fn(usize, usize) -> bool) {
        crate::support::until_counts(&self.progress, || self.counts(), condition).await;
    }

    async fn stop(self) -> Vec<(String, Expect)> {
        self.stop.send_replace(true);
        for worker in self.workers {
            worker.await.unwrap();
        }
        std::mem::take(&mut *self.acknowledged.lock())
    }
}

/// Status changes waiting for the store at the replicas.
async fn unwritten(replicas: &[ServedGateway]) -> f64 {
    let mut sum = 0.0;
    for gw in replicas {
        sum += metric(gw, "taskgate_store_unwritten_changes ").await;
    }
    sum
}

/// Between two tries of a request the store's absence refused (a retry's backoff, not a wait
/// for an event).
async fn pause() {
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
}

/// What a task ended with, waiting (through the replica `c` speaks to) until it is terminal.
async fn ending(c: &mut McpClient, id: &str) -> Value {
    loop {
        match method(c, "tasks/result", id).await {
            Ok(result) => return result,
            Err(e) if e.code == -32002 => pause().await,
            Err(e) => return json!({"error": e.message}),
        }
    }
}

#[actix_rt::test]
async fn redis_killed_at_random_moments_under_two_replicas_loses_and_strands_no_acknowledged_task() {
    let mut cl = cluster(2, "").await;
    let seed = std::env::var("TASKGATE_FAULT_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed_f00d_u64);
    println!("fault seed {seed:#x} (TASKGATE_FAULT_SEED replays it)");
    let mut dice = Dice(seed);
    // Native tasks held on the second replica, taken over by the first once it dies.
    let mut b = client(&cl.replicas[1]).await;
    let mut held = Vec::new();
    for i in 0..4 {
        held.push(create(&mut b, "native__wait", json!({"gate": format!("held-{i}")})).await);
    }
    let mut clients = Vec::new();
    for r in 0..2 {
        for _ in 0..WORKERS / 2 {
            clients.push(client(&cl.replicas[r]).await);
        }
    }
    let load = Load::start(clients);
    for kill in 0..4 {
        let (acked, refused) = load.counts();
        let more = 100 + dice.roll(400) as usize;
        load.until(|a, _| a >= acked + more).await;
        cl.redis.stop();
        let refusals = 1 + dice.roll(12) as usize;
        load.until(|_, r| r >= refused + refusals).await;
        if kill % 2 == 0 {
            // Long enough for the running tasks to finish while Redis is away: the upstream
            // runs none but the workers' waits (one each, to be cancelled), and the results
            // of those that finished wait to be written.
            let mut running = 0;
            cl.plain
                .demo
                .wait_in_flight(|n| {
                    running = *n;
                    true
                })
                .await;
            within(cl.plain.demo.wait_in_flight(|n| *n <= WORKERS)).await;
            if running > WORKERS {
                within(async {
                    while unwritten(&cl.replicas).await == 0.0 {
                        tokio::task::yield_now().await;
                    }
                })
                .await;
            }
        }
        cl.redis.restart();
        println!("Redis killed {} times; {} tasks acknowledged so far", kill + 1, load.counts().0);
    }
    let (acked, _) = load.counts();
    load.until(|a, _| a >= acked.max(2_000)).await;
    let refused = load.counts().1;
    let acknowledged = load.stop().await;

    // Every acknowledged task ends with exactly what its upstream produced.
    let mut a = client(&cl.replicas[0]).await;
    let started = std::time::Instant::now();
    let mut wrong = Vec::new();
    for (id, expect) in &acknowledged {
        let ended = within(ending(&mut a, id)).await;
        let good = match expect {
            Expect::Text(text) => ended["content"][0]["text"] == text.as_str() && ended["isError"] != true,
            Expect::Cancelled => method(&mut a, "tasks/get", id).await.is_ok_and(|task| task["status"] == "cancelled"),
        };
        if !good {
            wrong.push(format!("{id} ({expect:?}): {ended}"));
        }
    }
    println!(
        "{} acknowledged tasks checked in {:?}; {} refused while Redis was away",
        acknowledged.len(),
        started.elapsed(),
        refused
    );
    assert!(wrong.is_empty(), "{} of {} tasks ended otherwise: {:#?}", wrong.len(), acknowledged.len(), wrong);

    // Takeover: the second replica dies, and Redis goes away while its leases lapse; once it is
    // back, the first takes the native tasks over and follows them to their end.
    assert_eq!(metric(&cl.replicas[1], "taskgate_store_unwritten_changes ").await, 0.0);
    cl.replicas.remove(1).kill().await;
    cl.redis.stop();
    let ready = cl.replicas[0].url.replace("/mcp", "/readyz");
    within(async {
        while reqwest::get(&ready).await.unwrap().status() != reqwest::StatusCode::SERVICE_UNAVAILABLE {
            let _ = a.request("ping", None).await;
        }
    })
    .await;
    cl.redis.restart();
    for i in 0..4 {
        cl.native.demo.release(&format!("held-{i}"));
    }
    for (i, id) in held.iter().enumerate() {
        let result = within(ending(&mut a, id)).await;
        assert_eq!(result["content"][0]["text"], format!("gate held-{i} opened"), "{id}: {result}");
    }
}
