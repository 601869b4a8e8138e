//! Fuzzing on stable Rust of every parser a client or an upstream can reach.
//!
//! `cargo fuzz` needs a nightly compiler, which this project does not use; this harness needs
//! none. Each [`Target`] takes bytes and checks what must hold for any input: no panic, and
//! where a parser's output can be written back, the same meaning when read again. Inputs come
//! from a corpus kept in the repository (`crates/taskgate-fuzz/corpus/<target>/`), mutated
//! ([`Mutator`]: bit flips, interesting bytes and numbers, insertions, deletions, duplicated
//! and spliced ranges, the target's own tokens, deep nesting), with a seeded generator so a
//! run is repeatable. Every input that ever failed is kept in
//! `crates/taskgate-fuzz/regressions/<target>/` and replayed by the tests.
//!
//! - `cargo test -p taskgate-fuzz`: the short run (every corpus and regression input, then
//!   20,000 mutated cases per target; 5,000 of the configuration, slower to read).
//! - `cargo run --release -p taskgate-fuzz -- --cases 1000000`: the long run, bounded in cases
//!   and time, reporting cases per second; an input that fails is written to
//!   `regressions/<target>/` and the run exits 1.

use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use taskgate_protocol::{Message, Reply};

/// One parser and what must hold for any input.
pub struct Target {
    /// Its name (the corpus and regressions directory).
    pub name: &'static str,
    /// What it reads, in a few words.
    pub what: &'static str,
    /// Tokens its inputs are made of, inserted by the mutator.
    pub tokens: &'static [&'static str],
    /// Checks one input; panics when something that must hold does not.
    pub check: fn(&[u8]),
    /// Mutated cases of the short run (the tests, in a debug build).
    pub short_cases: u64,
}

/// Every target.
pub const TARGETS: &[Target] = &[
    Target {
        name: "envelope",
        what: "client messages (front door, strict: duplicate keys refused, raw arguments kept) and upstream replies (results passed through as text)",
        tokens: &[
            r#""jsonrpc":"2.0""#,
            r#""id":"#,
            r#""method":"tools/call""#,
            r#""params":"#,
            r#""arguments":"#,
            r#""_meta":"#,
            r#""result":"#,
            r#""error":{"code":-32600,"message":"x"}"#,
            r#""progressToken":"#,
            r#""io.modelcontextprotocol/protocolVersion":"2026-07-28""#,
            r#""\ud800""#,
            r#""\u0000""#,
        ],
        check: envelope,
        short_cases: 20_000,
    },
    Target {
        name: "sse",
        what: "Server-Sent Events from upstreams, whole or in any chunks",
        tokens: &["data: ", "event: message\n", "id: 7\n", "retry: 1000\n", ":\n", "\r\n", "\n\n", "\r"],
        check: sse,
        short_cases: 20_000,
    },
    Target {
        name: "cursor",
        what: "pagination cursors of tools/list, the other lists, and tasks/list",
        tokens: &["tools:", "resources:", "prompts:", "templates:", "tasks:", "=", "-", "_", "AAAA"],
        check: cursor,
        short_cases: 20_000,
    },
    Target {
        name: "meta",
        what: "2026-07-28 per-request _meta and the standard request headers' values",
        tokens: &[
            r#""io.modelcontextprotocol/protocolVersion""#,
            r#""io.modelcontextprotocol/clientCapabilities""#,
            r#""io.modelcontextprotocol/clientInfo""#,
            r#""io.modelcontextprotocol/logLevel""#,
            r#""2026-07-28""#,
            "=?base64?",
            "?=",
        ],
        check: meta,
        short_cases: 20_000,
    },
    Target {
        name: "config",
        what: "the configuration file (TOML), read and validated",
        tokens: &[
            "[server]\n",
            "[[upstream]]\n",
            "[[tenant]]\n",
            "[store]\n",
            "listen = ",
            "transport = \"stdio\"\n",
            "trusted_proxies = [\"10.0.0.0/8\"]\n",
            " = 0\n",
            " = 18446744073709551615\n",
            "\"${X}\"",
        ],
        // A configuration is read section by section and validated: slower than the others.
        check: config,
        short_cases: 5_000,
    },
];

/// The target named `name`.
pub fn target(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}

fn envelope(input: &[u8]) {
    if let Ok(Ok(message)) = Message::from_slice_strict(input) {
        // What the gateway writes, it reads back to the same message.
        let written = message.to_json();
        let again = Message::from_slice(written.as_bytes())
            .unwrap_or_else(|e| panic!("the gateway's own JSON does not parse: {e}: {written}"))
            .unwrap_or_else(|e| panic!("the gateway's own message is not one: {e:?}: {written}"));
        assert_eq!(again.to_value(), message.to_value(), "a message changed when written and read again");
    }
    let _ = Message::from_slice_front(input);
    // A result passed through as text is JSON text on one line (RFC 8259: numbers as the
    // upstream wrote them, whatever their range) with every surrogate escape paired, so any
    // client reads its strings.
    if let Ok(Ok(Reply::Passed { result, .. })) = Reply::from_slice(input, |_| true) {
        let text = result.get();
        assert!(!text.contains('\n'), "a passed result spans lines: {text}");
        serde_json::from_str::<serde::de::IgnoredAny>(text)
            .unwrap_or_else(|e| panic!("a passed result is not JSON: {e}: {text}"));
        let strings_read = serde_json::from_str::<Value>(text);
        if let Err(e) = strings_read {
            assert!(
                e.to_string().contains("number out of range"),
                "a passed result's strings do not read: {e}: {text}"
            );
        }
    }
}

fn sse(input: &[u8]) {
    const LIMIT: usize = 4096;
    let whole = taskgate_protocol::sse::Decoder::new(LIMIT).feed(input);
    // The same bytes in chunks whose sizes the input itself chooses decode to the same events.
    let mut decoder = taskgate_protocol::sse::Decoder::new(LIMIT);
    let mut events = Vec::new();
    let mut failed = None;
    let mut rest = input;
    let mut step = input.first().map_or(1, |b| usize::from(*b % 7) + 1);
    while !rest.is_empty() && failed.is_none() {
        let (chunk, after) = rest.split_at(step.min(rest.len()));
        match decoder.feed(chunk) {
            Ok(mut got) => events.append(&mut got),
            Err(e) => failed = Some(e),
        }
        rest = after;
        step = step % 13 + 1;
    }
    match (whole, failed) {
        (Ok(whole), None) => assert_eq!(whole, events, "the events depend on how the bytes were chunked"),
        (Err(_), Some(_)) => {}
        (whole, failed) => panic!("whole: {whole:?}, in chunks: {failed:?}"),
    }
}

fn cursor(input: &[u8]) {
    use futures_util::FutureExt;
    let text = String::from_utf8_lossy(input);
    for kind in ["resources", "templates", "prompts"] {
        if let Some(taskgate_core::offering_names::CursorRef::At(at)) =
            taskgate_core::offering_names::ListCursor::decode(kind, &text)
        {
            // A cursor read back is written the same way.
            let again = taskgate_core::offering_names::ListCursor::decode(kind, &at.encode(kind));
            assert!(matches!(again, Some(taskgate_core::offering_names::CursorRef::At(ref a)) if *a == at), "{text}");
        }
    }
    let catalog = taskgate_core::catalog::Catalog::new("__", Vec::new());
    let _ = catalog.page(Some(&text), 10, |_, _| true, |e| e.tool.task_support);
    let _ = taskgate_protocol::mcp::cursor(Some(&json!({ "cursor": text })));
    let store = taskgate_store::MemoryTaskStore::new(10);
    let owner = taskgate_store::Owner { tenant: "t".into(), principal: "p".into() };
    let listed = taskgate_store::TaskStore::list(&store, &owner, Some(&text), 10).now_or_never();
    assert!(listed.is_some(), "the memory store answers at once");
}

fn meta(input: &[u8]) {
    if let Ok(value) = serde_json::from_slice::<Value>(input) {
        let _ = taskgate_protocol::revision_2026::RequestMeta::from_params(Some(&value));
        let wrapped = json!({ "_meta": value, "name": "x" });
        let _ = taskgate_protocol::revision_2026::RequestMeta::from_params(Some(&wrapped));
        let mut taken = wrapped.clone();
        let fields = taskgate_protocol::revision_2026::PerRequest::take(Some(&mut taken));
        // What is taken out and put back is what was there.
        let mut restored = Some(taken);
        fields.restore(&mut restored);
        let _ = taskgate_protocol::mcp::relayable_client_capabilities(&value);
        let _ = taskgate_protocol::mcp::InitializeView::from_params(Some(&value));
        let _ = taskgate_protocol::mcp::ToolCallView::from_params(Some(&value));
        let _ = taskgate_protocol::mcp::requested_task(Some(&value));
    }
    let _ = taskgate_protocol::revision_2026::plain_header_value(input);
    let _ = taskgate_protocol::revision_2026::decode_header_value(input, |b| {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.decode(b).ok()
    });
}

fn config(input: &[u8]) {
    let read = String::from_utf8_lossy(input);
    let text = without_name_lookups(&read);
    let _ = taskgate_config::Config::read(&text, "fuzz.toml", &|_| None);
    let _ = taskgate_config::Config::from_toml(&text, "fuzz.toml", &|key| (key == "X").then(|| "1".to_owned()));
}

/// The text with every listen address that is a host name (which validation resolves: a DNS
/// query, off loopback and slow) made an address; the rest as it was.
fn without_name_lookups(text: &str) -> std::borrow::Cow<'_, str> {
    let Ok(mut table) = text.parse::<toml::Table>() else { return text.into() };
    let Some(toml::Value::Table(server)) = table.get_mut("server") else { return text.into() };
    let mut changed = false;
    for key in ["listen", "admin_listen"] {
        if let Some(toml::Value::String(listen)) = server.get_mut(key) {
            if listen.parse::<std::net::SocketAddr>().is_err() && !listen.starts_with("localhost:") {
                *listen = "127.0.0.1:8080".into();
                changed = true;
            }
        }
    }
    match (changed, toml::to_string(&table)) {
        (true, Ok(written)) => written.into(),
        _ => text.into(),
    }
}

/// A small, fast, seeded generator (xorshift64*): a run is repeatable from its seed.
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (0 is taken as 1).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    /// The next number.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number below `n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// Bytes that often break parsers.
const INTERESTING: &[u8] = b"\0\x01\x7f\x80\xff\xc0\xe0\xf0\xf8 \t\r\n\"\\/{}[]:,.-+eE0123456789";
/// Numbers at the edges of every width.
const NUMBERS: &[&str] = &[
    "0",
    "-0",
    "1e999",
    "-1e999",
    "1e-999",
    "18446744073709551615",
    "18446744073709551616",
    "-9223372036854775808",
    "-9223372036854775809",
    "9007199254740993",
    "0.1e1",
    "1E+2",
    "NaN",
    "Infinity",
];
/// Tokens of JSON itself.
const JSON_TOKENS: &[&str] =
    &["{", "}", "[", "]", "\"", ":", ",", "null", "true", "false", "\"\"", "{}", "[]", "\\u", "\\ud83d\\ude00"];
/// Inputs grow no larger.
pub const MAX_INPUT: usize = 64 * 1024;

/// Makes new inputs from a corpus.
pub struct Mutator<'a> {
    rng: Rng,
    corpus: &'a [Vec<u8>],
    tokens: &'a [&'a str],
}

impl<'a> Mutator<'a> {
    /// A mutator of `corpus` (not empty) with the target's `tokens`.
    pub fn new(seed: u64, corpus: &'a [Vec<u8>], tokens: &'a [&'a str]) -> Mutator<'a> {
        Mutator { rng: Rng::new(seed), corpus, tokens }
    }

    /// The next input: a corpus entry with one to four mutations.
    pub fn next_input(&mut self) -> Vec<u8> {
        let mut input = self.corpus[self.rng.below(self.corpus.len())].clone();
        for _ in 0..=self.rng.below(4) {
            self.mutate(&mut input);
        }
        input.truncate(MAX_INPUT);
        input
    }

    fn token(&mut self) -> Vec<u8> {
        let pick = self.rng.below(10);
        let list: &[&str] = match pick {
            0..=3 if !self.tokens.is_empty() => self.tokens,
            0..=5 => JSON_TOKENS,
            _ => NUMBERS,
        };
        list[self.rng.below(list.len())].as_bytes().to_vec()
    }

    fn mutate(&mut self, input: &mut Vec<u8>) {
        let len = input.len();
        let at = |rng: &mut Rng| if len == 0 { 0 } else { rng.below(len + 1) };
        match self.rng.below(11) {
            0 if len > 0 => {
                let i = self.rng.below(len);
                input[i] ^= 1 << self.rng.below(8);
            }
            1 if len > 0 => {
                let i = self.rng.below(len);
                input[i] = INTERESTING[self.rng.below(INTERESTING.len())];
            }
            2 => {
                let i = at(&mut self.rng);
                let n = self.rng.below(8) + 1;
                let bytes: Vec<u8> = (0..n).map(|_| self.rng.next_u64() as u8).collect();
                input.splice(i..i, bytes);
            }
            3 if len > 0 => {
                let i = self.rng.below(len);
                let n = self.rng.below((len - i).min(32)) + 1;
                input.drain(i..i + n);
            }
            4 if len > 0 => {
                let i = self.rng.below(len);
                let n = self.rng.below((len - i).min(64)) + 1;
                let copy = input[i..i + n].to_vec();
                let j = at(&mut self.rng);
                input.splice(j..j, copy);
            }
            5 => {
                let other = &self.corpus[self.rng.below(self.corpus.len())];
                let keep = at(&mut self.rng).min(len);
                let from = if other.is_empty() { 0 } else { self.rng.below(other.len()) };
                input.truncate(keep);
                input.extend_from_slice(&other[from..]);
            }
            6 | 7 => {
                let i = at(&mut self.rng);
                let token = self.token();
                input.splice(i..i, token);
            }
            8 if len > 0 => {
                input.truncate(self.rng.below(len));
            }
            9 => {
                // Deep nesting, which a recursive reader must bound.
                let depth = [16, 128, 200, 4096][self.rng.below(4)];
                let (open, close) = if self.rng.below(2) == 0 { (b'[', b']') } else { (b'{', b'}') };
                let i = at(&mut self.rng);
                let mut nest = vec![open; depth];
                if open == b'{' {
                    nest = b"{\"a\":".repeat(depth);
                }
                if self.rng.below(2) == 0 {
                    nest.extend(std::iter::repeat_n(close, depth));
                }
                input.splice(i..i, nest);
            }
            _ => {
                // A number replaced by one at an edge.
                if let Some(start) = input.iter().position(u8::is_ascii_digit) {
                    let end = input[start..].iter().position(|b| !b.is_ascii_digit()).map_or(len, |n| start + n);
                    let number = NUMBERS[self.rng.below(NUMBERS.len())].as_bytes().to_vec();
                    input.splice(start..end, number);
                }
            }
        }
    }
}

/// The directory of this crate.
pub fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The files of `dir`, sorted by name (none when it does not exist).
pub fn inputs(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(dir).into_iter().flatten().flatten().map(|e| e.path()).filter(|p| p.is_file()).collect();
    files.sort();
    files.into_iter().filter_map(|p| std::fs::read(&p).ok().map(|b| (p, b))).collect()
}

/// A target's corpus, with its regressions (never empty: an empty input at least).
pub fn corpus(target: &Target) -> Vec<Vec<u8>> {
    let dir = crate_dir();
    let mut all: Vec<Vec<u8>> = inputs(&dir.join("corpus").join(target.name)).into_iter().map(|(_, b)| b).collect();
    all.extend(inputs(&dir.join("regressions").join(target.name)).into_iter().map(|(_, b)| b));
    if all.is_empty() {
        all.push(Vec::new());
    }
    all
}

/// Runs `check` on `input`; the panic's message when it panics.
pub fn try_check(target: &Target, input: &[u8]) -> Result<(), String> {
    std::panic::catch_unwind(AssertUnwindSafe(|| (target.check)(input))).map_err(|panic| {
        panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".to_owned())
    })
}

/// What a run of one target found.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Inputs checked.
    pub cases: u64,
    /// Inputs that failed, with why (at most a few kept).
    pub failures: Vec<(Vec<u8>, String)>,
    /// How long it took.
    pub elapsed: std::time::Duration,
}

/// Checks every corpus input, then `cases` mutated ones (stopping early after `deadline`).
pub fn run(target: &Target, seed: u64, cases: u64, deadline: Option<std::time::Instant>) -> Outcome {
    let started = std::time::Instant::now();
    let corpus = corpus(target);
    let mut outcome = Outcome::default();
    let record = |input: &[u8], outcome: &mut Outcome| {
        outcome.cases += 1;
        if let Err(why) = try_check(target, input) {
            if outcome.failures.len() < 8 {
                outcome.failures.push((input.to_vec(), why));
            }
        }
    };
    for input in &corpus {
        record(input, &mut outcome);
    }
    let mut mutator = Mutator::new(seed, &corpus, target.tokens);
    for i in 0..cases {
        if i % 1024 == 0 && deadline.is_some_and(|d| std::time::Instant::now() >= d) {
            break;
        }
        let input = mutator.next_input();
        record(&input, &mut outcome);
    }
    outcome.elapsed = started.elapsed();
    outcome
}

/// Keeps a failing input as a regression of `target`; returns its path.
pub fn keep_regression(target: &Target, input: &[u8]) -> std::io::Result<PathBuf> {
    let dir = crate_dir().join("regressions").join(target.name);
    std::fs::create_dir_all(&dir)?;
    // A stable name from the bytes (FNV-1a).
    let hash = input.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3));
    let path = dir.join(format!("{hash:016x}"));
    std::fs::write(&path, input)?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The silent panic hook while checking: failures are reported by the test, not printed
    /// once per case.
    fn quietly<T>(f: impl FnOnce() -> T) -> T {
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let out = f();
        std::panic::set_hook(hook);
        out
    }

    #[test]
    fn every_regression_and_corpus_input_passes() {
        for target in TARGETS {
            let mut checked = 0;
            for kind in ["corpus", "regressions"] {
                for (path, input) in inputs(&crate_dir().join(kind).join(target.name)) {
                    let outcome = quietly(|| try_check(target, &input));
                    assert!(outcome.is_ok(), "{}: {outcome:?}", path.display());
                    checked += 1;
                }
            }
            assert!(checked >= 3, "target {} has a corpus", target.name);
        }
    }

    #[test]
    fn every_target_survives_a_short_run() {
        for target in TARGETS {
            let outcome = quietly(|| run(target, 0x5eed, target.short_cases, None));
            let short = |text: String| text.chars().take(300).collect::<String>();
            let shown: Vec<_> = outcome
                .failures
                .iter()
                .map(|(input, why)| (short(String::from_utf8_lossy(input).into_owned()), short(why.clone())))
                .collect();
            assert!(outcome.failures.is_empty(), "{}: {shown:#?}", target.name);
        }
    }

    #[test]
    fn a_check_that_fails_is_caught_and_reported() {
        let failing =
            Target { name: "failing", what: "", tokens: &[], check: |input| assert!(input.len() < 3), short_cases: 0 };
        let outcome = quietly(|| run(&failing, 1, 200, None));
        assert!(!outcome.failures.is_empty() && outcome.cases > 200);
    }

    #[test]
    fn the_mutator_is_repeatable_from_its_seed_and_bounds_its_inputs() {
        let corpus = vec![b"{\"a\":1}".to_vec()];
        let a: Vec<_> = {
            let mut m = Mutator::new(7, &corpus, &[]);
            (0..100).map(|_| m.next_input()).collect()
        };
        let mut m = Mutator::new(7, &corpus, &[]);
        assert!(a.iter().all(|x| *x == m.next_input()));
        assert!(a.iter().all(|x| x.len() <= MAX_INPUT));
        assert!(a.iter().any(|x| *x != corpus[0]));
    }
}
