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

/// An `x-mcp-header` annotation of a tool's parameter: the header's name part and the
/// parameter's path from the arguments' root.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ParamHeader {
    name: HeaderName,
    path: Vec<String>,
}

/// The `x-mcp-header` annotations of a tool's input schema (streamable-http "Schema
/// Extension"), or why the tool definition is invalid and MUST be left out of the listing.
pub(crate) fn param_headers(schema: Option<&Value>) -> Result<Vec<ParamHeader>, String> {
    fn walk(node: &Value, path: &mut Vec<String>, out: &mut Vec<ParamHeader>, reachable: bool) -> Result<(), String> {
        let Value::Object(map) = node else { return Ok(()) };
        if let Some(header) = map.get("x-mcp-header") {
            let name = header.as_str().ok_or("an x-mcp-header value is not a string")?;
            if !reachable || path.is_empty() {
                return Err(format!("x-mcp-header {name:?} is not on a property reachable through properties alone"));
            }
            let tchar = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
            if name.is_empty() || !name.chars().all(tchar) {
                return Err(format!("x-mcp-header {name:?} is not an HTTP field-name token"));
            }
            match map.get("type").and_then(Value::as_str) {
                Some("string" | "integer" | "boolean") => {}
                other => return Err(format!("x-mcp-header {name:?} is on a parameter of type {other:?}")),
            }
            if out.iter().any(|h| h.name.as_str().eq_ignore_ascii_case(&format!("mcp-param-{name}"))) {
                return Err(format!("x-mcp-header {name:?} is used twice"));
            }
            let name = HeaderName::try_from(format!("mcp-param-{name}")).map_err(|e| e.to_string())?;
            out.push(ParamHeader { name, path: path.clone() });
        }
        for (key, child) in map {
            match key.as_str() {
                "properties" => {
                    if let Value::Object(props) = child {
                        for (prop, schema) in props {
                            path.push(prop.clone());
                            walk(schema, path, out, reachable)?;
                            path.pop();
                        }
                    }
                }
                "x-mcp-header" | "type" | "required" | "description" | "title" | "enum" | "const" | "default" => {}
                // Anything under another keyword (items, oneOf, $ref, if…) is not statically
                // reachable: an annotation there makes the definition invalid.
                _ => match child {
                    Value::Array(items) => {
                        for item in items {
                            walk(item, path, out, false)?;
                        }
                    }
                    other => walk(other, path, out, false)?,
                },
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    if let Some(schema) = schema {
        walk(schema, &mut Vec::new(), &mut out, true)?;
    }
    Ok(out)
}

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
                let mut value = params.get("arguments");
                for step in &spec.path {
                    value = value.and_then(|v| v.get(step));
                }
                let text = match value {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Bool(b)) => b.to_string(),
                    Some(Value::Number(n)) if n.is_i64() || n.is_u64() => n.to_string(),
                    _ => continue, // absent or null: the header is omitted
                };
                headers.push((spec.name.clone(), header_value(&text)));
            }
        }
    }
    headers
}

/// The `x-mcp-header` annotations of an upstream's tools, by the upstream's tool name.
pub(crate) type ToolHeaders = Arc<Mutex<HashMap<String, Vec<ParamHeader>>>>;
