//! The demo's resources, prompts, completion and logging (server/resources, server/prompts,
//! server/utilities/completion, server/utilities/logging), so that the gateway's pass-through
//! of each is tested against a real server.
//!
//! Resources: `demo://readme` (text), `demo://counter` (subscribable: the `touch` tool bumps it
//! and notifies subscribers), `demo://colors` (JSON), listed two per page with long cursors; the template
//! `demo://echo/{text}`. Prompts: `greet` (argument `name`, required) and `summarize` (embeds
//! `demo://readme`). Completion: `greet`'s `name`, the template's `text`.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;
use serde_json::{json, Value};
use taskgate_protocol::ErrorObject;

/// Resources listed per `resources/list` page (small, so cursors are exercised).
const PAGE: usize = 2;
const RESOURCES: [(&str, &str, &str); 3] = [
    ("demo://readme", "readme", "text/plain"),
    ("demo://counter", "counter", "text/plain"),
    ("demo://colors", "colors", "application/json"),
];
/// RFC 5424 severities, least severe first (server/utilities/logging "Log Levels").
pub(crate) const LEVELS: [&str; 8] = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"];
const NAMES: [&str; 4] = ["alice", "bob", "carol", "carlos"];
const WORDS: [&str; 3] = ["hello", "help", "world"];

/// Per-server state of the offerings.
#[derive(Default)]
pub(crate) struct Offerings {
    counter: AtomicU64,
    extra_prompt: AtomicBool,
    extra_resource: AtomicBool,
    /// (connection, uri) subscribed.
    subscriptions: Mutex<HashSet<(u64, String)>>,
    /// The minimum level per connection (absent: everything is sent).
    levels: Mutex<std::collections::HashMap<u64, usize>>,
    /// Whether the conformance suite's resources, prompts and completions are served too.
    conformance: bool,
}

/// The capabilities that go with them.
pub(crate) fn capabilities() -> Value {
    json!({
        "resources": {"subscribe": true, "listChanged": true},
        "prompts": {"listChanged": true},
        "completions": {},
        "logging": {},
    })
}

fn not_found(uri: &str) -> ErrorObject {
    // server/resources "Error Handling": -32002 for a resource that is not found.
    ErrorObject { code: -32002, message: "Resource not found".into(), data: Some(json!({ "uri": uri })) }
}

fn string_param<'a>(params: &'a Value, key: &str) -> Result<&'a str, ErrorObject> {
    params
        .get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| ErrorObject::invalid_params(format!("\"{key}\" must be a string")))
}

fn page_of(params: &Value) -> Result<usize, ErrorObject> {
    match params.get("cursor") {
        None | Some(Value::Null) => Ok(0),
        Some(Value::String(c)) => c
            .strip_prefix("page-")
            .and_then(|rest| rest.split('.').next())
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| ErrorObject::invalid_params(format!("Invalid cursor: {c}"))),
        Some(_) => Err(ErrorObject::invalid_params("cursor must be a string")),
    }
}

impl Offerings {
    pub(crate) fn with_conformance() -> Offerings {
        Offerings { conformance: true, ..Offerings::default() }
    }

    /// (uri, name, mimeType, description) of every listed resource.
    fn resources(&self) -> Vec<(&'static str, &'static str, &'static str, &'static str)> {
        let own = RESOURCES.iter().map(|(uri, name, mime)| (*uri, *name, *mime, "A demo resource."));
        let extra = [("demo://extra", "extra", "text/plain", "Present while toggle_resource has added it.")]
            .into_iter()
            .filter(|_| self.extra_resource.load(Ordering::SeqCst));
        let conformance = crate::conformance::RESOURCES.iter().copied().filter(|_| self.conformance);
        own.chain(extra).chain(conformance).collect()
    }

    pub(crate) fn list_resources(&self, params: &Value) -> Result<Value, ErrorObject> {
        let page = page_of(params)?;
        let all = self.resources();
        let resources: Vec<Value> = all
            .iter()
            .skip(page * PAGE)
            .take(PAGE)
            .map(|(uri, name, mime, description)| json!({"uri": uri, "name": name, "mimeType": mime, "description": description}))
            .collect();
        let mut result = json!({ "resources": resources });
        if (page + 1) * PAGE < all.len() {
            // Long and opaque, as page tokens of many servers are (longer than a client may
            // send back inside the gateway's own cursor).
            result["nextCursor"] = json!(format!("page-{}.{}", page + 1, "z".repeat(300)));
        }
        Ok(result)
    }

    pub(crate) fn list_templates(&self) -> Value {
        let mut templates = vec![json!({
            "uriTemplate": "demo://echo/{text}", "name": "echo", "description": "Reads back the text in its URI.",
            "mimeType": "text/plain"
        })];
        if self.conformance {
            templates.extend(crate::conformance::templates());
        }
        json!({ "resourceTemplates": templates })
    }

    pub(crate) fn read(&self, params: &Value) -> Result<Value, ErrorObject> {
        let uri = string_param(params, "uri")?;
        if let Some(read) = crate::conformance::read(uri).filter(|_| self.conformance) {
            return Ok(read);
        }
        let text = match uri {
            "demo://readme" => "taskgate demo upstream: tools, resources and prompts.".to_owned(),
            "demo://counter" => self.counter.load(Ordering::SeqCst).to_string(),
            "demo://colors" => json!(["red", "green", "blue"]).to_string(),
            other => match other.strip_prefix("demo://echo/") {
                Some(text) => text.to_owned(),
                None => return Err(not_found(other)),
            },
        };
        let mime = if uri == "demo://colors" { "application/json" } else { "text/plain" };
        Ok(json!({"contents": [{"uri": uri, "mimeType": mime, "text": text}]}))
    }

    pub(crate) fn subscribe(&self, connection: u64, params: &Value, on: bool) -> Result<Value, ErrorObject> {
        let uri = string_param(params, "uri")?;
        if !self.resources().iter().any(|(u, _, _, _)| *u == uri) {
            return Err(not_found(uri));
        }
        let mut subscriptions = self.subscriptions.lock();
        if on {
            subscriptions.insert((connection, uri.to_owned()));
        } else {
            subscriptions.remove(&(connection, uri.to_owned()));
        }
        Ok(json!({}))
    }

    /// Bumps the counter; returns the connections subscribed to it.
    pub(crate) fn touch(&self) -> (u64, Vec<u64>) {
        let now = self.counter.fetch_add(1, Ordering::SeqCst) + 1;
        let subscribed =
            self.subscriptions.lock().iter().filter(|(_, u)| u == "demo://counter").map(|(c, _)| *c).collect();
        (now, subscribed)
    }

    /// Adds or removes the prompt `extra`; true when it is there now.
    /// Adds or removes the resource `demo://extra`; whether it is there now.
    pub(crate) fn toggle_resource(&self) -> bool {
        !self.extra_resource.fetch_xor(true, Ordering::SeqCst)
    }

    pub(crate) fn toggle_prompt(&self) -> bool {
        !self.extra_prompt.fetch_xor(true, Ordering::SeqCst)
    }

    /// The prompts (with `extra` while `toggle_prompt` has added it).
    pub(crate) fn list_prompts(&self) -> Value {
        let extra = self.extra_prompt.load(Ordering::SeqCst);
        let mut prompts = vec![
            json!({"name": "greet", "description": "A greeting for someone.",
             "arguments": [{"name": "name", "description": "Who to greet", "required": true}]}),
            json!({"name": "summarize", "description": "Summarise the readme."}),
        ];
        if extra {
            prompts.push(json!({"name": "extra", "description": "Present while toggle_prompt has added it."}));
        }
        if self.conformance {
            prompts.extend(crate::conformance::prompts());
        }
        json!({ "prompts": prompts })
    }

    pub(crate) fn get_prompt(&self, params: &Value) -> Result<Value, ErrorObject> {
        let name = string_param(params, "name")?;
        let args = params.get("arguments").cloned().unwrap_or_else(|| json!({}));
        if let Some(got) = crate::conformance::get_prompt(name, &args).filter(|_| self.conformance) {
            return got;
        }
        match name {
            "greet" => {
                let who = args
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| ErrorObject::invalid_params("prompt greet needs the argument \"name\""))?;
                Ok(json!({"description": "A greeting", "messages": [
                    {"role": "user", "content": {"type": "text", "text": format!("Say hello to {who}.")}}
                ]}))
            }
            "summarize" => Ok(json!({"messages": [
                {"role": "user", "content": {"type": "resource", "resource": {
                    "uri": "demo://readme", "mimeType": "text/plain",
                    "text": "taskgate demo upstream: tools, resources and prompts."}}},
                {"role": "user", "content": {"type": "text", "text": "Summarise the resource above."}}
            ]})),
            // server/prompts "Error Handling": an invalid prompt name is -32602.
            other => Err(ErrorObject::invalid_params(format!("Unknown prompt: {other}"))),
        }
    }

    pub(crate) fn complete(&self, params: &Value) -> Result<Value, ErrorObject> {
        let reference = params.get("ref").ok_or_else(|| ErrorObject::invalid_params("completion needs \"ref\""))?;
        let value = params.pointer("/argument/value").and_then(Value::as_str).unwrap_or_default();
        let argument = params.pointer("/argument/name").and_then(Value::as_str).unwrap_or_default();
        let conformance = crate::conformance::completions(reference, argument).filter(|_| self.conformance);
        let candidates: &[&str] = match (reference.get("type").and_then(Value::as_str), argument) {
            (Some("ref/prompt"), _) if conformance.is_some() => conformance.unwrap_or_default(),
            (Some("ref/prompt"), "name") if reference.get("name") == Some(&json!("greet")) => &NAMES,
            (Some("ref/resource"), "text") if reference.get("uri") == Some(&json!("demo://echo/{text}")) => &WORDS,
            (Some("ref/prompt" | "ref/resource"), _) => &[],
            _ => return Err(ErrorObject::invalid_params("ref must be a ref/prompt or a ref/resource")),
        };
        let values: Vec<&str> = candidates.iter().copied().filter(|c| c.starts_with(value)).collect();
        Ok(json!({"completion": {"values": values, "total": values.len(), "hasMore": false}}))
    }

    pub(crate) fn set_level(&self, connection: u64, params: &Value) -> Result<Value, ErrorObject> {
        let level = string_param(params, "level")?;
        let rank = LEVELS
            .iter()
            .position(|l| *l == level)
            .ok_or_else(|| ErrorObject::invalid_params(format!("Invalid log level: {level}")))?;
        self.levels.lock().insert(connection, rank);
        Ok(json!({}))
    }

    /// Sets a modern request's minimum level from its `_meta`: without one it gets no log
    /// messages (server/utilities/logging at 2026-07-28).
    pub(crate) fn set_minimum(&self, connection: u64, level: Option<&str>) {
        let rank = level.and_then(|l| LEVELS.iter().position(|known| *known == l)).unwrap_or(LEVELS.len());
        self.levels.lock().insert(connection, rank);
    }

    /// Forgets an ended connection's subscriptions and log level.
    pub(crate) fn forget(&self, connection: u64) {
        self.subscriptions.lock().retain(|(c, _)| *c != connection);
        self.levels.lock().remove(&connection);
    }

    /// Whether a message at `level` goes to `connection`.
    pub(crate) fn logs(&self, connection: u64, level: &str) -> bool {
        let rank = LEVELS.iter().position(|l| *l == level).unwrap_or(0);
        self.levels.lock().get(&connection).is_none_or(|min| rank >= *min)
    }
}
