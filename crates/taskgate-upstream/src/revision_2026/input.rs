//! Input requests of a 2026-07-28 upstream (an `input_required` result's, or a task's): sent
//! toward the client the way a legacy upstream's requests go, their answers taken back.

use super::exchange::{exchange, Revision2026};
use super::state::{State2026, MAX_INPUT_REQUESTS};
use crate::{UpstreamError, UpstreamEvent};
use serde_json::{json, Map, Value};
use std::sync::Arc;
use std::time::Duration;
use taskgate_protocol::mcp::methods;
use taskgate_protocol::revision_2026::methods as wmethods;
use taskgate_protocol::{codes, ErrorObject, Message, RequestId};
use tokio::sync::oneshot;

/// The request methods a modern upstream may embed in `inputRequests` (mrtr "InputRequests").
const INPUT_METHODS: [&str; 3] = [methods::ELICITATION_CREATE, methods::SAMPLING_CREATE_MESSAGE, methods::ROOTS_LIST];

impl Revision2026<'_> {
    /// Sends each input request toward the client the way a legacy upstream's request would go
    /// (on the call's stream, or as an event naming the call) and collects the answers by key.
    pub(super) async fn ask_client(
        &self,
        asks: &Value,
        related_id: &RequestId,
        related: Option<&crate::Sender<Message>>,
    ) -> Result<Value, UpstreamError> {
        let state = self.state;
        let Value::Object(asks) = asks else { return Err(state.protocol("inputRequests is not an object")) };
        if asks.len() > MAX_INPUT_REQUESTS {
            return Err(state.protocol(format!("more than {MAX_INPUT_REQUESTS} input requests at once")));
        }
        let mut waits = Vec::with_capacity(asks.len());
        for (key, ask) in asks {
            let input = taskgate_protocol::revision_2026::InputKey { key: key.clone(), of: asks.len() };
            let waiter = self.ask_one(input, ask, related_id, related).await?;
            waits.push((key.clone(), waiter));
        }
        let mut answers = Map::new();
        for (key, waiter) in waits {
            answers.insert(key, self.answer_of(waiter).await?);
        }
        Ok(Value::Object(answers))
    }

    /// Sends one input request (the upstream's `key` of it) toward the client; the receiver gets
    /// the client's answer.
    pub(super) async fn ask_one(
        &self,
        key: taskgate_protocol::revision_2026::InputKey,
        ask: &Value,
        related_id: &RequestId,
        related: Option<&crate::Sender<Message>>,
    ) -> Result<Asked, UpstreamError> {
        let state = self.state;
        let method = ask.get("method").and_then(Value::as_str).unwrap_or_default();
        if !INPUT_METHODS.contains(&method) {
            // mrtr "Server Requirements": values MUST be one of these three requests.
            return Err(state.protocol(format!("an input request for {method:?}, which is not a client request")));
        }
        let id = self.session.next_request_id();
        let (tx, rx) = oneshot::channel();
        state.pending.lock().insert(id.clone(), tx);
        let mut params = ask.get("params").cloned();
        taskgate_protocol::revision_2026::put_input_key(&mut params, key);
        let request = Message::request(id.clone(), method, params);
        match related {
            Some(sink) => {
                let _ = sink.send(request).await;
            }
            None => {
                if let Message::Request { id, method, params } = request {
                    let event = UpstreamEvent::Request { id, method, params, related: Some(related_id.clone()) };
                    self.session.to_owner(event).await;
                }
            }
        }
        Ok(Asked { id, answer: rx, state: state.clone() })
    }

    /// The client's answer to one input request: its result, or its error as the request's.
    async fn answer_of(&self, mut asked: Asked) -> Result<Value, UpstreamError> {
        let state = self.state;
        match (&mut asked.answer).await {
            Ok(Message::Response { result, .. }) => Ok(result),
            Ok(Message::Error { error, .. }) => Err(state.rpc(error)),
            _ => {
                Err(state
                    .rpc(ErrorObject::new(codes::INTERNAL_ERROR, "the client's answer to the upstream never came")))
            }
        }
    }

    /// When the client answers a task's input request, `tasks/update` hands it to the upstream
    /// (ext-tasks "Task Update Requests"). Bounded by the upstream's timeout and the session.
    pub(super) fn forward_answer(&self, task_id: &str, key: &str, asked: Asked) {
        let session = self.session.downgrade();
        let (state, task_id, key) = (self.state.clone(), task_id.to_owned(), key.to_owned());
        let channel = self.ready.channel.clone();
        let timeout = Duration::from_secs(self.session.inner.endpoint.config().timeout_secs);
        tokio::spawn(async move {
            let mut asked = asked;
            let answer = tokio::time::timeout(timeout, &mut asked.answer).await;
            let Some(session) = session.upgrade() else { return };
            let result = match answer {
                Ok(Ok(Message::Response { result, .. })) => result,
                Ok(Ok(Message::Error { error, .. })) => {
                    tracing::info!(upstream = session.upstream(), %task_id, %key, code = error.code, "the client refused a task's input request; the upstream task waits on");
                    return;
                }
                _ => return,
            };
            let mut p = json!({ "taskId": task_id, "inputResponses": { key.clone(): result } });
            state.stamp(&mut p, true);
            let id = session.next_request_id();
            if let Err(e) = exchange(&channel, &state, id, wmethods::TASKS_UPDATE, p, None).await {
                tracing::info!(upstream = session.upstream(), %task_id, %key, error = %e, "tasks/update failed");
            }
            state.answered.notify_waiters();
        });
    }
}

/// An input request sent toward the client, awaiting its answer; forgotten when dropped.
pub(crate) struct Asked {
    id: RequestId,
    answer: oneshot::Receiver<Message>,
    state: Arc<State2026>,
}

impl Drop for Asked {
    fn drop(&mut self) {
        self.state.pending.lock().remove(&self.id);
    }
}
