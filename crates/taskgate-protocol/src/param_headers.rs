//! A tool's `x-mcp-header` annotations (streamable-http "Custom Headers from Tool
//! Parameters", 2026-07-28): the parameters a client also sends as `Mcp-Param-{Name}` headers
//! on `tools/call`, how a value is written there, and the server's check that the headers
//! match the arguments.

use serde_json::Value;

/// An `x-mcp-header` annotation: the header's name part, the parameter's path from the
/// arguments' root, and its type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamHeader {
    /// The name after `Mcp-Param-`, as the schema writes it.
    pub name: String,
    /// The parameter's path from the arguments' root.
    pub path: Vec<String>,
    /// Whether the parameter is an integer (its values are compared as numbers).
    pub integer: bool,
    /// The header's name, lowercased: `mcp-param-<name>`.
    header: String,
}

impl ParamHeader {
    /// The header's name, lowercased: `mcp-param-<name>`.
    pub fn header_name(&self) -> &str {
        &self.header
    }

    /// The value at the annotated path in `arguments` as its header carries it (a string as
    /// it is, a number or boolean as JSON writes it); `None` when it is absent or null, and
    /// the header is omitted.
    pub fn value_in(&self, arguments: Option<&Value>) -> Option<String> {
        let mut value = arguments;
        for step in &self.path {
            value = value.and_then(|v| v.get(step));
        }
        match value? {
            Value::String(s) => Some(s.clone()),
            Value::Bool(b) => Some(b.to_string()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        }
    }
}

/// The `x-mcp-header` annotations of a tool's input schema ("Schema Extension"), or why the
/// definition is invalid (clients MUST leave such a tool out): an annotation off a path of
/// `properties` alone, a name that is not an HTTP field-name token or is used twice
/// (case-insensitively), or a parameter that is not a string, integer or boolean.
pub fn param_headers(schema: Option<&Value>) -> Result<Vec<ParamHeader>, String> {
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
            let integer = match map.get("type").and_then(Value::as_str) {
                Some("string" | "boolean") => false,
                Some("integer") => true,
                other => return Err(format!("x-mcp-header {name:?} is on a parameter of type {other:?}")),
            };
            if out.iter().any(|h| h.name.eq_ignore_ascii_case(name)) {
                return Err(format!("x-mcp-header {name:?} is used twice"));
            }
            let header = format!("mcp-param-{}", name.to_ascii_lowercase());
            out.push(ParamHeader { name: name.to_owned(), path: path.clone(), integer, header });
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

/// Checks a call's `Mcp-Param-*` headers against its arguments ("Server Behavior for Custom
/// Headers" and "Server Validation": servers MUST reject a recognized header with invalid
/// characters, and MUST reject with 400 and -32020 a header that, decoded, does not match the
/// body, one missing while the body has the value, or one sent for an argument the body does
/// not have). `header` gives a header's value as the client meant it (decoded from the Base64
/// sentinel; `Err` when unusable or sent twice), or `None` when it is not sent. Integers are
/// compared as numbers, exactly (`42.0` and `42` are equal; `4.2e1` is not an integer's text).
pub fn check_params(
    specs: &[ParamHeader],
    arguments: Option<&Value>,
    header: impl Fn(&str) -> Option<Result<String, String>>,
) -> Result<(), String> {
    for spec in specs {
        let path = spec.path.join(".");
        match (spec.value_in(arguments), header(spec.header_name())) {
            (_, Some(Err(why))) => return Err(format!("Mcp-Param-{}: {why}", spec.name)),
            (None, None) => {}
            (None, Some(Ok(_))) => {
                return Err(format!("the Mcp-Param-{} header is sent, but the argument {path} has no value", spec.name))
            }
            (Some(_), None) => {
                return Err(format!(
                    "the argument {path} has a value, so the Mcp-Param-{} header is required",
                    spec.name
                ))
            }
            (Some(body), Some(Ok(sent))) => {
                let equal = if spec.integer {
                    integer_text(&body).is_some_and(|b| integer_text(&sent) == Some(b))
                } else {
                    body == sent
                };
                if !equal {
                    return Err(format!("the Mcp-Param-{} header does not match the argument {path}", spec.name));
                }
            }
        }
    }
    Ok(())
}

/// An integer written in decimal, canonically (no sign for zero, no leading zeros): `Some` for
/// an optional `-`, digits and an optional fraction of zeros only.
fn integer_text(text: &str) -> Option<String> {
    let text = text.trim_matches([' ', '\t']);
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    let decimal = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !decimal(whole) || !decimal(fraction) || fraction.bytes().any(|b| b != b'0') {
        return None;
    }
    let whole = whole.trim_start_matches('0');
    Some(match (negative, whole.is_empty()) {
        (_, true) => "0".to_owned(),
        (true, false) => format!("-{whole}"),
        (false, false) => whole.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn annotations_are_read_and_invalid_ones_reject_the_tool() {
        let schema = json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "opts": {"type": "object", "properties": {"dry": {"type": "boolean", "x-mcp-header": "Dry"}}},
            "limit": {"type": "integer", "x-mcp-header": "Limit"},
            "query": {"type": "string"}
        }});
        let specs = param_headers(Some(&schema)).unwrap();
        let names: Vec<&str> = specs.iter().map(ParamHeader::header_name).collect();
        assert_eq!(names, ["mcp-param-region", "mcp-param-dry", "mcp-param-limit"]);
        let args = json!({"region": "us-west1", "opts": {"dry": true}, "limit": 42, "query": "x"});
        assert_eq!(specs[1].value_in(Some(&args)).as_deref(), Some("true"));
        assert_eq!(specs[0].value_in(Some(&json!({"region": null}))), None);
        for bad in [
            json!({"properties": {"n": {"type": "number", "x-mcp-header": "N"}}}),
            json!({"properties": {"a": {"type": "array", "items": {"type": "string", "x-mcp-header": "A"}}}}),
            json!({"properties": {"a": {"type": "string", "x-mcp-header": ""}}}),
            json!({"properties": {"a": {"type": "string", "x-mcp-header": "a b"}}}),
            json!({"properties": {"a": {"type": "string", "x-mcp-header": "X"}, "b": {"type": "string", "x-mcp-header": "x"}}}),
            json!({"oneOf": [{"properties": {"a": {"type": "string", "x-mcp-header": "A"}}}]}),
        ] {
            assert!(param_headers(Some(&bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn headers_must_match_the_arguments_they_repeat() {
        let schema = json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "limit": {"type": "integer", "x-mcp-header": "Limit"}
        }});
        let specs = param_headers(Some(&schema)).unwrap();
        let args = json!({"region": "Hello", "limit": 42});
        let sent = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| Ok(v.to_string()))
        };
        let both = sent(&[("mcp-param-region", "Hello"), ("mcp-param-limit", "42.0")]);
        assert_eq!(check_params(&specs, Some(&args), both), Ok(()));
        // Integers exactly: not through floating point, not in another notation.
        let big = json!({"limit": 9007199254740993_i64});
        let near = sent(&[("mcp-param-limit", "9007199254740992")]);
        assert!(check_params(&specs, Some(&big), near).is_err());
        let exact = sent(&[("mcp-param-limit", "9007199254740993")]);
        assert_eq!(check_params(&specs, Some(&big), exact), Ok(()));
        for other in ["4.2e1", "+42", "inf", "42.5", "0x2a", ""] {
            let limit = |name: &str| (name == "mcp-param-limit").then(|| Ok(other.to_owned()));
            assert!(check_params(&specs[1..], Some(&json!({"limit": 42})), limit).is_err(), "{other}");
        }
        let other = sent(&[("mcp-param-region", "Bye"), ("mcp-param-limit", "42")]);
        assert!(check_params(&specs, Some(&args), other).unwrap_err().contains("does not match"));
        let missing = sent(&[("mcp-param-limit", "42")]);
        assert!(check_params(&specs, Some(&args), missing).unwrap_err().contains("is required"));
        // A value absent or null: the header is not expected, and one sent does not match.
        assert_eq!(check_params(&specs, Some(&json!({"region": null})), sent(&[])), Ok(()));
        let stray = sent(&[("mcp-param-region", "us-west1")]);
        assert!(check_params(&specs, Some(&json!({})), stray).unwrap_err().contains("has no value"));
        let unusable = |_: &str| Some(Err("not valid Base64".to_owned()));
        assert!(check_params(&specs, Some(&args), unusable).unwrap_err().contains("Base64"));
    }
}
