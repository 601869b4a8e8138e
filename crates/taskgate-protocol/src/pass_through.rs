//! Results passed through as the upstream wrote them.
//!
//! A plain `tools/call` result is the upstream's to shape: the gateway answers the client with
//! it and reads nothing inside. Reading it into a [`Value`] tree and writing it out again cost
//! the gateway more than any other part of a proxied call's JSON work (a map per object, a
//! string per key and value, the tree dropped after), and for a large result it is work in
//! proportion to its size. [`Reply::from_slice`] reads an upstream's message so that a result
//! the caller passes through stays the text it came as ([`RawResult`]); every other message is
//! read exactly as [`Message::from_slice`] reads it.

use serde::de::{self, DeserializeSeed, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::Value;

use crate::jsonrpc::{Message, MessageError, RequestId, RequestParts};

/// A JSON object as an upstream wrote it: valid JSON (checked as it was read), an object, on
/// one line (it may go out as an SSE event's one `data:` line, or a stdio line, as it is). It
/// is kept in the text of the message it came in, not copied out of it.
#[derive(Debug, Clone)]
pub struct RawResult {
    message: String,
    range: std::ops::Range<usize>,
}

impl RawResult {
    /// The JSON text.
    pub fn get(&self) -> &str {
        &self.message[self.range.clone()]
    }

    /// The result as a tree (for a caller that must look inside after all).
    pub fn to_value(&self) -> Value {
        serde_json::from_str(self.get()).expect("a raw result is valid JSON, checked when it was read")
    }

    /// Whether `raw` can be passed on as it is: an object, on one line. `raw` is valid JSON
    /// (read so), and valid JSON has no control character but its whitespace between tokens:
    /// a line feed, a carriage return or a tab (RFC 8259, section 2: `ws`; section 7: a string
    /// escapes U+0000 to U+001F). So one search for those three finds every line break; a tab,
    /// rare, makes the result read and written again as well. (memchr searches 16 or 32 bytes
    /// an instruction: this runs over every byte of every result passed.)
    ///
    /// Numbers stay as the upstream wrote them (RFC 8259, section 6, leaves their range to
    /// each reader; a tree holds an f64, so one beyond it fails only there).
    ///
    /// A raw value is checked JSON, but serde_json checks a `\u` escape's four hex digits only,
    /// not that a surrogate half has its other half, as reading the string into a tree does: a
    /// lone half makes the text read the usual way too, so it fails as it would there.
    fn passable(raw: &RawValue) -> bool {
        let text = raw.get().as_bytes();
        text.first() == Some(&b'{') && memchr::memchr3(b'\n', b'\r', b'\t', text).is_none() && surrogates_pair(text)
    }
}

/// Whether every surrogate escape of JSON text (`\uD800` to `\uDFFF`) is a high half followed
/// at once by a low half. The text is valid JSON otherwise, so each backslash begins an escape.
fn surrogates_pair(text: &[u8]) -> bool {
    let hex = |at: usize| -> Option<u32> {
        let digits = std::str::from_utf8(text.get(at..at + 4)?).ok()?;
        u32::from_str_radix(digits, 16).ok()
    };
    let mut from = 0;
    while let Some(found) = memchr::memchr(b'\\', &text[from..]) {
        let at = from + found;
        if text.get(at + 1) != Some(&b'u') {
            from = at + 2;
            continue;
        }
        match hex(at + 2) {
            Some(0xD800..=0xDBFF) => {
                let low = text.get(at + 6..at + 8) == Some(b"\\u") && matches!(hex(at + 8), Some(0xDC00..=0xDFFF));
                if !low {
                    return false;
                }
                from = at + 12;
            }
            Some(0xDC00..=0xDFFF) => return false,
            _ => from = at + 6,
        }
    }
    true
}

/// A `tools/call`'s `arguments` as the client wrote them: the tool's input, which the gateway
/// hands to the upstream without looking inside. Read into a tree and written again, a large
/// argument cost a call more than anything else the gateway does (serde_json's writer looks at
/// each byte of a string to escape it). Like a [`RawResult`] it is checked JSON, an object and
/// on one line (a stdio upstream reads a message a line); the front door has also checked it
/// strictly (no key twice in an object, at any depth), as it checks every message.
#[derive(Debug, Clone)]
pub struct RawArguments(Box<RawValue>);

impl RawArguments {
    /// Whether `raw` can be passed on as it is (see [`RawResult::passable`]).
    pub(crate) fn passable(raw: &RawValue) -> bool {
        RawResult::passable(raw)
    }

    /// `raw`, once the front door has checked it strictly.
    pub(crate) fn checked(raw: &RawValue) -> RawArguments {
        RawArguments(raw.to_owned())
    }

    /// The JSON text.
    pub fn get(&self) -> &str {
        self.0.get()
    }

    /// The JSON text, to be written as a value where it stands.
    pub fn as_raw(&self) -> &RawValue {
        &self.0
    }

    /// The arguments as a tree (for a path that reads or keeps the params as one).
    pub fn to_value(&self) -> Value {
        serde_json::from_str(self.get()).expect("raw arguments are valid JSON, checked when they were read")
    }

    /// Puts the arguments back into `params` as the member `arguments`, for a path that reads
    /// or keeps the params as a tree (a task, a 2026-07-28 upstream or client).
    pub fn restore(self, params: &mut Option<Value>) {
        let params = params.get_or_insert_with(|| Value::Object(serde_json::Map::new()));
        if let Value::Object(params) = params {
            params.insert("arguments".into(), self.to_value());
        }
    }
}

impl PartialEq for RawArguments {
    fn eq(&self, other: &RawArguments) -> bool {
        self.get() == other.get()
    }
}

impl PartialEq for RawResult {
    fn eq(&self, other: &RawResult) -> bool {
        self.get() == other.get()
    }
}

/// A request's result: a tree, or the upstream's text passed through.
#[derive(Debug, Clone, PartialEq)]
pub enum Payload {
    /// Read into a tree.
    Value(Value),
    /// Kept as the upstream wrote it (see [`Reply::from_slice`]).
    Raw(RawResult),
}

impl Payload {
    /// The result as a tree (a raw one is read now).
    pub fn into_value(self) -> Value {
        match self {
            Payload::Value(v) => v,
            Payload::Raw(raw) => raw.to_value(),
        }
    }

    /// Whether the result is a JSON object, as every MCP result is (schema.ts `Result`).
    pub fn is_object(&self) -> bool {
        match self {
            Payload::Value(v) => v.is_object(),
            Payload::Raw(_) => true, // only objects are kept raw
        }
    }

    /// A short name of the result's JSON type, for error messages.
    pub fn json_kind(&self) -> &'static str {
        match self {
            Payload::Value(v) => crate::jsonrpc::json_kind(v),
            Payload::Raw(_) => "an object",
        }
    }

    /// The response to request `id` with this result, as compact JSON text (as
    /// [`Message::to_json`] writes [`Message::Response`]).
    pub fn response_json(&self, id: &RequestId) -> String {
        let written;
        let result = match self {
            Payload::Value(v) => {
                written = serde_json::to_string(v).expect("values serialize");
                written.as_str()
            }
            Payload::Raw(raw) => raw.get(),
        };
        let mut out = String::with_capacity(result.len() + 48);
        out.push_str(r#"{"jsonrpc":"2.0","id":"#);
        match id {
            // An integer is its digits; written in place (this runs for every result).
            RequestId::Number(n) => {
                use std::fmt::Write;
                let _ = write!(out, "{n}");
            }
            RequestId::String(_) => out.push_str(&serde_json::to_string(id).expect("ids serialize")),
        }
        out.push_str(r#","result":"#);
        out.push_str(result);
        out.push('}');
        out
    }
}

impl From<Value> for Payload {
    fn from(v: Value) -> Payload {
        Payload::Value(v)
    }
}

/// A message read from an upstream.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// A result answering a request whose result is passed through, as the upstream wrote it.
    Passed {
        /// The request answered.
        id: RequestId,
        /// Its result.
        result: RawResult,
    },
    /// Any other message, read as [`Message::from_slice`] reads it.
    Message(Message),
}

impl Reply {
    /// Reads one JSON-RPC message. A response `{"jsonrpc":"2.0","id":…,"result":{…}}` to a
    /// request that `passing` names keeps its result as the text it came as (checked to be
    /// JSON, as a tree's reading checks it); anything else (another request's result, an error,
    /// a request or notification, an unusual envelope: a member more, one twice, a result on
    /// several lines) is read as [`Message::from_slice`] reads it, with the same outcome. The
    /// look at the envelope stops at the first member that rules passing out (a notification's
    /// `method`, usually its second), so it costs the other messages next to nothing.
    pub fn from_slice(
        bytes: &[u8],
        passing: impl Fn(&RequestId) -> bool,
    ) -> Result<Result<Reply, MessageError>, serde_json::Error> {
        if let Some((id, raw)) = passed(bytes, &passing) {
            let result = RawResult { message: raw.get().to_owned(), range: 0..raw.get().len() };
            return Ok(Ok(Reply::Passed { id, result }));
        }
        Ok(Message::from_slice(bytes)?.map(Reply::Message))
    }

    /// [`Reply::from_slice`] of a message's text, which a passed result is kept in (no copy).
    pub fn from_string(
        text: String,
        passing: impl Fn(&RequestId) -> bool,
    ) -> Result<Result<Reply, MessageError>, serde_json::Error> {
        match passed_str(&text, &passing) {
            Some((id, raw)) => {
                let start = raw.get().as_ptr() as usize - text.as_ptr() as usize;
                let range = start..start + raw.get().len();
                Ok(Ok(Reply::Passed { id, result: RawResult { message: text, range } }))
            }
            None => Ok(Message::from_slice(text.as_bytes())?.map(Reply::Message)),
        }
    }

    /// [`Reply::from_string`] of bytes (UTF-8 is checked as a tree's reading checks it).
    pub fn from_vec(
        bytes: Vec<u8>,
        passing: impl Fn(&RequestId) -> bool,
    ) -> Result<Result<Reply, MessageError>, serde_json::Error> {
        match String::from_utf8(bytes) {
            Ok(text) => Reply::from_string(text, passing),
            Err(e) => Ok(Message::from_slice(e.as_bytes())?.map(Reply::Message)),
        }
    }

    /// The id of a response (passed or read), of a request, or of an error that names one.
    pub fn id(&self) -> Option<&RequestId> {
        match self {
            Reply::Passed { id, .. } => Some(id),
            Reply::Message(m) => m.id(),
        }
    }

    /// True for responses and error responses.
    pub fn is_response(&self) -> bool {
        match self {
            Reply::Passed { .. } => true,
            Reply::Message(m) => m.is_response(),
        }
    }

    /// The message as a [`Message`] (a passed result is read into a tree).
    pub fn into_message(self) -> Message {
        match self {
            Reply::Passed { id, result } => Message::Response { id, result: result.to_value() },
            Reply::Message(m) => m,
        }
    }
}

/// The id and the result of a message that is a result `passing` names and that can be passed
/// on as it is.
fn passed<'a>(bytes: &'a [u8], passing: &impl Fn(&RequestId) -> bool) -> Option<(RequestId, &'a RawValue)> {
    passed_in(serde_json::Deserializer::from_slice(bytes), passing)
}

/// [`passed`] of text known to be UTF-8, which is not checked again (a result's bytes are
/// otherwise checked twice: as the upstream's text, and as the raw result's).
fn passed_str<'a>(text: &'a str, passing: &impl Fn(&RequestId) -> bool) -> Option<(RequestId, &'a RawValue)> {
    passed_in(serde_json::Deserializer::from_str(text), passing)
}

fn passed_in<'a, R: serde_json::de::Read<'a>>(
    mut deserializer: serde_json::Deserializer<R>,
    passing: &impl Fn(&RequestId) -> bool,
) -> Option<(RequestId, &'a RawValue)> {
    let (id, raw) = (Peek { passing }).deserialize(&mut deserializer).ok()?;
    deserializer.end().ok()?;
    RawResult::passable(raw).then_some((id, raw))
}

/// Why a look at an envelope stopped: the message is read the usual way.
fn not_passed<E: de::Error>() -> E {
    E::custom("not a result passed through")
}

/// Reads an envelope's members while they can make a passed result: `jsonrpc` ("2.0"), `id`
/// (one `passing` names) and `result`, each once; anything else stops the reading.
struct Peek<'p, F> {
    passing: &'p F,
}

impl<'de, F: Fn(&RequestId) -> bool> DeserializeSeed<'de> for Peek<'_, F> {
    type Value = (RequestId, &'de RawValue);

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de, F: Fn(&RequestId) -> bool> Visitor<'de> for Peek<'_, F> {
    type Value = (RequestId, &'de RawValue);

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON-RPC response")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let (mut version, mut id, mut result) = (false, None, None);
        // A key with escapes cannot be borrowed: that stops the look too (the usual reading
        // reads it).
        while let Some(key) = map.next_key::<&'de str>()? {
            match key {
                "jsonrpc" if !version => {
                    if map.next_value::<&'de RawValue>()?.get() != r#""2.0""# {
                        return Err(not_passed());
                    }
                    version = true;
                }
                "id" if id.is_none() => {
                    let read = map.next_value_seed(IdSeed)?;
                    if !(self.passing)(&read) {
                        return Err(not_passed());
                    }
                    id = Some(read);
                }
                "result" if result.is_none() => result = Some(map.next_value::<&'de RawValue>()?),
                _ => return Err(not_passed()),
            }
        }
        match (version, id, result) {
            (true, Some(id), Some(result)) => Ok((id, result)),
            _ => Err(not_passed()),
        }
    }
}

/// A request id: a string or an integer.
struct IdSeed;

impl<'de> DeserializeSeed<'de> for IdSeed {
    type Value = RequestId;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<RequestId, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for IdSeed {
    type Value = RequestId;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a string or an integer")
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<RequestId, E> {
        Ok(RequestId::Number(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<RequestId, E> {
        i64::try_from(v).map(RequestId::Number).map_err(|_| not_passed())
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<RequestId, E> {
        Ok(RequestId::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<RequestId, E> {
        Ok(RequestId::String(v))
    }
}

impl Message {
    /// [`Message::request_json`] as bytes, with a `tools/call`'s `arguments` written as the
    /// client wrote them, the last member of `params` (a `params` that is not an object, which
    /// no message read has, is written without them). The buffer is sized for the arguments at
    /// once: a large argument is not copied again each time it would grow.
    pub fn request_bytes_passing(
        id: &RequestId,
        method: &str,
        params: Option<&Value>,
        arguments: Option<&RawArguments>,
    ) -> Vec<u8> {
        let mut out = Vec::with_capacity(arguments.map_or(0, |a| a.get().len()) + 128);
        serde_json::to_writer(
            &mut out,
            &RequestParts { id, method, params, arguments: arguments.map(RawArguments::as_raw) },
        )
        .expect("messages serialize");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn any(_: &RequestId) -> bool {
        true
    }

    #[test]
    fn a_result_to_a_passing_request_stays_the_text_it_came_as() {
        let text = r#"{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"hi \u00e9"}],"n":1.50}}"#;
        let reply = Reply::from_slice(text.as_bytes(), |id| id == &RequestId::Number(7)).unwrap().unwrap();
        let Reply::Passed { id, result } = &reply else { panic!("passed: {reply:?}") };
        assert_eq!(id, &RequestId::Number(7));
        assert_eq!(result.get(), r#"{"content":[{"type":"text","text":"hi \u00e9"}],"n":1.50}"#);
        // The client's id goes in; the text is the upstream's, byte for byte.
        let out = Payload::Raw(result.clone()).response_json(&RequestId::String("c-1".into()));
        assert_eq!(
            out,
            r#"{"jsonrpc":"2.0","id":"c-1","result":{"content":[{"type":"text","text":"hi \u00e9"}],"n":1.50}}"#
        );
        // And it reads back as the tree the usual reading makes.
        assert_eq!(reply.into_message(), Message::from_slice(text.as_bytes()).unwrap().unwrap());
        let string_id = r#"{"id":"x","result":{},"jsonrpc":"2.0"}"#;
        assert!(matches!(Reply::from_slice(string_id.as_bytes(), any).unwrap().unwrap(), Reply::Passed { .. }));
    }

    /// A surrogate escape without its other half is read the usual way, and fails as it does
    /// there, in a result and in a client's arguments (serde_json's raw value checks four hex
    /// digits only); pairs, and a backslash escaped before a `u`, pass.
    #[test]
    fn a_lone_surrogate_half_is_never_passed_on() {
        for lone in [r#"\ude00"#, r#"\ud83d"#, r#"\ud83dx"#, r#"\ud83d\u0041"#] {
            let text = format!(r#"{{"jsonrpc":"2.0","id":7,"result":{{"t":"ok{lone}"}}}}"#);
            let read = Reply::from_slice(text.as_bytes(), any);
            assert!(read.is_err() && Message::from_slice(text.as_bytes()).is_err(), "{text}: {read:?}");
            let call = format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"t","arguments":{{"t":"{lone}"}}}}}}"#
            );
            assert!(Message::from_slice_front(call.as_bytes()).is_err(), "{call}");
        }
        for fine in [r#"\ud83d\ude00"#, r#"\\ud800"#, r#"\u00e9"#, r#"\"\\"#] {
            let text = format!(r#"{{"jsonrpc":"2.0","id":7,"result":{{"t":"ok{fine}"}}}}"#);
            let read = Reply::from_slice(text.as_bytes(), any).unwrap().unwrap();
            assert!(matches!(read, Reply::Passed { .. }), "{text}");
        }
    }

    /// Every other message, and every unusual envelope, is read exactly as the usual reading
    /// reads it (its outcome, its errors).
    #[test]
    fn anything_else_is_read_as_the_usual_reading_reads_it() {
        let bodies = [
            // Not passing this request.
            r#"{"jsonrpc":"2.0","id":8,"result":{"a":1}}"#,
            // Not a result, or not only one.
            r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32000,"message":"m"}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":"sampling/createMessage","params":{}}"#,
            r#"{"jsonrpc":"2.0","id":7,"result":{},"error":{"code":1,"message":"m"}}"#,
            r#"{"jsonrpc":"2.0","id":7,"result":{"a":1},"extra":true}"#,
            // Not an object, or not on one line.
            r#"{"jsonrpc":"2.0","id":7,"result":null}"#,
            r#"{"jsonrpc":"2.0","id":7,"result":[1]}"#,
            r#"{"jsonrpc":"2.0","id":7,"result":"text"}"#,
            "{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\n\"a\": 1\n}}",
            "{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"a\":\r1}}",
            // A member twice (the usual reading takes the last), escapes in a key.
            r#"{"jsonrpc":"2.0","id":7,"result":{"a":1},"result":{"b":2}}"#,
            r#"{"jsonrpc":"2.0","id":7,"id":8,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":7,"res\u0075lt":{"a":1}}"#,
            // Bad envelopes.
            r#"{"jsonrpc":"1.0","id":7,"result":{}}"#,
            r#"{"id":7,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":7.5,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":null,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":18446744073709551615,"result":{}}"#,
            r#"{"jsonrpc":"2.0","result":{}}"#,
            r#"[{"jsonrpc":"2.0","id":7,"result":{}}]"#,
            r#""text""#,
        ];
        for body in bodies {
            let passing = |id: &RequestId| id == &RequestId::Number(7);
            let read = Reply::from_slice(body.as_bytes(), passing).unwrap().map(Reply::into_message);
            assert_eq!(read, Message::from_slice(body.as_bytes()).unwrap(), "{body}");
            let owned = Reply::from_vec(body.as_bytes().to_vec(), passing).unwrap().map(Reply::into_message);
            assert_eq!(owned, read, "{body}");
            assert!(
                !matches!(Reply::from_slice(body.as_bytes(), passing).unwrap(), Ok(Reply::Passed { .. })),
                "{body}"
            );
        }
        // Not JSON at all: the same syntax error.
        for bad in
            [&br#"{"jsonrpc":"2.0","id":7,"result":{"a":}}"#[..], br#"{"jsonrpc":"2.0","id":7,"result":{}} x"#, b"\xff"]
        {
            assert!(Reply::from_slice(bad, any).is_err());
            assert!(Message::from_slice(bad).is_err());
        }
        // Invalid UTF-8 inside the result is refused as the usual reading refuses it.
        let mut invalid = br#"{"jsonrpc":"2.0","id":7,"result":{"a":""}}"#.to_vec();
        invalid.insert(r#"{"jsonrpc":"2.0","id":7,"result":{"a":""#.len(), 0xff);
        assert!(Reply::from_slice(&invalid, any).is_err());
        assert!(Reply::from_vec(invalid, any).is_err());
        // A tab between tokens: read and written again too (its result is the same).
        let tab = "{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"a\":\t1}}";
        assert!(matches!(Reply::from_slice(tab.as_bytes(), any).unwrap().unwrap(), Reply::Message(_)));
        // A line break between tokens (a pretty-printed JSON body), as a line feed, a carriage
        // return or both: read and written again on one line.
        for ws in ["\n", "\r", "\r\n", " \n\t "] {
            let body = format!("{{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{{\"a\":{ws}[1,{ws}2]}}}}");
            let Reply::Message(message) = Reply::from_slice(body.as_bytes(), any).unwrap().unwrap() else {
                panic!("passed with a line break: {body:?}")
            };
            assert_eq!(message.to_json(), r#"{"jsonrpc":"2.0","id":7,"result":{"a":[1,2]}}"#);
        }
        // Escaped line breaks and tabs inside a string are not control characters: passed.
        let escaped = r#"{"jsonrpc":"2.0","id":7,"result":{"a":"x\ny\r\tz"}}"#;
        let Reply::Passed { result, .. } = Reply::from_slice(escaped.as_bytes(), any).unwrap().unwrap() else {
            panic!("not passed: {escaped}")
        };
        assert_eq!(result.get(), r#"{"a":"x\ny\r\tz"}"#);
        // A raw control character inside a string is not JSON: refused, as the usual reading
        // refuses it.
        for raw in ["\n", "\r", "\t", "\u{1}"] {
            let body = format!("{{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{{\"a\":\"x{raw}y\"}}}}");
            assert!(Reply::from_slice(body.as_bytes(), any).is_err(), "{body:?}");
            assert!(Message::from_slice(body.as_bytes()).is_err(), "{body:?}");
        }
    }

    #[test]
    fn a_result_kept_in_its_message_is_the_same_text_as_one_copied_out() {
        let text = r#"{"jsonrpc":"2.0", "id":7 , "result": {"a":[1,{"b":"c"}]} }"#;
        let copied = Reply::from_slice(text.as_bytes(), any).unwrap().unwrap();
        let kept = Reply::from_string(text.to_owned(), any).unwrap().unwrap();
        let from_bytes = Reply::from_vec(text.as_bytes().to_vec(), any).unwrap().unwrap();
        let Reply::Passed { result, .. } = &kept else { panic!("passed: {kept:?}") };
        assert_eq!(result.get(), r#"{"a":[1,{"b":"c"}]}"#);
        assert_eq!(kept, copied);
        assert_eq!(from_bytes, copied);
    }

    #[test]
    fn a_payload_is_an_object_and_reads_back_as_a_tree() {
        let text = r#"{"jsonrpc":"2.0","id":1,"result":{"structuredContent":{"big":12345678901234567890}}}"#;
        let Reply::Passed { result, .. } = Reply::from_slice(text.as_bytes(), any).unwrap().unwrap() else {
            panic!("passed")
        };
        let raw = Payload::Raw(result);
        assert!(raw.is_object());
        assert_eq!(raw.json_kind(), "an object");
        assert_eq!(raw.clone().into_value(), json!({"structuredContent":{"big":12345678901234567890u64}}));
        let tree = Payload::from(json!({"a": 1}));
        assert_eq!(tree.response_json(&RequestId::Number(3)), r#"{"jsonrpc":"2.0","id":3,"result":{"a":1}}"#);
        assert!(!Payload::from(json!([])).is_object());
    }
}
