//! What the demo keeps of the 2026-07-28 revision: which revisions it serves, its open
//! `subscriptions/listen` streams, the questions and answers of a modern request's run, and
//! the key that seals their state. The behaviour is in `modern.rs` and `modern_input.rs`.

use std::collections::HashMap;

use serde_json::{Map, Value};
use taskgate_protocol::mcp::methods;
use taskgate_protocol::{Message, RequestId};
use tokio::sync::mpsc;

/// Which protocol revisions a demo serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Revisions {
    /// 2025-11-25 (and earlier) only: `initialize` and sessions.
    #[default]
    Legacy,
    /// 2026-07-28 only: stateless requests.
    Modern,
    /// Both, chosen by how the client opens (a dual-era server).
    Both,
}

impl std::str::FromStr for Revisions {
    type Err = String;

    fn from_str(s: &str) -> Result<Revisions, String> {
        match s {
            "2025-11-25" => Ok(Revisions::Legacy),
            "2026-07-28" => Ok(Revisions::Modern),
            "both" => Ok(Revisions::Both),
            other => Err(format!("unknown revision mode {other:?}: use 2025-11-25, 2026-07-28 or both")),
        }
    }
}

/// An open `subscriptions/listen` stream.
pub(crate) struct Listen {
    /// The transport connection it came on (a stdio process, or its own HTTP request).
    pub(crate) origin: u64,
    pub(crate) id: RequestId,
    pub(crate) filter: Value,
    pub(crate) tx: mpsc::Sender<Message>,
}

/// The questions of one run of a modern request, and the answers it has.
pub(crate) struct Round {
    /// Answers the request carries: from its state and its `inputResponses`.
    pub(crate) answers: Map<String, Value>,
    /// The answers the run used, which the next state carries.
    pub(crate) used: Map<String, Value>,
    /// The questions the run needs answered: key → the request (`method`, `params`).
    pub(crate) asked: Map<String, Value>,
    /// How many questions each method asked in this run (the legacy fixtures' keys).
    pub(crate) counts: HashMap<String, usize>,
    /// Whether the legacy fixtures ask on the call's stream instead (a dual-era demo).
    pub(crate) on_stream: bool,
    /// Whether the request may answer `input_required` (tools/call, prompts/get, resources/read).
    pub(crate) may_ask: bool,
}

impl Round {
    pub(crate) fn new(answers: Map<String, Value>, on_stream: bool, method: &str) -> Round {
        let may_ask = [methods::TOOLS_CALL, methods::PROMPTS_GET, methods::RESOURCES_READ].contains(&method);
        Round { answers, used: Map::new(), asked: Map::new(), counts: HashMap::new(), on_stream, may_ask }
    }
}

/// A fresh key for sealing request states.
pub(crate) fn state_key() -> [u8; 32] {
    let mut key = [0u8; 32];
    openssl::rand::rand_bytes(&mut key).expect("the system's random numbers");
    key
}
