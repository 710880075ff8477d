//! Tracing through the whole server: its spans reach an OTLP collector inside the test
//! (`otlp`, gRPC or HTTP), and say what was decided and why. What is sampled, what a
//! collector that is down or stalled costs a decision (nothing: spans dropped and counted),
//! and an invalid request's span.

use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tollgate::app::StoreKind;
use tollgate::store::breaker::BreakerSettings;
use tollgate::telemetry::trace::{
    BatchSettings, ExportProtocol, Sampling, TraceSettings, SERVER_SPAN, STORE_SPAN,
};

use crate::otlp::{closed_port, of_trace, Collector, Received, Stall, Transport};
use crate::support::{metric_value, request, spawn_with, Options, TestApp};

const POLICY: &str = r#"
domain: traced
descriptors:
  - key: user
    rate_limit:
      name: per-user
      unit: minute
      requests_per_unit: 2
"#;

const ONE_PER_MINUTE: &str = r#"
domain: traced
descriptors:
  - key: user
    rate_limit:
      name: per-user
      unit: minute
      requests_per_unit: 1
"#;

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";

/// Tracing to `endpoint` at ratio 1, batches sent after 50 ms (not the 5 s default: the
/// tests wait for them; the shape is not what they test).
fn tracing(protocol: ExportProtocol, endpoint: String) -> TraceSettings {
    TraceSettings {
        protocol,
        endpoint,
        sampling: Sampling { parent_based: true, ratio: 1.0 },
        service_name: "tollgate-test".to_string(),
        service_namespace: Some("edge".to_string()),
        service_instance_id: "instance-1".to_string(),
        descriptor_values: false,
        batch: BatchSettings { schedule_delay: Duration::from_millis(50), ..BatchSettings::default() },
    }
}

async fn app_with(store: StoreKind, policy: &str, trace: TraceSettings) -> TestApp {
    let mut options = Options::new(store);
    options.tracing = Some(trace);
    spawn_with(options, &[("traced.yaml", policy)]).await
}

/// ShouldRateLimit with gRPC metadata `headers`.
async fn call(
    app: &TestApp,
    request: RateLimitRequest,
    headers: &[(&'static str, String)],
) -> Result<RateLimitResponse, tonic::Status> {
    let mut call = tonic::Request::new(request);
    for (name, value) in headers {
        call.metadata_mut().insert(*name, value.parse().expect("ascii metadata"));
    }
    app.client.clone().should_rate_limit(call).await.map(tonic::Response::into_inner)
}

fn traceparent(trace: &str, parent: &str, sampled: bool) -> Vec<(&'static str, String)> {
    vec![("traceparent", format!("00-{trace}-{parent}-{}", if sampled { "01" } else { "00" }))]
}

fn named<'a>(spans: &[&'a Received], name: &str) -> Vec<&'a Received> {
    spans.iter().copied().filter(|s| s.name == name).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_spans_say_what_was_decided_and_why_under_the_callers_span() {
    let collector = Collector::start(Transport::Grpc);
    let app = app_with(StoreKind::Memory, POLICY, tracing(ExportProtocol::Grpc, collector.url())).await;
    let alice = request("traced", &[&[("user", "alice")]]);
    let parent = traceparent(TRACE, PARENT, true);
    for expected in [Code::Ok, Code::Ok, Code::OverLimit] {
        let response = call(&app, alice.clone(), &parent).await.expect("decided");
        assert_eq!(response.overall_code, expected as i32);
    }
    let spans = collector
        .wait_for_async(Duration::from_secs(10), "3 spans of the trace", |s| of_trace(s, TRACE).len() >= 3)
        .await;
    let trace = of_trace(&spans, TRACE);
    assert_eq!(named(&trace, SERVER_SPAN).len(), 3);
    assert!(named(&trace, STORE_SPAN).is_empty(), "the memory store has no round trip to trace");
    let server = named(&trace, SERVER_SPAN)
        .into_iter()
        .find(|s| s.attr("ratelimit.overall_code") == Some("OVER_LIMIT"))
        .expect("the denied request's span");
    assert_eq!(server.parent_span_id, PARENT, "the caller's span is the parent");
    assert_eq!(server.kind, 2, "a server span");
    for (key, value) in [
        ("rpc.system", "grpc"),
        ("rpc.service", "envoy.service.ratelimit.v3.RateLimitService"),
        ("rpc.method", "ShouldRateLimit"),
        ("ratelimit.domain", "traced"),
        ("ratelimit.descriptors", "1"),
        ("ratelimit.hits_addend", "0"),
        ("ratelimit.overall_code", "OVER_LIMIT"),
        ("ratelimit.descriptor.0.rule", "per-user"),
        ("ratelimit.descriptor.0.code", "OVER_LIMIT"),
        ("ratelimit.descriptor.0.limit", "2"),
        ("ratelimit.descriptor.0.unit", "minute"),
        ("ratelimit.descriptor.0.remaining", "0"),
        ("ratelimit.descriptor.0.result", "over_limit"),
        ("ratelimit.descriptor.0.decided_by", "store"),
        ("ratelimit.descriptor.0.keys", "user"),
    ] {
        assert_eq!(server.attr(key), Some(value), "{key} in {server:#?}");
    }
    assert!(server.attr("ratelimit.config_version").is_some_and(|v| !v.is_empty()));
    assert_eq!(server.attr("ratelimit.descriptor.0.values"), None, "no values unless asked for");
    let remaining: Vec<&str> = named(&trace, SERVER_SPAN)
        .iter()
        .filter_map(|s| s.attr("ratelimit.descriptor.0.remaining"))
        .collect();
    assert!(remaining.contains(&"1") && remaining.contains(&"0"), "{remaining:?}");
    for (key, value) in [
        ("service.name", "tollgate-test"),
        ("service.namespace", "edge"),
        ("service.instance.id", "instance-1"),
    ] {
        assert_eq!(server.resource.get(key).map(String::as_str), Some(value), "{key}");
    }

    // Several descriptors, one matching no rule; an unknown domain. Roots of their own.
    let two = request("traced", &[&[("user", "bob")], &[("path", "/x")]]);
    call(&app, two, &[]).await.expect("decided");
    call(&app, request("elsewhere", &[&[("user", "bob")]]), &[]).await.expect("decided");
    let spans = collector
        .wait_for_async(Duration::from_secs(10), "the root spans", |s| {
            s.iter().filter(|s| s.name == SERVER_SPAN && s.parent_span_id.is_empty()).count() >= 2
        })
        .await;
    let roots: Vec<&Received> =
        spans.iter().filter(|s| s.name == SERVER_SPAN && s.parent_span_id.is_empty()).collect();
    let two = roots.iter().find(|s| s.attr("ratelimit.domain") == Some("traced")).expect("two descriptors");
    assert_eq!(two.attr("ratelimit.descriptors"), Some("2"));
    assert_eq!(two.attr("ratelimit.descriptor.0.decided_by"), Some("store"));
    assert_eq!(two.attr("ratelimit.descriptor.1.decided_by"), Some("no_rule"));
    assert_eq!(two.attr("ratelimit.descriptor.1.keys"), Some("path"));
    assert_eq!(two.attr("ratelimit.descriptor.1.rule"), None);
    let unknown = roots.iter().find(|s| s.attr("ratelimit.domain") == Some("elsewhere")).expect("unknown");
    assert_eq!(unknown.attr("ratelimit.descriptor.0.decided_by"), Some("unknown_domain"));
    assert_eq!(unknown.attr("ratelimit.overall_code"), Some("OK"));

    let exported = metric_value(&app.metrics().await, "tollgate_trace_spans_exported_total");
    assert!(exported >= 5.0, "exported {exported}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_spans_on_redis_with_a_b3_parent_tell_the_store_from_the_over_limit_cache() {
    let collector = Collector::start(Transport::Http);
    let mut trace = tracing(ExportProtocol::Http, format!("{}/v1/traces", collector.url()));
    trace.descriptor_values = true;
    let app = app_with(StoreKind::Redis, ONE_PER_MINUTE, trace).await;
    let eve = request("traced", &[&[("user", "eve\u{7}")]]);
    let b3 = vec![
        ("x-b3-traceid", TRACE.to_string()),
        ("x-b3-spanid", PARENT.to_string()),
        ("x-b3-sampled", "1".to_string()),
    ];
    let mut decided_by = Vec::new();
    for expected in [Code::Ok, Code::OverLimit, Code::OverLimit] {
        let response = call(&app, eve.clone(), &b3).await.expect("decided");
        assert_eq!(response.overall_code, expected as i32);
        // One at a time: each request's spans are told apart by arriving alone.
        let before = of_trace(&collector.spans(), TRACE).len();
        let spans = collector
            .wait_for_async(Duration::from_secs(10), "this request's spans", |s| {
                of_trace(s, TRACE).len() >= before + 2
            })
            .await;
        let trace = of_trace(&spans, TRACE);
        let server = named(&trace, SERVER_SPAN).into_iter().last().expect("server span").clone();
        let store = trace
            .iter()
            .find(|s| s.name == STORE_SPAN && s.parent_span_id == server.span_id)
            .map(|s| (*s).clone())
            .expect("store span");
        assert_eq!(server.parent_span_id, PARENT);
        assert_eq!(server.attr("ratelimit.descriptor.0.values"), Some("eve\\x07"), "escaped");
        assert_eq!(store.attr("ratelimit.store.topology"), Some("redis"));
        assert_eq!(store.attr("db.system.name"), Some("redis"));
        assert_eq!(store.attr("ratelimit.store.outcome"), Some("ok"));
        decided_by.push((
            server.attr("ratelimit.descriptor.0.decided_by").map(str::to_string),
            store.attr("ratelimit.store.calls").map(str::to_string),
        ));
    }
    let want = |by: &str, calls: &str| (Some(by.to_string()), Some(calls.to_string()));
    assert_eq!(
        decided_by,
        vec![want("store", "1"), want("store", "1"), want("over_limit_cache", "0")],
        "Redis allows, Redis denies, then the over-limit cache answers without a call"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_sampled_requests_are_exported_and_a_callers_flag_decides_for_its_trace() {
    let collector = Collector::start(Transport::Grpc);
    let mut trace = tracing(ExportProtocol::Grpc, collector.url());
    trace.sampling = Sampling { parent_based: true, ratio: 0.0 };
    let app = app_with(StoreKind::Memory, POLICY, trace).await;
    let bob = request("traced", &[&[("user", "bob")]]);
    let other = "11111111111111111111111111111111";
    for _ in 0..20 {
        call(&app, bob.clone(), &[]).await.expect("root: ratio 0");
        call(&app, bob.clone(), &traceparent(other, PARENT, false)).await.expect("caller: not sampled");
    }
    // Spans leave in the order they end: once the sampled caller's arrive, any earlier
    // span would have arrived too.
    call(&app, bob.clone(), &traceparent(TRACE, PARENT, true)).await.expect("caller: sampled");
    let spans = collector
        .wait_for_async(Duration::from_secs(10), "the sampled caller's spans", |s| {
            !of_trace(s, TRACE).is_empty()
        })
        .await;
    assert!(spans.iter().all(|s| s.trace_id == TRACE), "only the sampled trace: {spans:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_request_has_an_error_span() {
    let collector = Collector::start(Transport::Grpc);
    let app = app_with(StoreKind::Memory, POLICY, tracing(ExportProtocol::Grpc, collector.url())).await;
    let status = call(&app, request("", &[&[("user", "x")]]), &traceparent(TRACE, PARENT, true))
        .await
        .expect_err("invalid");
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    let spans = collector
        .wait_for_async(Duration::from_secs(10), "the span", |s| !of_trace(s, TRACE).is_empty())
        .await;
    let span = &of_trace(&spans, TRACE)[0];
    assert_eq!(span.status, 2, "error status");
    assert_eq!(span.attr("rpc.grpc.status_code"), Some("3"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_spans_name_the_failure_policy_and_the_open_breaker() {
    let collector = Collector::start(Transport::Grpc);
    let mut options = Options::new(StoreKind::Redis);
    options.redis_url = Some(format!("redis://{}/", closed_port()));
    options.breaker = BreakerSettings {
        failures: 3,
        failure_rate: 0.5,
        window: Duration::from_secs(10),
        cooldown: Duration::from_secs(30),
    };
    options.tracing = Some(tracing(ExportProtocol::Grpc, collector.url()));
    let app = spawn_with(options, &[("traced.yaml", POLICY)]).await;
    for _ in 0..6 {
        let response = call(&app, request("traced", &[&[("user", "u")]]), &[]).await.expect("decided");
        assert_eq!(response.overall_code, Code::Ok as i32, "failure_mode open");
    }
    let spans = collector
        .wait_for_async(Duration::from_secs(10), "a store span with the breaker open", |s| {
            s.iter().any(|s| s.attr("ratelimit.store.breaker") == Some("open"))
        })
        .await;
    let open = spans.iter().find(|s| s.attr("ratelimit.store.breaker") == Some("open")).expect("open");
    assert_eq!(open.attr("ratelimit.store.outcome"), Some("circuit_open"));
    assert_eq!(open.attr("ratelimit.store.calls"), Some("0"));
    assert_eq!(open.status, 2);
    let server = spans.iter().find(|s| s.span_id == open.parent_span_id).expect("its server span");
    assert_eq!(server.attr("ratelimit.descriptor.0.decided_by"), Some("failure_policy"));
    assert_eq!(server.attr("ratelimit.descriptor.0.result"), Some("failure_open"));
    let failed =
        spans.iter().find(|s| s.attr("ratelimit.store.outcome") == Some("unavailable")).expect("unavailable");
    assert_eq!(failed.attr("ratelimit.store.calls"), Some("1"));
}

/// `n` decisions of distinct users, one at a time: each must be OK, and none may take
/// anywhere near the exporter's 10 s timeout (a request that waited on the collector).
async fn decide_many(app: &TestApp, n: usize) -> Duration {
    let mut slowest = Duration::ZERO;
    for i in 0..n {
        let user = format!("user-{i}");
        let started = Instant::now();
        let response = call(app, request("traced", &[&[("user", &user)]]), &[]).await.expect("decided");
        slowest = slowest.max(started.elapsed());
        assert_eq!(response.overall_code, Code::Ok as i32);
    }
    assert!(slowest < Duration::from_secs(2), "a decision took {slowest:?}");
    slowest
}

async fn dropped(app: &TestApp, reason: &str) -> f64 {
    metric_value(&app.metrics().await, &format!("tollgate_trace_spans_dropped_total{{reason=\"{reason}\"}}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_collector_never_delays_a_decision_spans_past_the_queue_are_dropped_and_counted() {
    let stall = Stall::start();
    let mut trace = tracing(ExportProtocol::Grpc, format!("http://{}", stall.addr));
    trace.batch = BatchSettings::default(); // production queue, batch, delay and timeout
    let app = app_with(StoreKind::Memory, POLICY, trace).await;
    // 4,000 requests: 4,000 spans, past one batch in flight (512) and the queue (2,048).
    decide_many(&app, 4000).await;
    let counted = crate::support::eventually(Duration::from_secs(10), || async {
        dropped(&app, "queue_full").await >= 1000.0
    })
    .await;
    assert!(counted, "queue_full drops: {}", dropped(&app, "queue_full").await);
    assert!(stall.connections() >= 1, "the exporter did try the collector");
    let exported = metric_value(&app.metrics().await, "tollgate_trace_spans_exported_total");
    assert_eq!(exported, 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_is_down_never_delays_a_decision_failed_exports_are_counted() {
    let endpoint = format!("http://{}/v1/traces", closed_port());
    let mut trace = tracing(ExportProtocol::Http, endpoint);
    trace.batch = BatchSettings::default();
    let app = app_with(StoreKind::Memory, POLICY, trace).await;
    // 1,200 requests: 1,200 spans, two full batches sent at once (and refused).
    decide_many(&app, 1200).await;
    let counted = crate::support::eventually(Duration::from_secs(20), || async {
        dropped(&app, "export_failed").await >= 1024.0
    })
    .await;
    assert!(counted, "export_failed drops: {}", dropped(&app, "export_failed").await);
    assert_eq!(dropped(&app, "queue_full").await, 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_cancelled_while_the_store_hangs_still_ends_its_span_marked_cancelled() {
    let collector = Collector::start(Transport::Grpc);
    // "Redis" accepts the connection and never answers: the charge waits its 2 s.
    let stall = Stall::start();
    let mut options = Options::new(StoreKind::Redis);
    options.redis_url = Some(format!("redis://{}/", stall.addr));
    options.tracing = Some(tracing(ExportProtocol::Grpc, collector.url()));
    let app = spawn_with(options, &[("traced.yaml", POLICY)]).await;
    let parent = traceparent(TRACE, PARENT, true);
    let pending = call(&app, request("traced", &[&[("user", "gone")]]), &parent);
    // The client gives up (its stream is reset): the server drops the request's future.
    let gave_up = tokio::time::timeout(Duration::from_millis(300), pending).await;
    assert!(gave_up.is_err(), "the store hangs: no answer within 300 ms");
    let spans = collector
        .wait_for_async(Duration::from_secs(10), "the cancelled request's span", |s| {
            !of_trace(s, TRACE).is_empty()
        })
        .await;
    let span = of_trace(&spans, TRACE)[0];
    assert_eq!(span.name, SERVER_SPAN);
    assert_eq!(span.parent_span_id, PARENT);
    assert_eq!(span.attr("ratelimit.cancelled"), Some("true"));
    assert_eq!(span.attr("ratelimit.domain"), Some("traced"), "set before the decision");
    assert_eq!(span.attr("ratelimit.overall_code"), None, "never answered");
    assert_eq!(span.status, 2);
}

const RESERVED: &str = r#"
domain: traced
reservations: { key: request, ttl: 10m }
descriptors:
  - key: user
    rate_limit: { name: tokens, unit: minute, requests_per_unit: 100 }
"#;

/// A request reserving on Redis has its store span like any charge: one `reserve.lua` call
/// for the descriptor naming a reservation, one call for the plain descriptor beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reserving_request_has_a_store_span_counting_its_calls() {
    let collector = Collector::start(Transport::Http);
    let trace = tracing(ExportProtocol::Http, format!("{}/v1/traces", collector.url()));
    let app = app_with(StoreKind::Redis, RESERVED, trace).await;
    let mut both = request("traced", &[&[("user", "ann"), ("request", "r1")], &[("user", "bob")]]);
    both.hits_addend = 30;
    let response = call(&app, both, &traceparent(TRACE, PARENT, true)).await.expect("decided");
    assert_eq!(response.statuses.iter().map(|s| s.limit_remaining).collect::<Vec<_>>(), [70, 70]);
    let spans = collector
        .wait_for_async(Duration::from_secs(10), "server and store spans", |s| of_trace(s, TRACE).len() >= 2)
        .await;
    let trace = of_trace(&spans, TRACE);
    let server = named(&trace, SERVER_SPAN)[0].clone();
    let store = named(&trace, STORE_SPAN).into_iter().next().expect("a store span").clone();
    assert_eq!(store.parent_span_id, server.span_id);
    assert_eq!(store.attr("ratelimit.store.calls"), Some("2"), "{store:?}");
    assert_eq!(store.attr("ratelimit.store.charges"), Some("2"));
    assert_eq!(store.attr("ratelimit.store.outcome"), Some("ok"));
}
