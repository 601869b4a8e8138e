//! The behaviour every [`TaskStore`] backend must have, checked against each of them.

use std::future::Future;

use serde_json::json;
use taskgate_protocol::tasks::TaskStatus;

use crate::{StoreError, TaskOutcome, TaskStore, Update, UpstreamSessionRef};

pub(crate) use crate::testing::{owner, record};

fn update(status: TaskStatus, now: u64) -> Update {
    Update { status, status_message: None, outcome: None, upstream_task_id: None, upstream_session: None, now_ms: now }
}

pub(crate) fn cancel(now: u64) -> Update {
    update(TaskStatus::Cancelled, now)
}

/// Runs an async check to completion.
pub(crate) fn run<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
}

pub(crate) async fn compare_and_set_checks_expected_status_and_lifecycle(s: &dyn TaskStore) {
    s.create(record("a", owner("p"), 0, None)).await.unwrap();
    let done = Update { outcome: Some(TaskOutcome::Result(json!({"ok": true}))), ..update(TaskStatus::Completed, 5) };
    let r = s.compare_and_set("a", TaskStatus::Working, done).await.unwrap();
    assert_eq!((r.status, r.last_updated_at_ms, r.replica), (TaskStatus::Completed, 5, None));
    assert_eq!(s.get("a").await.unwrap().unwrap().outcome, Some(TaskOutcome::Result(json!({"ok": true}))));
    // A racing cancel that still expects `working` loses.
    assert_eq!(
        s.compare_and_set("a", TaskStatus::Working, update(TaskStatus::Cancelled, 6)).await,
        Err(StoreError::Conflict { current: TaskStatus::Completed })
    );
    // Terminal is final even when the expected status matches.
    assert!(matches!(
        s.compare_and_set("a", TaskStatus::Completed, update(TaskStatus::Working, 7)).await,
        Err(StoreError::Invalid(_))
    ));
    assert_eq!(
        s.compare_and_set("zz", TaskStatus::Working, update(TaskStatus::Failed, 1)).await,
        Err(StoreError::NotFound)
    );
}

pub(crate) async fn listing_is_per_owner_in_creation_order_with_cursors(s: &dyn TaskStore) {
    for i in 0..7 {
        s.create(record(&format!("a{i}"), owner("alice"), i, None)).await.unwrap();
    }
    s.create(record("b0", owner("bob"), 3, None)).await.unwrap();
    // An owner whose name starts like another's is another owner.
    s.create(record("c0", owner("alice2"), 1, None)).await.unwrap();
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = s.list(&owner("alice"), cursor.as_deref(), 3).await.unwrap();
        seen.extend(page.tasks.iter().map(|t| t.id.clone()));
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(seen, ["a0", "a1", "a2", "a3", "a4", "a5", "a6"]);
    assert_eq!(s.list(&owner("bob"), None, 10).await.unwrap().tasks.len(), 1);
    assert!(s.list(&owner("carol"), None, 10).await.unwrap().tasks.is_empty());
    assert_eq!(s.list(&owner("alice"), Some("bogus"), 3).await, Err(StoreError::BadCursor));
    // A page that ends exactly at the last task has no next cursor.
    let page = s.list(&owner("alice"), None, 7).await.unwrap();
    assert_eq!((page.tasks.len(), page.next_cursor), (7, None));
}

pub(crate) async fn expiry_removes_exactly_the_due_tasks_from_every_index(s: &dyn TaskStore) {
    s.create(record("short", owner("p"), 0, Some(100))).await.unwrap();
    s.create(record("long", owner("p"), 0, Some(1000))).await.unwrap();
    s.create(record("forever", owner("p"), 0, None)).await.unwrap();
    assert!(s.expire(99).await.unwrap().is_empty());
    let gone: Vec<_> = s.expire(100).await.unwrap().into_iter().map(|r| r.id).collect();
    assert_eq!(gone, ["short"]);
    assert_eq!(s.get("short").await.unwrap(), None);
    assert_eq!(s.list(&owner("p"), None, 10).await.unwrap().tasks.len(), 2);
    s.expire(u64::MAX).await.unwrap();
    assert_eq!(s.len(), 1);
    assert_eq!(s.delete("forever").await.unwrap().map(|r| r.id), Some("forever".into()));
    assert_eq!(s.delete("forever").await.unwrap(), None);
    assert!(s.is_empty());
}

pub(crate) async fn capacity_is_bounded(s: &dyn TaskStore) {
    s.create(record("a", owner("p"), 0, None)).await.unwrap();
    assert_eq!(s.create(record("b", owner("p"), 0, None)).await, Err(StoreError::Full { limit: 1 }));
    s.delete("a").await.unwrap();
    s.create(record("b", owner("p"), 0, None)).await.unwrap();
}

/// For stores of one process at a time (memory, file): every task not terminal that another
/// replica id left is an orphan.
pub(crate) async fn orphans_are_claimed_once_and_terminal_tasks_never(s: &dyn TaskStore) {
    let mut native = record("n", owner("p"), 0, None);
    native.upstream_task_id = Some("up-1".into());
    native.upstream_session =
        Some(UpstreamSessionRef { session_id: "s-1".into(), protocol_version: "2025-11-25".into() });
    s.create(native.clone()).await.unwrap();
    s.create(record("w", owner("p"), 1, None)).await.unwrap();
    s.create(record("done", owner("p"), 2, None)).await.unwrap();
    s.compare_and_set("done", TaskStatus::Working, update(TaskStatus::Completed, 3)).await.unwrap();
    // Its own tasks are not orphans for the replica running them.
    assert!(s.claim_orphans("r1", 10).await.unwrap().is_empty());
    let mut claimed = s.claim_orphans("r2", 10).await.unwrap();
    claimed.sort_by(|a, b| a.id.cmp(&b.id));
    assert_eq!(claimed.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(), ["n", "w"]);
    assert!(claimed.iter().all(|r| r.replica.as_deref() == Some("r2")));
    assert_eq!(claimed[0].upstream_session, native.upstream_session);
    assert!(s.claim_orphans("r2", 11).await.unwrap().is_empty());
}

/// A session record as `initialize` makes it.
pub(crate) fn session_record(principal: &str) -> crate::SessionRecord {
    crate::SessionRecord {
        owner: owner(principal),
        protocol_version: "2025-11-25".into(),
        capabilities: json!({"elicitation": {}}),
        client_info: json!({"name": "c", "version": "1"}),
        created_ms: 7,
        log_level: None,
        subscriptions: Vec::new(),
        upstream_sessions: Default::default(),
        stream: None,
        profile: None,
        activated: Vec::new(),
    }
}

pub(crate) async fn session_records_keep_changes_until_deleted(s: &dyn TaskStore) {
    use crate::SessionChange::*;
    assert_eq!(s.session("s1").await.unwrap(), None);
    assert!(!s.change_session("s1", Touch, 60_000).await.unwrap(), "no such session");
    assert!(!s.change_session("s1", Level("debug".into()), 60_000).await.unwrap());
    assert_eq!(s.session("s1").await.unwrap(), None, "a change makes no session");
    let record = session_record("p");
    s.put_session("s1", &record, 60_000).await.unwrap();
    s.put_session("s2", &session_record("q"), 60_000).await.unwrap();
    assert_eq!(s.session("s1").await.unwrap().as_ref(), Some(&record));
    assert!(s.change_session("s1", Touch, 60_000).await.unwrap());
    assert!(s.change_session("s1", Level("debug".into()), 60_000).await.unwrap());
    assert!(s.change_session("s1", Subscribe("b://x".into()), 60_000).await.unwrap());
    assert!(s.change_session("s1", Subscribe("a://y".into()), 60_000).await.unwrap());
    assert!(s.change_session("s1", Subscribe("a://y".into()), 60_000).await.unwrap());
    assert!(s.change_session("s1", Unsubscribe("c://never".into()), 60_000).await.unwrap());
    let changed = s.session("s1").await.unwrap().unwrap();
    assert_eq!(changed.log_level.as_deref(), Some("debug"));
    assert_eq!(changed.subscriptions, ["a://y", "b://x"]);
    assert_eq!((changed.owner, changed.capabilities), (record.owner.clone(), record.capabilities.clone()));
    assert!(s.change_session("s1", Unsubscribe("b://x".into()), 60_000).await.unwrap());
    assert_eq!(s.session("s1").await.unwrap().unwrap().subscriptions, ["a://y"]);
    let bound = crate::UpstreamSessionRef { session_id: "up-1".into(), protocol_version: "2025-11-25".into() };
    assert!(s.change_session("s1", Upstream("files".into(), bound.clone()), 60_000).await.unwrap());
    // The first binding stays: a copy that bound another learns it reading the record.
    let again = crate::UpstreamSessionRef { session_id: "up-2".into(), ..bound.clone() };
    assert!(s.change_session("s1", Upstream("files".into(), again), 60_000).await.unwrap());
    let read = s.session("s1").await.unwrap().unwrap();
    assert_eq!(read.upstream_sessions.into_iter().collect::<Vec<_>>(), [("files".to_owned(), bound)]);
    // The GET stream's replica: set, and forgotten only by the replica it names.
    assert!(s.change_session("s1", StreamAt("r1".into()), 60_000).await.unwrap());
    assert!(s.change_session("s1", StreamAt("r2".into()), 60_000).await.unwrap());
    assert!(s.change_session("s1", StreamGone("r1".into()), 60_000).await.unwrap());
    assert_eq!(s.session("s1").await.unwrap().unwrap().stream.as_deref(), Some("r2"));
    assert!(s.change_session("s1", StreamGone("r2".into()), 60_000).await.unwrap());
    assert_eq!(s.session("s1").await.unwrap().unwrap().stream, None);
    // Tools activated: a set, kept sorted, at most MAX_ACTIVATED of them.
    assert!(s.change_session("s1", Activate(vec!["b__x".into(), "a__y".into()]), 60_000).await.unwrap());
    assert!(s.change_session("s1", Activate(vec!["a__y".into()]), 60_000).await.unwrap());
    assert_eq!(s.session("s1").await.unwrap().unwrap().activated, ["a__y", "b__x"]);
    let many: Vec<String> = (0..crate::MAX_ACTIVATED).map(|n| format!("t{n:03}")).collect();
    assert!(s.change_session("s1", Activate(many), 60_000).await.unwrap());
    let read = s.session("s1").await.unwrap().unwrap();
    assert_eq!(read.activated.len(), crate::MAX_ACTIVATED);
    assert!(read.activated.starts_with(&["a__y".to_owned(), "b__x".to_owned()]));
    assert_eq!(read.subscriptions, ["a://y"], "activations are not subscriptions");
    assert!(!s.change_session("gone", Activate(vec!["a__y".into()]), 60_000).await.unwrap());
    // Another session is its own.
    assert_eq!(s.session("s2").await.unwrap().unwrap().log_level, None);
    assert!(s.delete_session("s1").await.unwrap());
    assert!(!s.delete_session("s1").await.unwrap());
    assert_eq!(s.session("s1").await.unwrap(), None);
    assert!(s.session("s2").await.unwrap().is_some());
}

/// Every session record is listed once, page after page.
pub(crate) async fn every_session_record_is_listed_once(s: &dyn TaskStore) {
    for i in 0..12 {
        s.put_session(&format!("s{i:02}"), &session_record("p"), 60_000).await.unwrap();
    }
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..100 {
        let page = s.scan_sessions(cursor.as_deref(), 5).await.unwrap();
        seen.extend(page.items.into_iter().map(|(id, record)| (id, record.owner.principal)));
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    seen.sort();
    let expected: Vec<(String, String)> = (0..12).map(|i| (format!("s{i:02}"), "p".to_owned())).collect();
    assert_eq!(seen, expected);
}

/// The operator's listing meets every task once, whatever the backend's page order, and
/// filters by tenant, principal, status and upstream.
pub(crate) async fn every_task_is_listed_once_and_filters_apply(s: &dyn TaskStore) {
    for i in 0..23u64 {
        let who = if i % 3 == 0 { "ann" } else { "bob" };
        let mut r = record(&format!("task{i:02}"), owner(who), 100 + i, None);
        r.upstream = if i % 2 == 0 { "files".into() } else { "time".into() };
        s.create(r).await.unwrap();
    }
    s.compare_and_set("task04", TaskStatus::Working, cancel(200)).await.unwrap();
    let all = |filter: crate::TaskFilter| async move {
        let mut seen = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..100 {
            let page = s.scan_tasks(&filter, cursor.as_deref(), 5).await.unwrap();
            assert!(page.items.iter().all(|r| filter.matches(r)));
            seen.extend(page.items.into_iter().map(|r| r.id));
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        seen.sort();
        seen
    };
    let every = all(crate::TaskFilter::default()).await;
    assert_eq!(every.len(), 23);
    assert_eq!(every.iter().collect::<std::collections::BTreeSet<_>>().len(), 23, "a task listed twice");
    let ann = all(crate::TaskFilter { principal: Some("ann".into()), ..Default::default() }).await;
    assert_eq!(ann, ["task00", "task03", "task06", "task09", "task12", "task15", "task18", "task21"]);
    let ann_files =
        crate::TaskFilter { principal: Some("ann".into()), upstream: Some("files".into()), ..Default::default() };
    assert_eq!(all(ann_files).await, ["task00", "task06", "task12", "task18"]);
    let cancelled = crate::TaskFilter { status: Some(TaskStatus::Cancelled), ..Default::default() };
    assert_eq!(all(cancelled).await, ["task04"]);
    assert!(all(crate::TaskFilter { tenant: Some("nobody".into()), ..Default::default() }).await.is_empty());
    assert_eq!(s.describe().await.unwrap().tasks, 23);
}

/// One test per check, for a backend made by `$store` (given the capacity).
#[macro_export]
#[doc(hidden)]
macro_rules! store_conformance {
    ($store:expr) => {
        #[test]
        fn every_task_is_listed_once_and_filters_apply() {
            $crate::conformance::run(async {
                $crate::conformance::every_task_is_listed_once_and_filters_apply(&$store(100)).await
            });
        }
        #[test]
        fn compare_and_set_checks_expected_status_and_lifecycle() {
            $crate::conformance::run(async {
                $crate::conformance::compare_and_set_checks_expected_status_and_lifecycle(&$store(100)).await
            });
        }
        #[test]
        fn listing_is_per_owner_in_creation_order_with_cursors() {
            $crate::conformance::run(async {
                $crate::conformance::listing_is_per_owner_in_creation_order_with_cursors(&$store(100)).await
            });
        }
        #[test]
        fn expiry_removes_exactly_the_due_tasks_from_every_index() {
            $crate::conformance::run(async {
                $crate::conformance::expiry_removes_exactly_the_due_tasks_from_every_index(&$store(100)).await
            });
        }
        #[test]
        fn capacity_is_bounded() {
            $crate::conformance::run(async { $crate::conformance::capacity_is_bounded(&$store(1)).await });
        }
    };
}

pub(crate) async fn activations_are_a_bounded_set_per_key(s: &dyn TaskStore) {
    assert_eq!(s.activated("acme/ada/", 60_000).await.unwrap(), Vec::<String>::new());
    s.activate("acme/ada/", &["b__x".into(), "a__y".into()], 60_000).await.unwrap();
    s.activate("acme/ada/", &["a__y".into()], 60_000).await.unwrap();
    assert_eq!(s.activated("acme/ada/", 60_000).await.unwrap(), ["a__y", "b__x"]);
    assert_eq!(s.activated("acme/bob/", 60_000).await.unwrap(), Vec::<String>::new(), "another key is its own");
    let many: Vec<String> = (0..crate::MAX_ACTIVATED).map(|n| format!("t{n:03}")).collect();
    s.activate("acme/ada/", &many, 60_000).await.unwrap();
    let held = s.activated("acme/ada/", 60_000).await.unwrap();
    assert_eq!(held.len(), crate::MAX_ACTIVATED);
    assert!(held.starts_with(&["a__y".to_owned(), "b__x".to_owned()]));
}
