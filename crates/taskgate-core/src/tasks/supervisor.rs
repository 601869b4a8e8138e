//! The [`Supervisor`]: the gateway's clocks and restarts. It runs the one timer of every live
//! task's ttl ([`super::expiries`]), sweeps expired tasks out of the store as a backstop to it
//! (a task whose actor has stopped, or a record another replica wrote) and tells live actors
//! whose task it removed;
//! closes idle sessions; forgets full rate buckets; and restarts task actors that crashed, from
//! the store. Admission (rate and concurrency limits) is in [`crate::tenants`]: shared tables it
//! owns the rules of, checked without a mailbox hop.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;

use std::sync::Weak;

use super::actor::{TaskActor, TaskShared};
use super::expiries::Expiries;
use super::messages::Expire;
use super::work::{abort_call, Restart, Work};

/// Tasks released since the last trim after which freed memory is handed back to the system.
const TRIM_AFTER_RELEASED: usize = 10_000;

/// The supervisor actor.
pub struct Supervisor {
    shared: Arc<TaskShared>,
    /// The most tasks held since the last trim.
    peak_tasks: usize,
    /// A periodic sweep is running (it runs beside the mailbox; one at a time).
    sweeping: bool,
}

impl Supervisor {
    pub(crate) fn new(shared: Arc<TaskShared>) -> Supervisor {
        Supervisor { shared, peak_tasks: 0, sweeping: false }
    }

    /// After a burst of tasks ends, gives the freed memory back: glibc keeps freed pages in its
    /// arenas, so without this a gateway's resident memory stays at its peak.
    fn trim_after_bursts(&mut self) {
        // Tasks in the store and their actors: an expired task's actor stops a moment after its
        // record goes, and what it frees must be there to give back.
        let held = self.shared.tasks.store().len() + self.shared.tasks.live_actors();
        // After a large release, or once the last task of a burst is gone.
        if self.peak_tasks >= held + TRIM_AFTER_RELEASED || (held == 0 && self.peak_tasks > 0) {
            // Tables keep their peak capacity until told otherwise.
            self.shared.tasks.compact();
            release_free_memory();
            self.peak_tasks = held;
        } else {
            self.peak_tasks = self.peak_tasks.max(held);
        }
    }

    /// Closes sessions without a request for `server.session_idle_timeout_secs` that have
    /// nothing in flight and no GET stream open (their tasks live on: tasks are bound to the
    /// requestor, not the session), and asks those without one for
    /// `server.upstream_release_secs` to let their upstream sessions go.
    fn expire_sessions(&self) -> futures_util::future::BoxFuture<'static, ()> {
        let release_ms = self.shared.config.server.upstream_release_secs.saturating_mul(1000);
        if release_ms > 0 {
            let now = self.shared.clock.now_ms();
            self.shared.sessions.release_idle(now.saturating_sub(release_ms), now);
        }
        let timeout_ms = self.shared.config.server.session_idle_timeout_secs.saturating_mul(1000);
        if timeout_ms == 0 {
            return Box::pin(async {});
        }
        let cutoff = self.shared.clock.now_ms().saturating_sub(timeout_ms);
        // The sessions answer in their own time, outside the Supervisor's mailbox.
        self.shared.sessions.clone().close_idle(cutoff)
    }

    /// Deletes the expired tasks; the Supervisor handles nothing else until it is done.
    fn sweep(&mut self) -> impl ActorFuture<Self, Output = ()> + 'static {
        let store = self.shared.tasks.store().clone();
        let now = self.shared.clock.now_ms();
        let expire = async move { store.expire(now).await };
        expire.into_actor(self).map(move |removed, act, _| match removed {
            Ok(removed) => {
                // Whatever deleted them (here, their actor, another replica), expired tasks
                // no longer count against their tenant's share.
                act.shared.tasks.holdings.prune(now);
                for record in &removed {
                    tracing::info!(task = %record.id, tenant = %record.owner.tenant, "task expired (sweep)");
                    act.shared.tasks.deleted(record);
                    if let Some(actor) = act.shared.tasks.actor(&record.id) {
                        let _ = actor.try_send(Expire);
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "expiry sweep failed"),
        })
    }
}

impl Actor for Supervisor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        // The live tasks' ttl timer, beside the mailbox.
        let timer = run_expiries(Arc::downgrade(&self.shared), self.shared.tasks.expiries.clone());
        ctx.spawn(timer.into_actor(self));
        let every = Duration::from_millis(self.shared.config.tasks.sweep_interval_ms);
        ctx.run_interval(every, |act, ctx| {
            // Beside the mailbox: a sweep of a large store (many round trips to Redis) must not
            // hold up restarts or idle sessions.
            if !act.sweeping {
                act.sweeping = true;
                ctx.spawn(act.sweep().map(|(), act, _| act.sweeping = false));
            }
            act.trim_after_bursts();
            ctx.spawn(act.expire_sessions().into_actor(act));
            act.shared.tenancy.rates.prune(act.shared.clock.now_ms());
            act.shared.tenancy.tool_rates.prune(act.shared.clock.now_ms());
            act.shared.tasks.prune_polls();
        });
    }
}

/// Sweeps now (tests drive time through a manual clock, then sweep).
pub struct Sweep;

impl Message for Sweep {
    type Result = ();
}

impl Handler<Sweep> for Supervisor {
    type Result = AtomicResponse<Self, ()>;

    fn handle(&mut self, _: Sweep, _: &mut Context<Self>) -> Self::Result {
        AtomicResponse::new(Box::pin(self.sweep()))
    }
}

/// Closes idle sessions now (tests drive time through a manual clock, then expire).
pub struct ExpireSessions;

impl Message for ExpireSessions {
    type Result = ();
}

impl Handler<ExpireSessions> for Supervisor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: ExpireSessions, _: &mut Context<Self>) -> Self::Result {
        Box::pin(self.expire_sessions())
    }
}

impl Handler<Restart> for Supervisor {
    type Result = ();

    fn handle(&mut self, Restart(remains): Restart, ctx: &mut Context<Self>) {
        let store = self.shared.tasks.store().clone();
        let id = remains.id.clone();
        let read = async move { store.get(&id).await };
        ctx.spawn(read.into_actor(self).map(move |record, act, _| {
            let shared = act.shared.clone();
            shared.metrics.actor_restarts.with_label_values(&["task_actor_crashed"]).inc();
            let mut remains = *remains;
            let native = match &remains.work {
                Work::Native(native) => Some((remains.session.upstream().to_owned(), native.upstream_task_id.clone())),
                Work::Wrapped { .. } => None,
            };
            let record = match record {
                Ok(Some(record)) if !record.status.is_terminal() => record,
                // Expired, or settled by someone else (a cancel through the store): the waiters
                // read what the store says; the permit and the work go.
                _ => {
                    if let Some(call) = remains.call.take() {
                        abort_call(*call);
                    }
                    shared.tasks.unregister(&remains.id, native.as_ref());
                    shared.tasks.finished(&remains.id);
                    tracing::warn!(task = %remains.id, "task actor crashed after its task ended; nothing to restart");
                    return;
                }
            };
            let actor = TaskActor::restarted(shared.clone(), &record, remains);
            let id = actor.id.clone();
            shared.tasks.register(&id, actor.start(), native);
        }));
    }
}

/// The timer: tells each task's actor when its deadline comes, for as long as the gateway
/// lives (it ends with the gateway's shared state).
async fn run_expiries(shared: Weak<TaskShared>, expiries: Arc<Expiries>) {
    loop {
        let (due, next) = expiries.take_due();
        if !due.is_empty() {
            let Some(shared) = shared.upgrade() else { return };
            for task in due {
                if let Some(actor) = shared.tasks.actor(&task) {
                    // Not `try_send`: an expiry is never dropped for a full mailbox.
                    actor.do_send(Expire);
                }
            }
        }
        match next {
            None => expiries.sooner.notified().await,
            Some(at) => match expiries.epoch.checked_add(Duration::from_millis(at)) {
                Some(when) => tokio::select! {
                    () = tokio::time::sleep_until(when) => {}
                    () = expiries.sooner.notified() => {}
                },
                // Beyond any clock: only a sooner deadline can come first.
                None => expiries.sooner.notified().await,
            },
        }
        if shared.strong_count() == 0 {
            return;
        }
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn release_free_memory() {
    extern "C" {
        fn malloc_trim(pad: usize) -> std::os::raw::c_int;
    }
    // SAFETY: malloc_trim only walks glibc's own arenas and returns unused pages to the kernel;
    // it has no preconditions and is safe to call from any thread.
    unsafe {
        malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn release_free_memory() {}
