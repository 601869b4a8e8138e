//! [`ProgressActor`]: one per live client progress token (basic/utilities/progress).
//!
//! The client's token is replaced upstream by one the gateway issues (`tgp-N`, unique in the
//! gateway), so tokens of different clients never meet at an upstream; notifications coming back
//! get the client's original token again (string or integer, as it came). The actor drops values
//! that do not increase, coalesces bursts to `progress.min_interval_ms` (the latest value wins),
//! and on `Finish` delivers what is pending and stops: nothing is sent after its request
//! completes or its task is terminal.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use serde_json::Value;
use taskgate_protocol::mcp::methods;
use taskgate_protocol::Message as RpcMessage;

use crate::identity::Identity;

/// Counters of what happened to progress notifications (also read by tests), mirrored into
/// `taskgate_progress_notifications_total`.
#[derive(Debug)]
pub struct ProgressStats {
    /// Delivered to a client.
    pub relayed: AtomicU64,
    /// Replaced by a later value before being sent.
    pub coalesced: AtomicU64,
    /// Dropped: not increasing, malformed, after completion, or the client's stream was full.
    pub dropped: AtomicU64,
    /// Progress actors alive now.
    pub live: AtomicUsize,
    /// Issues upstream tokens.
    pub(crate) next_token: AtomicU64,
    counters: [prometheus::IntCounter; 3],
}

/// What became of one progress notification.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Outcome {
    Relayed,
    Coalesced,
    Dropped,
}

impl ProgressStats {
    pub(crate) fn new(metrics: &crate::metrics::Metrics) -> ProgressStats {
        let counter = |status: &str| metrics.progress_notifications.with_label_values(&[status]);
        ProgressStats {
            relayed: AtomicU64::new(0),
            coalesced: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            live: AtomicUsize::new(0),
            next_token: AtomicU64::new(0),
            counters: [counter("relayed"), counter("coalesced"), counter("dropped")],
        }
    }

    pub(crate) fn count(&self, outcome: Outcome) {
        let (atomic, counter) = match outcome {
            Outcome::Relayed => (&self.relayed, &self.counters[0]),
            Outcome::Coalesced => (&self.coalesced, &self.counters[1]),
            Outcome::Dropped => (&self.dropped, &self.counters[2]),
        };
        atomic.fetch_add(1, Ordering::Relaxed);
        counter.inc();
    }

    /// A fresh upstream token.
    pub(crate) fn issue_token(&self) -> String {
        format!("tgp-{}", self.next_token.fetch_add(1, Ordering::Relaxed) + 1)
    }
}

/// Where a task's progress goes: the task layer, which finds the requestor's sessions, here
/// and on the other replicas (a port: the task layer implements it).
pub(crate) trait TaskProgressSink: Send + Sync {
    /// Delivers `params` of a `notifications/progress` for `task_id`, requested by the client
    /// session `requester`; false when no session took it anywhere.
    fn task_progress(&self, owner: &Identity, task_id: &str, requester: &str, params: Value) -> bool;
}

/// Where a token's notifications go.
pub(crate) enum ProgressTarget {
    /// A plain call: its own response stream.
    Request(crate::outbound::Outbound),
    /// A task: the session that requested it (its `tasks/result` stream for the task, else its
    /// GET stream), with the task's related-task `_meta`; once that session is gone, the
    /// requestor's sessions that follow the task with `tasks/result`.
    Task { task_id: String, owner: Identity, requester: Arc<str>, tasks: Arc<dyn TaskProgressSink> },
}

/// One live progress token.
pub struct ProgressActor {
    client_token: Value,
    target: ProgressTarget,
    min_interval: Duration,
    stats: Arc<ProgressStats>,
    last_value: Option<f64>,
    last_sent: Option<Instant>,
    pending: Option<Value>,
    timer: Option<SpawnHandle>,
}

impl ProgressActor {
    pub(crate) fn new(
        client_token: Value,
        target: ProgressTarget,
        min_interval: Duration,
        stats: Arc<ProgressStats>,
    ) -> ProgressActor {
        ProgressActor {
            client_token,
            target,
            min_interval,
            stats,
            last_value: None,
            last_sent: None,
            pending: None,
            timer: None,
        }
    }

    fn deliver(&mut self, params: Value) {
        self.last_sent = Some(Instant::now());
        let delivered = match &self.target {
            ProgressTarget::Request(reply) => {
                reply.send(&RpcMessage::notification(methods::PROGRESS, Some(params))).is_ok()
            }
            ProgressTarget::Task { task_id, owner, requester, tasks } => {
                tasks.task_progress(owner, task_id, requester, params)
            }
        };
        self.stats.count(if delivered { Outcome::Relayed } else { Outcome::Dropped });
    }

    fn flush(&mut self) {
        if let Some(params) = self.pending.take() {
            self.deliver(params);
        }
    }
}

impl Actor for ProgressActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.set_mailbox_capacity(256);
        self.stats.live.fetch_add(1, Ordering::Relaxed);
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        self.stats.live.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A `notifications/progress` params object from the upstream for this token.
pub(crate) struct Progress(pub Value);

impl Message for Progress {
    type Result = ();
}

impl Handler<Progress> for ProgressActor {
    type Result = ();

    fn handle(&mut self, Progress(mut params): Progress, ctx: &mut Context<Self>) {
        // `progress` MUST increase with each notification: others are dropped and counted.
        let Some(value) = params.get("progress").and_then(Value::as_f64) else {
            self.stats.count(Outcome::Dropped);
            return;
        };
        if self.last_value.is_some_and(|last| value <= last) {
            tracing::debug!(progress = value, "non-increasing progress from an upstream dropped");
            self.stats.count(Outcome::Dropped);
            return;
        }
        self.last_value = Some(value);
        params["progressToken"] = self.client_token.clone();
        let due = self.last_sent.map_or(Duration::ZERO, |at| self.min_interval.saturating_sub(at.elapsed()));
        if due.is_zero() && self.pending.is_none() {
            self.deliver(params);
            return;
        }
        if self.pending.replace(params).is_some() {
            self.stats.count(Outcome::Coalesced);
        }
        if self.timer.is_none() {
            self.timer = Some(ctx.run_later(due, |act, _| {
                act.timer = None;
                act.flush();
            }));
        }
    }
}

/// The request completed or the task is terminal: deliver what is pending, then stop.
pub(crate) struct Finish;

impl Message for Finish {
    type Result = ();
}

impl Handler<Finish> for ProgressActor {
    type Result = ();

    fn handle(&mut self, _: Finish, ctx: &mut Context<Self>) {
        if let Some(timer) = self.timer.take() {
            ctx.cancel_future(timer);
        }
        self.flush();
        ctx.stop();
    }
}

/// The request was cancelled: stop without sending anything more.
pub(crate) struct Abandon;

impl Message for Abandon {
    type Result = ();
}

impl Handler<Abandon> for ProgressActor {
    type Result = ();

    fn handle(&mut self, _: Abandon, ctx: &mut Context<Self>) {
        if self.pending.take().is_some() {
            self.stats.count(Outcome::Dropped);
        }
        ctx.stop();
    }
}
