//! The fixtures of the MCP conformance suite's server scenarios
//! (`@modelcontextprotocol/conformance` 0.1.16, `conformance server --suite active`), served by
//! `taskgate demo-upstream --conformance` beside the demo's own tools, so that the suite runs
//! against the demo directly and through the gateway, and the two pass sets can be compared.
//!
//! Tools `test_*` and `json_schema_2020_12_tool`; resources `test://static-text`,
//! `test://static-binary`, `test://watched-resource` and the template
//! `test://template/{id}/data`; prompts `test_*`; completion of `test_prompt_with_arguments`.
//! Each returns exactly what its scenario's description asks for; `test_reconnection` (scenario
//! `server-sse-polling`) closes its stream early over HTTP (see `http.rs`).

use std::time::Duration;

use serde_json::{json, Value};
use taskgate_protocol::ErrorObject;

/// A 1×1 red PNG.
pub(crate) const PNG: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC";
/// A WAV of eight silent 8-bit samples at 8 kHz.
pub(crate) const WAV: &str = "UklGRiwAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQgAAACAgICAgICAgA==";
/// The pause between the notifications of the logging and progress scenarios ("~50ms").
pub(crate) const STEP: Duration = Duration::from_millis(50);

/// (uri, name, mimeType, description) of the listed resources.
pub(crate) const RESOURCES: [(&str, &str, &str, &str); 3] = [
    ("test://static-text", "static-text", "text/plain", "A static text resource."),
    ("test://static-binary", "static-binary", "image/png", "A static binary resource (a PNG)."),
    ("test://watched-resource", "watched-resource", "text/plain", "A resource that can be subscribed to."),
];

pub(crate) fn no_arguments() -> Value {
    json!({"type": "object", "properties": {}})
}

pub(crate) fn text(t: impl Into<String>) -> Value {
    json!({"content": [{"type": "text", "text": t.into()}]})
}

pub(crate) fn tools() -> Vec<Value> {
    let plain = |name: &str, description: &str| json!({"name": name, "description": description, "inputSchema": no_arguments()});
    let one_string = |name: &str, description: &str, arg: &str, arg_description: &str| {
        json!({"name": name, "description": description, "inputSchema": {"type": "object",
            "properties": {arg: {"type": "string", "description": arg_description}}, "required": [arg]}})
    };
    vec![
        plain("test_simple_text", "Returns a simple text."),
        plain("test_image_content", "Returns an image."),
        plain("test_audio_content", "Returns an audio clip."),
        plain("test_embedded_resource", "Returns an embedded resource."),
        plain("test_multiple_content_types", "Returns text, an image and a resource."),
        plain("test_tool_with_logging", "Sends three log messages while it runs."),
        plain("test_error_handling", "Always fails (isError: true)."),
        plain("test_tool_with_progress", "Reports progress 0, 50 and 100 of 100."),
        plain(
            "test_reconnection",
            "Over HTTP, closes the call's stream at once and answers on its resumption (GET with Last-Event-ID).",
        ),
        one_string("test_sampling", "Asks the client's LLM (sampling/createMessage).", "prompt", "The prompt to send"),
        one_string(
            "test_elicitation",
            "Asks the user (elicitation/create).",
            "message",
            "The message to show the user",
        ),
        plain("test_elicitation_sep1034_defaults", "Asks the user with defaults for every primitive type."),
        plain("test_elicitation_sep1330_enums", "Asks the user with the five kinds of enum."),
        json!({"name": "json_schema_2020_12_tool", "description": "Tool with JSON Schema 2020-12 features",
        "inputSchema": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "$defs": {"address": {"$anchor": "addressDef", "type": "object",
                "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
            "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"},
                "contactMethod": {"type": "string", "enum": ["phone", "email"]},
                "phone": {"type": "string"}, "email": {"type": "string"}},
            // Composition, conditional and reference keywords, which a listing must keep.
            "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
            "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
            "then": {"required": ["phone"]},
            "else": {"required": ["email"]},
            "additionalProperties": false
        }}),
    ]
}

pub(crate) fn is_tool(name: &str) -> bool {
    UNLISTED.contains(&name) || tools().iter().any(|t| t["name"] == name)
}

/// The suite's diagnostic hooks, served but not listed (as its reference server does): each
/// announces a change of a list (`notifications/tools/list_changed`,
/// `notifications/prompts/list_changed`) on the open GET streams.
pub(crate) const UNLISTED: [&str; 2] = ["test_trigger_tool_change", "test_trigger_prompt_change"];

pub(crate) fn templates() -> Vec<Value> {
    vec![json!({"uriTemplate": "test://template/{id}/data", "name": "template-data",
        "description": "Data for the id in the URI.", "mimeType": "application/json"})]
}

/// `resources/read` of a conformance URI; `None` when the URI is not one.
pub(crate) fn read(uri: &str) -> Option<Value> {
    let content = match uri {
        "test://static-text" => {
            json!({"uri": uri, "mimeType": "text/plain", "text": "This is the content of the static text resource."})
        }
        "test://static-binary" => json!({"uri": uri, "mimeType": "image/png", "blob": PNG}),
        "test://watched-resource" => json!({"uri": uri, "mimeType": "text/plain", "text": "Watched resource content."}),
        other => {
            let id = other.strip_prefix("test://template/")?.strip_suffix("/data")?;
            let data = json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")});
            json!({"uri": uri, "mimeType": "application/json", "text": data.to_string()})
        }
    };
    Some(json!({ "contents": [content] }))
}

pub(crate) fn prompts() -> Vec<Value> {
    let argument = |name: &str, description: &str| json!({"name": name, "description": description, "required": true});
    vec![
        json!({"name": "test_simple_prompt", "description": "A simple prompt without arguments."}),
        json!({"name": "test_prompt_with_arguments", "description": "A prompt with two arguments.",
            "arguments": [argument("arg1", "First test argument"), argument("arg2", "Second test argument")]}),
        json!({"name": "test_prompt_with_embedded_resource", "description": "A prompt that embeds a resource.",
            "arguments": [argument("resourceUri", "URI of the resource to embed")]}),
        json!({"name": "test_prompt_with_image", "description": "A prompt with an image."}),
    ]
}

/// `prompts/get` of a conformance prompt; `None` when the name is not one.
pub(crate) fn get_prompt(name: &str, args: &Value) -> Option<Result<Value, ErrorObject>> {
    let arg = |key: &str| {
        args.get(key)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| ErrorObject::invalid_params(format!("prompt {name} needs the argument \"{key}\"")))
    };
    let user = |content: Value| json!({"role": "user", "content": content});
    let text = |t: &str| json!({"type": "text", "text": t});
    Some(match name {
        "test_simple_prompt" => Ok(json!({"messages": [user(text("This is a simple prompt for testing."))]})),
        "test_prompt_with_arguments" => (|| {
            let (a, b) = (arg("arg1")?, arg("arg2")?);
            Ok(json!({"messages": [user(text(&format!("Prompt with arguments: arg1='{a}', arg2='{b}'")))]}))
        })(),
        "test_prompt_with_embedded_resource" => arg("resourceUri").map(|uri| {
            let resource = json!({"type": "resource", "resource":
                {"uri": uri, "mimeType": "text/plain", "text": "Embedded resource content for testing."}});
            json!({"messages": [user(resource), user(text("Please process the embedded resource above."))]})
        }),
        "test_prompt_with_image" => Ok(json!({"messages": [
            user(json!({"type": "image", "data": PNG, "mimeType": "image/png"})),
            user(text("Please analyze the image above."))
        ]})),
        _ => return None,
    })
}

/// Completion candidates for a conformance prompt's argument; `None` when the reference is not one.
pub(crate) fn completions(reference: &Value, argument: &str) -> Option<&'static [&'static str]> {
    (reference.get("name") == Some(&json!("test_prompt_with_arguments"))).then_some(match argument {
        "arg1" => &["paris", "park", "party"],
        _ => &[],
    })
}
