//! The JSON-RPC 2.0 envelope.
//!
//! [`Message::parse`] classifies a JSON value strictly: anything that is not exactly one request,
//! notification or response is a [`MessageError`] that names what was wrong, so the front door
//! can answer -32600 with a useful message.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::codes;

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
        match object.get("jsonrpc") {
            Some(Value::String(v)) if v == "2.0" => {}
            Some(other) => return Err(MessageError::Invalid(format!("\"jsonrpc\" must be \"2.0\", got {other}"))),
            None => return Err(MessageError::Invalid("missing \"jsonrpc\": \"2.0\"".into())),
        }
        let id = match object.remove("id") {
            None => None,
            Some(raw) => match RequestId::from_value(&raw) {
                Some(id) => Some(id),
                None if raw.is_null() && object.contains_key("error") => None,
                None => {
                    return Err(MessageError::Invalid(format!(
                        "\"id\" must be a string or an integer, got {}",
                        json_kind(&raw)
                    )))
                }
            },
        };
        if let Some(method) = object.remove("method") {
            let Value::String(method) = method else {
                return Err(MessageError::Invalid("\"method\" must be a string".into()));
            };
            let params = take_params(&mut object)?;
            if object.contains_key("result") || object.contains_key("error") {
                return Err(MessageError::Invalid(
                    "a message cannot have both \"method\" and \"result\"/\"error\"".into(),
                ));
            }
            return Ok(match id {
                Some(id) => Message::Request { id, method, params },
                None => Message::Notification { method, params },
            });
        }
        match (object.remove("result"), object.remove("error")) {
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

    /// [`Message::from_slice`], and a JSON object with the same key twice is a syntax error
    /// (RFC 8259 says names SHOULD be unique; which of two values counts is undefined, so the
    /// front door refuses to guess).
    pub fn from_slice_strict(bytes: &[u8]) -> Result<Result<Message, MessageError>, serde_json::Error> {
        use serde::de::DeserializeSeed;
        let mut deserializer = serde_json::Deserializer::from_slice(bytes);
        let value = strict::Strict.deserialize(&mut deserializer)?;
        deserializer.end()?;
        Ok(Message::parse(value))
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
}

/// Written straight from the borrowed parts, in the order of [`Message::to_value`]: nothing is
/// copied into an intermediate tree on the way to the wire.
impl Serialize for Message {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("jsonrpc", "2.0")?;
        match self {
            Message::Request { id, method, params } => {
                map.serialize_entry("id", id)?;
                map.serialize_entry("method", method)?;
                if let Some(p) = params {
                    map.serialize_entry("params", p)?;
                }
            }
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

fn take_params(object: &mut Map<String, Value>) -> Result<Option<Value>, MessageError> {
    match object.remove("params") {
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
        }
    }
}

/// A JSON value reader that refuses duplicate object keys.
mod strict {
    use std::fmt;

    use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
    use serde_json::{Map, Value};

    pub(super) struct Strict;

    impl<'de> DeserializeSeed<'de> for Strict {
        type Value = Value;

        fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
            deserializer.deserialize_any(Strict)
        }
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
                // One lookup a key: the entry is vacant unless the key came before.
                match object.entry(key) {
                    serde_json::map::Entry::Vacant(slot) => {
                        slot.insert(value);
                    }
                    serde_json::map::Entry::Occupied(taken) => {
                        let shown: String = taken.key().chars().take(64).collect();
                        return Err(de::Error::custom(format!("duplicate key {shown:?} in an object")));
                    }
                }
            }
            Ok(Value::Object(object))
        }
    }
}
