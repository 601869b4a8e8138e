//! What replicas sharing a store (Redis) tell each other, and the leases on running tasks.
//!
//! - Out: [`publish_loop`] publishes what the [`Publisher`](super::publisher::Publisher) queues.
//! - In: [`listen`]: another replica's events are applied here: a task finished there wakes
//!   the `tasks/result` waiters here; a task cancelled here or there stops its work where it
//!   runs; task status and progress reach the owner's sessions on this replica; what another
//!   replica made for a client session whose GET stream is here goes on it, a client's message
//!   about a request another replica runs reaches it, and a session ended or changed there is
//!   ended or read again here.
//! - Leases: [`keep_leases`] renews this replica's leases on the tasks it runs, stops running
//!   those it no longer holds (another replica took them over while this one was cut off, or
//!   they ended elsewhere), and takes over orphans: tasks whose replica died.

use std::sync::Arc;
use std::time::Duration;

use taskgate_store::{EventEnvelope, StoreEvent};
use tokio::sync::mpsc;

use super::actor::TaskShared;
use super::messages::{DeliverInputs, StoppedElsewhere};
use super::service::TaskService;
use crate::identity::Identity;

/// Publishes what the queue receives, in order.
pub(crate) async fn publish_loop(shared: Arc<TaskShared>, mut queue: mpsc::Receiver<EventEnvelope>) {
    while let Some(envelope) = queue.recv().await {
        let kind = kind(&envelope.event);
        let weight = super::publisher::weight(&envelope.event);
        let outcome = shared.tasks.store().publish(envelope).await;
        shared.tasks.published(weight);
        match outcome {
            Ok(()) => shared.metrics.store_events.with_label_values(&["published", kind]).inc(),
            Err(e) => {
                shared.metrics.store_events.with_label_values(&["lost", kind]).inc();
                tracing::warn!(error = %e, kind, "an event for the other replicas could not be published");
            }
        }
    }
}

fn kind(event: &StoreEvent) -> &'static str {
    match event {
        StoreEvent::Finished { .. } => "finished",
        StoreEvent::Cancelled { .. } => "cancelled",
        StoreEvent::Status { .. } => "status",
        StoreEvent::Progress { .. } => "progress",
        StoreEvent::UpstreamRestart { .. } => "upstream_restart",
        StoreEvent::InputRequested { .. } => "input_requested",
        StoreEvent::InputResponses { .. } => "input_responses",
        StoreEvent::SessionMessage { .. } => "session_message",
        StoreEvent::SessionClient { .. } => "session_client",
        StoreEvent::SessionEnded { .. } => "session_ended",
        StoreEvent::SessionChanged { .. } => "session_changed",
        StoreEvent::SessionStream { .. } => "session_stream",
        StoreEvent::IdentityActivated { .. } => "identity_activated",
        StoreEvent::RetryForwarded { .. } => "retry_forwarded",
        StoreEvent::RetryReply { .. } => "retry_reply",
        StoreEvent::RetryClosed { .. } => "retry_closed",
    }
}

/// Applies the other replicas' events on this one.
pub(crate) async fn listen(shared: Arc<TaskShared>, mut events: mpsc::Receiver<EventEnvelope>) {
    while let Some(EventEnvelope { from, event }) = events.recv().await {
        if from == shared.replica {
            continue; // its own, already applied here
        }
        shared.metrics.store_events.with_label_values(&["received", kind(&event)]).inc();
        let tasks = &shared.tasks;
        match event {
            StoreEvent::Finished { task_id } => tasks.wake(&task_id),
            StoreEvent::Cancelled { task_id } => {
                if let Some(actor) = tasks.actor(&task_id) {
                    let _ = actor.try_send(StoppedElsewhere { cancelled: true });
                }
                tasks.wake(&task_id);
            }
            StoreEvent::Status { owner, task } => {
                let owner = Identity { tenant: owner.tenant.into(), principal: owner.principal.into() };
                tasks.status_to_sessions(&owner, task);
            }
            StoreEvent::Progress { owner, task_id, params } => {
                let owner = Identity { tenant: owner.tenant.into(), principal: owner.principal.into() };
                // The session that requested the task is on the replica that runs it: here, the
                // task's progress goes to the requestor's sessions that follow it.
                tasks.board.record(&task_id, &params);
                tasks.progress_to_sessions(&owner, &task_id, None, params);
            }
            StoreEvent::InputRequested { owner, task_id } => {
                let owner = Identity { tenant: owner.tenant.into(), principal: owner.principal.into() };
                tasks.inputs_to_sessions(&owner, &task_id);
            }
            StoreEvent::InputResponses { task_id, responses } => {
                let Some(actor) = tasks.actor(&task_id) else { continue };
                let responses: Vec<_> = responses
                    .into_iter()
                    .filter_map(|r| taskgate_protocol::Message::parse(r).ok())
                    .filter(taskgate_protocol::Message::is_response)
                    .collect();
                let _ = actor.try_send(DeliverInputs(responses));
            }
            // A client session served here too: what another replica's work made for it.
            StoreEvent::SessionMessage { session, message } => shared.sessions.to_stream(&session, message),
            StoreEvent::SessionClient { session, message } => shared.sessions.client_said(&session, message),
            StoreEvent::SessionEnded { session } => shared.sessions.ended(&session),
            StoreEvent::SessionChanged { session } => shared.sessions.changed(&session),
            StoreEvent::SessionStream { session, open } => shared.sessions.stream_at(&session, from, open),
            StoreEvent::IdentityActivated { owner, profile } => {
                let owner = Identity { tenant: owner.tenant.into(), principal: owner.principal.into() };
                shared.sessions.activated_elsewhere(&owner, profile.as_deref());
            }
            // A 2026-07-28 retry of an exchange held here, its answer, its client gone.
            StoreEvent::RetryForwarded { replica, relay, tenant, principal, request } if replica == shared.replica => {
                let identity = Identity { tenant: tenant.into(), principal: principal.into() };
                shared.retries.serve(publisher(&shared), from, relay, identity, request);
            }
            StoreEvent::RetryReply { replica, relay, seq, part } if replica == shared.replica => {
                shared.retries.deliver(&relay, seq, part);
            }
            StoreEvent::RetryClosed { replica, relay } if replica == shared.replica => {
                shared.retries.closed(&from, &relay);
            }
            StoreEvent::RetryForwarded { .. } | StoreEvent::RetryReply { .. } | StoreEvent::RetryClosed { .. } => {}
            StoreEvent::UpstreamRestart { upstream } => {
                if let Some(connector) = shared.connectors.get(&upstream) {
                    let stopping = connector.restart_processes();
                    tracing::info!(target: "taskgate::audit", %upstream, stopping, from = %from, "upstream processes restarted by an operator at another replica");
                }
            }
        }
    }
}

/// Publishing through this replica's queue, for what is not the task layer's own.
fn publisher(shared: &Arc<TaskShared>) -> crate::retry_relay::Publish {
    let shared = shared.clone();
    Arc::new(move |event| shared.tasks.publish(event))
}

/// Renews this replica's leases about three times per lease period, and takes over orphans.
/// After the store was out of reach, every replica's leases may have lapsed at once: orphans
/// are claimed only once the store has answered for a whole lease period again, so that every
/// live replica has taken its own leases back first.
pub(crate) async fn keep_leases(shared: Arc<TaskShared>, lease: Duration) {
    let mut tick = tokio::time::interval(lease / 3);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut reachable_since: Option<tokio::time::Instant> = None;
    loop {
        tick.tick().await;
        let running = shared.tasks.running_ids();
        match shared.tasks.store().renew_leases(&shared.replica, &running).await {
            Ok(lost) => {
                reachable_since.get_or_insert_with(tokio::time::Instant::now);
                for id in lost {
                    // A change it could not write is another replica's to make now.
                    shared.tasks.unwritten.give_up(&id);
                    let Some(actor) = shared.tasks.actor(&id) else { continue };
                    // Cancelled elsewhere (an event this replica missed): the upstream is told;
                    // taken over: the other replica follows the upstream work, so it is left be.
                    let record = shared.tasks.store().get(&id).await.ok().flatten();
                    let cancelled = record.is_none_or(|r| r.status == taskgate_protocol::tasks::TaskStatus::Cancelled);
                    tracing::warn!(task = %id, cancelled, "this replica no longer holds the task; it stops running it here");
                    let _ = actor.try_send(StoppedElsewhere { cancelled });
                }
            }
            Err(e) => {
                reachable_since = None;
                tracing::warn!(error = %e, "renewing task leases failed");
                continue;
            }
        }
        if reachable_since.is_some_and(|since| since.elapsed() >= lease) {
            if let Err(e) = TaskService::recover(shared.clone()).await {
                tracing::debug!(error = %e, "looking for orphaned tasks failed");
            }
        }
    }
}
