//! Resumable SSE replies of 2025-11-25 sessions (basic/transports "Sending Messages to the
//! Server" 6, "Resumability and Redelivery").
//!
//! A reply stream starts with a priming event (an id and empty data, and the `retry` a client
//! waits before reconnecting), and every message carries an id `<stream>-<n>`: the stream is a
//! number unique to this process and not sequential (a keyed permutation of a counter), `n`
//! counts its events. What was written is kept (the last [`KEPT_BYTES`] of a stream, the latest
//! event always, [`MAX_KEPT_BYTES`] of all streams together) until the stream ends. When the
//! client's connection leaves before the stream ends, or the stream closes because its
//! upstream closed the call's own (a pause, [`Frame::pause`], honoured only while the stream
//! can be held), the stream is *held* for `server.stream_resume_secs`: a `GET` of the same
//! session with `Last-Event-ID` takes it back, gets what followed that event again, then the
//! rest as it comes. A held stream's queue drops what does not fit but never overflows: leaving
//! is not cancelling. An id names one stream of one session: nothing of another stream or
//! session is ever replayed. Held streams are bounded: [`MAX_HELD`] in all, a tenant's share of
//! them (its share of the gateway's client streams, [`tenant_share`]), and
//! [`MAX_HELD_PER_SESSION`] per session; past a bound a left stream is dropped (its call runs
//! on; its messages are lost), and a pause is not passed on.
//!
//! A stream is held by the replica that served it: a resumption that reaches another replica
//! is refused with 400, saying so.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};
use std::task::{Context, Poll};
use std::time::Duration;

use actix_web::HttpResponse;
use bytes::Bytes;
use parking_lot::Mutex;
use taskgate_core::outbound::{Frame, OutboundReceiver};

/// Events kept per stream for a resumption to replay (the latest is kept whatever its size).
pub const KEPT_BYTES: usize = 256 << 10;
/// Events kept by all streams together (past it, a stream keeps its latest event only).
pub const MAX_KEPT_BYTES: usize = 64 << 20;
/// Streams held at once, all sessions together.
pub const MAX_HELD: usize = 1024;
/// Streams held at once per session.
pub const MAX_HELD_PER_SESSION: usize = 32;
/// The reconnection time the priming event asks for, in milliseconds.
const RETRY_MS: u64 = 1_000;
/// How often an idle stream carries a keep-alive comment.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The streams left by their clients, waiting to be resumed, and those with a connection.
struct Held {
    streams: Mutex<HashMap<u64, Parked>>,
    per_session: Mutex<HashMap<Arc<str>, usize>>,
    per_tenant: Mutex<HashMap<Arc<str>, usize>>,
    /// Streams with a connection now, with their session and the connection's serial (a
    /// resumption may come before the server sees the old connection go: it waits a little).
    attached: Mutex<HashMap<u64, (Arc<str>, u64)>>,
    /// Told whenever a stream is held, or a connection ends.
    changed: tokio::sync::Notify,
    /// Bytes kept by all streams.
    kept: AtomicUsize,
    next: AtomicU64,
    /// The key of the permutation that makes stream numbers.
    key: std::collections::hash_map::RandomState,
}

static HELD: LazyLock<Held> = LazyLock::new(|| Held {
    streams: Mutex::new(HashMap::new()),
    per_session: Mutex::new(HashMap::new()),
    per_tenant: Mutex::new(HashMap::new()),
    attached: Mutex::new(HashMap::new()),
    changed: tokio::sync::Notify::const_new(),
    kept: AtomicUsize::new(0),
    next: AtomicU64::new(0),
    key: std::collections::hash_map::RandomState::new(),
});

/// A serial for each holding and each connection.
static SERIAL: AtomicU64 = AtomicU64::new(1);

/// A new stream number: a keyed hash of a counter (not sequential, so a client learns nothing of
/// the gateway's traffic from its own), unused by any stream here.
fn stream_number() -> u64 {
    loop {
        let n = HELD.key.hash_one(HELD.next.fetch_add(1, Ordering::Relaxed));
        if !HELD.attached.lock().contains_key(&n) && !HELD.streams.lock().contains_key(&n) {
            return n;
        }
    }
}

/// Whose a stream is, for the bounds of held streams: its session's tenant, and how many
/// streams that tenant may have held at once.
#[derive(Clone)]
pub struct Owner {
    pub tenant: Arc<str>,
    pub share: usize,
}

/// A tenant's share of [`MAX_HELD`]: its share of the gateway's client streams (`share` of
/// `size`), at least what one session may hold.
pub fn tenant_share(share: usize, size: usize) -> usize {
    (share.saturating_mul(MAX_HELD) / size.max(1)).clamp(MAX_HELD_PER_SESSION, MAX_HELD)
}

/// A stream's state that outlives one connection.
struct Stream {
    id: u64,
    session: Arc<str>,
    owner: Owner,
    messages: OutboundReceiver,
    /// The next event's number.
    next: u64,
    /// Events written, with their numbers, for a resumption to replay.
    kept: VecDeque<(u64, Bytes)>,
    kept_bytes: usize,
    window: Duration,
}

struct Parked {
    stream: Stream,
    /// Which holding this is: a timer expires only the holding it was set for.
    serial: u64,
    /// The timer of this holding, stopped when the stream is taken back or forgotten first (a
    /// client leaving and resuming again and again leaves no timers behind).
    timer: tokio::task::AbortHandle,
}

impl Stream {
    fn keep(&mut self, n: u64, event: Bytes) {
        self.kept_bytes += event.len();
        HELD.kept.fetch_add(event.len(), Ordering::Relaxed);
        self.kept.push_back((n, event));
        while self.kept.len() > 1
            && (self.kept_bytes > KEPT_BYTES || HELD.kept.load(Ordering::Relaxed) > MAX_KEPT_BYTES)
        {
            self.forget_first();
        }
    }

    fn forget_first(&mut self) {
        if let Some((_, dropped)) = self.kept.pop_front() {
            self.kept_bytes -= dropped.len();
            HELD.kept.fetch_sub(dropped.len(), Ordering::Relaxed);
        }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        HELD.kept.fetch_sub(self.kept_bytes, Ordering::Relaxed);
    }
}

/// Whether a session's replies are resumable: at 2025-11-25 (older clients may not read a
/// priming event's empty data), unless `stream_resume_secs` is 0.
pub fn offered(protocol_version: &str, resume_secs: u64) -> bool {
    resume_secs > 0 && protocol_version >= "2025-11-25"
}

/// A resumable `text/event-stream` reply of `session`: the priming event, then `first` (a frame
/// already taken from `messages`), then `messages` until they end. The stream closes on a
/// pause only if `messages` hands pauses out ([`OutboundReceiver::take_pauses`]).
pub fn response(
    session: &str,
    owner: Owner,
    first: Option<Frame>,
    messages: OutboundReceiver,
    resume_secs: u64,
) -> HttpResponse {
    let id = stream_number();
    let stream = Stream {
        id,
        session: Arc::from(session),
        owner,
        messages,
        next: 1,
        kept: VecDeque::new(),
        kept_bytes: 0,
        window: Duration::from_secs(resume_secs),
    };
    let priming = Bytes::from(format!("id: {id:x}-0\nretry: {RETRY_MS}\ndata: \n\n"));
    body(stream, [priming].into(), first)
}

/// Why a `Last-Event-ID` resumes nothing.
#[derive(Debug, PartialEq, Eq)]
pub enum NotResumed {
    /// The id is not one of this gateway's.
    Malformed,
    /// No such stream of this session is held here (it ended, expired, or another replica
    /// holds it).
    NotHeld,
    /// The stream still has a connection (for longer than a resumption waits for it to go).
    Attached,
}

/// How long a resumption waits for a stream's old connection to be seen gone.
const ATTACHED_WAIT: Duration = Duration::from_secs(2);

/// [`resume`], waiting up to [`ATTACHED_WAIT`] while the stream still has a connection: a
/// client may reconnect before the server has seen its old connection close.
pub async fn resume_waiting(session: &str, last_event_id: &str) -> Result<HttpResponse, NotResumed> {
    let deadline = tokio::time::Instant::now() + ATTACHED_WAIT;
    loop {
        let changed = HELD.changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        match resume(session, last_event_id) {
            Err(NotResumed::Attached) => {
                if tokio::time::timeout_at(deadline, changed).await.is_err() {
                    return resume(session, last_event_id);
                }
            }
            other => return other,
        }
    }
}

/// Takes back the stream `last_event_id` names, if `session` left it: what followed that event,
/// then the rest as it comes.
pub fn resume(session: &str, last_event_id: &str) -> Result<HttpResponse, NotResumed> {
    let (stream, n) = last_event_id.split_once('-').ok_or(NotResumed::Malformed)?;
    let id = u64::from_str_radix(stream, 16).map_err(|_| NotResumed::Malformed)?;
    let seen: u64 = n.parse().map_err(|_| NotResumed::Malformed)?;
    let mut streams = HELD.streams.lock();
    if streams.get(&id).is_none_or(|p| &*p.stream.session != session) {
        drop(streams);
        return Err(match HELD.attached.lock().get(&id).is_some_and(|(s, _)| &**s == session) {
            true => NotResumed::Attached,
            false => NotResumed::NotHeld,
        });
    }
    let Some(parked) = streams.remove(&id) else { return Err(NotResumed::NotHeld) };
    drop(streams);
    parked.timer.abort();
    let mut stream = parked.stream;
    unhold(&stream);
    while stream.kept.front().is_some_and(|(k, _)| *k <= seen) {
        stream.forget_first();
    }
    let again: VecDeque<Bytes> = stream.kept.iter().map(|(_, e)| e.clone()).collect();
    Ok(body(stream, again, None))
}

/// Drops the streams `session` left: it ended (DELETE), so nobody resumes them.
pub fn forget(session: &str) {
    if held_by(session) == 0 {
        return;
    }
    let gone: Vec<Parked> = {
        let mut streams = HELD.streams.lock();
        let ids: Vec<u64> = streams.iter().filter(|(_, p)| &*p.stream.session == session).map(|(id, _)| *id).collect();
        ids.iter().filter_map(|id| streams.remove(id)).collect()
    };
    for parked in gone {
        parked.timer.abort();
        unhold(&parked.stream);
    }
}

/// Streams held now.
pub fn held() -> usize {
    HELD.streams.lock().len()
}

/// Streams of `session` held now.
pub fn held_by(session: &str) -> usize {
    HELD.per_session.lock().get(session).copied().unwrap_or(0)
}

fn unhold(stream: &Stream) {
    stream.messages.set_held(false);
    for (counts, key) in [(&HELD.per_session, &stream.session), (&HELD.per_tenant, &stream.owner.tenant)] {
        let mut counts = counts.lock();
        if let Some(n) = counts.get_mut(key) {
            *n -= 1;
            if *n == 0 {
                counts.remove(key);
            }
        }
    }
}

/// Streams of `tenant` held now.
pub fn held_for(tenant: &str) -> usize {
    HELD.per_tenant.lock().get(tenant).copied().unwrap_or(0)
}

/// Whether `stream` could be held now.
fn room_for(stream: &Stream) -> bool {
    let count = HELD.per_session.lock().get(&stream.session).copied().unwrap_or(0);
    count < MAX_HELD_PER_SESSION
        && held_for(&stream.owner.tenant) < stream.owner.share
        && HELD.streams.lock().len() < MAX_HELD
}

/// Holds a stream its client left, within the bounds; else drops it. A stream `promised`
/// (its connection passed a pause on, after [`room_for`] said there was room) is held past
/// its tenant's share, which another session of the tenant may have taken meanwhile: its
/// client was told to come back.
fn hold(stream: Stream, promised: bool) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
    {
        let mut per_session = HELD.per_session.lock();
        let mut per_tenant = HELD.per_tenant.lock();
        let count = per_session.get(&stream.session).copied().unwrap_or(0);
        let of_tenant = per_tenant.get(&stream.owner.tenant).copied().unwrap_or(0);
        let over_share = of_tenant >= stream.owner.share && !promised;
        if count >= MAX_HELD_PER_SESSION || over_share || HELD.streams.lock().len() >= MAX_HELD {
            tracing::debug!(session = %stream.session, tenant = %stream.owner.tenant, "a left reply stream is over the bounds of held streams; dropped");
            return;
        }
        *per_session.entry(stream.session.clone()).or_insert(0) += 1;
        *per_tenant.entry(stream.owner.tenant.clone()).or_insert(0) += 1;
    }
    stream.messages.set_held(true);
    let serial = SERIAL.fetch_add(1, Ordering::Relaxed);
    let (id, window) = (stream.id, stream.window);
    let timer = runtime.spawn(async move {
        tokio::time::sleep(window).await;
        let mut streams = HELD.streams.lock();
        if streams.get(&id).is_some_and(|p| p.serial == serial) {
            if let Some(parked) = streams.remove(&id) {
                drop(streams);
                unhold(&parked.stream);
            }
        }
    });
    HELD.streams.lock().insert(id, Parked { stream, serial, timer: timer.abort_handle() });
}

/// The body of one connection of a stream: `again` (events to write first), then the stream's
/// messages. A connection that leaves before the stream ends holds the stream.
struct Connection {
    /// The stream's number.
    id: u64,
    /// This connection's serial (the stream's entry in `attached` is this connection's).
    serial: u64,
    stream: Option<Stream>,
    again: VecDeque<Bytes>,
    keep_alive: tokio::time::Interval,
    failed: crate::metered::StreamFailed,
    /// The stream paused: after the `retry` written, the connection ends and the stream is held.
    pausing: bool,
}

impl Drop for Connection {
    fn drop(&mut self) {
        // Held before it is no longer attached: a resumption never finds it in neither.
        if let Some(stream) = self.stream.take() {
            hold(stream, self.pausing);
        }
        let mut attached = HELD.attached.lock();
        if attached.get(&self.id).is_some_and(|(_, serial)| *serial == self.serial) {
            attached.remove(&self.id);
        }
        drop(attached);
        HELD.changed.notify_waiters();
    }
}

impl Connection {
    /// The bytes `frame` is written as, if any (a pause not passed on is nothing).
    fn event(&mut self, frame: Frame) -> Option<Bytes> {
        let stream = self.stream.as_mut()?;
        if let Some(retry) = frame.pause {
            // Passed on only if the stream can be held, and within its window: else the
            // connection stays open and the response comes on it.
            if !room_for(stream) {
                return None;
            }
            self.pausing = true;
            let retry = retry.min(stream.window.as_millis() as u64 / 2);
            return Some(Bytes::from(format!("retry: {retry}\n\n")));
        }
        if frame.error && frame.response {
            self.failed.set();
        }
        let n = stream.next;
        stream.next += 1;
        let mut out = String::with_capacity(frame.json.len() + 48);
        out.push_str(&format!("id: {:x}-{n}\nevent: message\ndata: ", stream.id));
        out.push_str(&frame.json);
        out.push_str("\n\n");
        let event = Bytes::from(out);
        stream.keep(n, event.clone());
        Some(event)
    }

    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, Infallible>>> {
        if let Some(event) = self.again.pop_front() {
            return Poll::Ready(Some(Ok(event)));
        }
        if self.pausing {
            // Held until resumed (Drop), as when a client leaves.
            return Poll::Ready(None);
        }
        loop {
            let Some(stream) = self.stream.as_mut() else { return Poll::Ready(None) };
            match stream.messages.poll_recv(cx) {
                Poll::Ready(Some(frame)) => match self.event(frame) {
                    Some(event) => return Poll::Ready(Some(Ok(event))),
                    None => continue,
                },
                Poll::Ready(None) => {
                    // Ended: nothing to resume.
                    self.stream = None;
                    return Poll::Ready(None);
                }
                Poll::Pending => break,
            }
        }
        if self.keep_alive.poll_tick(cx).is_ready() {
            return Poll::Ready(Some(Ok(Bytes::from_static(b": keep-alive\n\n"))));
        }
        Poll::Pending
    }
}

fn body(stream: Stream, again: VecDeque<Bytes>, first: Option<Frame>) -> HttpResponse {
    let serial = SERIAL.fetch_add(1, Ordering::Relaxed);
    HELD.attached.lock().insert(stream.id, (stream.session.clone(), serial));
    let failed = crate::metered::StreamFailed::default();
    let mut connection = Connection {
        id: stream.id,
        serial,
        stream: Some(stream),
        again,
        keep_alive: tokio::time::interval_at(tokio::time::Instant::now() + KEEP_ALIVE, KEEP_ALIVE),
        failed: failed.clone(),
        pausing: false,
    };
    // Numbered and kept now: a connection that leaves before writing it does not lose it.
    if let Some(event) = first.and_then(|frame| connection.event(frame)) {
        connection.again.push_back(event);
    }
    let body = futures_util::stream::poll_fn(move |cx| connection.poll_next(cx));
    crate::sse::streaming(body, failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_resume_from_2025_11_25_on_unless_turned_off() {
        assert!(offered("2025-11-25", 60));
        assert!(!offered("2025-06-18", 60));
        assert!(!offered("2025-11-25", 0));
    }

    #[test]
    fn an_id_of_another_form_or_stream_resumes_nothing() {
        assert_eq!(resume("s", "nope").err(), Some(NotResumed::Malformed));
        assert_eq!(resume("s", "zz-1").err(), Some(NotResumed::Malformed));
        assert_eq!(resume("s", "1-x").err(), Some(NotResumed::Malformed));
        assert_eq!(resume("s", "ffffffffffffffff-1").err(), Some(NotResumed::NotHeld));
    }

    fn stream(session: &str) -> Stream {
        owned(session, "t", MAX_HELD)
    }

    fn owned(session: &str, tenant: &str, share: usize) -> Stream {
        use taskgate_core::outbound::{channel, Limits, SessionBudget};
        let limits = Limits { messages: 8, bytes: 1 << 20, stall: Duration::from_secs(1) };
        let (_, messages) = channel(limits, SessionBudget::new(1 << 20), Box::new(|_| {}));
        Stream {
            id: stream_number(),
            session: Arc::from(session),
            owner: Owner { tenant: Arc::from(tenant), share },
            messages,
            next: 1,
            kept: VecDeque::new(),
            kept_bytes: 0,
            window: Duration::from_secs(600),
        }
    }

    #[tokio::test]
    async fn a_session_holds_at_most_its_share_of_left_streams_and_a_resumed_one_is_no_longer_held() {
        let ids: Vec<u64> = (0..MAX_HELD_PER_SESSION + 3)
            .map(|_| {
                let s = stream("bounded");
                let id = s.id;
                hold(s, false);
                id
            })
            .collect();
        assert_eq!(held_by("bounded"), MAX_HELD_PER_SESSION);
        assert!(resume("bounded", &format!("{:x}-0", ids[MAX_HELD_PER_SESSION])).is_err(), "over the bound: dropped");
        assert!(resume("another", &format!("{:x}-0", ids[0])).is_err(), "another session's");
        let resumed = resume("bounded", &format!("{:x}-0", ids[0])).expect("held");
        assert_eq!(held_by("bounded"), MAX_HELD_PER_SESSION - 1);
        // Its new connection left too: held again, for the client to come back once more.
        drop(resumed);
        assert_eq!(held_by("bounded"), MAX_HELD_PER_SESSION);
        // One timer a holding: the one of the holding taken back was stopped.
        let alive = || async {
            for _ in 0..4 {
                tokio::task::yield_now().await;
            }
            tokio::runtime::Handle::current().metrics().num_alive_tasks()
        };
        assert_eq!(alive().await, MAX_HELD_PER_SESSION);
        // The session ended: nothing of it is held, and no timer is left.
        forget("bounded");
        assert_eq!(held_by("bounded"), 0);
        assert_eq!(alive().await, 0);
        assert!(resume("bounded", &format!("{:x}-0", ids[1])).is_err());
    }

    #[tokio::test]
    async fn a_tenant_holds_at_most_its_share_of_left_streams_and_another_tenant_still_has_room() {
        assert_eq!(tenant_share(512, 2048), MAX_HELD / 4);
        assert_eq!(tenant_share(1, 2048), MAX_HELD_PER_SESSION, "at least one session's");
        let share = MAX_HELD_PER_SESSION + 8;
        // Many sessions of one tenant, each under its own bound: together no more than the share.
        for n in 0..share + 10 {
            hold(owned(&format!("greedy-{}", n % 4), "greedy", share), false);
        }
        assert_eq!(held_for("greedy"), share);
        // Over its share, no stream of the tenant is held or paused; another tenant's is.
        assert!(!room_for(&owned("greedy-9", "greedy", share)));
        assert!(room_for(&owned("polite-1", "polite", share)));
        let other = owned("polite-1", "polite", share);
        let id = other.id;
        hold(other, false);
        assert_eq!(held_for("polite"), 1);
        assert!(resume("polite-1", &format!("{id:x}-0")).is_ok());
        // A stream whose pause was passed on is held all the same: its client was told to
        // come back.
        hold(owned("greedy-0", "greedy", share), true);
        assert_eq!(held_for("greedy"), share + 1);
        for n in 0..4 {
            forget(&format!("greedy-{n}"));
        }
        forget("polite-1");
        assert_eq!((held_for("greedy"), held_for("polite")), (0, 0));
    }

    #[test]
    fn kept_events_are_bounded_but_the_last_is_always_kept() {
        let mut stream = stream("s");
        stream.keep(1, Bytes::from(vec![b'a'; KEPT_BYTES / 2]));
        stream.keep(2, Bytes::from(vec![b'b'; KEPT_BYTES / 2]));
        assert_eq!(stream.kept.len(), 2);
        stream.keep(3, Bytes::from(vec![b'c'; KEPT_BYTES * 2]));
        assert_eq!(stream.kept.iter().map(|(n, _)| *n).collect::<Vec<_>>(), vec![3]);
        assert_eq!(stream.kept_bytes, KEPT_BYTES * 2);
    }
}
