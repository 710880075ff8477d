//! All-or-nothing groups whose keys span slots, hammered on a real 3-master cluster: every
//! member answers its own bucket — never another member's numbers, never a charge applied
//! twice or to the wrong bucket — with distinct hits per member, refunds mixed in, groups
//! denied and undone, and other requests on other keys at the same time so that coalescing,
//! pipelining per master and the over-limit cache are all at work. At the store (as the
//! app builds it: over-limit cache and coalescing in front of the cluster client) and
//! through the gRPC service. Each owner of a pair is the only one charging it, so its
//! buckets are known exactly: the pair's limits differ (20 and 50) and so do its hits, so a
//! swapped answer or a double charge shows in `remaining`, and at the end in Redis itself.

use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::google::protobuf::UInt64Value;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;
use tollgate::algorithm::{Algorithm, Decision, Hits, Params};
use tollgate::store::cluster::{key_slot, ClusterSettings, ClusterStore};
use tollgate::store::redis::DEFAULT_MAX_INFLIGHT;
use tollgate::store::{Charge, Groups, Guarded, RedisSettings, Store};

use crate::cluster_support::RedisCluster;
use crate::support::{spawn_on, start_cluster};

/// The pair's limits: distinct, so that one member's numbers are never the other's.
const LIMITS: [u64; 2] = [20, 50];
/// A window no test run crosses (fixed windows are epoch-aligned).
const YEAR_US: u64 = 365 * 86_400_000_000;
/// Pairs hammered at once, and requests each.
const OWNERS: usize = 6;
const REQUESTS: usize = 150;

fn params(limit: u64) -> Params {
    Params {
        algorithm: Algorithm::FixedWindow,
        limit,
        unit_us: YEAR_US,
        burst: limit,
        penalty_us: 0,
        period: None,
    }
}

/// One owner's buckets as they must stand (the count of each fixed window).
#[derive(Debug, Default, Clone, Copy)]
struct Pair {
    count: [u64; 2],
}

/// What one member of a request must answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// Allowed, with this much left.
    Allowed(u64),
    /// Denied (its own consume does not fit).
    Denied,
    /// Allowed, nothing charged: its bucket as it stands (`remaining`), or not evaluated
    /// when the over-limit cache denied the group without Redis.
    Spared(u64),
}

impl Pair {
    /// The hits of a request on this pair, members in `order` (bucket indices): distinct
    /// per member (a: 1–3, b: 1–5), now and then a refund — also beside a consume that
    /// does not fit (the refund must then not be applied).
    fn draw(rng: &mut StdRng, order: [usize; 2]) -> [Hits; 2] {
        order.map(|k| {
            let n = rng.random_range(1..=[3, 5][k]);
            if rng.random_range(0..5) == 0 {
                Hits::Refund(n)
            } else {
                Hits::Consume(n)
            }
        })
    }

    /// Applies a group (all or nothing) and says what each member must answer.
    fn apply(&mut self, order: [usize; 2], hits: [Hits; 2]) -> [Expect; 2] {
        let fits = |k: usize, h: Hits| match h {
            Hits::Consume(n) => self.count[k] + n <= LIMITS[k],
            _ => true,
        };
        let all = order.iter().zip(&hits).all(|(&k, &h)| fits(k, h));
        if !all {
            let mut out = [Expect::Denied; 2];
            for (i, (&k, &h)) in order.iter().zip(&hits).enumerate() {
                if fits(k, h) {
                    out[i] = Expect::Spared(LIMITS[k] - self.count[k]);
                }
            }
            return out;
        }
        let mut out = [Expect::Denied; 2];
        for (i, (&k, &h)) in order.iter().zip(&hits).enumerate() {
            self.count[k] = match h {
                Hits::Consume(n) => self.count[k] + n,
                Hits::Refund(n) => self.count[k].saturating_sub(n),
                _ => self.count[k],
            };
            out[i] = Expect::Allowed(LIMITS[k] - self.count[k]);
        }
        out
    }
}

/// Whether `got` is what `want` says (`None`: not evaluated, the over-limit cache denied
/// the group on another member).
fn answers(want: Expect, got: Option<Decision>) -> bool {
    match (want, got) {
        (Expect::Allowed(left), Some(d)) => d.allowed && d.remaining == left,
        (Expect::Denied, Some(d)) => !d.allowed && d.remaining == 0,
        (Expect::Spared(left), Some(d)) => d.allowed && d.remaining == left,
        // The over-limit cache denied the group on another member: not looked at.
        (Expect::Spared(_) | Expect::Denied, None) => true,
        _ => false,
    }
}

/// `OWNERS` pairs of keys on different slots: the first half on one master each, the
/// other half spread over two masters (one pipeline per master, or one with two entries).
fn pairs(cluster: &RedisCluster, prefix: &str) -> Vec<[String; 2]> {
    let owner = |key: &str| cluster.owner_of(cluster.keyslot(key));
    let (mut same, mut apart) = (Vec::new(), Vec::new());
    for i in 0..1000 {
        let pair = [format!("{prefix}:a:{i}"), format!("{prefix}:b:{i}")];
        if key_slot(pair[0].as_bytes()) == key_slot(pair[1].as_bytes()) {
            continue;
        }
        let list = if owner(&pair[0]) == owner(&pair[1]) { &mut same } else { &mut apart };
        if list.len() < OWNERS / 2 {
            list.push(pair);
        }
        if same.len() + apart.len() == OWNERS {
            break;
        }
    }
    assert_eq!(same.len() + apart.len(), OWNERS, "pairs on one master and on two");
    same.into_iter().chain(apart).collect()
}

/// The count Redis holds for fixed-window bucket `key` (0: no key).
fn stored_count(cluster: &RedisCluster, key: &str) -> u64 {
    let node = cluster.owner_of(cluster.keyslot(key));
    let count = cluster.cli(node, &["HGET", key, "c"]);
    if count.is_empty() {
        0
    } else {
        count.parse().unwrap_or_else(|_| panic!("count of {key}: {count:?}"))
    }
}

/// Requests on other keys while the pairs are hammered: single charges of a few hot keys
/// (they coalesce), requests of several independent charges (one pipeline per master),
/// and all-or-nothing groups of shared keys with small limits (denied and undone often).
async fn noise(store: Arc<Store>, seed: u64, until: Instant) {
    let mut rng = StdRng::seed_from_u64(seed);
    let key = |rng: &mut StdRng, kind: &str| format!("noise:{kind}:{}", rng.random_range(0..4));
    while Instant::now() < until {
        let deadline = Instant::now() + Duration::from_secs(2);
        match rng.random_range(0..3) {
            0 => {
                let batch =
                    [Charge { key: key(&mut rng, "hot"), params: params(1_000_000), hits: Hits::Consume(1) }];
                store.charge(&batch, deadline).await;
            }
            1 => {
                let batch: Vec<Charge> = (0..3)
                    .map(|_| Charge {
                        key: key(&mut rng, "hot"),
                        params: params(1_000_000),
                        hits: Hits::Consume(2),
                    })
                    .collect();
                store.charge(&batch, deadline).await;
            }
            _ => {
                let batch = [
                    Charge { key: key(&mut rng, "x"), params: params(30), hits: Hits::Consume(1) },
                    Charge { key: key(&mut rng, "y"), params: params(30), hits: Hits::Consume(3) },
                ];
                store.charge_groups(&batch, &Groups::from_ends(vec![2]), deadline).await;
                if rng.random_range(0..4) == 0 {
                    let refund =
                        [Charge { key: batch[1].key.clone(), params: params(30), hits: Hits::Refund(3) }];
                    store.charge(&refund, deadline).await;
                }
            }
        }
    }
}

/// One owner's requests on its pair, each checked against the pair's exact state; the
/// first wrong answer is the error.
async fn own_pair(store: Arc<Store>, keys: [String; 2], seed: u64) -> Result<Pair, String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut pair = Pair::default();
    let mut history = Vec::new();
    for n in 0..REQUESTS {
        let order = if rng.random_range(0..2) == 0 { [0, 1] } else { [1, 0] };
        let hits = Pair::draw(&mut rng, order);
        let batch: Vec<Charge> = order
            .iter()
            .zip(hits)
            .map(|(&k, hits)| Charge { key: keys[k].clone(), params: params(LIMITS[k]), hits })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(2);
        let results = store.charge_groups(&batch, &Groups::from_ends(vec![2]), deadline).await;
        let want = pair.apply(order, hits);
        let got: Vec<Option<Decision>> = results
            .iter()
            .map(|r| match r {
                Ok(d) if d.remaining == u64::MAX => None,
                Ok(d) => Some(*d),
                Err(e) => panic!("{keys:?} request {n}: store error {e}"),
            })
            .collect();
        history.push(format!("{order:?} {hits:?} → {got:?}"));
        if history.len() > 4 {
            history.remove(0);
        }
        if !want.iter().zip(&got).all(|(&w, &g)| answers(w, g)) {
            return Err(format!("{keys:?} request {n}: want {want:?}; history {history:#?}"));
        }
    }
    Ok(pair)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spanning_groups_answer_each_member_its_own_bucket_at_the_store() {
    let cluster = start_cluster().await;
    let link = RedisSettings::new("redis://unused").link(Duration::from_secs(2));
    let settings = ClusterSettings { nodes: cluster.nodes(), tls: Default::default(), link };
    let client = ClusterStore::new(&settings).expect("cluster store");
    let store = Arc::new(Store::Cluster(Guarded::new(client, None).coalescing(Some(DEFAULT_MAX_INFLIGHT))));
    let pairs = pairs(&cluster, "aon");
    let until = Instant::now() + Duration::from_secs(60);
    let noisy: Vec<_> = (0..4).map(|i| tokio::spawn(noise(store.clone(), 100 + i, until))).collect();
    let owners: Vec<_> = pairs
        .iter()
        .enumerate()
        .map(|(i, keys)| tokio::spawn(own_pair(store.clone(), keys.clone(), i as u64)))
        .collect();
    let finals = settle(owners, &noisy).await;
    for (keys, pair) in pairs.iter().zip(&finals) {
        let stored = [stored_count(&cluster, &keys[0]), stored_count(&cluster, &keys[1])];
        assert_eq!(stored, pair.count, "{keys:?}: each bucket charged exactly what it admitted");
    }
}

/// The policies of the gRPC test: the pairs' domain (limits 20 and 50 a year), and the
/// noise's (hot keys charged per descriptor; small all-or-nothing pairs of shared keys).
const POLICIES: [(&str, &str); 2] = [
    (
        "aon.yaml",
        "domain: aon\ncharge: all_or_nothing\ndescriptors:\n  - key: a\n    rate_limit: { unit: year, requests_per_unit: 20, algorithm: fixed_window }\n  - key: b\n    rate_limit: { unit: year, requests_per_unit: 50, algorithm: fixed_window }\n",
    ),
    (
        "noise.yaml",
        "domain: noise\ndescriptors:\n  - key: k\n    rate_limit: { unit: year, requests_per_unit: 1000000, algorithm: fixed_window }\n  - key: x\n    rate_limit: { unit: year, requests_per_unit: 30, algorithm: fixed_window }\n",
    ),
];

/// A descriptor `key=value` with its own hits (`None`: the request's) and refund flag.
fn descriptor(key: &str, value: &str, hits: Option<u64>, refund: bool) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: vec![Entry { key: key.into(), value: value.into() }],
        hits_addend: hits.map(|value| UInt64Value { value }),
        is_negative_hits: refund,
        limit: None,
    }
}

type Client =
    envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient<
        tonic::transport::Channel,
    >;

/// Requests of the noise domain: one hot descriptor (they coalesce), several descriptors
/// (one pipeline per master), and now and then a refund of a small shared bucket.
async fn grpc_noise(mut client: Client, seed: u64, until: Instant) {
    let mut rng = StdRng::seed_from_u64(seed);
    while Instant::now() < until {
        let count = [1, 1, 3][rng.random_range(0..3)];
        let descriptors = (0..count)
            .map(|_| match rng.random_range(0..4) {
                0 => descriptor(
                    "x",
                    &format!("s{}", rng.random_range(0..4)),
                    Some(2),
                    rng.random_range(0..3) == 0,
                ),
                _ => descriptor("k", &format!("hot{}", rng.random_range(0..4)), None, false),
            })
            .collect();
        let request = RateLimitRequest { domain: "noise".into(), descriptors, hits_addend: 0 };
        let _ = client.should_rate_limit(request).await;
    }
}

/// One owner's requests on its pair through the service, each checked against the pair's
/// exact state.
async fn grpc_pair(mut client: Client, value: String, seed: u64) -> Result<Pair, String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut pair = Pair::default();
    let mut history = Vec::new();
    for n in 0..REQUESTS {
        let order = if rng.random_range(0..2) == 0 { [0, 1] } else { [1, 0] };
        let hits = Pair::draw(&mut rng, order);
        let descriptors = order
            .iter()
            .zip(hits)
            .map(|(&k, hits)| {
                let (n, refund) = match hits {
                    Hits::Refund(n) => (n, true),
                    Hits::Consume(n) => (n, false),
                    other => panic!("drawn {other:?}"),
                };
                descriptor(["a", "b"][k], &value, Some(n), refund)
            })
            .collect();
        let request = RateLimitRequest { domain: "aon".into(), descriptors, hits_addend: 0 };
        let response = client
            .should_rate_limit(request)
            .await
            .map_err(|e| format!("{value} request {n}: {e}"))?
            .into_inner();
        let want = pair.apply(order, hits);
        // Not evaluated (the over-limit cache denied the group on another member): OK, no
        // limit named, 0 remaining.
        let got: Vec<Option<Decision>> = response
            .statuses
            .iter()
            .map(|s| {
                let allowed = s.code == Code::Ok as i32;
                (!allowed || s.current_limit.is_some()).then_some(Decision {
                    allowed,
                    remaining: u64::from(s.limit_remaining),
                    reset_us: 0,
                })
            })
            .collect();
        history.push(format!("{order:?} {hits:?} → {got:?}"));
        if history.len() > 4 {
            history.remove(0);
        }
        if got.len() != 2 || !want.iter().zip(&got).all(|(&w, &g)| answers(w, g)) {
            return Err(format!("{value} request {n}: want {want:?}; history {history:#?}"));
        }
    }
    Ok(pair)
}

/// The count Redis holds for descriptor `key` of the pair `value` (its bucket's key ends
/// with the descriptor's parts: `1:<key><len>:<value>`).
fn grpc_count(cluster: &RedisCluster, key: &str, value: &str) -> u64 {
    let suffix = format!("1:{key}{}:{value}", value.len());
    let found: Vec<String> = (0..crate::cluster_support::MASTERS)
        .flat_map(|i| cluster.keys(i))
        .filter(|k| k.starts_with("tg:") && k.ends_with(&suffix))
        .collect();
    match found.as_slice() {
        [] => 0,
        [one] => stored_count(cluster, one),
        more => panic!("several buckets end with {suffix}: {more:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spanning_groups_answer_each_member_its_own_bucket_through_the_service() {
    let cluster = start_cluster().await;
    let app = spawn_on(&cluster, Duration::from_secs(2), &POLICIES).await;
    let until = Instant::now() + Duration::from_secs(60);
    let noisy: Vec<_> =
        (0..4).map(|i| tokio::spawn(grpc_noise(app.client.clone(), 200 + i, until))).collect();
    let values: Vec<String> = (0..OWNERS).map(|i| format!("own{i}")).collect();
    let owners: Vec<_> = values
        .iter()
        .enumerate()
        .map(|(i, value)| tokio::spawn(grpc_pair(app.client.clone(), value.clone(), 50 + i as u64)))
        .collect();
    let finals = settle(owners, &noisy).await;
    for (value, pair) in values.iter().zip(&finals) {
        let stored = [grpc_count(&cluster, "a", value), grpc_count(&cluster, "b", value)];
        assert_eq!(stored, pair.count, "{value}: each bucket charged exactly what it admitted");
    }
}

/// Each owner's pair as it must stand once its requests are done; the noise stopped. At
/// least one pair was charged (else the test proved nothing).
async fn settle(
    owners: Vec<tokio::task::JoinHandle<Result<Pair, String>>>,
    noisy: &[tokio::task::JoinHandle<()>],
) -> Vec<Pair> {
    let mut finals = Vec::new();
    for owner in owners {
        finals.push(owner.await.expect("owner task").unwrap_or_else(|e| panic!("{e}")));
    }
    noisy.iter().for_each(tokio::task::JoinHandle::abort);
    assert!(finals.iter().any(|p| p.count != [0, 0]), "the pairs were charged: {finals:?}");
    finals
}
