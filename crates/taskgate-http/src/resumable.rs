//! Resumable SSE replies of 2025-11-25 sessions (basic/transports "Sending Messages to the
//! Server" 6, "Resumability and Redelivery").
//!
//! A reply stream starts with a priming event (an id and empty data, and the `retry` a client
//! waits before reconnecting), and every message carries an id `<stream>-<n>`: the stream is a
//! number unique to this process (random high bits), `n` counts its events. What was written
//! is kept (the last [`KEPT_BYTES`], the final message always) until the stream ends. When the
//! client's connection leaves before the stream ends, or the stream closes because its
//! upstream closed the call's own (a pause, [`Frame::pause`]), the stream is *held* for
//! `server.stream_resume_secs`: a `GET` of the same session with `Last-Event-ID` takes it
//! back, gets what followed that event again, then the rest as it comes. An id names one
//! stream of one session: nothing of another stream or session is ever replayed. Held streams
//! are bounded: [`MAX_HELD`] in all, [`MAX_HELD_PER_SESSION`] per session, [`MAX_HELD_BYTES`]
//! of kept events; past a bound a left stream is dropped, as it was before streams resumed
//! (its call runs on; its messages are lost).
//!
//! A stream is held by the replica that served it: a resumption that reaches another replica
//! is refused with 400, saying so.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};
use std::task::{Context, Poll};
use std::time::Duration;

use actix_web::http::header;
use actix_web::HttpResponse;
use bytes::Bytes;
use parking_lot::Mutex;
use taskgate_core::outbound::{Frame, OutboundReceiver};

/// Events kept per stream for a resumption to replay (the final message is kept whatever its
/// size).
pub const KEPT_BYTES: usize = 1 << 20;
/// Streams held at once, all sessions together.
pub const MAX_HELD: usize = 1024;
/// Streams held at once per session.
pub const MAX_HELD_PER_SESSION: usize = 32;
/// Bytes of kept events in all held streams together.
pub const MAX_HELD_BYTES: usize = 64 << 20;
/// The reconnection time the priming event asks for, in milliseconds.
const RETRY_MS: u64 = 1_000;
/// How often an idle stream carries a keep-alive comment.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The streams left by their clients, waiting to be resumed.
struct Held {
    streams: Mutex<HashMap<u64, Parked>>,
    /// Streams with a connection now (a resumption may come before the server sees the old
    /// connection go: it waits a little for the stream to be held).
    attached: Mutex<HashMap<u64, Arc<str>>>,
    /// Told whenever a stream is held.
    changed: tokio::sync::Notify,
    per_session: Mutex<HashMap<Arc<str>, usize>>,
    bytes: AtomicUsize,
    next_stream: AtomicU64,
}

static HELD: LazyLock<Held> = LazyLock::new(|| Held {
    streams: Mutex::new(HashMap::new()),
    attached: Mutex::new(HashMap::new()),
    changed: tokio::sync::Notify::const_new(),
    per_session: Mutex::new(HashMap::new()),
    bytes: AtomicUsize::new(0),
    next_stream: AtomicU64::new(random_high_bits()),
});

/// A process's stream numbers start at random high bits: a number another process gave
/// (another replica, or this one before a restart) names no stream here.
fn random_high_bits() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let random = std::collections::hash_map::RandomState::new().build_hasher().finish();
    (random >> 32) << 32
}

/// A stream's state that outlives one connection.
struct Stream {
    id: u64,
    session: Arc<str>,
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
}

impl Stream {
    fn keep(&mut self, n: u64, event: Bytes) {
        self.kept_bytes += event.len();
        self.kept.push_back((n, event));
        while self.kept_bytes > KEPT_BYTES && self.kept.len() > 1 {
            if let Some((_, dropped)) = self.kept.pop_front() {
                self.kept_bytes -= dropped.len();
            }
        }
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
pub fn response(session: &str, first: Option<Frame>, messages: OutboundReceiver, resume_secs: u64) -> HttpResponse {
    let id = HELD.next_stream.fetch_add(1, Ordering::Relaxed);
    let stream = Stream {
        id,
        session: Arc::from(session),
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
                    return Err(NotResumed::Attached);
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
        return Err(match HELD.attached.lock().get(&id).is_some_and(|s| &**s == session) {
            true => NotResumed::Attached,
            false => NotResumed::NotHeld,
        });
    }
    let Some(Parked { mut stream, .. }) = streams.remove(&id) else { return Err(NotResumed::NotHeld) };
    drop(streams);
    unhold(&stream);
    while stream.kept.front().is_some_and(|(k, _)| *k <= seen) {
        if let Some((_, event)) = stream.kept.pop_front() {
            stream.kept_bytes -= event.len();
        }
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
    HELD.bytes.fetch_sub(stream.kept_bytes, Ordering::Relaxed);
    let mut per_session = HELD.per_session.lock();
    if let Some(n) = per_session.get_mut(&stream.session) {
        *n -= 1;
        if *n == 0 {
            per_session.remove(&stream.session);
        }
    }
}

/// Holds a stream its client left, within the bounds; else drops it.
fn hold(stream: Stream) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
    {
        let mut per_session = HELD.per_session.lock();
        let count = per_session.entry(stream.session.clone()).or_insert(0);
        let total = HELD.streams.lock().len();
        if *count >= MAX_HELD_PER_SESSION
            || total >= MAX_HELD
            || HELD.bytes.load(Ordering::Relaxed) + stream.kept_bytes > MAX_HELD_BYTES
        {
            if *count == 0 {
                per_session.remove(&stream.session);
            }
            tracing::debug!(session = %stream.session, "a left reply stream is over the bounds of held streams; dropped");
            return;
        }
        *count += 1;
    }
    HELD.bytes.fetch_add(stream.kept_bytes, Ordering::Relaxed);
    static SERIAL: AtomicU64 = AtomicU64::new(0);
    let serial = SERIAL.fetch_add(1, Ordering::Relaxed);
    let (id, window) = (stream.id, stream.window);
    HELD.streams.lock().insert(id, Parked { stream, serial });
    HELD.changed.notify_waiters();
    runtime.spawn(async move {
        tokio::time::sleep(window).await;
        let mut streams = HELD.streams.lock();
        if streams.get(&id).is_some_and(|p| p.serial == serial) {
            if let Some(parked) = streams.remove(&id) {
                drop(streams);
                unhold(&parked.stream);
            }
        }
    });
}

/// The body of one connection of a stream: `again` (events to write first), `first`, then the
/// stream's messages. A connection that leaves before the stream ends holds the stream.
struct Connection {
    /// The stream's number.
    id: u64,
    stream: Option<Stream>,
    again: VecDeque<Bytes>,
    first: Option<Frame>,
    keep_alive: tokio::time::Interval,
    failed: crate::metered::StreamFailed,
    /// The stream paused: after the `retry` written, the connection ends and the stream is held.
    pausing: bool,
}

impl Drop for Connection {
    fn drop(&mut self) {
        HELD.attached.lock().remove(&self.id);
        if let Some(stream) = self.stream.take() {
            hold(stream);
        }
    }
}

impl Connection {
    fn event(&mut self, frame: Frame) -> Bytes {
        let Some(stream) = self.stream.as_mut() else { return Bytes::new() };
        if let Some(retry) = frame.pause {
            self.pausing = true;
            return Bytes::from(format!("retry: {retry}\n\n"));
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
        event
    }

    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, Infallible>>> {
        if let Some(event) = self.again.pop_front() {
            return Poll::Ready(Some(Ok(event)));
        }
        if self.pausing {
            // Held until resumed (Drop), as when a client leaves.
            return Poll::Ready(None);
        }
        if let Some(frame) = self.first.take() {
            return Poll::Ready(Some(Ok(self.event(frame))));
        }
        let Some(stream) = self.stream.as_mut() else { return Poll::Ready(None) };
        match stream.messages.poll_recv(cx) {
            Poll::Ready(Some(frame)) => return Poll::Ready(Some(Ok(self.event(frame)))),
            Poll::Ready(None) => {
                // Ended: nothing to resume.
                self.stream = None;
                return Poll::Ready(None);
            }
            Poll::Pending => {}
        }
        if self.keep_alive.poll_tick(cx).is_ready() {
            return Poll::Ready(Some(Ok(Bytes::from_static(b": keep-alive\n\n"))));
        }
        Poll::Pending
    }
}

fn body(stream: Stream, again: VecDeque<Bytes>, first: Option<Frame>) -> HttpResponse {
    HELD.attached.lock().insert(stream.id, stream.session.clone());
    let failed = crate::metered::StreamFailed::default();
    let mut connection = Connection {
        id: stream.id,
        stream: Some(stream),
        again,
        first,
        keep_alive: tokio::time::interval_at(tokio::time::Instant::now() + KEEP_ALIVE, KEEP_ALIVE),
        failed: failed.clone(),
        pausing: false,
    };
    let body = futures_util::stream::poll_fn(move |cx| connection.poll_next(cx));
    let mut response = HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(body);
    response.extensions_mut().insert(failed);
    response
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
        use taskgate_core::outbound::{channel, Limits, SessionBudget};
        let limits = Limits { messages: 8, bytes: 1 << 20, stall: Duration::from_secs(1) };
        let (_, messages) = channel(limits, SessionBudget::new(1 << 20), Box::new(|_| {}));
        Stream {
            id: HELD.next_stream.fetch_add(1, Ordering::Relaxed),
            session: Arc::from(session),
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
                hold(s);
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
        // The session ended: nothing of it is held.
        forget("bounded");
        assert_eq!(held_by("bounded"), 0);
        assert!(resume("bounded", &format!("{:x}-0", ids[1])).is_err());
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
