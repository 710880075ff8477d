//! `--redis-windows plain` at the store, on one real redis-server, at the default store
//! timeout: three instances (three stores, each with its own connections) hammering one
//! key admit exactly the limit and, once the give-backs have run, Redis holds exactly the
//! admitted count; a connection killed between an increment and its give-back never lets
//! one request too many through, and costs what the README says (the count stays one
//! high until the window ends).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tollgate::algorithm::{Algorithm, Hits, Params};
use tollgate::store::key::window_key;
use tollgate::store::redis::Windows;
use tollgate::store::{Charge, Groups, Guarded, RedisSettings, RedisStore, Store};

use crate::front_support::Front;
use crate::joint_store::calls;
use crate::redis_support::RedisServer;

const YEAR_US: u64 = 365 * 86_400_000_000;
/// `--store-timeout-ms`'s default.
const STORE_TIMEOUT: Duration = Duration::from_millis(10);

fn plain_store(url: String) -> Store {
    let settings = RedisSettings { windows: Windows::Plain, ..RedisSettings::new(url) };
    let redis = RedisStore::new(&settings, STORE_TIMEOUT).expect("store");
    Store::Redis(Guarded::new(redis, Some(settings.breaker)))
}

fn consume(key: &str, algorithm: Algorithm, limit: u64) -> Charge {
    Charge {
        key: key.into(),
        params: Params { algorithm, limit, unit_us: YEAR_US, burst: limit, penalty_us: 0, period: None },
        hits: Hits::Consume(1),
    }
}

/// One consume by `deadline` = now + the default store timeout: Some(allowed), or None
/// when the store failed (answered by the failure policy: never an admission here).
async fn once(store: &Store, charge: &Charge) -> Option<bool> {
    let deadline = Instant::now() + STORE_TIMEOUT;
    let results = store.charge_groups(std::slice::from_ref(charge), &Groups::each(), deadline).await;
    results.into_iter().next().and_then(Result::ok).map(|d| d.allowed)
}

/// The bucket's count in Redis in this window: the scripts' hash share and the window's
/// key (plain consumes).
fn count(redis: &RedisServer, key: &str) -> i64 {
    let now =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_micros() as u64;
    let (number, start) = (|s: String| s.trim().parse::<i64>().unwrap_or(0), now - now % YEAR_US);
    let hash = match redis.cli(&["HGET", key, "s"]).trim() == start.to_string() {
        true => number(redis.cli(&["HGET", key, "c"])),
        false => 0,
    };
    hash + number(redis.cli(&["GET", &window_key(key, start)]))
}

/// Polls until `key`'s count is `want` (the give-backs have run), for up to 10 s.
async fn settles_at(redis: &RedisServer, key: &str, want: i64) -> i64 {
    let until = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let now = count(redis, key);
        if now == want || std::time::Instant::now() > until {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn three_instances_admit_exactly_the_limit(algorithm: Algorithm) {
    let redis = RedisServer::start();
    let stores: Vec<Arc<Store>> = (0..3).map(|_| Arc::new(plain_store(redis.url()))).collect();
    // As an instance does before it reports ready: connections made, scripts loaded.
    for store in &stores {
        store.prepare(Instant::now() + Duration::from_secs(5)).await.expect("prepared");
    }
    let (limit, key) = (60u64, format!("tg:plain:{}", algorithm.as_str()));
    let charge = consume(&key, algorithm, limit);
    let mut tasks = vec![];
    for client in 0..24 {
        let (store, charge) = (stores[client % 3].clone(), charge.clone());
        tasks.push(tokio::spawn(async move {
            let (mut admitted, mut failed) = (0u64, 0u64);
            for _ in 0..10 {
                match once(&store, &charge).await {
                    Some(true) => admitted += 1,
                    Some(false) => {}
                    None => failed += 1,
                }
            }
            (admitted, failed)
        }));
    }
    let (mut admitted, mut failed) = (0u64, 0u64);
    for task in tasks {
        let (a, f) = task.await.expect("client");
        admitted += a;
        failed += f;
    }
    assert!(admitted <= limit, "{admitted} admitted past a limit of {limit}");
    // A consume the store failed on (its deadline passed) may have run and been admitted
    // in Redis: it is counted there, never admitted here.
    assert!(admitted + failed >= limit, "{admitted} admitted, {failed} failed, of 240 against {limit}");
    let held = settles_at(&redis, &key, admitted as i64).await;
    eprintln!("{}: {admitted} admitted, {failed} failed, {held} held", algorithm.as_str());
    assert!(
        held >= admitted as i64 && held <= (admitted + failed) as i64,
        "Redis holds {held} after the give-backs, {admitted} admitted, {failed} failed"
    );
    if failed == 0 {
        assert_eq!((admitted, held), (limit, limit as i64), "no failure: exactly the limit, exactly counted");
        // Decided by plain commands (the over-limit cache answers some denials without
        // Redis): every increment is an admission or a denial given back, and the only
        // script calls are those give-backs.
        // (`INCRBY` is the plain path's alone.)
        let increments = calls(&redis, "incrby");
        assert!(increments > limit, "{increments} plain consumes");
        assert_eq!(calls(&redis, "evalsha"), increments - limit, "one give-back per denial");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_fixed_windows_of_three_instances_admit_exactly_the_limit() {
    three_instances_admit_exactly_the_limit(Algorithm::FixedWindow).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_sliding_windows_of_three_instances_admit_exactly_the_limit() {
    three_instances_admit_exactly_the_limit(Algorithm::SlidingWindow).await;
}

/// The front closes the client's connection instead of forwarding Redis's reply: the
/// increment ran, the request failed, no give-back can follow. The count stays one high
/// (the README's cost), and nothing more is ever admitted than the limit allows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_connection_between_increment_and_give_back_never_over_admits() {
    let redis = RedisServer::start();
    let front = Front::to_port(redis.port());
    let store = plain_store(front.url());
    store.prepare(Instant::now() + Duration::from_secs(5)).await.expect("prepared");
    let (limit, key) = (5u64, "tg:plain:killed".to_string());
    let charge = consume(&key, Algorithm::FixedWindow, limit);
    let mut admitted = 0;
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while admitted < limit && std::time::Instant::now() < until {
        admitted += u64::from(once(&store, &charge).await == Some(true));
    }
    assert_eq!(admitted, limit, "the bucket fills");
    front.cut_replies(true);
    assert_eq!(once(&store, &charge).await, None, "the reply was cut: a store failure");
    front.cut_replies(false);
    assert_eq!(count(&redis, &key), limit as i64 + 1, "the increment ran, and no give-back followed");
    // A fresh connection: denied every time, each denial given back; the lost give-back
    // keeps the count one high (until the window ends), never lower.
    let mut answered = 0;
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while answered < 20 && std::time::Instant::now() < until {
        if let Some(allowed) = once(&store, &charge).await {
            assert!(!allowed, "admitted past the limit after a lost give-back");
            answered += 1;
        }
    }
    assert_eq!(answered, 20, "the store answers again");
    assert_eq!(settles_at(&redis, &key, limit as i64 + 1).await, limit as i64 + 1);
}

/// Concurrent requests on one instance are batched (the default): a lane's call carries
/// every rider's window consumes as plain commands beside one script call for the rest.
/// Each request here has a plain fixed-window consume, a GCRA consume and a joint group of
/// two fixed windows (kept on its script), and other requests peek the plain bucket: every
/// rider gets its own answers, each limit is admitted exactly (when nothing failed), a
/// denied group charges neither member, and Redis holds the plain bucket's admitted count
/// once its give-backs have run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_requests_mixing_plain_and_script_charges_each_get_their_own_answers() {
    let redis = RedisServer::start();
    let store = Arc::new(plain_store(redis.url()));
    store.prepare(Instant::now() + Duration::from_secs(5)).await.expect("prepared");
    let (plain_limit, gcra_limit, joint_limit) = (50u64, 30u64, 40u64);
    let request = vec![
        consume("tg:mixed:plain", Algorithm::FixedWindow, plain_limit),
        consume("tg:mixed:gcra", Algorithm::Gcra, gcra_limit),
        consume("tg:mixed:joint-a", Algorithm::FixedWindow, joint_limit),
        consume("tg:mixed:joint-b", Algorithm::FixedWindow, 1_000),
    ];
    let groups = Groups::from_ends(vec![1, 2, 4]);
    let peek = Charge { hits: Hits::Peek, ..request[0].clone() };
    let mut tasks = vec![];
    for client in 0..24 {
        let (store, request, groups, peek) = (store.clone(), request.clone(), groups.clone(), peek.clone());
        tasks.push(tokio::spawn(async move {
            let (mut admitted, mut failed) = ([0u64; 3], 0u64);
            for _ in 0..5 {
                if client % 4 == 0 {
                    let deadline = Instant::now() + STORE_TIMEOUT;
                    let peeked =
                        store.charge_groups(std::slice::from_ref(&peek), &Groups::each(), deadline).await;
                    if let Some(Ok(d)) = peeked.first() {
                        assert!(d.remaining <= plain_limit, "a peek of the plain bucket: {d:?}");
                    }
                    continue;
                }
                let deadline = Instant::now() + STORE_TIMEOUT;
                let results = store.charge_groups(&request, &groups, deadline).await;
                assert_eq!(results.len(), 4, "one result per charge");
                match (&results[0], &results[1], &results[2], &results[3]) {
                    (Ok(p), Ok(g), Ok(a), Ok(b)) => {
                        let group = a.allowed && b.allowed;
                        for (slot, allowed) in [p.allowed, g.allowed, group].into_iter().enumerate() {
                            admitted[slot] += u64::from(allowed);
                        }
                    }
                    _ => failed += 1,
                }
            }
            (admitted, failed)
        }));
    }
    let (mut admitted, mut failed) = ([0u64; 3], 0u64);
    for task in tasks {
        let (a, f) = task.await.expect("client");
        (0..3).for_each(|i| admitted[i] += a[i]);
        failed += f;
    }
    let limits = [plain_limit, gcra_limit, joint_limit];
    for i in 0..3 {
        assert!(admitted[i] <= limits[i], "{} admitted past a limit of {}", admitted[i], limits[i]);
    }
    let held = settles_at(&redis, "tg:mixed:plain", admitted[0] as i64).await;
    eprintln!("mixed: {admitted:?} admitted, {failed} requests failed, plain bucket holds {held}");
    assert!(held >= admitted[0] as i64 && held <= (admitted[0] + failed) as i64, "plain bucket holds {held}");
    if failed == 0 {
        assert_eq!(admitted, limits, "no failure: each limit admitted exactly");
        assert_eq!(held, plain_limit as i64);
        // A denied group charged neither member.
        let joint = [count(&redis, "tg:mixed:joint-a"), count(&redis, "tg:mixed:joint-b")];
        assert_eq!(joint, [joint_limit as i64; 2], "each member holds the group's admissions");
    }
}

/// A sliding window's previous count is read, not rolled: a bucket whose hash a script
/// wrote in the previous window (its count there is the previous count now) and whose
/// previous window key holds plain consumes is decided by plain commands alone, with no
/// script call, exactly as the script alone decides a bucket holding the same counts in
/// its hash, and both then count the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sliding_windows_previous_count_from_the_hash_and_its_key_is_read_without_a_script() {
    let redis = RedisServer::start();
    let plain = plain_store(redis.url());
    let lua = {
        let settings = RedisSettings::new(redis.url());
        Store::Redis(Guarded::new(RedisStore::new(&settings, STORE_TIMEOUT).expect("store"), None))
    };
    for store in [&plain, &lua] {
        store.prepare(Instant::now() + Duration::from_secs(5)).await.expect("prepared");
    }
    let now =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_micros() as u64;
    let (current, previous) = (now - now % YEAR_US, now - now % YEAR_US - YEAR_US);
    let request = |side: &str| -> Vec<Charge> {
        (0..3).map(|i| consume(&format!("tg:prev:{side}:{i}"), Algorithm::SlidingWindow, 100)).collect()
    };
    for charge in request("plain") {
        redis.cli(&["HSET", &charge.key, "s", &previous.to_string(), "c", "5", "p", "0"]);
        redis.cli(&["SET", &window_key(&charge.key, previous), "40"]);
    }
    for charge in request("lua") {
        redis.cli(&["HSET", &charge.key, "s", &previous.to_string(), "c", "45", "p", "0"]);
    }
    let deadline = Instant::now() + Duration::from_secs(1);
    let decided = plain.charge_groups(&request("plain"), &Groups::each(), deadline).await;
    assert_eq!(calls(&redis, "evalsha"), 0, "no script call");
    let deadline = Instant::now() + Duration::from_secs(1);
    let expected = lua.charge_groups(&request("lua"), &Groups::each(), deadline).await;
    for (i, (got, want)) in decided.iter().zip(&expected).enumerate() {
        let (got, want) = (got.as_ref().expect("plain decided"), want.as_ref().expect("lua decided"));
        assert!(got.allowed, "{got:?}");
        assert_eq!((got.allowed, got.remaining), (want.allowed, want.remaining), "charge {i}");
        assert_eq!(count(&redis, &format!("tg:prev:plain:{i}")), 1, "this consume, in the window's key");
        let lua_hash = redis.cli(&["HMGET", &format!("tg:prev:lua:{i}"), "s", "c", "p"]);
        assert_eq!(
            lua_hash.split_whitespace().collect::<Vec<_>>(),
            [current.to_string().as_str(), "1", "45"]
        );
    }
}

/// A coalesced run (the coalescer's: independent consumes of one bucket in one call) goes
/// plain whole, in one pipeline: each consume counts the ones before it, so exactly the
/// limit is admitted, in order, and the denials are given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coalesced_run_of_one_bucket_goes_plain_in_order() {
    let redis = RedisServer::start();
    let store = plain_store(redis.url());
    store.prepare(Instant::now() + Duration::from_secs(5)).await.expect("prepared");
    let run: Vec<Charge> = (0..5).map(|_| consume("tg:plain:run", Algorithm::FixedWindow, 3)).collect();
    let deadline = Instant::now() + Duration::from_secs(1);
    let results = store.charge_groups(&run, &Groups::coalesced(vec![5]), deadline).await;
    let answers: Vec<(bool, u64)> =
        results.iter().map(|r| r.as_ref().map(|d| (d.allowed, d.remaining)).expect("decided")).collect();
    assert_eq!(answers, [(true, 2), (true, 1), (true, 0), (false, 0), (false, 0)]);
    assert_eq!(calls(&redis, "incrby"), 5, "every consume of the run went plain");
    assert_eq!(settles_at(&redis, "tg:plain:run", 3).await, 3, "the denials given back");
}

/// Writes junk under a bucket's keys: (redis, bucket key, current window, previous window).
type Put = fn(&RedisServer, &str, u64, u64);

/// What another writer may leave under a bucket's keys: the window's key text, a hash or a
/// count past what `INCRBY` can add to, the previous window's key a hash, the bucket a
/// string. A plain consume on such keys is decided by the script, which reads them as the
/// `lua` path does: a window key it cannot read counts 0 (never a store failure answered
/// by the failure policy); a bucket of another type is a store error on both paths (no
/// algorithm writes one: a bucket key names its algorithm).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn junk_under_a_plain_windows_keys_is_decided_by_the_script_as_by_lua() {
    let redis = RedisServer::start();
    let plain = plain_store(redis.url());
    let read = {
        let settings = RedisSettings { windows: Windows::Read, ..RedisSettings::new(redis.url()) };
        Store::Redis(Guarded::new(RedisStore::new(&settings, STORE_TIMEOUT).expect("store"), None))
    };
    for store in [&plain, &read] {
        store.prepare(Instant::now() + Duration::from_secs(5)).await.expect("prepared");
    }
    let now =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_micros() as u64;
    let (current, previous) = (now - now % YEAR_US, now - now % YEAR_US - YEAR_US);
    let junk: [(&str, Put); 5] = [
        ("bucket-string", |r, key, _, _| {
            r.cli(&["SET", key, "g:12345"]);
        }),
        ("window-text", |r, key, current, _| {
            r.cli(&["SET", &window_key(key, current), "many"]);
        }),
        ("window-hash", |r, key, current, _| {
            r.cli(&["HSET", &window_key(key, current), "c", "1"]);
        }),
        ("window-overflow", |r, key, current, _| {
            r.cli(&["SET", &window_key(key, current), &i64::MAX.to_string()]);
        }),
        ("previous-hash", |r, key, _, previous| {
            r.cli(&["HSET", &window_key(key, previous), "c", "1"]);
        }),
    ];
    for algorithm in [Algorithm::FixedWindow, Algorithm::SlidingWindow] {
        for (name, put) in &junk {
            let mut answers = Vec::new();
            for (side, store) in [("plain", &plain), ("read", &read)] {
                let key = format!("tg:junk:{algorithm:?}:{name}:{side}");
                put(&redis, &key, current, previous);
                let mut got = Vec::new();
                for _ in 0..4 {
                    let deadline = Instant::now() + Duration::from_secs(1);
                    let results =
                        store.charge_groups(&[consume(&key, algorithm, 3)], &Groups::each(), deadline).await;
                    let decided = results.into_iter().next().expect("one result");
                    got.push(decided.ok().map(|d| (d.allowed, d.remaining)));
                }
                answers.push(got);
            }
            assert_eq!(answers[0], answers[1], "{algorithm:?} {name}: plain and read differ");
            let admitted = answers[0].iter().filter(|a| matches!(a, Some((true, _)))).count();
            match *name {
                "bucket-string" => assert_eq!(answers[0], [None; 4], "{algorithm:?}: a store error"),
                "window-overflow" => assert_eq!(admitted, 0, "{algorithm:?}: the window is full"),
                _ => {
                    assert_eq!(admitted, 3, "{algorithm:?} {name}: {answers:?}");
                    assert!(answers[0].iter().all(Option::is_some), "{algorithm:?} {name}: {answers:?}");
                }
            }
        }
    }
}
