//! Section 3's floor: what a live task costs in the shape DESIGN gives it (a durable record,
//! its own actor with a ttl timer, a call waiting for the upstream's answer), built from the
//! same libraries with none of the gateway's logic, in a process of its own
//! (`taskgate-bench --task-floor N`). Each step adds one part to N tasks and reports the
//! resident memory a task costs so far.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use taskgate_protocol::tasks::TaskStatus;
use taskgate_store::{MemoryTaskStore, Owner, TaskRecord, TaskStore};
use tokio::sync::oneshot;

/// One task's actor: its id, and a ttl timer as the gateway's task actors have.
struct Floor {
    _id: Arc<str>,
}

impl Actor for Floor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.set_mailbox_capacity(64);
        ctx.run_later(Duration::from_secs(3600), |_, ctx| ctx.stop());
    }
}

/// Answered once the actor has run `started`.
struct Started;

impl Message for Started {
    type Result = ();
}

impl Handler<Started> for Floor {
    type Result = ();

    fn handle(&mut self, _: Started, _: &mut Context<Self>) {}
}

fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64
}

/// Prints `record=B actor=B call=B`: the resident bytes per task after each step.
pub async fn run(n: usize) -> anyhow::Result<()> {
    let replica: String = uuid_like(0);
    let base = rss();
    // 1. The record in the memory store, with the fields section 3's tasks have.
    let store = MemoryTaskStore::new(n * 2);
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        let id = uuid_like(i + 1);
        let record = TaskRecord {
            id: id.clone(),
            owner: Owner { tenant: "default".into(), principal: "anonymous".into() },
            status: TaskStatus::Working,
            status_message: None,
            created_at_ms: 1,
            last_updated_at_ms: 1,
            ttl_ms: Some(30_000),
            poll_interval_ms: 1000,
            upstream: "local".into(),
            tool: "wait".into(),
            upstream_task_id: None,
            upstream_session: None,
            replica: Some(replica.clone()),
            outcome: None,
        };
        store.create(record).await?;
        ids.push(Arc::<str>::from(id));
    }
    let records = rss();
    // 2. An actor per task, with its ttl timer, kept in a table as the gateway keeps them.
    let mut actors = HashMap::with_capacity(n);
    for id in &ids {
        actors.insert(id.clone(), Floor { _id: id.clone() }.start());
    }
    for addr in actors.values() {
        addr.send(Started).await?;
    }
    let started = rss();
    // 3. A call per task waiting for its answer: a task awaiting a channel the reader of the
    // upstream's replies answers through, from a table of pending requests.
    let mut pending = HashMap::with_capacity(n);
    for (i, id) in ids.iter().enumerate() {
        let (tx, rx) = oneshot::channel::<Vec<u8>>();
        pending.insert(i as i64, tx);
        let id = id.clone();
        actix::spawn(async move {
            let _answer = rx.await;
            drop(id);
        });
    }
    tokio::task::yield_now().await;
    for addr in actors.values() {
        addr.send(Started).await?;
    }
    let calling = rss();
    let per = |bytes: u64| bytes as f64 / n as f64;
    println!(
        "record={:.0} actor={:.0} call={:.0}",
        per(records.saturating_sub(base)),
        per(started.saturating_sub(records)),
        per(calling.saturating_sub(started))
    );
    drop((store, actors, pending));
    Ok(())
}

/// A 36-character id, as the gateway's v4 UUIDs are.
fn uuid_like(i: usize) -> String {
    format!("{:08x}-0000-4000-8000-{:012x}", i >> 16, i)
}
