//! The JSON-RPC 2.0 envelope.
//!
//! [`Message::parse`] classifies a JSON value strictly: anything that is not exactly one request,
//! notification or response is a [`MessageError`] that names what was wrong, so the front door
//! can answer -32600 with a useful message.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::codes;
use crate::modern::PerRequest;
use crate::passing::RawArguments;

/// A JSON-RPC request id: a string or an integer, kept exactly as it came.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RequestId {
    /// An integer id.
    Number(i64),
    /// A string id.
    String(String),
}

impl RequestId {
    /// Reads an id from JSON; only strings and integers are ids (MCP forbids `null`).
    pub fn from_value(value: &Value) -> Option<RequestId> {
        match value {
            Value::String(s) => Some(RequestId::String(s.clone())),
            Value::Number(n) => n.as_i64().map(RequestId::Number),
            _ => None,
        }
    }

    /// An id from JSON, taken without a copy; the value back when it is not an id.
    pub fn from_owned(value: Value) -> Result<RequestId, Value> {
        match value {
            Value::String(s) => Ok(RequestId::String(s)),
            Value::Number(ref n) => n.as_i64().map(RequestId::Number).ok_or(value),
            other => Err(other),
        }
    }

    /// The id as JSON.
    pub fn to_value(&self) -> Value {
        match self {
            RequestId::Number(n) => Value::from(*n),
            RequestId::String(s) => Value::from(s.as_str()),
        }
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestId::Number(n) => write!(f, "{n}"),
            RequestId::String(s) => write!(f, "{s:?}"),
        }
    }
}

/// The `error` member of a JSON-RPC error response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorObject {
    /// The error code (see [`crate::codes`]).
    pub code: i64,
    /// A short description of the error.
    pub message: String,
    /// Additional information, passed through untouched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl ErrorObject {
    /// An error with a code and a message.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        ErrorObject { code, message: message.into(), data: None }
    }

    /// -32602 Invalid params.
    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(codes::INVALID_PARAMS, message)
    }

    /// -32601 Method not found.
    pub fn method_not_found(method: &str) -> Self {
        Self::new(codes::METHOD_NOT_FOUND, format!("Method not found: {method}"))
    }

    /// Attaches `data`.
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }
}

impl fmt::Display for ErrorObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

/// One JSON-RPC message. `params`, `result` and error `data` are kept as raw JSON so that
/// nothing the gateway does not understand is lost on the way through.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// A request: expects a response with the same id.
    Request {
        /// The request id.
        id: RequestId,
        /// The method name.
        method: String,
        /// The params object, if any.
        params: Option<Value>,
    },
    /// A notification: no id, no response.
    Notification {
        /// The method name.
        method: String,
        /// The params object, if any.
        params: Option<Value>,
    },
    /// A successful response.
    Response {
        /// The id of the request answered.
        id: RequestId,
        /// The result object.
        result: Value,
    },
    /// An error response. The id is absent only when the request's id could not be read.
    Error {
        /// The id of the request answered, if known.
        id: Option<RequestId>,
        /// The error.
        error: ErrorObject,
    },
}

/// A message as the front door reads it ([`Message::from_slice_front`]): the message, the
/// 2026-07-28 per-request fields taken out of its `params._meta`, and a `tools/call`'s
/// `arguments` taken out of its `params` as the client wrote them.
pub type Front = (Message, PerRequest, Option<RawArguments>);

/// Why a JSON value is not a JSON-RPC message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MessageError {
    /// The body is a JSON array: batches were removed from MCP in 2025-06-18.
    Batch,
    /// The value is not a valid JSON-RPC 2.0 message; the text says why.
    Invalid(String),
}

impl fmt::Display for MessageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MessageError::Batch => {
                f.write_str("JSON-RPC batches are not supported: MCP 2025-06-18 and later send one message per request")
            }
            MessageError::Invalid(why) => write!(f, "Invalid Request: {why}"),
        }
    }
}

impl Message {
    /// Classifies a JSON value as exactly one JSON-RPC 2.0 message.
    pub fn parse(value: Value) -> Result<Message, MessageError> {
        let mut object = match value {
            Value::Object(o) => o,
            Value::Array(_) => return Err(MessageError::Batch),
            other => return Err(MessageError::Invalid(format!("expected a JSON object, got {}", json_kind(&other)))),
        };
        let jsonrpc = match object.remove("jsonrpc") {
            None => None,
            Some(Value::String(v)) if v == "2.0" => Some(Member::Expected),
            Some(other) => Some(Member::Other(other)),
        };
        Envelope {
            jsonrpc,
            id: object.remove("id"),
            method: object.remove("method"),
            params: object.remove("params"),
            result: object.remove("result"),
            error: object.remove("error"),
        }
        .into_message()
    }

    /// [`Message::from_slice`], and a JSON object with the same key twice is a syntax error
    /// (RFC 8259 says names SHOULD be unique; which of two values counts is undefined, so the
    /// front door refuses to guess).
    pub fn from_slice_strict(bytes: &[u8]) -> Result<Result<Message, MessageError>, serde_json::Error> {
        Ok(Message::from_slice_front(bytes)?.map(|(mut message, fields, arguments)| {
            if let Message::Request { params, .. } | Message::Notification { params, .. } = &mut message {
                if let Some(arguments) = arguments {
                    arguments.restore(params);
                }
                fields.restore(params);
            }
            message
        }))
    }

    /// [`Message::from_slice_strict`] as the front door reads a body: the envelope's members are
    /// read straight into the message (no tree of the whole message is built), and the
    /// per-request fields of a 2026-07-28 request (basic "Per-request protocol fields": the
    /// version, the client's capabilities and info in `params._meta`) are taken out of `_meta`
    /// as they are read, into [`PerRequest`]; a `_meta` that held only those is left out. A
    /// message that is not served as 2026-07-28 gets them back with [`PerRequest::restore`].
    /// A `tools/call`'s `arguments` (when `method` comes before `params`, as clients write it)
    /// are kept as the client wrote them ([`RawArguments`]) when they can be passed on so; a
    /// path that needs them in the params puts them back with [`RawArguments::restore`].
    pub fn from_slice_front(bytes: &[u8]) -> Result<Result<Front, MessageError>, serde_json::Error> {
        use serde::de::DeserializeSeed;
        let mut fields = PerRequest::default();
        let mut arguments = None;
        let mut deserializer = serde_json::Deserializer::from_slice(bytes);
        let parsed = strict::Top { fields: &mut fields, arguments: &mut arguments }.deserialize(&mut deserializer)?;
        deserializer.end()?;
        Ok(match parsed {
            strict::Parsed::Envelope(envelope) => envelope.into_message().map(|m| (m, fields, arguments)),
            strict::Parsed::Other(value) => Message::parse(value).map(|m| (m, fields, None)),
        })
    }

    /// Parses raw bytes; JSON syntax errors are reported separately from envelope errors.
    pub fn from_slice(bytes: &[u8]) -> Result<Result<Message, MessageError>, serde_json::Error> {
        let value: Value = serde_json::from_slice(bytes)?;
        Ok(Message::parse(value))
    }

    /// A request.
    pub fn request(id: RequestId, method: impl Into<String>, params: Option<Value>) -> Message {
        Message::Request { id, method: method.into(), params }
    }

    /// A notification.
    pub fn notification(method: impl Into<String>, params: Option<Value>) -> Message {
        Message::Notification { method: method.into(), params }
    }

    /// A successful response.
    pub fn response(id: RequestId, result: Value) -> Message {
        Message::Response { id, result }
    }

    /// An error response.
    pub fn error(id: Option<RequestId>, error: ErrorObject) -> Message {
        Message::Error { id, error }
    }

    /// The method name of a request or notification.
    pub fn method(&self) -> Option<&str> {
        match self {
            Message::Request { method, .. } | Message::Notification { method, .. } => Some(method),
            _ => None,
        }
    }

    /// The id of a request or response.
    pub fn id(&self) -> Option<&RequestId> {
        match self {
            Message::Request { id, .. } | Message::Response { id, .. } => Some(id),
            Message::Error { id, .. } => id.as_ref(),
            Message::Notification { .. } => None,
        }
    }

    /// True for responses and error responses.
    pub fn is_response(&self) -> bool {
        matches!(self, Message::Response { .. } | Message::Error { .. })
    }

    /// The message as JSON.
    pub fn to_value(&self) -> Value {
        let mut o = Map::new();
        o.insert("jsonrpc".into(), Value::from("2.0"));
        match self {
            Message::Request { id, method, params } => {
                o.insert("id".into(), id.to_value());
                o.insert("method".into(), Value::from(method.as_str()));
                if let Some(p) = params {
                    o.insert("params".into(), p.clone());
                }
            }
            Message::Notification { method, params } => {
                o.insert("method".into(), Value::from(method.as_str()));
                if let Some(p) = params {
                    o.insert("params".into(), p.clone());
                }
            }
            Message::Response { id, result } => {
                o.insert("id".into(), id.to_value());
                o.insert("result".into(), result.clone());
            }
            Message::Error { id, error } => {
                if let Some(id) = id {
                    o.insert("id".into(), id.to_value());
                }
                o.insert("error".into(), serde_json::to_value(error).expect("error objects serialize"));
            }
        }
        Value::Object(o)
    }

    /// The message as compact JSON text (no embedded newlines, as stdio requires).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("messages serialize")
    }

    /// A request's compact JSON text, written from its parts (as [`Message::to_json`] writes
    /// the [`Message::Request`] they make), with no message made first.
    pub fn request_json(id: &RequestId, method: &str, params: Option<&Value>) -> String {
        serde_json::to_string(&RequestParts { id, method, params, arguments: None }).expect("messages serialize")
    }

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
        serde_json::to_writer(&mut out, &RequestParts { id, method, params, arguments }).expect("messages serialize");
        out
    }
}

/// A request's borrowed parts, written as the request.
struct RequestParts<'a> {
    id: &'a RequestId,
    method: &'a str,
    params: Option<&'a Value>,
    arguments: Option<&'a RawArguments>,
}

/// Params with the arguments passed as written, written as one object.
struct PassingParams<'a> {
    params: Option<&'a Map<String, Value>>,
    arguments: &'a RawArguments,
}

impl Serialize for PassingParams<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(None)?;
        for (key, value) in self.params.into_iter().flatten().filter(|(key, _)| *key != "arguments") {
            map.serialize_entry(key, value)?;
        }
        map.serialize_entry("arguments", self.arguments.as_raw())?;
        map.end()
    }
}

impl Serialize for RequestParts<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("jsonrpc", "2.0")?;
        map.serialize_entry("id", self.id)?;
        map.serialize_entry("method", self.method)?;
        match (self.params, self.arguments) {
            (None | Some(Value::Object(_)), Some(arguments)) => {
                let params = self.params.and_then(Value::as_object);
                map.serialize_entry("params", &PassingParams { params, arguments })?;
            }
            (Some(p), _) => map.serialize_entry("params", p)?,
            (None, None) => {}
        }
        map.end()
    }
}

/// Written straight from the borrowed parts, in the order of [`Message::to_value`]: nothing is
/// copied into an intermediate tree on the way to the wire.
impl Serialize for Message {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        if let Message::Request { id, method, params } = self {
            return RequestParts { id, method, params: params.as_ref(), arguments: None }.serialize(serializer);
        }
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("jsonrpc", "2.0")?;
        match self {
            Message::Request { .. } => unreachable!("written above"),
            Message::Notification { method, params } => {
                map.serialize_entry("method", method)?;
                if let Some(p) = params {
                    map.serialize_entry("params", p)?;
                }
            }
            Message::Response { id, result } => {
                map.serialize_entry("id", id)?;
                map.serialize_entry("result", result)?;
            }
            Message::Error { id, error } => {
                if let Some(id) = id {
                    map.serialize_entry("id", id)?;
                }
                map.serialize_entry("error", error)?;
            }
        }
        map.end()
    }
}

/// A member whose value is checked against the one it must have as it is read (`"jsonrpc":
/// "2.0"`, the 2026-07-28 `_meta` protocol version): no copy is made of the expected text.
#[derive(Debug, Clone, PartialEq)]
pub enum Member {
    /// The expected string.
    Expected,
    /// Anything else, as sent.
    Other(Value),
}

/// The members of a JSON-RPC message that say what it is; the others are ignored.
#[derive(Default)]
pub(crate) struct Envelope {
    jsonrpc: Option<Member>,
    id: Option<Value>,
    method: Option<Value>,
    params: Option<Value>,
    result: Option<Value>,
    error: Option<Value>,
}

impl Envelope {
    /// Classifies the members as exactly one message (see [`Message::parse`]).
    fn into_message(self) -> Result<Message, MessageError> {
        match self.jsonrpc {
            Some(Member::Expected) => {}
            Some(Member::Other(other)) => {
                return Err(MessageError::Invalid(format!("\"jsonrpc\" must be \"2.0\", got {other}")))
            }
            None => return Err(MessageError::Invalid("missing \"jsonrpc\": \"2.0\"".into())),
        }
        let id = match self.id {
            None => None,
            Some(raw) => match RequestId::from_owned(raw) {
                Ok(id) => Some(id),
                Err(raw) if raw.is_null() && self.error.is_some() => None,
                Err(raw) => {
                    return Err(MessageError::Invalid(format!(
                        "\"id\" must be a string or an integer, got {}",
                        json_kind(&raw)
                    )))
                }
            },
        };
        if let Some(method) = self.method {
            let Value::String(method) = method else {
                return Err(MessageError::Invalid("\"method\" must be a string".into()));
            };
            let params = checked_params(self.params)?;
            if self.result.is_some() || self.error.is_some() {
                return Err(MessageError::Invalid(
                    "a message cannot have both \"method\" and \"result\"/\"error\"".into(),
                ));
            }
            return Ok(match id {
                Some(id) => Message::Request { id, method, params },
                None => Message::Notification { method, params },
            });
        }
        match (self.result, self.error) {
            (Some(result), None) => {
                let id = id.ok_or_else(|| MessageError::Invalid("a response needs an \"id\"".into()))?;
                Ok(Message::Response { id, result })
            }
            (None, Some(error)) => {
                let error: ErrorObject = serde_json::from_value(error)
                    .map_err(|e| MessageError::Invalid(format!("\"error\" must be {{code, message, data?}}: {e}")))?;
                Ok(Message::Error { id, error })
            }
            (Some(_), Some(_)) => {
                Err(MessageError::Invalid("a response cannot have both \"result\" and \"error\"".into()))
            }
            (None, None) => Err(MessageError::Invalid(
                "expected \"method\" (request or notification) or \"result\"/\"error\" (response)".into(),
            )),
        }
    }
}

fn checked_params(params: Option<Value>) -> Result<Option<Value>, MessageError> {
    match params {
        None => Ok(None),
        Some(p @ Value::Object(_)) => Ok(Some(p)),
        // JSON-RPC allows by-position params; MCP's are always an object (schema: `params?: {…}`).
        Some(Value::Array(_)) => Err(MessageError::Invalid("\"params\" must be an object, got an array".into())),
        Some(other) => Err(MessageError::Invalid(format!("\"params\" must be an object, got {}", json_kind(&other)))),
    }
}

/// A short name of a JSON value's type, for error messages.
pub fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn classifies_each_kind() {
        let r = Message::parse(json!({"jsonrpc":"2.0","id":1,"method":"ping"})).unwrap();
        assert_eq!(r, Message::request(RequestId::Number(1), "ping", None));
        let n = Message::parse(json!({"jsonrpc":"2.0","method":"notifications/initialized"})).unwrap();
        assert!(matches!(n, Message::Notification { .. }));
        let ok = Message::parse(json!({"jsonrpc":"2.0","id":"a","result":{}})).unwrap();
        assert_eq!(ok, Message::response(RequestId::String("a".into()), json!({})));
        let e = Message::parse(json!({"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}})).unwrap();
        assert_eq!(e, Message::error(None, ErrorObject::new(-32700, "x")));
    }

    #[test]
    fn rejects_what_is_not_one_message() {
        assert_eq!(Message::parse(json!([])), Err(MessageError::Batch));
        for bad in [
            json!(1),
            json!({"id":1,"method":"x"}),
            json!({"jsonrpc":"1.0","id":1,"method":"x"}),
            json!({"jsonrpc":"2.0","id":1.5,"method":"x"}),
            json!({"jsonrpc":"2.0","id":null,"method":"x"}),
            json!({"jsonrpc":"2.0","id":{},"method":"x"}),
            json!({"jsonrpc":"2.0","id":1,"method":7}),
            json!({"jsonrpc":"2.0","id":1,"method":"x","params":"s"}),
            json!({"jsonrpc":"2.0","id":1,"method":"x","params":[]}),
            json!({"jsonrpc":"2.0","id":1}),
            json!({"jsonrpc":"2.0","result":{}}),
            json!({"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1,"message":"m"}}),
            json!({"jsonrpc":"2.0","id":1,"error":{"code":"x"}}),
        ] {
            assert!(matches!(Message::parse(bad.clone()), Err(MessageError::Invalid(_))), "{bad}");
        }
    }

    #[test]
    fn the_strict_reader_refuses_duplicate_keys_at_any_depth() {
        let ok = br#"{"jsonrpc":"2.0","id":1,"method":"x","params":{"a":[{"b":1.5,"c":null}],"d":-3}}"#;
        assert!(Message::from_slice_strict(ok).unwrap().is_ok());
        assert_eq!(Message::from_slice_strict(ok).unwrap(), Message::from_slice(ok).unwrap());
        for dup in [
            &br#"{"jsonrpc":"2.0","id":1,"id":2,"method":"x"}"#[..],
            br#"{"jsonrpc":"2.0","id":1,"method":"x","params":{"a":{"b":1,"b":2}}}"#,
        ] {
            let e = Message::from_slice_strict(dup).unwrap_err();
            assert!(e.to_string().contains("duplicate key"), "{e}");
        }
        assert!(Message::from_slice_strict(b"{} x").is_err(), "trailing bytes");
    }

    /// The front door's reading is the plain parse followed by taking the per-request fields
    /// out of `_meta`, for every shape of message, and the strict reading puts them back.
    #[test]
    fn the_front_door_reading_takes_the_per_request_fields_as_the_plain_parse_and_take_would() {
        let v = "io.modelcontextprotocol/protocolVersion";
        let c = "io.modelcontextprotocol/clientCapabilities";
        let i = "io.modelcontextprotocol/clientInfo";
        let bodies = [
            json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","_meta":{v:"2026-07-28",c:{},i:{"name":"n","version":"1"}}}}),
            json!({"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"_meta":{"progressToken":3,v:"2026-07-28",c:{"sampling":{}},"io.modelcontextprotocol/logLevel":"info"},"arguments":{"_meta":{v:"x"}}}}),
            json!({"jsonrpc":"2.0","id":1,"method":"m","params":{"_meta":{v:"1900-01-01"}}}),
            json!({"jsonrpc":"2.0","id":1,"method":"m","params":{"_meta":{v:7,c:[],i:"me"}}}),
            json!({"jsonrpc":"2.0","id":1,"method":"m","params":{"_meta":{}}}),
            json!({"jsonrpc":"2.0","id":1,"method":"m","params":{"_meta":5}}),
            json!({"jsonrpc":"2.0","method":"notifications/x","params":{"_meta":{c:{}}}}),
            json!({"jsonrpc":"2.0","id":1,"method":"m","params":[1]}),
            json!({"jsonrpc":"2.0","id":1,"method":"m","params":"s"}),
            json!({"jsonrpc":"2.0","id":1,"result":{"_meta":{v:"2026-07-28"}}}),
            json!({"jsonrpc":"2.0","id":null,"error":{"code":-1,"message":"m"}}),
            json!({"jsonrpc":"2.0","id":1,"error":{"code":"x"}}),
            json!({"jsonrpc":"1.0","id":1,"method":"m"}),
            json!({"jsonrpc":2,"id":1,"method":"m"}),
            json!({"id":1,"method":"m"}),
            json!({"jsonrpc":"2.0","id":1.5,"method":"m","extra":{"a":1}}),
            json!({"jsonrpc":"2.0","id":1,"method":"m","result":{}}),
            json!({"jsonrpc":"2.0","id":1}),
            json!([{"jsonrpc":"2.0","id":1,"method":"m"}]),
            json!("text"),
            json!(null),
        ];
        for body in bodies {
            let text = body.to_string();
            // A call's arguments kept as written are the plain parse's once back in the params.
            let front = Message::from_slice_front(text.as_bytes()).unwrap().map(|(mut m, fields, arguments)| {
                if let (Some(arguments), Message::Request { params, .. }) = (arguments, &mut m) {
                    arguments.restore(params);
                }
                (m, fields)
            });
            let plain = Message::parse(body.clone()).map(|mut m| {
                let fields = match &mut m {
                    Message::Request { params, .. } | Message::Notification { params, .. } => {
                        PerRequest::take(params.as_mut())
                    }
                    _ => PerRequest::default(),
                };
                (m, fields)
            });
            assert_eq!(front, plain, "{body}");
            assert_eq!(Message::from_slice_strict(text.as_bytes()).unwrap(), Message::parse(body.clone()), "{body}");
        }
        // What was taken is what was sent.
        let (_, fields, _) = Message::from_slice_front(
            json!({"jsonrpc":"2.0","id":1,"method":"m","params":{"_meta":{v:"2026-07-28",c:{"roots":{}},i:{"name":"n"}}}}).to_string().as_bytes(),
        )
        .unwrap()
        .unwrap();
        assert_eq!(fields.version, Some(Member::Expected));
        assert_eq!(fields.capabilities, Some(json!({"roots": {}})));
        assert_eq!(fields.client_info, Some(json!({"name": "n"})));
        // Duplicates are refused among the taken fields and the envelope's members too.
        for dup in [
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"m","params":{{"_meta":{{"{v}":"2026-07-28","{v}":"2026-07-28"}}}}}}"#
            ),
            r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"_meta":{},"_meta":{}}}"#.to_owned(),
            r#"{"jsonrpc":"2.0","jsonrpc":"2.0","id":1,"method":"m"}"#.to_owned(),
            r#"{"jsonrpc":"2.0","id":1,"method":"m","x":1,"x":2}"#.to_owned(),
            r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{},"params":{}}"#.to_owned(),
            // Many members the envelope does not use, one of them twice.
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"m",{}"k5":0}}"#,
                (0..50_000).map(|i| format!(r#""k{i}":0,"#)).collect::<String>()
            ),
        ] {
            let e = Message::from_slice_front(dup.as_bytes()).unwrap_err();
            assert!(e.to_string().contains("duplicate key"), "{dup}: {e}");
        }
    }

    /// A `tools/call`'s arguments, when `method` comes before `params`, an object and on one
    /// line, are kept as the client wrote them, apart from the params; anything else stays in
    /// the params. Either way the strict reading's checks hold, and the request written with
    /// them is the request written from the whole tree.
    #[test]
    fn a_calls_arguments_are_kept_as_the_client_wrote_them() {
        let written =
            r#"{"n":1.50,"big":123456789012345678901234567890,"s":"\u00e9\"","deep":{"a":[1,{"b":null}]},"e":{}}"#;
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"t","arguments":{written},"_meta":{{"progressToken":"p"}}}}}}"#
        );
        let (message, _, arguments) = Message::from_slice_front(body.as_bytes()).unwrap().unwrap();
        let arguments = arguments.expect("kept as written");
        assert_eq!(arguments.get(), written);
        let Message::Request { id, method, params } = &message else { panic!("a request") };
        assert_eq!(params.as_ref().unwrap().get("arguments"), None, "not in the params");
        // Written for the upstream: the arguments as they came, the last member of the params.
        let json =
            String::from_utf8(Message::request_bytes_passing(id, method, params.as_ref(), Some(&arguments))).unwrap();
        assert!(json.ends_with(&format!(r#""arguments":{written}}}}}"#)), "{json}");
        let mut whole = params.clone();
        arguments.clone().restore(&mut whole);
        let tree: Value = serde_json::from_str(&json).unwrap();
        assert_eq!(tree, serde_json::from_str::<Value>(&Message::request_json(id, method, whole.as_ref())).unwrap());
        assert_eq!(
            Message::from_slice_strict(body.as_bytes()).unwrap().unwrap(),
            Message::from_slice(body.as_bytes()).unwrap().unwrap()
        );
        // Arguments alone make the params.
        let json = String::from_utf8(Message::request_bytes_passing(id, method, None, Some(&arguments))).unwrap();
        assert!(json.ends_with(&format!(r#""params":{{"arguments":{written}}}}}"#)), "{json}");

        // Kept in the params: another method, `method` after `params`, not an object, on
        // several lines (a stdio upstream reads a line a message), a tab.
        for body in [
            r#"{"jsonrpc":"2.0","id":1,"method":"prompts/get","params":{"name":"t","arguments":{"a":"b"}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"params":{"name":"t","arguments":{"a":1}},"method":"tools/call"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":[1]}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":"s"}}"#,
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"arguments\":{\n\"a\": 1\n}}}",
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"arguments\":{\"a\":\t1}}}",
        ] {
            let (message, _, arguments) = Message::from_slice_front(body.as_bytes()).unwrap().unwrap();
            assert_eq!(arguments, None, "{body}");
            assert_eq!(message, Message::from_slice(body.as_bytes()).unwrap().unwrap(), "{body}");
        }

        // The strict reading's refusals hold inside kept arguments, at any depth, in a small
        // object or a large one, a key written with an escape included; and `arguments` twice
        // (kept, or in the params) is refused.
        let many = (0..40).map(|i| format!(r#""k{i}":{i},"#)).collect::<String>();
        for arguments in [
            r#"{"a":1,"a":2}"#.to_owned(),
            r#"{"x":[{"y":{"b":1,"c":2,"b":3}}]}"#.to_owned(),
            format!(r#"{{{many}"k7":0}}"#),
            r#"{"a":1,"\u0061":2}"#.to_owned(),
        ] {
            let body =
                format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"arguments":{arguments}}}}}"#);
            let e = Message::from_slice_front(body.as_bytes()).unwrap_err().to_string();
            assert!(e.contains("duplicate key"), "{arguments}: {e}");
            assert_eq!(e.matches(" at line ").count(), 1, "one position, the message's: {e}");
        }
        for body in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"arguments":{},"arguments":{}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"arguments":[],"arguments":{}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"arguments":{"a":1},"n":2,"arguments":[]}}"#,
        ] {
            let e = Message::from_slice_front(body.as_bytes()).unwrap_err().to_string();
            assert!(e.contains("duplicate key \"arguments\""), "{body}: {e}");
        }
        // Their syntax is checked as everything else's.
        let bad = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"arguments":{"a":01}}}"#;
        assert!(Message::from_slice_front(bad.as_bytes()).is_err());
        let bad =
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"arguments\":{\"a\":\"\xff\"}}}";
        assert!(Message::from_slice_front(bad).is_err(), "not UTF-8");
    }

    #[test]
    fn round_trips_unknown_param_fields() {
        let v = json!({"jsonrpc":"2.0","id":"7","method":"tools/call",
            "params":{"name":"t","x-extra":{"a":[1,2]},"_meta":{"vendor/key":true}}});
        let m = Message::parse(v.clone()).unwrap();
        assert_eq!(m.to_value(), v);
        assert!(!m.to_json().contains('\n'));
    }

    #[test]
    fn the_wire_text_is_the_value_written_in_the_same_order() {
        for v in [
            json!({"jsonrpc":"2.0","id":"7","method":"m","params":{"z":1,"a":[true,null],"m":{"y":"\u{e9}\"","b":2.5}}}),
            json!({"jsonrpc":"2.0","id":3,"method":"m"}),
            json!({"jsonrpc":"2.0","method":"notifications/x","params":{"b":1,"a":2}}),
            json!({"jsonrpc":"2.0","method":"notifications/x"}),
            json!({"jsonrpc":"2.0","id":-4,"result":{"content":[{"type":"text","text":"x"}],"isError":false}}),
            json!({"jsonrpc":"2.0","id":"r","error":{"code":-32601,"message":"no","data":{"k":[1]}}}),
            json!({"jsonrpc":"2.0","error":{"code":-32700,"message":"parse"}}),
        ] {
            let m = Message::parse(v.clone()).unwrap();
            assert_eq!(m.to_json(), v.to_string(), "key order and text match the tree's");
            if let Message::Request { id, method, params } = &m {
                assert_eq!(Message::request_json(id, method, params.as_ref()), v.to_string(), "from the parts alike");
            }
        }
    }
}

/// A JSON value reader that refuses duplicate object keys, and the front door's reading of a
/// message with it ([`Top`]): the envelope's members straight into an [`Envelope`], and the
/// 2026-07-28 per-request fields out of `params._meta` into a [`PerRequest`].
mod strict {
    use std::borrow::Cow;
    use std::fmt;

    use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
    use serde_json::{Map, Value};

    use serde_json::value::RawValue;

    use super::{Envelope, Member};
    use crate::mcp::methods;
    use crate::modern::{meta, PerRequest, PROTOCOL_VERSION};
    use crate::passing::RawArguments;

    pub(super) struct Strict;

    impl<'de> DeserializeSeed<'de> for Strict {
        type Value = Value;

        fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
            deserializer.deserialize_any(Strict)
        }
    }

    /// The visits of a value that is not an object, as [`Strict`] reads them, for the visitors
    /// below that treat only objects (or only strings) specially; `$wrap` turns the value into
    /// the visitor's own.
    macro_rules! as_strict {
        ($wrap:expr) => {
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
                Strict.visit_bool(v).map($wrap)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Strict.visit_i64(v).map($wrap)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Strict.visit_u64(v).map($wrap)
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
                Strict.visit_f64(v).map($wrap)
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Strict.visit_unit().map($wrap)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                Strict.visit_seq(seq).map($wrap)
            }
        };
    }

    impl<'de> Visitor<'de> for Strict {
        type Value = Value;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON value")
        }

        fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
            Ok(Value::Bool(v))
        }

        fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
            Ok(Value::from(v))
        }

        fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
            Ok(Value::from(v))
        }

        fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
            Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
        }

        fn visit_str<E>(self, v: &str) -> Result<Value, E> {
            Ok(Value::String(v.to_owned()))
        }

        fn visit_string<E>(self, v: String) -> Result<Value, E> {
            Ok(Value::String(v))
        }

        fn visit_unit<E>(self) -> Result<Value, E> {
            Ok(Value::Null)
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
            let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
            while let Some(item) = seq.next_element_seed(Strict)? {
                items.push(item);
            }
            Ok(Value::Array(items))
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
            let mut object = Map::new();
            while let Some(key) = map.next_key::<String>()? {
                let value = map.next_value_seed(Strict)?;
                insert(&mut object, key, value)?;
            }
            Ok(Value::Object(object))
        }
    }

    /// Inserts a member; one lookup a key: the entry is vacant unless the key came before.
    fn insert<E: de::Error>(object: &mut Map<String, Value>, key: String, value: Value) -> Result<(), E> {
        match object.entry(key) {
            serde_json::map::Entry::Vacant(slot) => {
                slot.insert(value);
                Ok(())
            }
            serde_json::map::Entry::Occupied(taken) => Err(duplicate(taken.key())),
        }
    }

    fn duplicate<E: de::Error>(key: &str) -> E {
        let shown: String = key.chars().take(64).collect();
        de::Error::custom(format!("duplicate key {shown:?} in an object"))
    }

    /// Fills a member read once; a second time is a duplicate key.
    fn once<T, E: de::Error>(slot: &mut Option<T>, key: &str, value: T) -> Result<(), E> {
        if slot.is_some() {
            return Err(duplicate(key));
        }
        *slot = Some(value);
        Ok(())
    }

    /// A value read for the checks alone (no key twice in an object, at any depth): nothing
    /// is built but each object's list of keys, borrowed from the text unless escaped.
    struct Checked;

    impl<'de> DeserializeSeed<'de> for Checked {
        type Value = ();

        fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
            deserializer.deserialize_any(Checked)
        }
    }

    impl<'de> Visitor<'de> for Checked {
        type Value = ();

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON value")
        }

        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            Ok(())
        }

        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            Ok(())
        }

        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            Ok(())
        }

        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            Ok(())
        }

        fn visit_str<E>(self, _: &str) -> Result<(), E> {
            Ok(())
        }

        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            while seq.next_element_seed(Checked)?.is_some() {}
            Ok(())
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            let mut keys: Vec<Cow<'de, str>> = Vec::new();
            while let Some(key) = map.next_key_seed(KeyText)? {
                map.next_value_seed(Checked)?;
                keys.push(key);
            }
            // A few keys are compared each with each; many, sorted (fewer comparisons).
            if keys.len() <= 8 {
                for (i, key) in keys.iter().enumerate() {
                    if keys[..i].contains(key) {
                        return Err(duplicate(key));
                    }
                }
            } else {
                keys.sort_unstable();
                if let Some(pair) = keys.windows(2).find(|pair| pair[0] == pair[1]) {
                    return Err(duplicate(&pair[0]));
                }
            }
            Ok(())
        }
    }

    /// A key's text: borrowed from the message unless it has escapes.
    struct KeyText;

    impl<'de> DeserializeSeed<'de> for KeyText {
        type Value = Cow<'de, str>;

        fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Cow<'de, str>, D::Error> {
            deserializer.deserialize_str(self)
        }
    }

    impl<'de> Visitor<'de> for KeyText {
        type Value = Cow<'de, str>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an object key")
        }

        fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Cow<'de, str>, E> {
            Ok(Cow::Borrowed(v))
        }

        fn visit_str<E>(self, v: &str) -> Result<Cow<'de, str>, E> {
            Ok(Cow::Owned(v.to_owned()))
        }
    }

    /// `seed` over a value already read as text (its syntax checked): what it finds wrong is
    /// said where the text stood in the message, by the caller's error.
    fn again<'de, S: DeserializeSeed<'de>, E: de::Error>(raw: &'de RawValue, seed: S) -> Result<S::Value, E> {
        let mut deserializer = serde_json::Deserializer::from_str(raw.get());
        seed.deserialize(&mut deserializer).map_err(|e| {
            let said = e.to_string();
            let position = format!(" at line {} column {}", e.line(), e.column());
            E::custom(said.strip_suffix(&position).unwrap_or(&said))
        })
    }

    /// A key compared with the names a visitor knows, without a copy unless it is another.
    struct KeySeed(&'static [&'static str]);

    enum Key {
        Known(usize),
        Other(String),
    }

    impl<'de> DeserializeSeed<'de> for KeySeed {
        type Value = Key;

        fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Key, D::Error> {
            deserializer.deserialize_str(self)
        }
    }

    impl<'de> Visitor<'de> for KeySeed {
        type Value = Key;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an object key")
        }

        fn visit_str<E>(self, v: &str) -> Result<Key, E> {
            Ok(match self.0.iter().position(|k| *k == v) {
                Some(i) => Key::Known(i),
                None => Key::Other(v.to_owned()),
            })
        }
    }

    /// A string member checked against the text it must have (see [`Member`]).
    struct Expect(&'static str);

    impl<'de> DeserializeSeed<'de> for Expect {
        type Value = Member;

        fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Member, D::Error> {
            deserializer.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for Expect {
        type Value = Member;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON value")
        }

        fn visit_str<E>(self, v: &str) -> Result<Member, E> {
            Ok(if v == self.0 { Member::Expected } else { Member::Other(Value::String(v.to_owned())) })
        }

        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Member, A::Error> {
            Strict.visit_map(map).map(Member::Other)
        }

        as_strict!(Member::Other);
    }

    /// What the front door reads: a message's members, or (for anything but an object) the
    /// value, for [`super::Message::parse`] to say what is wrong with it. One lives on the
    /// stack per message read; boxing the envelope would cost an allocation for nothing.
    #[allow(clippy::large_enum_variant)]
    pub(super) enum Parsed {
        Envelope(Envelope),
        Other(Value),
    }

    /// The message, with the per-request fields of `params._meta` going to the [`PerRequest`]
    /// and a `tools/call`'s passable `arguments` to `arguments`.
    pub(super) struct Top<'a> {
        pub(super) fields: &'a mut PerRequest,
        pub(super) arguments: &'a mut Option<RawArguments>,
    }

    impl<'de> DeserializeSeed<'de> for Top<'_> {
        type Value = Parsed;

        fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Parsed, D::Error> {
            deserializer.deserialize_any(self)
        }
    }

    const ENVELOPE: &[&str] = &["jsonrpc", "id", "method", "params", "result", "error"];

    impl<'de> Visitor<'de> for Top<'_> {
        type Value = Parsed;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON-RPC message")
        }

        fn visit_str<E>(self, v: &str) -> Result<Parsed, E> {
            Ok(Parsed::Other(Value::String(v.to_owned())))
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Parsed, A::Error> {
            let mut envelope = Envelope::default();
            // Members the envelope does not use are read (checked) and dropped; their names
            // are kept only to find a duplicate (in a set: a body may hold many).
            let mut others: std::collections::HashSet<String> = std::collections::HashSet::new();
            while let Some(key) = map.next_key_seed(KeySeed(ENVELOPE))? {
                let name = match key {
                    Key::Known(i) => ENVELOPE[i],
                    Key::Other(name) => {
                        map.next_value_seed(Strict)?;
                        if others.contains(&name) {
                            return Err(duplicate(&name));
                        }
                        others.insert(name);
                        continue;
                    }
                };
                match name {
                    "jsonrpc" => once(&mut envelope.jsonrpc, name, map.next_value_seed(Expect("2.0"))?)?,
                    "id" => once(&mut envelope.id, name, map.next_value_seed(Strict)?)?,
                    "method" => once(&mut envelope.method, name, map.next_value_seed(Strict)?)?,
                    "params" => {
                        if envelope.params.is_some() {
                            return Err(duplicate(name));
                        }
                        let call = matches!(&envelope.method, Some(Value::String(m)) if m == methods::TOOLS_CALL);
                        let arguments = call.then_some(&mut *self.arguments);
                        envelope.params = Some(map.next_value_seed(Params { fields: &mut *self.fields, arguments })?);
                    }
                    "result" => once(&mut envelope.result, name, map.next_value_seed(Strict)?)?,
                    _ => once(&mut envelope.error, name, map.next_value_seed(Strict)?)?,
                }
            }
            Ok(Parsed::Envelope(envelope))
        }

        as_strict!(Parsed::Other);
    }

    /// `params`: its `_meta` read by [`Meta`]; `arguments`, when there is a place for them,
    /// kept as written if they can be passed on so.
    struct Params<'a> {
        fields: &'a mut PerRequest,
        arguments: Option<&'a mut Option<RawArguments>>,
    }

    impl<'de> DeserializeSeed<'de> for Params<'_> {
        type Value = Value;

        fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
            deserializer.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for Params<'_> {
        type Value = Value;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON value")
        }

        fn visit_str<E>(self, v: &str) -> Result<Value, E> {
            Ok(Value::String(v.to_owned()))
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
            let Params { fields, mut arguments } = self;
            let mut object = Map::new();
            let mut seen_meta = false;
            while let Some(key) = map.next_key::<String>()? {
                if key == "_meta" {
                    if seen_meta {
                        return Err(duplicate(&key));
                    }
                    seen_meta = true;
                    if let Some(value) = map.next_value_seed(Meta(&mut *fields))? {
                        insert(&mut object, key, value)?;
                    }
                    continue;
                }
                if let (Some(slot), "arguments") = (arguments.as_deref_mut(), key.as_str()) {
                    // Read as text first (its syntax checked), then checked strictly without
                    // building a tree; arguments that cannot pass as written become one.
                    let raw: &'de RawValue = map.next_value()?;
                    if slot.is_some() || object.contains_key(&key) {
                        return Err(duplicate(&key));
                    }
                    if RawArguments::passable(raw) {
                        again(raw, Checked)?;
                        *slot = Some(RawArguments::checked(raw));
                    } else {
                        insert(&mut object, key, again(raw, Strict)?)?;
                    }
                    continue;
                }
                let value = map.next_value_seed(Strict)?;
                insert(&mut object, key, value)?;
            }
            Ok(Value::Object(object))
        }

        as_strict!(std::convert::identity);
    }

    /// `params._meta`: the version, capabilities and client info go to the [`PerRequest`];
    /// `None` when nothing else was in it.
    struct Meta<'a>(&'a mut PerRequest);

    impl<'de> DeserializeSeed<'de> for Meta<'_> {
        type Value = Option<Value>;

        fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Option<Value>, D::Error> {
            deserializer.deserialize_any(self)
        }
    }

    const FIELDS: &[&str] = &[meta::PROTOCOL_VERSION, meta::CLIENT_CAPABILITIES, meta::CLIENT_INFO];

    impl<'de> Visitor<'de> for Meta<'_> {
        type Value = Option<Value>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON value")
        }

        fn visit_str<E>(self, v: &str) -> Result<Option<Value>, E> {
            Ok(Some(Value::String(v.to_owned())))
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<Value>, A::Error> {
            let fields = self.0;
            let mut object = Map::new();
            let mut taken = false;
            while let Some(key) = map.next_key_seed(KeySeed(FIELDS))? {
                match key {
                    Key::Known(0) => {
                        let version = map.next_value_seed(Expect(PROTOCOL_VERSION))?;
                        once(&mut fields.version, FIELDS[0], version)?;
                    }
                    Key::Known(1) => once(&mut fields.capabilities, FIELDS[1], map.next_value_seed(Strict)?)?,
                    Key::Known(_) => once(&mut fields.client_info, FIELDS[2], map.next_value_seed(Strict)?)?,
                    Key::Other(key) => {
                        let value = map.next_value_seed(Strict)?;
                        insert(&mut object, key, value)?;
                        continue;
                    }
                }
                taken = true;
            }
            Ok(if taken && object.is_empty() { None } else { Some(Value::Object(object)) })
        }

        as_strict!(Some);
    }
}
