//! The JSON-RPC 2.0 envelope.
//!
//! [`Message::parse`] classifies a JSON value strictly: anything that is not exactly one request,
//! notification or response is a [`MessageError`] that names what was wrong, so the front door
//! can answer -32600 with a useful message.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::codes;
use serde_json::value::RawValue;

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
}

/// A request's borrowed parts, written as the request.
pub(crate) struct RequestParts<'a> {
    pub id: &'a RequestId,
    pub method: &'a str,
    pub params: Option<&'a Value>,
    /// A `tools/call`'s arguments as the client wrote them, written as the last member of
    /// `params` (see `pass_through::RawArguments`).
    pub arguments: Option<&'a RawValue>,
}

/// Params with the arguments passed as written, written as one object.
struct PassingParams<'a> {
    params: Option<&'a Map<String, Value>>,
    arguments: &'a RawValue,
}

impl Serialize for PassingParams<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(None)?;
        for (key, value) in self.params.into_iter().flatten().filter(|(key, _)| *key != "arguments") {
            map.serialize_entry(key, value)?;
        }
        map.serialize_entry("arguments", self.arguments)?;
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
    pub jsonrpc: Option<Member>,
    pub id: Option<Value>,
    pub method: Option<Value>,
    pub params: Option<Value>,
    pub result: Option<Value>,
    pub error: Option<Value>,
}

impl Envelope {
    /// Classifies the members as exactly one message (see [`Message::parse`]).
    pub(crate) fn into_message(self) -> Result<Message, MessageError> {
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

    /// A number relayed through a tree is the number the peer wrote: read correctly rounded,
    /// so what the gateway writes reads back the same (a fast, not correctly rounded read moves
    /// a large number by one unit in the last place at each hop).
    #[test]
    fn numbers_read_and_written_again_stay_the_same() {
        for number in [
            "1.18446744073709551615e20",
            "18446744073709551616",
            "0.1e1",
            "2.2250738585072014e-308",
            "9007199254740993",
        ] {
            let text = format!(r#"{{"jsonrpc":"2.0","id":1,"result":{{"n":{number}}}}}"#);
            let once = Message::from_slice(text.as_bytes()).unwrap().unwrap();
            let twice = Message::from_slice(once.to_json().as_bytes()).unwrap().unwrap();
            assert_eq!(once.to_value(), twice.to_value(), "{number}");
        }
    }
    use crate::revision_2026::PerRequest;
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
