//! A client request's span, when traces are exported: its parent is the client's span (W3C
//! `traceparent` and `tracestate` headers, else the same in the request's `_meta`), and it
//! names the tool called or the task asked about.

use actix_web::http::header::HeaderMap;
use serde_json::Value;
use taskgate_core::logs::Untrusted;
use taskgate_protocol::mcp::methods;
use taskgate_protocol::Message;
use taskgate_upstream::trace_context::{self, TraceHeaders};

/// Adopts the client's trace context and records the tool or task on `span`.
pub fn request_span(span: &tracing::Span, headers: &HeaderMap, message: &Message) {
    let params = match message {
        Message::Request { params, .. } | Message::Notification { params, .. } => params.as_ref(),
        _ => None,
    };
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let from_headers = header("traceparent").filter(|t| trace_context::valid_traceparent(t)).map(|t| TraceHeaders {
        traceparent: t.to_owned(),
        tracestate: header("tracestate").filter(|s| s.len() <= 512).map(str::to_owned),
    });
    if let Some(trace) = from_headers.or_else(|| trace_context::from_meta(params)) {
        trace_context::adopt(span, &trace);
    }
    let named = |key: &str| params.and_then(|p| p.get(key)).and_then(Value::as_str);
    match message.method() {
        Some(methods::TOOLS_CALL) => {
            if let Some(tool) = named("name") {
                span.record("tool", tracing::field::display(Untrusted(tool)));
            }
        }
        Some(method) if method.starts_with("tasks/") => {
            if let Some(task) = named("taskId") {
                span.record("task", tracing::field::display(Untrusted(task)));
            }
        }
        _ => {}
    }
}
