//! Upstream sessions shared by several client sessions (`upstream[].share_sessions`).
//!
//! A shared session is one [`SessionInner`](crate::session::SessionInner) with one *member* per
//! client session using it. Each member has its own event channel, so the client session sees
//! what it would see with a session of its own; what the upstream sends on its own is routed:
//!
//! - about a request (on its response stream): to the member that sent that request;
//! - `notifications/tasks/status`, `notifications/tools/list_changed`,
//!   `notifications/progress` and `notifications/cancelled` about nothing in flight: to one
//!   member (what they lead to is gateway-wide: a task's actor, the router), preferring a member
//!   with a task creation in flight for a task's status (it holds a status that arrives
//!   before the task is known);
//! - everything else (log messages, list changes of resources and prompts, resource updates):
//!   to every member, as each client would have had it from a session of its own.
//!
//! A request the upstream sends (elicitation, sampling, roots) reaches no member: the session
//! refuses it (`UpstreamSession::to_owner`), since only clients that declared none of those
//! capabilities share sessions. A *pooled* session ([`crate::Connector::open_pooled`]) has one
//! member at a time, which takes everything, requests included: clients that can be asked
//! things reuse such sessions one after another, never at once.
//!
//! The sharing key (tenant, principal, the client's declared identity) is the caller's; the
//! connector keeps one session per key, and `shared_idle_secs` after its last member left.

use std::collections::VecDeque;
use std::sync::Arc;

use taskgate_protocol::mcp::methods;
use taskgate_protocol::RequestId;

use crate::events::{EventSender, UpstreamEvent};

/// Requests whose member is remembered after they ended: what the upstream sent about a request
/// is read by the session's pump, which may come to it after the response.
const ENDED_KEPT: usize = 256;

/// Who receives what an upstream session's server sends on its own.
#[derive(Clone)]
pub(crate) enum Owners {
    /// The one client session of a session of its own.
    One(EventSender),
    /// The members of a shared session.
    Shared(Arc<Members>),
}

impl Owners {
    /// Delivers `event`; false once no one will ever receive one again (the pump stops).
    pub(crate) async fn deliver(&self, event: UpstreamEvent) -> bool {
        match self {
            Owners::One(tx) => tx.send(Box::new(event)).await.is_ok(),
            Owners::Shared(members) => {
                members.deliver(event).await;
                true
            }
        }
    }
}

/// The members of one shared session.
pub(crate) struct Members {
    /// Told when the last member leaves (the `emptied`th time): the connector whose pool holds
    /// the session ends it after its idle time.
    when_idle: Box<dyn Fn(u64) + Send + Sync>,
    table: parking_lot::Mutex<Table>,
    /// One member at a time (a pooled session, [`crate::Connector::open_pooled`]): what the
    /// upstream sends on its own, its requests included, is that member's.
    pub(crate) exclusive: bool,
    /// The client session that held a pooled session last.
    pub(crate) last_holder: parking_lot::Mutex<Option<String>>,
}

#[derive(Default)]
struct Table {
    senders: foldhash::HashMap<u64, EventSender>,
    /// The member of each request in flight and of the last [`ENDED_KEPT`] ended.
    owners: foldhash::HashMap<RequestId, u64>,
    ended: VecDeque<RequestId>,
    /// Task-augmented requests in flight, by member.
    creating: foldhash::HashMap<u64, usize>,
    next: u64,
    /// Counts the times the last member left: an idle expiry applies only to the idle period it
    /// was set for.
    emptied: u64,
}

impl Members {
    pub(crate) fn new(when_idle: Box<dyn Fn(u64) + Send + Sync>) -> Members {
        Members { when_idle, table: parking_lot::Mutex::default(), exclusive: false, last_holder: Default::default() }
    }

    /// The members of a pooled session: one client session at a time.
    pub(crate) fn exclusive(when_idle: Box<dyn Fn(u64) + Send + Sync>) -> Members {
        Members { exclusive: true, ..Members::new(when_idle) }
    }

    /// A new member, its events sent to `events`.
    pub(crate) fn join(self: &Arc<Self>, events: EventSender) -> Member {
        let mut table = self.table.lock();
        table.next += 1;
        let id = table.next;
        table.senders.insert(id, events);
        Member { id, members: self.clone() }
    }

    /// Whether the session has no member now.
    pub(crate) fn is_idle(&self) -> bool {
        self.table.lock().senders.is_empty()
    }

    /// Whether the session has had no member since its last one left `emptied` times ago.
    pub(crate) fn idle_since(&self, emptied: u64) -> bool {
        let table = self.table.lock();
        table.senders.is_empty() && table.emptied == emptied
    }

    async fn deliver(&self, event: UpstreamEvent) {
        let (about, one) = match &event {
            // A pooled session's one member takes it (a shared session's are refused before).
            UpstreamEvent::Request { related, .. } => (related.clone(), true),
            UpstreamEvent::Notification { method, related, .. } => (
                related.clone(),
                matches!(
                    method.as_str(),
                    methods::TASKS_STATUS | methods::TOOLS_LIST_CHANGED | methods::PROGRESS | methods::CANCELLED
                ),
            ),
        };
        let is_status = matches!(&event, UpstreamEvent::Notification { method, .. } if method == methods::TASKS_STATUS);
        let targets: Vec<EventSender> = {
            let table = self.table.lock();
            // A member whose client session has ended (a task still holds it) receives nothing.
            let live = |sender: &&EventSender| !sender.is_closed();
            let owner = about.as_ref().and_then(|id| table.owners.get(id)).and_then(|member| table.senders.get(member));
            match owner {
                Some(sender) => vec![sender.clone()],
                None if about.is_some() && !one => {
                    // About a request whose member has left: no other client's business.
                    tracing::debug!("a message about a request of a client session that has ended; dropped");
                    return;
                }
                None if one => {
                    let creating = is_status
                        .then(|| {
                            table
                                .creating
                                .iter()
                                .filter(|(_, n)| **n > 0)
                                .filter_map(|(member, _)| table.senders.get(member))
                                .find(live)
                        })
                        .flatten();
                    creating.or_else(|| table.senders.values().find(live)).cloned().into_iter().collect()
                }
                None => table.senders.values().filter(live).cloned().collect(),
            }
        };
        match targets.as_slice() {
            [] => tracing::debug!("a shared upstream session with no client session; a message dropped"),
            // One receiver: waited for, as a session of its own waits for its owner.
            [one] => {
                let _ = one.send(Box::new(event)).await;
            }
            // Several: one slow reader does not hold up the others; a full one misses it.
            many => {
                for sender in many {
                    if sender.try_send(Box::new(event.clone())).is_err() {
                        tracing::debug!("a client session's upstream events are full; a notification dropped");
                    }
                }
            }
        }
    }

    /// Records that member `member` sent request `id` (until [`Members::ended`]).
    fn started(&self, member: u64, id: &RequestId, creates_task: bool) {
        let mut table = self.table.lock();
        table.owners.insert(id.clone(), member);
        if creates_task {
            *table.creating.entry(member).or_default() += 1;
        }
    }

    fn ended(&self, member: u64, id: &RequestId, creates_task: bool) {
        let mut table = self.table.lock();
        if creates_task {
            if let Some(n) = table.creating.get_mut(&member) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    table.creating.remove(&member);
                }
            }
        }
        table.ended.push_back(id.clone());
        if table.ended.len() > ENDED_KEPT {
            if let Some(old) = table.ended.pop_front() {
                crate::remove_and_shrink(&mut table.owners, &old);
            }
        }
    }

    fn leave(&self, member: u64) {
        let emptied = {
            let mut table = self.table.lock();
            crate::remove_and_shrink(&mut table.senders, &member);
            table.creating.remove(&member);
            if !table.senders.is_empty() {
                return;
            }
            table.emptied += 1;
            table.emptied
        };
        (self.when_idle)(emptied);
    }
}

/// One client session's place in a shared session: it leaves when the last handle holding it
/// is dropped.
pub(crate) struct Member {
    id: u64,
    members: Arc<Members>,
}

impl Member {
    /// Keeps `id` routed to this member while the guard lives (and a while after).
    pub(crate) fn call<'a>(&'a self, id: &'a RequestId, creates_task: bool) -> MemberCall<'a> {
        self.members.started(self.id, id, creates_task);
        MemberCall { member: self, id, creates_task }
    }
}

impl Member {
    /// A call of this member kept by a [`crate::session::WaitingCall`] ended.
    pub(crate) fn ended(&self, id: &RequestId, creates_task: bool) {
        self.members.ended(self.id, id, creates_task);
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.members.leave(self.id);
    }
}

/// A request of a member in flight (borrowing the id its call holds).
pub(crate) struct MemberCall<'a> {
    member: &'a Member,
    id: &'a RequestId,
    creates_task: bool,
}

impl MemberCall<'_> {
    /// Hands the call to a [`crate::session::WaitingCall`], which ends it ([`Member::ended`]):
    /// whether it creates a task.
    pub(crate) fn keep(self) -> bool {
        let creates_task = self.creates_task;
        std::mem::forget(self);
        creates_task
    }
}

impl Drop for MemberCall<'_> {
    fn drop(&mut self) {
        self.member.members.ended(self.member.id, self.id, self.creates_task);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Weak};
    use std::time::Duration;

    use taskgate_config::{ShareSessions, UpstreamConfig};
    use taskgate_protocol::RequestId;

    use super::{Members, ENDED_KEPT};
    use crate::{ClientIdentity, Connector, UpstreamEvent};

    fn note(method: &str, related: Option<i64>) -> UpstreamEvent {
        UpstreamEvent::Notification { method: method.into(), params: None, related: related.map(RequestId::Number) }
    }

    fn received(rx: &mut crate::EventReceiver) -> Vec<String> {
        let mut seen = Vec::new();
        while let Some(event) = rx.try_recv() {
            seen.push(match *event {
                UpstreamEvent::Notification { method, .. } | UpstreamEvent::Request { method, .. } => method,
            });
        }
        seen
    }

    #[tokio::test]
    async fn each_message_goes_to_the_lane_it_is_about_or_to_one_or_every_lane() {
        let members = Arc::new(Members::new(Box::new(|_| {})));
        let ((ta, mut ra), (tb, mut rb)) = (crate::event_channel(64), crate::event_channel(64));
        let (a, b) = (members.join(ta), members.join(tb));
        let (five, six) = (RequestId::Number(5), RequestId::Number(6));
        let call_a = a.call(&five, false);
        let _call_b = b.call(&six, true);
        members.deliver(note("notifications/message", Some(5))).await;
        assert_eq!((received(&mut ra), received(&mut rb)), (vec!["notifications/message".into()], vec![]));
        // Unrelated: announcements to every member; what leads to one action, to one member.
        members.deliver(note("notifications/resources/list_changed", None)).await;
        assert_eq!(received(&mut ra).len() + received(&mut rb).len(), 2);
        for once in ["notifications/tools/list_changed", "notifications/progress", "notifications/cancelled"] {
            members.deliver(note(once, None)).await;
            assert_eq!(received(&mut ra).len() + received(&mut rb).len(), 1, "{once}");
        }
        // A task's status goes to the member creating a task (b), which holds it until it knows.
        members.deliver(note("notifications/tasks/status", None)).await;
        assert_eq!((received(&mut ra).len(), received(&mut rb).len()), (0, 1));
        // An ended request's member is kept for its late messages, a bounded number of them.
        drop(call_a);
        members.deliver(note("notifications/message", Some(5))).await;
        assert_eq!(received(&mut ra).len(), 1);
        let ids: Vec<RequestId> = (100..100 + ENDED_KEPT as i64).map(RequestId::Number).collect();
        for id in &ids {
            drop(b.call(id, false));
        }
        members.deliver(note("notifications/message", Some(5))).await;
        assert_eq!((received(&mut ra).len(), received(&mut rb).len()), (0, 0), "forgotten, and no one else's");
        assert!(members.table.lock().owners.len() <= ENDED_KEPT + 1);
    }

    fn connector(idle: u64) -> Connector {
        let config = UpstreamConfig {
            share_sessions: ShareSessions::Always,
            shared_idle_secs: idle,
            ..UpstreamConfig::http("up", "http://127.0.0.1:1/mcp")
        };
        Connector::new(config)
    }

    #[tokio::test(start_paused = true)]
    async fn a_shared_session_outlives_its_last_lane_by_the_idle_time_only() {
        let connector = connector(30);
        let events = || crate::event_channel(4).0;
        let first = connector.open_shared("k", ClientIdentity::gateway, events());
        let second = connector.open_shared("k", ClientIdentity::gateway, events());
        let other = connector.open_shared("other key", ClientIdentity::gateway, events());
        assert!(Arc::ptr_eq(&first.inner, &second.inner) && !Arc::ptr_eq(&first.inner, &other.inner));
        assert!(first.is_shared());
        let session = Arc::downgrade(&first.inner);
        drop((first, second, other));
        assert_eq!(connector.shared_sessions(), 2, "kept while idle");
        tokio::time::sleep(Duration::from_secs(20)).await;
        // Joined and left again: the idle time counts from the last leaving.
        let again = connector.open_shared("k", ClientIdentity::gateway, events());
        assert!(std::ptr::eq(Weak::as_ptr(&session), Arc::as_ptr(&again.inner)), "the idle session reused");
        drop(again);
        tokio::time::sleep(Duration::from_secs(15)).await;
        assert_eq!(connector.shared_sessions(), 1, "'other key' expired; 'k' was used 15 s ago");
        tokio::time::sleep(Duration::from_secs(16)).await;
        assert_eq!(connector.shared_sessions(), 0);
        assert!(session.upgrade().is_none(), "ended");
    }

    #[tokio::test(start_paused = true)]
    async fn idle_shared_sessions_are_bounded_in_count() {
        let connector = connector(3600);
        let members: Vec<_> = (0..70)
            .map(|i| connector.open_shared(&format!("client {i}"), ClientIdentity::gateway, crate::event_channel(4).0))
            .collect();
        drop(members);
        assert_eq!(connector.shared_sessions(), crate::connector::MAX_IDLE_SHARED);
    }

    #[tokio::test]
    async fn a_lane_whose_client_session_ended_is_passed_over() {
        let members = Arc::new(Members::new(Box::new(|_| {})));
        // Eight members whose sessions ended (tasks of theirs still hold them), one live.
        let ended: Vec<_> = (0..8).map(|_| members.join(crate::event_channel(64).0)).collect();
        let (tb, mut rb) = crate::event_channel(64);
        let _b = members.join(tb);
        for _ in 0..10 {
            members.deliver(note("notifications/tools/list_changed", None)).await;
        }
        assert_eq!(received(&mut rb).len(), 10);
        drop(ended);
    }

    #[tokio::test]
    async fn with_no_idle_time_a_shared_session_ends_with_its_last_lane() {
        let connector = connector(0);
        let member = connector.open_shared("k", ClientIdentity::gateway, crate::event_channel(4).0);
        let held = member.clone();
        drop(member);
        assert_eq!(connector.shared_sessions(), 1, "a clone still holds the member");
        drop(held);
        assert_eq!(connector.shared_sessions(), 0);
    }
}
