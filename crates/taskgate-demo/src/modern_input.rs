//! What a modern request asks its client (basic/patterns/mrtr): a tool that needs an answer
//! ends its run with the question; the request answers `input_required` with every question
//! the run asked and a `requestState` holding the answers it already had; the client's retry
//! brings the new answers (`inputResponses`) and the state back, and the tool runs again from
//! the start with all of them.
//!
//! The state is sealed with HMAC-SHA-256 under a key of this process, and names the method,
//! what it is about (the tool, prompt or URI) and when it expires: a state altered, made for
//! another request, or too old is refused (basic/patterns/mrtr "Server Requirements": servers
//! MUST treat `requestState` as attacker-controlled and reject state that fails verification).
//! The demo authenticates nobody, so no principal is bound into it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde_json::{json, Map, Value};
use taskgate_protocol::mcp::methods;
use taskgate_protocol::{codes, ErrorObject, Message};
use tokio::sync::mpsc;

use crate::DemoServer;

/// How long an `input_required` answer's state may be brought back.
const STATE_TTL: Duration = Duration::from_secs(600);

/// The params member a request is about: the URI of a read, else the name.
pub(crate) fn subject(method: &str) -> &'static str {
    if method == methods::RESOURCES_READ {
        "uri"
    } else {
        "name"
    }
}

/// The client capability a question needs.
fn capability_for(method: &str) -> &'static str {
    match method {
        methods::ELICITATION_CREATE => "elicitation",
        methods::SAMPLING_CREATE_MESSAGE => "sampling",
        _ => "roots",
    }
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let key = openssl::pkey::PKey::hmac(key).expect("an HMAC key");
    let mut signer =
        openssl::sign::Signer::new(openssl::hash::MessageDigest::sha256(), &key).expect("HMAC-SHA-256 is available");
    signer.sign_oneshot_to_vec(data).expect("HMAC-SHA-256 signs")
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl DemoServer {
    /// The answers a request carries, taken out of its params, and what its state is bound to
    /// (its method, what it is about, its arguments): its `requestState` opened and checked,
    /// and its `inputResponses` (each the client's result, an object). With a state, answers
    /// only to what the state's round asked are taken; without one, any (a client may answer
    /// before it is asked).
    pub(crate) fn round_of(
        &self,
        method: &str,
        params: Option<&mut Value>,
    ) -> Result<(Map<String, Value>, Value), ErrorObject> {
        let Some(Value::Object(params)) = params else {
            return Ok((Map::new(), json!({"method": method, "subject": null, "arguments": null})));
        };
        let state = params.remove("requestState");
        let responses = params.remove("inputResponses");
        let bound =
            json!({"method": method, "subject": params.get(subject(method)), "arguments": params.get("arguments")});
        let (mut answers, asked) = match state {
            None | Some(Value::Null) => (Map::new(), None),
            Some(Value::String(state)) => {
                let (answers, asked) = self.open_state(&state, &bound)?;
                (answers, Some(asked))
            }
            Some(_) => return Err(ErrorObject::invalid_params("requestState must be a string")),
        };
        match responses {
            None | Some(Value::Null) => {}
            Some(Value::Object(responses)) => {
                for (key, response) in responses {
                    if !response.is_object() {
                        let why = format!("inputResponses[{key:?}] must be the client's result (an object)");
                        return Err(ErrorObject::invalid_params(why));
                    }
                    if asked.as_ref().is_none_or(|asked| asked.contains(&Value::String(key.clone()))) {
                        answers.insert(key, response);
                    }
                }
            }
            Some(_) => return Err(ErrorObject::invalid_params("inputResponses must be an object")),
        }
        Ok((answers, bound))
    }

    /// The outcome of a run: a run that stopped for questions answers `input_required` with
    /// them and the state of the answers it used (basic/patterns/mrtr "InputRequiredResult").
    pub(crate) fn finish_round(
        &self,
        connection: u64,
        bound: &Value,
        outcome: Result<Value, ErrorObject>,
    ) -> Result<Value, ErrorObject> {
        let round = self.inner.rounds.lock().remove(&connection);
        match (outcome, round) {
            (Err(_), Some(round)) if !round.asked.is_empty() => Ok(json!({
                "resultType": "input_required",
                "requestState": self.seal_state(bound, &round.used, round.asked.keys().collect()),
                "inputRequests": round.asked,
            })),
            (outcome, _) => outcome,
        }
    }

    /// Asks `questions` (key, method, params) together: their answers when the request carries
    /// them all; otherwise the missing ones are the run's questions and the run stops (`Err`).
    /// A question the client has not declared the capability for is -32021 (basic/patterns/mrtr:
    /// servers MUST NOT ask what the client has not declared).
    pub(crate) fn ask_input(
        &self,
        connection: u64,
        questions: Vec<(&str, &str, Value)>,
    ) -> Result<Vec<Value>, ErrorObject> {
        for (_, method, _) in &questions {
            let capability = capability_for(method);
            if self.client_declares(connection, capability).is_err() {
                return Err(ErrorObject::new(
                    codes::MISSING_REQUIRED_CLIENT_CAPABILITY,
                    format!("this request needs the client capability {capability}"),
                )
                .with_data(json!({"requiredCapabilities": {capability: {}}})));
            }
        }
        let mut rounds = self.inner.rounds.lock();
        let Some(round) = rounds.get_mut(&connection) else {
            return Err(ErrorObject::new(codes::INTERNAL_ERROR, "no modern request runs on this connection"));
        };
        if !round.may_ask {
            return Err(ErrorObject::new(codes::INTERNAL_ERROR, "this request cannot ask the client anything"));
        }
        let mut answers = Vec::new();
        let mut missing = false;
        for (key, method, params) in questions {
            match round.answers.get(key) {
                Some(answer) => {
                    if method == methods::ELICITATION_CREATE && !answer.get("action").is_some_and(Value::is_string) {
                        let why =
                            format!("inputResponses[{key:?}] is not an elicitation result (it has no \"action\")");
                        return Err(ErrorObject::invalid_params(why));
                    }
                    round.used.insert(key.to_owned(), answer.clone());
                    answers.push(answer.clone());
                }
                None => {
                    missing = true;
                    round.asked.insert(key.to_owned(), json!({"method": method, "params": params}));
                }
            }
        }
        if missing {
            return Err(ErrorObject::new(codes::INTERNAL_ERROR, "the client's answers are needed first"));
        }
        Ok(answers)
    }

    /// Whether a question of `connection`'s request is asked with `input_required` (a modern
    /// request of a demo that does not ask on the stream).
    pub(crate) fn asks_with_input_required(&self, connection: u64) -> bool {
        self.inner.rounds.lock().get(&connection).is_some_and(|r| !r.on_stream)
    }

    /// Sends `method` to the client and waits for its answer: on the call's stream for a
    /// legacy session (and a dual-era demo's modern side), as an input request for a modern one.
    pub(crate) async fn ask_client(
        &self,
        connection: u64,
        method: &str,
        params: Value,
        related: &mpsc::Sender<Message>,
    ) -> Result<Value, ErrorObject> {
        let modern_key = {
            let mut rounds = self.inner.rounds.lock();
            rounds.get_mut(&connection).filter(|r| !r.on_stream).map(|round| {
                let count = round.counts.entry(method.to_owned()).or_default();
                *count += 1;
                format!("{}-{count}", capability_for(method))
            })
        };
        if let Some(key) = modern_key {
            return self.ask_input(connection, vec![(&key, method, params)]).map(|mut a| a.remove(0));
        }
        let ask_id = taskgate_protocol::RequestId::String(format!("demo-ask-{}", uuid::Uuid::new_v4()));
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.inner.asked.lock().insert(ask_id.clone(), tx);
        let _ = related.send(Message::request(ask_id.clone(), method, Some(params))).await;
        let never = |_| ErrorObject::new(codes::INTERNAL_ERROR, format!("the client never answered {method}"));
        if !self.inner.rounds.lock().contains_key(&connection) {
            return rx.await.map_err(never)?;
        }
        // A modern request's question on its stream: the request ends if its client leaves.
        let stop = self.track(connection, &ask_id);
        let answer = tokio::select! {
            answer = rx => answer.map_err(never),
            () = stop.notified() => Err(ErrorObject::new(-32800, "request cancelled")),
        };
        let cancelled = answer.as_ref().is_err_and(|e| e.code == -32800);
        self.inner.asked.lock().remove(&ask_id);
        self.untrack(connection, &ask_id, cancelled);
        answer?
    }

    /// A state of `answers`, for the retry of the request `bound` describes, which answers the
    /// questions `asked`.
    fn seal_state(&self, bound: &Value, answers: &Map<String, Value>, asked: Vec<&String>) -> String {
        let expires = now() + STATE_TTL.as_secs();
        let payload = json!({"bound": bound, "answers": answers, "asked": asked, "expires": expires});
        let body = URL_SAFE_NO_PAD.encode(payload.to_string());
        let mac = URL_SAFE_NO_PAD.encode(hmac(&self.inner.state_key, body.as_bytes()));
        format!("{body}.{mac}")
    }

    /// The answers a state holds and the questions its round asked, if it is this process's,
    /// unaltered, unexpired and for the request `bound` describes.
    fn open_state(&self, state: &str, bound: &Value) -> Result<(Map<String, Value>, Vec<Value>), ErrorObject> {
        let refused = || ErrorObject::invalid_params("requestState integrity check failed");
        let (body, mac) = state.split_once('.').ok_or_else(refused)?;
        let mac = URL_SAFE_NO_PAD.decode(mac).map_err(|_| refused())?;
        let expected = hmac(&self.inner.state_key, body.as_bytes());
        if mac.len() != expected.len() || !openssl::memcmp::eq(&mac, &expected) {
            return Err(refused());
        }
        let mut payload: Value = URL_SAFE_NO_PAD
            .decode(body)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .ok_or_else(refused)?;
        if payload["expires"].as_u64().is_none_or(|at| at < now()) {
            return Err(ErrorObject::invalid_params("requestState has expired; send the request again without it"));
        }
        if payload["bound"] != *bound {
            return Err(ErrorObject::invalid_params("requestState belongs to another request"));
        }
        let answers = payload["answers"].as_object_mut().map(std::mem::take).unwrap_or_default();
        let asked = payload["asked"].as_array_mut().map(std::mem::take).unwrap_or_default();
        Ok((answers, asked))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_opens_only_unaltered_for_its_own_request_before_it_expires() {
        let demo = DemoServer::conformance();
        let bound = |tool: &str, x: i64| json!({"method": methods::TOOLS_CALL, "subject": tool, "arguments": {"x": x}});
        let mine = bound("test_input_required_result_multi_round", 1);
        let answers: Map<String, Value> = [("step1".to_owned(), json!({"action": "accept"}))].into_iter().collect();
        let step2 = "step2".to_owned();
        let state = demo.seal_state(&mine, &answers, vec![&step2]);
        assert_eq!(demo.open_state(&state, &mine), Ok((answers.clone(), vec![json!("step2")])));
        // Altered anywhere, or made by another process (another key): refused.
        let (body, mac) = state.split_once('.').unwrap();
        for altered in [format!("{state}-TAMPERED"), format!("{body}x.{mac}"), body.to_owned(), String::new()] {
            let refused = demo.open_state(&altered, &mine).unwrap_err();
            assert_eq!(refused.message, "requestState integrity check failed", "{altered}");
        }
        assert!(DemoServer::conformance().open_state(&state, &mine).is_err());
        // Brought to another tool, or to the same one with other arguments: refused.
        for elsewhere in
            [bound("test_input_required_result_elicitation", 1), bound("test_input_required_result_multi_round", 2)]
        {
            assert!(demo.open_state(&state, &elsewhere).unwrap_err().message.contains("another request"));
        }
        // Too old: refused, saying so.
        let payload = json!({"bound": mine, "answers": answers, "asked": [], "expires": now() - 1});
        let body = URL_SAFE_NO_PAD.encode(payload.to_string());
        let old = format!("{body}.{}", URL_SAFE_NO_PAD.encode(hmac(&demo.inner.state_key, body.as_bytes())));
        assert!(demo.open_state(&old, &mine).unwrap_err().message.contains("expired"));
    }

    #[test]
    fn a_retry_is_answered_only_for_what_its_state_asked() {
        let demo = DemoServer::conformance();
        let mut first = Some(json!({"name": "t", "arguments": {}}));
        let (_, bound) = demo.round_of(methods::TOOLS_CALL, first.as_mut()).unwrap();
        let asked = "user_name".to_owned();
        let state = demo.seal_state(&bound, &Map::new(), vec![&asked]);
        let mut retry = Some(json!({"name": "t", "arguments": {}, "requestState": state,
            "inputResponses": {"user_name": {"action": "accept"}, "confirm": {"action": "accept"}}}));
        let (answers, _) = demo.round_of(methods::TOOLS_CALL, retry.as_mut()).unwrap();
        assert_eq!(answers.keys().collect::<Vec<_>>(), ["user_name"]);
        assert_eq!(retry, Some(json!({"name": "t", "arguments": {}})), "the state and answers are taken out");
        // Without a state, answers given before the question are taken.
        let mut early = Some(json!({"name": "t", "inputResponses": {"confirm": {"action": "accept"}}}));
        assert_eq!(demo.round_of(methods::TOOLS_CALL, early.as_mut()).unwrap().0.len(), 1);
        let mut bad = Some(json!({"name": "t", "inputResponses": {"confirm": 12345}}));
        assert!(demo.round_of(methods::TOOLS_CALL, bad.as_mut()).is_err());
    }
}
