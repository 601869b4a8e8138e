//! The tasks extension's methods for stateless clients (ext-tasks): `tasks/get` with the
//! result, error or outstanding input requests inlined, `tasks/update` delivering
//! `inputResponses`, `tasks/cancel`. They read the same task records as 2025-11-25's
//! `tasks/*` (the one task service, the same identity rules: a task of another principal is
//! not found), through the identity's pooled session.

use std::sync::Arc;

use actix_web::HttpResponse;
use serde_json::{json, Map, Value};
use taskgate_core::{Gateway, GatewayError, Identity, SessionHandle};
use taskgate_protocol::mcp::{self, methods};
use taskgate_protocol::revision_2026::{self, RequestMeta};
use taskgate_protocol::{ErrorObject, Message, RequestId};

use super::exchange::Front2026;
use super::results::{finish_result, flat_task};

/// What the session answered: a result, or a JSON-RPC error.
type Answer = Result<Value, ErrorObject>;

/// Sends a request to the session and waits for its answer.
async fn ask(state: &Front2026, session: &SessionHandle, method: &str, params: Value) -> Result<Answer, GatewayError> {
    let mut messages = session.request(state.internal_id(), method.into(), Some(params)).await?;
    while let Some(frame) = messages.recv().await {
        let Ok(Value::Object(mut message)) = serde_json::from_str::<Value>(&frame.json) else { continue };
        if let Some(error) = message.remove("error") {
            let error = serde_json::from_value(error).unwrap_or_else(|_| ErrorObject::new(-32603, "malformed error"));
            return Ok(Err(error));
        }
        if let Some(result) = message.remove("result") {
            return Ok(Ok(result));
        }
    }
    Ok(Err(ErrorObject::new(-32603, "the session closed before answering")))
}

fn reply(id: RequestId, answer: Answer, method: &str) -> HttpResponse {
    match answer {
        Ok(mut result) => {
            if let Some(object) = result.as_object_mut() {
                finish_result(method, object);
            }
            crate::reply::json(&Message::response(id, result))
        }
        Err(error) => crate::reply::json(&Message::error(Some(id), error)),
    }
}

pub(super) async fn serve(
    gateway: &Gateway,
    identity: &Identity,
    id: RequestId,
    method: &str,
    params: Option<Value>,
    request_meta: &RequestMeta,
    state: Arc<Front2026>,
) -> Result<HttpResponse, GatewayError> {
    let task_id =
        mcp::required_string(params.as_ref(), method, "taskId").map_err(GatewayError::InvalidParams)?.to_owned();
    let endpoint = gateway.endpoint(identity, None)?;
    let session = gateway
        .pooled_session(identity, &request_meta.capabilities, request_meta.client_info.as_ref(), &endpoint)
        .await?;
    let answer = ask(&state, &session, methods::TASKS_GET, json!({ "taskId": task_id })).await?;
    let task = match answer {
        Ok(Value::Object(task)) => task,
        Ok(_) => return Err(GatewayError::Internal("tasks/get answered with no task".into())),
        Err(error) => return Ok(reply(id, Err(error), method)),
    };
    match method {
        methods::TASKS_CANCEL => {
            // ext-tasks "Task Cancellation": the server MUST acknowledge with an empty result;
            // cancellation is cooperative and eventually consistent, so a task that already
            // ended (or ends meanwhile) is acknowledged too: only an unknown task is an error
            // (answered above).
            let ended = task.get("status").and_then(Value::as_str).is_some_and(is_terminal);
            if !ended {
                let answer = ask(&state, &session, methods::TASKS_CANCEL, json!({ "taskId": task_id })).await?;
                if let Err(error) = answer {
                    let still_there = ask(&state, &session, methods::TASKS_GET, json!({ "taskId": task_id })).await?;
                    let ended_meanwhile = still_there
                        .as_ref()
                        .is_ok_and(|t| t.get("status").and_then(Value::as_str).is_some_and(is_terminal));
                    if !ended_meanwhile {
                        return Ok(reply(id, Err(error), method));
                    }
                }
            }
            Ok(reply(id, Ok(json!({})), method))
        }
        revision_2026::methods::TASKS_UPDATE => {
            let Some(Value::Object(responses)) = params.as_ref().and_then(|p| p.get("inputResponses")) else {
                return Err(GatewayError::InvalidParams("tasks/update needs an object \"inputResponses\"".into()));
            };
            // Keys not outstanding are ignored (ext-tasks "Task Update Requests").
            let outstanding = gateway.task_input_requests(identity, &task_id).await?;
            let answers: Vec<Message> = responses
                .iter()
                .filter(|(key, _)| outstanding.iter().any(|(k, _)| k == *key))
                .map(|(key, answer)| Message::response(RequestId::String(key.clone()), answer.clone()))
                .collect();
            // To the session holding each request, on whichever replica runs the task.
            gateway.answer_task_inputs(identity, &task_id, answers).await?;
            Ok(reply(id, Ok(json!({})), method))
        }
        _ => {
            let task = detailed(gateway, identity, &state, &session, &task_id, task).await?;
            Ok(reply(id, Ok(Value::Object(task)), method))
        }
    }
}

/// A task status from which there is no way back.
fn is_terminal(status: &str) -> bool {
    matches!(status, "completed" | "failed" | "cancelled")
}

/// ext-tasks "Task Polling": the task with what its status calls for inlined.
async fn detailed(
    gateway: &Gateway,
    identity: &Identity,
    state: &Front2026,
    session: &SessionHandle,
    task_id: &str,
    task: Map<String, Value>,
) -> Result<Map<String, Value>, GatewayError> {
    let mut task = flat_task(task);
    task.remove("_meta");
    let status = task.get("status").and_then(Value::as_str).unwrap_or_default().to_owned();
    match status.as_str() {
        "completed" | "failed" => {
            let answer = ask(state, session, methods::TASKS_RESULT, json!({ "taskId": task_id })).await?;
            match answer {
                Ok(mut result) => {
                    if let Some(Value::Object(meta)) = result.get_mut("_meta") {
                        meta.remove(mcp::meta::RELATED_TASK);
                        if meta.is_empty() {
                            result.as_object_mut().map(|r| r.remove("_meta"));
                        }
                    }
                    // ext-tasks "Task Execution Errors": a tool result with isError: true is
                    // completed, with the result; failed is only for JSON-RPC errors.
                    task.insert("status".into(), json!("completed"));
                    task.insert("result".into(), result);
                }
                Err(error) => {
                    task.insert("status".into(), json!("failed"));
                    task.insert("error".into(), serde_json::to_value(error).unwrap_or_default());
                }
            }
        }
        "input_required" => {
            // All outstanding requests, every time (ext-tasks "Task Polling"): the task's
            // actor holds them, or, for a task another replica runs, the shared store.
            let requests: Map<String, Value> =
                gateway.task_input_requests(identity, task_id).await?.into_iter().collect();
            task.insert("inputRequests".into(), Value::Object(requests));
        }
        _ => {}
    }
    Ok(task)
}
