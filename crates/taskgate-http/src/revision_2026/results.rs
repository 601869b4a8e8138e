//! A result as a 2026-07-28 client gets it: `resultType`, the server's info and caching hints on
//! listings, a task as the extension's flat `CreateTaskResult`, and a plain call's result
//! rewritten from its text without reading it into a tree.

use serde_json::value::RawValue;
use serde_json::{json, Map, Value};
use std::borrow::Cow;
use taskgate_protocol::mcp::methods;
use taskgate_protocol::revision_2026::{self, meta};
use taskgate_protocol::RequestId;

/// The common answer, a result that is not a task, as [`finish_result`] makes it, without
/// parsing the result's content: its top-level members are copied as they are (only `_meta` is
/// read, to add the server's identity), under the client's id. `None` for anything else.
pub(super) fn plain_result(method: &str, internal_id: &RequestId, client_id: &RequestId, json: &str) -> Option<String> {
    let result = result_text(internal_id, json)?;
    let members: Members = serde_json::from_str(result).ok()?;
    let members = members.0;
    let has = |key: &str| members.iter().any(|(k, _)| k == key);
    if has("task") {
        return None;
    }
    let mut out = String::with_capacity(json.len() + 160);
    out.push_str(r#"{"jsonrpc":"2.0","id":"#);
    match client_id {
        RequestId::Number(n) => {
            use std::fmt::Write;
            write!(out, "{n}").ok()?;
        }
        RequestId::String(s) => out.push_str(&serde_json::to_string(s).ok()?),
    }
    out.push_str(r#","result":{"#);
    for (key, raw) in &members {
        if key != "_meta" {
            match key {
                // Read without unescaping: the key's text needs none.
                Cow::Borrowed(k) => {
                    out.push('"');
                    out.push_str(k);
                    out.push('"');
                }
                Cow::Owned(k) => out.push_str(&serde_json::to_string(k).ok()?),
            }
            out.push(':');
            out.push_str(raw.get());
            out.push(',');
        }
    }
    let mut add = |key: &str, value: &str| {
        if !has(key) {
            out.push('"');
            out.push_str(key);
            out.push_str("\":");
            out.push_str(value);
            out.push(',');
        }
    };
    add("resultType", r#""complete""#);
    if caching_hints(method) {
        add("ttlMs", "0");
        add("cacheScope", r#""private""#);
    }
    out.push_str(r#""_meta":"#);
    match members.iter().find(|(k, _)| k == "_meta") {
        Some((_, raw)) => {
            let mut meta: Map<String, Value> = serde_json::from_str(raw.get()).ok()?;
            meta.entry(meta::SERVER_INFO).or_insert_with(taskgate_core::server_info);
            out.push_str(&to_json(&Value::Object(meta)));
        }
        // The common case: only the server's identity, serialized once.
        None => out.push_str(server_info_meta()),
    }
    out.push_str("}}");
    Some(out)
}

/// The text of the result of a response to `id`, as [`Message::to_json`] writes one
/// (`{"jsonrpc":"2.0","id":…,"result":…}`): the session's frames are the gateway's own
/// serialization, so the envelope is matched as text rather than parsed. `None` for anything
/// else (an error, a notification, a request, another id).
pub(super) fn result_text<'a>(id: &RequestId, json: &'a str) -> Option<&'a str> {
    let rest = json.strip_prefix(r#"{"jsonrpc":"2.0","id":"#)?;
    let rest = match id {
        RequestId::String(s) if !s.contains(['"', '\\']) && !s.chars().any(char::is_control) => {
            rest.strip_prefix('"')?.strip_prefix(s.as_str())?.strip_prefix('"')?
        }
        RequestId::Number(n) => {
            let end = rest.find(|c: char| !(c.is_ascii_digit() || c == '-'))?;
            if rest[..end].parse::<i64>().ok()? != *n {
                return None;
            }
            &rest[end..]
        }
        RequestId::String(_) => return None,
    };
    rest.strip_prefix(r#","result":"#)?.strip_suffix('}')
}

/// A key, borrowed from the text unless it had escapes.
pub(super) struct Key<'a>(Cow<'a, str>);

impl<'de> serde::Deserialize<'de> for Key<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(Visit)
    }
}

/// An object's top-level members in their order, each value as its raw text.
pub(super) struct Members<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'de> serde::Deserialize<'de> for Members<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Members<'de>, A::Error> {
                let mut members = Vec::new();
                while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
                    members.push((key, map.next_value::<&'de RawValue>()?));
                }
                Ok(Members(members))
            }
        }
        deserializer.deserialize_map(Visit)
    }
}

/// `{"io.modelcontextprotocol/serverInfo": …}` as JSON.
pub(super) fn server_info_meta() -> &'static str {
    static META: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    META.get_or_init(|| to_json(&json!({ meta::SERVER_INFO: taskgate_core::server_info() })))
}

/// server/utilities/caching: results of these carry `ttlMs` and `cacheScope`.
pub(super) fn caching_hints(method: &str) -> bool {
    matches!(
        method,
        methods::TOOLS_LIST
            | methods::PROMPTS_LIST
            | methods::RESOURCES_LIST
            | methods::RESOURCES_TEMPLATES_LIST
            | methods::RESOURCES_READ
            | revision_2026::methods::SERVER_DISCOVER
    )
}

/// A message as JSON text (serde_json's writer, not the slower `Display`).
pub(super) fn to_json(value: &Value) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// A result as the 2026-07-28 client sees it: `resultType`, the server's identity, caching
/// hints on what server/utilities/caching names, and a task as the flat `CreateTaskResult`.
pub(crate) fn finish_result(method: &str, result: &mut Map<String, Value>) {
    if method == methods::TOOLS_CALL {
        if let Some(Value::Object(task)) = result.get("task").cloned() {
            if task.contains_key("taskId") {
                // ext-tasks "Task Creation": resultType "task" with the task's fields flat.
                result.remove("task");
                for (k, v) in flat_task(task) {
                    result.insert(k, v);
                }
                result.insert("resultType".into(), json!("task"));
            }
        }
    }
    result.entry("resultType").or_insert_with(|| json!("complete"));
    let meta = result.entry("_meta").or_insert_with(|| json!({}));
    if let Some(meta) = meta.as_object_mut() {
        meta.entry(meta::SERVER_INFO).or_insert_with(taskgate_core::server_info);
    }
    // server/utilities/caching: results of these carry ttlMs and cacheScope. What a tenant
    // sees depends on its credentials, so nothing is public; the gateway cannot promise a
    // listing stays fresh (upstreams change them), so it is stale at once.
    if caching_hints(method) {
        result.entry("ttlMs").or_insert_with(|| json!(0));
        result.entry("cacheScope").or_insert_with(|| json!("private"));
    }
}

/// A 2025-11-25 `Task` with the extension's field names (`ttlMs`, `pollIntervalMs`).
pub(super) fn flat_task(mut task: Map<String, Value>) -> Map<String, Value> {
    let ttl = task.remove("ttl").unwrap_or(Value::Null);
    task.insert("ttlMs".into(), ttl);
    if let Some(poll) = task.remove("pollInterval") {
        task.insert("pollIntervalMs".into(), poll);
    }
    task
}
