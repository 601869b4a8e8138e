//! Pooled upstream sessions given back: a client session that can be asked things takes its
//! upstream sessions from a pool (`SessionActor::upstream_session`) and lets them go when it
//! holds nothing: when its client's last GET stream ends, when a call ends and its client
//! listens nowhere, or when it idles.

use actix::prelude::*;

use super::SessionActor;

/// The session lets its pooled upstream sessions go if it still holds nothing
/// ([`SessionActor::release_pooled`]).
struct ReleasePooled;

impl Message for ReleasePooled {
    type Result = ();
}

/// How long after its last call a session looks again at a pooled upstream session that call
/// still held.
const RELEASE_AGAIN: std::time::Duration = std::time::Duration::from_millis(50);

impl SessionActor {
    /// Lets the pooled upstream sessions go when the session holds nothing (nothing in flight,
    /// no stream, nothing relayed, no subscription) and its client listens at no replica: its
    /// last GET stream ended (a client gone, or no longer listening), or a call ended and its
    /// client never listened (a script, a one-shot CLI that sends no DELETE: what an upstream
    /// sends it outside a call has nowhere to go). The next client session of the same identity
    /// takes them, and this one takes one again for its next request (the one it held, if still
    /// free). Done after the message being handled, when a call that just ended has let its
    /// handles go.
    pub(super) fn release_pooled(&mut self) {
        if !self.may_let_pooled_go() || !self.upstreams.holds_pooled() {
            return;
        }
        if let Some(me) = self.me.as_ref().and_then(actix::WeakAddr::upgrade) {
            me.do_send(ReleasePooled);
        }
    }

    /// Whether the session holds nothing: nothing in flight, no stream, nothing relayed, no
    /// subscription.
    pub(super) fn holds_nothing(&self) -> bool {
        self.requests.is_empty()
            && !self.streams.client_listens()
            && self.asked.is_empty()
            && !self.upstreams.subscribed()
    }

    /// It holds nothing, and its client's GET stream is at no other replica either (what the
    /// upstreams send this copy outside a call goes to that stream).
    fn may_let_pooled_go(&self) -> bool {
        self.holds_nothing() && self.ties.stream_at.is_none()
    }

    /// [`SessionActor::release_pooled`], now. One still used by a call that has just ended
    /// (its handles about to go) is looked at once more a moment later; one a task uses stays
    /// this session's until the session is idle (`ReleaseUpstreams`).
    pub(super) fn let_pooled_go(&mut self, again: bool, ctx: &mut Context<Self>) {
        if !self.may_let_pooled_go() {
            return;
        }
        let mut in_use = false;
        self.upstreams.retain(|name, session| {
            // A task or a call still using it keeps it this session's: what the upstream asks
            // for them is answered through it.
            let keep = !session.is_pooled() || session.member_held_elsewhere();
            in_use |= keep && session.is_pooled();
            if !keep {
                self.streams.let_go(name);
            }
            keep
        });
        if in_use && again {
            ctx.run_later(RELEASE_AGAIN, |act, ctx| act.let_pooled_go(false, ctx));
        }
    }
}

impl Handler<ReleasePooled> for SessionActor {
    type Result = ();

    fn handle(&mut self, _: ReleasePooled, ctx: &mut Context<Self>) {
        self.let_pooled_go(true, ctx);
    }
}
