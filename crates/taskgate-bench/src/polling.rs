//! Section 2: `tasks/get` polling load, against a fixed-response server.

use crate::harness::{connect, free_port, spawn_until, start_demo, start_gateway, verdict};
use crate::plan::Plan;
use anyhow::Result;
use futures_util::future::join_all;
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};
use taskgate_testkit::McpClient;
use tokio::process::Command;

pub(crate) async fn polling(plan: &Plan, bin: &Path) -> Result<()> {
    println!("## 2. Polling: tasks/get throughput");
    println!();
    let (_demo, demo_url) = start_demo(bin).await?;
    let (_gateway, gateway_url) =
        start_gateway(bin, &format!("[[upstream]]\nname = \"demo\"\ntransport = \"http\"\nurl = \"{demo_url}\"\n"))
            .await?;
    let mut client = connect(&gateway_url).await?;
    let created = client
        .request("tools/call", Some(json!({"name": "demo__wait", "arguments": {"gate": "never"}, "task": {}})))
        .await
        .outcome()
        .map_err(|e| anyhow::anyhow!("cannot create a task: {e:?}"))?;
    let task_id = created["task"]["taskId"].as_str().unwrap_or_default().to_owned();
    let poll = json!({"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"taskId": task_id}}).to_string();
    let sample = client.post_raw(poll.clone(), &[("accept", "application/json")]).await;
    let body = sample.response().to_json();

    // The practical limit of this stack: an actix-web handler answering the same body, in a
    // process of its own (as the gateway is).
    let fixed_port = free_port()?;
    let mut command = Command::new(std::env::current_exe()?);
    command.arg("--fixed-server").arg(fixed_port.to_string()).arg(&body);
    let (_fixed_process, _) = spawn_until(command, "fixed server listening").await?;
    let fixed_url = format!("http://127.0.0.1:{fixed_port}/mcp");
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.1", fixed_port)).is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut fixed = McpClient::new(&fixed_url);
    fixed.session = client.session.clone();
    let measure = |c: McpClient| tasks_get_rps(plan, c, task_id.clone());
    let _ = measure(client.clone()).await; // warm up
    let gateway_rps = measure(client.clone()).await;
    let fixed_rps = measure(fixed).await;
    let ratio = gateway_rps / fixed_rps;
    println!("| server | tasks/get throughput at {} clients |", plan.concurrency);
    println!("| --- | --- |");
    println!("| taskgate (the task in the store) | {gateway_rps:.0} req/s |");
    println!("| actix-web handler, same {} byte body | {fixed_rps:.0} req/s |", body.len());
    println!();
    println!("- ratio {:.2} (target ≥ 0.6: {})", ratio, verdict(ratio >= 0.6));
    println!();
    Ok(())
}

/// `tasks/get` of one task, `plan.concurrency` at a time: requests per second.
pub(crate) async fn tasks_get_rps(plan: &Plan, client: McpClient, task_id: String) -> f64 {
    let started = Instant::now();
    let per = plan.concurrent_total / plan.concurrency;
    let workers = (0..plan.concurrency).map(|w| {
        let c = client.clone();
        let task_id = task_id.clone();
        async move {
            for i in 0..per {
                // Each request in flight needs its own id.
                let id = (w * per + i) as i64 + 10;
                let poll = json!({"jsonrpc": "2.0", "id": id, "method": "tasks/get", "params": {"taskId": task_id}});
                let reply = c.post_raw(poll.to_string(), &[("accept", "application/json")]).await;
                assert_eq!(reply.status, 200, "{reply:?}");
            }
        }
    });
    join_all(workers).await;
    (per * plan.concurrency) as f64 / started.elapsed().as_secs_f64()
}
