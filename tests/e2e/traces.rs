//! Tracing end to end: Envoy (its OpenTelemetry tracer, every request sampled) and the
//! real `tollgate` binary (Envoy Gateway's `TRACING_*` and `OTEL_*` variables) send spans to
//! one OTLP/gRPC collector inside the test. Tollgate's server span shares Envoy's trace and
//! its parent is the span of Envoy's rate-limit call; Tollgate's log lines of that request
//! carry the trace and span ids, as text and as JSON; and the standard variables alone
//! (no `TRACING_ENABLED`) export nothing.

use std::time::Duration;

use crate::harness::topology::{Changes, Topology};
use crate::otlp::{Collector, Received, Transport};

const SERVER_SPAN: &str = "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

fn service(span: &Received) -> &str {
    span.resource.get("service.name").map_or("", String::as_str)
}

/// Tollgate's server span, and Envoy's span of the rate-limit call that is its parent.
fn linked(spans: &[Received]) -> Option<(&Received, &Received)> {
    spans.iter().filter(|s| service(s) == "tollgate-e2e" && s.name == SERVER_SPAN).find_map(|tollgate| {
        let parent =
            spans.iter().find(|s| service(s) == "envoy-edge" && s.span_id == tollgate.parent_span_id)?;
        Some((tollgate, parent))
    })
}

#[test]
fn tollgates_span_is_a_child_of_envoys_rate_limit_span_and_its_logs_carry_the_ids() {
    let collector = Collector::start(Transport::Grpc);
    let env = [("RUST_LOG", "info,tollgate=debug")];
    let edge =
        Topology::start_changed(Changes { tracing: Some(collector.addr), env: &env, ..Changes::default() });
    let ok = edge.get("/", &[("x-api-key", "traced")]);
    assert_eq!(ok.status, 200, "{ok:#?}");
    let spans =
        collector.wait_for(Duration::from_secs(20), "Tollgate's span under Envoy's", |s| linked(s).is_some());
    let (tollgate, envoy_call) = linked(&spans).expect("linked");
    assert_eq!(tollgate.trace_id, envoy_call.trace_id, "one trace");
    assert!(envoy_call.name.contains("ShouldRateLimit"), "Envoy's rate-limit call: {envoy_call:#?}");
    assert_eq!(tollgate.kind, 2);
    assert_eq!(tollgate.attr("ratelimit.domain"), Some("edge"));
    assert_eq!(tollgate.attr("ratelimit.overall_code"), Some("OK"));
    assert!(tollgate.attr("ratelimit.descriptors").is_some_and(|n| n != "0"));
    assert_eq!(tollgate.attr("ratelimit.descriptor.0.decided_by"), Some("store"));
    // Envoy's request span is in the same trace, above its rate-limit call.
    let trace: Vec<&Received> = spans.iter().filter(|s| s.trace_id == tollgate.trace_id).collect();
    assert!(
        trace.iter().any(|s| service(s) == "envoy-edge" && s.kind == 2),
        "Envoy's ingress span: {trace:#?}"
    );
    let store = trace.iter().find(|s| s.parent_span_id == tollgate.span_id).expect("Tollgate's store span");
    assert_eq!(store.attr("ratelimit.store.topology"), Some("redis"));
    assert_eq!(store.attr("ratelimit.store.calls"), Some("1"));
    // The request's log line names its trace and span.
    let log = edge.tollgate.log();
    assert!(log.contains("tracing on"), "{log}");
    let line =
        log.lines().find(|l| l.contains("decided")).unwrap_or_else(|| panic!("no decision logged:\n{log}"));
    assert!(line.contains(&format!("trace_id={}", tollgate.trace_id)), "{line}");
    assert!(line.contains(&format!("span_id={}", tollgate.span_id)), "{line}");
}

#[test]
fn json_logs_carry_the_trace_and_span_ids() {
    let collector = Collector::start(Transport::Grpc);
    let env = [("RUST_LOG", "info,tollgate=debug"), ("TOLLGATE_LOG_FORMAT", "json")];
    let edge =
        Topology::start_changed(Changes { tracing: Some(collector.addr), env: &env, ..Changes::default() });
    assert_eq!(edge.get("/", &[("x-api-key", "json")]).status, 200);
    let spans = collector.wait_for(Duration::from_secs(20), "Tollgate's span", |s| linked(s).is_some());
    let (tollgate, _) = linked(&spans).expect("linked");
    let log = edge.tollgate.log();
    let line =
        log.lines().find(|l| l.contains("\"decided\"")).unwrap_or_else(|| panic!("no decision:\n{log}"));
    let json: serde_json::Value = serde_json::from_str(line).expect("a JSON log line");
    assert_eq!(json["span"]["trace_id"], tollgate.trace_id.as_str(), "{line}");
    assert_eq!(json["span"]["span_id"], tollgate.span_id.as_str(), "{line}");
}

#[test]
fn the_standard_variables_alone_turn_nothing_on() {
    let collector = Collector::start(Transport::Grpc);
    let endpoint = collector.url();
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ("OTEL_BSP_SCHEDULE_DELAY", "50"),
        ("TRACING_SAMPLING_RATE", "1"),
    ];
    let edge = Topology::start_changed(Changes { env: &env, ..Changes::default() });
    for _ in 0..5 {
        assert_eq!(edge.get("/", &[("x-api-key", "untraced")]).status, 200);
    }
    // A traced instance would have sent these spans 50 ms after they ended; give it 20
    // times that, then check that nothing at all reached the collector.
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(collector.requests(), 0, "spans exported with tracing off: {:#?}", collector.spans());
    assert!(!edge.tollgate.log().contains("tracing on"), "{}", edge.tollgate.log());
}
