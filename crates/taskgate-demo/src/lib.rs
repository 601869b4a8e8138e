//! A real MCP server with demo tools, served over Streamable HTTP ([`http`]) or stdio
//! ([`stdio`]). `taskgate demo` puts it behind the gateway, and the integration tests use it as
//! their upstream, so what a newcomer sees is what the tests check.
//!
//! Tools (`tools`): `echo`, `add` (fast); `slow` (sleeps, reports progress); `wait` (blocks
//! until a test releases a gate or the request is cancelled); `fail` (`isError: true`);
//! `error` (a JSON-RPC error); `toggle_extra` (adds or removes the `extra` tool and announces
//! `notifications/tools/list_changed`); `touch` (bumps the subscribable resource
//! `demo://counter`); `toggle_prompt` (adds or removes the prompt `extra`); `toggle_resource` (adds or removes the
//! resource `demo://extra`). Resources, prompts, completion and logging: [`offerings`].

mod conformance;
mod conformance_tools;
pub mod http;
mod modern;
mod modern_fixtures;
mod modern_http;
mod modern_input;
mod modern_state;
mod offerings;
mod server;
mod sse_body;
pub mod stdio;
mod tasks;
mod tools;

pub use modern_state::Revisions;
pub use server::{DemoServer, DemoStats};
