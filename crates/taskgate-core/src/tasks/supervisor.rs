//! The [`Supervisor`]: the gateway's clocks. It sweeps expired tasks out of the store as a
//! backstop to each [`super::TaskActor`]'s own ttl timer (a task whose actor has stopped, or a
//! record another replica wrote), and tells live actors whose task it removed.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;

use super::actor::Expire;
use crate::gateway::Shared;

/// The supervisor actor.
pub struct Supervisor {
    shared: Arc<Shared>,
}

impl Supervisor {
    pub(crate) fn new(shared: Arc<Shared>) -> Supervisor {
        Supervisor { shared }
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
        ctx.run_interval(every, |act, ctx| act.sweep(ctx));
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
