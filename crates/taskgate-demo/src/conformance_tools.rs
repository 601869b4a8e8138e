//! The conformance suite's tools, run: each returns exactly what its scenario asks for.

use crate::conformance::{text, PNG, STEP, WAV};
use crate::server::DemoServer;
use serde_json::{json, Value};
use taskgate_protocol::mcp::methods;
use taskgate_protocol::{ErrorObject, Message};
use tokio::sync::mpsc;

impl DemoServer {
    /// Runs a conformance tool (`name` passed [`is_tool`]).
    pub(crate) async fn conformance_call(
        &self,
        connection: u64,
        name: &str,
        args: &Value,
        token: Option<Value>,
        related: &mpsc::Sender<Message>,
    ) -> Result<Value, ErrorObject> {
        let string_arg = |key: &str| {
            args.get(key)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| ErrorObject::invalid_params(format!("{name} needs the string argument \"{key}\"")))
        };
        match name {
            "test_simple_text" => Ok(text("This is a simple text response for testing.")),
            "test_image_content" => Ok(json!({"content": [{"type": "image", "data": PNG, "mimeType": "image/png"}]})),
            "test_audio_content" => Ok(json!({"content": [{"type": "audio", "data": WAV, "mimeType": "audio/wav"}]})),
            "test_embedded_resource" => Ok(json!({"content": [{"type": "resource", "resource": {
                "uri": "test://embedded-resource", "mimeType": "text/plain", "text": "This is an embedded resource content."}}]})),
            "test_multiple_content_types" => Ok(json!({"content": [
                {"type": "text", "text": "Multiple content types test:"},
                {"type": "image", "data": PNG, "mimeType": "image/png"},
                {"type": "resource", "resource": {"uri": "test://mixed-content-resource", "mimeType": "application/json",
                    "text": json!({"test": "data", "value": 123}).to_string()}}
            ]})),
            "test_error_handling" => Ok(json!({"isError": true,
                "content": [{"type": "text", "text": "This tool intentionally returns an error for testing"}]})),
            "test_tool_with_logging" => {
                let messages = ["Tool execution started", "Tool processing data", "Tool execution completed"];
                for (i, data) in messages.into_iter().enumerate() {
                    if i > 0 {
                        tokio::time::sleep(STEP).await;
                    }
                    if self.logs(connection, "info") {
                        let log = json!({"level": "info", "logger": "conformance", "data": data});
                        let _ = related.send(Message::notification(methods::LOG_MESSAGE, Some(log))).await;
                    }
                }
                Ok(text("Logging tool completed"))
            }
            "test_tool_with_progress" => {
                for (i, progress) in [0, 50, 100].into_iter().enumerate() {
                    if i > 0 {
                        tokio::time::sleep(STEP).await;
                    }
                    if let Some(token) = &token {
                        let note = json!({"progressToken": token, "progress": progress, "total": 100});
                        let _ = related.send(Message::notification(methods::PROGRESS, Some(note))).await;
                    }
                }
                Ok(text("Progress tool completed"))
            }
            "test_sampling" => {
                let prompt = string_arg("prompt")?;
                self.client_declares(connection, "sampling")?;
                let request = json!({"messages": [{"role": "user", "content": {"type": "text", "text": prompt}}], "maxTokens": 100});
                let answer = self.ask_client(connection, methods::SAMPLING_CREATE_MESSAGE, request, related).await?;
                let reply = answer.pointer("/content/text").and_then(Value::as_str).unwrap_or_default();
                Ok(text(format!("LLM response: {reply}")))
            }
            "test_elicitation" => {
                let message = string_arg("message")?;
                let schema = json!({"type": "object", "properties": {
                    "username": {"type": "string", "description": "User's response"},
                    "email": {"type": "string", "description": "User's email address"}
                }, "required": ["username", "email"]});
                self.elicit(connection, message, schema, "User response", related).await
            }
            "test_elicitation_sep1034_defaults" => {
                let schema = json!({"type": "object", "properties": {
                    "name": {"type": "string", "default": "John Doe"},
                    "age": {"type": "integer", "default": 30},
                    "score": {"type": "number", "default": 95.5},
                    "status": {"type": "string", "enum": ["active", "inactive", "pending"], "default": "active"},
                    "verified": {"type": "boolean", "default": true}
                }});
                let message = "Please review the defaults".to_owned();
                self.elicit(connection, message, schema, "Elicitation completed", related).await
            }
            "test_elicitation_sep1330_enums" => {
                let titled = |pairs: [(&str, &str); 3]| {
                    pairs.iter().map(|(c, t)| json!({"const": c, "title": t})).collect::<Vec<_>>()
                };
                let schema = json!({"type": "object", "properties": {
                    "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
                    "titledSingle": {"type": "string", "oneOf": titled([("value1", "First Option"), ("value2", "Second Option"), ("value3", "Third Option")])},
                    "legacyEnum": {"type": "string", "enum": ["opt1", "opt2", "opt3"], "enumNames": ["Option One", "Option Two", "Option Three"]},
                    "untitledMulti": {"type": "array", "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
                    "titledMulti": {"type": "array", "items": {"anyOf": titled([("value1", "First Choice"), ("value2", "Second Choice"), ("value3", "Third Choice")])}}
                }});
                let message = "Please pick from the enums".to_owned();
                self.elicit(connection, message, schema, "Elicitation completed", related).await
            }
            "json_schema_2020_12_tool" => Ok(text(format!("Received: {args}"))),
            "test_reconnection" => Ok(text(
                "Reconnection test completed successfully. If you received this, the client properly reconnected after stream closure.",
            )),
            "test_trigger_tool_change" => {
                self.announce(Message::notification(methods::TOOLS_LIST_CHANGED, None));
                Ok(text("tool list changed"))
            }
            "test_trigger_prompt_change" => {
                self.announce(Message::notification(methods::PROMPTS_LIST_CHANGED, None));
                Ok(text("prompt list changed"))
            }
            other => Err(ErrorObject::invalid_params(format!("Unknown tool: {other}"))),
        }
    }

    async fn elicit(
        &self,
        connection: u64,
        message: String,
        schema: Value,
        label: &str,
        related: &mpsc::Sender<Message>,
    ) -> Result<Value, ErrorObject> {
        self.client_declares(connection, "elicitation")?;
        let request = json!({"mode": "form", "message": message, "requestedSchema": schema});
        let answer = self.ask_client(connection, methods::ELICITATION_CREATE, request, related).await?;
        let action = answer.get("action").and_then(Value::as_str).unwrap_or("?");
        let content = answer.get("content").cloned().unwrap_or_else(|| json!({}));
        Ok(text(format!("{label}: action={action}, content={content}")))
    }
}
