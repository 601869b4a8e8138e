//! The Rust SDK (`rmcp` 3.9.0, pinned) as a 2026-07-28 upstream with the tasks extension, served
//! in this process on 127.0.0.1:0 by its own Streamable HTTP service. Its tools:
//! - `echo`: a plain result; a task (completed at once… by the upstream's choice) when the
//!   request declares the extension;
//! - `progress`: reports each value as progress on the request's stream, then answers;
//! - `work`: a task that waits until the test opens its gate, or until it is cancelled (counted);
//! - `ask`: a task that asks for the user's name (`inputRequests`, answered by `tasks/update`);
//! - `only_task`: runs only as a task (-32021 to a request without the extension);
//! - `slow`: never a task: reports progress 1, then answers once the test opens its own gate
//!   (a call cancelled or dropped before is counted);
//! - `confirm`: asks for the user's name before anything else (`input_required`), then, with
//!   the answer, runs as a task when the request declares the extension.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ContentBlock, CreateTaskResult,
    InputRequest, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::task_manager::{TaskExit, TaskManager, TaskOptions};
use rmcp::transport::streamable_http_server::{
    session::never::NeverSessionManager, StreamableHttpServerConfig, StreamableHttpService,
};
use rmcp::{ErrorData as McpError, ServerHandler};
use serde_json::{json, Value};
use tokio::sync::Notify;

/// What the test sees of the server: its gate and what happened.
#[derive(Default)]
pub struct Observed {
    /// Opened by the test: `work` tasks complete.
    pub gate: Notify,
    /// `work` tasks cancelled through `tasks/cancel`.
    pub cancelled: AtomicUsize,
    /// Tasks created.
    pub tasks: AtomicUsize,
    /// Raised at each cancellation.
    pub changed: Notify,
    /// The ids of the tasks it created (which no client of the gateway may ever see).
    pub ids: parking_lot::Mutex<Vec<String>>,
    /// Opened by the test: `slow` calls answer.
    pub slow_gate: Notify,
    /// `slow` calls abandoned before they answered.
    pub slow_abandoned: AtomicUsize,
}

/// Counts a `slow` call dropped before it answered.
struct Abandoned(Arc<Observed>, bool);

impl Drop for Abandoned {
    fn drop(&mut self) {
        if !self.1 {
            self.0.slow_abandoned.fetch_add(1, Ordering::Relaxed);
            self.0.changed.notify_waiters();
        }
    }
}

impl Observed {
    /// Waits until `count` tasks have been cancelled.
    pub async fn cancelled(&self, count: usize) {
        self.reaches(&self.cancelled, count).await
    }

    /// Waits until `count` `slow` calls have been abandoned.
    pub async fn abandoned(&self, count: usize) {
        self.reaches(&self.slow_abandoned, count).await
    }

    async fn reaches(&self, counter: &AtomicUsize, count: usize) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if counter.load(Ordering::Relaxed) >= count {
                return;
            }
            changed.await;
        }
    }
}

/// The tasks extension's methods of a handler whose `tasks` field is its `TaskManager`.
macro_rules! task_methods {
    () => {
        async fn get_task(
            &self,
            request: rmcp::model::GetTaskParams,
            _: rmcp::service::RequestContext<rmcp::service::RoleServer>,
        ) -> Result<rmcp::model::GetTaskResult, rmcp::ErrorData> {
            Ok(rmcp::model::GetTaskResult::new(self.tasks.get_task(&request.task_id)?))
        }

        async fn update_task(
            &self,
            request: rmcp::model::UpdateTaskParams,
            _: rmcp::service::RequestContext<rmcp::service::RoleServer>,
        ) -> Result<(), rmcp::ErrorData> {
            self.tasks.update_task(&request.task_id, request.input_responses)
        }

        async fn cancel_task(
            &self,
            request: rmcp::model::CancelTaskParams,
            _: rmcp::service::RequestContext<rmcp::service::RoleServer>,
        ) -> Result<(), rmcp::ErrorData> {
            self.tasks.cancel_task(&request.task_id)
        }
    };
}
pub(crate) use task_methods;

#[derive(Clone)]
struct TaskServer {
    tasks: TaskManager,
    observed: Arc<Observed>,
}

pub(crate) fn text(t: impl Into<String>) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(t.into())])
}

pub(crate) fn tool(name: &str, description: &str, properties: Value) -> Tool {
    serde_json::from_value(json!({
        "name": name,
        "description": description,
        "inputSchema": {"type": "object", "properties": properties},
    }))
    .expect("a valid tool")
}

impl TaskServer {
    fn spawn_task<F>(&self, make: F) -> CallToolResponse
    where
        F: FnOnce(
                rmcp::task_manager::TaskContext,
            )
                -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<CallToolResult, TaskExit>> + Send>>
            + Send
            + 'static,
    {
        self.observed.tasks.fetch_add(1, Ordering::Relaxed);
        let task = self.tasks.spawn(TaskOptions::new().with_poll_interval_ms(20), make);
        self.observed.ids.lock().push(task.task_id.clone());
        CallToolResponse::Task(CreateTaskResult::new(task))
    }
}

impl ServerHandler for TaskServer {
    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(vec![
            tool("echo", "Echoes its text", json!({"text": {"type": "string"}})),
            tool(
                "progress",
                "Reports each value as progress",
                json!({"values": {"type": "array", "items": {"type": "number"}}}),
            ),
            tool("work", "A task that waits at a gate", json!({})),
            tool("ask", "A task that asks the user's name", json!({})),
            tool("only_task", "Runs only as a task", json!({"text": {"type": "string"}})),
            tool("slow", "Answers once the test's gate opens", json!({})),
            tool("confirm", "Asks the user's name first", json!({})),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let tasks = context.client_capabilities().is_some_and(|caps: ClientCapabilities| caps.supports_tasks());
        let args = Value::Object(request.arguments.clone().unwrap_or_default());
        let said = args["text"].as_str().unwrap_or_default().to_owned();
        match (request.name.as_ref(), tasks) {
            ("echo", false) => Ok(text(said).into()),
            ("echo", true) => Ok(self.spawn_task(move |_| Box::pin(async move { Ok(text(said)) }))),
            ("progress", _) => {
                let values: Vec<f64> = args["values"].as_array().into_iter().flatten().filter_map(Value::as_f64).collect();
                if let Some(token) = context.meta.get_progress_token() {
                    for value in &values {
                        let param = serde_json::from_value(json!({"progressToken": token, "progress": value, "total": 100}))
                            .expect("progress params");
                        let _ = context.peer.notify_progress(param).await;
                    }
                }
                Ok(text(format!("reported {} values", values.len())).into())
            }
            ("work", true) => {
                let observed = self.observed.clone();
                Ok(self.spawn_task(move |ctx| {
                    Box::pin(async move {
                        tokio::select! {
                            _ = ctx.cancelled() => {
                                observed.cancelled.fetch_add(1, Ordering::Relaxed);
                                observed.changed.notify_waiters();
                                Err(TaskExit::Cancelled)
                            }
                            _ = observed.gate.notified() => Ok(text("the gate opened")),
                        }
                    })
                }))
            }
            ("ask", true) => Ok(self.spawn_task(move |ctx| {
                Box::pin(async move {
                    let ask: InputRequest = serde_json::from_value(json!({
                        "method": "elicitation/create",
                        "params": {"mode": "form", "message": "Your name?", "requestedSchema": {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}},
                    }))
                    .expect("an elicitation");
                    let answer = ctx.request_input("name", ask).await?;
                    Ok(text(format!("answer: {}", answer["content"]["answer"].as_str().unwrap_or_default())))
                })
            })),
            ("slow", _) => {
                let mut abandoned = Abandoned(self.observed.clone(), false);
                if let Some(token) = context.meta.get_progress_token() {
                    let param = serde_json::from_value(json!({"progressToken": token, "progress": 1, "total": 2}))
                        .expect("progress params");
                    let _ = context.peer.notify_progress(param).await;
                }
                // A request cancelled (its stream closed) has its token cancelled by the SDK.
                tokio::select! {
                    _ = self.observed.slow_gate.notified() => {
                        abandoned.1 = true;
                        Ok(text("slow: done").into())
                    }
                    _ = context.ct.cancelled() => Err(McpError::internal_error("cancelled", None)),
                }
            }
            ("confirm", _) => {
                let answer = request.input_responses.as_ref().and_then(|r| {
                    let r = serde_json::to_value(r).ok()?;
                    r.pointer("/name/content/answer").and_then(Value::as_str).map(str::to_owned)
                });
                match (answer, tasks) {
                    (None, _) => {
                        let asking: rmcp::model::InputRequiredResult = serde_json::from_value(json!({
                            "resultType": "input_required",
                            "inputRequests": {"name": {"method": "elicitation/create", "params": {"mode": "form",
                                "message": "Your name first?", "requestedSchema": {"type": "object",
                                "properties": {"answer": {"type": "string"}}, "required": ["answer"]}}}},
                            "requestState": "confirm-1",
                        }))
                        .expect("an input_required result");
                        Ok(CallToolResponse::InputRequired(asking))
                    }
                    (Some(name), true) => {
                        Ok(self.spawn_task(move |_| Box::pin(async move { Ok(text(format!("confirmed: {name}"))) })))
                    }
                    (Some(name), false) => Ok(text(format!("confirmed: {name}")).into()),
                }
            }
            ("only_task", true) => Ok(self.spawn_task(move |_| Box::pin(async move { Ok(text(format!("task: {said}"))) }))),
            ("work" | "ask" | "only_task", false) => Err(McpError::missing_required_client_capability(
                ClientCapabilities::builder().enable_tasks().build(),
            )),
            (other, _) => Err(McpError::invalid_params(format!("unknown tool {other}"), None)),
        }
    }

    task_methods!();

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_tasks().build())
    }
}

/// The server, listening; dropped with the test's runtime.
pub struct RmcpTaskServer {
    pub url: String,
    pub observed: Arc<Observed>,
}

impl RmcpTaskServer {
    pub async fn start() -> RmcpTaskServer {
        let observed = Arc::new(Observed::default());
        let tasks = TaskManager::new();
        let shared = observed.clone();
        let url = serve(move || TaskServer { tasks: tasks.clone(), observed: shared.clone() }).await;
        RmcpTaskServer { url, observed }
    }
}

/// Serves the handlers `make` makes by rmcp's own Streamable HTTP service, 2026-07-28 only
/// (no sessions), on 127.0.0.1:0 for the test's runtime: its URL.
pub async fn serve<H: ServerHandler>(make: impl Fn() -> H + Send + Sync + 'static) -> String {
    let config = StreamableHttpServerConfig::default().with_legacy_session_mode(false);
    let service = StreamableHttpService::new(move || Ok(make()), Arc::new(NeverSessionManager::default()), config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let service = hyper_util::service::TowerToHyperService::new(service.clone());
            tokio::spawn(async move {
                let io = hyper_util::rt::TokioIo::new(stream);
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
            });
        }
    });
    url
}
