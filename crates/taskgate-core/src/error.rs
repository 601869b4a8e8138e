//! The gateway's one error type and the one place it becomes a JSON-RPC code and an HTTP
//! status (architecture invariant 4).

use serde_json::{json, Value};
use taskgate_protocol::{codes, ErrorObject};
use taskgate_upstream::UpstreamError;

/// Everything that can go wrong between a client's bytes and an upstream's answer.
#[derive(Debug, Clone, thiserror::Error)]
pub enum GatewayError {
    /// The body is not JSON.
    #[error("Parse error: {0}")]
    Parse(String),
    /// The body is JSON but not one valid JSON-RPC message, or a header is wrong.
    #[error("Invalid Request: {0}")]
    InvalidRequest(String),
    /// A request other than initialize came without `Mcp-Session-Id`.
    #[error("Bad Request: the Mcp-Session-Id header is required; send initialize first to get one")]
    MissingSession,
    /// The session ended or never existed (or belongs to someone else).
    #[error(
        "Session not found: it has ended or never existed; send initialize without Mcp-Session-Id to start a new one"
    )]
    SessionNotFound,
    /// The `Origin` header is not allowed (DNS-rebinding protection).
    #[error("Forbidden: Origin {0:?} is not in server.allowed_origins")]
    OriginNotAllowed(String),
    /// The `Accept` header allows no content type this request can be answered with.
    #[error("Not Acceptable: {0}")]
    NotAcceptable(String),
    /// The `Content-Type` is not `application/json`.
    #[error("Unsupported Media Type: {0}")]
    UnsupportedMediaType(String),
    /// The body did not arrive whole within `server.body_timeout_ms`.
    #[error("Request Timeout: the body did not arrive within {ms} ms (server.body_timeout_ms)")]
    BodyTimeout {
        /// The limit.
        ms: u64,
    },
    /// The body is larger than `server.max_body_bytes`.
    #[error("Payload Too Large: the body exceeds the limit of {limit} bytes (server.max_body_bytes, or the tenant's limits.max_body_bytes)")]
    PayloadTooLarge {
        /// The limit.
        limit: usize,
    },
    /// `MCP-Protocol-Version` names a version the gateway does not speak.
    #[error("Bad Request: unsupported MCP-Protocol-Version {0:?}; supported: 2025-11-25, 2025-06-18, 2025-03-26")]
    UnsupportedProtocolVersion(String),
    /// The HTTP method is not served at this path.
    #[error("Method Not Allowed: {0}")]
    HttpMethodNotAllowed(String),
    /// JSON-RPC method not found.
    #[error("Method not found: {0}")]
    MethodNotFound(String),
    /// JSON-RPC invalid params.
    #[error("{0}")]
    InvalidParams(String),
    /// An upstream failed or answered with an error.
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    /// A JSON-RPC error to return exactly as it is (a task's stored outcome).
    #[error("{0}")]
    Rpc(Box<ErrorObject>),
    /// A bound of the gateway is reached.
    #[error("Overloaded: {0}")]
    Overloaded(String),
    /// No valid credentials: a missing, unknown, malformed or expired bearer token.
    #[error("Unauthorized: {message}")]
    Unauthorized {
        /// Why.
        message: String,
        /// The `WWW-Authenticate` challenge (RFC 6750 section 3; RFC 9728 section 5.1).
        challenge: String,
    },
    /// An `Authorization` header that is not a bearer token (400, RFC 6750 section 3.1
    /// `invalid_request`).
    #[error("Bad Request: {message}")]
    MalformedCredentials {
        /// Why.
        message: String,
        /// The `WWW-Authenticate` challenge.
        challenge: String,
    },
    /// Valid credentials without the scope the request needs (403, RFC 6750 section 3.1
    /// `insufficient_scope`).
    #[error("Forbidden: {message}")]
    Forbidden {
        /// Why.
        message: String,
        /// The `WWW-Authenticate` challenge naming the scope needed.
        challenge: String,
    },
    /// The tenant or principal sends faster than its configured rate.
    #[error("Too Many Requests: {what}; retry after {retry_after_ms} ms")]
    RateLimited {
        /// Which limit, e.g. `tenant "acme" rate (5/s, burst 10)`.
        what: String,
        /// When a request will be admitted again.
        retry_after_ms: u64,
    },
    /// A call of a tool over a rate of `[tenant.tools]` (`rates`, `upstream_rates`).
    #[error("Too Many Requests: {what}; retry after {retry_after_ms} ms")]
    ToolRateLimited {
        /// The tool called (the gateway's name).
        tool: String,
        /// The glob (or `upstream:<name>`) whose rate it is over.
        pattern: String,
        /// Which rate, e.g. `calls of tools matching "search__*" by tenant "acme" (2/s, burst 5)`.
        what: String,
        /// When a call would be admitted again.
        retry_after_ms: u64,
    },
    /// A tenant's cap (concurrent tasks, sessions) is reached; nothing was created.
    #[error("Limit exceeded: {0}")]
    LimitExceeded(String),
    /// A tenant has all the sessions it may open; one may free by `retry_after_ms` (the
    /// longest-idle one's idle timeout), or by a `DELETE`.
    #[error("Limit exceeded: {what}")]
    SessionCap {
        /// Which cap, and what to do.
        what: String,
        /// When one of the tenant's sessions ends unless it is used meanwhile.
        retry_after_ms: u64,
    },
    /// The task store (the embedded database, or Redis) cannot be reached or failed; nothing
    /// was changed, and the request may be retried.
    #[error("Task store unavailable: {0}; retry later")]
    StoreUnavailable(String),
    /// The task store failed inside (a damaged database file, a bug in a backend): this
    /// request fails; others that do not touch what failed go on.
    #[error("Task store failed: {0}")]
    StoreFailed(String),
    /// The gateway is shutting down: a request in flight when its grace ran out.
    #[error("Shutting down: {0}")]
    ShuttingDown(String),
    /// A bug or an impossible state.
    #[error("Internal error: {0}")]
    Internal(String),
    /// 2026-07-28: a standard header is missing, malformed or differs from the body (-32020).
    #[error("Header mismatch: {0}")]
    HeaderMismatch(String),
    /// 2026-07-28: the request needs a client capability it did not declare (-32021).
    #[error("Missing required client capability: {message}")]
    MissingClientCapability {
        /// What needs it.
        message: String,
        /// `data.requiredCapabilities`.
        required: Value,
    },
    /// 2026-07-28: the `_meta` protocol version is not one the gateway implements (-32022).
    #[error("Unsupported protocol version {0:?}; supported: {supported}", supported = taskgate_protocol::revision_2026::ALL_VERSIONS.join(", "))]
    UnsupportedRevision(String),
    /// 2026-07-28: the per-request `_meta` fields are missing or malformed (-32602, HTTP 400).
    #[error("Invalid params: {0}")]
    InvalidMeta(String),
    /// 2026-07-28: the method is not implemented (-32601, HTTP 404).
    #[error("Method not found: {0}")]
    UnknownMethod(String),
    /// `/mcp/<profile>` names no profile of the caller's tenant (HTTP 404).
    #[error("Not Found: the tenant has no profile named {0:?} (its endpoints are /mcp and /mcp/<profile> of its [[tenant.profile]] entries)")]
    UnknownProfile(String),
}

impl GatewayError {
    /// The HTTP status when the error is the whole answer to an HTTP request. Errors that
    /// answer a JSON-RPC request (method, params, upstream) travel in a 200 response.
    pub fn http_status(&self) -> u16 {
        match self {
            GatewayError::Parse(_)
            | GatewayError::InvalidRequest(_)
            | GatewayError::MissingSession
            | GatewayError::UnsupportedProtocolVersion(_)
            | GatewayError::HeaderMismatch(_)
            | GatewayError::MissingClientCapability { .. }
            | GatewayError::UnsupportedRevision(_)
            | GatewayError::InvalidMeta(_) => 400,
            GatewayError::UnknownMethod(_) => 404,
            GatewayError::Unauthorized { .. } => 401,
            GatewayError::MalformedCredentials { .. } => 400,
            GatewayError::Forbidden { .. } => 403,
            GatewayError::OriginNotAllowed(_) => 403,
            GatewayError::SessionNotFound | GatewayError::UnknownProfile(_) => 404,
            GatewayError::HttpMethodNotAllowed(_) => 405,
            GatewayError::NotAcceptable(_) => 406,
            GatewayError::BodyTimeout { .. } => 408,
            GatewayError::PayloadTooLarge { .. } => 413,
            GatewayError::UnsupportedMediaType(_) => 415,
            GatewayError::RateLimited { .. }
            | GatewayError::ToolRateLimited { .. }
            | GatewayError::LimitExceeded(_)
            | GatewayError::SessionCap { .. } => 429,
            GatewayError::Overloaded(_)
            | GatewayError::StoreUnavailable(_)
            | GatewayError::StoreFailed(_)
            | GatewayError::ShuttingDown(_) => 503,
            GatewayError::Internal(_) => 500,
            GatewayError::MethodNotFound(_)
            | GatewayError::InvalidParams(_)
            | GatewayError::Upstream(_)
            | GatewayError::Rpc(_) => 200,
        }
    }

    /// The JSON-RPC error object.
    pub fn error_object(&self) -> ErrorObject {
        let code = match self {
            GatewayError::Parse(_) => codes::PARSE_ERROR,
            GatewayError::MethodNotFound(_) | GatewayError::UnknownMethod(_) => codes::METHOD_NOT_FOUND,
            GatewayError::InvalidParams(_) | GatewayError::InvalidMeta(_) => codes::INVALID_PARAMS,
            GatewayError::HeaderMismatch(_) => codes::HEADER_MISMATCH,
            GatewayError::MissingClientCapability { required, .. } => {
                return ErrorObject::new(codes::MISSING_REQUIRED_CLIENT_CAPABILITY, self.to_string())
                    .with_data(json!({ "requiredCapabilities": required }));
            }
            GatewayError::UnsupportedRevision(requested) => {
                return ErrorObject::new(codes::UNSUPPORTED_PROTOCOL_VERSION, self.to_string()).with_data(
                    json!({ "supported": taskgate_protocol::revision_2026::ALL_VERSIONS, "requested": requested }),
                );
            }
            GatewayError::Internal(_) => codes::INTERNAL_ERROR,
            GatewayError::Overloaded(_) => codes::OVERLOADED,
            GatewayError::ShuttingDown(_) => {
                return ErrorObject::new(codes::OVERLOADED, self.to_string())
                    .with_data(json!({"reason": "shutting_down"}));
            }
            GatewayError::StoreUnavailable(_) | GatewayError::StoreFailed(_) => {
                return ErrorObject::new(codes::OVERLOADED, self.to_string())
                    .with_data(json!({"component": "task_store", "reason": self.reason()}));
            }
            GatewayError::Unauthorized { .. }
            | GatewayError::Forbidden { .. }
            | GatewayError::MalformedCredentials { .. } => codes::UNAUTHORIZED,
            GatewayError::LimitExceeded(_) => codes::LIMIT_EXCEEDED,
            GatewayError::SessionCap { retry_after_ms, .. } => {
                return ErrorObject::new(codes::LIMIT_EXCEEDED, self.to_string())
                    .with_data(json!({"retryAfterMs": retry_after_ms}));
            }
            GatewayError::RateLimited { retry_after_ms, .. } => {
                return ErrorObject::new(codes::RATE_LIMITED, self.to_string())
                    .with_data(json!({"retryAfterMs": retry_after_ms}));
            }
            GatewayError::ToolRateLimited { tool, pattern, retry_after_ms, .. } => {
                return ErrorObject::new(codes::RATE_LIMITED, self.to_string())
                    .with_data(json!({"retryAfterMs": retry_after_ms, "tool": tool, "pattern": pattern}));
            }
            GatewayError::Rpc(error) => return (**error).clone(),
            GatewayError::Upstream(e) => {
                return match e {
                    // The upstream's own error passes through unchanged.
                    UpstreamError::Rpc { error, .. } => (**error).clone(),
                    UpstreamError::Timeout { upstream, .. } => ErrorObject::new(codes::UPSTREAM_TIMEOUT, e.to_string())
                        .with_data(json!({"upstream": upstream, "reason": e.reason()})),
                    UpstreamError::Overloaded { upstream, .. } => ErrorObject::new(codes::OVERLOADED, e.to_string())
                        .with_data(json!({"upstream": upstream, "reason": e.reason()})),
                    UpstreamError::Unavailable { upstream, .. } | UpstreamError::Protocol { upstream, .. } => {
                        ErrorObject::new(codes::UPSTREAM_UNAVAILABLE, e.to_string())
                            .with_data(json!({"upstream": upstream, "reason": e.reason()}))
                    }
                };
            }
            _ => codes::INVALID_REQUEST,
        };
        ErrorObject::new(code, self.to_string())
    }

    /// A low-cardinality label for logs and metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            GatewayError::Parse(_) => "parse_error",
            GatewayError::InvalidRequest(_) => "invalid_request",
            GatewayError::MissingSession => "missing_session",
            GatewayError::SessionNotFound => "session_not_found",
            GatewayError::UnknownProfile(_) => "unknown_profile",
            GatewayError::OriginNotAllowed(_) => "origin_not_allowed",
            GatewayError::NotAcceptable(_) => "not_acceptable",
            GatewayError::UnsupportedMediaType(_) => "unsupported_media_type",
            GatewayError::PayloadTooLarge { .. } => "payload_too_large",
            GatewayError::BodyTimeout { .. } => "body_timeout",
            GatewayError::UnsupportedProtocolVersion(_) => "unsupported_protocol_version",
            GatewayError::HttpMethodNotAllowed(_) => "http_method_not_allowed",
            GatewayError::MethodNotFound(_) => "method_not_found",
            GatewayError::InvalidParams(_) => "invalid_params",
            GatewayError::Upstream(e) => e.reason(),
            GatewayError::Rpc(_) => "task_outcome",
            GatewayError::Overloaded(_) => "overloaded",
            GatewayError::Internal(_) => "internal",
            GatewayError::ShuttingDown(_) => "shutting_down",
            GatewayError::StoreUnavailable(_) => "store_unavailable",
            GatewayError::StoreFailed(_) => "store_failed",
            GatewayError::Unauthorized { .. } => "unauthorized",
            GatewayError::MalformedCredentials { .. } => "malformed_credentials",
            GatewayError::Forbidden { .. } => "forbidden",
            GatewayError::RateLimited { .. } | GatewayError::ToolRateLimited { .. } => "rate_limited",
            GatewayError::LimitExceeded(_) | GatewayError::SessionCap { .. } => "limit_exceeded",
            GatewayError::HeaderMismatch(_) => "header_mismatch",
            GatewayError::MissingClientCapability { .. } => "missing_client_capability",
            GatewayError::UnsupportedRevision(_) => "unsupported_protocol_version",
            GatewayError::InvalidMeta(_) => "invalid_meta",
            GatewayError::UnknownMethod(_) => "method_not_found",
        }
    }
}

/// Whether a JSON-RPC error says the task store is unavailable (a [`GatewayError::StoreUnavailable`]
/// that travelled as a message): the front door answers it with HTTP 503 when it can.
pub fn is_store_unavailable(error: &ErrorObject) -> bool {
    error.code == codes::OVERLOADED
        && error.data.as_ref().and_then(|d| d.get("component")).and_then(|c| c.as_str()) == Some("task_store")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_rpc_errors_pass_through_unchanged() {
        let original = ErrorObject::new(-32000, "boom").with_data(json!({"x": 1}));
        let e = GatewayError::Upstream(UpstreamError::Rpc { upstream: "u".into(), error: Box::new(original.clone()) });
        assert_eq!(e.error_object(), original);
        assert_eq!(e.http_status(), 200);
    }

    #[test]
    fn transport_errors_map_to_statuses_and_codes() {
        let cases = [
            (GatewayError::Parse("x".into()), 400, -32700),
            (GatewayError::InvalidRequest("x".into()), 400, -32600),
            (GatewayError::SessionNotFound, 404, -32600),
            (GatewayError::UnknownProfile("x".into()), 404, -32600),
            (GatewayError::OriginNotAllowed("http://evil".into()), 403, -32600),
            (GatewayError::PayloadTooLarge { limit: 10 }, 413, -32600),
            (GatewayError::BodyTimeout { ms: 10 }, 408, -32600),
            (GatewayError::UnsupportedMediaType("x".into()), 415, -32600),
            (GatewayError::NotAcceptable("x".into()), 406, -32600),
            (GatewayError::MethodNotFound("x".into()), 200, -32601),
            (GatewayError::InvalidParams("x".into()), 200, -32602),
            (GatewayError::Overloaded("x".into()), 503, -32002),
            (GatewayError::StoreUnavailable("redis://127.0.0.1:1: refused".into()), 503, -32002),
            (GatewayError::StoreFailed("tasks.redb is damaged".into()), 503, -32002),
            (GatewayError::Unauthorized { message: "x".into(), challenge: "Bearer".into() }, 401, -32004),
            (GatewayError::Forbidden { message: "x".into(), challenge: "Bearer".into() }, 403, -32004),
            (GatewayError::MalformedCredentials { message: "x".into(), challenge: "Bearer".into() }, 400, -32004),
            (GatewayError::RateLimited { what: "x".into(), retry_after_ms: 5 }, 429, -32005),
            (
                GatewayError::ToolRateLimited {
                    tool: "t".into(),
                    pattern: "*".into(),
                    what: "x".into(),
                    retry_after_ms: 5,
                },
                429,
                -32005,
            ),
            (GatewayError::LimitExceeded("x".into()), 429, -32006),
            (GatewayError::HeaderMismatch("x".into()), 400, -32020),
            (GatewayError::MissingClientCapability { message: "x".into(), required: json!({}) }, 400, -32021),
            (GatewayError::UnsupportedRevision("x".into()), 400, -32022),
            (GatewayError::InvalidMeta("x".into()), 400, -32602),
            (GatewayError::UnknownMethod("x".into()), 404, -32601),
        ];
        let unsupported = GatewayError::UnsupportedRevision("1900-01-01".into()).error_object();
        assert_eq!(
            unsupported.data.unwrap(),
            json!({"supported": ["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"], "requested": "1900-01-01"})
        );
        assert!(is_store_unavailable(&GatewayError::StoreUnavailable("down".into()).error_object()));
        assert!(!is_store_unavailable(&GatewayError::Overloaded("full".into()).error_object()));
        for (e, status, code) in cases {
            assert_eq!((e.http_status(), e.error_object().code), (status, code), "{e}");
        }
        let down =
            GatewayError::Upstream(UpstreamError::Unavailable { upstream: "files".into(), reason: "refused".into() });
        let obj = down.error_object();
        assert_eq!(obj.code, -32001);
        assert!(obj.message.contains("'files'"));
        assert_eq!(obj.data.unwrap()["upstream"], "files");
    }
}
