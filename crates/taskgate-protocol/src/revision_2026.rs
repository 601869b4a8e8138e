//! MCP 2026-07-28 ("modern": stateless requests that carry their version and capabilities in
//! `_meta`) and the tasks extension `io.modelcontextprotocol/tasks`: names, `_meta` keys, the
//! per-request fields and the header value encoding. The gateway's front door turns these into
//! the one internal request model and back; nothing else reads them.

use serde_json::{Map, Value};

use crate::jsonrpc::Member;

/// The modern revision the gateway serves.
pub const PROTOCOL_VERSION: &str = "2026-07-28";
/// Every version the gateway implements, modern first (the `supported` list of -32022 and of
/// `server/discover`): the legacy ones are served through `initialize`.
pub const ALL_VERSIONS: &[&str] = &["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"];
/// The tasks extension's identifier (ext-tasks "Extension Identifier").
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// Methods and notifications new in 2026-07-28.
pub mod methods {
    /// `server/discover`
    pub const SERVER_DISCOVER: &str = "server/discover";
    /// `subscriptions/listen`
    pub const SUBSCRIPTIONS_LISTEN: &str = "subscriptions/listen";
    /// `notifications/subscriptions/acknowledged`
    pub const SUBSCRIPTIONS_ACKNOWLEDGED: &str = "notifications/subscriptions/acknowledged";
    /// `tasks/update` (tasks extension)
    pub const TASKS_UPDATE: &str = "tasks/update";
}

/// `_meta` keys of the modern revision (basic "`_meta`").
pub mod meta {
    /// The request's protocol version (required).
    pub const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
    /// The client's capabilities for this request (required).
    pub const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
    /// The client's name and version.
    pub const CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
    /// The least severe log level the client wants for this request.
    pub const LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
    /// The server's name and version, on results.
    pub const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
    /// The `subscriptions/listen` request a notification belongs to.
    pub const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
    /// The gateway's own: the key a 2026-07-28 upstream gave an input request and how many it
    /// asked at once (`[key, count]`), carried on the request the gateway relays in its place,
    /// so that a 2026-07-28 client is asked for them together under the upstream's keys.
    /// Taken out before the request reaches a client.
    pub const INPUT_KEY: &str = "dev.taskgate/inputKey";
}

/// An input request's key as its upstream gave it, and how many the upstream asked at once
/// ([`meta::INPUT_KEY`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputKey {
    /// The upstream's key.
    pub key: String,
    /// How many input requests it asked together, this one included.
    pub of: usize,
}

/// Takes [`meta::INPUT_KEY`] out of a relayed request's params (and `_meta` with it when
/// nothing else is left there).
pub fn take_input_key(params: &mut Option<Value>) -> Option<InputKey> {
    let object = params.as_mut()?.as_object_mut()?;
    let meta = object.get_mut("_meta")?.as_object_mut()?;
    let marked = meta.remove(meta::INPUT_KEY)?;
    if meta.is_empty() {
        object.remove("_meta");
    }
    let key = marked.get(0)?.as_str()?.to_owned();
    let of = marked.get(1).and_then(Value::as_u64).map_or(1, |n| n.max(1) as usize);
    Some(InputKey { key, of })
}

/// Puts [`meta::INPUT_KEY`] into a relayed request's params.
pub fn put_input_key(params: &mut Option<Value>, input: InputKey) {
    let params = params.get_or_insert_with(|| Value::Object(Map::new()));
    if let Some(object) = params.as_object_mut() {
        let meta = object.entry("_meta").or_insert_with(|| Value::Object(Map::new()));
        if let Some(meta) = meta.as_object_mut() {
            meta.insert(meta::INPUT_KEY.into(), serde_json::json!([input.key, input.of]));
        }
    }
}

/// The log levels of basic/utilities/logging, least severe first.
pub const LOG_LEVELS: [&str; 8] = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"];

/// The severity rank of a level name (`None`: not a level).
pub fn log_rank(level: &str) -> Option<usize> {
    LOG_LEVELS.iter().position(|l| *l == level)
}

/// The per-request fields of `params._meta` as the front door takes them out while it parses a
/// message ([`crate::Message::from_slice_front`]), unchecked: the version (compared as it is
/// read), the client's capabilities and its info. The log level stays in `_meta`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PerRequest {
    /// `io.modelcontextprotocol/protocolVersion`, if sent: [`Member::Expected`] when it is
    /// [`PROTOCOL_VERSION`].
    pub version: Option<Member>,
    /// `io.modelcontextprotocol/clientCapabilities`, if sent.
    pub capabilities: Option<Value>,
    /// `io.modelcontextprotocol/clientInfo`, if sent.
    pub client_info: Option<Value>,
}

impl PerRequest {
    /// Whether none was sent.
    pub fn is_empty(&self) -> bool {
        self.version.is_none() && self.capabilities.is_none() && self.client_info.is_none()
    }

    /// Takes the fields out of a params value's `_meta` (an empty `_meta` goes when it held
    /// only them), as the front door's parse does.
    pub fn take(params: Option<&mut Value>) -> PerRequest {
        let mut fields = PerRequest::default();
        let Some(Value::Object(params)) = params else { return fields };
        let Some(Value::Object(m)) = params.get_mut("_meta") else { return fields };
        fields.version = m.shift_remove(meta::PROTOCOL_VERSION).map(|v| match v {
            Value::String(s) if s == PROTOCOL_VERSION => Member::Expected,
            other => Member::Other(other),
        });
        fields.capabilities = m.shift_remove(meta::CLIENT_CAPABILITIES);
        fields.client_info = m.shift_remove(meta::CLIENT_INFO);
        if m.is_empty() && !fields.is_empty() {
            params.shift_remove("_meta");
        }
        fields
    }

    /// Puts the fields back into `params._meta`, after what else it holds, for a message that
    /// is not served as 2026-07-28 (it goes on as the client sent it, but for that order).
    pub fn restore(self, params: &mut Option<Value>) {
        if self.is_empty() {
            return;
        }
        let params = params.get_or_insert_with(|| Value::Object(Map::new()));
        let Value::Object(params) = params else { return };
        let m = params.entry("_meta").or_insert_with(|| Value::Object(Map::new()));
        let Value::Object(m) = m else { return };
        if let Some(version) = self.version {
            let version = match version {
                Member::Expected => Value::from(PROTOCOL_VERSION),
                Member::Other(v) => v,
            };
            m.insert(meta::PROTOCOL_VERSION.into(), version);
        }
        if let Some(capabilities) = self.capabilities {
            m.insert(meta::CLIENT_CAPABILITIES.into(), capabilities);
        }
        if let Some(info) = self.client_info {
            m.insert(meta::CLIENT_INFO.into(), info);
        }
    }
}

/// The per-request fields of a modern request (basic "Per-request protocol fields").
#[derive(Debug, Clone, PartialEq)]
pub struct RequestMeta {
    /// `io.modelcontextprotocol/protocolVersion`: the one this gateway implements (any other is
    /// refused).
    pub version: &'static str,
    /// `io.modelcontextprotocol/clientCapabilities` (an object).
    pub capabilities: Value,
    /// `io.modelcontextprotocol/clientInfo`, if sent.
    pub client_info: Option<Value>,
    /// `io.modelcontextprotocol/logLevel`, if sent.
    pub log_level: Option<&'static str>,
}

/// Why the per-request fields cannot be read.
#[derive(Debug, Clone, PartialEq)]
pub enum MetaError {
    /// A required field is missing or malformed: -32602.
    Invalid(String),
    /// The version is a string the gateway does not implement: -32022.
    Unsupported(String),
}

impl RequestMeta {
    /// Reads the per-request fields (on a copy of the params: see [`RequestMeta::checked`]).
    pub fn from_params(params: Option<&Value>) -> Result<RequestMeta, MetaError> {
        let mut params = params.cloned();
        RequestMeta::take_from_params(params.as_mut())
    }

    /// Takes the per-request fields out of the params ([`PerRequest::take`]) and checks them
    /// ([`RequestMeta::checked`]).
    pub fn take_from_params(mut params: Option<&mut Value>) -> Result<RequestMeta, MetaError> {
        let fields = PerRequest::take(params.as_deref_mut());
        RequestMeta::checked(fields, params.as_deref())
    }

    /// Checks the per-request fields taken out of a request, the version first (an unsupported
    /// one is -32022 whatever else is wrong), then the capabilities (required, an object), the
    /// client info (an object when present) and the log level, read from the params' `_meta`
    /// (a level name when present). It stays there: it is the request's own
    /// (server/utilities/logging "Per-request log level"), a 2026-07-28 upstream takes it as it
    /// is, and a 2025-11-25 upstream ignores a reserved key it does not know.
    pub fn checked(fields: PerRequest, params: Option<&Value>) -> Result<RequestMeta, MetaError> {
        let missing = |key: &str| {
            MetaError::Invalid(format!(
                "the request has no _meta[\"{key}\"]; every request of protocol version {PROTOCOL_VERSION} carries it"
            ))
        };
        match fields.version {
            Some(Member::Expected) => {}
            Some(Member::Other(Value::String(v))) => return Err(MetaError::Unsupported(v)),
            Some(Member::Other(_)) => {
                return Err(MetaError::Invalid(format!("_meta[\"{}\"] must be a string", meta::PROTOCOL_VERSION)))
            }
            None => return Err(missing(meta::PROTOCOL_VERSION)),
        }
        let capabilities = match fields.capabilities {
            Some(c @ Value::Object(_)) => c,
            Some(_) => {
                return Err(MetaError::Invalid(format!("_meta[\"{}\"] must be an object", meta::CLIENT_CAPABILITIES)))
            }
            None => return Err(missing(meta::CLIENT_CAPABILITIES)),
        };
        let client_info = match fields.client_info {
            None => None,
            Some(c @ Value::Object(_)) => Some(c),
            Some(_) => return Err(MetaError::Invalid(format!("_meta[\"{}\"] must be an object", meta::CLIENT_INFO))),
        };
        let level = params.and_then(|p| p.get("_meta")).and_then(|m| m.get(meta::LOG_LEVEL));
        let log_level = match level {
            None => None,
            Some(Value::String(l)) if log_rank(l).is_some() => log_rank(l).map(|r| LOG_LEVELS[r]),
            Some(_) => {
                return Err(MetaError::Invalid(format!(
                    "_meta[\"{}\"] must be one of {}",
                    meta::LOG_LEVEL,
                    LOG_LEVELS.join(", ")
                )))
            }
        };
        Ok(RequestMeta { version: PROTOCOL_VERSION, capabilities, client_info, log_level })
    }

    /// Whether the client declared the tasks extension on this request.
    pub fn declares_tasks(&self) -> bool {
        self.capabilities.get("extensions").and_then(|e| e.get(TASKS_EXTENSION)).is_some_and(Value::is_object)
    }
}

/// Where the `Mcp-Name` header's value comes from for `method` (streamable-http "Standard
/// Request Headers", ext-tasks "Routing Headers"): `params.name`, `params.uri` or
/// `params.taskId`; `None` when the method has no `Mcp-Name`.
pub fn name_source(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        "tasks/get" | "tasks/update" | "tasks/cancel" => Some("taskId"),
        _ => None,
    }
}

/// A header value that needs no decoding (visible ASCII, space and tab, and not the Base64
/// sentinel), as it is: what [`decode_header_value`] would return, without a copy.
pub fn plain_header_value(raw: &[u8]) -> Option<&str> {
    if raw.starts_with(b"=?base64?") || !raw.iter().all(|b| b.is_ascii_graphic() || *b == b' ' || *b == b'\t') {
        return None;
    }
    std::str::from_utf8(raw).ok()
}

/// A header value as the client meant it (streamable-http "Value Encoding"): a value in the
/// Base64 sentinel `=?base64?…?=` decoded as UTF-8, any other taken as it is. `Err` says why a
/// value is unusable (invalid characters, bad Base64, not UTF-8).
pub fn decode_header_value(raw: &[u8], decode_base64: impl Fn(&str) -> Option<Vec<u8>>) -> Result<String, String> {
    // RFC 9110 field values: visible ASCII, space and tab.
    if let Some(bad) = raw.iter().find(|b| !(b.is_ascii_graphic() || **b == b' ' || **b == b'\t')) {
        return Err(format!("the value contains the byte 0x{bad:02x}, which a header value may not"));
    }
    let text = std::str::from_utf8(raw).map_err(|_| "the value is not ASCII".to_owned())?;
    match text.strip_prefix("=?base64?").and_then(|rest| rest.strip_suffix("?=")) {
        None => Ok(text.to_owned()),
        Some(encoded) => {
            let bytes = decode_base64(encoded).ok_or("the value is not valid Base64 inside =?base64?…?=")?;
            String::from_utf8(bytes).map_err(|_| "the Base64 value is not UTF-8".to_owned())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn meta(m: Value) -> Option<Value> {
        Some(json!({ "_meta": m }))
    }

    #[test]
    fn per_request_fields_are_required_and_typed() {
        let ok = RequestMeta::from_params(
            meta(json!({
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
                "io.modelcontextprotocol/logLevel": "warning",
            }))
            .as_ref(),
        )
        .unwrap();
        assert!(ok.declares_tasks());
        assert_eq!(ok.log_level, Some("warning"));
        let unsupported = json!({"io.modelcontextprotocol/protocolVersion": "1900-01-01"});
        assert_eq!(
            RequestMeta::from_params(meta(unsupported).as_ref()),
            Err(MetaError::Unsupported("1900-01-01".into()))
        );
        for bad in [
            json!({}),
            json!({"io.modelcontextprotocol/protocolVersion": 2026}),
            json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28"}),
            json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": []}),
            json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}, "io.modelcontextprotocol/logLevel": "loud"}),
            json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}, "io.modelcontextprotocol/clientInfo": "me"}),
        ] {
            assert!(
                matches!(RequestMeta::from_params(meta(bad.clone()).as_ref()), Err(MetaError::Invalid(_))),
                "{bad}"
            );
        }
        assert!(matches!(RequestMeta::from_params(None), Err(MetaError::Invalid(_))));
    }

    #[test]
    fn header_values_decode_the_base64_sentinel_and_refuse_invalid_bytes() {
        let b64 = |s: &str| if s == "SGVsbG8sIOS4lueVjA==" { Some("Hello, 世界".as_bytes().to_vec()) } else { None };
        assert_eq!(decode_header_value(b"get_weather", b64).unwrap(), "get_weather");
        assert_eq!(decode_header_value(b"=?base64?SGVsbG8sIOS4lueVjA==?=", b64).unwrap(), "Hello, 世界");
        assert!(decode_header_value(b"=?base64?!!!?=", b64).is_err());
        assert!(decode_header_value(b"a\x01b", b64).is_err());
        assert!(decode_header_value("é".as_bytes(), b64).is_err());
        // The copy-free reading agrees wherever it answers, and leaves the rest to the decoder.
        for raw in [
            &b"get_weather"[..],
            b"a b\tc",
            b"=?base64?SGVsbG8sIOS4lueVjA==?=",
            b"=?base64?x",
            b"a\x01b",
            "é".as_bytes(),
        ] {
            if let Some(plain) = plain_header_value(raw) {
                assert_eq!(decode_header_value(raw, b64).as_deref(), Ok(plain));
            }
        }
        assert_eq!(plain_header_value(b"get_weather"), Some("get_weather"));
        assert_eq!(plain_header_value(b"=?base64?SGVsbG8sIOS4lueVjA==?="), None);
        assert_eq!(plain_header_value(b"a\x01b"), None);
    }

    #[test]
    fn taking_the_per_request_fields_leaves_the_rest_of_meta_in_order() {
        let mut params = json!({"name": "t", "_meta": {
            "progressToken": 5,
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "vendor/a": 1,
            "io.modelcontextprotocol/clientCapabilities": {"sampling": {}},
            "io.modelcontextprotocol/clientInfo": {"name": "c", "version": "1"},
            "io.modelcontextprotocol/logLevel": "info",
            "vendor/b": 2,
        }});
        let read = RequestMeta::from_params(Some(&params)).unwrap();
        let taken = RequestMeta::take_from_params(Some(&mut params)).unwrap();
        assert_eq!(read, taken);
        assert_eq!(taken.client_info, Some(json!({"name": "c", "version": "1"})));
        assert_eq!(taken.log_level, Some("info"));
        let rest: Vec<&String> = params["_meta"].as_object().unwrap().keys().collect();
        assert_eq!(rest, ["progressToken", "vendor/a", "io.modelcontextprotocol/logLevel", "vendor/b"]);
        // A _meta of per-request fields only goes, and the params keep their order.
        let mut only = json!({"name": "t", "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        }, "arguments": {}});
        RequestMeta::take_from_params(Some(&mut only)).unwrap();
        assert_eq!(only.to_string(), r#"{"name":"t","arguments":{}}"#);
    }
}
