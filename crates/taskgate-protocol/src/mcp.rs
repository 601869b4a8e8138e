//! MCP 2025-11-25: method names, protocol versions, `_meta` keys and typed views of the messages
//! the gateway inspects. Views read from a [`Value`] and never reserialize it, so unknown fields
//! pass through unchanged.

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

/// The revision the gateway speaks.
pub const LATEST_PROTOCOL_VERSION: &str = "2025-11-25";
/// Every revision the gateway accepts from clients, newest first.
pub const SUPPORTED_PROTOCOL_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26"];
/// The revision assumed when an HTTP request carries no `MCP-Protocol-Version` and none was
/// negotiated (basic/transports, "Protocol Version Header").
pub const DEFAULT_NEGOTIATED_VERSION: &str = "2025-03-26";

/// True when `version` is one the gateway accepts.
pub fn is_supported_version(version: &str) -> bool {
    SUPPORTED_PROTOCOL_VERSIONS.contains(&version)
}

/// Version negotiation (basic/lifecycle): the same version if supported, else the latest.
pub fn negotiate_version(requested: &str) -> &'static str {
    SUPPORTED_PROTOCOL_VERSIONS.iter().find(|v| **v == requested).copied().unwrap_or(LATEST_PROTOCOL_VERSION)
}

/// The client capability a server-to-client request needs (basic/lifecycle "Capability
/// Negotiation"): `elicitation`, `sampling` or `roots`; `None` for other methods (`ping`).
pub fn client_capability_for(method: &str) -> Option<&'static str> {
    match method {
        methods::ELICITATION_CREATE => Some("elicitation"),
        methods::SAMPLING_CREATE_MESSAGE => Some("sampling"),
        methods::ROOTS_LIST => Some("roots"),
        _ => None,
    }
}

/// Longest client-chosen identifier (a request id, a progress token, a task id, a cursor), in
/// bytes once serialised; a longer one gets -32602.
pub const MAX_ID_BYTES: usize = 256;

/// Method names.
pub mod methods {
    /// `initialize`
    pub const INITIALIZE: &str = "initialize";
    /// `notifications/initialized`
    pub const INITIALIZED: &str = "notifications/initialized";
    /// `ping`
    pub const PING: &str = "ping";
    /// `tools/list`
    pub const TOOLS_LIST: &str = "tools/list";
    /// `tools/call`
    pub const TOOLS_CALL: &str = "tools/call";
    /// `notifications/tools/list_changed`
    pub const TOOLS_LIST_CHANGED: &str = "notifications/tools/list_changed";
    /// `notifications/progress`
    pub const PROGRESS: &str = "notifications/progress";
    /// `notifications/cancelled`
    pub const CANCELLED: &str = "notifications/cancelled";
    /// `notifications/message` (logging)
    pub const LOG_MESSAGE: &str = "notifications/message";
    /// `tasks/get`
    pub const TASKS_GET: &str = "tasks/get";
    /// `tasks/result`
    pub const TASKS_RESULT: &str = "tasks/result";
    /// `tasks/list`
    pub const TASKS_LIST: &str = "tasks/list";
    /// `tasks/cancel`
    pub const TASKS_CANCEL: &str = "tasks/cancel";
    /// `notifications/tasks/status`
    pub const TASKS_STATUS: &str = "notifications/tasks/status";
    /// `resources/list`
    pub const RESOURCES_LIST: &str = "resources/list";
    /// `resources/templates/list`
    pub const RESOURCES_TEMPLATES_LIST: &str = "resources/templates/list";
    /// `resources/read`
    pub const RESOURCES_READ: &str = "resources/read";
    /// `resources/subscribe`
    pub const RESOURCES_SUBSCRIBE: &str = "resources/subscribe";
    /// `resources/unsubscribe`
    pub const RESOURCES_UNSUBSCRIBE: &str = "resources/unsubscribe";
    /// `notifications/resources/updated`
    pub const RESOURCES_UPDATED: &str = "notifications/resources/updated";
    /// `notifications/resources/list_changed`
    pub const RESOURCES_LIST_CHANGED: &str = "notifications/resources/list_changed";
    /// `prompts/list`
    pub const PROMPTS_LIST: &str = "prompts/list";
    /// `prompts/get`
    pub const PROMPTS_GET: &str = "prompts/get";
    /// `notifications/prompts/list_changed`
    pub const PROMPTS_LIST_CHANGED: &str = "notifications/prompts/list_changed";
    /// `completion/complete`
    pub const COMPLETION_COMPLETE: &str = "completion/complete";
    /// `logging/setLevel`
    pub const LOGGING_SET_LEVEL: &str = "logging/setLevel";
    /// `notifications/roots/list_changed`
    pub const ROOTS_LIST_CHANGED: &str = "notifications/roots/list_changed";
    /// `elicitation/create` (server to client)
    pub const ELICITATION_CREATE: &str = "elicitation/create";
    /// `sampling/createMessage` (server to client)
    pub const SAMPLING_CREATE_MESSAGE: &str = "sampling/createMessage";
    /// `roots/list` (server to client)
    pub const ROOTS_LIST: &str = "roots/list";
}

/// The MCP Apps extension (ext-apps "Client<>Server Capability Negotiation").
pub const UI_EXTENSION: &str = "io.modelcontextprotocol/ui";

/// The most MIME types of a client's MCP Apps declaration passed on, and the longest one.
const UI_MIME_TYPES: usize = 8;
const UI_MIME_TYPE_LEN: usize = 128;

/// The client capabilities a gateway can honour for an upstream, because it relays the
/// requests they allow (`roots/list`, `sampling/createMessage`, `elicitation/create`) or the
/// extension whose resources and tools it passes through (MCP Apps): the client's own
/// declaration of those, and nothing else (no `tasks`, no `experimental`, no other extension:
/// basic/lifecycle "Capability Negotiation" — never declare what the gateway does not itself
/// implement). Only the fields schema.ts `ClientCapabilities` defines are kept
/// (`roots.listChanged`, `sampling.context`/`tools`, `elicitation.form`/`url`, their objects
/// emptied), and of MCP Apps its `mimeTypes` (a few short strings): what a client adds beyond
/// them is not passed on, and the result is small and of few distinct shapes whatever the
/// client sends.
pub fn relayable_client_capabilities(client: &Value) -> Value {
    let mut out = serde_json::Map::new();
    let features = [("roots", &[][..]), ("sampling", &["context", "tools"][..]), ("elicitation", &["form", "url"][..])];
    for (key, sub_features) in features {
        let Some(Value::Object(declared)) = client.get(key) else { continue };
        let mut kept = serde_json::Map::new();
        if key == "roots" {
            if let Some(flag @ Value::Bool(_)) = declared.get("listChanged") {
                kept.insert("listChanged".into(), flag.clone());
            }
        }
        for sub in sub_features {
            if declared.get(*sub).is_some_and(Value::is_object) {
                kept.insert((*sub).into(), Value::Object(serde_json::Map::new()));
            }
        }
        out.insert(key.to_owned(), Value::Object(kept));
    }
    if let Some(Value::Object(ui)) = client.get("extensions").and_then(|e| e.get(UI_EXTENSION)) {
        let mut kept = serde_json::Map::new();
        if let Some(Value::Array(types)) = ui.get("mimeTypes") {
            let types: Vec<Value> = types
                .iter()
                .filter(|t| t.as_str().is_some_and(|t| t.len() <= UI_MIME_TYPE_LEN))
                .take(UI_MIME_TYPES)
                .cloned()
                .collect();
            kept.insert("mimeTypes".into(), Value::Array(types));
        }
        out.insert("extensions".into(), json!({ UI_EXTENSION: kept }));
    }
    Value::Object(out)
}

/// Whether `capabilities` (a client's, or a server's) declare the MCP Apps extension.
pub fn declares_ui(capabilities: &Value) -> bool {
    capabilities.get("extensions").and_then(|e| e.get(UI_EXTENSION)).is_some_and(Value::is_object)
}

/// `_meta` keys reserved by MCP.
pub mod meta {
    /// Associates a message with a task.
    pub const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";
    /// A string the host may hand the model at once while a task runs.
    pub const MODEL_IMMEDIATE_RESPONSE: &str = "io.modelcontextprotocol/model-immediate-response";
    /// The progress token of a request, inside `params._meta`.
    pub const PROGRESS_TOKEN: &str = "progressToken";
}

/// `execution.taskSupport` of a tool (server/tools, basic/utilities/tasks "Tool-Level Negotiation").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum TaskSupport {
    /// The tool must not be invoked as a task (the default when absent).
    #[default]
    Forbidden,
    /// The tool may be invoked as a task or as a normal request.
    Optional,
    /// The tool must be invoked as a task.
    Required,
}

impl TaskSupport {
    /// The wire value.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskSupport::Forbidden => "forbidden",
            TaskSupport::Optional => "optional",
            TaskSupport::Required => "required",
        }
    }
}

/// A typed view of a `Tool` from `tools/list`, with everything else kept in `rest`.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolView {
    /// The tool's name.
    pub name: String,
    /// `execution.taskSupport`, defaulting to forbidden.
    pub task_support: TaskSupport,
    /// The whole tool object as the upstream sent it.
    pub raw: Map<String, Value>,
    /// The parameters its `inputSchema` annotates with `x-mcp-header` (none when the
    /// annotations are invalid: a 2026-07-28 upstream's such tool is not listed at all).
    pub param_headers: std::sync::Arc<[crate::param_headers::ParamHeader]>,
}

impl ToolView {
    /// Reads a tool object; `None` if it is not an object with a string `name`.
    pub fn from_value(value: Value) -> Option<ToolView> {
        let Value::Object(raw) = value else { return None };
        let name = raw.get("name")?.as_str()?.to_owned();
        let task_support = raw
            .get("execution")
            .and_then(|e| e.get("taskSupport"))
            .and_then(|t| serde_json::from_value(t.clone()).ok())
            .unwrap_or_default();
        let param_headers = crate::param_headers::param_headers(raw.get("inputSchema")).unwrap_or_default().into();
        Some(ToolView { name, task_support, raw, param_headers })
    }

    /// The tool object with its name replaced, every other field untouched.
    pub fn renamed(&self, name: &str) -> Value {
        let mut raw = self.raw.clone();
        raw.insert("name".into(), Value::from(name));
        Value::Object(raw)
    }
}

/// The parts of `initialize` params the gateway reads.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct InitializeView {
    /// The client's requested protocol version.
    pub protocol_version: String,
    /// The client's capabilities, passed through to upstream sessions.
    pub capabilities: Value,
    /// The client's implementation info.
    pub client_info: Value,
}

impl InitializeView {
    /// Reads `initialize` params, returning the -32602 message when they are malformed.
    pub fn from_params(params: Option<&Value>) -> Result<InitializeView, String> {
        let params = params.ok_or("initialize needs params {protocolVersion, capabilities, clientInfo}")?;
        let protocol_version = params
            .get("protocolVersion")
            .and_then(Value::as_str)
            .ok_or("initialize params need a string \"protocolVersion\"")?
            .to_owned();
        let capabilities = match params.get("capabilities") {
            Some(c @ Value::Object(_)) => c.clone(),
            Some(_) => return Err("\"capabilities\" must be an object".into()),
            None => return Err("initialize params need \"capabilities\"".into()),
        };
        let client_info = match params.get("clientInfo") {
            Some(c @ Value::Object(_)) if c.get("name").is_some_and(Value::is_string) => c.clone(),
            Some(_) => return Err("\"clientInfo\" must be an object with a string \"name\"".into()),
            None => return Err("initialize params need \"clientInfo\"".into()),
        };
        Ok(InitializeView { protocol_version, capabilities, client_info })
    }
}

/// `tools/call` params, checked once (server/tools "Calling Tools"; basic/utilities/tasks
/// "Creating Tasks" for `task`). The params themselves go upstream as they are.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCallView {
    /// The tool's name as the client gave it.
    pub name: String,
    /// Present for a task-augmented call, with the ttl it asks for (milliseconds), if any.
    pub task: Option<Option<u64>>,
    /// The arguments, when the front door kept them apart from the params as the client wrote
    /// them ([`crate::Message::from_slice_front`]); otherwise they are in the params.
    pub arguments: Option<crate::RawArguments>,
}

impl ToolCallView {
    /// Reads `tools/call` params, returning the -32602 message when they are malformed: a
    /// string `name`, `arguments` an object when present, `task` an object with a whole `ttl`.
    pub fn from_params(params: Option<&Value>) -> Result<ToolCallView, String> {
        let name = params
            .and_then(|p| p.get("name"))
            .and_then(Value::as_str)
            .ok_or("tools/call needs params with a string \"name\"")?
            .to_owned();
        if params.and_then(|p| p.get("arguments")).is_some_and(|a| !a.is_object()) {
            return Err("tools/call \"arguments\" must be an object".into());
        }
        let task = requested_task(params)?;
        Ok(ToolCallView { name, task, arguments: None })
    }
}

/// A required string param of `method` (`uri` of `resources/read`, `name` of `prompts/get`…),
/// or the -32602 message.
pub fn required_string<'a>(params: Option<&'a Value>, method: &str, key: &str) -> Result<&'a str, String> {
    params
        .and_then(|p| p.get(key))
        .and_then(Value::as_str)
        .ok_or_else(|| format!("{method} needs params with a string \"{key}\""))
}

/// What `completion/complete` completes (server/utilities/completion "Reference Types").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompletionRef<'a> {
    /// `ref/prompt` with the prompt's name.
    Prompt(&'a str),
    /// `ref/resource` with the resource template's URI.
    Resource(&'a str),
}

impl<'a> CompletionRef<'a> {
    /// Reads `params.ref`, or the -32602 message.
    pub fn from_params(params: Option<&'a Value>) -> Result<CompletionRef<'a>, String> {
        let reference = params.and_then(|p| p.get("ref"));
        let field = |key: &str| reference.and_then(|r| r.get(key)).and_then(Value::as_str);
        match field("type") {
            Some("ref/prompt") => field("name").map(CompletionRef::Prompt),
            Some("ref/resource") => field("uri").map(CompletionRef::Resource),
            _ => None,
        }
        .ok_or_else(|| {
            "completion/complete needs \"ref\" of type \"ref/prompt\" (with a name) or \"ref/resource\" (with a uri)"
                .to_owned()
        })
    }

    /// The param under `ref` that names the target (`name` or `uri`).
    pub fn field(&self) -> &'static str {
        match self {
            CompletionRef::Prompt(_) => "name",
            CompletionRef::Resource(_) => "uri",
        }
    }
}

/// True when a server's capabilities declare `tasks.requests.tools.call`.
pub fn declares_task_tool_calls(server_capabilities: &Value) -> bool {
    server_capabilities.pointer("/tasks/requests/tools/call").is_some_and(Value::is_object)
}

/// The `params._meta.progressToken` of a request, if any.
pub fn progress_token(params: Option<&Value>) -> Option<&Value> {
    params?.get("_meta")?.get(meta::PROGRESS_TOKEN)
}

/// `_meta["io.modelcontextprotocol/related-task"]` of a message's params: the task it belongs
/// to. (Looked up key by key: `Value::pointer` allocates a string for each step of its path.)
pub fn related_task(params: Option<&Value>) -> Option<&Value> {
    params?.get("_meta")?.get(meta::RELATED_TASK)
}

/// The `taskId` of [`related_task`].
pub fn related_task_id(params: Option<&Value>) -> Option<&str> {
    related_task(params)?.get("taskId")?.as_str()
}

/// The `cursor` of a paginated request: `Ok(None)` when absent, `Err` when not a string.
pub fn cursor(params: Option<&Value>) -> Result<Option<&str>, String> {
    match params.and_then(|p| p.get("cursor")) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err("\"cursor\" must be a string".into()),
    }
}

/// The `task` field of task-augmented request params: `Ok(None)` when absent; the requested
/// ttl in milliseconds when present; `Err` when malformed.
pub fn requested_task(params: Option<&Value>) -> Result<Option<Option<u64>>, String> {
    match params.and_then(|p| p.get("task")) {
        None => Ok(None),
        Some(Value::Object(task)) => match task.get("ttl") {
            None | Some(Value::Null) => Ok(Some(None)),
            Some(ttl) => match ttl.as_u64() {
                Some(ms) => Ok(Some(Some(ms))),
                None => Err(format!("task.ttl must be a whole number of milliseconds, got {ttl}")),
            },
        },
        Some(other) => Err(format!("\"task\" must be an object like {{\"ttl\": 60000}}, got {other}")),
    }
}

#[cfg(test)]
mod tool_call_tests {
    use super::ToolCallView;
    use serde_json::json;

    #[test]
    fn tool_call_params_are_checked_once() {
        let view =
            ToolCallView::from_params(Some(&json!({"name": "a__b", "arguments": {}, "task": {"ttl": 5}}))).unwrap();
        assert_eq!(view, ToolCallView { name: "a__b".into(), task: Some(Some(5)), arguments: None });
        assert_eq!(ToolCallView::from_params(Some(&json!({"name": "x"}))).unwrap().task, None);
        assert_eq!(ToolCallView::from_params(Some(&json!({"name": "x", "task": {}}))).unwrap().task, Some(None));
        for bad in [
            json!({}),
            json!({"name": 3}),
            json!({"name": "x", "arguments": []}),
            json!({"name": "x", "task": 1}),
            json!({"name": "x", "task": {"ttl": -1}}),
        ] {
            assert!(ToolCallView::from_params(Some(&bad)).is_err(), "{bad}");
        }
        assert!(ToolCallView::from_params(None).is_err());
    }

    #[test]
    fn completion_refs_and_required_strings() {
        use super::{required_string, CompletionRef};
        let prompt = json!({"ref": {"type": "ref/prompt", "name": "p"}});
        assert_eq!(CompletionRef::from_params(Some(&prompt)), Ok(CompletionRef::Prompt("p")));
        let resource = json!({"ref": {"type": "ref/resource", "uri": "x://{a}"}});
        assert_eq!(CompletionRef::from_params(Some(&resource)).unwrap().field(), "uri");
        for bad in
            [json!({}), json!({"ref": {"type": "ref/prompt"}}), json!({"ref": {"type": "ref/tool", "name": "t"}})]
        {
            assert!(CompletionRef::from_params(Some(&bad)).is_err(), "{bad}");
        }
        assert_eq!(required_string(Some(&json!({"uri": "a"})), "resources/read", "uri"), Ok("a"));
        assert_eq!(
            required_string(Some(&json!({"uri": 1})), "resources/read", "uri"),
            Err("resources/read needs params with a string \"uri\"".to_owned())
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn negotiates_known_versions_and_falls_back_to_latest() {
        assert_eq!(negotiate_version("2025-06-18"), "2025-06-18");
        assert_eq!(negotiate_version("2025-03-26"), "2025-03-26");
        assert_eq!(negotiate_version("2024-11-05"), LATEST_PROTOCOL_VERSION);
        assert_eq!(negotiate_version("1.0.0"), LATEST_PROTOCOL_VERSION);
    }

    #[test]
    fn tool_view_keeps_unknown_fields_when_renamed() {
        let tool = json!({"name":"add","inputSchema":{"type":"object"},"execution":{"taskSupport":"optional"},
            "x-vendor":1,"_meta":{"a/b":2}});
        let view = ToolView::from_value(tool.clone()).unwrap();
        assert_eq!(view.task_support, TaskSupport::Optional);
        let mut expected = tool;
        expected["name"] = json!("demo__add");
        assert_eq!(view.renamed("demo__add"), expected);
        assert!(ToolView::from_value(json!({"name":3})).is_none());
        let plain = ToolView::from_value(json!({"name":"x"})).unwrap();
        assert_eq!(plain.task_support, TaskSupport::Forbidden);
    }

    #[test]
    fn initialize_view_explains_bad_params() {
        assert!(InitializeView::from_params(None).is_err());
        assert!(InitializeView::from_params(Some(&json!({"protocolVersion":1}))).is_err());
        let ok = InitializeView::from_params(Some(&json!({"protocolVersion":"2025-11-25",
            "capabilities":{},"clientInfo":{"name":"c","version":"1"}})))
        .unwrap();
        assert_eq!(ok.protocol_version, "2025-11-25");
    }

    #[test]
    fn only_relayable_client_capabilities_go_upstream() {
        let client = json!({"roots":{"listChanged":true},"sampling":{},"elicitation":{"form":{}},
            "tasks":{"requests":{}},"experimental":{"x":{}},"extensions":{"io.modelcontextprotocol/tasks":{}}});
        assert_eq!(
            relayable_client_capabilities(&client),
            json!({"roots":{"listChanged":true},"sampling":{},"elicitation":{"form":{}}})
        );
        assert_eq!(relayable_client_capabilities(&json!({"roots": true})), json!({}));
        // Only the schema's fields, emptied: nothing else a client adds goes upstream.
        let padded = json!({"roots":{"listChanged":true,"x":"y"},"sampling":{"tools":{"a":1},"context":{},"junk":{}},
            "elicitation":{"url":{"b":2},"form":7}});
        assert_eq!(
            relayable_client_capabilities(&padded),
            json!({"roots":{"listChanged":true},"sampling":{"context":{},"tools":{}},"elicitation":{"url":{}}})
        );
        // MCP Apps goes upstream, with its MIME types only, bounded in count and length.
        let long = "x".repeat(UI_MIME_TYPE_LEN + 1);
        let apps = json!({"extensions":{UI_EXTENSION:{"mimeTypes":["text/html;profile=mcp-app",long,3,"a","b","c","d","e","f","g","h"],
            "features":["streaming"]},"io.example/other":{}}});
        let kept = relayable_client_capabilities(&apps);
        assert_eq!(
            kept,
            json!({"extensions":{UI_EXTENSION:{"mimeTypes":["text/html;profile=mcp-app","a","b","c","d","e","f","g"]}}})
        );
        assert!(declares_ui(&kept));
        assert_eq!(relayable_client_capabilities(&json!({"extensions":{UI_EXTENSION:true}})), json!({}));
        assert_eq!(
            relayable_client_capabilities(&json!({"extensions":{UI_EXTENSION:{}}})),
            json!({"extensions":{UI_EXTENSION:{}}})
        );
    }

    #[test]
    fn reads_task_capability_and_cursor() {
        assert!(declares_task_tool_calls(&json!({"tasks":{"requests":{"tools":{"call":{}}}}})));
        assert!(!declares_task_tool_calls(&json!({"tasks":{"list":{}}})));
        assert_eq!(cursor(Some(&json!({"cursor":"c"}))), Ok(Some("c")));
        assert!(cursor(Some(&json!({"cursor":5}))).is_err());
        assert_eq!(cursor(None), Ok(None));
    }
}
