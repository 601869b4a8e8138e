//! The gateway's core: its actors and the data they own. This is the only crate that depends
//! on `actix` (architecture invariant 1).
//!
//! - [`gateway`]: [`Gateway`], the handle the front door holds; creates sessions.
//! - [`session`]: [`session::SessionActor`], one per client session.
//! - [`router`]: [`router::Router`], the federated tool catalog and its refreshes.
//! - [`tasks`]: [`tasks::TaskActor`] (one per task), [`tasks::Supervisor`] (expiry sweep), and
//!   the rules for task support, ttl and outcomes.
//! - [`progress`]: [`progress::ProgressActor`], one per live client progress token.
//! - [`catalog`]: the catalog's pure data: naming, collisions, cursor pages.
//! - [`clock`]: injected time.
//! - [`identity`]: [`Identity`], who is calling.
//! - [`error`]: [`GatewayError`] and its one mapping to JSON-RPC codes and HTTP statuses.

pub mod catalog;
pub mod clock;
pub mod error;
mod forwarded_call;
pub mod gateway;
pub mod identity;
pub mod logs;
pub mod metrics;
pub mod offering_names;
pub mod outbound;
pub mod progress;
pub mod retry_relay;
pub mod router;
pub mod session;
mod stream;
mod stream_pool;
pub mod tasks;
pub mod tenants;
pub mod tool_search;

pub use error::GatewayError;
pub use gateway::{resource_metadata_url, server_info, Gateway, SessionHandle};
pub use identity::Identity;
pub use session::TaskMode;
