//! Reservations through `ShouldRateLimit` (issue 40), on every store (`reservation_suite!`:
//! memory and Redis here; memory and a Redis Cluster in `tests/cluster.rs`): a descriptor
//! whose last entry is the domain's `reservations.key` reserves its `hits_addend` against
//! every limit of its rule, the second call naming it settles with the usage, and later
//! calls are plain.

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::google::protobuf::UInt64Value;
use tollgate::app::StoreKind;

use crate::support::*;

/// Two limits on one descriptor: 1000 a minute and 100 a day.
pub const TOKENS: &str = r#"
domain: tokens
reservations: { key: request, ttl: 10m }
descriptors:
  - key: user
    rate_limits:
      - { name: minute, unit: minute, requests_per_unit: 1000 }
      - { name: day, unit: day, requests_per_unit: 100 }
"#;

/// `user`'s descriptor with `hits` hits, naming reservation `id` when given.
pub fn tokens(user: &str, id: Option<&str>, hits: u64) -> RateLimitRequest {
    let mut entries = vec![("user", user)];
    entries.extend(id.map(|id| ("request", id)));
    let mut req = request("tokens", &[&entries]);
    req.descriptors[0].hits_addend = Some(UInt64Value { value: hits });
    req
}

/// The remaining the descriptor reports (the tightest limit's) and whether it is OK.
pub async fn answer(app: &TestApp, req: RateLimitRequest) -> (bool, u32) {
    let response = app.check(req).await;
    let status = &response.statuses[0];
    (is_ok(status), status.limit_remaining)
}

pub async fn reserve_then_settle_through_the_service(store: StoreKind) {
    let app = spawn_app(store, &[("tokens.yaml", TOKENS)]).await;
    reserve_then_settle(&app).await;
}

/// The calls of [`reserve_then_settle_through_the_service`] on `app` (serving [`TOKENS`]).
pub async fn reserve_then_settle(app: &TestApp) {
    assert_eq!(answer(app, tokens("a", Some("r1"), 60)).await, (true, 40), "admitted, net of the hold");
    assert_eq!(answer(app, tokens("a", None, 0)).await, (true, 40), "a peek sees the hold");
    assert!(!answer(app, tokens("a", Some("r2"), 60)).await.0, "60 does not fit 40: refused");
    assert_eq!(answer(app, tokens("a", None, 0)).await, (true, 40), "a refused reservation holds nothing");
    assert_eq!(answer(app, tokens("a", Some("r1"), 10)).await, (true, 90), "settled: 50 came back");
    assert_eq!(answer(app, tokens("a", Some("r1"), 5)).await, (true, 85), "settled before: a plain charge");
    assert_eq!(answer(app, tokens("a", Some("r2"), 0)).await, (true, 85), "refused before, 0 hits: a peek");
    // The bucket is the descriptor's without the reservation entry: another user is apart.
    assert_eq!(answer(app, tokens("b", Some("r1"), 100)).await, (true, 0), "b's own bucket, its own r1");
    // An overrun is recorded whatever it answers; the budget is then spent.
    assert!(answer(app, tokens("a", Some("r3"), 80)).await.0);
    assert!(!answer(app, tokens("a", Some("r3"), 200)).await.0);
    assert_eq!(answer(app, tokens("a", None, 0)).await, (false, 0));
    // A descriptor whose only entry names a reservation has no bucket.
    let only = request("tokens", &[&[("request", "r9")]]);
    let err = app.call(only).await.expect_err("INVALID_ARGUMENT");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
}

pub async fn concurrent_streams_never_overspend_a_budget(store: StoreKind) {
    let app = spawn_app(store, &[("tokens.yaml", TOKENS)]).await;
    let app = &app;
    let reserve =
        (0..30).map(|i| async move { answer(app, tokens("c", Some(&format!("s{i}")), 10)).await.0 });
    let admitted: Vec<usize> = futures_util::future::join_all(reserve)
        .await
        .into_iter()
        .enumerate()
        .filter(|(_, ok)| *ok)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(admitted.len(), 10, "{admitted:?}");
    let settle =
        admitted.iter().map(|i| async move { answer(app, tokens("c", Some(&format!("s{i}")), 7)).await });
    futures_util::future::join_all(settle).await;
    assert_eq!(answer(app, tokens("c", None, 0)).await, (true, 30), "10 streams used 7 each");
}

macro_rules! reservation_suite {
    ($store:ident, $kind:expr, [$($test:ident),* $(,)?]) => {
        mod $store {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    super::$test($kind).await
                }
            )*
        }
    };
}

reservation_suite!(
    memory,
    tollgate::app::StoreKind::Memory,
    [reserve_then_settle_through_the_service, concurrent_streams_never_overspend_a_budget]
);
reservation_suite!(
    redis,
    tollgate::app::StoreKind::Redis,
    [reserve_then_settle_through_the_service, concurrent_streams_never_overspend_a_budget]
);
