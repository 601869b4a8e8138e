//! A damaged task database: refused at start with what to do, mended offline by
//! `taskgate store repair`, and, when the damage appears under a running gateway, an error for
//! the requests that touch it and nothing else (every session goes on).

use serde_json::json;
use taskgate_testkit::{taskgate_bin, DemoUpstream, McpClient, ServedGateway};

use crate::support::create;

const ACME: &str = "acme-damaged-store-key-01";
const GLOBEX: &str = "globex-damaged-store-k02";

fn config(demo: &DemoUpstream, data: &std::path::Path, cache_mib: u64) -> String {
    let mut text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[logging]\nlevel = \"info\"\n[store]\npath = {:?}\ncache_mib = {cache_mib}\n\
         [[upstream]]\nname = \"demo\"\ntransport = \"http\"\nurl = \"{}\"\n",
        data.display().to_string(),
        demo.http.url,
    );
    for (tenant, key) in [("acme", ACME), ("globex", GLOBEX)] {
        let hash = taskgate_core::tenants::hash_key(key);
        text.push_str(&format!(
            "[[tenant]]\nid = \"{tenant}\"\n[[tenant.api_key]]\nprincipal = \"{tenant}-ci\"\nsha256 = \"{hash}\"\n"
        ));
    }
    text
}

/// Creates `n` finished tasks of ~1 KB each.
async fn tasks(c: &mut McpClient, n: usize) {
    for i in 0..n {
        create(c, "demo__echo", json!({"text": format!("{i:04}{}", "x".repeat(1000))})).await;
    }
}

/// Every task of the client's principal, page after page.
async fn list_all(c: &mut McpClient) -> Result<usize, taskgate_protocol::ErrorObject> {
    let mut seen = 0;
    let mut cursor: Option<String> = None;
    loop {
        let params = cursor.as_ref().map(|c| json!({"cursor": c}));
        let page = c.request("tasks/list", params).await.outcome()?;
        seen += page["tasks"].as_array().map_or(0, Vec::len);
        match page.get("nextCursor").and_then(|c| c.as_str()) {
            Some(next) => cursor = Some(next.to_owned()),
            None => return Ok(seen),
        }
    }
}

fn overwrite(file: &std::path::Path, at: u64, bytes: &[u8]) {
    use std::io::{Seek, Write};
    let mut f = std::fs::OpenOptions::new().write(true).open(file).unwrap();
    f.seek(std::io::SeekFrom::Start(at)).unwrap();
    f.write_all(bytes).unwrap();
    f.sync_all().unwrap();
}

/// `taskgate store ACTION --data DIR`: exit code and what it printed.
fn store_command(action: &str, data: &std::path::Path) -> (i32, String) {
    let out = std::process::Command::new(taskgate_bin())
        .args(["store", action, "--data"])
        .arg(data)
        .output()
        .expect("taskgate runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

#[actix_rt::test]
async fn an_empty_or_damaged_file_stops_the_start_and_store_repair_mends_it() {
    let demo = DemoUpstream::start();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let file = dir.path().join("taskgate.toml");
    std::fs::write(&file, config(&demo, &data, 64)).unwrap();
    let mut gw = ServedGateway::start(&file).await;
    let mut c = McpClient::with_bearer(&gw.url, ACME);
    c.initialize().await;
    tasks(&mut c, 300).await;
    gw.terminate();
    assert!(gw.exited().await.success());
    let db = data.join("tasks.redb");
    let intact = std::fs::read(&db).unwrap();
    assert_eq!(store_command("check", &data).0, 0, "an intact store checks clean");

    // An empty file: never taken for an empty store.
    std::fs::write(&db, b"").unwrap();
    let err = ServedGateway::try_start(&file).await.err().expect("an empty file is refused");
    assert!(err.contains("tasks.redb is empty") && err.contains("backup"), "{err}");

    // Bytes changed inside the file (a stray write, bit rot): refused, naming the file and the way out.
    // The change falls inside a task's stored text, in the middle of the file, as rot would.
    std::fs::write(&db, &intact).unwrap();
    let text = "x".repeat(200);
    let half = intact.len() / 2;
    let at =
        intact[half..].windows(200).position(|w| w == text.as_bytes()).map(|i| half + i + 50).expect("a task's text");
    overwrite(&db, at as u64, &[b'Z'; 64]);
    let err = ServedGateway::try_start(&file).await.err().expect("a damaged file is refused");
    assert!(err.contains("tasks.redb") && err.contains("damaged") && err.contains("taskgate store repair"), "{err}");
    let (code, report) = store_command("check", &data);
    assert_eq!(code, 1, "{report}");
    assert!(report.contains("integrity: damaged"), "{report}");
    // redb's panics are caught and reported one line each, naming the table: none is printed.
    assert!(!report.contains("panicked") && !report.contains("backtrace"), "{report}");

    // Repaired: the damaged file is kept, every task that reads is back, the gateway starts.
    let (code, report) = store_command("repair", &data);
    assert_eq!(code, 0, "{report}");
    assert!(report.contains("the damaged file is kept as") && report.contains("tasks.redb.damaged-"), "{report}");
    assert!(!report.contains("panicked") && !report.contains("backtrace"), "{report}");
    let gw = ServedGateway::start(&file).await;
    let mut c = McpClient::with_bearer(&gw.url, ACME);
    c.initialize().await;
    let listed = list_all(&mut c).await.unwrap();
    assert!((290..=300).contains(&listed), "{listed} of 300 tasks salvaged\n{report}");
    gw.kill().await;
}

#[actix_rt::test]
async fn damage_under_a_running_gateway_fails_the_requests_that_touch_it_and_every_session_goes_on() {
    let demo = DemoUpstream::start();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let file = dir.path().join("taskgate.toml");
    // No page cache: every read goes to the file, as a read of a page not cached would.
    std::fs::write(&file, config(&demo, &data, 0)).unwrap();
    let gw = ServedGateway::start(&file).await;
    let mut a = McpClient::with_bearer(&gw.url, ACME);
    a.initialize().await;
    let mut b = McpClient::with_bearer(&gw.url, GLOBEX);
    b.initialize().await;
    tasks(&mut a, 200).await;
    tasks(&mut b, 200).await;
    assert_eq!(list_all(&mut a).await.unwrap(), 200);
    let http = reqwest::Client::new();
    let base = gw.url.trim_end_matches("/mcp").to_owned();
    assert_eq!(http.get(format!("{base}/readyz")).send().await.unwrap().status(), 200);

    // Every page after the first few is zeroed under the running process.
    let db = data.join("tasks.redb");
    let len = std::fs::metadata(&db).unwrap().len();
    for at in (16_384..len).step_by(4096) {
        overwrite(&db, at, &[0; 4096]);
    }

    // Listing reads the damaged pages: an error naming the store, for that request only.
    let error = list_all(&mut a).await.expect_err("the damaged pages cannot be read");
    assert_eq!(error.code, -32002, "{error:?}");
    assert!(error.message.contains("tasks.redb") && error.message.contains("damaged"), "{error:?}");
    assert_eq!(error.data.as_ref().unwrap()["component"], "task_store", "{error:?}");
    // The session that got the error, and every other one, go on.
    for c in [&mut a, &mut b] {
        assert_eq!(c.request("ping", None).await.outcome().unwrap(), json!({}));
        let echoed = c.call("demo__echo", json!({"text": "still here"})).await.unwrap();
        assert_eq!(echoed["content"][0]["text"], "still here");
    }
    let mut fresh = McpClient::with_bearer(&gw.url, GLOBEX);
    fresh.initialize().await;
    assert_eq!(fresh.request("ping", None).await.outcome().unwrap(), json!({}));

    // The operator is told: /readyz and taskgate_store_up.
    let ready = http.get(format!("{base}/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 503);
    let body: serde_json::Value = ready.json().await.unwrap();
    let why = body["store"]["error"].as_str().unwrap_or_default().to_owned();
    assert!(why.contains("damaged") && why.contains("taskgate store repair"), "{body}");
    let metrics = http.get(format!("{base}/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.lines().any(|l| l == "taskgate_store_up 0"), "{metrics}");
    gw.kill().await;
}
