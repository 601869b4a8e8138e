//! The fixtures of the conformance suite's 2026-07-28 server scenarios
//! (`@modelcontextprotocol/conformance` 0.2.0-alpha.12, `--requirements 2026-07-28`), listed
//! to modern requests of a demo started with `--conformance`: the tools that ask with
//! `input_required` (`test_input_required_result_*`, `test_streaming_elicitation`), the prompt
//! that does (`test_input_required_result_prompt`), a tool that needs a capability
//! (`test_missing_capability`), one that logs only at a requested level (`test_logging_tool`)
//! and one with a header parameter (`test_header_param`, `x-mcp-header`).

use serde_json::{json, Value};
use taskgate_protocol::mcp::methods;
use taskgate_protocol::{codes, ErrorObject, Message};
use tokio::sync::mpsc;

use crate::conformance::{no_arguments, text};
use crate::DemoServer;

/// The prompt that asks before it is made.
pub(crate) const PROMPT: &str = "test_input_required_result_prompt";

/// (name, description) of the tools without arguments.
const PLAIN: [(&str, &str); 11] = [
    ("test_missing_capability", "Needs the client capability sampling: -32021 without it."),
    ("test_streaming_elicitation", "Asks the user to confirm (input_required), never on the call's stream."),
    ("test_logging_tool", "Sends log messages only when the request asks for a log level."),
    ("test_input_required_result_elicitation", "Asks the user's name (input_required), then greets them."),
    ("test_input_required_result_sampling", "Asks the client's LLM a question (input_required)."),
    ("test_input_required_result_list_roots", "Asks the client for its roots (input_required)."),
    ("test_input_required_result_request_state", "Asks for a confirmation, with a request state."),
    ("test_input_required_result_multiple_inputs", "Asks for a name, a greeting and the roots at once."),
    ("test_input_required_result_multi_round", "Asks for a name, then for a colour, in two rounds."),
    ("test_input_required_result_tampered_state", "Asks for a confirmation; refuses a state that was altered."),
    ("test_input_required_result_capabilities", "Asks only with the capabilities the client declared."),
];

pub(crate) fn tools() -> Vec<Value> {
    let mut tools: Vec<Value> = PLAIN
        .iter()
        .map(|(name, description)| json!({"name": name, "description": description, "inputSchema": no_arguments()}))
        .collect();
    tools.push(json!({"name": "test_header_param", "description": "Echoes its region, which also travels in the Mcp-Param-Region header.",
        "inputSchema": {"type": "object", "properties": {"region": {"type": "string", "x-mcp-header": "Region",
            "description": "A region name"}}, "required": ["region"]}}));
    tools
}

pub(crate) fn is_tool(name: &str) -> bool {
    name == "test_header_param" || PLAIN.iter().any(|(n, _)| *n == name)
}

pub(crate) fn prompt() -> Value {
    json!({"name": PROMPT, "description": "Asks the user for context (input_required) before it is made."})
}

fn elicitation(message: &str, field: &str, kind: &str) -> Value {
    json!({"mode": "form", "message": message, "requestedSchema": {"type": "object",
        "properties": {field: {"type": kind}}, "required": [field]}})
}

fn sampling(question: &str) -> Value {
    json!({"messages": [{"role": "user", "content": {"type": "text", "text": question}}], "maxTokens": 100})
}

/// What the user entered for `field` in an elicitation answer ("unknown" when declined).
fn entered(answer: &Value, field: &str) -> String {
    match &answer["content"][field] {
        Value::String(s) if answer["action"] == "accept" => s.clone(),
        Value::Null => "unknown".into(),
        other if answer["action"] == "accept" => other.to_string(),
        _ => "unknown".into(),
    }
}

fn sampled(answer: &Value) -> String {
    answer.pointer("/content/text").and_then(Value::as_str).unwrap_or_default().to_owned()
}

fn roots(answer: &Value) -> String {
    let uris: Vec<&str> = answer["roots"].as_array().into_iter().flatten().filter_map(|r| r["uri"].as_str()).collect();
    uris.join(" ")
}

impl DemoServer {
    /// Tools a modern request is checked against (`x-mcp-header` parameters): every one this
    /// demo may list.
    pub(crate) fn modern_tools(&self) -> Vec<Value> {
        let mut listed = self.tools();
        if self.inner.conformance {
            listed.extend(tools());
        }
        listed
    }

    /// Runs a 2026-07-28 fixture tool (`name` passed [`is_tool`]).
    pub(crate) async fn modern_fixture(
        &self,
        connection: u64,
        name: &str,
        args: &Value,
        related: &mpsc::Sender<Message>,
    ) -> Result<Value, ErrorObject> {
        let ask = |questions: Vec<(&str, &str, Value)>| self.ask_input(connection, questions);
        let confirm = || elicitation("Confirm the operation?", "ok", "boolean");
        match name {
            "test_missing_capability" => {
                if self.client_declares(connection, "sampling").is_err() {
                    return Err(ErrorObject::new(
                        codes::MISSING_REQUIRED_CLIENT_CAPABILITY,
                        "test_missing_capability needs the client capability sampling",
                    )
                    .with_data(json!({"requiredCapabilities": {"sampling": {}}})));
                }
                Ok(text("The client declares sampling."))
            }
            "test_streaming_elicitation" => {
                let answer = ask(vec![("confirm", methods::ELICITATION_CREATE, confirm())])?.remove(0);
                Ok(text(format!("Confirmed: {}", entered(&answer, "ok"))))
            }
            "test_logging_tool" => {
                for data in ["Logging tool started", "Logging tool finished"] {
                    if self.logs(connection, "info") {
                        let log = json!({"level": "info", "logger": "conformance", "data": data});
                        let _ = related.send(Message::notification(methods::LOG_MESSAGE, Some(log))).await;
                    }
                }
                Ok(text("Logging tool completed"))
            }
            "test_header_param" => {
                let region = args.get("region").and_then(Value::as_str).unwrap_or_default();
                Ok(text(format!("Region: {region}")))
            }
            "test_input_required_result_elicitation" => {
                let question = elicitation("What is your name?", "name", "string");
                let answer = ask(vec![("user_name", methods::ELICITATION_CREATE, question)])?.remove(0);
                Ok(text(format!("Hello, {}!", entered(&answer, "name"))))
            }
            "test_input_required_result_sampling" => {
                let question = sampling("What is the capital of France?");
                let answer = ask(vec![("capital_question", methods::SAMPLING_CREATE_MESSAGE, question)])?.remove(0);
                Ok(text(format!("The model answered: {}", sampled(&answer))))
            }
            "test_input_required_result_list_roots" => {
                let answer = ask(vec![("client_roots", methods::ROOTS_LIST, json!({}))])?.remove(0);
                Ok(text(format!("Roots: {}", roots(&answer))))
            }
            "test_input_required_result_request_state" | "test_input_required_result_tampered_state" => {
                let answer = ask(vec![("confirm", methods::ELICITATION_CREATE, confirm())])?.remove(0);
                Ok(text(format!("state-ok: confirmed {}", entered(&answer, "ok"))))
            }
            "test_input_required_result_multiple_inputs" => {
                let answers = ask(vec![
                    ("user_name", methods::ELICITATION_CREATE, elicitation("What is your name?", "name", "string")),
                    ("greeting", methods::SAMPLING_CREATE_MESSAGE, sampling("Write a short greeting.")),
                    ("client_roots", methods::ROOTS_LIST, json!({})),
                ])?;
                let (name, greeting, roots) = (entered(&answers[0], "name"), sampled(&answers[1]), roots(&answers[2]));
                Ok(text(format!("{greeting} {name} (roots: {roots})")))
            }
            "test_input_required_result_multi_round" => {
                let step1 = ask(vec![(
                    "step1",
                    methods::ELICITATION_CREATE,
                    elicitation("What is your name?", "name", "string"),
                )])?;
                let step2 = ask(vec![(
                    "step2",
                    methods::ELICITATION_CREATE,
                    elicitation("What is your favourite colour?", "color", "string"),
                )])?;
                Ok(text(format!("{} likes {}", entered(&step1[0], "name"), entered(&step2[0], "color"))))
            }
            "test_input_required_result_capabilities" => {
                let mut questions = Vec::new();
                if self.client_declares(connection, "elicitation").is_ok() {
                    questions.push((
                        "user_name",
                        methods::ELICITATION_CREATE,
                        elicitation("What is your name?", "name", "string"),
                    ));
                }
                if self.client_declares(connection, "sampling").is_ok() {
                    questions.push(("sample_input", methods::SAMPLING_CREATE_MESSAGE, sampling("Say something.")));
                }
                if questions.is_empty() {
                    return Ok(text("The client declares neither elicitation nor sampling: nothing to ask."));
                }
                let answered = ask(questions)?.len();
                Ok(text(format!("{answered} answers received")))
            }
            other => Err(ErrorObject::invalid_params(format!("Unknown tool: {other}"))),
        }
    }

    /// `prompts/get` of [`PROMPT`]: asks for context, then makes the prompt with it.
    pub(crate) async fn modern_prompt(&self, connection: u64) -> Result<Value, ErrorObject> {
        let question = elicitation("What context should the prompt use?", "context", "string");
        let answer =
            self.ask_input(connection, vec![("user_context", methods::ELICITATION_CREATE, question)])?.remove(0);
        let context = entered(&answer, "context");
        Ok(json!({"description": "A prompt made with the user's context.",
            "messages": [{"role": "user", "content": {"type": "text", "text": format!("Use this context: {context}")}}]}))
    }
}
