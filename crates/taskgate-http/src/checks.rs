//! Header and body checks of the MCP endpoint, each returning the [`GatewayError`] to answer.

use actix_web::http::header::{self, HeaderMap};
use actix_web::web;
use futures_util::StreamExt;
use serde_json::Value;
use taskgate_core::logs::Untrusted;
use taskgate_core::GatewayError;
use taskgate_protocol::jsonrpc::json_kind;
use taskgate_protocol::{mcp, Message, RequestId};

/// The `Mcp-Session-Id` header.
pub const SESSION_HEADER: &str = "mcp-session-id";
/// The `MCP-Protocol-Version` header.
pub const VERSION_HEADER: &str = "mcp-protocol-version";
/// The headers' names, ready for lookups (a name given as text is parsed, and copied, at each).
pub const SESSION_NAME: header::HeaderName = header::HeaderName::from_static(SESSION_HEADER);
/// See [`SESSION_NAME`].
pub const VERSION_NAME: header::HeaderName = header::HeaderName::from_static(VERSION_HEADER);

fn header_str(headers: &HeaderMap, name: impl header::AsHeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// basic/transports "Security Warning": servers MUST validate `Origin`, and answer 403 when it
/// is present and invalid. Requests without `Origin` (non-browser clients) pass.
pub fn origin(headers: &HeaderMap, allowed: &[String]) -> Result<(), GatewayError> {
    let Some(origin) = headers.get(header::ORIGIN) else { return Ok(()) };
    let origin = origin.to_str().unwrap_or("<not ASCII>");
    if origin_allowed(origin, allowed) {
        Ok(())
    } else {
        Err(GatewayError::OriginNotAllowed(origin.to_owned()))
    }
}

/// `allowed` is `scheme://host` (any port) or `scheme://host:port`.
/// Whether `origin` is one of `allowed` (`*` is any).
pub fn origin_allowed(origin: &str, allowed: &[String]) -> bool {
    allowed.iter().any(|a| a == "*" || origin_matches(a, origin))
}

fn origin_matches(allowed: &str, origin: &str) -> bool {
    if allowed.eq_ignore_ascii_case(origin) {
        return true;
    }
    let Some((scheme, host_port)) = origin.split_once("://") else { return false };
    let Some((a_scheme, a_host)) = allowed.split_once("://") else { return false };
    if !scheme.eq_ignore_ascii_case(a_scheme) {
        return false;
    }
    // An allowed entry without a port admits the host on any port.
    let host = match host_port.rsplit_once(':') {
        Some((h, port)) if !h.is_empty() && port.chars().all(|c| c.is_ascii_digit()) && !host_port.ends_with(']') => h,
        _ => host_port,
    };
    host.eq_ignore_ascii_case(a_host)
}

/// POST bodies must be `application/json`.
pub fn content_type(headers: &HeaderMap) -> Result<(), GatewayError> {
    match header_str(headers, header::CONTENT_TYPE) {
        Some(ct) if ct.split(';').next().is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json")) => Ok(()),
        Some(ct) => Err(GatewayError::UnsupportedMediaType(format!("Content-Type {ct:?}; send application/json"))),
        None => Err(GatewayError::UnsupportedMediaType("no Content-Type; send application/json".into())),
    }
}

/// What a client's `Accept` header allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accepts {
    /// `application/json` is acceptable.
    pub json: bool,
    /// `text/event-stream` is acceptable.
    pub sse: bool,
    /// The client ranks `text/event-stream` above `application/json`: a higher weight, or the
    /// same weight and named first (a wildcard names neither). Such a client is answered with a
    /// stream even when one JSON object would do.
    pub prefers_sse: bool,
}

/// How one media type fares in an `Accept` header: its weight, from the most specific range
/// that names it, and where that range stands.
#[derive(Clone, Copy)]
struct Ranked {
    specificity: u8,
    weight: f32,
    position: usize,
}

impl Ranked {
    const UNNAMED: Ranked = Ranked { specificity: 0, weight: 0.0, position: usize::MAX };

    fn offer(&mut self, specificity: u8, weight: f32, position: usize) {
        if specificity > self.specificity {
            *self = Ranked { specificity, weight, position };
        }
    }
}

/// Reads `Accept` (RFC 9110 section 12.5.1): a missing header accepts anything, a more
/// specific range's weight wins over a wildcard's, and weight 0 refuses.
pub fn accepts(headers: &HeaderMap) -> Accepts {
    let Some(accept) = header_str(headers, header::ACCEPT) else {
        return Accepts { json: true, sse: true, prefers_sse: false };
    };
    let (mut json, mut sse) = (Ranked::UNNAMED, Ranked::UNNAMED);
    for (position, range) in accept.split(',').enumerate() {
        let mut parts = range.split(';');
        let media = parts.next().unwrap_or_default().trim();
        // A weight that is not a number from 0 to 1 (RFC 9110 section 12.4.2) counts as absent.
        let weight = parts
            .find_map(|p| match p.trim().split_once('=') {
                Some((q, w)) if q.trim().eq_ignore_ascii_case("q") => {
                    Some(w.trim().parse::<f32>().ok().filter(|w| (0.0..=1.0).contains(w)).unwrap_or(1.0))
                }
                _ => None,
            })
            .unwrap_or(1.0);
        // Media types are case-insensitive (compared in place: this runs on every request).
        let is = |name: &str| media.eq_ignore_ascii_case(name);
        if is("*/*") {
            json.offer(1, weight, position);
            sse.offer(1, weight, position);
        } else if is("application/*") {
            json.offer(2, weight, position);
        } else if is("application/json") {
            json.offer(3, weight, position);
        } else if is("text/*") {
            sse.offer(2, weight, position);
        } else if is("text/event-stream") {
            sse.offer(3, weight, position);
        }
    }
    // Equal weights: SSE is preferred only where the client named it before JSON.
    let named_first = sse.specificity == 3 && sse.position < json.position;
    let prefers_sse = sse.weight > json.weight || (sse.weight == json.weight && named_first);
    Accepts { json: json.weight > 0.0, sse: sse.weight > 0.0, prefers_sse: sse.weight > 0.0 && prefers_sse }
}

/// basic/transports "Protocol Version Header": an invalid or unsupported version MUST get 400.
/// The session is served at the version it negotiated at initialize whatever the header says:
/// the header SHOULD be that version, and a supported other one (the conformance suite sends
/// 2025-03-26 on a 2025-11-25 session, as older SDK clients do) is accepted, as SDK servers do.
pub fn protocol_version(headers: &HeaderMap, negotiated: &str) -> Result<(), GatewayError> {
    match headers.get(&VERSION_NAME) {
        None => Ok(()),
        Some(v) => match v.to_str().map(str::trim) {
            Ok(v) if v == negotiated => Ok(()),
            Ok(v) if mcp::is_supported_version(v) => {
                tracing::debug!(header = v, %negotiated, "MCP-Protocol-Version differs from the negotiated version; served at the negotiated one");
                Ok(())
            }
            Ok(v) => Err(GatewayError::UnsupportedProtocolVersion(Untrusted(v).to_string())),
            Err(_) => Err(GatewayError::UnsupportedProtocolVersion("<not ASCII>".into())),
        },
    }
}

/// Client-chosen identifiers are bounded, and typed as MCP says: the request id, the progress
/// token (a string or an integer, basic/utilities/progress), and a `taskId` or `cursor` param
/// are at most [`mcp::MAX_ID_BYTES`] bytes. Refused with -32602; an id too long to echo is
/// answered with a null id.
pub fn identifiers(message: &Message) -> Result<(), (GatewayError, Option<RequestId>)> {
    let max = mcp::MAX_ID_BYTES;
    let too_long = |what: &str| GatewayError::InvalidParams(format!("{what} is longer than {max} bytes"));
    let id = message.id().cloned();
    if let Some(RequestId::String(s)) = &id {
        if s.len() > max {
            return Err((too_long("the request id"), None));
        }
    }
    let (Message::Request { params: Some(params), .. } | Message::Notification { params: Some(params), .. }) = message
    else {
        return Ok(());
    };
    if let Some(token) = params.get("_meta").and_then(|m| m.get(mcp::meta::PROGRESS_TOKEN)) {
        match token {
            Value::String(s) if s.len() > max => return Err((too_long("_meta.progressToken"), id)),
            Value::String(_) => {}
            Value::Number(n) if n.is_i64() || n.is_u64() => {}
            other => {
                let why = format!("_meta.progressToken must be a string or an integer, got {}", json_kind(other));
                return Err((GatewayError::InvalidParams(why), id));
            }
        }
    }
    for key in ["taskId", "cursor"] {
        if params.get(key).and_then(Value::as_str).is_some_and(|s| s.len() > max) {
            return Err((too_long(key), id));
        }
    }
    Ok(())
}

/// The session id header, if present.
pub fn session_id(headers: &HeaderMap) -> Option<&str> {
    header_str(headers, &SESSION_NAME)
}

/// The most of a body's announced length taken before its bytes arrive.
const BODY_RESERVED_AT_ONCE: usize = 1 << 20;

/// The `Content-Length` a request declares, when it is a number.
pub fn content_length(headers: &HeaderMap) -> Option<usize> {
    header_str(headers, header::CONTENT_LENGTH).and_then(|l| l.parse::<usize>().ok())
}

/// Reads the body, refusing more than `limit` bytes as soon as they arrive, and a body that
/// takes longer than `timeout` in all (a client trickling bytes holds a connection and a
/// descriptor; it gets 408 and the connection closes).
pub async fn body(
    headers: &HeaderMap,
    mut payload: web::Payload,
    limit: usize,
    timeout: std::time::Duration,
) -> Result<web::BytesMut, GatewayError> {
    let length = content_length(headers);
    if length.is_some_and(|length| length > limit) {
        return Err(GatewayError::PayloadTooLarge { limit });
    }
    let read = async {
        // The length announced (within the limit) is taken at once, up to a bound: a large
        // body is not copied again each time the buffer would grow, and a client that
        // announces much and sends little makes the gateway hold no more than it sends plus
        // that bound.
        let mut body = web::BytesMut::with_capacity(length.unwrap_or(0).min(BODY_RESERVED_AT_ONCE));
        while let Some(chunk) = payload.next().await {
            let chunk = chunk.map_err(|e| GatewayError::InvalidRequest(format!("could not read the body: {e}")))?;
            if body.len() + chunk.len() > limit {
                return Err(GatewayError::PayloadTooLarge { limit });
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    };
    match tokio::time::timeout(timeout, read).await {
        Ok(read) => read,
        Err(_) => Err(GatewayError::BodyTimeout { ms: timeout.as_millis() as u64 }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::http::header::{HeaderName, HeaderValue};

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(HeaderName::try_from(*k).unwrap(), HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn origins_match_host_on_any_port_or_exactly() {
        let allowed = vec!["http://localhost".to_string(), "https://app.example.com:8443".to_string()];
        for ok in ["http://localhost", "http://localhost:3000", "HTTP://LOCALHOST:1", "https://app.example.com:8443"] {
            assert!(origin(&headers(&[("origin", ok)]), &allowed).is_ok(), "{ok}");
        }
        for bad in
            ["http://evil.com", "https://localhost", "http://localhost.evil.com", "https://app.example.com", "null"]
        {
            assert!(origin(&headers(&[("origin", bad)]), &allowed).is_err(), "{bad}");
        }
        assert!(origin(&headers(&[]), &allowed).is_ok());
        assert!(origin(&headers(&[("origin", "http://any")]), &["*".to_string()]).is_ok());
    }

    #[test]
    fn accept_header_is_read_like_http_says() {
        let read = |accept: &str| {
            let a = accepts(&headers(&[("accept", accept)]));
            (a.json, a.sse, a.prefers_sse)
        };
        assert_eq!(accepts(&headers(&[])), Accepts { json: true, sse: true, prefers_sse: false });
        assert_eq!(read("application/json, text/event-stream"), (true, true, false));
        assert_eq!(read("text/event-stream"), (false, true, true));
        assert_eq!(read("application/json"), (true, false, false));
        assert_eq!(read("*/*"), (true, true, false));
        assert_eq!(read("text/html"), (false, false, false));
        assert_eq!(read("application/json, text/event-stream;q=0"), (true, false, false));
        // Media types are case-insensitive.
        assert_eq!(read("Application/JSON, TEXT/Event-Stream"), (true, true, false));
        assert_eq!(read("Text/*"), (false, true, true));
        // Equal weights: the one listed first is preferred; a higher weight wins wherever it is.
        assert_eq!(read("text/event-stream, application/json"), (true, true, true));
        assert_eq!(read("application/json;q=0.5, text/event-stream"), (true, true, true));
        assert_eq!(read("text/event-stream;q=0.4, application/json;Q=0.9"), (true, true, false));
        // A specific range's weight wins over a wildcard's, in either order.
        assert_eq!(read("application/json;q=0, */*"), (false, true, true));
        assert_eq!(read("*/*, text/event-stream;q=0"), (true, false, false));
        assert_eq!(read("*/*;q=0.1, application/json"), (true, true, false));
        // A weight that is not a number from 0 to 1 counts as 1, as if it were absent.
        for odd in ["x", "nan", "inf", "-1", "1e3"] {
            assert_eq!(read(&format!("text/event-stream;q={odd}, application/json")), (true, true, true), "{odd}");
        }
        // A wildcard listed first names no preference for SSE.
        assert_eq!(read("*/*, application/json"), (true, true, false));
        assert_eq!(read("text/*, application/json"), (true, true, false));
    }

    #[test]
    fn content_type_and_version_checks() {
        assert!(content_type(&headers(&[("content-type", "application/json; charset=utf-8")])).is_ok());
        assert!(content_type(&headers(&[("content-type", "text/plain")])).is_err());
        assert!(content_type(&headers(&[])).is_err());
        assert!(protocol_version(&headers(&[("mcp-protocol-version", "2025-06-18")]), "2025-06-18").is_ok());
        assert!(protocol_version(&headers(&[("mcp-protocol-version", "2025-11-25")]), "2025-03-26").is_ok());
        assert!(protocol_version(&headers(&[("mcp-protocol-version", "2025-13-01")]), "2025-11-25").is_err());
        assert!(protocol_version(&headers(&[("mcp-protocol-version", "2024-01-01")]), "2025-11-25").is_err());
        assert!(protocol_version(&headers(&[]), "2025-03-26").is_ok());
    }
}
