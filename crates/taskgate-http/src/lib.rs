//! The Streamable HTTP front door (basic/transports "Streamable HTTP"): the only crate that
//! knows the client side of HTTP (architecture invariant 1).
//!
//! - [`server`]: binds the listener and wires the routes.
//! - [`mcp_endpoint`]: `POST`, `GET` and `DELETE /mcp`.
//! - [`modern`]: MCP 2026-07-28 requests (stateless), served beside sessions on the same endpoint.
//! - [`checks`]: `Origin`, `Content-Type`, `Accept`, `MCP-Protocol-Version`, body limits.
//! - [`cors`]: cross-origin requests from browsers of the allowed origins.
//! - [`peers`]: each source address's share of the listener (connections, unfinished requests).
//! - [`operations`]: `/metrics`, `/healthz`, `/readyz`.
//! - [`admin`]: the operator's view, an API and a live page, on the admin listener.
//! - [`sse`]: outbound SSE bodies with keep-alives.
//! - [`resumable`]: 2025-11-25 reply streams a client can resume with `Last-Event-ID`.
//! - [`metered`]: client requests counted and timed by tenant and method.
//! - [`traced`]: a request's span, its parent the client's (W3C Trace Context).
//! - [`reply`]: turns [`taskgate_core::GatewayError`] into HTTP responses.

pub mod admin;
pub mod checks;
pub mod cors;
pub mod mcp_endpoint;
pub mod metered;
pub mod operations;
pub mod peers;
pub mod reply;
pub mod resumable;
pub mod revision_2026;
pub mod server;
pub mod sse;
pub mod traced;

pub use actix_web::dev::ServerHandle;
pub use server::{serve, serve_on, Listeners, Running};
