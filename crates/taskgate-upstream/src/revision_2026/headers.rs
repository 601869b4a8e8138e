//! The standard headers of a 2026-07-28 request over HTTP (`Mcp-Method`, `Mcp-Name`,
//! `Mcp-Param-*` from a tool's `x-mcp-header` annotations) and their values' encoding.

use std::collections::HashMap;
use std::sync::Arc;

use base64::Engine;
use parking_lot::Mutex;
use reqwest::header::{HeaderName, HeaderValue};
use serde_json::Value;
use taskgate_protocol::mcp::methods;
use taskgate_protocol::revision_2026::{self as wire};

/// The method of a 2026-07-28 request, as a header.
pub(crate) const METHOD_HEADER: HeaderName = HeaderName::from_static("mcp-method");
/// The tool, prompt or resource a 2026-07-28 request names, as a header.
pub(crate) const NAME_HEADER: HeaderName = HeaderName::from_static("mcp-name");

pub(crate) use taskgate_protocol::param_headers::{param_headers, ParamHeader};

/// A header value as streamable-http "Value Encoding" requires: as it is when it is plain
/// visible ASCII without surrounding whitespace, else in the `=?base64?…?=` sentinel.
pub(crate) fn header_value(text: &str) -> HeaderValue {
    let visible = text.bytes().all(|b| b.is_ascii_graphic() || b == b' ');
    let padded = text.starts_with(' ') || text.ends_with(' ');
    let sentinel = text.starts_with("=?base64?") && text.ends_with("?=");
    let plain = visible && !padded && !sentinel;
    let encoded;
    let text = if plain {
        text
    } else {
        encoded = format!("=?base64?{}?=", base64::engine::general_purpose::STANDARD.encode(text));
        &encoded
    };
    HeaderValue::from_str(text).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// The headers of a modern POST (streamable-http "Standard Request Headers", "Client Behavior";
/// ext-tasks "Routing Headers").
pub(super) fn request_headers(method: &str, params: &Value, tools: &ToolHeaders) -> Vec<(HeaderName, HeaderValue)> {
    let mut headers = vec![(crate::revision_2026::METHOD_HEADER, header_value(method))];
    if let Some(name) = wire::name_source(method).and_then(|field| params.get(field)).and_then(Value::as_str) {
        headers.push((crate::revision_2026::NAME_HEADER, header_value(name)));
        if method == methods::TOOLS_CALL {
            let specs = tools.lock().get(name).cloned().unwrap_or_default();
            for spec in specs {
                // Absent or null: the header is omitted.
                let Some(text) = spec.value_in(params.get("arguments")) else { continue };
                if let Ok(name) = HeaderName::try_from(spec.header_name()) {
                    headers.push((name, header_value(&text)));
                }
            }
        }
    }
    headers
}

/// The `x-mcp-header` annotations of an upstream's tools, by the upstream's tool name.
pub(crate) type ToolHeaders = Arc<Mutex<HashMap<String, Vec<ParamHeader>>>>;
