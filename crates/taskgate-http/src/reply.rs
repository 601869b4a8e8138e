//! HTTP responses for errors and JSON-RPC messages. The status and code come from
//! [`GatewayError::http_status`] and [`GatewayError::error_object`]: one mapping for all.

use actix_web::http::StatusCode;
use actix_web::HttpResponse;
use taskgate_core::GatewayError;
use taskgate_protocol::{Message, RequestId};

/// An error as the whole HTTP answer: its status, and a JSON-RPC error body.
pub fn error(e: &GatewayError, id: Option<RequestId>) -> HttpResponse {
    let status = StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if let Some(suppressed) = taskgate_core::logs::limiter().allow("request_refused") {
        let error = e.to_string();
        tracing::debug!(status = status.as_u16(), reason = e.reason(), error = %taskgate_core::logs::Untrusted(&error), suppressed, "request refused");
    }
    let mut response = HttpResponse::build(status);
    if status == StatusCode::METHOD_NOT_ALLOWED {
        response.insert_header(("Allow", "GET, POST, DELETE"));
    }
    if status == StatusCode::REQUEST_TIMEOUT {
        // The rest of a trickled body never gets read: the connection closes.
        response.force_close();
    }
    match e {
        GatewayError::Overloaded(_) | GatewayError::StoreUnavailable(_) | GatewayError::StoreFailed(_) => {
            response.insert_header(("Retry-After", "1"));
        }
        // RFC 9110 "Retry-After": whole seconds, rounded up so a client that obeys it is admitted.
        GatewayError::RateLimited { retry_after_ms, .. }
        | GatewayError::ToolRateLimited { retry_after_ms, .. }
        | GatewayError::SessionCap { retry_after_ms, .. } => {
            response.insert_header(("Retry-After", retry_after_ms.div_ceil(1000).max(1).to_string()));
        }
        // RFC 6750 section 3: a 401 or 403 to a bearer-token request names the scheme, and the
        // error when credentials were sent; RFC 9728 section 5.1: the resource metadata.
        GatewayError::Unauthorized { challenge, .. }
        | GatewayError::Forbidden { challenge, .. }
        | GatewayError::MalformedCredentials { challenge, .. } => {
            response.insert_header(("WWW-Authenticate", challenge.as_str()));
        }
        _ => {}
    }
    response.content_type("application/json").body(Message::error(id, e.error_object()).to_json())
}

/// A JSON-RPC message as an `application/json` response: 200, except an error saying the task
/// store is unavailable, which is a 503 with Retry-After (load balancers and clients see the
/// outage; the body is the same JSON-RPC error).
pub fn json(message: &Message) -> HttpResponse {
    let mut response = match message {
        Message::Error { error, .. } if taskgate_core::error::is_store_unavailable(error) => {
            let mut unavailable = HttpResponse::ServiceUnavailable();
            unavailable.insert_header(("Retry-After", "1"));
            unavailable
        }
        _ => HttpResponse::Ok(),
    };
    let mut response = response.content_type("application/json").body(message.to_json());
    if matches!(message, Message::Error { .. }) {
        response.extensions_mut().insert(crate::metered::RpcError);
    }
    response
}

/// A serialised response as an `application/json` response, with the status [`json`] gives.
pub fn frame(frame: taskgate_core::outbound::Frame) -> HttpResponse {
    let mut response = if frame.store_unavailable {
        let mut unavailable = HttpResponse::ServiceUnavailable();
        unavailable.insert_header(("Retry-After", "1"));
        unavailable
    } else {
        HttpResponse::Ok()
    };
    let mut response = response.content_type("application/json").body(frame.json);
    if frame.error {
        response.extensions_mut().insert(crate::metered::RpcError);
    }
    response
}
