//! Traces over OTLP (`[traces] otlp_endpoint`): the gateway's `tracing` spans (a client
//! request, each upstream call, each task's call) exported as OpenTelemetry spans, and W3C
//! Trace Context taken from clients and passed to upstreams
//! ([`taskgate_upstream::trace_context`]).
//!
//! Spans are batched and sent from the SDK's own thread over HTTP (protobuf); the batch's
//! timing follows the standard `OTEL_BSP_*` environment variables.

use std::collections::HashMap;
use std::sync::OnceLock;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider, Tracer};
use taskgate_config::TracesConfig;
use taskgate_upstream::trace_context::{Propagator, TraceHeaders};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The provider, kept to send what it holds at exit.
static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

/// The tracer spans go to, when `config` names an endpoint (and the propagator installed).
/// Call outside any async runtime: the exporter's HTTP client is a blocking one.
pub fn tracer(config: &TracesConfig) -> anyhow::Result<Option<Tracer>> {
    let Some(endpoint) = &config.otlp_endpoint else { return Ok(None) };
    let exporter = opentelemetry_otlp::SpanExporter::builder().with_http().with_endpoint(endpoint).build()?;
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name(config.service_name.clone())
        .with_attribute(opentelemetry::KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .build();
    // The ratio holds for every trace, whatever a client's sampled flag says (a client cannot
    // make the gateway export everything); it goes by the trace id, so services sampling at
    // one ratio keep the same traces.
    let sampler = Sampler::TraceIdRatioBased(config.sample_ratio);
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_sampler(sampler)
        .with_resource(resource)
        .build();
    let tracer = provider.tracer("taskgate");
    let _ = PROVIDER.set(provider);
    taskgate_upstream::trace_context::install(Box::new(W3c(TraceContextPropagator::new())));
    tracing::info!(endpoint = %endpoint, "traces are exported over OTLP");
    Ok(Some(tracer))
}

/// Sends the spans not sent yet (at exit).
pub fn flush() {
    if let Some(provider) = PROVIDER.get() {
        if let Err(e) = provider.shutdown() {
            eprintln!("taskgate: the last spans could not be sent: {e}");
        }
    }
}

/// W3C Trace Context for `tracing` spans.
struct W3c(TraceContextPropagator);

impl Propagator for W3c {
    fn adopt(&self, span: &tracing::Span, headers: &TraceHeaders) {
        let mut carrier = HashMap::new();
        carrier.insert("traceparent".to_owned(), headers.traceparent.clone());
        if let Some(state) = &headers.tracestate {
            carrier.insert("tracestate".to_owned(), state.clone());
        }
        let _ = span.set_parent(self.0.extract(&carrier));
    }

    fn current(&self) -> Option<TraceHeaders> {
        let context = tracing::Span::current().context();
        let mut carrier: HashMap<String, String> = HashMap::new();
        self.0.inject_context(&context, &mut carrier);
        let traceparent = carrier.remove("traceparent")?;
        Some(TraceHeaders { traceparent, tracestate: carrier.remove("tracestate").filter(|s| !s.is_empty()) })
    }
}
