//! The [`Supervisor`]: the gateway's clocks. It sweeps expired tasks out of the store as a
//! backstop to each [`super::TaskActor`]'s own ttl timer (a task whose actor has stopped, or a
//! record another replica wrote), and tells live actors whose task it removed.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;

use super::actor::Expire;
use crate::gateway::Shared;

/// Tasks released since the last trim after which freed memory is handed back to the system.
const TRIM_AFTER_RELEASED: usize = 10_000;

/// The supervisor actor.
pub struct Supervisor {
    shared: Arc<Shared>,
    /// The most tasks held since the last trim.
    peak_tasks: usize,
}

impl Supervisor {
    pub(crate) fn new(shared: Arc<Shared>) -> Supervisor {
        Supervisor { shared, peak_tasks: 0 }
    }

    /// After a burst of tasks ends, gives the freed memory back: glibc keeps freed pages in its
    /// arenas, so without this a gateway's resident memory stays at its peak.
    fn trim_after_bursts(&mut self) {
        let held = self.shared.store.len();
        // After a large release, or once the last task of a burst is gone.
        if self.peak_tasks >= held + TRIM_AFTER_RELEASED || (held == 0 && self.peak_tasks > 0) {
            // Tables keep their peak capacity until told otherwise.
            self.shared.store.compact();
            self.shared.task_actors.write().shrink_to_fit();
            self.shared.task_calls.write().shrink_to_fit();
            self.shared.native_tasks.write().shrink_to_fit();
            self.shared.last_poll.lock().shrink_to_fit();
            release_free_memory();
            self.peak_tasks = held;
        } else {
            self.peak_tasks = self.peak_tasks.max(held);
        }
    }

    fn sweep(&mut self, ctx: &mut Context<Self>) {
        let store = self.shared.store.clone();
        let now = self.shared.clock.now_ms();
        let expire = async move { store.expire(now).await };
        ctx.wait(expire.into_actor(self).map(|removed, act, _| match removed {
            Ok(removed) => {
                for record in &removed {
                    tracing::info!(task = %record.id, tenant = %record.owner.tenant, "task expired (sweep)");
                    act.shared.metrics.tasks.with_label_values(&[&record.owner.tenant, record.status.as_str()]).dec();
                    act.shared.last_poll.lock().remove(&record.id);
                    if let Some(actor) = act.shared.task_actors.read().get(&record.id) {
                        let _ = actor.try_send(Expire);
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "expiry sweep failed"),
        }));
    }
}

impl Actor for Supervisor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let every = Duration::from_millis(self.shared.config.tasks.sweep_interval_ms);
        ctx.run_interval(every, |act, ctx| {
            act.sweep(ctx);
            act.trim_after_bursts();
        });
    }
}

/// Sweeps now (tests drive time through a manual clock, then sweep).
pub struct Sweep;

impl Message for Sweep {
    type Result = ();
}

impl Handler<Sweep> for Supervisor {
    type Result = ();

    fn handle(&mut self, _: Sweep, ctx: &mut Context<Self>) {
        self.sweep(ctx);
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
