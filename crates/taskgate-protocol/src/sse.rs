//! Server-Sent Events framing (the WHATWG event-stream format) for MCP messages: an encoder for
//! the gateway's own streams and an incremental decoder for upstream streams.

use bytes::Bytes;

/// A gateway-private notification method, never sent to a client: an upstream closed a call's
/// stream before its response (`params.retryMs`: the wait it asked for before resuming), so the
/// client's own stream of that call may close the same way and be resumed.
pub const PAUSED: &str = "taskgate/streamPaused";

/// Encodes one SSE event carrying `data` (one JSON message, so it has no newlines) and an id.
pub fn encode_event(id: Option<&str>, data: &str) -> String {
    let mut out = String::with_capacity(data.len() + 32);
    if let Some(id) = id {
        out.push_str("id: ");
        out.push_str(id);
        out.push('\n');
    }
    out.push_str("event: message\n");
    for line in data.split('\n') {
        out.push_str("data: ");
        out.push_str(line);
        out.push('\n');
    }
    out.push('\n');
    out
}

/// One decoded event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Event {
    /// The `event:` field, `message` when absent.
    pub event: Option<String>,
    /// The `id:` field.
    pub id: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
    /// The `retry:` field in milliseconds.
    pub retry: Option<u64>,
}

/// Incremental decoder: feed bytes as they arrive, take complete events out.
///
/// Whole lines are read where they lie in the chunk that brought them. A line arriving in
/// pieces (a result of megabytes is one `data:` line) is kept as the chunks it came in, each
/// scanned once, and joined once when its end arrives: a buffer grown chunk by chunk would copy
/// what it holds at each growth.
#[derive(Debug, Default)]
pub struct Decoder {
    /// The line being read, as it came: [`Piece`]s, in order.
    pending: Vec<Piece>,
    /// Their bytes in all.
    pending_len: usize,
    current: Event,
    has_data: bool,
    /// Bytes of the lines the current event is made of so far (its `data`, `event` and `id`
    /// lines as they came): with the line being read, what the bound applies to.
    held: usize,
    max_event_bytes: usize,
    /// The id of the last event dispatched with one (the stream's `Last-Event-ID`).
    last_id: Option<String>,
    /// The reconnection time the stream asked for last (`retry:`), in milliseconds.
    retry: Option<u64>,
}

/// A piece of the line being read: a large chunk's part kept as it came (no copy), or small
/// chunks copied together, so that a line trickling in byte by byte holds its bytes and not a
/// chunk handle per byte.
#[derive(Debug)]
enum Piece {
    Kept(Bytes),
    Copied(Vec<u8>),
}

impl Piece {
    fn bytes(&self) -> &[u8] {
        match self {
            Piece::Kept(b) => b,
            Piece::Copied(v) => v,
        }
    }
}

/// A piece at least this long is kept as it came; a shorter one is copied.
const KEPT_PIECE: usize = 4096;

/// The decoder met an event larger than its bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventTooLarge(pub usize);

impl Decoder {
    /// A decoder refusing events larger than `max_event_bytes`.
    pub fn new(max_event_bytes: usize) -> Decoder {
        Decoder { max_event_bytes, ..Decoder::default() }
    }

    /// The id of the last event that carried one, data or not: what a client resuming the
    /// stream sends as `Last-Event-ID` (a blank `id:` clears it, as in the SSE standard).
    pub fn last_event_id(&self) -> Option<&str> {
        self.last_id.as_deref()
    }

    /// The reconnection time the stream asked for last (`retry:`), in milliseconds.
    pub fn retry_ms(&self) -> Option<u64> {
        self.retry
    }

    /// Feeds bytes; returns the events they complete.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Vec<Event>, EventTooLarge> {
        self.feed_chunk(Bytes::copy_from_slice(bytes))
    }

    /// Feeds a chunk as it came from the connection, without copying it; returns the events it
    /// completes.
    pub fn feed_chunk(&mut self, chunk: Bytes) -> Result<Vec<Event>, EventTooLarge> {
        let mut events = Vec::new();
        let mut start = 0;
        if !self.pending.is_empty() {
            let Some(end) = memchr::memchr(b'\n', &chunk) else {
                return self.keep(chunk).map(|()| events);
            };
            // The line is whole: its pieces joined once, if it is within the bound.
            if self.held + self.pending_len + end > self.max_event_bytes {
                return Err(EventTooLarge(self.max_event_bytes));
            }
            let mut line = Vec::with_capacity(self.pending_len + end);
            for piece in self.pending.drain(..) {
                line.extend_from_slice(piece.bytes());
            }
            self.pending_len = 0;
            line.extend_from_slice(&chunk[..end]);
            self.line(&line, &mut events)?;
            start = end + 1;
        }
        // memchr's vector search, and each line read where it lies: the text is checked once,
        // and copied once, into the event's data.
        while let Some(pos) = memchr::memchr(b'\n', &chunk[start..]) {
            let end = start + pos;
            self.line(&chunk[start..end], &mut events)?;
            start = end + 1;
        }
        if start < chunk.len() {
            self.keep(chunk.slice(start..))?;
        }
        Ok(events)
    }

    /// Keeps `piece`, the start or a middle of the line being read.
    fn keep(&mut self, piece: Bytes) -> Result<(), EventTooLarge> {
        self.pending_len += piece.len();
        // The bound holds for the line being read whatever the chunks it comes in.
        if self.held + self.pending_len > self.max_event_bytes {
            return Err(EventTooLarge(self.max_event_bytes));
        }
        match self.pending.last_mut() {
            Some(Piece::Copied(last)) if piece.len() < KEPT_PIECE => last.extend_from_slice(&piece),
            _ if piece.len() < KEPT_PIECE => self.pending.push(Piece::Copied(piece.to_vec())),
            _ => self.pending.push(Piece::Kept(piece)),
        }
        Ok(())
    }

    /// One whole line (without its `\n`) into the event being read.
    fn line(&mut self, line: &[u8], events: &mut Vec<Event>) -> Result<(), EventTooLarge> {
        // The bound holds for every line as it is read, whatever the chunks it came in.
        if self.held + line.len() > self.max_event_bytes {
            return Err(EventTooLarge(self.max_event_bytes));
        }
        let raw = line.len();
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let line = match std::str::from_utf8(line) {
            Ok(text) => std::borrow::Cow::Borrowed(text),
            Err(_) => String::from_utf8_lossy(line),
        };
        match take_line(&mut self.current, &mut self.has_data, &line) {
            Taken::Dispatched { event, has_data } => {
                if let Some(id) = &event.id {
                    self.last_id = (!id.is_empty()).then(|| id.clone());
                }
                if has_data {
                    events.push(event);
                }
                self.held = 0;
            }
            Taken::Retry(ms) => self.retry = ms.or(self.retry),
            Taken::Stored => self.held += raw,
            Taken::Ignored => {}
        }
        Ok(())
    }
}

/// What a line did to the event being read.
enum Taken {
    /// A blank line ended the event (without data it is not one, but its id counts).
    Dispatched { event: Event, has_data: bool },
    /// A `retry:` field (its value, if a number).
    Retry(Option<u64>),
    /// The line is kept in the event.
    Stored,
    /// A comment, or a field that is not kept.
    Ignored,
}

/// One line of the stream into the event being read.
fn take_line(current: &mut Event, has_data: &mut bool, line: &str) -> Taken {
    if line.is_empty() {
        let done = std::mem::take(current);
        let had = std::mem::replace(has_data, false);
        return Taken::Dispatched { event: done, has_data: had };
    }
    if line.starts_with(':') {
        return Taken::Ignored;
    }
    let (field, value) = match line.split_once(':') {
        Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
        None => (line, ""),
    };
    match field {
        "data" => {
            if *has_data {
                current.data.push('\n');
            }
            current.data.push_str(value);
            *has_data = true;
        }
        "event" => current.event = Some(value.to_owned()),
        "id" => current.id = Some(value.to_owned()),
        "retry" => {
            current.retry = value.parse().ok();
            return Taken::Retry(current.retry);
        }
        _ => return Taken::Ignored,
    }
    Taken::Stored
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_event_id_and_retry_count_even_from_blocks_without_data() {
        let mut d = Decoder::new(1024);
        assert_eq!(d.feed(b"id: s.0\nretry: 5000\n\n").unwrap(), vec![]);
        assert_eq!((d.last_event_id(), d.retry_ms()), (Some("s.0"), Some(5000)));
        let events = d.feed(b"id: s.1\ndata: {}\n\nretry: x\n\n").unwrap();
        assert_eq!(events.len(), 1);
        assert_eq!((d.last_event_id(), d.retry_ms()), (Some("s.1"), Some(5000)));
        d.feed(b"id:\ndata: {}\n\n").unwrap();
        assert_eq!(d.last_event_id(), None);
    }

    #[test]
    fn decodes_across_chunk_boundaries() {
        let mut d = Decoder::new(1 << 20);
        let mut events = d.feed(b"id: 1\nda").unwrap();
        assert!(events.is_empty());
        events.extend(d.feed(b"ta: {\"a\":1}\r\n\r\n: comment\n\ndata: x\ndata: y\n\n").unwrap());
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].id.as_deref(), Some("1"));
        assert_eq!(events[0].data, "{\"a\":1}");
        assert_eq!(events[1].data, "x\ny");
    }

    #[test]
    fn priming_event_with_empty_data_is_an_event() {
        let mut d = Decoder::new(1024);
        let events = d.feed(b"id: p\ndata: \n\n").unwrap();
        assert_eq!(events, vec![Event { id: Some("p".into()), data: String::new(), ..Event::default() }]);
    }

    /// The bound is the same whatever chunks the bytes come in (a long `event:` line, whole or
    /// in pieces), and comments between events never add up to it.
    #[test]
    fn the_bound_does_not_depend_on_chunks_and_comments_do_not_count() {
        let stream = format!("event: {}\ndata: x\n\n", "e".repeat(100));
        assert!(Decoder::new(64).feed(stream.as_bytes()).is_err());
        let mut d = Decoder::new(64);
        assert!(stream.as_bytes().chunks(5).any(|c| d.feed(c).is_err()));
        let mut d = Decoder::new(64);
        for _ in 0..1000 {
            assert!(d.feed(b": keep-alive\n").unwrap().is_empty());
        }
        assert_eq!(d.feed(b"data: ok\n\n").unwrap()[0].data, "ok");
    }

    #[test]
    fn refuses_oversized_events() {
        let mut d = Decoder::new(8);
        assert!(d.feed(b"data: 0123456789").is_err());
    }

    #[test]
    fn a_long_line_in_many_chunks_is_kept_as_they_came_and_joined_once() {
        // 4 MiB of data in 4 KiB chunks: each kept as it came (the same bytes, not a copy).
        let mut d = Decoder::new(8 << 20);
        let chunk = Bytes::from(vec![b'x'; 4096]);
        assert!(d.feed(b"data: ").unwrap().is_empty());
        for _ in 0..1024 {
            assert!(d.feed_chunk(chunk.clone()).unwrap().is_empty());
        }
        assert_eq!(d.pending.len(), 1025);
        assert!(matches!(&d.pending[1], Piece::Kept(b) if b.as_ptr() == chunk.as_ptr()));
        let events = d.feed(b"\n\n").unwrap();
        assert_eq!(events[0].data.len(), 4 << 20);
        assert!(d.pending.is_empty() && d.pending_len == 0);
    }

    #[test]
    fn a_line_trickling_in_byte_by_byte_is_held_as_its_bytes() {
        let mut d = Decoder::new(1 << 20);
        for b in b"data: ".iter().chain([b'x'; 10_000].iter()) {
            assert!(d.feed(std::slice::from_ref(b)).unwrap().is_empty());
        }
        assert_eq!(d.pending.len(), 1, "one piece, not one per byte");
        assert_eq!(d.pending_len, 10_006);
        assert_eq!(d.feed(b"\n\n").unwrap()[0].data, "x".repeat(10_000));
    }

    #[test]
    fn invalid_utf8_in_a_line_is_replaced_as_before() {
        let mut d = Decoder::new(1024);
        let events = d.feed(b"data: a\xffb\n\n").unwrap();
        assert_eq!(events[0].data, "a\u{fffd}b");
    }

    #[test]
    fn encode_then_decode() {
        let text = encode_event(Some("s-1"), "{\"jsonrpc\":\"2.0\"}");
        let mut d = Decoder::new(1024);
        let events = d.feed(text.as_bytes()).unwrap();
        assert_eq!(events[0].data, "{\"jsonrpc\":\"2.0\"}");
        assert_eq!(events[0].event.as_deref(), Some("message"));
    }
}
