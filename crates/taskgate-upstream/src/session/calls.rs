//! An upstream session's requests, from the caller's call to the outcome: the progress route
//! and the place among the calls in flight held meanwhile, the timeout, a retry in a new session
//! (404) or in the upstream's new revision, and a legacy stdio call waiting for its answer.

use std::task::Poll;
use std::time::Duration;

use serde_json::Value;
use taskgate_protocol::{Message, Payload, RawArguments, RequestId};

use super::in_flight::CallGuard;
use super::revision_2025::Revision2025;
use super::{Ready, UpstreamSession};
use crate::revision::Revision;
use crate::revision_2026::Revision2026;
use crate::routes::TokenRoute;
use crate::shared::MemberCall;
use crate::transport::Channel;
use crate::wire::Encoded;
use crate::UpstreamError;
use std::sync::Arc;

/// A request's params as its call holds them until they go: as a message has them, or boxed
/// (a wrapped task's call, which waits for its task's life, keeps a word for them, not a
/// `Value`).
trait Params: Send {
    /// The params as a tree (without arguments passed as written: nothing reads those).
    fn value(&self) -> Option<&Value>;
    /// The whole params as a tree, taken.
    fn take_value(&mut self) -> Option<Value>;
    /// The request written for a legacy session, the params taken.
    fn encode(&mut self, id: &RequestId, method: &str) -> Encoded {
        Encoded::request(id.clone(), method, self.take_value().as_ref())
    }
}

/// A request's params, with a `tools/call`'s arguments as the client wrote them
/// ([`UpstreamSession::request_payload`]).
struct Passing {
    params: Option<Value>,
    arguments: Option<RawArguments>,
}

impl Params for Passing {
    fn value(&self) -> Option<&Value> {
        self.params.as_ref()
    }

    /// The arguments back in the params (a 2026-07-28 session rewrites the params).
    fn take_value(&mut self) -> Option<Value> {
        let mut params = self.params.take();
        if let Some(arguments) = self.arguments.take() {
            arguments.restore(&mut params);
        }
        params
    }

    fn encode(&mut self, id: &RequestId, method: &str) -> Encoded {
        let arguments = self.arguments.take();
        Encoded::passing(id.clone(), method, self.params.take().as_ref(), arguments.as_ref())
    }
}

impl Params for Option<Value> {
    fn value(&self) -> Option<&Value> {
        self.as_ref()
    }

    fn take_value(&mut self) -> Option<Value> {
        self.take()
    }
}

impl Params for Option<Box<Value>> {
    fn value(&self) -> Option<&Value> {
        self.as_deref()
    }

    fn take_value(&mut self) -> Option<Value> {
        self.take().map(|params| *params)
    }
}

/// A request started: its outcome, or the call waiting for its answer.
enum Started<'m> {
    Done(Result<Payload, UpstreamError>),
    Waiting(WaitingCall<'m>),
}

/// What a wrapped task's call is once sent ([`UpstreamSession::into_call`]).
pub enum CallState {
    /// Its outcome.
    Done(Result<Value, UpstreamError>),
    /// Written to a stdio upstream, waiting for its answer: poll it for the outcome.
    Waiting(WaitingCall<'static>),
}

/// A call written to a stdio upstream and waiting for its answer, holding what its call held
/// while it waits: the pending entry, its deadline, its progress route, its place among the
/// calls in flight and its member's, and what the metrics need at the end. Dropped unanswered
/// (a cancelled task), it gives all of them back. A few words, not the state of the layers
/// that sent the request: a wrapped task's call waits in it for the task's life.
pub struct WaitingCall<'m> {
    session: UpstreamSession,
    id: RequestId,
    method: &'m str,
    started: std::time::Instant,
    wait: crate::stdio::StdioWait,
    deadline: std::pin::Pin<Box<tokio::time::Sleep>>,
    route: Option<String>,
    asks: bool,
    /// In a shared session: the member's call, and whether it creates a task.
    member: Option<bool>,
}

impl std::future::Future for WaitingCall<'_> {
    type Output = Result<Payload, UpstreamError>;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        // Answered first, as `tokio::time::timeout` polls its future first.
        let outcome = match std::pin::Pin::new(&mut this.wait).poll(cx) {
            Poll::Ready(answer) => this.session.answered(answer.map_err(|e| this.session.expired_twice(e))),
            Poll::Pending => {
                std::task::ready!(this.deadline.as_mut().poll(cx));
                Err(this.session.timed_out())
            }
        };
        Poll::Ready(this.session.observed(this.method, this.started, outcome))
    }
}

impl Drop for WaitingCall<'_> {
    fn drop(&mut self) {
        let inner = &self.session.inner;
        if let Some(key) = &self.route {
            inner.routes.by_token.lock().remove(key);
        }
        if self.asks {
            inner.calls.lock().remove(&self.id);
        }
        if let (Some(creates_task), Some(member)) = (self.member, &self.session.member) {
            member.ended(&self.id, creates_task);
        }
    }
}

/// A request sent: its outcome, or (a legacy stdio session's) what waits for it.
enum Sent {
    Done(Result<Payload, UpstreamError>),
    Waiting(crate::stdio::StdioWait),
}

impl UpstreamSession {
    /// Sends a request and waits for its result, initializing the session first if needed.
    pub async fn request(&self, method: &str, params: Option<Value>) -> Result<Value, UpstreamError> {
        self.request_with_id(self.next_request_id(), method, params).await
    }

    /// [`Self::request`] with an id from [`Self::next_request_id`].
    pub async fn request_with_id(
        &self,
        id: RequestId,
        method: &str,
        params: Option<Value>,
    ) -> Result<Value, UpstreamError> {
        self.request_routed(id, method, params, None).await
    }

    /// Sends a request; notifications about it (those on its response stream, and progress
    /// naming its token) and requests the upstream sends on its response stream (other than
    /// `ping`) go to `related`, each before the result is returned, in the order sent. (The
    /// message is made here: the future holds it once.)
    pub fn request_routed<'a>(
        &'a self,
        id: RequestId,
        method: &str,
        params: Option<Value>,
        related: Option<crate::Sender<Message>>,
    ) -> impl std::future::Future<Output = Result<Value, UpstreamError>> + 'a {
        self.request_message(Message::request(id, method, params), related)
    }

    /// [`UpstreamSession::request_routed`] of a request already made (`message` is a request).
    // Not an async fn: one keeps its arguments twice in its state (as passed, and moved into
    // its body); this block uses them where they are.
    #[allow(clippy::manual_async_fn)]
    pub fn request_message<'a>(
        &'a self,
        mut message: Message,
        related: Option<crate::Sender<Message>>,
    ) -> impl std::future::Future<Output = Result<Value, UpstreamError>> + 'a {
        async move { self.run(&mut message, related.as_ref(), false).await.map(Payload::into_value) }
    }

    /// [`UpstreamSession::request_routed`], its result as a [`Payload`]. With `pass` (a caller
    /// that passes the result on without looking inside, as a plain `tools/call`'s), over a
    /// 2025-11-25 session the result stays the text the upstream wrote ([`Payload::Raw`]), read
    /// only as far as checking that it is JSON and an object. (A 2026-07-28 upstream's result
    /// is read: the gateway rewrites it.) A `tools/call`'s `arguments`, when the front door
    /// kept them as the client wrote them ([`RawArguments`]), go so to a 2025-11-25 session:
    /// never read into a tree nor written again; a 2026-07-28 session gets them in the params
    /// it rewrites.
    #[allow(clippy::manual_async_fn)]
    pub fn request_payload<'a>(
        &'a self,
        id: RequestId,
        method: &'a str,
        params: Option<Value>,
        arguments: Option<RawArguments>,
        related: Option<crate::Sender<Message>>,
        pass: bool,
    ) -> impl std::future::Future<Output = Result<Payload, UpstreamError>> + 'a {
        async move {
            let mut params = Passing { params, arguments };
            self.run_parts(&id, method, &mut params, related.as_ref(), pass).await
        }
    }

    /// A request with the session moved in, for a call that outlives its caller (a wrapped
    /// task's): its outcome, or, over a legacy stdio session, the call waiting for its answer
    /// ([`CallState::Waiting`]), which the caller keeps and polls: a wrapped task's call then
    /// waits with no task of its own. Only its id, method and params are kept until then (its
    /// params until they go). Not an async fn, for the same reason as
    /// [`Self::request_message`].
    #[allow(clippy::manual_async_fn)]
    pub fn into_call(
        self,
        id: RequestId,
        method: &'static str,
        mut params: Option<Box<Value>>,
    ) -> impl std::future::Future<Output = CallState> + 'static {
        async move {
            match self.start_call(&id, method, &mut params, None, false).await {
                Started::Done(outcome) => CallState::Done(outcome.map(Payload::into_value)),
                Started::Waiting(waiting) => CallState::Waiting(waiting),
            }
        }
    }

    /// Runs `message` (a request): [`Self::run_parts`].
    async fn run(
        &self,
        message: &mut Message,
        related: Option<&crate::Sender<Message>>,
        pass: bool,
    ) -> Result<Payload, UpstreamError> {
        let Message::Request { id, method, params } = message else { unreachable!("a request") };
        self.run_parts(id, method, params, related, pass).await
    }

    /// Runs a request, its progress routed and the call counted in flight meanwhile. Its params
    /// are taken when it goes (a call holds them only as the text sent, or not at all).
    async fn run_parts<P: Params>(
        &self,
        id: &RequestId,
        method: &str,
        params: &mut P,
        related: Option<&crate::Sender<Message>>,
        pass: bool,
    ) -> Result<Payload, UpstreamError> {
        match self.start_call(id, method, params, related, pass).await {
            Started::Done(outcome) => outcome,
            Started::Waiting(waiting) => waiting.await,
        }
    }

    /// Sends a request, its progress routed and the call counted in flight meanwhile: its
    /// outcome, or, once a legacy stdio request is written, the call waiting for its answer
    /// ([`WaitingCall`], which holds all that from then on).
    async fn start_call<'m, P: Params>(
        &self,
        id: &RequestId,
        method: &'m str,
        params: &mut P,
        related: Option<&crate::Sender<Message>>,
        pass: bool,
    ) -> Started<'m> {
        let route = TokenRoute::new(&self.inner.routes, params.value(), related);
        let call = CallGuard::new(&self.inner.calls, id, method);
        // In a shared session, what the upstream sends about this request reaches this member.
        let member =
            self.member.as_ref().map(|member| member.call(id, params.value().is_some_and(|p| p.get("task").is_some())));
        let started = std::time::Instant::now();
        let deadline = tokio::time::sleep(self.timeout());
        tokio::pin!(deadline);
        // The deadline first, each time the call is polled, while the budget of work tokio
        // grants a task per poll is whole: a sender that always has more to hand over (an
        // upstream flooding notifications) can then never hold the timeout back.
        let sent = tokio::select! {
            biased;
            () = &mut deadline => return Started::Done(self.observed(method, started, Err(self.timed_out()))),
            sent = Box::pin(self.send(id, method, params, related, pass)) => sent,
        };
        match sent {
            Sent::Done(outcome) => Started::Done(self.observed(method, started, self.answered(outcome))),
            Sent::Waiting(wait) => Started::Waiting(WaitingCall {
                session: self.clone(),
                id: id.clone(),
                method,
                started,
                wait,
                deadline: Box::pin(tokio::time::sleep_until(deadline.deadline())),
                route: route.keep(),
                asks: call.keep(),
                member: member.map(MemberCall::keep),
            }),
        }
    }

    /// `outcome`, counted in the upstream's metrics.
    fn observed(
        &self,
        method: &str,
        started: std::time::Instant,
        outcome: Result<Payload, UpstreamError>,
    ) -> Result<Payload, UpstreamError> {
        self.observe(method, started, &outcome);
        outcome
    }

    /// How long a request may take.
    fn timeout(&self) -> Duration {
        Duration::from_secs(self.inner.endpoint.config().timeout_secs)
    }

    fn timed_out(&self) -> UpstreamError {
        UpstreamError::Timeout { upstream: self.upstream().into(), after: self.timeout() }
    }

    /// A request's outcome as its caller gets it.
    fn answered(&self, outcome: Result<Payload, UpstreamError>) -> Result<Payload, UpstreamError> {
        match outcome {
            // Every MCP result is an object (schema.ts `Result`); `null` or a bare value is the
            // upstream's mistake, answered as one, never passed on.
            Ok(result) if !result.is_object() => Err(UpstreamError::Protocol {
                upstream: self.upstream().into(),
                reason: format!("its result is {}, not an object", result.json_kind()),
            }),
            result => result.map_err(|e| self.revision_refusal_named(e)),
        }
    }

    /// Sends a request: over a legacy stdio session, until it is written (what waits for its
    /// answer is returned); otherwise until it is answered. Over a legacy session the request
    /// is held as the JSON text it goes as (`Encoded`), not as parsed params.
    async fn send<P: Params>(
        &self,
        id: &RequestId,
        method: &str,
        params: &mut P,
        related: Option<&crate::Sender<Message>>,
        pass: bool,
    ) -> Sent {
        let ready = match Box::pin(self.connect_probing()).await {
            Ok(ready) => ready,
            Err(e) => return Sent::Done(Err(e)),
        };
        if ready.state_2026.is_some() {
            return Sent::Done(Box::pin(self.attempt_2026(ready, id, method, params.take_value(), related)).await);
        }
        let mut request = params.encode(id, method);
        request.pass = pass;
        if let Channel::Stdio(stdio) = &ready.channel {
            // A process has no session to expire and keeps its revision for life (a legacy
            // session's failure is never sent again: `after_failure`), so once written the
            // request needs nothing but its answer. Its progress and the requests the process
            // sends about it are routed by the guards `run` holds.
            return match stdio.start(&request).await {
                Ok(wait) => Sent::Waiting(wait),
                Err(e) => Sent::Done(Err(self.expired_twice(e))),
            };
        }
        // The outcome is taken apart before the retry's wait, so that it takes no room in the
        // state the call waits in.
        let error = match (Revision2025 { session: self, ready: &ready }).send(&request, related).await {
            Err(e) => e,
            outcome => return Sent::Done(outcome),
        };
        Sent::Done(Box::pin(self.after_failure(ready, error, &request, related)).await)
    }

    /// A request in a 2026-07-28 session. Its params stay for one retry in another revision,
    /// should the upstream have moved. (A future of its own, boxed by its caller: a legacy
    /// call's waiting state takes no room for it.)
    async fn attempt_2026(
        &self,
        ready: Arc<Ready>,
        id: &RequestId,
        method: &str,
        params: Option<Value>,
        related: Option<&crate::Sender<Message>>,
    ) -> Result<Payload, UpstreamError> {
        let outcome = {
            let state = ready.state_2026.as_ref().expect("a 2026-07-28 session");
            let revision = Revision2026 { session: self, ready: &ready, state };
            revision.request(id.clone(), method, params.clone(), related.cloned()).await
        };
        match outcome {
            Err(e) => {
                let request = Encoded::request(id.clone(), method, params.as_ref());
                drop(params);
                Box::pin(self.after_failure(ready, e, &request, related)).await
            }
            outcome => outcome.map(Payload::Value),
        }
    }

    /// A request that failed: when the upstream refused it unprocessed because it no longer
    /// speaks the revision the session was opened with, it goes again, once, in the revision a
    /// new probe finds; any other failure stands.
    async fn after_failure(
        &self,
        ready: Arc<Ready>,
        error: UpstreamError,
        request: &Encoded,
        related: Option<&crate::Sender<Message>>,
    ) -> Result<Payload, UpstreamError> {
        if !self.revision_moved(&ready, &error).await {
            return Err(error);
        }
        drop(ready);
        let ready = self.ready().await?;
        speaking(self, &ready).send(request, related).await
    }

    /// A request the upstream answered with 404 (it expired the session), sent again once in a
    /// new session.
    pub(super) async fn renewed(
        &self,
        request: &Encoded,
        related: Option<&crate::Sender<Message>>,
    ) -> Result<Payload, UpstreamError> {
        tracing::info!(upstream = self.upstream(), "upstream expired the session; initializing again");
        let ready = self.ready().await?;
        match speaking(self, &ready) {
            // Once only: a session expired again at once is the upstream's failure.
            Speaking::V2025(_) => {
                ready.channel.request_payload(request, related, &[]).await.map_err(|e| self.expired_twice(e))
            }
            Speaking::V2026(revision) => Box::pin(revision.send(request, related)).await,
        }
    }

    /// Sends a notification (initializing first if needed).
    pub async fn notify(&self, method: &str, params: Option<Value>) -> Result<(), UpstreamError> {
        let ready = self.ready().await?;
        speaking(self, &ready).notify(method, params).await
    }
}

/// The revision a session speaks, as its type.
enum Speaking<'a> {
    V2025(Revision2025<'a>),
    V2026(Revision2026<'a>),
}

fn speaking<'a>(session: &'a UpstreamSession, ready: &'a Ready) -> Speaking<'a> {
    match &ready.state_2026 {
        Some(state) => Speaking::V2026(Revision2026 { session, ready, state }),
        None => Speaking::V2025(Revision2025 { session, ready }),
    }
}

impl Revision for Speaking<'_> {
    async fn send(
        &self,
        request: &Encoded,
        related: Option<&crate::Sender<Message>>,
    ) -> Result<Payload, UpstreamError> {
        match self {
            Speaking::V2025(revision) => revision.send(request, related).await,
            // Boxed: rare (a retry after the upstream moved), and kept out of a call's state.
            Speaking::V2026(revision) => Box::pin(revision.send(request, related)).await,
        }
    }

    async fn notify(&self, method: &str, params: Option<Value>) -> Result<(), UpstreamError> {
        match self {
            Speaking::V2025(revision) => revision.notify(method, params).await,
            Speaking::V2026(revision) => revision.notify(method, params).await,
        }
    }
}
