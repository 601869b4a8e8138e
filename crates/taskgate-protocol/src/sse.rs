//! Server-Sent Events framing (the WHATWG event-stream format) for MCP messages: an encoder for
//! the gateway's own streams and an incremental decoder for upstream streams.

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
#[derive(Debug, Default)]
pub struct Decoder {
    buffer: Vec<u8>,
    /// How much of `buffer` is known to hold no line end: a long line arriving in many chunks
    /// is scanned once, not once per chunk.
    scanned: usize,
    current: Event,
    has_data: bool,
    /// Bytes of the lines the current event is made of so far (its `data`, `event` and `id`
    /// lines as they came): with the line being read, what the bound applies to.
    held: usize,
    max_event_bytes: usize,
}

/// The decoder met an event larger than its bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventTooLarge(pub usize);

impl Decoder {
    /// A decoder that refuses events larger than `max_event_bytes`.
    pub fn new(max_event_bytes: usize) -> Decoder {
        Decoder { max_event_bytes, ..Decoder::default() }
    }

    /// Feeds bytes; returns the events they complete.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Vec<Event>, EventTooLarge> {
        self.buffer.extend_from_slice(bytes);
        let mut events = Vec::new();
        let mut start = 0;
        let mut from = self.scanned;
        // memchr's vector search, and each line read where it lies (a result of megabytes comes
        // as one line): the text is checked once, and copied once, into the event's data.
        while let Some(pos) = memchr::memchr(b'\n', &self.buffer[from..]) {
            let end = from + pos;
            // The bound holds for every line as it is read, whatever the chunks it came in.
            if self.held + (end - start) > self.max_event_bytes {
                return Err(EventTooLarge(self.max_event_bytes));
            }
            let mut line = &self.buffer[start..end];
            let raw = line.len();
            if line.last() == Some(&b'\r') {
                line = &line[..line.len() - 1];
            }
            let line = match std::str::from_utf8(line) {
                Ok(text) => std::borrow::Cow::Borrowed(text),
                Err(_) => String::from_utf8_lossy(line),
            };
            match take_line(&mut self.current, &mut self.has_data, &line) {
                Taken::Dispatched(event) => {
                    events.extend(event);
                    self.held = 0;
                }
                Taken::Stored => self.held += raw,
                Taken::Ignored => {}
            }
            start = end + 1;
            from = start;
        }
        // A line arriving in pieces stays in place until it is whole (one copy, at the end).
        if start > 0 {
            self.buffer.drain(..start);
        }
        self.scanned = self.buffer.len();
        if self.held + self.buffer.len() > self.max_event_bytes {
            return Err(EventTooLarge(self.max_event_bytes));
        }
        Ok(events)
    }
}

/// What a line did to the event being read.
enum Taken {
    /// A blank line ended the event (`None`: it had no data, and is not one).
    Dispatched(Option<Event>),
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
        return Taken::Dispatched(had.then_some(done));
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
            return Taken::Ignored;
        }
        _ => return Taken::Ignored,
    }
    Taken::Stored
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn a_long_line_in_many_chunks_is_scanned_once() {
        // 4 MiB of data in 4 KiB chunks: each byte is looked at a bounded number of times.
        let mut d = Decoder::new(8 << 20);
        let chunk = vec![b'x'; 4096];
        assert!(d.feed(b"data: ").unwrap().is_empty());
        for _ in 0..1024 {
            assert!(d.feed(&chunk).unwrap().is_empty());
            assert_eq!(d.scanned, d.buffer.len());
        }
        let events = d.feed(b"\n\n").unwrap();
        assert_eq!(events[0].data.len(), 4 << 20);
        assert!(d.buffer.is_empty() && d.scanned == 0);
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
