use opentelemetry::baggage::BaggageExt;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TraceContextExt;
use tonic::metadata::{MetadataMap, MetadataValue};

use super::{extract_single, propagator, Metadata};

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const SPAN: &str = "00f067aa0ba902b7";

fn metadata(headers: &[(&'static str, &str)]) -> MetadataMap {
    let mut map = MetadataMap::new();
    for (name, value) in headers {
        map.insert(*name, MetadataValue::try_from(*value).expect("ascii"));
    }
    map
}

/// (trace id, span id, sampled, remote) of the context `headers` carry, if valid.
fn extracted(headers: &[(&'static str, &str)]) -> Option<(String, String, bool, bool)> {
    let map = metadata(headers);
    let cx = propagator().extract(&Metadata(&map));
    let span = cx.span();
    let context = span.span_context();
    context.is_valid().then(|| {
        (
            context.trace_id().to_string(),
            context.span_id().to_string(),
            context.is_sampled(),
            context.is_remote(),
        )
    })
}

#[test]
fn w3c_traceparent_is_read() {
    let parent = format!("00-{TRACE}-{SPAN}-01");
    assert_eq!(extracted(&[("traceparent", &parent)]), Some((TRACE.into(), SPAN.into(), true, true)));
    let unsampled = format!("00-{TRACE}-{SPAN}-00");
    assert_eq!(extracted(&[("traceparent", &unsampled)]).map(|c| c.2), Some(false));
}

#[test]
fn b3_multi_headers_are_read() {
    let got = extracted(&[("x-b3-traceid", TRACE), ("x-b3-spanid", SPAN), ("x-b3-sampled", "1")]);
    assert_eq!(got, Some((TRACE.into(), SPAN.into(), true, true)));
    let debug = extracted(&[("x-b3-traceid", TRACE), ("x-b3-spanid", SPAN), ("x-b3-flags", "1")]);
    assert_eq!(debug.map(|c| c.2), Some(true), "debug means sampled");
    let deferred = extracted(&[("x-b3-traceid", TRACE), ("x-b3-spanid", SPAN)]);
    assert_eq!(deferred.map(|c| c.2), Some(false), "no sampled flag: not sampled");
}

#[test]
fn b3_single_header_is_read_with_64_bit_ids_widened() {
    let single = format!("{TRACE}-{SPAN}-1-{SPAN}");
    assert_eq!(extracted(&[("b3", &single)]), Some((TRACE.into(), SPAN.into(), true, true)));
    let short = format!("a3ce929d0e0e4736-{SPAN}-d");
    let got = extracted(&[("b3", &short)]).expect("64-bit trace id");
    assert_eq!(got.0, "0000000000000000a3ce929d0e0e4736");
    assert!(got.2);
}

#[test]
fn malformed_b3_carries_no_context() {
    for bad in [
        "0".to_string(),
        "1".to_string(),
        TRACE.to_string(),
        format!("{TRACE}-{SPAN}-x"),
        format!("{TRACE}-0000000000000000-1"),
        format!("00000000000000000000000000000000-{SPAN}-1"),
        format!("{}-{SPAN}-1", TRACE.to_uppercase()),
        format!("{TRACE}-{SPAN}-1-{SPAN}-extra"),
        format!("{TRACE}a-{SPAN}-1"),
    ] {
        assert_eq!(extract_single(&bad), None, "{bad}");
        assert_eq!(extracted(&[("b3", &bad)]), None, "{bad}");
    }
}

#[test]
fn w3c_wins_over_b3() {
    let parent = format!("00-{TRACE}-{SPAN}-01");
    let other = "a3ce929d0e0e47364bf92f3577b34da6-b7ad6b7169203331-1";
    let got = extracted(&[("traceparent", &parent), ("b3", other)]).expect("context");
    assert_eq!(got.0, TRACE);
}

#[test]
fn baggage_is_read() {
    let map = metadata(&[("baggage", "tenant=acme,region=eu")]);
    let cx = propagator().extract(&Metadata(&map));
    assert_eq!(cx.baggage().get("tenant").map(|v| v.to_string()), Some("acme".to_string()));
}
