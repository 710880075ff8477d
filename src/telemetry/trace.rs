//! Tracing: OpenTelemetry spans of `ShouldRateLimit`, exported over OTLP (gRPC or HTTP with
//! protobuf bodies). Off unless asked for (`--tracing`, `TRACING_ENABLED=true`); off, the
//! request path never reaches this module.
//!
//! - `propagate`: the caller's context from the call's metadata (W3C, Baggage, B3).
//! - `export`: the span processor and the export task (off the request path, drops counted).
//! - this file: the settings, the provider (sampler, resource, exporter) and
//!   [`RequestSpan`], the spans of one request. What goes into them is the service's
//!   (`crate::service::traced`); the names are contracts, listed in docs/observability.md ("Tracing").

pub mod export;
pub mod propagate;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use opentelemetry::propagation::{TextMapCompositePropagator, TextMapPropagator};
use opentelemetry::trace::{Span as _, SpanKind, Status, TraceContextExt, Tracer as _, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider, SpanExporter as _};
use opentelemetry_sdk::Resource;
use tonic::metadata::MetadataMap;

use crate::telemetry::metrics::Metrics;

pub use export::BatchSettings;

/// The server span's name: the RPC, as OpenTelemetry's RPC conventions name it.
pub const SERVER_SPAN: &str = "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
/// The store call's span, a child of the server span.
pub const STORE_SPAN: &str = "ratelimit.store";

/// How spans reach the collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportProtocol {
    /// OTLP/gRPC (`grpc`).
    Grpc,
    /// OTLP/HTTP with protobuf bodies to `…/v1/traces` (`http`, `http/protobuf`).
    Http,
}

impl ExportProtocol {
    pub fn as_str(self) -> &'static str {
        match self {
            ExportProtocol::Grpc => "grpc",
            ExportProtocol::Http => "http/protobuf",
        }
    }
}

/// Which requests are traced: OpenTelemetry's samplers by their variable's names.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampling {
    /// A caller's sampled flag decides when the call carries a context
    /// (`parentbased_*`); the ratio decides the rest.
    pub parent_based: bool,
    /// Share of trace ids sampled, 0 to 1.
    pub ratio: f64,
}

/// Tracing as configured (`cli::tracing` resolves flags and variables into it).
#[derive(Debug, Clone, PartialEq)]
pub struct TraceSettings {
    pub protocol: ExportProtocol,
    /// The traces endpoint in full: for HTTP it ends in `/v1/traces`.
    pub endpoint: String,
    pub sampling: Sampling,
    pub service_name: String,
    pub service_namespace: Option<String>,
    pub service_instance_id: String,
    /// Put descriptor values (escaped and cut) into spans.
    pub descriptor_values: bool,
    pub batch: BatchSettings,
}

/// The tracer, its propagators, and the export task.
#[derive(Debug)]
pub struct Tracing {
    tracer: SdkTracer,
    provider: SdkTracerProvider,
    /// Parent-based sampling: the share of calls without a caller's context sampled.
    root_ratio: Option<f64>,
    propagator: TextMapCompositePropagator,
    exporting: export::Exporting,
    descriptor_values: bool,
}

impl Tracing {
    /// Builds the exporter and starts the export task (on the current runtime). Connects
    /// lazily: a collector that is not up yet only drops the first spans.
    pub fn start(settings: &TraceSettings, metrics: Arc<Metrics>) -> Result<Tracing, String> {
        let builder = opentelemetry_otlp::SpanExporter::builder();
        let built = match settings.protocol {
            ExportProtocol::Grpc => builder.with_tonic().with_endpoint(&settings.endpoint).build(),
            ExportProtocol::Http => builder
                .with_http()
                .with_protocol(Protocol::HttpBinary)
                .with_endpoint(&settings.endpoint)
                .build(),
        };
        let mut exporter =
            built.map_err(|e| format!("tracing: cannot export to {}: {e}", settings.endpoint))?;
        let resource = resource(settings);
        exporter.set_resource(&resource);
        let (processor, exporting) = export::start(exporter, settings.batch.clone(), metrics);
        // Parent-based: a call without a caller's context is sampled (or not) here, before
        // anything is built (`request_span`); the SDK then takes every root it is given.
        let (sampler, root_ratio) = if settings.sampling.parent_based {
            (Sampler::ParentBased(Box::new(Sampler::AlwaysOn)), Some(settings.sampling.ratio))
        } else {
            (Sampler::TraceIdRatioBased(settings.sampling.ratio), None)
        };
        let provider = SdkTracerProvider::builder()
            .with_sampler(sampler)
            .with_resource(resource)
            .with_span_processor(processor)
            .build();
        let tracer = provider.tracer("tollgate");
        Ok(Tracing {
            tracer,
            provider,
            root_ratio,
            propagator: propagate::propagator(),
            exporting,
            descriptor_values: settings.descriptor_values,
        })
    }

    /// The server span of one call, if it is sampled: its parent is the caller's context
    /// in `metadata`, if any.
    pub fn request_span(&self, metadata: &MetadataMap) -> Option<RequestSpan> {
        // A call without a caller's context, not sampled, costs three header lookups and a
        // random number: no context, span or id is made for it.
        if let Some(ratio) = self.root_ratio {
            let has_parent = propagate::PARENT_HEADERS.iter().any(|name| metadata.contains_key(*name));
            if !(has_parent || ratio >= 1.0 || rand::random::<f64>() < ratio) {
                return None;
            }
        }
        let parent = self.propagator.extract(&propagate::Metadata(metadata));
        let span = self
            .tracer
            .span_builder(SERVER_SPAN)
            .with_kind(SpanKind::Server)
            .start_with_context(&self.tracer, &parent);
        if !span.is_recording() {
            return None;
        }
        Some(RequestSpan { cx: parent.with_span(span), tracer: self.tracer.clone(), ended: false })
    }

    /// Whether descriptor values go into spans (`--tracing-descriptor-values`).
    pub fn descriptor_values(&self) -> bool {
        self.descriptor_values
    }

    /// Sends what is queued, within `within`, and stops exporting.
    pub async fn stop(&self, within: Duration) {
        self.exporting.stop(within).await;
        let _ = self.provider.shutdown();
    }
}

/// The spans of one sampled request. Dropped before [`RequestSpan::end`] (the request
/// was cancelled: the client reset the stream, or gave up), the server span ends then, with
/// what it has, `ratelimit.cancelled` and an error status.
#[derive(Debug)]
pub struct RequestSpan {
    cx: Context,
    tracer: SdkTracer,
    ended: bool,
}

impl Drop for RequestSpan {
    fn drop(&mut self) {
        if !self.ended {
            let span = self.cx.span();
            span.set_attribute(KeyValue::new("ratelimit.cancelled", true));
            span.set_status(Status::error("cancelled before an answer"));
            span.end();
        }
    }
}

impl RequestSpan {
    /// Sets attributes of the server span.
    pub fn set(&self, attributes: Vec<KeyValue>) {
        self.cx.span().set_attributes(attributes);
    }

    /// Marks the server span failed.
    pub fn fail(&self, description: String) {
        self.cx.span().set_status(Status::error(description));
    }

    /// A finished child span: the store call, from `start` to `end`.
    pub fn child(
        &self,
        name: &'static str,
        kind: SpanKind,
        times: (SystemTime, SystemTime),
        attributes: Vec<KeyValue>,
        error: Option<String>,
    ) {
        let mut span = self
            .tracer
            .span_builder(name)
            .with_kind(kind)
            .with_start_time(times.0)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, &self.cx);
        if let Some(description) = error {
            span.set_status(Status::error(description));
        }
        span.end_with_timestamp(times.1);
    }

    /// The trace id and the server span's id, in hex (for log lines).
    pub fn ids(&self) -> (String, String) {
        let span = self.cx.span();
        let context = span.span_context();
        (context.trace_id().to_string(), context.span_id().to_string())
    }

    /// Ends the server span now.
    pub fn end(mut self) {
        self.cx.span().end();
        self.ended = true;
    }
}

/// `service.name`, `service.namespace`, `service.instance.id` and the SDK's own, over what
/// `OTEL_RESOURCE_ATTRIBUTES` says.
fn resource(settings: &TraceSettings) -> Resource {
    let mut attributes = vec![KeyValue::new("service.instance.id", settings.service_instance_id.clone())];
    if let Some(namespace) = &settings.service_namespace {
        attributes.push(KeyValue::new("service.namespace", namespace.clone()));
    }
    Resource::builder().with_service_name(settings.service_name.clone()).with_attributes(attributes).build()
}
