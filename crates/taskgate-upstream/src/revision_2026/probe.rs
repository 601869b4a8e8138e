//! Which revision an upstream speaks (the `server/discover` probe's verdict), and what a
//! 2026-07-28 upstream's messages are in the 2025-11-25 model the rest of the gateway speaks.

use serde_json::{Map, Value};
use taskgate_protocol::mcp::{self};
use taskgate_protocol::revision_2026::{meta as wmeta, methods as wmethods, PROTOCOL_VERSION};
use taskgate_protocol::{codes, ErrorObject, Message};

/// Which revision an upstream speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Spoken {
    V2025,
    V2026,
}

/// What a `server/discover` probe says about an upstream.
#[derive(Debug)]
pub(crate) enum Verdict {
    /// It speaks 2026-07-28: its `DiscoverResult`.
    V2026(Value),
    /// It answered as a legacy server would: why we think so.
    V2025(String),
}

/// Why a stdio upstream is taken for a legacy server when its probe got no answer in time.
pub(crate) const NO_ANSWER: &str = "server/discover got no answer";

/// Reads a probe's answer (basic/versioning and streamable-http "Backward Compatibility"). `status`
/// is the HTTP status (`None` on stdio), `outcome` the JSON-RPC result or error if the answer
/// carried one. `Err` is no evidence either way (an authorization failure, an overloaded or
/// broken server): nothing is concluded or cached.
pub(crate) fn classify(status: Option<u16>, outcome: Option<Result<Value, ErrorObject>>) -> Result<Verdict, String> {
    if let Some(status) = status {
        // 401/403 say who may call, 408/429/5xx how the server is doing: neither says which
        // revision it speaks.
        if matches!(status, 401 | 403 | 407 | 408 | 429) || status >= 500 {
            // What it says is wrong (a refused credential's reason), when it says.
            return Err(match &outcome {
                Some(Err(e)) => format!(
                    "server/discover answered HTTP {status}; it says: {}",
                    e.message.chars().filter(|c| !c.is_control()).take(300).collect::<String>()
                ),
                _ => format!("server/discover answered HTTP {status}"),
            });
        }
    }
    match outcome {
        Some(Ok(result)) => {
            // A result that is not a `DiscoverResult` (a legacy server that answers any method
            // it does not know with an empty result) is not a recognized modern answer.
            let Some(listed) = result.get("supportedVersions").and_then(Value::as_array) else {
                return Ok(Verdict::V2025("server/discover answered a result without supportedVersions".into()));
            };
            let versions: Vec<&str> = listed.iter().filter_map(Value::as_str).collect();
            if versions.contains(&PROTOCOL_VERSION) {
                Ok(Verdict::V2026(result))
            } else if versions.iter().any(|v| mcp::is_supported_version(v)) {
                Ok(Verdict::V2025(format!("server/discover lists only {versions:?}")))
            } else {
                Err(format!("server/discover lists {versions:?}: no version taskgate speaks"))
            }
        }
        // A recognized modern error: a modern server, which must not be answered by falling
        // back to `initialize`.
        Some(Err(e)) if e.code == codes::UNSUPPORTED_PROTOCOL_VERSION => {
            let supported = e.data.as_ref().and_then(|d| d.get("supported")).cloned().unwrap_or(Value::Null);
            Err(format!("it does not support {PROTOCOL_VERSION} (it supports {supported}) and is not a legacy server"))
        }
        Some(Err(e)) if e.code == codes::HEADER_MISMATCH || e.code == codes::MISSING_REQUIRED_CLIENT_CAPABILITY => {
            Err(format!("it refused server/discover: {} ({})", e.message, e.code))
        }
        Some(Err(e)) => Ok(Verdict::V2025(format!("server/discover answered {} {:?}", e.code, e.message))),
        None => match status {
            Some(status) if status == 200 || (400..500).contains(&status) => {
                Ok(Verdict::V2025(format!("server/discover answered HTTP {status} without a modern error")))
            }
            Some(status) => Err(format!("server/discover answered HTTP {status}")),
            None => Ok(Verdict::V2025(NO_ANSWER.into())),
        },
    }
}

/// Whether a `DiscoverResult` declares the tasks extension (`io.modelcontextprotocol/tasks`).
pub(crate) fn declares_tasks_extension(discovered: &Value) -> bool {
    discovered
        .pointer("/capabilities/extensions")
        .and_then(|e| e.get(taskgate_protocol::revision_2026::TASKS_EXTENSION))
        .is_some()
}

/// The JSON-RPC errors only a modern server sends (basic/versioning "Backward Compatibility": a
/// recognized modern error identifies a modern server).
pub(crate) fn is_2026_error(code: i64) -> bool {
    matches!(
        code,
        codes::UNSUPPORTED_PROTOCOL_VERSION | codes::HEADER_MISMATCH | codes::MISSING_REQUIRED_CLIENT_CAPABILITY
    )
}

/// A notification from a listen stream, as the rest of the gateway expects a GET stream's:
/// without the subscription id; the acknowledgment itself is consumed (`None`).
pub(crate) fn from_listen(message: Message) -> Option<Message> {
    let Message::Notification { method, mut params } = message else { return Some(message) };
    if method == wmethods::SUBSCRIPTIONS_ACKNOWLEDGED {
        return None;
    }
    if let Some(Value::Object(meta)) = params.as_mut().and_then(|p| p.get_mut("_meta")) {
        meta.remove(wmeta::SUBSCRIPTION_ID);
        if meta.is_empty() {
            params.as_mut().and_then(Value::as_object_mut).map(|p| p.remove("_meta"));
        }
    }
    Some(Message::Notification { method, params })
}

/// A modern task's fields as a 2025-11-25 `Task` (basic/utilities/tasks): `ttlMs` is `ttl`,
/// `pollIntervalMs` is `pollInterval`; the inlined `result`, `error` and `inputRequests` stay
/// behind.
pub(crate) fn task_2025(task: &Value) -> Value {
    let mut out = Map::new();
    for (from, to) in [
        ("taskId", "taskId"),
        ("status", "status"),
        ("statusMessage", "statusMessage"),
        ("createdAt", "createdAt"),
        ("lastUpdatedAt", "lastUpdatedAt"),
        ("ttlMs", "ttl"),
        ("pollIntervalMs", "pollInterval"),
    ] {
        if let Some(v) = task.get(from) {
            out.insert(to.into(), v.clone());
        }
    }
    out.entry("ttl").or_insert(Value::Null);
    Value::Object(out)
}
