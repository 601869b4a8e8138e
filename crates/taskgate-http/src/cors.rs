//! Cross-origin requests from browsers (the Fetch standard's CORS protocol), for the origins of
//! `server.allowed_origins`: a preflight (`OPTIONS`) is answered with the methods and headers MCP
//! uses, and every response to a request from an allowed origin names that origin and exposes
//! the headers a client must read (`Mcp-Session-Id`, `WWW-Authenticate`, `MCP-Protocol-Version`).
//! A request from any other origin gets no CORS header (and, at the MCP endpoint, 403: see
//! [`crate::checks::origin`]).

use actix_web::http::header::{self, HeaderMap, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use taskgate_core::Gateway;

use crate::checks::origin_allowed;

/// The methods of the MCP endpoint.
const ALLOW_METHODS: HeaderValue = HeaderValue::from_static("GET, POST, DELETE, OPTIONS");

/// The request headers a client of either revision sends (basic/transports, basic/authorization):
/// a preflight may ask for these, and for any `Mcp-Param-*` (2026-07-28 tool parameters).
const ALLOW_HEADERS: [&str; 8] = [
    "authorization",
    "content-type",
    "accept",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
    "mcp-method",
    "mcp-name",
];

/// The response headers a browser's script may read.
const EXPOSE_HEADERS: HeaderValue = HeaderValue::from_static("Mcp-Session-Id, WWW-Authenticate, MCP-Protocol-Version");

/// How long a browser may keep a preflight's answer (10 minutes).
const MAX_AGE: HeaderValue = HeaderValue::from_static("600");

/// The origin of a request when it is one `allowed` names.
fn allowed_origin<'a>(headers: &'a HeaderMap, allowed: &[String]) -> Option<&'a HeaderValue> {
    let origin = headers.get(header::ORIGIN)?;
    origin_allowed(origin.to_str().ok()?, allowed).then_some(origin)
}

/// `OPTIONS` at the MCP endpoint: a preflight from an allowed origin gets 204 with what it may
/// send; one from another origin 403 with no CORS header; without `Origin` (not a browser's
/// preflight) 204 with `Allow`.
pub async fn preflight(req: HttpRequest, gateway: web::Data<Gateway>) -> HttpResponse {
    let headers = req.headers();
    if headers.get(header::ORIGIN).is_none() {
        return HttpResponse::NoContent().insert_header((header::ALLOW, ALLOW_METHODS)).finish();
    }
    let Some(origin) = allowed_origin(headers, &gateway.config().server.allowed_origins) else {
        return HttpResponse::build(StatusCode::FORBIDDEN).finish();
    };
    let asked = headers.get(header::ACCESS_CONTROL_REQUEST_HEADERS).and_then(|v| v.to_str().ok()).unwrap_or("");
    let granted: Vec<&str> = asked
        .split(',')
        .map(str::trim)
        .filter(|name| {
            let lower = name.to_ascii_lowercase();
            ALLOW_HEADERS.contains(&lower.as_str()) || lower.starts_with("mcp-param-")
        })
        .collect();
    let mut response = HttpResponse::NoContent();
    response
        .insert_header((header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone()))
        .insert_header((header::ACCESS_CONTROL_ALLOW_METHODS, ALLOW_METHODS))
        .insert_header((header::ACCESS_CONTROL_MAX_AGE, MAX_AGE))
        .insert_header((header::VARY, HeaderValue::from_static("Origin")));
    if !granted.is_empty() {
        if let Ok(value) = HeaderValue::from_str(&granted.join(", ")) {
            response.insert_header((header::ACCESS_CONTROL_ALLOW_HEADERS, value));
        }
    }
    response.finish()
}

/// Adds the CORS headers to a response to a request from `origin`, when it is allowed (every
/// route of the public listener: the MCP endpoint's responses, streams included, and what
/// clients read besides it).
pub fn annotate(origin: &HeaderValue, response: &mut HeaderMap, allowed: &[String]) {
    if !origin.to_str().is_ok_and(|origin| origin_allowed(origin, allowed)) {
        return;
    }
    if response.contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN) {
        return; // a preflight's own answer
    }
    response.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
    response.insert(header::ACCESS_CONTROL_EXPOSE_HEADERS, EXPOSE_HEADERS);
    response.append(header::VARY, HeaderValue::from_static("Origin"));
}
