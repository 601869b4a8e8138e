//! JSON-RPC 2.0 error codes, and the ones MCP adds.

/// Invalid JSON was received.
pub const PARSE_ERROR: i64 = -32700;
/// The JSON sent is not a valid JSON-RPC message.
pub const INVALID_REQUEST: i64 = -32600;
/// The method does not exist or is not available.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// Invalid method parameters.
pub const INVALID_PARAMS: i64 = -32602;
/// Internal JSON-RPC error.
pub const INTERNAL_ERROR: i64 = -32603;
/// MCP: the request needs a URL-mode elicitation first.
pub const URL_ELICITATION_REQUIRED: i64 = -32042;
/// Implementation-defined server error: an upstream could not be reached or misbehaved.
pub const UPSTREAM_UNAVAILABLE: i64 = -32001;
/// Implementation-defined server error: the gateway is at a limit (queue full, process cap).
pub const OVERLOADED: i64 = -32002;
/// Implementation-defined server error: an upstream did not answer in time.
pub const UPSTREAM_TIMEOUT: i64 = -32003;
/// Implementation-defined server error: the request carries no valid credentials.
pub const UNAUTHORIZED: i64 = -32004;
/// Implementation-defined server error: the tenant's or principal's request rate is exceeded.
pub const RATE_LIMITED: i64 = -32005;
/// Implementation-defined server error: a tenant's cap (concurrent tasks, sessions) is reached.
pub const LIMIT_EXCEEDED: i64 = -32006;
/// MCP 2026-07-28 (basic "Error Codes"): HTTP headers do not match the body, or a required
/// header is missing or malformed.
pub const HEADER_MISMATCH: i64 = -32020;
/// MCP 2026-07-28: the request needs a client capability the client did not declare.
pub const MISSING_REQUIRED_CLIENT_CAPABILITY: i64 = -32021;
/// MCP 2026-07-28: the request's protocol version is not one the server implements.
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
