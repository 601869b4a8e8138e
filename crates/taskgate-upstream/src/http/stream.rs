//! Reading a response stream: SSE events, or (a server in transition) a JSON body of one
//! message a line; the awaited response ends the reading, and what else the upstream sends
//! goes on toward the client.

use std::time::Duration;

use taskgate_protocol::pass_through::Reply as Received;
use taskgate_protocol::sse::Decoder;
use taskgate_protocol::{Message, Payload, RequestId};

use super::HttpChannel;
use crate::client::Reply;
use crate::routes::Incoming;
use crate::wire::ChannelError;

/// Resumptions of one call's stream at most.
const MAX_RESUMPTIONS: u32 = 1_000;
/// The shortest wait before a resumption (a `retry: 0` is not a tight loop).
const MIN_RESUME_WAIT: Duration = Duration::from_millis(10);

/// Where a stream stood when it ended without the awaited response: what resuming it needs
/// (basic/transports "Resumability and Redelivery").
#[derive(Debug, Default)]
pub(super) struct Cursor {
    /// The id of the last event that carried one: the `Last-Event-ID` to resume with.
    pub last_id: Option<String>,
    /// The reconnection time the upstream asked for last, in milliseconds.
    pub retry_ms: Option<u64>,
    /// Messages read from the stream (and its resumptions) so far.
    pub messages: usize,
    /// Why the connection broke, when it did not end cleanly.
    pub broken: Option<String>,
}

impl HttpChannel {
    /// Reads SSE events: messages other than the awaited response go to the session's owner.
    /// Returns the awaited response's outcome (its result kept as text when the request's
    /// result is passed through), or `None` when the stream ends without it; `cursor` then
    /// says where it stood (a broken connection is such an end, its reason kept there).
    pub(super) async fn read_stream(
        &self,
        mut response: Reply,
        awaiting: Option<(&RequestId, bool)>,
        sink: Option<&crate::Sender<Message>>,
        cursor: &mut Cursor,
    ) -> Result<Option<Payload>, ChannelError> {
        let passing = awaiting.and_then(|(id, pass)| pass.then(|| id.clone()));
        let awaiting = awaiting.map(|(id, _)| id);
        let mut decoder = Decoder::new(self.max_message_bytes);
        loop {
            let chunk = match response.chunk().await {
                Ok(Some(chunk)) => chunk,
                ended => {
                    cursor.broken = ended.err().map(|e| e.0);
                    if let Some(id) = decoder.last_event_id() {
                        cursor.last_id = Some(id.to_owned());
                    }
                    cursor.retry_ms = decoder.retry_ms().or(cursor.retry_ms);
                    return Ok(None);
                }
            };
            let events = decoder.feed_chunk(chunk).map_err(|_| {
                self.protocol(format!("an SSE event exceeds max_message_bytes ({})", self.max_message_bytes))
            })?;
            for event in events {
                if event.data.trim().is_empty() {
                    continue; // priming event or keep-alive
                }
                let passing = passing.clone();
                let reply = crate::decode_text(event.data, move |got| passing.as_ref() == Some(got));
                let message = match reply.await {
                    Ok(Ok(m)) => {
                        cursor.messages += 1;
                        m
                    }
                    Ok(Err(e)) => {
                        tracing::warn!(upstream = %self.name, error = %e, "upstream sent an invalid JSON-RPC message; dropped");
                        continue;
                    }
                    Err(e) => {
                        tracing::warn!(upstream = %self.name, error = %e, "upstream sent an SSE event that is not JSON; dropped");
                        continue;
                    }
                };
                match self.on_stream(message, awaiting, sink).await {
                    Streamed::Next => {}
                    Streamed::Done(outcome) => return outcome,
                }
            }
        }
    }

    /// Reads the SSE stream answering request `id`, resuming it when the upstream closes it
    /// before the response (basic/transports "Sending Messages to the Server" 6: a server MAY
    /// close the connection without ending the stream, and "The client MUST respect the `retry`
    /// field, waiting the given number of milliseconds before attempting to reconnect";
    /// "Resumability and Redelivery": resumption is always via HTTP GET with `Last-Event-ID`).
    /// The wait is the upstream's `retry` (1 s if it gave none), at most `resume_wait_max_ms`;
    /// the call's stream toward the client is told, so that it may close the same way. A stream
    /// that ends with no event id cannot be resumed: the call fails, saying the stream ended.
    pub(super) async fn read_resuming(
        &self,
        response: Reply,
        id: &RequestId,
        pass: bool,
        sink: Option<&crate::Sender<Message>>,
    ) -> Result<Payload, ChannelError> {
        let mut cursor = Cursor::default();
        match self.read_stream(response, Some((id, pass)), sink, &mut cursor).await? {
            Some(outcome) => Ok(outcome),
            // Boxed: rare, and the common call's future stays as small as it was.
            None => Box::pin(self.resumed(cursor, id, pass, sink)).await,
        }
    }

    /// The resumptions of a stream that ended where `cursor` says, until the response.
    async fn resumed(
        &self,
        mut cursor: Cursor,
        id: &RequestId,
        pass: bool,
        sink: Option<&crate::Sender<Message>>,
    ) -> Result<Payload, ChannelError> {
        // Consecutive resumptions that brought nothing back off, so a server closing at once
        // each time is not asked again and again; and there are at most MAX_RESUMPTIONS.
        let mut idle_backoff = Duration::ZERO;
        let mut resumptions = 0;
        let mut before = cursor.messages;
        loop {
            // streamable-http (2026-07-28): a stream is not resumed; the request is sent again.
            let last = cursor.last_id.clone().filter(|_| !self.is_2026() && resumptions < MAX_RESUMPTIONS);
            let Some(last) = last else {
                return Err(match cursor.broken.take() {
                    Some(why) => self.unavailable(why).into(),
                    None if resumptions > 0 => {
                        self.unavailable(format!("its stream closed {resumptions} times without the response")).into()
                    }
                    None => self.unavailable("the response stream ended before the response arrived").into(),
                });
            };
            idle_backoff = match resumptions > 0 && cursor.messages == before {
                true => (idle_backoff * 2).clamp(Duration::from_millis(100), Duration::from_secs(5)),
                false => Duration::ZERO,
            };
            resumptions += 1;
            let asked = Duration::from_millis(cursor.retry_ms.unwrap_or(1_000));
            let wait = asked.min(self.resume_wait_max).max(idle_backoff).max(MIN_RESUME_WAIT);
            if let Some(sink) = sink.filter(|_| cursor.broken.is_none()) {
                let paused = serde_json::json!({ "retryMs": wait.as_millis() as u64 });
                let _ = sink.send(Message::notification(taskgate_protocol::sse::PAUSED, Some(paused))).await;
            }
            tracing::debug!(upstream = %self.name, last_event_id = %last, wait_ms = wait.as_millis() as u64, "the upstream closed a call's stream before its response; resuming it");
            tokio::time::sleep(wait).await;
            let response = self.resume(&last).await?;
            before = cursor.messages;
            if let Some(outcome) = self.read_stream(response, Some((id, pass)), sink, &mut cursor).await? {
                return Ok(outcome);
            }
        }
    }

    /// `GET` with `Last-Event-ID`: the rest of a stream the upstream closed early.
    async fn resume(&self, last_event_id: &str) -> Result<Reply, ChannelError> {
        let mut headers = self.headers();
        headers.insert(reqwest::header::ACCEPT, reqwest::header::HeaderValue::from_static("text/event-stream"));
        let last = reqwest::header::HeaderValue::from_str(last_event_id)
            .map_err(|_| self.protocol("its SSE event id is not a valid header value"))?;
        headers.insert(reqwest::header::HeaderName::from_static("last-event-id"), last);
        let response = self.send_request(reqwest::Method::GET, headers, bytes::Bytes::new()).await?;
        let status = response.status();
        let response = self.check_status(response).await?;
        if !super::is_media(super::content_type(&response), "text/event-stream") {
            return Err(self
                .unavailable(format!("it closed the call's stream and refused to resume it (HTTP {status})"))
                .into());
        }
        Ok(response)
    }

    /// A JSON body of several messages, one a line (what some servers in transition write for
    /// a call with notifications): each is taken as an SSE event's would be. `Err` when a line
    /// is not a JSON-RPC message.
    pub(super) async fn read_lines(
        &self,
        body: Vec<u8>,
        id: &RequestId,
        pass: bool,
        sink: Option<&crate::Sender<Message>>,
    ) -> Result<Option<Payload>, ChannelError> {
        let text = String::from_utf8(body).map_err(|_| self.protocol("the response is not UTF-8"))?;
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let passing = pass.then(|| id.clone());
            let message = crate::decode_text(line.to_owned(), move |got| passing.as_ref() == Some(got))
                .await
                .map_err(|e| self.protocol(e.to_string()))?
                .map_err(|e| self.protocol(e.to_string()))?;
            match self.on_stream(message, Some(id), sink).await {
                Streamed::Next => {}
                Streamed::Done(outcome) => return outcome,
            }
        }
        Ok(None)
    }

    /// One message read from a response stream: the awaited response ends the reading; what
    /// else the upstream sends goes on toward the client.
    async fn on_stream(
        &self,
        message: Received,
        awaiting: Option<&RequestId>,
        sink: Option<&crate::Sender<Message>>,
    ) -> Streamed {
        if let Some(id) = awaiting {
            if message.is_response() {
                return match self.outcome(id, message) {
                    Some(outcome) => Streamed::Done(outcome.map(Some)),
                    None => {
                        tracing::warn!(upstream = %self.name, "upstream sent a response for another request on this stream; dropped");
                        Streamed::Next
                    }
                };
            }
        }
        let message = message.into_message();
        if message.method() == Some(taskgate_protocol::sse::PAUSED) {
            // The gateway's own signal: an upstream never sends it (one that does is ignored).
            return Streamed::Next;
        }
        // Notifications on a request's own stream belong to it and reach its caller in
        // order, before its response. Requests go to the session's owner to be relayed.
        // A cancellation names one of the upstream's own requests: it goes the way requests
        // go, so that it is mapped to the id the client knows.
        // Requests on a request's stream go with its notifications, in order, so that
        // they reach the client before the response does.
        if self.is_2026() && matches!(message, Message::Request { .. }) {
            // streamable-http "Receiving Messages": a modern server MUST NOT send requests on a
            // response stream (MRTR replaces them). A server in transition still does: the
            // request is relayed like a legacy server's, for a client that can answer it.
            tracing::debug!(upstream = %self.name, method = ?message.method(), "a 2026-07-28 upstream sent a request on a response stream; relayed");
        }
        let is_cancel = message.method() == Some(taskgate_protocol::mcp::methods::CANCELLED);
        let is_ping = message.method() == Some(taskgate_protocol::mcp::methods::PING);
        let delivered = match (&message, sink, awaiting) {
            (Message::Notification { .. }, Some(sink), _) if !is_cancel => {
                let _ = sink.send(message).await;
                true
            }
            (Message::Request { .. }, Some(sink), Some(_)) if !is_ping => {
                let _ = sink.send(message).await;
                true
            }
            (_, _, Some(related)) => {
                self.incoming.send(Box::new(Incoming { message, related: Some(related.clone()) })).await.is_ok()
            }
            (_, _, None) => self.routes.deliver(message, &self.incoming).await,
        };
        match delivered {
            true => Streamed::Next,
            false => Streamed::Done(Ok(None)),
        }
    }
}

/// What reading one message of a response stream leads to.
enum Streamed {
    /// Read on.
    Next,
    /// The reading ends: the awaited outcome, or `None` when it will not come here.
    Done(Result<Option<Payload>, ChannelError>),
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use taskgate_config::UpstreamConfig;
    use tokio::sync::{mpsc, watch};

    use super::*;
    use crate::client::HttpClient;
    use crate::http::Connections;
    use crate::wire::Encoded;
    use crate::UpstreamError;

    /// A one-shot HTTP server on 127.0.0.1:0 that answers its first request with `body`,
    /// `Content-Type: application/json`; the channel is pointed at it.
    async fn answering(body: &'static str) -> (HttpChannel, mpsc::Receiver<Box<Incoming>>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut request = Vec::new();
            let mut buf = [0u8; 4096];
            // Headers, then the Content-Length body (a small request).
            while !request.windows(4).any(|w| w == b"\r\n\r\n") || !request.ends_with(b"}") {
                let n = socket.read(&mut buf).await.unwrap();
                request.extend_from_slice(&buf[..n]);
            }
            let head =
                format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n", body.len());
            socket.write_all(head.as_bytes()).await.unwrap();
            socket.write_all(body.as_bytes()).await.unwrap();
        });
        let config = UpstreamConfig::http("lines", url);
        let client = HttpClient::new(config.url.as_deref(), 1, Duration::from_secs(1));
        let (incoming_tx, incoming) = mpsc::channel(8);
        let (_, closed) = watch::channel(false);
        let connections = Connections::new("lines", 1, None);
        (HttpChannel::new(&config, client, incoming_tx, Arc::default(), closed, connections, None), incoming)
    }

    fn call() -> Encoded {
        Encoded::of(&Message::request(RequestId::Number(7), "tools/call", Some(serde_json::json!({"name": "t"}))))
    }

    #[tokio::test]
    async fn a_json_body_of_one_message_a_line_is_read_as_a_streams_events() {
        // What a server in transition writes: the call's progress, then its response.
        let body = "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"p\",\"progress\":1}}\n{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"content\":[]}}";
        let (channel, _incoming) = answering(body).await;
        let (sink, mut notes) = crate::events::channel(8);
        let outcome = channel.request(&call(), Some(&sink), &[]).await.map_err(|_| "failed").unwrap();
        assert_eq!(outcome.into_value(), serde_json::json!({"content": []}));
        let note = notes.try_recv().expect("the notification reached the call's sink");
        assert_eq!(note.method(), Some("notifications/progress"));
    }

    #[tokio::test]
    async fn a_2026_upstreams_request_on_a_calls_stream_is_relayed_like_a_2025_upstreams() {
        // A server in transition asks its client on the call's stream, which a 2026-07-28
        // server must not do: the request goes on toward the client all the same.
        let body = "{\"jsonrpc\":\"2.0\",\"id\":\"e1\",\"method\":\"elicitation/create\",\"params\":{\"message\":\"?\"}}\n{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"content\":[]}}";
        let (channel, _incoming) = answering(body).await;
        channel.set_2026();
        let (sink, mut asked) = crate::events::channel(8);
        let outcome = channel.request(&call(), Some(&sink), &[]).await.map_err(|_| "failed").unwrap();
        assert_eq!(outcome.into_value(), serde_json::json!({"content": []}));
        let request = asked.try_recv().expect("the request reached the call's sink");
        assert_eq!(
            (request.method(), request.id()),
            (Some("elicitation/create"), Some(&RequestId::String("e1".into())))
        );
    }

    #[tokio::test]
    async fn an_upstream_sending_the_gateways_own_pause_signal_is_ignored() {
        let body = "{\"jsonrpc\":\"2.0\",\"method\":\"taskgate/streamPaused\",\"params\":{\"retryMs\":999999999}}\n{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"content\":[]}}";
        let (channel, _incoming) = answering(body).await;
        let (sink, mut notes) = crate::events::channel(8);
        let outcome = channel.request(&call(), Some(&sink), &[]).await.map_err(|_| "failed").unwrap();
        assert_eq!(outcome.into_value(), serde_json::json!({"content": []}));
        assert!(notes.try_recv().is_none(), "nothing reached the call's sink");
    }

    #[tokio::test]
    async fn a_json_body_that_is_neither_one_message_nor_lines_of_them_is_refused() {
        for body in [
            "{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}} trailing",
            "{not json\n{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}",
        ] {
            let (channel, _incoming) = answering(body).await;
            match channel.request(&call(), None, &[]).await {
                Err(ChannelError::Failed(UpstreamError::Protocol { reason, .. })) => {
                    assert!(reason.contains("not JSON"), "{reason}")
                }
                Err(_) => panic!("{body}: another error"),
                Ok(_) => panic!("{body}: taken"),
            }
        }
    }
}
