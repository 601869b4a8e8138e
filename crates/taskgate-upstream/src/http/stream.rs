//! Reading a response stream: SSE events, or (a server in transition) a JSON body of one
//! message a line; the awaited response ends the reading, and what else the upstream sends
//! goes on toward the client.

use taskgate_protocol::pass_through::Reply as Received;
use taskgate_protocol::sse::Decoder;
use taskgate_protocol::{Message, Payload, RequestId};

use super::HttpChannel;
use crate::client::Reply;
use crate::routes::Incoming;
use crate::wire::ChannelError;

impl HttpChannel {
    /// Reads SSE events: messages other than the awaited response go to the session's owner.
    /// Returns the awaited response's outcome (its result kept as text when the request's
    /// result is passed through), or `None` when the stream ends without it.
    pub(super) async fn read_stream(
        &self,
        mut response: Reply,
        awaiting: Option<(&RequestId, bool)>,
        sink: Option<&crate::Sender<Message>>,
    ) -> Result<Option<Payload>, ChannelError> {
        let passing = awaiting.and_then(|(id, pass)| pass.then(|| id.clone()));
        let awaiting = awaiting.map(|(id, _)| id);
        let mut decoder = Decoder::new(self.max_message_bytes);
        loop {
            let chunk = match response.chunk().await {
                Ok(Some(chunk)) => chunk,
                Ok(None) => return Ok(None),
                Err(e) => return Err(self.unavailable(e.0).into()),
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
                    Ok(Ok(m)) => m,
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
