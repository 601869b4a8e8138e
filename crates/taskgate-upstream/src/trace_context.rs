//! W3C Trace Context across the gateway: what a client sent (`traceparent`, `tracestate`) is
//! the parent of the gateway's spans, and the span of each upstream call is the parent passed
//! to the upstream, in its HTTP headers and in the request's `_meta` (the MCP convention, which
//! also reaches stdio upstreams).
//!
//! Off unless traces are exported: the binary installs a [`Propagator`] (OpenTelemetry's);
//! without one every function here is one atomic load.

use std::sync::OnceLock;

use serde_json::Value;

/// The `traceparent` and `tracestate` of a span.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceHeaders {
    pub traceparent: String,
    pub tracestate: Option<String>,
}

/// What reads and writes trace context for the spans of `tracing`.
pub trait Propagator: Send + Sync {
    /// Makes the remote span `headers` names the parent of `span`.
    fn adopt(&self, span: &tracing::Span, headers: &TraceHeaders);
    /// The trace context of the current span, to pass on.
    fn current(&self) -> Option<TraceHeaders>;
}

static PROPAGATOR: OnceLock<Box<dyn Propagator>> = OnceLock::new();

/// Installs the propagator (once, at start).
pub fn install(propagator: Box<dyn Propagator>) {
    let _ = PROPAGATOR.set(propagator);
}

/// Whether traces are exported (a propagator is installed).
pub fn enabled() -> bool {
    PROPAGATOR.get().is_some()
}

/// Makes the client's span the parent of `span`, when traces are exported.
pub fn adopt(span: &tracing::Span, headers: &TraceHeaders) {
    if let Some(propagator) = PROPAGATOR.get() {
        propagator.adopt(span, headers);
    }
}

/// The current span's trace context, when traces are exported.
pub fn current() -> Option<TraceHeaders> {
    PROPAGATOR.get()?.current()
}

/// The trace context a request's params carry in `_meta`, if any.
pub fn from_meta(params: Option<&Value>) -> Option<TraceHeaders> {
    let meta = params?.get("_meta")?;
    let traceparent = meta.get("traceparent")?.as_str()?;
    valid_traceparent(traceparent).then(|| TraceHeaders {
        traceparent: traceparent.to_owned(),
        tracestate: meta.get("tracestate").and_then(Value::as_str).filter(|s| s.len() <= 512).map(str::to_owned),
    })
}

/// Writes `headers` into params' `_meta` (params made an object when absent).
pub fn into_meta(params: &mut Option<Value>, headers: &TraceHeaders) {
    let params = params.get_or_insert_with(|| Value::Object(Default::default()));
    let Some(object) = params.as_object_mut() else { return };
    let meta = object.entry("_meta").or_insert_with(|| Value::Object(Default::default()));
    let Some(meta) = meta.as_object_mut() else { return };
    meta.insert("traceparent".into(), Value::String(headers.traceparent.clone()));
    match &headers.tracestate {
        Some(state) => meta.insert("tracestate".into(), Value::String(state.clone())),
        None => meta.remove("tracestate"),
    };
}

/// W3C Trace Context "traceparent Header": `00-<32 hex>-<16 hex>-<2 hex>`, ids not all zero.
pub fn valid_traceparent(value: &str) -> bool {
    let parts: Vec<&str> = value.split('-').collect();
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    parts.len() == 4
        && hex(parts[0], 2)
        && parts[0] != "ff"
        && hex(parts[1], 32)
        && parts[1].bytes().any(|b| b != b'0')
        && hex(parts[2], 16)
        && parts[2].bytes().any(|b| b != b'0')
        && hex(parts[3], 2)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_a_well_formed_traceparent_is_taken() {
        assert!(valid_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
        for bad in [
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "garbage",
        ] {
            assert!(!valid_traceparent(bad), "{bad}");
        }
        let params = json!({"_meta": {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tracestate": "a=b"}});
        assert_eq!(from_meta(Some(&params)).unwrap().tracestate.as_deref(), Some("a=b"));
        let mut none = None;
        into_meta(&mut none, &from_meta(Some(&params)).unwrap());
        assert_eq!(none.unwrap()["_meta"]["traceparent"], params["_meta"]["traceparent"]);
    }
}
