//! A session's streams to its client outside any request: the GET stream, the upstreams' GET
//! streams held open while the client has one, and the task messages that wait for a stream.

use foldhash::{HashMap, HashMapExt};
use taskgate_protocol::RequestId;
use taskgate_upstream::{StreamHold, UpstreamSession};

use crate::outbound::{Frame, Outbound};

/// Task-related messages queued for a client with no open stream, per session.
const MAX_WAITING: usize = 256;

/// A message waiting for a stream: its task, its id (a relayed request) and its text.
pub(super) struct Waiting {
    pub task: String,
    pub id: Option<RequestId>,
    pub frame: Frame,
}

/// Why a message could not wait.
#[derive(Debug, PartialEq)]
pub(super) enum NoRoom {
    /// As many messages wait as a session may hold.
    Count,
    /// Their bytes would pass `server.session_buffer_bytes`.
    Bytes,
}

#[derive(Default)]
pub(super) struct Streams {
    /// The standalone GET stream, when the client has one open.
    get: Option<Outbound>,
    /// GET streams of the client's not yet ended (a new one may replace an old one before the
    /// old one's response ends); while there is one, each upstream session's GET stream is held
    /// open, for what it carries to reach the client.
    clients: usize,
    upstreams: HashMap<String, StreamHold>,
    /// Task-related messages for the client while it has no stream open: delivered on the next
    /// `tasks/result` for that task, or the next GET stream.
    waiting: Vec<Waiting>,
    /// The bytes in `waiting` (bounded by `server.session_buffer_bytes`).
    waiting_bytes: usize,
    /// The client has had a GET stream open, here or at another replica.
    listened: bool,
}

impl Streams {
    pub fn new() -> Streams {
        Streams { upstreams: HashMap::new(), ..Streams::default() }
    }

    /// The GET stream, open or not yet known to be closed.
    pub fn get(&self) -> Option<&Outbound> {
        self.get.as_ref()
    }

    /// The GET stream, when it is open.
    pub fn open_get(&self) -> Option<Outbound> {
        self.get.clone().filter(|s| !s.is_closed())
    }

    /// Whether the client has a GET stream whose response has not ended.
    pub fn client_listens(&self) -> bool {
        self.clients > 0
    }

    /// Whether the client has ever had a GET stream open, here or (as heard) at another replica.
    pub fn ever_listened(&self) -> bool {
        self.listened
    }

    /// The client has a GET stream open at another replica.
    pub fn listens_elsewhere(&mut self) {
        self.listened = true;
    }

    /// The client opened a GET stream: it replaces the one before at once, taking over what
    /// that one had not delivered, gets what waited, and holds each upstream's GET stream open.
    pub fn opened<'a>(&mut self, stream: Outbound, upstreams: impl Iterator<Item = (&'a String, &'a UpstreamSession)>) {
        self.clients += 1;
        self.listened = true;
        for (name, session) in upstreams {
            self.upstreams.entry(name.clone()).or_insert_with(|| session.hold_stream());
        }
        if let Some(old) = self.get.take() {
            stream.take_over(&old);
        }
        for waiting in self.take_waiting(|_| true) {
            let _ = stream.send_frame(waiting.frame);
        }
        self.get = Some(stream);
    }

    /// A GET stream's response ended: whether the client has none left (then nothing receives
    /// what the upstreams' GET streams carry, and they may close).
    pub fn ended(&mut self) -> bool {
        self.clients = self.clients.saturating_sub(1);
        if self.clients == 0 {
            self.upstreams.clear();
        }
        self.clients == 0
    }

    /// Takes the GET stream away (to close it).
    pub fn take_get(&mut self) -> Option<Outbound> {
        self.get.take()
    }

    /// A newly opened upstream session: its GET stream is held open while the client has one.
    pub fn hold(&mut self, upstream: &str, session: &UpstreamSession) {
        if self.clients > 0 {
            self.upstreams.insert(upstream.to_owned(), session.hold_stream());
        }
    }

    /// Lets an upstream's GET stream go (its session was let go).
    pub fn let_go(&mut self, upstream: &str) {
        self.upstreams.remove(upstream);
    }

    /// Lets every upstream's GET stream go.
    pub fn let_all_go(&mut self) {
        self.upstreams.clear();
    }

    /// Whether one more message may wait.
    pub fn may_wait(&self) -> bool {
        self.waiting.len() < MAX_WAITING
    }

    /// Keeps a message until a stream opens, within `max_bytes` for all that wait.
    pub fn wait(&mut self, waiting: Waiting, max_bytes: usize) -> Result<(), NoRoom> {
        if !self.may_wait() {
            return Err(NoRoom::Count);
        }
        if self.waiting_bytes + waiting.frame.json.len() > max_bytes {
            return Err(NoRoom::Bytes);
        }
        self.waiting_bytes += waiting.frame.json.len();
        self.waiting.push(waiting);
        Ok(())
    }

    /// Takes the waiting messages that `which` selects, in order.
    pub fn take_waiting(&mut self, which: impl Fn(&Waiting) -> bool) -> Vec<Waiting> {
        let (taken, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.waiting).into_iter().partition(|w| which(w));
        self.waiting = rest;
        self.waiting_bytes = self.waiting.iter().map(|w| w.frame.json.len()).sum();
        taken
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiting(task: &str, bytes: usize) -> Waiting {
        let frame =
            Frame { json: "x".repeat(bytes), response: false, store_unavailable: false, error: false, pause: None };
        Waiting { task: task.into(), id: None, frame }
    }

    #[test]
    fn what_waits_is_bounded_in_count_and_bytes_and_taken_in_order() {
        let mut streams = Streams::new();
        assert_eq!(streams.wait(waiting("a", 60), 100), Ok(()));
        assert_eq!(streams.wait(waiting("b", 50), 100), Err(NoRoom::Bytes));
        assert_eq!(streams.wait(waiting("b", 30), 100), Ok(()));
        assert_eq!(streams.wait(waiting("a", 10), 100), Ok(()));
        let taken = streams.take_waiting(|w| w.task == "a");
        assert_eq!(taken.iter().map(|w| w.frame.json.len()).collect::<Vec<_>>(), vec![60, 10]);
        // The bytes of what was taken are free again.
        assert_eq!(streams.wait(waiting("c", 60), 100), Ok(()));
        streams.take_waiting(|_| true);
        for _ in 0..MAX_WAITING {
            assert_eq!(streams.wait(waiting("d", 0), 100), Ok(()));
        }
        assert!(!streams.may_wait());
        assert_eq!(streams.wait(waiting("d", 0), 100), Err(NoRoom::Count));
    }

    #[test]
    fn the_client_listens_until_its_last_get_stream_ends() {
        let mut streams = Streams::new();
        assert!(!streams.client_listens());
        assert!(streams.ended(), "ending none leaves none");
        streams.clients = 2;
        assert!(!streams.ended());
        assert!(streams.client_listens());
        assert!(streams.ended());
        assert!(!streams.client_listens());
    }
}
