//! What a client can put in the log, and how often.
//!
//! - [`Untrusted`]: a client-provided string (a task id, a request id, a method, a reason) as a
//!   log field: at most [`UNTRUSTED_BYTES`] bytes, control characters escaped, so one request
//!   cannot write megabytes of log or forge a line.
//! - [`Limiter`]: repeated failures (look-ups of unknown tasks, refused credentials) are logged at
//!   most [`LINES_PER_SECOND`] times a second each; the next line logged says how many were
//!   suppressed.
//! - [`SafeWriter`]: the log writer of `taskgate serve` escapes any line break or control
//!   character inside a line and caps the line's length, whatever a field holds.

use std::collections::HashMap;
use std::fmt;
use std::io::Write;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Longest client-provided string in a log field, in bytes.
pub const UNTRUSTED_BYTES: usize = 128;
/// Lines per second for each kind of repeated failure.
pub const LINES_PER_SECOND: u32 = 10;
/// Longest log line [`SafeWriter`] writes, in bytes.
pub const MAX_LINE_BYTES: usize = 16 * 1024;

/// A client-provided string as a log field.
pub struct Untrusted<'a>(pub &'a str);

impl fmt::Display for Untrusted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The usual case (a method, a session id) is short and plain: written at once.
        if self.0.len() <= UNTRUSTED_BYTES && !self.0.bytes().any(|b| b.is_ascii_control() || b == b'\\' || b >= 0x80) {
            return f.write_str(self.0);
        }
        let mut written = 0;
        for c in self.0.chars() {
            if written + c.len_utf8() > UNTRUSTED_BYTES {
                return write!(f, "…({} bytes)", self.0.len());
            }
            written += c.len_utf8();
            if c.is_control() || c == '\\' {
                for e in c.escape_default() {
                    fmt::Write::write_char(f, e)?;
                }
            } else {
                fmt::Write::write_char(f, c)?;
            }
        }
        Ok(())
    }
}

/// Counts lines per kind in one-second windows.
#[derive(Default)]
pub struct Limiter {
    windows: Mutex<HashMap<&'static str, Window>>,
}

struct Window {
    started: Instant,
    lines: u32,
    suppressed: u64,
}

impl Limiter {
    /// Whether a line of `kind` may be logged now: `Some(n)` with the number suppressed since
    /// the last one logged, `None` when this one is suppressed.
    pub fn allow(&self, kind: &'static str) -> Option<u64> {
        let now = Instant::now();
        let mut windows = self.windows.lock();
        let window = windows.entry(kind).or_insert(Window { started: now, lines: 0, suppressed: 0 });
        if now.duration_since(window.started) >= Duration::from_secs(1) {
            window.started = now;
            window.lines = 0;
        }
        if window.lines >= LINES_PER_SECOND {
            window.suppressed += 1;
            return None;
        }
        window.lines += 1;
        Some(std::mem::take(&mut window.suppressed))
    }
}

/// The process's limiter.
pub fn limiter() -> &'static Limiter {
    static LIMITER: std::sync::OnceLock<Limiter> = std::sync::OnceLock::new();
    LIMITER.get_or_init(Limiter::default)
}

/// Writes each log line (one `write` per event, as `tracing_subscriber::fmt` does) with line
/// breaks and control characters inside it escaped, and at most [`MAX_LINE_BYTES`] bytes.
/// ESC passes only when `ansi` is set (the formatter's own colours on a terminal); otherwise it
/// is escaped too, so no field can move the cursor or recolour a log viewer.
pub struct SafeWriter<W> {
    /// Where the lines go.
    pub inner: W,
    /// Whether ANSI escape sequences are the formatter's (a terminal).
    pub ansi: bool,
}

impl<W: Write> Write for SafeWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let (body, newline) = match buf.strip_suffix(b"\n") {
            Some(body) => (body, true),
            None => (buf, false),
        };
        let mut out = Vec::with_capacity(body.len().min(MAX_LINE_BYTES) + 32);
        for &b in body {
            if out.len() >= MAX_LINE_BYTES {
                out.extend_from_slice(format!(" …(line cut at {MAX_LINE_BYTES} of {} bytes)", body.len()).as_bytes());
                break;
            }
            match b {
                b'\n' => out.extend_from_slice(b"\\n"),
                b'\r' => out.extend_from_slice(b"\\r"),
                // A tab is harmless; ESC is the formatter's own colour on a terminal.
                b'\t' => out.push(b),
                0x1b if self.ansi => out.push(b),
                0..=0x1f | 0x7f => out.extend_from_slice(format!("\\x{b:02x}").as_bytes()),
                _ => out.push(b),
            }
        }
        if newline {
            out.push(b'\n');
        }
        self.inner.write_all(&out)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn untrusted_strings_are_cut_and_escaped() {
        assert_eq!(Untrusted("plain-id").to_string(), "plain-id");
        assert_eq!(Untrusted("a\nb\rc\u{1b}[31m").to_string(), "a\\nb\\rc\\u{1b}[31m");
        assert_eq!(Untrusted("a\\b\u{7f}").to_string(), "a\\\\b\\u{7f}");
        assert_eq!(Untrusted("café").to_string(), "café");
        // Exactly the limit is written whole; one byte more is cut.
        let limit = "y".repeat(UNTRUSTED_BYTES);
        assert_eq!(Untrusted(&limit).to_string(), limit);
        assert!(Untrusted(&format!("{limit}y")).to_string().ends_with("…(129 bytes)"));
        let long = "x".repeat(4 * 1024 * 1024);
        let shown = Untrusted(&long).to_string();
        assert!(shown.len() < UNTRUSTED_BYTES + 32, "{}", shown.len());
        assert!(shown.ends_with("…(4194304 bytes)"), "{shown}");
        // A multi-byte character is never split.
        let wide = "é".repeat(100);
        assert!(Untrusted(&wide).to_string().starts_with(&"é".repeat(64)));
    }

    #[test]
    fn a_kind_is_limited_per_second_and_the_next_line_says_how_many_were_suppressed() {
        let limiter = Limiter::default();
        let allowed = (0..100).filter(|_| limiter.allow("lookup").is_some()).count();
        assert_eq!(allowed, LINES_PER_SECOND as usize);
        assert_eq!(limiter.allow("other"), Some(0), "kinds are counted apart");
        limiter.windows.lock().get_mut("lookup").unwrap().started -= Duration::from_secs(1);
        assert_eq!(limiter.allow("lookup"), Some(90));
        assert_eq!(limiter.allow("lookup"), Some(0));
    }

    #[test]
    fn the_writer_keeps_each_event_on_one_bounded_line() {
        let mut out = Vec::new();
        let mut w = SafeWriter { inner: &mut out, ansi: false };
        w.write_all(b"INFO task created task=a\nINFO forged line\n").unwrap();
        w.write_all(b"INFO id=\x1b[2J\n").unwrap();
        w.write_all(format!("INFO big={}\n", "y".repeat(100_000)).as_bytes()).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text:.200}");
        assert_eq!(lines[0], "INFO task created task=a\\nINFO forged line");
        assert_eq!(lines[1], "INFO id=\\x1b[2J", "no escape sequence reaches a log viewer");
        assert!(lines[2].len() < MAX_LINE_BYTES + 100 && lines[2].contains("line cut at"));
    }
}
