//! [`State2026`]: what a session with a 2026-07-28 upstream keeps: the `_meta` of every
//! request, the requests in flight, input requests awaiting the client's answers, the upstream's
//! at-once answers to task-augmented calls, the listen stream's filter.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::{json, Map, Value};
use taskgate_protocol::mcp;
use taskgate_protocol::revision_2026::{meta as wmeta, methods as wmethods, PROTOCOL_VERSION, TASKS_EXTENSION};
use taskgate_protocol::{ErrorObject, Message, RequestId};
use tokio::sync::{oneshot, watch, Notify};

use super::headers::ToolHeaders;
use crate::UpstreamError;

/// Most input requests in one `input_required` result.
pub(super) const MAX_INPUT_REQUESTS: usize = 64;
/// Most upstream tasks one session remembers (input keys already relayed; results of calls
/// the upstream completed at once).
pub(super) const MAX_REMEMBERED: usize = 4096;
/// The least a `tasks/result` waits between two polls of a modern upstream's task.
pub(super) const MIN_POLL: Duration = Duration::from_millis(50);

/// A client's capabilities as a modern request declares them: the legacy `tasks` capability
/// has no meaning there (the tasks extension replaces it).
fn capabilities_2026(capabilities: &Value) -> Value {
    let mut caps = match capabilities {
        Value::Object(m) => m.clone(),
        _ => Map::new(),
    };
    caps.remove("tasks");
    Value::Object(caps)
}

/// A modern upstream's capabilities as the rest of the gateway reads them: the tasks
/// extension is 2025-11-25's `tasks.requests.tools.call`.
fn capabilities_2025(discovered: &Value, tasks_ext: bool) -> Value {
    let mut caps = discovered.get("capabilities").cloned().unwrap_or_else(|| json!({}));
    if tasks_ext {
        caps["tasks"] = json!({"cancel": {}, "requests": {"tools": {"call": {}}}});
    }
    caps
}

/// The requests in flight that can be cancelled, by the id the rest of the gateway knows.
pub(super) struct InFlight {
    pub(super) cancel: oneshot::Sender<()>,
    /// The id of its current round at the upstream (a retry has a new one).
    pub(super) round: Arc<Mutex<RequestId>>,
    /// The upstream task it follows, once the upstream made one: cancelling the request
    /// cancels that task.
    pub(super) following: Arc<Mutex<Option<String>>>,
}

/// What a session with a modern upstream keeps.
pub(crate) struct State2026 {
    pub(super) upstream: String,
    pub(super) http: bool,
    /// `_meta` of every request: version, the capabilities relayed for this client, its info.
    pub(super) meta: Map<String, Value>,
    /// Whether the upstream declared the tasks extension.
    pub(super) tasks_ext: bool,
    /// The upstream's capabilities, in the 2025-11-25 shape.
    pub(crate) capabilities: Value,
    pub(super) log_level: Mutex<Option<String>>,
    pub(super) subscriptions: Mutex<BTreeSet<String>>,
    /// What the listen stream should ask for (`None`: nothing, no stream).
    pub(crate) filter: watch::Sender<Option<Value>>,
    /// Input requests sent toward the client, by the id they were given, awaiting answers.
    pub(super) pending: Mutex<HashMap<RequestId, oneshot::Sender<Message>>>,
    pub(super) in_flight: Mutex<HashMap<RequestId, InFlight>>,
    /// Input request keys of an upstream task already relayed to the client.
    pub(super) asked: Mutex<HashMap<String, HashSet<String>>>,
    /// Raised when the client answers one of a task's input requests (poll again at once).
    pub(super) answered: Notify,
    pub(super) tool_headers: ToolHeaders,
}

impl State2026 {
    pub(crate) fn new(
        upstream: &str,
        http: bool,
        identity: &crate::ClientIdentity,
        discovered: &Value,
        tool_headers: ToolHeaders,
    ) -> State2026 {
        let tasks_ext = super::declares_tasks_extension(discovered);
        let mut meta = Map::new();
        meta.insert(wmeta::PROTOCOL_VERSION.into(), Value::from(PROTOCOL_VERSION));
        meta.insert(wmeta::CLIENT_CAPABILITIES.into(), capabilities_2026(&identity.capabilities));
        meta.insert(wmeta::CLIENT_INFO.into(), identity.client_info.clone());
        let capabilities = capabilities_2025(discovered, tasks_ext);
        let state = State2026 {
            upstream: upstream.to_owned(),
            http,
            meta,
            tasks_ext,
            capabilities,
            log_level: Mutex::new(None),
            subscriptions: Mutex::new(BTreeSet::new()),
            filter: watch::channel(None).0,
            pending: Mutex::default(),
            in_flight: Mutex::default(),
            asked: Mutex::default(),
            answered: Notify::new(),
            tool_headers,
        };
        state.refilter();
        state
    }

    /// The listen filter from the list changes the upstream announces and the resources this
    /// session subscribed to.
    pub(super) fn refilter(&self) {
        let caps = &self.capabilities;
        let mut filter = Map::new();
        for (kind, field) in
            [("tools", "toolsListChanged"), ("prompts", "promptsListChanged"), ("resources", "resourcesListChanged")]
        {
            if caps.get(kind).and_then(|c| c.get("listChanged")) == Some(&Value::Bool(true)) {
                filter.insert(field.into(), Value::Bool(true));
            }
        }
        let subscriptions = self.subscriptions.lock();
        if !subscriptions.is_empty() {
            filter.insert("resourceSubscriptions".into(), subscriptions.iter().cloned().collect());
        }
        let wanted = (!filter.is_empty()).then(|| Value::Object(filter));
        self.filter.send_if_modified(|current| {
            let changed = *current != wanted;
            *current = wanted.clone();
            changed
        });
    }

    /// `params` with this session's `_meta` (the tasks extension declared when `tasks`).
    pub(crate) fn stamp(&self, params: &mut Value, tasks: bool) {
        if !params.is_object() {
            *params = json!({});
        }
        let meta = params.as_object_mut().expect("an object").entry("_meta").or_insert_with(|| json!({}));
        if !meta.is_object() {
            *meta = json!({});
        }
        let meta = meta.as_object_mut().expect("an object");
        // The legacy task's related-task tag names a task of the gateway's, meaningless upstream.
        meta.remove(mcp::meta::RELATED_TASK);
        for (k, v) in &self.meta {
            meta.insert(k.clone(), v.clone());
        }
        if tasks {
            let caps = meta.get_mut(wmeta::CLIENT_CAPABILITIES).expect("just set");
            if !caps.get("extensions").is_some_and(Value::is_object) {
                caps["extensions"] = json!({});
            }
            caps["extensions"][TASKS_EXTENSION] = json!({});
        }
        if let Some(level) = self.log_level.lock().clone() {
            meta.insert(wmeta::LOG_LEVEL.into(), Value::from(level));
        }
    }

    /// A request for a listen stream with `filter`.
    pub(crate) fn listen_request(self: &Arc<Self>, filter: Value, id: RequestId) -> Message {
        let mut params = json!({ "notifications": filter });
        self.stamp(&mut params, false);
        Message::request(id, wmethods::SUBSCRIPTIONS_LISTEN, Some(params))
    }

    /// Whether `id` names an input request of this session's waiting for the client's answer.
    pub(crate) fn is_asking(&self, id: &RequestId) -> bool {
        self.pending.lock().contains_key(id)
    }

    /// The client's answer to an input request this session sent toward it: `true` when it was
    /// one.
    pub(crate) fn answer(&self, response: Message) -> bool {
        let Some(id) = response.id() else { return false };
        match self.pending.lock().remove(id) {
            Some(waiter) => {
                let _ = waiter.send(response);
                true
            }
            None => false,
        }
    }

    pub(super) fn protocol(&self, reason: impl Into<String>) -> UpstreamError {
        UpstreamError::Protocol { upstream: self.upstream.clone(), reason: reason.into() }
    }

    pub(super) fn rpc(&self, error: ErrorObject) -> UpstreamError {
        UpstreamError::Rpc { upstream: self.upstream.clone(), error: Box::new(error) }
    }

    /// Whether `key` of `task_id` is new (and now remembered as relayed).
    pub(super) fn first_ask(&self, task_id: &str, key: &str) -> bool {
        let mut asked = self.asked.lock();
        if !asked.contains_key(task_id) && asked.len() >= MAX_REMEMBERED {
            // Forget an arbitrary old task: at worst one of its questions is asked twice,
            // and the upstream ignores the second answer (ext-tasks "Task Update Requests").
            if let Some(old) = asked.keys().next().cloned() {
                asked.remove(&old);
            }
        }
        let keys = asked.entry(task_id.to_owned()).or_default();
        keys.len() < MAX_REMEMBERED && keys.insert(key.to_owned())
    }

    pub(super) fn forget_task(&self, task_id: &str) {
        self.asked.lock().remove(task_id);
    }
}
