//! Client requests measured until their response is sent: a JSON response when it is written,
//! a stream when it ends (or its client leaves). A request fails when it is refused (an HTTP
//! error status) or answered with a JSON-RPC error, whether alone or at the end of a stream.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use actix_web::body::{BodySize, BoxBody, MessageBody};
use actix_web::HttpResponse;
use bytes::Bytes;
use taskgate_core::metrics::RequestMeter;

/// In a JSON response's extensions: its body is a JSON-RPC error.
#[derive(Clone, Copy)]
pub struct RpcError;

/// In a stream's extensions: set once the stream carried a JSON-RPC error as its response.
#[derive(Clone, Default)]
pub struct StreamFailed(pub Arc<AtomicBool>);

impl StreamFailed {
    pub fn set(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The response, holding `meter` until it is sent.
pub fn metered(response: HttpResponse, mut meter: RequestMeter) -> HttpResponse {
    if response.status().is_client_error()
        || response.status().is_server_error()
        || response.extensions().contains::<RpcError>()
    {
        meter.fail();
    }
    if !matches!(response.body().size(), BodySize::Stream) {
        return response;
    }
    let failed = response.extensions().get::<StreamFailed>().cloned();
    response.map_body(|_, body| MeteredBody { body, meter, failed }).map_into_boxed_body()
}

/// A streamed body that ends the request's measure when it ends or is dropped.
struct MeteredBody {
    body: BoxBody,
    meter: RequestMeter,
    failed: Option<StreamFailed>,
}

impl MessageBody for MeteredBody {
    type Error = <BoxBody as MessageBody>::Error;

    fn size(&self) -> BodySize {
        self.body.size()
    }

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, Self::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_next(cx)
    }
}

impl Drop for MeteredBody {
    fn drop(&mut self) {
        if self.failed.as_ref().is_some_and(|f| f.0.load(Ordering::Relaxed)) {
            self.meter.fail();
        }
    }
}
