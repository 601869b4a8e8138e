//! The log of `taskgate serve`: its filter, its writer, and how fields are written.

use std::fmt::{self, Write as _};

use taskgate_config::{Config, LogFormat};
use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::EnvFilter;

/// Installs the global subscriber for `config.logging`, and the export of spans when
/// `config.traces` names an endpoint.
pub fn init(config: &Config) {
    let tracer = crate::traces::tracer(&config.traces).unwrap_or_else(|e| {
        eprintln!("taskgate: traces cannot be exported ({e}); going on without them");
        None
    });
    let filter = EnvFilter::try_new(&config.logging.level).unwrap_or_else(|e| {
        eprintln!("taskgate: invalid log filter {:?} ({e}); using \"info\"", config.logging.level);
        EnvFilter::new("info")
    });
    // Every line is escaped and bounded whatever a field holds (invariant: a client cannot
    // forge or flood log lines).
    // Colours only on a terminal: a log file or collector gets plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let writer = move || taskgate_core::logs::SafeWriter { inner: std::io::stderr(), ansi };
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(writer).with_ansi(ansi);
    match (config.logging.format, ansi) {
        (LogFormat::Json, _) => install(builder.json().finish(), tracer),
        (LogFormat::Human, true) => install(builder.finish(), tracer),
        (LogFormat::Human, false) => install(builder.fmt_fields(PlainFields).finish(), tracer),
    }
}

/// Installs `subscriber`, with OpenTelemetry's layer over it when there is a tracer.
fn install<S>(subscriber: S, tracer: Option<opentelemetry_sdk::trace::Tracer>)
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a> + Send + Sync + 'static,
{
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let layer = tracer.map(|tracer| tracing_opentelemetry::layer().with_tracer(tracer));
    let _ = subscriber.with(layer).try_init();
}

/// Fields as `name=value` separated by spaces, the message first and unnamed: what
/// tracing-subscriber's default writes without colours, written straight. The default styles
/// every name even with colours off, and a span's fields are written when the span is made:
/// the spans of each request (`mcp_request`, `upstream_call`) cost about 20k instructions a
/// proxied call that way, a tenth of the call. (Line breaks and control characters are
/// escaped by [`taskgate_core::logs::SafeWriter`], as with the default.)
pub struct PlainFields;

impl<'w> FormatFields<'w> for PlainFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'w>, fields: R) -> fmt::Result {
        let writer = Gathered { writer, buffer: [0; GATHERED], len: 0 };
        let mut visitor = PlainVisitor { writer, first: true, result: Ok(()) };
        fields.record(&mut visitor);
        visitor.result.and_then(|()| visitor.writer.flush())
    }
}

/// Bytes of fields gathered before they are written on.
const GATHERED: usize = 256;

/// Gathers what is written and writes it on in one piece: a span's fields go into a string
/// of their own, which would otherwise grow (and be moved) several times for each span.
struct Gathered<'w> {
    writer: Writer<'w>,
    buffer: [u8; GATHERED],
    len: usize,
}

impl Gathered<'_> {
    fn flush(&mut self) -> fmt::Result {
        let gathered = std::mem::take(&mut self.len);
        // Whole pieces of `str` were gathered: this is UTF-8.
        self.writer.write_str(std::str::from_utf8(&self.buffer[..gathered]).map_err(|_| fmt::Error)?)
    }
}

impl fmt::Write for Gathered<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if self.len + s.len() > GATHERED {
            self.flush()?;
            if s.len() > GATHERED {
                return self.writer.write_str(s);
            }
        }
        self.buffer[self.len..self.len + s.len()].copy_from_slice(s.as_bytes());
        self.len += s.len();
        Ok(())
    }
}

struct PlainVisitor<'w> {
    writer: Gathered<'w>,
    first: bool,
    result: fmt::Result,
}

impl PlainVisitor<'_> {
    /// Writes the separator and the field's name, unless it is the message; `false` when the
    /// field is not written at all.
    fn start(&mut self, field: &Field) -> bool {
        if self.result.is_err() {
            return false;
        }
        let name = field.name();
        // Metadata of records from the `log` crate, already shown as the line's target.
        if name.starts_with("log.") {
            return false;
        }
        if !std::mem::take(&mut self.first) {
            self.result = self.writer.write_char(' ');
        }
        if name != "message" {
            let name = name.strip_prefix("r#").unwrap_or(name);
            self.result = self.result.and_then(|()| self.writer.write_str(name));
            self.result = self.result.and_then(|()| self.writer.write_char('='));
        }
        self.result.is_ok()
    }
}

impl Visit for PlainVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if self.start(field) {
            self.result = match field.name() {
                "message" => self.writer.write_str(value),
                _ => write!(self.writer, "{value:?}"),
            };
        }
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        if self.start(field) {
            self.result = write!(self.writer, "{value}");
            let mut source = value.source();
            if source.is_some() {
                self.result = self.result.and_then(|()| write!(self.writer, " {}.sources=[", field.name()));
                let mut first = true;
                while let Some(s) = source {
                    let pad = if std::mem::take(&mut first) { "" } else { ", " };
                    self.result = self.result.and_then(|()| write!(self.writer, "{pad}{s}"));
                    source = s.source();
                }
                self.result = self.result.and_then(|()| self.writer.write_char(']'));
            }
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if self.start(field) {
            self.result = write!(self.writer, "{value:?}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `fields` writes of the lines `event` logs.
    fn written<F>(fields: F, event: impl FnOnce()) -> String
    where
        F: for<'w> FormatFields<'w> + Send + Sync + 'static,
    {
        let lines = std::sync::Arc::new(parking_lot::Mutex::new(Vec::<u8>::new()));
        let sink = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .without_time()
            .with_target(false)
            .with_level(false)
            .fmt_fields(fields)
            .with_writer(move || Sink(sink.clone()))
            .finish();
        tracing::subscriber::with_default(subscriber, event);
        let text = lines.lock().clone();
        String::from_utf8(text).expect("utf-8")
    }

    struct Sink(std::sync::Arc<parking_lot::Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[derive(Debug)]
    struct Outer(std::io::Error);

    impl fmt::Display for Outer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("cannot reach the upstream")
        }
    }

    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    fn lines() {
        let span = tracing::info_span!("mcp_request", tenant = %"acme", method = "tools/call", n = 3);
        let entered = span.enter();
        let error = Outer(std::io::Error::other("refused"));
        tracing::warn!(r#type = "x", ok = true, error = &error as &dyn std::error::Error, "the call failed");
        tracing::info!(message = "a \"quoted\" message", later = ?Some(2));
        drop(entered);
        let idle = tracing::info_span!("idle", upstream = tracing::field::Empty, n = 1);
        idle.record("upstream", "demo");
        let _idle = idle.enter();
        tracing::info!("nothing to do");
        let empty = tracing::info_span!("empty");
        let _empty = empty.enter();
        tracing::info!(count = 2u64);
    }

    #[test]
    fn fields_longer_than_what_is_gathered_at_once_are_written_whole_and_in_order() {
        // Values that fill what is gathered exactly, cross its end, and exceed it alone.
        let lines = || {
            for len in [1, 200, 230, 240, 250, 251, 256, 257, 600] {
                let value = "v".repeat(len);
                let span = tracing::info_span!("span", a = %value, b = %"é".repeat(len / 2), c = len);
                let _entered = span.enter();
                tracing::info!(long = %value, "event {len}");
            }
        };
        let plain = written(PlainFields, lines);
        assert_eq!(plain, written(tracing_subscriber::fmt::format::DefaultFields::new(), lines));
        assert!(plain.contains(&format!("a={} ", "v".repeat(600))), "{plain}");
    }

    #[test]
    fn fields_are_written_as_the_default_writes_them_without_colours() {
        let plain = written(PlainFields, lines);
        assert_eq!(plain, written(tracing_subscriber::fmt::format::DefaultFields::new(), lines));
        assert_eq!(
            plain,
            "mcp_request{tenant=acme method=\"tools/call\" n=3}: the call failed type=\"x\" ok=true \
             error=cannot reach the upstream error.sources=[refused]\n\
             mcp_request{tenant=acme method=\"tools/call\" n=3}: a \"quoted\" message later=Some(2)\n\
             idle{n=1 upstream=\"demo\"}: nothing to do\n\
             idle{n=1 upstream=\"demo\"}:empty: count=2\n"
        );
    }
}
