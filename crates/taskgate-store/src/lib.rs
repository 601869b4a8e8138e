//! Task state, behind the [`TaskStore`] interface (architecture invariant 8: anything a second
//! replica would need lives here, not only in an actor).
//!
//! - [`TaskRecord`]: one task: owner, status, times, ttl, the upstream that runs it, its outcome.
//! - [`TaskStore`]: async operations; status changes are compare-and-set and checked by the one
//!   transition rule ([`taskgate_protocol::tasks::transition`]).
//! - [`MemoryTaskStore`]: one process, nothing kept across restarts (tests).
//! - [`FileTaskStore`]: the default: an embedded, crash-safe database file (redb); a record is
//!   on disk (fsynced) before the operation that wrote it returns.
//! - [`RedisTaskStore`]: shared by many replicas: records, indexes and leases in Redis, and
//!   [`StoreEvent`]s between replicas over pub/sub.
//!
//! Records are encoded as JSON (serde): readable with any tool, and new fields can be added
//! with defaults without migrating old files.

#[cfg(test)]
mod conformance;
mod file;
mod listing;
mod memory;
mod operator_view;
mod owner;
mod redis;
mod session_records;
#[doc(hidden)]
pub mod testing;

#[cfg(test)]
mod memory_conformance {
    crate::store_conformance!(crate::MemoryTaskStore::new);

    #[test]
    fn session_records_keep_changes_until_deleted() {
        let s = crate::MemoryTaskStore::new(10);
        crate::conformance::run(crate::conformance::session_records_keep_changes_until_deleted(&s));
    }

    #[test]
    fn activations_are_a_bounded_set_per_key() {
        let s = crate::MemoryTaskStore::new(10);
        crate::conformance::run(crate::conformance::activations_are_a_bounded_set_per_key(&s));
    }

    #[test]
    fn every_session_record_is_listed_once() {
        let s = crate::MemoryTaskStore::new(10);
        crate::conformance::run(crate::conformance::every_session_record_is_listed_once(&s));
    }

    #[test]
    fn orphans_are_claimed_once_and_terminal_tasks_never() {
        let s = crate::MemoryTaskStore::new(10);
        crate::conformance::run(crate::conformance::orphans_are_claimed_once_and_terminal_tasks_never(&s));
    }
}

#[cfg(test)]
mod redis_conformance {
    use std::sync::OnceLock;

    use crate::testing::RedisServer;

    /// One server for these tests; each store gets a key prefix of its own.
    fn server() -> &'static RedisServer {
        static SERVER: OnceLock<RedisServer> = OnceLock::new();
        SERVER.get_or_init(RedisServer::start)
    }

    fn store(max_tasks: usize) -> crate::RedisTaskStore {
        let prefix = format!("t{}:", uuid_like());
        crate::RedisTaskStore::open(&server().url, &prefix, max_tasks, 10_000, std::time::Duration::from_secs(5))
            .unwrap()
    }

    fn uuid_like() -> u64 {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        NEXT.fetch_add(1, Ordering::Relaxed)
    }

    crate::store_conformance!(store);

    #[test]
    fn session_records_keep_changes_until_deleted() {
        crate::conformance::run(async {
            crate::conformance::session_records_keep_changes_until_deleted(&store(10)).await
        });
    }

    #[test]
    fn every_session_record_is_listed_once() {
        crate::conformance::run(async { crate::conformance::every_session_record_is_listed_once(&store(10)).await });
    }

    #[test]
    fn activations_are_a_bounded_set_per_key_and_expire() {
        crate::conformance::run(async {
            let s = store(10);
            crate::conformance::activations_are_a_bounded_set_per_key(&s).await;
            let client = redis::Client::open(server().url.as_str()).unwrap();
            let mut c = client.get_multiplexed_async_connection().await.unwrap();
            let key = format!("{}activated:acme/ada/", s.prefix());
            let ttl: i64 = redis::AsyncCommands::pttl(&mut c, &key).await.unwrap();
            assert!(ttl > 0 && ttl <= 60_000, "{ttl}");
            // Read, they are kept longer.
            let read = crate::TaskStore::activated(&s, "acme/ada/", 120_000).await.unwrap();
            assert_eq!(read.len(), crate::MAX_ACTIVATED);
            let ttl: i64 = redis::AsyncCommands::pttl(&mut c, &key).await.unwrap();
            assert!(ttl > 60_000 && ttl <= 120_000, "{ttl}");
        });
    }

    #[test]
    fn a_session_records_expiry_moves_when_touched_and_its_subscriptions_are_bounded() {
        use crate::conformance::{run, session_record};
        use crate::{SessionChange, TaskStore};
        run(async {
            let s = store(100);
            s.put_session("e", &session_record("p"), 150).await.unwrap();
            s.put_session("k", &session_record("p"), 150).await.unwrap();
            // Touched: its expiry moves; the other one's does not.
            assert!(s.change_session("k", SessionChange::Touch, 60_000).await.unwrap());
            let client = redis::Client::open(server().url.as_str()).unwrap();
            let c = client.get_multiplexed_async_connection().await.unwrap();
            let ttl = |key: &'static str| {
                let (mut c, key) = (c.clone(), format!("{}session:{key}", s.prefix()));
                async move { redis::AsyncCommands::pttl::<_, i64>(&mut c, key).await.unwrap() }
            };
            // Redis expires the untouched one on its own clock at its PTTL.
            let (e, k) = (ttl("e").await, ttl("k").await);
            assert!((0..=150).contains(&e) && k > 150, "{e} {k}");
            // Activations are no subscriptions: they take none of the bound.
            s.change_session("k", SessionChange::Activate(vec!["a__b".into()]), 60_000).await.unwrap();
            for n in 0..crate::MAX_SUBSCRIPTIONS + 5 {
                s.change_session("k", SessionChange::Subscribe(format!("u://{n}")), 60_000).await.unwrap();
            }
            let record = s.session("k").await.unwrap().unwrap();
            assert_eq!((record.subscriptions.len(), record.activated.len()), (crate::MAX_SUBSCRIPTIONS, 1));
        });
    }

    #[test]
    fn a_task_is_an_orphan_once_its_lease_lapses_and_is_claimed_once() {
        use crate::conformance::{owner, record, run};
        use crate::TaskStore;
        run(async {
            let s = store(100);
            let prefix = s.prefix().to_owned();
            s.create(record("n", owner("p"), 0, None)).await.unwrap();
            s.create(record("w", owner("p"), 1, None)).await.unwrap();
            // Leases held by r1: nothing to take.
            assert!(s.claim_orphans("r2", 0).await.unwrap().is_empty());
            assert!(s.renew_leases("r1", &["n".into(), "w".into()]).await.unwrap().is_empty());
            // Its leases end (their score set in the past, as time would) while r1 is cut off from
            // Redis; no one takes them meanwhile: r1's renewal keeps them.
            let client = redis::Client::open(server().url.as_str()).unwrap();
            let mut c = client.get_multiplexed_async_connection().await.unwrap();
            let leases = format!("{prefix}leases");
            let lapse = |c: &mut redis::aio::MultiplexedConnection| {
                let mut c = c.clone();
                let leases = leases.clone();
                async move {
                    let _: i64 =
                        redis::AsyncCommands::zadd_multiple(&mut c, leases, &[(0, "n"), (0, "w")]).await.unwrap();
                }
            };
            lapse(&mut c).await;
            assert!(s.renew_leases("r1", &["n".into(), "w".into()]).await.unwrap().is_empty());
            assert!(s.claim_orphans("r2", 0).await.unwrap().is_empty());
            // r1 dies: its leases end, and r2 takes the tasks over.
            lapse(&mut c).await;
            let mut claimed: Vec<String> = s.claim_orphans("r2", 0).await.unwrap().into_iter().map(|r| r.id).collect();
            claimed.sort();
            assert_eq!(claimed, ["n", "w"]);
            assert_eq!(s.get("n").await.unwrap().unwrap().replica.as_deref(), Some("r2"));
            assert!(s.claim_orphans("r3", 0).await.unwrap().is_empty(), "claimed once");
            // r1 comes back: it no longer holds them, r2 does.
            let mut lost = s.renew_leases("r1", &["n".into(), "w".into()]).await.unwrap();
            lost.sort();
            assert_eq!(lost, ["n", "w"]);
            assert!(s.renew_leases("r2", &["n".into(), "w".into()]).await.unwrap().is_empty());
            // A terminal task holds no lease and is never an orphan.
            let done = crate::Update {
                status: taskgate_protocol::tasks::TaskStatus::Completed,
                status_message: None,
                outcome: None,
                upstream_task_id: None,
                upstream_session: None,
                now_ms: 2,
            };
            s.compare_and_set("n", taskgate_protocol::tasks::TaskStatus::Working, done).await.unwrap();
            assert_eq!(s.renew_leases("r2", &["n".into()]).await.unwrap(), ["n"]);
        });
    }

    #[test]
    fn input_requests_are_kept_per_task_until_answered_deleted_or_their_time_is_up() {
        use crate::conformance::{owner, record, run};
        use crate::TaskStore;
        use serde_json::json;
        run(async {
            let s = store(100);
            s.create(record("a", owner("p"), 0, None)).await.unwrap();
            s.create(record("b", owner("p"), 1, None)).await.unwrap();
            assert!(s.inputs("a").await.unwrap().is_empty());
            let ask = json!({ "method": "elicitation/create", "params": { "message": "name?" } });
            s.put_input("a", "k1", &ask, 60_000).await.unwrap();
            s.put_input("a", "k2", &json!({ "method": "roots/list" }), 60_000).await.unwrap();
            s.put_input("b", "k1", &ask, 60_000).await.unwrap();
            assert_eq!(
                s.inputs("a").await.unwrap(),
                [("k1".into(), ask.clone()), ("k2".into(), json!({ "method": "roots/list" }))]
            );
            // Answered: gone; the other task's are its own.
            s.remove_inputs("a", &["k1".into(), "unknown".into()]).await.unwrap();
            assert_eq!(s.inputs("a").await.unwrap().len(), 1);
            assert_eq!(s.inputs("b").await.unwrap().len(), 1);
            // All of them at once.
            s.remove_inputs("a", &[]).await.unwrap();
            assert!(s.inputs("a").await.unwrap().is_empty());
            // Deleting the task deletes them.
            s.delete("b").await.unwrap();
            assert!(s.inputs("b").await.unwrap().is_empty());
            // Bounded in time: Redis forgets them after keep_ms.
            s.put_input("a", "k3", &ask, 1).await.unwrap();
            let client = redis::Client::open(server().url.as_str()).unwrap();
            let mut c = client.get_multiplexed_async_connection().await.unwrap();
            let ttl: i64 = redis::AsyncCommands::pttl(&mut c, format!("{}inputs:a", s.prefix())).await.unwrap();
            assert!(ttl <= 1, "the hash expires within keep_ms: pttl {ttl}");
        });
    }

    #[test]
    fn caps_count_reservations_and_live_tasks_until_they_end() {
        use crate::conformance::{owner, record, run};
        use crate::{CapRefused, Caps, TaskStore};
        run(async {
            let s = store(100);
            let caps = Caps { tenant: Some(3), principal: Some(2) };
            let (alice, bob) = (owner("alice"), owner("bob"));
            assert_eq!(s.reserve(&alice, "a1", caps, 60_000).await.unwrap(), Ok(()));
            assert_eq!(s.reserve(&alice, "a2", caps, 60_000).await.unwrap(), Ok(()));
            assert_eq!(s.reserve(&alice, "a3", caps, 60_000).await.unwrap(), Err(CapRefused::Principal));
            assert_eq!(s.reserve(&bob, "b1", caps, 60_000).await.unwrap(), Ok(()));
            assert_eq!(s.reserve(&bob, "b2", caps, 60_000).await.unwrap(), Err(CapRefused::Tenant));
            // A created task counts until it is terminal; a released reservation frees its place.
            s.create(record("a1", alice.clone(), 0, None)).await.unwrap();
            s.release(&bob, "b1").await.unwrap();
            assert_eq!(s.reserve(&bob, "b2", caps, 60_000).await.unwrap(), Ok(()));
            assert_eq!(s.reserve(&bob, "b3", caps, 60_000).await.unwrap(), Err(CapRefused::Tenant));
            let done = crate::Update {
                status: taskgate_protocol::tasks::TaskStatus::Failed,
                status_message: None,
                outcome: None,
                upstream_task_id: None,
                upstream_session: None,
                now_ms: 1,
            };
            s.compare_and_set("a1", taskgate_protocol::tasks::TaskStatus::Working, done).await.unwrap();
            assert_eq!(s.reserve(&bob, "b3", caps, 60_000).await.unwrap(), Ok(()));
            // A reservation whose time ran out (its replica died before creating the task) lapses.
            assert_eq!(
                s.reserve(&owner("carol"), "c1", Caps { tenant: None, principal: Some(1) }, 0).await.unwrap(),
                Ok(())
            );
            assert_eq!(
                s.reserve(&owner("carol"), "c2", Caps { tenant: None, principal: Some(1) }, 60_000).await.unwrap(),
                Ok(())
            );
        });
    }

    #[test]
    fn rates_are_one_gcra_bucket_for_every_replica_and_refusals_take_nothing() {
        use crate::conformance::run;
        use crate::{RateBucket, TaskStore};
        run(async {
            // Two stores on one Redis, as two replicas.
            let a = store(10);
            let b =
                crate::RedisTaskStore::open(&server().url, a.prefix(), 10, 10_000, std::time::Duration::from_secs(5))
                    .unwrap();
            let tenant = RateBucket { name: "acme".into(), per_second: 0.001, burst: 3 };
            let principal = RateBucket { name: "acme/ci".into(), per_second: 0.001, burst: 5 };
            let both = [tenant.clone(), principal.clone()];
            assert_eq!(a.admit_rates(&both).await.unwrap(), None);
            assert_eq!(b.admit_rates(&both).await.unwrap(), None);
            assert_eq!(a.admit_rates(&both).await.unwrap(), None);
            let (index, retry) = b.admit_rates(&both).await.unwrap().expect("the fourth is refused");
            assert_eq!(index, 0, "the tenant's bucket refuses");
            assert!(retry > 900_000, "{retry}");
            // The refusal took nothing from the principal's bucket: two more fit there.
            assert_eq!(a.admit_rates(std::slice::from_ref(&principal)).await.unwrap(), None);
            assert_eq!(a.admit_rates(std::slice::from_ref(&principal)).await.unwrap(), None);
            assert_eq!(a.admit_rates(std::slice::from_ref(&principal)).await.unwrap().map(|(i, _)| i), Some(0));
        });
    }

    #[test]
    fn only_tasks_whose_lease_ended_are_claimed_and_more_than_a_batch_of_them() {
        use crate::conformance::{owner, record, run};
        use crate::TaskStore;
        run(async {
            let s = store(10_000);
            for i in 0..530 {
                s.create(record(&format!("t{i:03}"), owner("p"), i, None)).await.unwrap();
            }
            // The leases of t000..t519 end (a dead replica's); t520..t529 stay held.
            let client = redis::Client::open(server().url.as_str()).unwrap();
            let mut c = client.get_multiplexed_async_connection().await.unwrap();
            let ended: Vec<(i64, String)> = (0..520).map(|i| (0, format!("t{i:03}"))).collect();
            let _: i64 =
                redis::AsyncCommands::zadd_multiple(&mut c, format!("{}leases", s.prefix()), &ended).await.unwrap();
            let claimed = s.claim_orphans("r2", 0).await.unwrap();
            assert_eq!(claimed.len(), 520);
            assert!(claimed.iter().all(|r| r.replica.as_deref() == Some("r2")));
            assert!(s.claim_orphans("r3", 0).await.unwrap().is_empty());
        });
    }

    #[test]
    fn an_unreachable_redis_is_a_clear_error_that_never_shows_the_password() {
        use crate::conformance::{owner, record, run};
        use crate::TaskStore;
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        run(async {
            let url = format!("redis://:hunter2@127.0.0.1:{port}/0");
            let s = crate::RedisTaskStore::open(&url, "x:", 10, 1000, std::time::Duration::from_millis(500)).unwrap();
            let e = s.create(record("a", owner("p"), 0, None)).await.unwrap_err();
            assert!(matches!(e, crate::StoreError::Unavailable(_)), "{e:?}");
            let text = e.to_string();
            assert!(text.contains(&format!("127.0.0.1:{port}")) && !text.contains("hunter2"), "{text}");
            assert!(s.health().await.is_err());
        });
    }
}

use std::future::Future;
use std::pin::Pin;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use taskgate_protocol::tasks::{InvalidTransition, TaskStatus, TaskView};
use taskgate_protocol::ErrorObject;

pub use file::{check_file, repair_file, FileTaskStore, Inspection};
pub use listing::{Leases, Page, SessionEntry, StoreInfo, TaskFilter};
pub use memory::MemoryTaskStore;
pub use operator_view::newest_first;
pub use owner::{Owner, UpstreamSessionRef};
pub use redis::{redact, RedisTaskStore};
pub use session_records::{SessionChange, SessionRecord, MAX_ACTIVATED, MAX_SUBSCRIPTIONS};

/// A boxed future, so the trait can be used as `dyn TaskStore`.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// How the underlying request ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum TaskOutcome {
    /// The request's result (for `tools/call`, a `CallToolResult`).
    Result(Value),
    /// The request's JSON-RPC error, returned unchanged by `tasks/result`.
    Error(ErrorObject),
}

/// One task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskRecord {
    /// The gateway's task id (a v4 UUID).
    pub id: String,
    /// The requestor it is bound to.
    pub owner: Owner,
    /// Current status.
    pub status: TaskStatus,
    /// Message about the status.
    pub status_message: Option<String>,
    /// Creation time, ms since the epoch.
    pub created_at_ms: u64,
    /// Last update, ms since the epoch.
    pub last_updated_at_ms: u64,
    /// Retention from creation; `None` is unlimited.
    pub ttl_ms: Option<u64>,
    /// Suggested polling interval.
    pub poll_interval_ms: u64,
    /// The upstream running it.
    pub upstream: String,
    /// The tool called (the upstream's own name for it).
    #[serde(default)]
    pub tool: String,
    /// The upstream's own task id, for native tasks. Never shown to clients.
    pub upstream_task_id: Option<String>,
    /// The upstream session a native task lives in, when it can be followed again from
    /// another process.
    #[serde(default)]
    pub upstream_session: Option<UpstreamSessionRef>,
    /// The gateway process (replica) running it, while it is not terminal.
    #[serde(default)]
    pub replica: Option<String>,
    /// The outcome, once terminal (cancelled tasks may have none).
    pub outcome: Option<TaskOutcome>,
}

impl TaskRecord {
    /// When the task may be deleted, ms since the epoch.
    pub fn expires_at_ms(&self) -> Option<u64> {
        self.ttl_ms.map(|ttl| self.created_at_ms.saturating_add(ttl))
    }

    /// The `Task` object clients see.
    pub fn view(&self) -> TaskView {
        TaskView {
            task_id: self.id.clone(),
            status: self.status,
            status_message: self.status_message.clone(),
            created_at_ms: self.created_at_ms,
            last_updated_at_ms: self.last_updated_at_ms,
            ttl_ms: self.ttl_ms,
            poll_interval_ms: Some(self.poll_interval_ms),
        }
    }
}

/// A status change.
#[derive(Debug, Clone, PartialEq)]
pub struct Update {
    /// The new status.
    pub status: TaskStatus,
    /// The new status message (`None` clears it).
    pub status_message: Option<String>,
    /// The outcome, when the new status is terminal.
    pub outcome: Option<TaskOutcome>,
    /// The upstream task id, when it becomes known.
    pub upstream_task_id: Option<String>,
    /// The upstream session its task can be followed in again, when it becomes known.
    pub upstream_session: Option<UpstreamSessionRef>,
    /// The time of the change, ms since the epoch.
    pub now_ms: u64,
}

/// One page of `tasks/list`.
#[derive(Debug, Clone, PartialEq)]
pub struct ListPage {
    /// The tasks, oldest first.
    pub tasks: Vec<TaskRecord>,
    /// The cursor of the next page.
    pub next_cursor: Option<String>,
}

/// Something one replica tells the others, through a shared store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum StoreEvent {
    /// The task is terminal or deleted: wake its `tasks/result` waiters (they read the store).
    #[serde(rename_all = "camelCase")]
    Finished {
        /// The task.
        task_id: String,
    },
    /// The task was cancelled in the store: the replica running it stops its upstream work.
    #[serde(rename_all = "camelCase")]
    Cancelled {
        /// The task.
        task_id: String,
    },
    /// `notifications/tasks/status` for the owner's sessions wherever they are.
    Status {
        /// Whose sessions.
        owner: Owner,
        /// The Task object.
        task: Value,
    },
    /// The replica running the task stored a new input request of it (see
    /// [`TaskStore::put_input`]): sessions of the owner waiting on the task elsewhere relay it.
    #[serde(rename_all = "camelCase")]
    InputRequested {
        /// Whose task.
        owner: Owner,
        /// The task.
        task_id: String,
    },
    /// Answers to a task's input requests given through another replica, for the replica
    /// running the task: JSON-RPC responses (or errors) whose ids are the requests' keys.
    #[serde(rename_all = "camelCase")]
    InputResponses {
        /// The task.
        task_id: String,
        /// The responses.
        responses: Vec<Value>,
    },
    /// Task progress (`notifications/progress` params) for the owner's sessions.
    #[serde(rename_all = "camelCase")]
    Progress {
        /// Whose sessions.
        owner: Owner,
        /// The task it is about.
        task_id: String,
        /// The notification's params, under the client's own token.
        params: Value,
    },
    /// A message for a client session's GET stream, made on a replica that does not hold the
    /// stream: the replica that holds it sends it.
    SessionMessage {
        /// The session.
        session: String,
        /// The JSON-RPC message, as the client gets it.
        message: String,
    },
    /// A client's message that no request on the replica receiving it was about (an answer
    /// to a request relayed by another replica, a cancellation or progress about a request
    /// another replica runs): the replica it is about takes it.
    SessionClient {
        /// The session.
        session: String,
        /// The JSON-RPC message, as the client sent it (JSON text).
        message: String,
    },
    /// The client ended the session (DELETE): every replica lets its copy go.
    SessionEnded {
        /// The session.
        session: String,
    },
    /// The session's log level or subscriptions changed: replicas serving it read its record.
    SessionChanged {
        /// The session.
        session: String,
    },
    /// The client opened its GET stream on the sending replica: one held elsewhere ends (one
    /// GET stream per session, so no message goes on two). Or (`open: false`) its last GET
    /// stream there ended.
    SessionStream {
        /// The session.
        session: String,
        /// Opened, or ended.
        #[serde(default = "opened")]
        open: bool,
    },
    /// A 2026-07-28 client's retry of a request that got `input_required` at `replica`, sent
    /// to another replica: `replica` holds the exchange, serves the retry and sends its answer
    /// back in [`StoreEvent::RetryReply`] events.
    RetryForwarded {
        /// The replica holding the exchange.
        replica: String,
        /// Names the waiting client at the sending replica.
        relay: String,
        /// Who retries, as the sending replica authenticated them.
        tenant: String,
        /// Who retries.
        principal: String,
        /// The client's request (JSON text), its per-request `_meta` fields taken out.
        request: String,
    },
    /// Part of the answer to a forwarded retry, for the replica where its client waits.
    RetryReply {
        /// The replica where the client waits.
        replica: String,
        /// The waiting client there.
        relay: String,
        /// Counts the parts of one answer from 0: a gap means a part was lost.
        seq: u64,
        /// What the part is.
        part: RetryPart,
    },
    /// The client of a forwarded retry went away: the replica serving it drops the answer (as
    /// closing the response stream there would: the request is cancelled).
    RetryClosed {
        /// The replica serving the retry.
        replica: String,
        /// The waiting client that went away.
        relay: String,
    },
    /// A 2026-07-28 client activated tools in search mode (recorded with
    /// [`TaskStore::activate`]): its listen streams at that endpoint, wherever they are, are
    /// told its tool list changed.
    IdentityActivated {
        /// Whose.
        owner: Owner,
        /// The profile whose endpoint (`None`: `/mcp`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        profile: Option<String>,
    },
    /// An operator restarted an upstream's processes: every replica stops those it runs.
    UpstreamRestart {
        /// The upstream.
        upstream: String,
    },
}

/// One part of the answer to a forwarded retry ([`StoreEvent::RetryReply`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RetryPart {
    /// The replica holding the exchange took the retry.
    Accepted,
    /// The answer's HTTP status and content type.
    Head {
        /// HTTP status.
        status: u16,
        /// `Content-Type`.
        content_type: String,
    },
    /// Bytes of the answer's body.
    Body(String),
    /// The answer is whole.
    End,
}

fn opened() -> bool {
    true
}

/// A tenant's caps on tasks not yet terminal (`None`: no cap).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Caps {
    /// Per tenant.
    pub tenant: Option<usize>,
    /// Per principal.
    pub principal: Option<usize>,
}

/// Which cap refused a reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapRefused {
    /// The tenant's.
    Tenant,
    /// The principal's.
    Principal,
}

/// One rate bucket, shared by every replica.
#[derive(Debug, Clone, PartialEq)]
pub struct RateBucket {
    /// Its name (unique per tenant, principal and kind).
    pub name: String,
    /// Sustained rate.
    pub per_second: f64,
    /// Requests admitted at once.
    pub burst: u32,
}

/// An event with the replica that sent it (a replica ignores its own).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventEnvelope {
    /// The sending replica.
    pub from: String,
    /// What it says.
    pub event: StoreEvent,
}

/// What a store operation can fail with.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StoreError {
    /// No such task (or it expired).
    #[error("task not found")]
    NotFound,
    /// Compare-and-set failed: the task is no longer in the expected status.
    #[error("the task is now '{current}'")]
    Conflict {
        /// The status it has.
        current: TaskStatus,
    },
    /// The transition is not allowed by the task lifecycle.
    #[error("{0}")]
    Invalid(InvalidTransition),
    /// The cursor was not issued by this store.
    #[error("invalid cursor")]
    BadCursor,
    /// The store holds its maximum number of tasks.
    #[error("the gateway holds its maximum of {limit} tasks")]
    Full {
        /// The limit.
        limit: usize,
    },
    /// The storage backend cannot be reached or failed to answer; nothing was changed and the
    /// operation may be retried.
    #[error("{0}")]
    Unavailable(String),
    /// The storage backend failed.
    #[error("task store failure: {0}")]
    Backend(String),
    /// The store failed inside: its data is damaged (a database file changed under the
    /// process), or a backend panicked. The operation did nothing; those that touch the same
    /// data fail the same way until the store is repaired.
    #[error("{0}")]
    Failed(String),
}

/// Where task state lives.
pub trait TaskStore: Send + Sync + 'static {
    /// Stores a new task.
    fn create(&self, record: TaskRecord) -> StoreFuture<'_, ()>;
    /// The task, if it exists and has not expired.
    fn get<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<TaskRecord>>;
    /// Applies `update` if the task is still in `expected` and the lifecycle allows it.
    fn compare_and_set<'a>(&'a self, id: &'a str, expected: TaskStatus, update: Update) -> StoreFuture<'a, TaskRecord>;
    /// The owner's tasks after `cursor`, oldest first, at most `limit`.
    fn list<'a>(&'a self, owner: &'a Owner, cursor: Option<&'a str>, limit: usize) -> StoreFuture<'a, ListPage>;
    /// Removes every task whose ttl has elapsed at `now_ms`; returns them.
    fn expire(&self, now_ms: u64) -> StoreFuture<'_, Vec<TaskRecord>>;
    /// Removes one task.
    fn delete<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<TaskRecord>>;
    /// Hands `replica` the tasks that are not terminal and that no live replica runs (their
    /// replica stopped: the process restarted, or another replica died), and returns them. The
    /// caller follows each again or fails it. A task is handed out once.
    fn claim_orphans<'a>(&'a self, replica: &'a str, now_ms: u64) -> StoreFuture<'a, Vec<TaskRecord>>;
    /// Renews `replica`'s leases on the tasks it runs; returns those it no longer holds (the
    /// lease lapsed and another replica took the task, or the task ended elsewhere). Stores
    /// that are not shared hold no leases.
    fn renew_leases<'a>(&'a self, _replica: &'a str, _ids: &'a [String]) -> StoreFuture<'a, Vec<String>> {
        Box::pin(std::future::ready(Ok(Vec::new())))
    }
    /// Whether other gateway processes share this store (and its events).
    fn shared(&self) -> bool {
        false
    }
    /// How long a replica's claim on a task lasts without renewal, for a shared store.
    fn lease_ms(&self) -> Option<u64> {
        None
    }
    /// Tells the other replicas something (a shared store); nothing to do otherwise.
    fn publish(&self, _event: EventEnvelope) -> StoreFuture<'_, ()> {
        Box::pin(std::future::ready(Ok(())))
    }
    /// What the other replicas publish, from now on (a shared store).
    fn subscribe(&self) -> Option<tokio::sync::mpsc::Receiver<EventEnvelope>> {
        None
    }
    /// Reserves a place for a task under its tenant's caps across every replica, before
    /// anything reaches the upstream; held `hold_ms` unless the task is created meanwhile, in
    /// which case it counts until the task is terminal or deleted. Only shared stores count
    /// (a single process counts in memory); others admit.
    fn reserve<'a>(
        &'a self,
        _owner: &'a Owner,
        _task_id: &'a str,
        _caps: Caps,
        _hold_ms: u64,
    ) -> StoreFuture<'a, Result<(), CapRefused>> {
        Box::pin(std::future::ready(Ok(Ok(()))))
    }
    /// Gives back a reservation whose task was not created.
    fn release<'a>(&'a self, _owner: &'a Owner, _task_id: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(std::future::ready(Ok(())))
    }
    /// Admits one request in every bucket (GCRA, all or nothing) across every replica, or
    /// says which bucket (its index) refused and in how many ms it admits. Only shared stores.
    fn admit_rates<'a>(&'a self, _buckets: &'a [RateBucket]) -> StoreFuture<'a, Option<(usize, u64)>> {
        Box::pin(std::future::ready(Ok(None)))
    }
    /// Records an input request a task's upstream sent (an `elicitation/create`,
    /// `sampling/createMessage` or `roots/list` with its params), under its key, so any
    /// replica can list it; kept at most `keep_ms`. Only shared stores keep them: in one
    /// process the replica running the task holds them.
    fn put_input<'a>(
        &'a self,
        _task_id: &'a str,
        _key: &'a str,
        _request: &'a Value,
        _keep_ms: u64,
    ) -> StoreFuture<'a, ()> {
        Box::pin(std::future::ready(Ok(())))
    }
    /// Forgets a task's input requests with these keys (answered or withdrawn); all of them
    /// when `keys` is empty.
    fn remove_inputs<'a>(&'a self, _task_id: &'a str, _keys: &'a [String]) -> StoreFuture<'a, ()> {
        Box::pin(std::future::ready(Ok(())))
    }
    /// A task's input requests not answered yet, by key (shared stores).
    fn inputs<'a>(&'a self, _task_id: &'a str) -> StoreFuture<'a, Vec<(String, Value)>> {
        Box::pin(std::future::ready(Ok(Vec::new())))
    }
    /// Keeps a new client session's record for `keep_ms` (0: until deleted), so that any
    /// replica can serve the session. Only shared stores keep sessions: in one process the
    /// session table is the record.
    fn put_session<'a>(&'a self, _id: &'a str, _record: &'a SessionRecord, _keep_ms: u64) -> StoreFuture<'a, ()> {
        Box::pin(std::future::ready(Ok(())))
    }
    /// A session's record, if it exists and has not expired.
    fn session<'a>(&'a self, _id: &'a str) -> StoreFuture<'a, Option<SessionRecord>> {
        Box::pin(std::future::ready(Ok(None)))
    }
    /// Applies `change` to a session's record and keeps it `keep_ms` more (0: until
    /// deleted); whether the session still exists.
    fn change_session<'a>(&'a self, _id: &'a str, _change: SessionChange, _keep_ms: u64) -> StoreFuture<'a, bool> {
        Box::pin(std::future::ready(Ok(false)))
    }
    /// Forgets a session; whether it existed.
    fn delete_session<'a>(&'a self, _id: &'a str) -> StoreFuture<'a, bool> {
        Box::pin(std::future::ready(Ok(false)))
    }
    /// Adds `names` to the tools activated in search mode under `key` (a 2026-07-28 client's
    /// identity at one endpoint), at most [`MAX_ACTIVATED`] in all, and keeps them `keep_ms`
    /// more (0: no expiry). The gateway asks shared stores only: in one process the pooled
    /// session holds them.
    fn activate<'a>(&'a self, _key: &'a str, _names: &'a [String], _keep_ms: u64) -> StoreFuture<'a, ()> {
        Box::pin(std::future::ready(Ok(())))
    }
    /// The tools activated under `key`, sorted, kept `keep_ms` more (0: as they were): a client
    /// that lists its tools keeps its activations.
    fn activated<'a>(&'a self, _key: &'a str, _keep_ms: u64) -> StoreFuture<'a, Vec<String>> {
        Box::pin(std::future::ready(Ok(Vec::new())))
    }
    /// Every task matching `filter`, newest first, after `cursor`, at most `limit` (the
    /// operator's view; a whole scan of the store).
    fn scan_tasks<'a>(
        &'a self,
        _filter: &'a TaskFilter,
        _cursor: Option<&'a str>,
        _limit: usize,
    ) -> StoreFuture<'a, Page<TaskRecord>> {
        Box::pin(std::future::ready(Err(StoreError::Backend("this store cannot list every task".into()))))
    }
    /// Every session record after `cursor` (shared stores; the others keep none).
    fn scan_sessions<'a>(&'a self, _cursor: Option<&'a str>, _limit: usize) -> StoreFuture<'a, Page<SessionEntry>> {
        Box::pin(std::future::ready(Ok(Page { items: Vec::new(), next_cursor: None })))
    }
    /// What the store is and holds.
    fn describe(&self) -> StoreFuture<'_, StoreInfo> {
        let info = StoreInfo {
            backend: "custom",
            location: String::new(),
            shared: self.shared(),
            tasks: self.len(),
            leases: None,
        };
        Box::pin(std::future::ready(Ok(info)))
    }
    /// Whether the backend answers now (for `/readyz`).
    fn health(&self) -> StoreFuture<'_, ()> {
        Box::pin(std::future::ready(Ok(())))
    }
    /// Tasks held now.
    fn len(&self) -> usize;
    /// Gives back memory held for tasks that are gone (after a burst). Optional.
    fn compact(&self) {}
    /// True when no task is held.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Applies a status change to a record if it is still in `expected` and the lifecycle allows
/// it (the one transition rule): every backend's compare-and-set.
pub(crate) fn apply_update(record: &mut TaskRecord, expected: TaskStatus, update: Update) -> Result<(), StoreError> {
    if record.status != expected {
        return Err(StoreError::Conflict { current: record.status });
    }
    taskgate_protocol::tasks::transition(record.status, update.status).map_err(StoreError::Invalid)?;
    record.status = update.status;
    record.status_message = update.status_message;
    record.last_updated_at_ms = update.now_ms.max(record.last_updated_at_ms);
    if update.outcome.is_some() {
        record.outcome = update.outcome;
    }
    if update.upstream_task_id.is_some() {
        record.upstream_task_id = update.upstream_task_id;
    }
    if update.upstream_session.is_some() {
        record.upstream_session = update.upstream_session;
    }
    if record.status.is_terminal() {
        record.replica = None;
    }
    Ok(())
}

/// A `tasks/list` cursor: the position (creation time, id) of the last task returned, so it
/// stays valid while tasks are created and deleted.
pub(crate) fn encode_cursor(created: u64, id: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("tasks:{created}:{id}"))
}

/// The position in a cursor issued by [`encode_cursor`].
pub(crate) fn decode_cursor(cursor: &str) -> Option<(u64, String)> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(cursor).ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let (created, id) = text.strip_prefix("tasks:")?.split_once(':')?;
    Some((created.parse().ok()?, id.to_owned()))
}
