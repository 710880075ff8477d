//! RLQS (`StreamRateLimitQuotas`) through the whole server, over gRPC, on the memory store
//! and a real redis-server, with a client speaking exactly what Envoy's `rate_limit_quota`
//! filter sends (immediate reports with `time_elapsed` 0, periodic ones, map entries in any
//! order). Through real Envoys: `tests/e2e/rlqs.rs`.
//!
//! What is held here: one budget with the RLS path (both directions); a newcomer's share
//! taken from a holder at once, by a push; every claim within the headroom; bad bucket ids
//! never ending the stream; the failure policy per domain with Redis stopped; a reconnect
//! to another instance keeping the claim; a removed rule abandoning the bucket; a window's
//! edge giving a dry Envoy a fresh bucket; the drain ending streams with OK.

use std::time::Duration;

use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::Strategy;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::BucketAction as Kind;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use envoy_types::pb::google::protobuf::{Duration as ProtoDuration, UInt64Value};
use tokio::sync::mpsc;
use tollgate::app::StoreKind;
use tonic::transport::Channel;
use tonic::Streaming;

use crate::support::*;

const POLICY: &str = r#"
domain: api
descriptors:
  - key: name
    value: user
    descriptors:
      - key: user
        rate_limit: { unit: hour, requests_per_unit: 100, algorithm: fixed_window }
  - key: second
    rate_limit: { unit: second, requests_per_unit: 10, algorithm: fixed_window }
"#;

const OPEN: &str = r#"
domain: open
failure_mode: open
descriptors:
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 100 }
"#;

const CLOSED: &str = r#"
domain: closed
failure_mode: closed
descriptors:
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 100 }
"#;

/// One Envoy's stream: what it sends and what it is answered.
struct Envoy {
    reports: mpsc::Sender<RateLimitQuotaUsageReports>,
    answers: Streaming<RateLimitQuotaResponse>,
}

impl Envoy {
    /// Opens a stream to `app`, named `name` (`x-tollgate-envoy`) when given.
    async fn open(addr: std::net::SocketAddr, name: Option<&str>) -> Envoy {
        let channel = Channel::from_shared(format!("http://{addr}"))
            .expect("endpoint")
            .connect()
            .await
            .expect("connect");
        let mut client = RateLimitQuotaServiceClient::new(channel);
        let (reports, rx) = mpsc::channel(16);
        let outbound =
            futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|m| (m, rx)) });
        let mut request = tonic::Request::new(outbound);
        if let Some(name) = name {
            request.metadata_mut().insert("x-tollgate-envoy", name.parse().expect("ascii"));
        }
        let answers = client.stream_rate_limit_quotas(request).await.expect("stream opens").into_inner();
        Envoy { reports, answers }
    }

    async fn send(&self, domain: &str, usages: Vec<BucketQuotaUsage>) {
        let report = RateLimitQuotaUsageReports { domain: domain.into(), bucket_quota_usages: usages };
        self.reports.send(report).await.expect("stream open");
    }

    /// The next response, within 5 s.
    async fn next(&mut self) -> RateLimitQuotaResponse {
        match tokio::time::timeout(Duration::from_secs(5), self.answers.message()).await {
            Ok(Ok(Some(response))) => response,
            other => panic!("no response within 5 s: {other:?}"),
        }
    }

    /// Reports `usage` and answers the one action for its bucket.
    async fn report(&mut self, domain: &str, usage: BucketQuotaUsage) -> BucketAction {
        self.send(domain, vec![usage]).await;
        let response = self.next().await;
        assert_eq!(response.bucket_action.len(), 1, "{response:?}");
        response.bucket_action.into_iter().next().expect("one action")
    }
}

/// `{name: user, user: <user>}`, in the order given.
fn user_id(user: &str) -> BucketId {
    BucketId {
        bucket: [("user".to_string(), user.to_string()), ("name".to_string(), "user".to_string())].into(),
    }
}

fn one(key: &str, value: &str) -> BucketId {
    BucketId { bucket: [(key.to_string(), value.to_string())].into() }
}

fn usage(id: BucketId, allowed: u64, denied: u64, elapsed_s: i64) -> BucketQuotaUsage {
    BucketQuotaUsage {
        bucket_id: Some(id),
        time_elapsed: Some(ProtoDuration { seconds: elapsed_s, nanos: 0 }),
        num_requests_allowed: allowed,
        num_requests_denied: denied,
    }
}

/// What an action assigns, in short.
#[derive(Debug, PartialEq, Eq)]
enum Assigned {
    Tokens { max: u32, ttl: i64 },
    Allow { ttl: i64 },
    Deny { ttl: i64 },
    Abandon,
}

fn assigned(action: &BucketAction) -> Assigned {
    match action.bucket_action.as_ref().expect("an action") {
        Kind::AbandonAction(_) => Assigned::Abandon,
        Kind::QuotaAssignmentAction(a) => {
            let ttl = a.assignment_time_to_live.as_ref().map_or(0, |d| d.seconds);
            match a.rate_limit_strategy.as_ref().and_then(|s| s.strategy.as_ref()).expect("a strategy") {
                Strategy::TokenBucket(b) => Assigned::Tokens { max: b.max_tokens, ttl },
                Strategy::BlanketRule(0) => Assigned::Allow { ttl },
                Strategy::BlanketRule(_) => Assigned::Deny { ttl },
                Strategy::RequestsPerTimeUnit(_) => panic!("Envoy 1.40 drops requests_per_time_unit"),
            }
        }
    }
}

fn tokens(action: &BucketAction) -> u32 {
    match assigned(action) {
        Assigned::Tokens { max, .. } => max,
        Assigned::Deny { .. } => 0,
        other => panic!("a token bucket or DENY_ALL: {other:?}"),
    }
}

/// The RLS view of alice's bucket: a peek's remaining.
async fn rls_remaining(app: &TestApp, user: &str) -> u32 {
    let mut req = request("api", &[&[("name", "user"), ("user", user)]]);
    req.descriptors[0].hits_addend = Some(UInt64Value { value: 0 });
    app.check(req).await.statuses[0].limit_remaining
}

#[tokio::test]
async fn rlqs_and_rls_spend_one_budget_on_each_store() {
    for store in [StoreKind::Memory, StoreKind::Redis] {
        let app = spawn_app(store, &[("api.yaml", POLICY)]).await;
        let addr = app.running.as_ref().expect("running").grpc_addr;
        let mut envoy = Envoy::open(addr, Some("a")).await;
        // The first request passed on `no_assignment_behavior`: immediate report of 1.
        let first = envoy.report("api", usage(user_id("alice"), 1, 0, 0)).await;
        assert_eq!(first.bucket_id, Some(user_id("alice")), "the id is echoed as Envoy holds it");
        assert_eq!(assigned(&first), Assigned::Tokens { max: 99, ttl: 15 }, "{store:?}");
        assert_eq!(rls_remaining(&app, "alice").await, 99, "{store:?}: the RLS path sees the RLQS usage");
        // RLS spends 40; the next report of 20 leaves 39 to share.
        let mut spend = request("api", &[&[("name", "user"), ("user", "alice")]]);
        spend.descriptors[0].hits_addend = Some(UInt64Value { value: 40 });
        assert!(!over(&app.check(spend).await));
        let next = envoy.report("api", usage(user_id("alice"), 20, 0, 5)).await;
        assert_eq!(tokens(&next), 39, "{store:?}: RLQS sees the RLS usage");
        // A report past the budget is recorded anyway (an overdraw): nothing is left.
        let past = envoy.report("api", usage(user_id("alice"), 80, 3, 5)).await;
        assert_eq!(assigned(&past), Assigned::Deny { ttl: 15 }, "{store:?}");
        assert_eq!(rls_remaining(&app, "alice").await, 0, "{store:?}");
        // Another user is untouched.
        let bob = envoy.report("api", usage(user_id("bob"), 1, 0, 0)).await;
        assert_eq!(tokens(&bob), 99, "{store:?}");
    }
}

#[tokio::test]
async fn a_newcomer_takes_its_share_from_a_holder_at_once_and_claims_stay_within_the_headroom() {
    for store in [StoreKind::Memory, StoreKind::Redis] {
        let app = spawn_app(store, &[("api.yaml", POLICY)]).await;
        let addr = app.running.as_ref().expect("running").grpc_addr;
        let mut a = Envoy::open(addr, Some("a")).await;
        let mut b = Envoy::open(addr, Some("b")).await;
        a.report("api", usage(user_id("carol"), 1, 0, 0)).await;
        let whole = a.report("api", usage(user_id("carol"), 9, 0, 5)).await;
        assert_eq!(tokens(&whole), 90, "{store:?}: a alone holds all 90 left");
        // b arrives: it gets what a's claim leaves (nothing yet), and a is pushed a smaller
        // bucket without reporting.
        let newcomer = b.report("api", usage(user_id("carol"), 1, 0, 0)).await;
        let pushed = a.next().await;
        assert_eq!(pushed.bucket_action.len(), 1, "{pushed:?}");
        let a_now = tokens(&pushed.bucket_action[0]);
        assert!(a_now < 90, "{store:?}: a shrinks at once: {a_now}");
        // 89 left after b's first request, 90 of it claimed by a: nothing for b yet.
        assert_eq!(tokens(&newcomer), 0, "{store:?}: b's first grant fits beside a's claim");
        // b's next report sees a's smaller claim and takes its share.
        let b_next = tokens(&b.report("api", usage(user_id("carol"), 0, 2, 5)).await);
        assert!(b_next > 0, "{store:?}: b gets a share once a has shrunk");
        assert!(a_now + b_next <= 89, "{store:?}: {a_now} + {b_next} within the 89 left");
    }
}

#[tokio::test]
async fn bad_bucket_ids_are_counted_and_never_end_the_stream() {
    let app = spawn_app(StoreKind::Memory, &[("api.yaml", POLICY)]).await;
    let addr = app.running.as_ref().expect("running").grpc_addr;
    let mut envoy = Envoy::open(addr, None).await;
    let empty = BucketQuotaUsage { bucket_id: Some(BucketId::default()), ..usage(one("x", "y"), 1, 0, 0) };
    let no_id = BucketQuotaUsage { bucket_id: None, ..usage(one("x", "y"), 1, 0, 0) };
    let empty_value = usage(one("user", ""), 1, 0, 0);
    envoy.send("api", vec![empty, no_id, empty_value, usage(user_id("dave"), 1, 0, 0)]).await;
    let response = envoy.next().await;
    assert_eq!(response.bucket_action.len(), 1, "only the good bucket is answered: {response:?}");
    assert_eq!(tokens(&response.bucket_action[0]), 99);
    // The stream goes on; an unknown domain and a bucket of no rule are allowed for long.
    let unknown = envoy.report("nowhere", usage(one("user", "dave"), 1, 0, 0)).await;
    assert_eq!(assigned(&unknown), Assigned::Allow { ttl: 300 });
    let no_rule = envoy.report("api", usage(one("path", "/"), 1, 0, 0)).await;
    assert_eq!(assigned(&no_rule), Assigned::Allow { ttl: 300 });
    let metrics = app.metrics().await;
    assert_eq!(counter_value(&metrics, "tollgate_rlqs_invalid_total{reason=\"empty_id\"}"), 2.0);
    assert_eq!(counter_value(&metrics, "tollgate_rlqs_invalid_total{reason=\"bad_entry\"}"), 1.0);
    assert_eq!(counter_value(&metrics, "tollgate_rlqs_unlimited_total{reason=\"unknown_domain\"}"), 1.0);
    assert_eq!(counter_value(&metrics, "tollgate_rlqs_unlimited_total{reason=\"no_rule\"}"), 1.0);
    assert_eq!(metric_value(&metrics, "tollgate_rlqs_streams"), 1.0);
    assert_eq!(counter_value(&metrics, "tollgate_rlqs_reports_total"), 6.0);
}

#[tokio::test]
async fn redis_stopped_answers_each_domains_failure_policy_and_redis_back_answers_buckets() {
    let mut app = spawn_app(StoreKind::Redis, &[("open.yaml", OPEN), ("closed.yaml", CLOSED)]).await;
    let addr = app.running.as_ref().expect("running").grpc_addr;
    let mut envoy = Envoy::open(addr, Some("a")).await;
    assert_eq!(tokens(&envoy.report("closed", usage(one("user", "e"), 1, 0, 0)).await), 99);
    app.redis().stop();
    assert_eq!(
        assigned(&envoy.report("closed", usage(one("user", "e"), 5, 0, 5)).await),
        Assigned::Deny { ttl: 10 }
    );
    assert_eq!(
        assigned(&envoy.report("open", usage(one("user", "e"), 1, 0, 0)).await),
        Assigned::Allow { ttl: 10 }
    );
    let metrics = app.metrics().await;
    assert!(counter_value(&metrics, "tollgate_rlqs_failure_answers_total{mode=\"closed\"}") >= 1.0);
    assert!(counter_value(&metrics, "tollgate_rlqs_failure_answers_total{mode=\"open\"}") >= 1.0);
    app.redis().restart();
    let back = eventually(Duration::from_secs(10), || async {
        let mut again = Envoy::open(addr, Some("a")).await;
        matches!(
            assigned(&again.report("closed", usage(one("user", "e"), 0, 0, 5)).await),
            Assigned::Tokens { .. }
        )
    })
    .await;
    assert!(back, "token buckets again once Redis is back");
}

#[tokio::test]
async fn an_envoy_reconnecting_to_another_instance_keeps_its_claim() {
    let first = spawn_app(StoreKind::Redis, &[("api.yaml", POLICY)]).await;
    let url = first.redis.as_ref().expect("own redis").url();
    let second = spawn_with(
        Options { redis_url: Some(url), ..Options::new(StoreKind::Redis) },
        &[("api.yaml", POLICY)],
    )
    .await;
    let one_addr = first.running.as_ref().expect("running").grpc_addr;
    let two_addr = second.running.as_ref().expect("running").grpc_addr;
    let mut a = Envoy::open(one_addr, Some("a")).await;
    a.report("api", usage(user_id("erin"), 1, 0, 0)).await;
    assert_eq!(tokens(&a.report("api", usage(user_id("erin"), 9, 0, 5)).await), 90);
    drop(a);
    // a, back on the other instance: its claim of 90 is still its own, so a newcomer b there
    // gets nothing of it, and a is answered from what it holds.
    let mut a = Envoy::open(two_addr, Some("a")).await;
    let mut b = Envoy::open(two_addr, Some("b")).await;
    let b_first = tokens(&b.report("api", usage(user_id("erin"), 0, 0, 0)).await);
    assert_eq!(b_first, 0, "a's claim of 90 is still held");
    let a_again = tokens(&a.report("api", usage(user_id("erin"), 0, 0, 5)).await);
    assert!(a_again > 0 && a_again <= 90, "a keeps a share: {a_again}");
    // And the budget was not reset: the RLS view counts the 10 reported.
    assert_eq!(rls_remaining(&second, "erin").await, 90);
}

#[tokio::test]
async fn a_rule_removed_by_a_reload_abandons_its_buckets() {
    let app = spawn_app(StoreKind::Memory, &[("api.yaml", POLICY)]).await;
    let addr = app.running.as_ref().expect("running").grpc_addr;
    let mut envoy = Envoy::open(addr, Some("a")).await;
    assert_eq!(tokens(&envoy.report("api", usage(user_id("fay"), 1, 0, 0)).await), 99);
    let without = "domain: api\ndescriptors:\n  - key: second\n    rate_limit: { unit: second, requests_per_unit: 10 }\n";
    std::fs::write(app.config_path().join("api.yaml"), without).expect("rewrite");
    assert_eq!(app.admin("POST", "/reload").await.status, 200);
    assert_eq!(assigned(&envoy.report("api", usage(user_id("fay"), 3, 0, 5)).await), Assigned::Abandon);
    // Envoy then recreates the bucket at its next request: no limit now.
    let again = envoy.report("api", usage(user_id("fay"), 1, 0, 0)).await;
    assert_eq!(assigned(&again), Assigned::Allow { ttl: 300 });
}

#[tokio::test]
async fn a_dry_envoy_gets_a_fresh_bucket_at_the_windows_edge_without_reporting() {
    let app = spawn_app(StoreKind::Redis, &[("api.yaml", POLICY)]).await;
    let addr = app.running.as_ref().expect("running").grpc_addr;
    let mut envoy = Envoy::open(addr, Some("a")).await;
    // Both reports inside one second: start just after a second's edge.
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock");
    tokio::time::sleep(
        Duration::from_nanos(1_000_000_000 - u64::from(now.subsec_nanos())) + Duration::from_millis(20),
    )
    .await;
    // 10 a second: the report of 10 leaves nothing in this second.
    envoy.report("api", usage(one("second", "s"), 1, 0, 0)).await;
    let dry = envoy.report("api", usage(one("second", "s"), 9, 4, 1)).await;
    assert_eq!(assigned(&dry), Assigned::Deny { ttl: 15 });
    // Within the next second comes, unasked, a full bucket for the new window.
    let fresh = envoy.next().await;
    let last = fresh.bucket_action.last().expect("an action");
    assert_eq!(tokens(last), 10, "the new window's whole limit: {fresh:?}");
}

#[tokio::test]
async fn the_drain_ends_every_stream_with_ok() {
    let mut app = spawn_app(StoreKind::Memory, &[("api.yaml", POLICY)]).await;
    let addr = app.running.as_ref().expect("running").grpc_addr;
    let mut envoy = Envoy::open(addr, Some("a")).await;
    envoy.report("api", usage(user_id("gil"), 1, 0, 0)).await;
    let running = app.running.take().expect("running");
    let stopped = tokio::time::timeout(Duration::from_secs(5), running.stop()).await;
    assert!(matches!(stopped, Ok(Ok(()))), "the server stops with a stream open: {stopped:?}");
    let end =
        tokio::time::timeout(Duration::from_secs(5), envoy.answers.message()).await.expect("the stream ends");
    assert!(matches!(end, Ok(None)), "ended with OK (Envoy reopens at its next report): {end:?}");
}

#[tokio::test]
async fn status_and_usage_show_rlqs_buckets_their_envoys_and_claims_without_a_clients_value() {
    for store in [StoreKind::Memory, StoreKind::Redis] {
        let app = spawn_app(store, &[("api.yaml", POLICY)]).await;
        let addr = app.running.as_ref().expect("running").grpc_addr;
        let mut envoy = Envoy::open(addr, Some("edge-1")).await;
        envoy.report("api", usage(user_id("harriet"), 1, 0, 0)).await;
        envoy.report("api", usage(user_id("harriet"), 9, 0, 5)).await;
        let status = app.admin("GET", "/v1/status").await;
        assert_eq!(status.status, 200);
        assert!(!status.body.contains("harriet"), "{store:?}: no client value on the status view");
        let json: serde_json::Value = serde_json::from_str(&status.body).expect("json");
        let rlqs = &json["rlqs"];
        assert_eq!(rlqs["streams"], 1, "{store:?}: {rlqs}");
        assert_eq!(rlqs["buckets_held"], 1, "{store:?}: {rlqs}");
        let bucket = &rlqs["buckets"][0];
        assert_eq!(bucket["envoy"], "envoy:edge-1");
        assert_eq!(bucket["domain"], "api");
        assert_eq!(bucket["demand"], 9);
        assert_eq!(bucket["assignment"], "token_bucket");
        assert_eq!(bucket["max_tokens"], 90, "{store:?}: {bucket}");
        assert!(bucket["bucket"][1]["value_hash"].is_string(), "{bucket}");
        let page = app.admin("GET", "/").await;
        assert!(
            page.body.contains("Quota in Envoy (RLQS)") && page.body.contains("envoy:edge-1"),
            "{store:?}"
        );
        let usage = app.admin("GET", "/v1/usage?domain=api&descriptor=name%3Duser,user%3Dharriet").await;
        assert_eq!(usage.status, 200, "{}", usage.body);
        let json: serde_json::Value = serde_json::from_str(&usage.body).expect("json");
        assert_eq!(json["limits"][0]["remaining"], 90, "{store:?}: {json}");
        let holders = &json["rlqs_holders"];
        assert_eq!(holders.as_array().map(Vec::len), Some(1), "{store:?}: {json}");
        assert_eq!(holders[0]["envoy"], "envoy:edge-1");
        assert_eq!(holders[0]["claim"], 90);
        assert_eq!(holders[0]["live"], true);
        // The stream ends: the Envoy no longer weighs, its claim stays until it expires.
        drop(envoy);
        let released = eventually(Duration::from_secs(5), || async {
            let usage = app.admin("GET", "/v1/usage?domain=api&descriptor=name%3Duser,user%3Dharriet").await;
            let json: serde_json::Value = serde_json::from_str(&usage.body).expect("json");
            json["rlqs_holders"][0]["live"] == false && json["rlqs_holders"][0]["claim"] == 90
        })
        .await;
        assert!(released, "{store:?}: the share is released, the claim kept");
        let metrics = app.metrics().await;
        assert_eq!(metric_value(&metrics, "tollgate_rlqs_streams"), 0.0, "{store:?}");
        assert_eq!(metric_value(&metrics, "tollgate_rlqs_buckets"), 0.0, "{store:?}");
    }
}

/// Opens a stream that sends Tollgate's own bytes-typed reports (what Envoy may really
/// send: header bytes that are not UTF-8), answered as Envoy's responses.
async fn raw_stream(
    addr: std::net::SocketAddr,
) -> (
    mpsc::Sender<tollgate::service::rlqs::wire::RateLimitQuotaUsageReports>,
    Streaming<RateLimitQuotaResponse>,
) {
    use tollgate::service::rlqs::wire::RateLimitQuotaUsageReports as Raw;
    let channel =
        Channel::from_shared(format!("http://{addr}")).expect("endpoint").connect().await.expect("connect");
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.expect("ready");
    let (reports, rx) = mpsc::channel::<Raw>(16);
    let outbound = futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|m| (m, rx)) });
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(
        "/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas",
    );
    let codec = tonic_prost::ProstCodec::<Raw, RateLimitQuotaResponse>::default();
    let answers =
        grpc.streaming(tonic::Request::new(outbound), path, codec).await.expect("stream opens").into_inner();
    (reports, answers)
}

#[tokio::test]
async fn bytes_that_are_not_utf8_fail_one_bucket_never_the_report_or_the_stream() {
    use tollgate::service::rlqs::wire::{
        BucketId as RawId, BucketQuotaUsage as RawUsage, Entry, RateLimitQuotaUsageReports as Raw,
    };
    let app = spawn_app(StoreKind::Memory, &[("api.yaml", POLICY)]).await;
    let addr = app.running.as_ref().expect("running").grpc_addr;
    let (reports, mut answers) = raw_stream(addr).await;
    let raw = |key: &[u8], value: &[u8]| RawUsage {
        bucket_id: Some(RawId { bucket: vec![Entry::new(key, value)] }),
        time_elapsed: Some(ProtoDuration { seconds: 0, nanos: 0 }),
        num_requests_allowed: 1,
        num_requests_denied: 0,
    };
    let report = Raw {
        domain: "api".into(),
        bucket_quota_usages: vec![raw(b"second", b"\xff\xfe"), raw(b"second", b"ok")],
    };
    reports.send(report).await.expect("sent");
    let response = tokio::time::timeout(Duration::from_secs(5), answers.message()).await.expect("answered");
    let response = response.expect("no stream error").expect("a response");
    assert_eq!(response.bucket_action.len(), 1, "{response:?}");
    assert_eq!(response.bucket_action[0].bucket_id, Some(one("second", "ok")));
    // A domain that is not UTF-8: counted, nothing answered, and the stream still answers.
    reports
        .send(Raw { domain: b"\xc3\x28".to_vec().into(), bucket_quota_usages: vec![raw(b"second", b"ok")] })
        .await
        .expect("sent");
    reports
        .send(Raw { domain: "api".into(), bucket_quota_usages: vec![raw(b"second", b"ok")] })
        .await
        .expect("sent");
    let next = tokio::time::timeout(Duration::from_secs(5), answers.message()).await.expect("answered");
    assert_eq!(next.expect("no stream error").expect("a response").bucket_action.len(), 1);
    let metrics = app.metrics().await;
    assert_eq!(counter_value(&metrics, "tollgate_rlqs_invalid_total{reason=\"not_utf8\"}"), 2.0);
}

#[tokio::test]
async fn a_reload_that_halves_a_limit_is_in_the_next_assignment() {
    let app = spawn_app(StoreKind::Redis, &[("api.yaml", POLICY)]).await;
    let addr = app.running.as_ref().expect("running").grpc_addr;
    let mut envoy = Envoy::open(addr, Some("a")).await;
    assert_eq!(tokens(&envoy.report("api", usage(user_id("ivan"), 1, 0, 0)).await), 99);
    std::fs::write(
        app.config_path().join("api.yaml"),
        POLICY.replace("requests_per_unit: 100", "requests_per_unit: 50"),
    )
    .expect("rewrite");
    assert_eq!(app.admin("POST", "/reload").await.status, 200);
    // The bucket keeps its count across the change: 50 less the 11 reported.
    let halved = envoy.report("api", usage(user_id("ivan"), 10, 0, 5)).await;
    assert_eq!(tokens(&halved), 39);
}

const WIDE: &str = r#"
domain: wide
descriptors:
  - key: name
    value: user
    descriptors:
      - key: user
        rate_limit: { unit: second, requests_per_unit: 1000000 }
"#;

#[tokio::test]
async fn ten_thousand_buckets_of_one_envoy_are_each_assigned_a_token_bucket() {
    for store in [StoreKind::Memory, StoreKind::Redis] {
        let app = spawn_app(store, &[("wide.yaml", WIDE)]).await;
        let addr = app.running.as_ref().expect("running").grpc_addr;
        let mut envoy = Envoy::open(addr, Some("a")).await;
        let users: Vec<String> = (0..10_000).map(|i| format!("u{i}")).collect();
        // Envoy's first requests: one immediate report per bucket.
        for user in &users {
            envoy.send("wide", vec![usage(user_id(user), 1, 0, 0)]).await;
        }
        let mut answered = 0;
        while answered < users.len() {
            let response = envoy.next().await;
            for action in &response.bucket_action {
                assert!(matches!(assigned(action), Assigned::Tokens { .. }), "{store:?}: {action:?}");
            }
            answered += response.bucket_action.len();
        }
        // The periodic report: every bucket in one message.
        tokio::time::sleep(Duration::from_secs(1)).await;
        envoy.send("wide", users.iter().map(|u| usage(user_id(u), 50, 0, 5)).collect()).await;
        let response = envoy.next().await;
        assert_eq!(response.bucket_action.len(), users.len(), "{store:?}");
        let tokens_only =
            response.bucket_action.iter().all(|a| matches!(assigned(a), Assigned::Tokens { .. }));
        assert!(tokens_only, "{store:?}");
        let metrics = app.metrics().await;
        assert_eq!(
            counter_value(&metrics, "tollgate_rlqs_assignments_total{action=\"deny_all\"}"),
            0.0,
            "{store:?}"
        );
        assert_eq!(metric_value(&metrics, "tollgate_rlqs_buckets"), 10_000.0, "{store:?}");
    }
}

#[tokio::test]
async fn an_unnamed_streams_claims_end_with_it_so_a_restarted_envoy_is_not_starved() {
    for store in [StoreKind::Memory, StoreKind::Redis] {
        let app = spawn_app(store, &[("api.yaml", POLICY)]).await;
        let addr = app.running.as_ref().expect("running").grpc_addr;
        let mut first = Envoy::open(addr, None).await;
        assert_eq!(tokens(&first.report("api", usage(user_id("jo"), 1, 0, 0)).await), 99, "{store:?}");
        drop(first);
        // The same Envoy, restarted: a new stream with no name. Once the old stream has
        // ended, the whole headroom is its own again (not 0 for the old claim's 20 s).
        let whole = eventually(Duration::from_secs(5), || async {
            let mut again = Envoy::open(addr, None).await;
            tokens(&again.report("api", usage(user_id("jo"), 0, 0, 5)).await) == 99
        })
        .await;
        assert!(whole, "{store:?}");
    }
}

const TWO_LIMITS: &str = r#"
domain: two
descriptors:
  - key: user
    rate_limits:
      - { name: hourly, unit: hour, requests_per_unit: 100 }
      - { name: minutely, unit: minute, requests_per_unit: 10, algorithm: fixed_window }
"#;

#[tokio::test]
async fn several_limits_on_one_rule_assign_the_tightest_and_charge_each() {
    let app = spawn_app(StoreKind::Redis, &[("two.yaml", TWO_LIMITS)]).await;
    let addr = app.running.as_ref().expect("running").grpc_addr;
    let mut envoy = Envoy::open(addr, Some("a")).await;
    assert_eq!(
        tokens(&envoy.report("two", usage(one("user", "kim"), 1, 0, 0)).await),
        9,
        "the minute's 9 left"
    );
    // 9 more: the minute is spent (DENY_ALL), the hour has 90 left; RLS sees both.
    assert_eq!(
        assigned(&envoy.report("two", usage(one("user", "kim"), 9, 0, 5)).await),
        Assigned::Deny { ttl: 15 }
    );
    let mut peek = request("two", &[&[("user", "kim")]]);
    peek.descriptors[0].hits_addend = Some(UInt64Value { value: 0 });
    let statuses = app.check(peek).await.statuses;
    assert_eq!(statuses[0].limit_remaining, 0, "the tightest limit, as RLS answers it");
}

#[tokio::test]
async fn a_refund_and_a_reset_through_another_instance_give_the_room_back_to_rlqs() {
    let token_dir = tempfile::tempdir().expect("tempdir");
    let token_file = token_dir.path().join("admin-token");
    std::fs::write(&token_file, "rlqs-t0ken\n").expect("token");
    let options = Options { admin_token_file: Some(token_file), ..Options::new(StoreKind::Redis) };
    let first = spawn_with(options.clone(), &[("api.yaml", POLICY)]).await;
    let url = first.redis.as_ref().expect("own redis").url();
    let second = spawn_with(Options { redis_url: Some(url), ..options }, &[("api.yaml", POLICY)]).await;
    let addr = first.running.as_ref().expect("running").grpc_addr;
    let mut envoy = Envoy::open(addr, Some("a")).await;
    envoy.report("api", usage(user_id("lee"), 1, 0, 0)).await;
    assert_eq!(tokens(&envoy.report("api", usage(user_id("lee"), 59, 0, 5)).await), 40);
    // An RLS refund of 20 through the other instance: the next assignment has 60.
    let mut refund = request("api", &[&[("name", "user"), ("user", "lee")]]);
    refund.descriptors[0].hits_addend = Some(UInt64Value { value: 20 });
    refund.descriptors[0].is_negative_hits = true;
    assert!(!over(&second.check(refund).await));
    assert_eq!(tokens(&envoy.report("api", usage(user_id("lee"), 0, 0, 5)).await), 60);
    // An operator's reset through the other instance: the whole limit again.
    let path = "/v1/reset?domain=api&descriptor=name%3Duser,user%3Dlee";
    let headers = [("Authorization", "Bearer rlqs-t0ken")];
    let reset = http_request(second.admin_addr(), "POST", path, &headers, "").await.expect("reset");
    assert_eq!(reset.status, 200, "{}", reset.body);
    assert_eq!(tokens(&envoy.report("api", usage(user_id("lee"), 0, 0, 5)).await), 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_incident_override_set_through_another_instance_opens_rlqs_buckets_and_ends() {
    let token = AdminToken::new("rlqs-t0ken");
    let options = token.production(StoreKind::Redis);
    let first = spawn_with(options.clone(), &[("api.yaml", POLICY)]).await;
    let url = first.redis.as_ref().expect("own redis").url();
    let second = spawn_with(Options { redis_url: Some(url), ..options }, &[("api.yaml", POLICY)]).await;
    let addr = first.running.as_ref().expect("running").grpc_addr;
    let mut envoy = Envoy::open(addr, Some("a")).await;
    assert_eq!(tokens(&envoy.report("api", usage(user_id("max"), 1, 0, 0)).await), 99);
    let headers = [("Authorization", "Bearer rlqs-t0ken"), ("Content-Type", "application/json")];
    let body = r#"{"scope": "api", "mode": "open", "ttl_seconds": 30}"#;
    let set =
        http_request(second.admin_addr(), "POST", "/v1/override", &headers, body).await.expect("override");
    assert_eq!(set.status, 200, "{}", set.body);
    let opened = eventually(tollgate::sources::overrides::VISIBLE_WITHIN * 2, || async {
        let mut probe = Envoy::open(addr, Some("probe")).await;
        probe.report("api", usage(user_id("max"), 0, 0, 5)).await == wire_allow_all(user_id("max"))
    })
    .await;
    assert!(opened, "the first instance's RLQS answers ALLOW_ALL under the override");
    let end = http_request(second.admin_addr(), "DELETE", "/v1/override?scope=api", &headers, "")
        .await
        .expect("end");
    assert_eq!(end.status, 200, "{}", end.body);
    let until = std::time::Instant::now() + tollgate::sources::overrides::VISIBLE_WITHIN * 2;
    let closed = loop {
        let answer = assigned(&envoy.report("api", usage(user_id("max"), 0, 0, 5)).await);
        if matches!(answer, Assigned::Tokens { .. }) || std::time::Instant::now() > until {
            break answer;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        matches!(closed, Assigned::Tokens { .. }),
        "token buckets again once the override ends: {closed:?}"
    );
}

/// ALLOW_ALL for 10 s, the answer of an incident's `open` override.
fn wire_allow_all(id: BucketId) -> BucketAction {
    use envoy_types::pb::envoy::r#type::v3::RateLimitStrategy;
    use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::QuotaAssignmentAction;
    BucketAction {
        bucket_id: Some(id),
        bucket_action: Some(Kind::QuotaAssignmentAction(QuotaAssignmentAction {
            assignment_time_to_live: Some(ProtoDuration { seconds: 10, nanos: 0 }),
            rate_limit_strategy: Some(RateLimitStrategy { strategy: Some(Strategy::BlanketRule(0)) }),
        })),
    }
}

#[tokio::test]
async fn a_stream_ends_with_ok_after_the_connection_age_and_its_envoy_keeps_its_claim() {
    let options =
        Options { max_connection_age: Some(Duration::from_secs(1)), ..Options::new(StoreKind::Redis) };
    let app = spawn_with(options, &[("api.yaml", POLICY)]).await;
    let addr = app.running.as_ref().expect("running").grpc_addr;
    let mut envoy = Envoy::open(addr, Some("a")).await;
    let opened = std::time::Instant::now();
    envoy.report("api", usage(user_id("nia"), 1, 0, 0)).await;
    assert_eq!(tokens(&envoy.report("api", usage(user_id("nia"), 9, 0, 5)).await), 90);
    let end =
        tokio::time::timeout(Duration::from_secs(5), envoy.answers.message()).await.expect("the stream ends");
    assert!(matches!(end, Ok(None)), "ended with OK: {end:?}");
    let lived = opened.elapsed();
    assert!(
        lived >= Duration::from_millis(850) && lived < Duration::from_secs(3),
        "ended at the age ±10 %: {lived:?}"
    );
    // Envoy reopens at its next report; its claim and the budget are where they were.
    let mut again = Envoy::open(addr, Some("a")).await;
    assert_eq!(tokens(&again.report("api", usage(user_id("nia"), 0, 0, 5)).await), 90);
}

const APPROXIMATE: &str = r#"
domain: approx
consistency: approximate
failure_mode: closed
descriptors:
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 100, algorithm: fixed_window }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approximate_domain_and_rlqs_spend_one_budget() {
    let production = tollgate::app::ServeSettings::new(std::path::PathBuf::new());
    let options = Options { store_timeout: production.store_timeout, ..Options::new(StoreKind::Redis) };
    let app = spawn_with(options, &[("approx.yaml", APPROXIMATE)]).await;
    let addr = app.running.as_ref().expect("running").grpc_addr;
    let mut envoy = Envoy::open(addr, Some("a")).await;
    envoy.report("approx", usage(one("user", "olga"), 1, 0, 0)).await;
    assert_eq!(tokens(&envoy.report("approx", usage(one("user", "olga"), 59, 0, 5)).await), 40);
    // RLS on the approximate path sees RLQS's 60 (its first read of the bucket is Redis's):
    // it admits within the 40 left (its share rule may keep part back), never 100.
    let allowed = app.allowed_of(60, &request("approx", &[&[("user", "olga")]])).await;
    assert!((1..=40).contains(&allowed), "RLS admits within the 40 left: {allowed}");
    // And RLQS sees what RLS admitted once the approximate sync has written it.
    let left = 40 - allowed as u32;
    let until = std::time::Instant::now() + Duration::from_secs(5);
    let synced = loop {
        let now = tokens(&envoy.report("approx", usage(one("user", "olga"), 0, 0, 5)).await);
        if now <= left || std::time::Instant::now() > until {
            break now;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(synced, left, "RLQS assigns what RLS left once the sync wrote it");
    let metrics = app.metrics().await;
    assert_eq!(counter_value(&metrics, "tollgate_rlqs_failure_answers_total{mode=\"closed\"}"), 0.0);
}

#[tokio::test]
async fn a_newcomer_on_another_instance_takes_its_share_from_a_holder_at_once() {
    let first = spawn_app(StoreKind::Redis, &[("api.yaml", POLICY)]).await;
    let url = first.redis.as_ref().expect("own redis").url();
    let second = spawn_with(
        Options { redis_url: Some(url), ..Options::new(StoreKind::Redis) },
        &[("api.yaml", POLICY)],
    )
    .await;
    let mut a = Envoy::open(first.running.as_ref().expect("running").grpc_addr, Some("a")).await;
    let mut b = Envoy::open(second.running.as_ref().expect("running").grpc_addr, Some("b")).await;
    a.report("api", usage(user_id("pia"), 1, 0, 0)).await;
    assert_eq!(tokens(&a.report("api", usage(user_id("pia"), 9, 0, 5)).await), 90);
    // b's first request, through the other instance: it gets what a's claim leaves (none),
    // and a is pushed a smaller bucket through the store without reporting.
    let sent = std::time::Instant::now();
    assert_eq!(tokens(&b.report("api", usage(user_id("pia"), 1, 0, 0)).await), 0);
    let pushed = a.next().await;
    let took = sent.elapsed();
    let a_now = tokens(&pushed.bucket_action[0]);
    assert!(a_now < 90, "a shrinks: {a_now}");
    assert!(took < Duration::from_secs(2), "within the inbox's poll, not a's next report: {took:?}");
    let b_next = tokens(&b.report("api", usage(user_id("pia"), 0, 2, 5)).await);
    assert!(b_next > 0 && a_now + b_next <= 89, "{a_now} + {b_next} within the 89 left");
}
