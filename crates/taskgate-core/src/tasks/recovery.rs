//! Tasks that no live gateway process runs any more (this process restarted, or another
//! replica died) are claimed from the store and, each, followed again or failed:
//!
//! - a native task on an HTTP upstream is followed again in the upstream session it was
//!   created in (the upstream keeps it across our restart), and finishes normally;
//! - a wrapped task's upstream call, and a native task on a stdio upstream (whose process
//!   ended with the gateway), died with the process: the task becomes `failed` with a
//!   statusMessage that says so. Never "not found", never silently lost.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use taskgate_config::Transport;
use taskgate_protocol::mcp::methods;
use taskgate_protocol::tasks::{TaskStatus, TaskView};
use taskgate_protocol::{codes, ErrorObject, Message as RpcMessage};
use taskgate_store::{TaskOutcome, TaskRecord, Update, UpstreamSessionRef};
use taskgate_upstream::{ClientIdentity, SessionResume, UpstreamEvent, UpstreamSession};

use super::actor::{TaskActor, TaskShared};
use super::messages::UpstreamStatus;
use super::work::{Native, TaskStart};
use crate::identity::Identity;

/// Events buffered from a resumed upstream session.
const RESUMED_EVENTS: usize = 64;

/// What a recovery pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Recovered {
    /// Native tasks followed again.
    pub followed: usize,
    /// Tasks failed because their upstream work died with a gateway process.
    pub failed: usize,
}

/// Claims the orphaned tasks and follows or fails each.
pub(crate) async fn recover(shared: Arc<TaskShared>) -> Result<Recovered, taskgate_store::StoreError> {
    let now = shared.clock.now_ms();
    let orphans = shared.tasks.store().claim_orphans(&shared.replica, now).await?;
    let mut done = Recovered::default();
    // One resumed upstream session per (upstream, session): its tasks share it.
    let mut sessions: HashMap<(String, String), UpstreamSession> = HashMap::new();
    for record in orphans {
        if shared.tasks.actor(&record.id).is_some() {
            // Its lease lapsed while this process kept running it (cut off from the store for
            // a while); it has the lease again and carries on.
            continue;
        }
        match follow_again(&shared, &record, &mut sessions) {
            Some(session) => {
                start_following(&shared, record, session);
                done.followed += 1;
            }
            None => {
                if fail(&shared, &record).await {
                    done.failed += 1;
                }
            }
        }
    }
    let m = &shared.metrics;
    m.tasks_recovered.with_label_values(&["followed"]).inc_by(done.followed as u64);
    m.tasks_recovered.with_label_values(&["failed"]).inc_by(done.failed as u64);
    if done != Recovered::default() {
        tracing::warn!(
            followed = done.followed,
            failed = done.failed,
            "took over tasks left by a gateway process that stopped"
        );
    }
    Ok(done)
}

/// The upstream session in which a native task can be followed again, if there is one.
fn follow_again(
    shared: &Arc<TaskShared>,
    record: &TaskRecord,
    sessions: &mut HashMap<(String, String), UpstreamSession>,
) -> Option<UpstreamSession> {
    let (Some(_), Some(UpstreamSessionRef { session_id, protocol_version })) =
        (&record.upstream_task_id, &record.upstream_session)
    else {
        return None;
    };
    let connector = shared.connectors.get(&record.upstream)?;
    // A 2026-07-28 upstream has no session id: one key per owner where each caller's own
    // identity is carried, so no owner's task is followed with another's token.
    let owner_key = if connector.acts_for_callers() {
        format!("{}:{}{}", record.owner.tenant.len(), record.owner.tenant, record.owner.principal)
    } else {
        String::new()
    };
    let key = (record.upstream.clone(), format!("{owner_key}\n{session_id}"));
    if let Some(session) = sessions.get(&key) {
        return Some(session.clone());
    }
    let (events, rx) = taskgate_upstream::event_channel(RESUMED_EVENTS);
    let resume = SessionResume { session_id: session_id.clone(), protocol_version: protocol_version.clone() };
    // The task's owner is whom an upstream called with each caller's identity follows it for.
    let caller = connector.acts_for_callers().then(|| {
        let owner =
            Identity { tenant: record.owner.tenant.as_str().into(), principal: record.owner.principal.as_str().into() };
        shared.tenancy.subjects.caller(&owner, connector.exchange_issuer())
    });
    let session = connector.resume(ClientIdentity::gateway(), events, &resume, caller)?;
    actix::spawn(serve_resumed(shared.clone(), record.upstream.clone(), session.clone(), rx));
    sessions.insert(key, session.clone());
    Some(session)
}

fn start_following(shared: &Arc<TaskShared>, record: TaskRecord, session: UpstreamSession) {
    let owner =
        Identity { tenant: record.owner.tenant.as_str().into(), principal: record.owner.principal.as_str().into() };
    let upstream_task_id = record.upstream_task_id.clone().expect("checked by follow_again");
    let native = Some((record.upstream.clone(), upstream_task_id.clone()));
    let poll = Duration::from_millis(record.poll_interval_ms);
    shared.metrics.tasks.with_label_values(&[&owner.tenant, record.status.as_str()]).inc();
    tracing::info!(target: "taskgate::audit", task = %record.id, tenant = %owner.tenant, principal = %owner.principal, upstream = %record.upstream, "task followed again after a gateway restart");
    // A shared store counts the task under its caps itself (until it is terminal).
    let permit = (!shared.tasks.store().shared()).then(|| shared.tenancy.readmit_task(&owner));
    let id = record.id.clone();
    // Input requests the stopped process had relayed went with its sessions: none of them can
    // be answered any more, so no replica may list them.
    let store = shared.tasks.store().clone();
    if store.shared() {
        let id = id.clone();
        actix::spawn(async move {
            if let Err(e) = store.remove_inputs(&id, &[]).await {
                tracing::warn!(task = %id, error = %e, "the input requests of a task taken over stay listed until it ends");
            }
        });
    }
    let work = Native::work(upstream_task_id, poll, None);
    // The token of the request that created it is not kept past the process: what its upstream
    // exchanges starts from its owner's latest (see `Subjects`).
    let start = TaskStart { record, owner, session, work, progress: None, permit, span: None, subject: None };
    let actor = TaskActor::new(shared.clone(), start);
    let id = actor.id.clone();
    shared.tasks.register(&id, actor.start(), native);
}

/// Fails a task whose upstream work died with a gateway process; false when it was settled
/// meanwhile (a cancel) or is gone.
async fn fail(shared: &Arc<TaskShared>, record: &TaskRecord) -> bool {
    let upstream = &record.upstream;
    // With a shared store, the process that ran the task may be another replica that died
    // (its lease lapsed); with a local one, it is this gateway's earlier run.
    let gone = if shared.tasks.store().shared() {
        "The gateway replica that ran the task stopped while it ran (its lease lapsed, and this replica took the task over)"
    } else {
        "The gateway restarted while the task ran"
    };
    let why = match (&record.upstream_task_id, shared.connectors.get(upstream).map(|c| c.config().transport)) {
        (_, None) => format!("{gone}, and upstream '{upstream}' is no longer configured"),
        (Some(_), Some(Transport::Stdio)) => {
            format!("{gone}; the stdio upstream '{upstream}' ran it in a process that ended with that gateway process")
        }
        (Some(_), Some(Transport::Http)) => {
            format!("{gone}, and the upstream '{upstream}' session that runs it was not recorded")
        }
        (None, _) => {
            format!("{gone}; its call to upstream '{upstream}' ended with that gateway process. Run the tool again.")
        }
    };
    let update = Update {
        status: TaskStatus::Failed,
        status_message: Some(why.clone()),
        outcome: Some(TaskOutcome::Error(ErrorObject::new(codes::UPSTREAM_UNAVAILABLE, why))),
        upstream_task_id: None,
        upstream_session: None,
        now_ms: shared.clock.now_ms(),
    };
    match shared.tasks.store().compare_and_set(&record.id, record.status, update).await {
        Ok(failed) => {
            tracing::info!(target: "taskgate::audit", task = %record.id, tenant = %record.owner.tenant, principal = %record.owner.principal, status = %failed.status, "task failed: its work ended with a gateway process");
            shared.tasks.finished(&record.id);
            true
        }
        Err(e) => {
            tracing::info!(task = %record.id, error = %e, "an orphaned task was settled meanwhile");
            false
        }
    }
}

/// What a resumed upstream session sends on its own: status notifications go to the task's
/// actor; requests for the requestor (elicitation…) are refused, since no client session of
/// the requestor is attached to it any more; the rest is dropped.
async fn serve_resumed(
    shared: Arc<TaskShared>,
    upstream: String,
    session: UpstreamSession,
    mut events: taskgate_upstream::EventReceiver,
) {
    // Only a weak hold: the session ends when its last task does.
    let session = session.downgrade();
    while let Some(event) = events.recv().await {
        match *event {
            UpstreamEvent::Notification { method, params, .. } if method == methods::TASKS_STATUS => {
                if let Some(up) = params.as_ref().and_then(TaskView::from_value) {
                    let task = shared.tasks.native_task(&(upstream.clone(), up.task_id.clone()));
                    if let Some(actor) = task.and_then(|t| shared.tasks.actor(&t)) {
                        let _ = actor.try_send(UpstreamStatus(up));
                    }
                }
            }
            UpstreamEvent::Request { id, method, .. } => {
                let Some(session) = session.upgrade() else { return };
                let why =
                    format!("{method} cannot be relayed: the requestor's session ended when the gateway restarted");
                let refusal = RpcMessage::error(Some(id), ErrorObject::new(codes::INTERNAL_ERROR, why));
                let _ = session.respond(refusal).await;
            }
            UpstreamEvent::Notification { .. } => {}
        }
    }
}
