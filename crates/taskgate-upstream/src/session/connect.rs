//! Connecting an upstream session: the revision probe (`server/discover`), a legacy session's
//! `initialize`, a 2026-07-28 session's state, and noticing that the upstream's revision moved.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use taskgate_config::{Transport, UpstreamProtocol};
use taskgate_protocol::mcp::{self, methods};
use taskgate_protocol::Message;
use tokio::sync::mpsc;

use super::{pump, Ready, UpstreamSession, GET_STREAM_WAIT, INCOMING_BUFFER};
use crate::http::HttpChannel;
use crate::revision_2026::{Spoken, State2026, ToolHeaders, Verdict, NO_ANSWER};
use crate::stdio::StdioChannel;
use crate::transport::Channel;
use crate::wire::{ChannelError, Encoded};
use crate::UpstreamError;

impl UpstreamSession {
    /// The session's connection; when the revision cached for the upstream failed at
    /// `initialize` (which forgot it), connects again, probing (basic/versioning: re-probe when
    /// the cached assumption later fails).
    pub(super) async fn connect_probing(&self) -> Result<Arc<Ready>, UpstreamError> {
        match Box::pin(self.connect()).await {
            Err(e) if is_revision_refusal(&e) && self.inner.endpoint.spoken().is_none() => {
                Box::pin(self.connect()).await
            }
            other => other,
        }
    }

    /// Whether `error` shows that the upstream no longer speaks the revision `ready` was opened
    /// with, having refused the request unprocessed (basic/versioning: re-probe when the cached
    /// assumption later fails). If so, the revision is forgotten (or learnt) and the session
    /// ends, so that the next connection finds the upstream as it is now.
    pub(super) async fn revision_moved(&self, ready: &Ready, error: &UpstreamError) -> bool {
        let endpoint = &self.inner.endpoint;
        if endpoint.config().protocol != UpstreamProtocol::Auto {
            return false;
        }
        let Channel::Http(http) = &ready.channel else {
            // A process keeps its revision for life; the next one is probed unless it was
            // learnt legacy, and a refused `initialize` forgets that (`initialize`).
            if ready.state_2026.is_some() && is_revision_refusal(error) {
                endpoint.learn(None);
            }
            return false;
        };
        let moved = match &ready.state_2026 {
            // A 2026-only server refusing a legacy request: `UnsupportedProtocolVersionError`.
            None => is_revision_refusal(error),
            // A modern upstream refusing 2026-07-28 itself: the probe says what it speaks now.
            Some(_) if is_revision_refusal(error) => true,
            // A modern request refused as a legacy server refuses one: ask the upstream.
            Some(_) if http.take_doubt() => match self.probe(&ready.channel, self.inner.endpoint.probe_wait).await {
                Ok(Verdict::V2025(why)) => {
                    tracing::info!(upstream = self.upstream(), %why, "upstream answers as a legacy server now");
                    true
                }
                _ => false,
            },
            Some(_) => false,
        };
        if moved {
            tracing::info!(upstream = self.upstream(), "upstream's revision changed; connecting again");
            endpoint.learn(None);
            http.expire();
        }
        moved
    }

    /// The session, connected: [`Self::connect`], with a revision refusal named as the
    /// upstream's.
    pub(super) async fn ready(&self) -> Result<Arc<Ready>, UpstreamError> {
        Box::pin(self.connect()).await.map_err(|e| self.revision_refusal_named(e))
    }

    /// The session, connecting (probing, initializing) first if it is not.
    async fn connect(&self) -> Result<Arc<Ready>, UpstreamError> {
        let mut state = self.inner.state.lock().await;
        if let Some(ready) = state.as_ref().filter(|r| r.channel.is_alive()) {
            return Ok(ready.clone());
        }
        let started = std::time::Instant::now();
        let outcome = self.initialize(&mut state).await;
        self.observe(methods::INITIALIZE, started, &outcome);
        outcome
    }

    /// An upstream's `UnsupportedProtocolVersionError` is about the revision the gateway sent
    /// it, not the client's: passed on, it would tell the client that the gateway does not
    /// speak the client's version. It becomes an error naming the upstream.
    pub(super) fn revision_refusal_named(&self, error: UpstreamError) -> UpstreamError {
        match error {
            UpstreamError::Rpc { upstream, error }
                if error.code == taskgate_protocol::codes::UNSUPPORTED_PROTOCOL_VERSION =>
            {
                let supported = error.data.as_ref().and_then(|d| d.get("supported")).cloned().unwrap_or(Value::Null);
                UpstreamError::Protocol {
                    upstream,
                    reason: format!(
                        "it refused the revision taskgate speaks to it ({}; it supports {supported})",
                        error.message
                    ),
                }
            }
            other => other,
        }
    }

    async fn initialize(&self, state: &mut Option<Arc<Ready>>) -> Result<Arc<Ready>, UpstreamError> {
        if let Some(ready) = state.as_ref().filter(|r| r.channel.is_alive()) {
            return Ok(ready.clone());
        }
        let name = self.upstream().to_owned();
        if *self.inner.closed.borrow() {
            return Err(UpstreamError::Unavailable { upstream: name, reason: "the session is closed".into() });
        }
        if let Some(old) = state.take() {
            old.channel.shutdown().await;
        }
        let config = self.inner.endpoint.config();
        let (incoming_tx, incoming_rx) = mpsc::channel(INCOMING_BUFFER);
        let channel = match config.transport {
            Transport::Http => Channel::Http(Arc::new(HttpChannel::new(
                config,
                self.inner.endpoint.http.clone(),
                incoming_tx,
                self.inner.routes.clone(),
                self.inner.closed.subscribe(),
                self.inner.endpoint.connections.clone(),
                self.inner.endpoint.authorizer(self.inner.caller.get()),
            ))),
            Transport::Stdio => {
                let permit = self.inner.endpoint.process_place_waiting(self.inner.process_share.get()).await?;
                let stop_signals = self.inner.endpoint.stop_signals();
                let spawned =
                    StdioChannel::spawn(config, permit, incoming_tx, self.inner.routes.clone(), stop_signals)?;
                Channel::Stdio(Arc::new(spawned))
            }
        };
        tokio::spawn(pump(Arc::downgrade(&self.inner), incoming_rx));

        let endpoint = &self.inner.endpoint;
        // A stdio probe that got no answer in time: a legacy server that ignores requests before
        // `initialize`, or a modern one still starting (an `npx` download, a busy machine).
        let mut unanswered = false;
        // A 2026-07-28 upstream's legacy side tried for a 2025-11-25 client: what the probe
        // found, to go on in 2026-07-28 on this connection if `initialize` is refused.
        let mut side_2026: Option<Value> = None;
        // A dual-era upstream, known: a 2025-11-25 client's session opens with `initialize`
        // (basic/versioning: "An `initialize` request selects legacy semantics").
        let known_dual = endpoint.spoken() == Some(Spoken::V2026)
            && endpoint.has_2025_side()
            && endpoint.tries_2025_side(&self.inner.identity);
        if endpoint.spoken() != Some(Spoken::V2025) && !known_dual {
            let verdict = match self.probe(&channel, endpoint.probe_wait).await {
                Ok(verdict) => verdict,
                Err(e) => {
                    channel.shutdown().await;
                    return Err(e);
                }
            };
            match verdict {
                Verdict::V2026(discovered) => {
                    endpoint.learn(Some(Spoken::V2026));
                    if crate::revision_2026::declares_tasks_extension(&discovered) {
                        endpoint.learn_2025_side(false);
                    }
                    if !endpoint.tries_2025_side(&self.inner.identity) {
                        return Ok(self.ready_2026(channel, &discovered, state));
                    }
                    side_2026 = Some(discovered);
                    if let Channel::Http(http) = &channel {
                        http.clear_protocol_version();
                    }
                }
                Verdict::V2025(why) if config.protocol == UpstreamProtocol::V2026 => {
                    channel.shutdown().await;
                    return Err(UpstreamError::Protocol {
                        upstream: name,
                        reason: format!(
                            "it is configured as protocol \"2026-07-28\" but answers as a legacy server: {why}"
                        ),
                    });
                }
                Verdict::V2025(why) => {
                    unanswered = why == NO_ANSWER;
                    tracing::info!(upstream = %name, %why, "upstream speaks a legacy revision; initializing");
                    // Silence is learnt only once `initialize` is answered.
                    if !unanswered {
                        endpoint.learn(Some(Spoken::V2025));
                    }
                    if let Channel::Http(http) = &channel {
                        http.clear_protocol_version();
                    }
                }
            }
        }

        let init = Message::request(
            self.next_request_id(),
            methods::INITIALIZE,
            Some(json!({
                "protocolVersion": mcp::LATEST_PROTOCOL_VERSION,
                "capabilities": self.inner.identity.capabilities,
                "clientInfo": self.inner.identity.client_info,
            })),
        );
        let init = Encoded::of(&init);
        let sent = channel.request(&init, None, &[]);
        let answered = match (&side_2026, &channel) {
            // A modern-only stdio server may not answer `initialize` at all.
            (Some(_), Channel::Stdio(_)) => {
                tokio::time::timeout(endpoint.probe_wait, sent).await.unwrap_or(Err(ChannelError::Expired))
            }
            _ => sent.await,
        };
        let result = match answered {
            Ok(result) => result,
            // A 2026-07-28 upstream without a legacy side: this client's sessions speak
            // 2026-07-28 to it, translated.
            Err(
                refused @ (ChannelError::Expired
                | ChannelError::Failed(UpstreamError::Rpc { .. } | UpstreamError::Protocol { .. })),
            ) if side_2026.is_some() => {
                let why = match &refused {
                    ChannelError::Failed(e) => e.to_string(),
                    ChannelError::Expired => "no answer in time".into(),
                };
                tracing::info!(upstream = %name, %why, "upstream speaks 2026-07-28 only; translating for 2025-11-25 clients");
                endpoint.learn_2025_side(false);
                if matches!((&refused, &channel), (ChannelError::Expired, Channel::Stdio(_))) {
                    // An `initialize` answered late would make this process a 2025-11-25 one
                    // (basic/versioning: "scoped to the stdio process"): a new process serves.
                    channel.shutdown().await;
                    return Box::pin(self.initialize(state)).await;
                }
                let discovered = side_2026.unwrap_or_default();
                return Ok(self.ready_2026(channel, &discovered, state));
            }
            // The server refuses `initialize` for its revision: it took the late probe as the
            // revision of this connection (a modern server that was slow to start). Asked
            // again, it says so at once.
            Err(ChannelError::Failed(e)) if unanswered && is_revision_refusal(&e) => {
                tracing::info!(upstream = %name, "upstream answered the probe late; it speaks 2026-07-28");
                let wait = Duration::from_secs(config.timeout_secs.max(1));
                match self.probe(&channel, wait).await {
                    Ok(Verdict::V2026(discovered)) => {
                        endpoint.learn(Some(Spoken::V2026));
                        return Ok(self.ready_2026(channel, &discovered, state));
                    }
                    _ => {
                        channel.shutdown().await;
                        endpoint.learn(None);
                        return Err(self.revision_refusal_named(e));
                    }
                }
            }
            Err(e) => {
                channel.shutdown().await;
                let e = self.expired_twice(e);
                if matches!(e, UpstreamError::Rpc { .. } | UpstreamError::Protocol { .. }) {
                    // The upstream may have moved to 2026-07-28: probe again next time
                    // (basic/versioning: re-probe when the cached assumption fails).
                    endpoint.learn(None);
                }
                return Err(e);
            }
        };
        if let (Some(discovered), Channel::Http(http)) = (&side_2026, &channel) {
            if !http.has_session() {
                // A stateless 2025-11-25 side (each request served by a fresh instance) cannot
                // take an answer to what it asks its client: its 2026-07-28 side serves these
                // clients better, translated (input requests ask within the request).
                tracing::info!(upstream = %name, "upstream's 2025-11-25 side keeps no sessions; translating for 2025-11-25 clients");
                endpoint.learn_2025_side(false);
                return Ok(self.ready_2026(channel, discovered, state));
            }
        }
        let version = result.get("protocolVersion").and_then(Value::as_str).unwrap_or_default().to_owned();
        if side_2026.is_some() && !mcp::is_supported_version(&version) {
            // A 2025-11-25 side in a version the gateway does not speak: its session ends, and
            // a new connection serves these clients translated.
            tracing::info!(upstream = %name, %version, "upstream's 2025-11-25 side negotiates a version taskgate does not speak; translating");
            endpoint.learn_2025_side(false);
            channel.shutdown().await;
            return Box::pin(self.initialize(state)).await;
        }
        if !mcp::is_supported_version(&version) {
            channel.shutdown().await;
            return Err(UpstreamError::Protocol {
                upstream: name,
                reason: format!("it negotiated protocol version {version:?}, which taskgate does not speak"),
            });
        }
        if let Channel::Http(http) = &channel {
            http.set_protocol_version(&version);
        }
        if unanswered {
            endpoint.learn(Some(Spoken::V2025));
        }
        if side_2026.is_some() {
            tracing::info!(upstream = %name, %version, "upstream speaks 2026-07-28 and 2025-11-25; 2025-11-25 clients use the latter");
            endpoint.learn_2025_side(true);
        }
        channel.send(&Message::notification(methods::INITIALIZED, None)).await.map_err(|e| self.expired_twice(e))?;
        if let Channel::Http(http) = &channel {
            // When wanted, the GET stream is open before the first request goes out: a server
            // that sends a request for its client on it (elicitation during the first call)
            // would otherwise send it to no stream, and the call would hang until its timeout.
            let opened = http.clone().listen(self.listening());
            if tokio::time::timeout(GET_STREAM_WAIT, opened).await.is_err() {
                tracing::debug!(upstream = %name, "the GET stream did not open in time; going on without waiting");
            }
        }
        let mut result = result;
        let server_capabilities =
            endpoint.shared_capabilities(result.get_mut("capabilities").map_or_else(|| json!({}), Value::take));
        tracing::debug!(upstream = %name, %version, "upstream session initialized");
        let ready = Arc::new(Ready { channel, server_capabilities, state_2026: None });
        *state = Some(ready.clone());
        Ok(ready)
    }

    /// Asks the upstream which revision it speaks with a modern `server/discover`
    /// (basic/versioning "Backward Compatibility"; over HTTP with the modern headers).
    async fn probe(&self, channel: &Channel, wait: Duration) -> Result<Verdict, UpstreamError> {
        let name = self.upstream().to_owned();
        let identity = &self.inner.identity;
        let mut params = json!({});
        let meta = State2026::new(&name, false, identity, &json!({}), ToolHeaders::default());
        meta.stamp(&mut params, false);
        let discover = Message::request(
            self.next_request_id(),
            taskgate_protocol::revision_2026::methods::SERVER_DISCOVER,
            Some(params),
        );
        let (status, outcome) = match channel {
            Channel::Http(http) => {
                let headers = [(
                    crate::revision_2026::METHOD_HEADER,
                    reqwest::header::HeaderValue::from_static(
                        taskgate_protocol::revision_2026::methods::SERVER_DISCOVER,
                    ),
                )];
                http.set_protocol_version(taskgate_protocol::revision_2026::PROTOCOL_VERSION);
                let (status, outcome) = http.probe(&discover, &headers).await?;
                (Some(status.as_u16()), outcome)
            }
            Channel::Stdio(stdio) => match tokio::time::timeout(wait, stdio.request(&Encoded::of(&discover))).await {
                Ok(Ok(result)) => (None, Some(Ok(result.into_value()))),
                Ok(Err(ChannelError::Failed(UpstreamError::Rpc { error, .. }))) => (None, Some(Err(*error))),
                Ok(Err(ChannelError::Failed(e))) => return Err(e),
                Ok(Err(ChannelError::Expired)) | Err(_) => (None, None),
            },
        };
        crate::revision_2026::classify(status, outcome)
            .map_err(|reason| UpstreamError::Unavailable { upstream: name, reason })
    }

    /// A modern upstream's session: nothing to initialize; the listen stream opens for what
    /// the upstream announces.
    fn ready_2026(&self, channel: Channel, discovered: &Value, state: &mut Option<Arc<Ready>>) -> Arc<Ready> {
        let http = matches!(channel, Channel::Http(_));
        if let Channel::Http(c) = &channel {
            c.set_2026();
        }
        let tool_headers = self.inner.endpoint.tool_headers.clone();
        let modern = Arc::new(State2026::new(self.upstream(), http, &self.inner.identity, discovered, tool_headers));
        channel.subscribe(self, &modern);
        tracing::debug!(upstream = self.upstream(), "upstream speaks 2026-07-28");
        let server_capabilities = self.inner.endpoint.shared_capabilities(modern.capabilities.clone());
        let ready = Arc::new(Ready { channel, server_capabilities, state_2026: Some(modern) });
        *state = Some(ready.clone());
        ready
    }
}

/// An upstream's `UnsupportedProtocolVersionError`: it does not speak the revision it was sent.
fn is_revision_refusal(error: &UpstreamError) -> bool {
    matches!(error, UpstreamError::Rpc { error, .. } if error.code == taskgate_protocol::codes::UNSUPPORTED_PROTOCOL_VERSION)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ClientIdentity, Connector};
    use taskgate_config::UpstreamConfig;

    /// A 2026-07-28 stdio server slow to start: it answers `server/discover` only once the next
    /// request arrives, and then, its connection pinned to 2026-07-28 by that first request,
    /// refuses `initialize` (-32022) as such a server does.
    const SLOW_2026: &str = r#"
import json, sys
held = None
def send(m): sys.stdout.write(json.dumps(m) + "\n"); sys.stdout.flush()
def discovered(i): return {"jsonrpc": "2.0", "id": i, "result": {"supportedVersions": ["2026-07-28"],
    "capabilities": {"tools": {}}, "resultType": "complete", "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "slow", "version": "1"}}}}
for line in sys.stdin:
    m = json.loads(line)
    if "id" not in m: continue
    if m["method"] == "server/discover" and held is None and m.get("id") is not None and not globals().get("pinned"):
        held = m["id"]; continue
    if held is not None:
        send(discovered(held)); held = None; pinned = True
    if m["method"] == "initialize":
        send({"jsonrpc": "2.0", "id": m["id"], "error": {"code": -32022, "message": "connection is serving 2026-07-28",
              "data": {"supported": ["2026-07-28"], "requested": "2025-11-25"}}})
    elif m["method"] == "server/discover":
        send(discovered(m["id"]))
    elif m["method"] == "tools/list":
        send({"jsonrpc": "2.0", "id": m["id"], "result": {"resultType": "complete", "tools": [{"name": "t", "inputSchema": {"type": "object"}}]}})
"#;

    #[tokio::test]
    async fn a_modern_stdio_server_that_answers_the_probe_late_is_taken_for_modern() {
        let config = UpstreamConfig::stdio("slow", "python3", vec!["-c".into(), SLOW_2026.into()]);
        // The probe's wait passes before the server answers, whatever the machine's speed.
        let connector = Connector::with_probe_wait(config, Duration::from_millis(1));
        let session = connector.open(ClientIdentity::gateway(), crate::event_channel(8).0);
        let capabilities = session.server_capabilities().await.expect("the session is ready");
        assert!(capabilities.get("tools").is_some(), "{capabilities}");
        let listed = session.request(methods::TOOLS_LIST, None).await.unwrap();
        assert_eq!(listed["tools"][0]["name"], "t");
        assert_eq!(session.inner.endpoint.spoken(), Some(Spoken::V2026), "learnt for the upstream's next sessions");
    }
}
