//! `subscriptions/listen` (basic/patterns/subscriptions): a long-lived response stream of the
//! change notifications a client opts in to. Each listen is served by a session of its own
//! whose GET stream the gateway reads: the acknowledgment first, then the notifications the
//! filter names, each tagged with the subscription id; when the gateway ends it (shutdown),
//! the listen request gets its result; when the client closes it, the session ends.

use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use actix_web::http::header;
use actix_web::HttpResponse;
use bytes::Bytes;
use serde_json::{json, Value};
use taskgate_core::{Gateway, GatewayError, Identity};
use taskgate_protocol::mcp::methods;
use taskgate_protocol::revision_2026::{self, meta, RequestMeta};
use taskgate_protocol::{Message, RequestId};

use super::exchange::Front2026;

const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// Resources one listen may subscribe to.
const MAX_RESOURCE_SUBSCRIPTIONS: usize = 256;

/// The notification filter a client sent.
#[derive(Default)]
struct Filter {
    tools: bool,
    prompts: bool,
    resources: bool,
    uris: Vec<String>,
}

fn filter(params: Option<&Value>, declares_tasks: bool) -> Result<Filter, GatewayError> {
    let bad = |why: &str| GatewayError::InvalidParams(format!("subscriptions/listen: {why}"));
    let Some(notifications) = params.and_then(|p| p.get("notifications")) else {
        return Err(bad("params need a \"notifications\" object"));
    };
    let Value::Object(n) = notifications else { return Err(bad("\"notifications\" must be an object")) };
    let flag = |key: &str| match n.get(key) {
        None => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(bad(&format!("\"{key}\" must be a boolean"))),
    };
    let mut f = Filter {
        tools: flag("toolsListChanged")?,
        prompts: flag("promptsListChanged")?,
        resources: flag("resourcesListChanged")?,
        uris: Vec::new(),
    };
    match n.get("resourceSubscriptions") {
        None => {}
        Some(Value::Array(uris)) if uris.len() <= MAX_RESOURCE_SUBSCRIPTIONS => {
            for uri in uris {
                let Value::String(uri) = uri else { return Err(bad("\"resourceSubscriptions\" must hold strings")) };
                f.uris.push(uri.clone());
            }
        }
        Some(Value::Array(_)) => {
            return Err(bad(&format!("at most {MAX_RESOURCE_SUBSCRIPTIONS} resourceSubscriptions")))
        }
        Some(_) => return Err(bad("\"resourceSubscriptions\" must be an array")),
    }
    // ext-tasks "Task Status Notifications": taskIds from a client without the extension
    // MUST get -32021. The gateway does not push task status (clients poll tasks/get), so a
    // declaring client's taskIds are left out of the acknowledgment.
    if n.contains_key("taskIds") && !declares_tasks {
        return Err(GatewayError::MissingClientCapability {
            message: "task status notifications need the tasks extension".into(),
            required: json!({ "extensions": { revision_2026::TASKS_EXTENSION: {} } }),
        });
    }
    Ok(f)
}

fn event(message: &Value) -> Bytes {
    Bytes::from(format!("event: message\ndata: {message}\n\n"))
}

/// Ends the listen's session when its stream goes, whoever closes it.
struct EndSession {
    gateway: Gateway,
    session: String,
    identity: Identity,
}

impl Drop for EndSession {
    fn drop(&mut self) {
        let (gateway, session, identity) = (self.gateway.clone(), self.session.clone(), self.identity.clone());
        actix_web::rt::spawn(async move {
            let _ = gateway.end_session(&session, &identity).await;
        });
    }
}

pub(super) async fn serve(
    gateway: &Gateway,
    identity: Identity,
    id: RequestId,
    params: Option<Value>,
    request_meta: &RequestMeta,
    state: &Arc<Front2026>,
    endpoint: &taskgate_core::tenants::profiles::Endpoint,
) -> Result<HttpResponse, GatewayError> {
    let wanted = filter(params.as_ref(), request_meta.declares_tasks())?;
    // The session declares no client capabilities: nothing on it can ask the client anything.
    let client_info = request_meta.client_info.clone().filter(|c| c.get("name").is_some_and(Value::is_string));
    let init = json!({
        "protocolVersion": taskgate_protocol::mcp::LATEST_PROTOCOL_VERSION,
        "capabilities": {},
        "clientInfo": client_info.unwrap_or_else(|| json!({"name": "listen", "version": "0"})),
    });
    let catalog = gateway.catalog_ready(Some(&init)).await;
    let (session_id, _) = gateway.initialize_listener(identity.clone(), Some(&init), catalog, endpoint.clone()).await?;
    let end = EndSession { gateway: gateway.clone(), session: session_id.clone(), identity: identity.clone() };
    let session = gateway.session(&session_id, &identity)?;
    let mut stream = session.open_stream().await?;
    let offered = gateway.server_capabilities(&identity.tenant);
    let mut accepted = serde_json::Map::new();
    if wanted.tools {
        accepted.insert("toolsListChanged".into(), json!(true));
    }
    // Prompt and resource list changes come from the upstreams' sessions: listing once opens
    // them.
    for (asked, capability, method, key) in [
        (wanted.prompts, "prompts", methods::PROMPTS_LIST, "promptsListChanged"),
        (wanted.resources, "resources", methods::RESOURCES_LIST, "resourcesListChanged"),
    ] {
        if asked && offered.get(capability).and_then(|c| c.get("listChanged")) == Some(&json!(true)) {
            let messages = session.request(state.internal_id(), method.into(), None).await?;
            drain(messages).await;
            accepted.insert(key.into(), json!(true));
        }
    }
    let mut uris = Vec::new();
    if !wanted.uris.is_empty() && offered.get("resources").and_then(|c| c.get("subscribe")) == Some(&json!(true)) {
        for uri in &wanted.uris {
            let messages = session
                .request(state.internal_id(), methods::RESOURCES_SUBSCRIBE.into(), Some(json!({ "uri": uri })))
                .await?;
            if drain(messages).await {
                uris.push(uri.clone());
            }
        }
    }
    if !uris.is_empty() {
        accepted.insert("resourceSubscriptions".into(), json!(uris));
    }
    let subscription = id.to_value();
    let ack = json!({
        "jsonrpc": "2.0",
        "method": revision_2026::methods::SUBSCRIPTIONS_ACKNOWLEDGED,
        "params": { "_meta": { meta::SUBSCRIPTION_ID: subscription }, "notifications": accepted },
    });
    let mut pending = vec![event(&ack)];
    let mut keep_alive = tokio::time::interval_at(tokio::time::Instant::now() + KEEP_ALIVE, KEEP_ALIVE);
    let mut done = false;
    let body = futures_util::stream::poll_fn(move |cx| loop {
        let _hold = &end;
        if !pending.is_empty() {
            return Poll::Ready(Some(Ok::<_, std::convert::Infallible>(pending.remove(0))));
        }
        if done {
            return Poll::Ready(None);
        }
        match stream.poll_recv(cx) {
            Poll::Ready(Some(frame)) => {
                let Ok(mut message) = serde_json::from_str::<Value>(&frame.json) else { continue };
                let method = message.get("method").and_then(Value::as_str).unwrap_or_default();
                let wanted = match method {
                    methods::TOOLS_LIST_CHANGED => accepted_flag(&ack, "toolsListChanged"),
                    methods::PROMPTS_LIST_CHANGED => accepted_flag(&ack, "promptsListChanged"),
                    methods::RESOURCES_LIST_CHANGED => accepted_flag(&ack, "resourcesListChanged"),
                    methods::RESOURCES_UPDATED => {
                        let uri = message.get("params").and_then(|p| p.get("uri")).and_then(Value::as_str);
                        ack["params"]["notifications"]["resourceSubscriptions"]
                            .as_array()
                            .is_some_and(|u| u.iter().any(|s| s.as_str() == uri))
                    }
                    _ => false,
                };
                if !wanted || message.get("id").is_some() {
                    continue;
                }
                // basic/patterns/subscriptions "Receiving Notifications": tagged with the id.
                let params = message.as_object_mut().map(|m| m.entry("params").or_insert_with(|| json!({})));
                if let Some(Value::Object(params)) = params {
                    let meta = params.entry("_meta").or_insert_with(|| json!({}));
                    meta[meta::SUBSCRIPTION_ID] = subscription.clone();
                }
                return Poll::Ready(Some(Ok(event(&message))));
            }
            Poll::Ready(None) => {
                // "Graceful Closure": the gateway ends the subscription with its result.
                done = true;
                let result = json!({ "resultType": "complete", "_meta": { meta::SUBSCRIPTION_ID: subscription } });
                pending.push(event(&Message::response(id.clone(), result).to_value()));
            }
            Poll::Pending => {
                if keep_alive.poll_tick(cx).is_ready() {
                    return Poll::Ready(Some(Ok(Bytes::from_static(b": keep-alive\n\n"))));
                }
                return Poll::Pending;
            }
        }
    });
    Ok(HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(body))
}

fn accepted_flag(ack: &Value, key: &str) -> bool {
    ack["params"]["notifications"].get(key) == Some(&json!(true))
}

/// Reads a request's messages to its end; whether it succeeded.
async fn drain(mut messages: taskgate_core::outbound::OutboundReceiver) -> bool {
    let mut ok = false;
    while let Some(frame) = messages.recv().await {
        if frame.response {
            // A result, not an error object (a result may well contain the text "error").
            ok = serde_json::from_str::<Value>(&frame.json).is_ok_and(|m| m.get("result").is_some());
        }
    }
    ok
}
