//! Wire types for taskgate: JSON-RPC 2.0 and the parts of MCP revision 2025-11-25 the gateway
//! reads or writes. This crate does no I/O (architecture invariant 1).
//!
//! - [`jsonrpc`]: the envelope (requests, notifications, responses, errors) and its parser.
//! - [`front`]: the front door's strict reading of a client's message (no key twice), with the
//!   2026-07-28 per-request fields and a call's arguments kept apart as they are read.
//! - [`codes`]: JSON-RPC and MCP error codes.
//! - [`mcp`]: method names, protocol versions, `_meta` keys, capabilities and typed views of the
//!   MCP messages the gateway inspects (`initialize`, `Tool`, `tools/call`, tasks).
//! - [`method`]: the table of every method a client may send, with what the gateway needs to
//!   know of each.
//! - [`revision_2026`]: MCP 2026-07-28 and the tasks extension: `_meta` fields, names, header values.
//! - [`pass_through`]: upstream results passed through as the text they came as ([`pass_through::Payload`]).
//! - [`sse`]: Server-Sent Events framing, both directions.
//! - [`tasks`]: task statuses, the transition rule, the `Task` object, timestamps.
//!
//! Messages pass through the gateway as [`serde_json::Value`]: typed views read what the gateway
//! needs and everything else (unknown fields, `_meta` keys) survives untouched (invariant 5).

pub mod codes;
pub mod front;
pub mod jsonrpc;
pub mod mcp;
pub mod method;
pub mod param_headers;
pub mod pass_through;
pub mod revision_2026;
pub mod sse;
mod strict;
pub mod tasks;

pub use jsonrpc::{ErrorObject, Message, MessageError, RequestId};
pub use pass_through::{Payload, RawArguments, RawResult, Reply};
