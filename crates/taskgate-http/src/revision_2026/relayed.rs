//! A retry whose `requestState` names another replica ([`taskgate_core::retry_relay`]): passed
//! on to the replica holding the exchange, and its answer sent to the client as that replica
//! made it (status, content type, body). And the other way: a retry passed on to this replica,
//! served as if it had come here.
//!
//! Each step is bounded: the holder takes the retry within [`ACCEPT_WAIT`] (a replica that
//! stopped takes nothing: the client is told to send the request again without the state),
//! answers within the front door's own first wait plus [`ANSWER_WAIT`], and a streamed answer
//! says something at least every [`IDLE_WAIT`] (the holder's keep-alive comes every second).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use actix_web::body::MessageBody;
use actix_web::http::{header, StatusCode};
use actix_web::HttpResponse;
use bytes::Bytes;
use futures_util::StreamExt;
use serde_json::Value;
use taskgate_core::retry_relay::{Forwarded, RetryPart, Served};
use taskgate_core::{GatewayError, Identity};
use taskgate_protocol::{Message, RequestId};

use super::exchange::{resume, Front2026};

/// How long the replica holding the exchange has to take a retry passed on to it.
const ACCEPT_WAIT: Duration = Duration::from_secs(3);
/// How long it has to answer, beyond the front door's first wait.
const ANSWER_WAIT: Duration = Duration::from_secs(15);
/// The longest silence in a streamed answer.
const IDLE_WAIT: Duration = Duration::from_secs(10);

/// Passes the retry to the replica holding its exchange and answers the client with what it
/// sends back.
pub(crate) async fn relay(mut forwarded: Forwarded, client_id: RequestId, first_wait: Duration) -> HttpResponse {
    // Taken (then answered), or refused at once with an answer of its own.
    let head = match tokio::time::timeout(ACCEPT_WAIT, forwarded.part()).await {
        Ok(Ok(RetryPart::Accepted)) => match tokio::time::timeout(first_wait + ANSWER_WAIT, forwarded.part()).await {
            Ok(Ok(RetryPart::Head { status, content_type })) => (status, content_type),
            _ => return lost(&client_id),
        },
        Ok(Ok(RetryPart::Head { status, content_type })) => (status, content_type),
        _ => {
            let e = GatewayError::InvalidParams(
                "Invalid requestState: the replica holding the exchange it names did not take the retry (it may have stopped); send the request again without it".into(),
            );
            return crate::reply::error(&e, Some(client_id));
        }
    };
    let (status, content_type) = head;
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut response = HttpResponse::build(status);
    if status == StatusCode::SERVICE_UNAVAILABLE {
        response.insert_header(("Retry-After", "1"));
    }
    response.insert_header((header::CONTENT_TYPE, content_type.clone()));
    if !content_type.starts_with("text/event-stream") {
        // One JSON answer: read whole, so that a lost part is an error of its own.
        let mut body = String::new();
        loop {
            match tokio::time::timeout(IDLE_WAIT, forwarded.part()).await {
                Ok(Ok(RetryPart::Body(text))) => body.push_str(&text),
                Ok(Ok(RetryPart::End)) => break,
                _ => return lost(&client_id),
            }
        }
        let mut response = response.body(body);
        if status.as_u16() >= 400 {
            response.extensions_mut().insert(crate::metered::RpcError);
        }
        return response;
    }
    response.insert_header((header::CACHE_CONTROL, "no-cache")).insert_header(("X-Accel-Buffering", "no"));
    let mut idle = Box::pin(tokio::time::sleep(IDLE_WAIT));
    let mut forwarded = Some(forwarded);
    let body = futures_util::stream::poll_fn(move |cx| {
        let Some(parts) = forwarded.as_mut() else { return Poll::Ready(None) };
        let broken = match parts.poll_part(cx) {
            Poll::Ready(Ok(RetryPart::Body(text))) => {
                idle.as_mut().reset(tokio::time::Instant::now() + IDLE_WAIT);
                return Poll::Ready(Some(Ok::<_, std::convert::Infallible>(Bytes::from(text))));
            }
            Poll::Ready(Ok(RetryPart::End)) => {
                forwarded = None;
                return Poll::Ready(None);
            }
            Poll::Ready(_) => true,
            Poll::Pending => idle.as_mut().poll(cx).is_ready(),
        };
        if !broken {
            return Poll::Pending;
        }
        // Dropped unfinished: the holder is told, and cancels the request.
        forwarded = None;
        let e = lost_error();
        let event = Message::error(Some(client_id.clone()), e.error_object()).to_json();
        Poll::Ready(Some(Ok(Bytes::from(format!("event: message\ndata: {event}\n\n")))))
    });
    response.streaming(body)
}

fn lost_error() -> GatewayError {
    GatewayError::Internal("the answer from the replica holding the exchange was cut off".into())
}

fn lost(client_id: &RequestId) -> HttpResponse {
    crate::reply::error(&lost_error(), Some(client_id.clone()))
}

/// Serves a retry another replica passed on to this one: resumed as if it had come here.
pub async fn serve(front: Arc<Front2026>, identity: Identity, request: String, first_wait: Duration) -> Served {
    let response = match serde_json::from_str::<Value>(&request).map(Message::parse) {
        Ok(Ok(Message::Request { id, method, params })) => {
            let params = params.unwrap_or_else(|| Value::Object(Default::default()));
            let token = params.get("_meta").and_then(|m| m.get(taskgate_protocol::mcp::meta::PROGRESS_TOKEN)).cloned();
            resume(front, id, &identity, &method, &params, token, first_wait).await
        }
        _ => crate::reply::error(&GatewayError::InvalidRequest("a retry passed on is not a request".into()), None),
    };
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .to_owned();
    let mut body = response.into_body();
    let body = futures_util::stream::poll_fn(move |cx| match Pin::new(&mut body).poll_next(cx) {
        Poll::Ready(Some(Ok(bytes))) => Poll::Ready(Some(String::from_utf8_lossy(&bytes).into_owned())),
        Poll::Ready(_) => Poll::Ready(None),
        Poll::Pending => Poll::Pending,
    });
    Served { status, content_type, body: body.boxed_local() }
}
