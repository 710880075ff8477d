//! `GET /v1/usage` and `POST /v1/reset` on the admin port: the numbers of each algorithm,
//! nothing charged by a usage, a reset back to full, the token rules, the metric, and a
//! reset through one replica seen by another within `MAX_LOCAL_DENIAL`.

use serde_json::Value;
use tollgate::app::StoreKind;
use tollgate::store::overlimit::MAX_LOCAL_DENIAL;

use crate::support::*;

/// One rule per algorithm; per hour, so nothing refills while a test runs.
const POLICY: &str = "domain: api
descriptors:
  - key: g
    rate_limit: { name: per-g, unit: hour, requests_per_unit: 60, burst: 4 }
  - key: s
    rate_limit: { unit: hour, requests_per_unit: 5, algorithm: sliding_window }
  - key: f
    rate_limit: { unit: hour, requests_per_unit: 5, algorithm: fixed_window }
  - key: open
    rate_limit: { unlimited: true }
";

/// `path` on the admin port with `Authorization: Bearer token` when given; status and JSON.
pub async fn call(app: &TestApp, method: &str, path: &str, token: Option<&str>) -> (u16, Value) {
    let bearer = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> = bearer.iter().map(|b| ("Authorization", b.as_str())).collect();
    let response = http_with(app.admin_addr(), method, path, &headers).await.expect("admin HTTP");
    let json = serde_json::from_str(&response.body).unwrap_or(Value::String(response.body.clone()));
    (response.status, json)
}

fn usage_path(descriptor: &str) -> String {
    format!("/v1/usage?domain=api&descriptor={descriptor}")
}

fn reset_path(descriptor: &str) -> String {
    format!("/v1/reset?domain=api&descriptor={descriptor}")
}

/// `(capacity, consumed, remaining)` of the only limit of a usage answer.
fn numbers(json: &Value) -> (u64, u64, u64) {
    let limits = json["limits"].as_array().expect("limits");
    assert_eq!(limits.len(), 1, "{json}");
    let n = |field: &str| limits[0][field].as_u64().unwrap_or_else(|| panic!("{field} in {json}"));
    (n("capacity"), n("consumed"), n("remaining"))
}

fn allow_reset() -> Options {
    Options { admin_allow_unauthenticated_reset: true, ..Options::new(StoreKind::Memory) }
}

async fn usage_counts_each_algorithm_and_reset_refills(options: Options) {
    let app = spawn_with(options, &[("api.yaml", POLICY)]).await;
    let started = tokio::time::Instant::now();
    for key in ["g", "s", "f"] {
        assert_eq!(app.allowed_of(3, &request("api", &[&[(key, "alice")]])).await, 3);
    }
    let (status, gcra) = call(&app, "GET", &usage_path("g%3Dalice"), None).await;
    assert_eq!(status, 200, "{gcra}");
    assert_eq!(numbers(&gcra), (4, 3, 1), "GCRA: capacity is the burst");
    let limit = &gcra["limits"][0];
    assert_eq!(limit["rule"], "per-g");
    assert_eq!(limit["name"], "per-g");
    assert_eq!(limit["requests_per_unit"], 60);
    assert_eq!((limit["unit"].as_str(), limit["unit_multiplier"].as_u64()), (Some("hour"), Some(1)));
    assert_eq!(limit["algorithm"], "gcra");
    // Three emissions of 60 s until full, less the time since the first request.
    let reset = limit["reset_seconds"].as_u64().unwrap_or_default();
    let since_first = started.elapsed().as_secs() + 1;
    assert!((180 - since_first..=180).contains(&reset), "{gcra} ({since_first} s since the first)");
    assert_eq!(gcra["domain"], "api");
    assert_eq!(gcra["descriptor"], serde_json::json!([{ "key": "g", "value": "alice" }]));
    for (key, algorithm, rule) in
        [("s", "sliding_window", "descriptors[1]"), ("f", "fixed_window", "descriptors[2]")]
    {
        let (_, json) = call(&app, "GET", &usage_path(&format!("{key}%3Dalice")), None).await;
        assert_eq!(numbers(&json), (5, 3, 2), "{algorithm}: {json}");
        assert_eq!(json["limits"][0]["algorithm"], algorithm);
        assert_eq!(
            (&json["limits"][0]["rule"], &json["limits"][0]["name"]),
            (&Value::from(rule), &Value::Null)
        );
    }
    // A usage charges nothing: the same answer twice, and the bucket still admits 1.
    let (_, again) = call(&app, "GET", &usage_path("g%3Dalice"), None).await;
    assert_eq!(numbers(&again), numbers(&gcra));

    let (status, reset) = call(&app, "POST", &reset_path("g%3Dalice"), None).await;
    assert_eq!(status, 200, "{reset}");
    assert_eq!(numbers(&reset), (4, 0, 4), "answered as after the reset");
    assert_eq!(app.allowed_of(5, &request("api", &[&[("g", "alice")]])).await, 4, "full again");
    let (_, other) = call(&app, "GET", &usage_path("f%3Dalice"), None).await;
    assert_eq!(numbers(&other), (5, 3, 2), "other buckets untouched");
    assert_eq!(metric(&app.metrics().await, r#"tollgate_admin_resets_total{domain="api"}"#), Some(1.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_and_reset_on_the_memory_store() {
    usage_counts_each_algorithm_and_reset_refills(allow_reset()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_and_reset_on_redis() {
    usage_counts_each_algorithm_and_reset_refills(Options { store: StoreKind::Redis, ..allow_reset() }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_are_named_and_unmatched_descriptors_have_no_limits() {
    let app = spawn_with(allow_reset(), &[("api.yaml", POLICY)]).await;
    let (status, json) = call(&app, "GET", "/v1/usage?domain=web&descriptor=g%3Da", None).await;
    assert_eq!(status, 404, "{json}");
    assert!(json["error"].as_str().is_some_and(|e| e.contains("web")), "{json}");
    for (query, problem) in [
        ("domain=api", "descriptor"),
        ("descriptor=g%3Da", "domain"),
        ("domain=api&descriptor=novalue", "key=value"),
        ("domain=api&descriptor=g%3D%ZZ", "percent"),
    ] {
        for method in ["GET", "POST"] {
            let path = if method == "GET" { "/v1/usage" } else { "/v1/reset" };
            let (status, json) = call(&app, method, &format!("{path}?{query}"), None).await;
            assert_eq!(status, 400, "{query}: {json}");
            assert!(json["error"].as_str().is_some_and(|e| e.contains(problem)), "{query}: {json}");
        }
    }
    for descriptor in ["nope%3Dx", "open%3Dx", "g%3Da%2Cdeeper%3Dx"] {
        let (status, json) = call(&app, "GET", &usage_path(descriptor), None).await;
        assert_eq!((status, json["limits"].clone()), (200, serde_json::json!([])), "{descriptor}");
    }
    // Bytes that are not UTF-8 are read exactly and echoed escaped; `\,` escapes a comma.
    let (status, json) = call(&app, "GET", &usage_path("g%3D%FF%5C%2Cx"), None).await;
    assert_eq!(status, 200, "{json}");
    assert_eq!(json["descriptor"], serde_json::json!([{ "key": "g", "value": "\\xff,x" }]));
    assert_eq!(numbers(&json), (4, 0, 4));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_guards_both_and_reset_needs_one_unless_allowed() {
    // No token configured: usage is open, reset refused.
    let app = spawn_app(StoreKind::Memory, &[("api.yaml", POLICY)]).await;
    assert_eq!(call(&app, "GET", &usage_path("g%3Da"), None).await.0, 200);
    let (status, json) = call(&app, "POST", &reset_path("g%3Da"), None).await;
    assert_eq!(status, 403, "{json}");
    assert!(json["error"].as_str().is_some_and(|e| e.contains("--admin-token-file")), "{json}");
    let resets = metric(&app.metrics().await, r#"tollgate_admin_resets_total{domain="api"}"#);
    assert_eq!(resets, Some(0.0), "exported from startup at 0; a refused reset counts nothing");

    let dir = tempfile::tempdir().expect("tempdir");
    let token_file = dir.path().join("admin-token");
    std::fs::write(&token_file, "t0ken-s3cret\n").expect("write token");
    let options = Options { admin_token_file: Some(token_file), ..Options::new(StoreKind::Memory) };
    let app = spawn_with(options, &[("api.yaml", POLICY)]).await;
    for (method, path) in [("GET", usage_path("g%3Da")), ("POST", reset_path("g%3Da"))] {
        assert_eq!(call(&app, method, &path, None).await.0, 401, "{method} without the token");
        assert_eq!(call(&app, method, &path, Some("wrong")).await.0, 401, "{method} with a wrong token");
        let (status, json) = call(&app, method, &path, Some("t0ken-s3cret")).await;
        assert_eq!(status, 200, "{method}: {json}");
        assert!(!json.to_string().contains("t0ken"), "{json}");
    }
}

/// Two replicas on one Redis: A denies from its over-limit cache; a reset through B is
/// seen by A within `MAX_LOCAL_DENIAL` (polled every 20 ms; no sleep decides anything).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_through_one_replica_reaches_another_within_the_bound() {
    let policy = "domain: api\ndescriptors:\n  - key: user\n    rate_limit: { unit: hour, requests_per_unit: 2, algorithm: fixed_window }\n";
    let a = spawn_with(Options::new(StoreKind::Redis), &[("api.yaml", policy)]).await;
    let url = a.redis.as_ref().expect("a's redis").url();
    let b_options = Options { store: StoreKind::Redis, redis_url: Some(url), ..allow_reset() };
    let b = spawn_with(b_options, &[("api.yaml", policy)]).await;
    let alice = request("api", &[&[("user", "alice")]]);
    assert_eq!(a.allowed_of(3, &alice).await, 2, "the limit, then a denial Redis answered");
    // A denial answered by A's own cache: Redis sees no call for it. (A cached denial lives
    // at most MAX_LOCAL_DENIAL from its Redis call; on a loaded machine the next request may
    // come later than that and ask Redis again, which learns the denial anew: try again.)
    let calls = |app: &TestApp| evalsha_calls(app.redis.as_ref().expect("redis"));
    let mut cached = false;
    for _ in 0..20 {
        let before = calls(&a);
        assert!(over(&a.check(alice.clone()).await));
        if calls(&a) == before {
            cached = true;
            break;
        }
    }
    assert!(cached, "A never answered a denial from its over-limit cache");

    let (status, json) = call(&b, "POST", "/v1/reset?domain=api&descriptor=user%3Dalice", None).await;
    assert_eq!(status, 200, "{json}");
    let reset_at = tokio::time::Instant::now();
    let admitted = eventually(MAX_LOCAL_DENIAL * 3, || async { !over(&a.check(alice.clone()).await) }).await;
    let took = reset_at.elapsed();
    assert!(admitted, "A never admitted after the reset");
    // The margin covers the polling and a loaded machine, not the bound itself.
    assert!(took <= MAX_LOCAL_DENIAL * 2, "A admitted after {took:?}");
}

/// `--redis-windows plain` on instance A, `read` on B (scripts that count window keys), one
/// Redis, the production store timeout: B's `/v1/usage` counts A's plain consumes (kept in window keys beside the
/// scripts' hash), B's consume by script counts with them (A is denied at the limit,
/// never past it), and B's `/v1/reset` empties the window keys too (A admits the limit
/// again, once its over-limit cache has let go), for a fixed and a sliding window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_and_reset_through_a_read_instance_see_plain_window_counts() {
    let production = tollgate::app::ServeSettings::new(std::path::PathBuf::new()).store_timeout;
    let windows = tollgate::store::redis::Windows::Plain;
    let a_options = Options {
        store: StoreKind::Redis,
        store_timeout: production,
        windows,
        ..Options::new(StoreKind::Redis)
    };
    let a = spawn_with(a_options, &[("api.yaml", POLICY)]).await;
    let url = a.redis.as_ref().expect("a's redis").url();
    let b_options = Options {
        store: StoreKind::Redis,
        redis_url: Some(url),
        store_timeout: production,
        windows: tollgate::store::redis::Windows::Read,
        ..allow_reset()
    };
    let b = spawn_with(b_options, &[("api.yaml", POLICY)]).await;
    let incrby = |app: &TestApp| command_calls(app.redis.as_ref().expect("redis"), "incrby");
    for key in ["f", "s"] {
        let one = request("api", &[&[(key, "alice")]]);
        let before = incrby(&a);
        assert_eq!(a.allowed_of(3, &one).await, 3, "{key}: A admits three");
        assert_eq!(incrby(&a) - before, 3, "{key}: by plain commands");
        let (status, json) = call(&b, "GET", &usage_path(&format!("{key}%3Dalice")), None).await;
        assert_eq!((status, numbers(&json)), (200, (5, 3, 2)), "{key}: B reads A's counts: {json}");
        assert_eq!(b.allowed_of(2, &one).await, 2, "{key}: B's scripts count with them");
        assert_eq!(a.allowed_of(3, &one).await, 0, "{key}: at the limit A admits nothing");
        let (status, json) = call(&b, "POST", &reset_path(&format!("{key}%3Dalice")), None).await;
        assert_eq!((status, numbers(&json)), (200, (5, 0, 5)), "{key}: reset through B: {json}");
        // A's over-limit cache may deny for up to MAX_LOCAL_DENIAL after its last denial.
        let admitted =
            eventually(MAX_LOCAL_DENIAL * 3, || async { !over(&a.check(one.clone()).await) }).await;
        assert!(admitted, "{key}: A never admitted after the reset");
        assert_eq!(a.allowed_of(5, &one).await, 4, "{key}: A admits the limit again, no more");
    }
}

/// A domain made approximate by a reload on an instance with `--redis-windows plain` counts
/// the plain consumes its buckets took while exact (kept in window keys, which approximate
/// mode's sync reads on such an instance): the window admits at most the limit less them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_domain_made_approximate_counts_its_plain_consumes() {
    let production = tollgate::app::ServeSettings::new(std::path::PathBuf::new()).store_timeout;
    let windows = tollgate::store::redis::Windows::Plain;
    let options = Options { store_timeout: production, windows, ..Options::new(StoreKind::Redis) };
    let exact = "domain: api\ndescriptors:\n  - key: f\n    rate_limit: { unit: hour, requests_per_unit: 5, algorithm: fixed_window }\n";
    let app = spawn_with(options, &[("api.yaml", exact)]).await;
    let one = request("api", &[&[("f", "alice")]]);
    assert_eq!(app.allowed_of(3, &one).await, 3);
    assert!(command_calls(app.redis.as_ref().expect("redis"), "incrby") >= 3, "plain consumes");
    let approximate = exact.replace("domain: api\n", "domain: api\nconsistency: approximate\n");
    std::fs::write(app.config_path().join("api.yaml"), approximate).expect("rewrite");
    let (status, body) = call(&app, "POST", "/reload", None).await;
    assert_eq!(status, 200, "{body}");
    // Decided locally (not by the exact scripts of the warm-up): the heartbeat has counted.
    let ready = eventually(std::time::Duration::from_secs(20), || async {
        let metrics = http_with(app.admin_addr(), "GET", "/metrics", &[]).await.expect("metrics").body;
        metrics.lines().any(|l| l == "tollgate_approximate_ready 1")
    })
    .await;
    assert!(ready, "the instance never decided approximate domains locally");
    // Approximate mode keeps its own margin below the limit (it admits 3 of a fresh
    // bucket's 5 here): the point is that the three plain consumes count.
    let admitted = app.allowed_of(5, &one).await;
    assert!((1..=2).contains(&admitted), "{admitted} admitted: the three plain consumes must count");
}

/// Calls of `command` the Redis server has run.
fn command_calls(redis: &RedisServer, command: &str) -> u64 {
    let stats = redis.cli(&["INFO", "commandstats"]);
    let prefix = format!("cmdstat_{command}:calls=");
    stats
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// EVALSHA calls the Redis server has run.
fn evalsha_calls(redis: &RedisServer) -> u64 {
    let stats = redis.cli(&["INFO", "commandstats"]);
    stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// A rule with several limits: one bucket each, named, with its own window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_and_reset_cover_every_limit_of_a_rule() {
    let policy = "domain: api
descriptors:
  - key: api_key
    rate_limits:
      - { name: burst, unit: second, unit_multiplier: 3600, requests_per_unit: 3, algorithm: sliding_window }
      - { name: daily, unit: day, requests_per_unit: 5, algorithm: fixed_window }
";
    let app = spawn_with(Options { store: StoreKind::Redis, ..allow_reset() }, &[("api.yaml", policy)]).await;
    assert_eq!(app.allowed_of(2, &request("api", &[&[("api_key", "k")]])).await, 2);
    for (method, path, consumed) in
        [("GET", usage_path("api_key%3Dk"), 2), ("POST", reset_path("api_key%3Dk"), 0)]
    {
        let (status, json) = call(&app, method, &path, None).await;
        assert_eq!(status, 200, "{json}");
        let limits = json["limits"].as_array().expect("limits");
        let names: Vec<&str> = limits.iter().filter_map(|l| l["name"].as_str()).collect();
        assert_eq!(names, ["burst", "daily"], "{json}");
        let field = |i: usize, f: &str| limits[i][f].as_u64();
        assert_eq!((field(0, "unit_multiplier"), field(0, "capacity")), (Some(3600), Some(3)), "{json}");
        assert_eq!((field(1, "unit_multiplier"), field(1, "capacity")), (Some(1), Some(5)), "{json}");
        assert_eq!(
            (field(0, "consumed"), field(1, "consumed")),
            (Some(consumed), Some(consumed)),
            "{method}: {json}"
        );
        assert_eq!(limits[1]["algorithm"], "fixed_window");
    }
    assert_eq!(
        app.allowed_of(4, &request("api", &[&[("api_key", "k")]])).await,
        3,
        "the burst limit, full again"
    );
}
