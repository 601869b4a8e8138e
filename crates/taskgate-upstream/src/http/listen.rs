//! An HTTP session's long-lived streams: the GET stream (streamable-http "Listening for Messages
//! from the Server"), open while something receives what it carries, and a 2026-07-28
//! upstream's `subscriptions/listen` stream; each reopened with a backoff when it drops.

use super::{content_type, is_media, HttpChannel};
use crate::client::Reply;
use crate::revision_2026::METHOD_HEADER;
use crate::wire::ChannelError;
use bytes::Bytes;
use reqwest::header::{HeaderValue, ACCEPT};
use reqwest::{Method, StatusCode};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use taskgate_protocol::sse::Decoder;
use taskgate_protocol::Message;
use tokio::sync::watch;

/// Longest wait between attempts to reopen the GET stream.
const MAX_LISTEN_BACKOFF: Duration = Duration::from_secs(30);

/// Counts a long-lived stream as open (metrics) for as long as it lives.
struct Counted<'a> {
    channel: &'a HttpChannel,
}

impl<'a> Counted<'a> {
    fn new(channel: &'a HttpChannel) -> Counted<'a> {
        if let Some(observer) = &channel.connections.observer {
            observer.stream(&channel.name, true);
        }
        Counted { channel }
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        if let Some(observer) = &self.channel.connections.observer {
            observer.stream(&self.channel.name, false);
        }
    }
}

impl HttpChannel {
    /// Keeps the session's GET stream open for messages the upstream sends on its own. The
    /// returned receiver settles once the first attempt has: the stream is open (the upstream
    /// has answered its headers), or there is none to be had.
    pub(crate) fn listen(
        self: Arc<Self>,
        mut listening: crate::routes::Listening,
    ) -> tokio::sync::oneshot::Receiver<()> {
        let (settled, first) = tokio::sync::oneshot::channel();
        let mut settled = Some(settled);
        tokio::spawn(async move {
            if !listening.wanted() {
                // Until something needs the stream, the task is this small future; the loop
                // (about 2.5 KB of state) is allocated only then. Nobody waits meanwhile.
                settle(&mut settled);
                if !until_wanted(&mut listening, &mut self.closed.clone()).await {
                    return;
                }
            }
            Box::pin(self.listen_loop(listening, settled)).await
        });
        first
    }

    /// The GET stream's loop (see [`Self::listen`]).
    async fn listen_loop(
        self: Arc<Self>,
        mut listening: crate::routes::Listening,
        mut settled: Option<tokio::sync::oneshot::Sender<()>>,
    ) {
        {
            let mut closed = self.closed.clone();
            let mut backoff = Duration::from_millis(250);
            loop {
                if *closed.borrow() || !self.is_alive() {
                    return;
                }
                if !listening.wanted() {
                    // Nothing to receive what the stream would carry: nobody waits for it.
                    settle(&mut settled);
                    if !until_wanted(&mut listening, &mut closed).await {
                        return;
                    }
                    continue;
                }
                let Some(_connection) = self.connections.for_stream() else {
                    // No connection to spare for it under max_connections: try again later
                    // (nobody waits for it meanwhile).
                    tracing::debug!(upstream = %self.name, "no connection free for the GET stream; waiting");
                    settle(&mut settled);
                    if !back_off(&mut backoff, &mut closed).await {
                        return;
                    }
                    continue;
                };
                let mut headers = self.headers();
                headers.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
                let attempt = self.send_request(Method::GET, headers, Bytes::new());
                let outcome = tokio::select! {
                    r = attempt => r,
                    _ = closed.changed() => return,
                };
                match outcome {
                    Ok(r) if r.status() == StatusCode::METHOD_NOT_ALLOWED => {
                        // No GET stream offered.
                        self.stream.send_replace(None);
                        return;
                    }
                    Ok(r) => match self.check_status(r).await {
                        Ok(r) if is_media(content_type(&r), "text/event-stream") => {
                            backoff = Duration::from_millis(250);
                            settle(&mut settled);
                            self.stream.send_replace(Some(true));
                            let _counted = Counted::new(&self);
                            let mut cursor = super::stream::Cursor::default();
                            let unneeded = tokio::select! {
                                _ = self.read_stream(r, None, None, &mut cursor) => false,
                                _ = closed.changed() => return,
                                _ = unwanted(&mut listening, self.stream_idle) => true,
                            };
                            self.stream.send_replace(Some(false));
                            if unneeded {
                                tracing::debug!(upstream = %self.name, "GET stream closed: nothing has needed it for a while");
                                continue;
                            }
                        }
                        Ok(_) => {
                            tracing::warn!(upstream = %self.name, "GET stream answered without text/event-stream; not listening");
                            self.stream.send_replace(None);
                            return;
                        }
                        Err(ChannelError::Expired) => return,
                        Err(ChannelError::Failed(e)) => {
                            tracing::debug!(upstream = %self.name, error = %e, "GET stream failed")
                        }
                    },
                    Err(e) => tracing::debug!(upstream = %self.name, error = %e, "GET stream failed"),
                }
                // The first attempt failed: nobody waits for the retries.
                settle(&mut settled);
                if !back_off(&mut backoff, &mut closed).await {
                    return;
                }
            }
        }
    }

    /// Waits (at most `wait`) until the GET stream is open, unless the upstream offers none:
    /// for a request whose effects come on it (`resources/subscribe`).
    pub(crate) async fn stream_opened(&self, wait: Duration) {
        let mut state = self.stream.subscribe();
        let _ = tokio::time::timeout(wait, state.wait_for(|open| *open != Some(false))).await;
    }

    /// Keeps a 2026-07-28 `subscriptions/listen` stream open while `filter` names something to
    /// listen for (basic/patterns/subscriptions) and something can receive what it carries
    /// (`listening`, as for a GET stream), in place of the legacy GET stream: reopened with the
    /// new filter when it changes, and after a backoff when the stream ends; closed after the
    /// idle time once nothing needs it. What it carries goes where a GET stream's messages go.
    pub(crate) fn subscribe(
        self: Arc<Self>,
        mut filter: watch::Receiver<Option<Value>>,
        request: Box<dyn Fn(Value) -> Message + Send>,
        mut listening: crate::routes::Listening,
    ) {
        tokio::spawn(async move {
            let mut closed = self.closed.clone();
            let mut backoff = Duration::from_millis(250);
            let listen = HeaderValue::from_static(taskgate_protocol::revision_2026::methods::SUBSCRIPTIONS_LISTEN);
            loop {
                if *closed.borrow() {
                    return;
                }
                let wanted = filter.borrow_and_update().clone();
                let Some(wanted) = wanted.filter(|_| listening.wanted()) else {
                    tokio::select! {
                        changed = filter.changed() => if changed.is_err() { return },
                        changed = listening.holds.changed() => if changed.is_err() { return },
                        _ = closed.changed() => return,
                    }
                    continue;
                };
                let Some(_connection) = self.connections.for_stream() else {
                    tracing::debug!(upstream = %self.name, "no connection free for subscriptions/listen; waiting");
                    if !back_off(&mut backoff, &mut closed).await {
                        return;
                    }
                    continue;
                };
                let message = request(wanted);
                let headers = [(METHOD_HEADER, listen.clone())];
                let opened = tokio::select! {
                    r = self.post(message.to_json().into(), &headers) => r,
                    _ = closed.changed() => return,
                };
                match opened {
                    // SSE, or (a server in transition) a JSON body of one message a line that
                    // stays open.
                    Ok(r)
                        if is_media(content_type(&r), "text/event-stream")
                            || r.status().is_success() && is_media(content_type(&r), "application/json") =>
                    {
                        // A JSON answer is a stream only once a notification comes on it: a
                        // plain JSON reply (an error) is retried with the backoff growing.
                        if is_media(content_type(&r), "text/event-stream") {
                            backoff = Duration::from_millis(250);
                        }
                        let _counted = Counted::new(&self);
                        tokio::select! {
                            received = self.read_listen(r) => if received { backoff = Duration::from_millis(250) },
                            changed = filter.changed() => {
                                if changed.is_err() { return }
                                continue; // reopened at once with the new filter
                            }
                            _ = unwanted(&mut listening, self.stream_idle) => {
                                tracing::debug!(upstream = %self.name, "subscriptions/listen closed: nothing has needed it for a while");
                                continue;
                            }
                            _ = closed.changed() => return,
                        }
                    }
                    Ok(_) => tracing::warn!(upstream = %self.name, "subscriptions/listen answered without a stream"),
                    Err(ChannelError::Failed(e)) => {
                        tracing::debug!(upstream = %self.name, error = %e, "subscriptions/listen failed")
                    }
                    Err(ChannelError::Expired) => {}
                }
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {},
                    changed = filter.changed() => if changed.is_err() { return },
                    _ = closed.changed() => return,
                }
                backoff = (backoff * 2).min(MAX_LISTEN_BACKOFF);
            }
        });
    }

    /// Reads a listen stream until it ends: the acknowledgment is consumed, every notification
    /// goes on without the subscription id (it names our request, which nobody else knows).
    /// Reads a listen stream until it ends; whether a notification came on it.
    async fn read_listen(&self, mut response: Reply) -> bool {
        let mut framing = match is_media(content_type(&response), "text/event-stream") {
            true => Framing::Sse(Decoder::new(self.max_message_bytes)),
            false => Framing::Lines(Vec::new()),
        };
        let mut received = false;
        loop {
            let Ok(Some(chunk)) = response.chunk().await else { return received };
            let Some(messages) = framing.feed(chunk, self.max_message_bytes) else {
                tracing::warn!(upstream = %self.name, "a listen stream message exceeds max_message_bytes; reopening");
                return received;
            };
            for data in messages {
                if data.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                let Ok(Ok(message)) = crate::decode(data).await else {
                    tracing::warn!(upstream = %self.name, "upstream sent an invalid message on its listen stream; dropped");
                    continue;
                };
                match message {
                    // Graceful closure: the server ended the subscription.
                    Message::Response { .. } | Message::Error { .. } => return received,
                    Message::Request { .. } => {
                        tracing::warn!(upstream = %self.name, "upstream sent a request on its listen stream; dropped")
                    }
                    Message::Notification { .. } => {
                        received = true;
                        let Some(message) = crate::revision_2026::from_listen(message) else { continue };
                        if !self.routes.deliver(message, &self.incoming).await {
                            return received;
                        }
                    }
                }
            }
        }
    }
}

/// How a listen stream's messages are framed: SSE events, or one JSON message a line.
enum Framing {
    Sse(Decoder),
    /// The part of a line received so far.
    Lines(Vec<u8>),
}

impl Framing {
    /// The whole messages `chunk` completes; `None` when one grows past `max` bytes.
    fn feed(&mut self, chunk: bytes::Bytes, max: usize) -> Option<Vec<Vec<u8>>> {
        match self {
            Framing::Sse(decoder) => {
                let events = decoder.feed_chunk(chunk).ok()?;
                Some(events.into_iter().map(|e| e.data.into_bytes()).collect())
            }
            Framing::Lines(partial) => {
                let mut messages = Vec::new();
                let mut rest: &[u8] = &chunk;
                while let Some(end) = memchr::memchr(b'\n', rest) {
                    partial.extend_from_slice(&rest[..end]);
                    messages.push(std::mem::take(partial));
                    rest = &rest[end + 1..];
                }
                partial.extend_from_slice(rest);
                (partial.len() <= max && messages.iter().all(|m| m.len() <= max)).then_some(messages)
            }
        }
    }
}

/// Tells whoever waits for the GET stream's first attempt that it has settled (nobody waits
/// for the later ones).
fn settle(settled: &mut Option<tokio::sync::oneshot::Sender<()>>) {
    if let Some(settled) = settled.take() {
        let _ = settled.send(());
    }
}

/// Waits until something wants the stream: false if the channel closed (or its session went)
/// first.
async fn until_wanted(listening: &mut crate::routes::Listening, closed: &mut watch::Receiver<bool>) -> bool {
    while !listening.wanted() {
        tokio::select! {
            changed = listening.holds.changed() => if changed.is_err() { return false },
            _ = closed.changed() => return false,
        }
    }
    true
}

/// Waits out `backoff`, doubling it for the next time (at most [`MAX_LISTEN_BACKOFF`]): false
/// if the channel closed meanwhile.
async fn back_off(backoff: &mut Duration, closed: &mut watch::Receiver<bool>) -> bool {
    let closing = tokio::select! {
        _ = tokio::time::sleep(*backoff) => false,
        _ = closed.changed() => true,
    };
    *backoff = (*backoff * 2).min(MAX_LISTEN_BACKOFF);
    !closing
}

/// Returns once nothing has wanted the GET stream for `idle`.
async fn unwanted(listening: &mut crate::routes::Listening, idle: Duration) {
    loop {
        while listening.wanted() {
            if listening.holds.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(idle) => return,
            changed = listening.holds.changed() => if changed.is_err() { return std::future::pending().await },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Framing;

    #[test]
    fn a_listen_stream_of_one_message_a_line_is_split_at_each_newline_whatever_the_chunks() {
        let mut framing = Framing::Lines(Vec::new());
        let mut got = Vec::new();
        for chunk in ["{\"a\":1}\n{\"b\"", ":2}\n", "{\"c\":3}"] {
            got.extend(framing.feed(bytes::Bytes::from_static(chunk.as_bytes()), 64).unwrap());
        }
        assert_eq!(got, [b"{\"a\":1}".to_vec(), b"{\"b\":2}".to_vec()]);
        // The third is whole once its newline comes.
        assert_eq!(framing.feed(bytes::Bytes::from_static(b"\n"), 64).unwrap(), [b"{\"c\":3}".to_vec()]);
        // A line over the bound ends the stream.
        assert!(framing.feed(bytes::Bytes::from(vec![b'x'; 65]), 64).is_none());
    }
}
