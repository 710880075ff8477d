//! Reading the caller's span context from the RLS call's gRPC metadata: W3C `traceparent`
//! and `tracestate`, W3C Baggage, and B3 in its single (`b3`) and multi-header
//! (`x-b3-traceid`, `x-b3-spanid`, `x-b3-sampled`, `x-b3-flags`) forms. Envoy forwards the
//! context of its rate-limit span in whichever format its tracer speaks. W3C wins when a
//! call carries both.

use opentelemetry::propagation::{Extractor, Injector, TextMapCompositePropagator, TextMapPropagator};
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry::Context;
use opentelemetry_sdk::propagation::{BaggagePropagator, TraceContextPropagator};
use tonic::metadata::{KeyRef, MetadataMap};

/// B3 first, then W3C: the later one overrides, so W3C wins when both are present.
pub fn propagator() -> TextMapCompositePropagator {
    TextMapCompositePropagator::new(vec![
        Box::new(B3Propagator::new()),
        Box::new(TraceContextPropagator::new()),
        Box::new(BaggagePropagator::new()),
    ])
}

/// gRPC metadata as the propagators read it (ASCII entries only; names are lowercase).
pub struct Metadata<'a>(pub &'a MetadataMap);

impl Extractor for Metadata<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0
            .keys()
            .filter_map(|key| match key {
                KeyRef::Ascii(key) => Some(key.as_str()),
                KeyRef::Binary(_) => None,
            })
            .collect()
    }
}

/// The headers that carry a caller's span context (any one is enough to look further).
pub const PARENT_HEADERS: [&str; 3] = ["traceparent", B3_SINGLE, B3_TRACE_ID];

const B3_SINGLE: &str = "b3";
const B3_TRACE_ID: &str = "x-b3-traceid";
const B3_SPAN_ID: &str = "x-b3-spanid";
const B3_SAMPLED: &str = "x-b3-sampled";
const B3_FLAGS: &str = "x-b3-flags";

/// Zipkin's B3 propagation, both forms. A context whose sampling is deferred (no sampled
/// flag) is read as not sampled, as OpenTelemetry's own B3 propagators read it.
#[derive(Debug)]
pub struct B3Propagator {
    fields: Vec<String>,
}

impl B3Propagator {
    pub fn new() -> B3Propagator {
        let fields = [B3_SINGLE, B3_TRACE_ID, B3_SPAN_ID, B3_SAMPLED, B3_FLAGS];
        B3Propagator { fields: fields.iter().map(|f| f.to_string()).collect() }
    }
}

impl Default for B3Propagator {
    fn default() -> Self {
        B3Propagator::new()
    }
}

impl TextMapPropagator for B3Propagator {
    /// The multi-header form (what Envoy's Zipkin tracer sends).
    fn inject_context(&self, cx: &Context, injector: &mut dyn Injector) {
        let span = cx.span();
        let context = span.span_context();
        if !context.is_valid() {
            return;
        }
        injector.set(B3_TRACE_ID, context.trace_id().to_string());
        injector.set(B3_SPAN_ID, context.span_id().to_string());
        injector.set(B3_SAMPLED, if context.is_sampled() { "1" } else { "0" }.to_string());
    }

    fn extract_with_context(&self, cx: &Context, extractor: &dyn Extractor) -> Context {
        let single = extractor.get(B3_SINGLE).and_then(extract_single);
        match single.or_else(|| extract_multi(extractor)) {
            Some(context) => cx.with_remote_span_context(context),
            None => cx.clone(),
        }
    }

    fn fields(&self) -> opentelemetry::propagation::text_map_propagator::FieldIter<'_> {
        opentelemetry::propagation::text_map_propagator::FieldIter::new(&self.fields)
    }
}

/// `{trace id}-{span id}[-{sampling}[-{parent span id}]]`; a lone sampling state carries
/// no context.
pub fn extract_single(header: &str) -> Option<SpanContext> {
    let mut parts = header.trim().split('-');
    let trace = trace_id(parts.next()?)?;
    let span = span_id(parts.next()?)?;
    let sampled = match parts.next() {
        None => false,
        Some("1" | "d") => true,
        Some("0") => false,
        Some(_) => return None,
    };
    if let Some(parent) = parts.next() {
        span_id(parent)?;
    }
    if parts.next().is_some() {
        return None;
    }
    Some(remote(trace, span, sampled))
}

fn extract_multi(extractor: &dyn Extractor) -> Option<SpanContext> {
    let trace = trace_id(extractor.get(B3_TRACE_ID)?.trim())?;
    let span = span_id(extractor.get(B3_SPAN_ID)?.trim())?;
    let debug = extractor.get(B3_FLAGS).is_some_and(|f| f.trim() == "1");
    let sampled = match extractor.get(B3_SAMPLED).map(str::trim) {
        Some("1" | "true") => true,
        Some("0" | "false") | None => debug,
        Some(_) => return None,
    };
    Some(remote(trace, span, sampled))
}

fn remote(trace_id: TraceId, span_id: SpanId, sampled: bool) -> SpanContext {
    let flags = if sampled { TraceFlags::SAMPLED } else { TraceFlags::default() };
    SpanContext::new(trace_id, span_id, flags, true, TraceState::default())
}

/// 16 or 32 lowercase hex digits, not all zero (a 64-bit id is the low half).
fn trace_id(hex: &str) -> Option<TraceId> {
    if !(hex.len() == 16 || hex.len() == 32) || !is_lower_hex(hex) {
        return None;
    }
    TraceId::from_hex(hex).ok().filter(|id| *id != TraceId::INVALID)
}

/// 16 lowercase hex digits, not all zero.
fn span_id(hex: &str) -> Option<SpanId> {
    if hex.len() != 16 || !is_lower_hex(hex) {
        return None;
    }
    SpanId::from_hex(hex).ok().filter(|id| *id != SpanId::INVALID)
}

fn is_lower_hex(text: &str) -> bool {
    text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests;
