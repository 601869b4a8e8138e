//! MCP 2026-07-28 toward an upstream: the era probe, and the translation that lets the rest of
//! the gateway keep speaking one model (2025-11-25's shapes) to a modern upstream.
//!
//! - Every request is stateless: `_meta` carries the version, the capabilities the gateway may
//!   relay for its client, and its client info; over HTTP the standard headers go with it
//!   (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`, `Mcp-Param-*`).
//! - An `input_required` result (basic/patterns/mrtr) becomes server-to-client requests, sent
//!   the way a legacy upstream's would be (on the call's stream); their answers go back in the
//!   retry, with the upstream's `requestState` echoed.
//! - A tasks-extension upstream's task (`resultType: "task"`) is presented as a 2025-11-25
//!   native task: `tasks/get` is translated, `tasks/result` polls until the task is terminal
//!   (relaying its `inputRequests` and answering them with `tasks/update`), `tasks/cancel`
//!   passes on.
//! - Cancellation closes the request's stream (HTTP) or sends `notifications/cancelled`
//!   (stdio); `resources/subscribe` and list changes become a `subscriptions/listen` filter;
//!   `logging/setLevel` becomes each request's `logLevel`.
//!
//! - [`revision`]: the probe's verdict; a 2026-07-28 message in the 2025-11-25 model;
//! - [`headers`]: the standard headers of a request over HTTP;
//! - [`state`]: what a session with a modern upstream keeps;
//! - [`exchange`]: its requests, from the core's call to the outcome;
//! - [`input`]: its input requests, sent toward the client, and their answers.

mod exchange;
mod headers;
mod input;
mod probe;
mod state;

pub(crate) use exchange::Revision2026;
pub(crate) use headers::{ToolHeaders, METHOD_HEADER, NAME_HEADER};
pub(crate) use probe::{classify, declares_tasks_extension, from_listen, is_2026_error, Spoken, Verdict, NO_ANSWER};
pub(crate) use state::State2026;

#[cfg(test)]
mod tests;
