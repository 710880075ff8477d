//! "Loads envoyproxy/ratelimit's YAML unchanged": every config shape of the peer's
//! `test/config` and `examples/` that the peer itself loads, written anew under
//! `tests/fixtures/peer_shapes/`, loads with `tollgate check` and answers a few requests
//! per shape as the peer does (codes, limits, names, remaining; within one burst, so the
//! algorithm does not matter).
//!
//! Out of scope: the peer's files that it refuses to load itself (bad unit, bad YAML,
//! duplicate key/value, empty domain or key, misspelled fields, a list of scalars, a
//! non-string key, an empty or self `replaces`, `unlimited` with a unit), and its pair of
//! files for one domain (`MERGE_DOMAIN_CONFIG`, Tollgate's `--merge-domains`).

use std::process::Command;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit::{
    self, Day, Hour, Minute, Month, Second, Week, Year,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;

use crate::support::*;

/// Every file of `tests/fixtures/peer_shapes/`, each exercised by a test below.
const SHAPES: &[&str] = &[
    "bare_domain.yaml",
    "flags.yaml",
    "nested.yaml",
    "share_threshold.yaml",
    "units.yaml",
    "wildcards.yaml",
    "yaml_forms.yaml",
];

#[test]
fn tollgate_check_loads_every_shape() {
    let dir = fixtures("peer_shapes");
    let mut found: Vec<String> = std::fs::read_dir(&dir)
        .expect("peer_shapes")
        .map(|entry| entry.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".yaml"))
        .collect();
    found.sort();
    assert_eq!(found, SHAPES, "a shape without a test, or a test without its shape");
    let out =
        Command::new(env!("CARGO_BIN_EXE_tollgate")).arg("check").arg(&dir).output().expect("run check");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains(&format!("ok ({} domains", SHAPES.len())), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_descriptors() {
    let app = serve(&fixtures("peer_shapes/nested.yaml")).await;
    let d = "shapes_nested";
    assert_eq!(app.one(d, &[("tenant", "acme"), ("plan", "silver")]).await, ok(2, Second, 1));
    assert_eq!(app.one(d, &[("tenant", "acme"), ("plan", "gold")]).await, ok(4, Second, 3));
    assert_eq!(app.one(d, &[("tenant", "acme")]).await, Answer::NoLimit, "a parent without a limit");
    assert_eq!(app.one(d, &[("tenant", "other"), ("plan", "gold")]).await, Answer::NoLimit);
    assert_eq!(app.repeat(4, d, &[("client", "x")]).await, countdown(3, Minute, 1));
    assert_eq!(app.one(d, &[("client", "y")]).await, ok(3, Minute, 2), "each value its own bucket");
    assert_eq!(app.one(d, &[("client", "batch")]).await, ok(5, Minute, 4));
    assert_eq!(app.repeat(5, d, &[("client", "monitor")]).await, vec![Answer::NoLimit; 5]);
    assert_eq!(app.one(d, &[("region", "eu")]).await, ok(6, Hour, 5));
    assert_eq!(app.one(d, &[("region", "eu"), ("zone", "eu-1")]).await, named(ok(7, Day, 6), "eu_1_daily"));
    assert_eq!(app.one(d, &[("region", "eu"), ("zone", "eu-2")]).await, Answer::NoLimit);
    assert_eq!(app.one(d, &[("client", "z"), ("extra", "y")]).await, Answer::NoLimit, "deeper than the tree");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wildcards() {
    let app = serve(&fixtures("peer_shapes/wildcards.yaml")).await;
    let d = "shapes_wildcards";
    let path = |p| [("path", p)];
    assert_eq!(app.repeat(2, d, &path("/static/a")).await, countdown(1, Minute, 1));
    assert_eq!(app.one(d, &path("/static/b")).await, ok(1, Minute, 0), "each value its own bucket");
    assert_eq!(app.one(d, &path("/static/logo.png")).await, ok(5, Minute, 4), "exact before wildcard");
    assert_eq!(app.one(d, &path("/v2/users")).await, ok(2, Minute, 1));
    assert_eq!(app.one(d, &path("/v/users")).await, ok(2, Minute, 1), "`*` matches nothing too");
    assert_eq!(app.one(d, &path("/v2/users/x")).await, ok(4, Minute, 3), "no wildcard: the default");
    assert_eq!(app.one(d, &path("/a-b-c")).await, ok(3, Minute, 2));
    assert_eq!(app.one(d, &path("/abc")).await, ok(3, Minute, 2));
    assert_eq!(app.one(d, &path("/acb")).await, ok(4, Minute, 3));
    assert_eq!(app.one(d, &path("/status")).await, ok(6, Minute, 5));
    assert_eq!(app.one(d, &path("/static/c")).await, ok(1, Minute, 0), "the first wildcard in file order");
    assert_eq!(app.one(d, &[("host", "api.example.com")]).await, ok(7, Minute, 6));
    assert_eq!(app.one(d, &[("host", "example.com")]).await, Answer::NoLimit);
    assert_eq!(app.one(d, &[("tenant", "acme"), ("path", "/api/v1")]).await, ok(8, Minute, 7));
    assert_eq!(app.one(d, &[("tenant", "acme"), ("path", "/web")]).await, Answer::NoLimit);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn share_threshold() {
    let app = serve(&fixtures("peer_shapes/share_threshold.yaml")).await;
    let d = "shapes_shared";
    // Three different values that share one bucket of 2: 1 left, 0 left, denied.
    let shared = |limit| vec![ok(limit, Minute, 1), ok(limit, Minute, 0), over(limit, Minute)];
    let files: [&[_]; 3] = [&[("file", "docs/a")], &[("file", "docs/b")], &[("file", "docs/c")]];
    assert_eq!(app.each(d, &files).await, shared(2));
    assert_eq!(app.one(d, &[("file", "docs/readme")]).await, ok(9, Minute, 8), "exact before shared");
    let team: [&[_]; 3] = [
        &[("team", "core"), ("file", "src/a")],
        &[("team", "core"), ("file", "src/b")],
        &[("team", "core"), ("file", "src/c")],
    ];
    assert_eq!(app.each(d, &team).await, shared(2));
    let bucket: [&[_]; 3] = [
        &[("bucket", "a/1"), ("bucket", "b/1")],
        &[("bucket", "a/2"), ("bucket", "b/2")],
        &[("bucket", "a/3"), ("bucket", "b/3")],
    ];
    assert_eq!(app.each(d, &bucket).await, shared(2));
    // Only the shared level shares: another method is another bucket.
    assert_eq!(app.one(d, &[("route", "api/x"), ("method", "GET")]).await, ok(2, Minute, 1));
    assert_eq!(app.one(d, &[("route", "api/y"), ("method", "GET")]).await, ok(2, Minute, 0));
    assert_eq!(app.one(d, &[("route", "api/z"), ("method", "POST")]).await, ok(2, Minute, 1));
    assert_eq!(app.one(d, &[("route", "api/w"), ("method", "GET")]).await, over(2, Minute));
    assert_eq!(app.one(d, &[("svc", "svc-a"), ("endpoint", "/x")]).await, ok(2, Minute, 1));
    assert_eq!(app.one(d, &[("svc", "svc-b"), ("endpoint", "/x")]).await, ok(2, Minute, 0));
    assert_eq!(app.one(d, &[("svc", "svc-c"), ("endpoint", "/y")]).await, ok(2, Minute, 1));
    // `share_threshold: false` below a shared level: its own values stay apart.
    assert_eq!(app.one(d, &[("dir", "d/1"), ("name", "n/1")]).await, ok(2, Minute, 1));
    assert_eq!(app.one(d, &[("dir", "d/2"), ("name", "n/1")]).await, ok(2, Minute, 0));
    assert_eq!(app.one(d, &[("dir", "d/1"), ("name", "n/2")]).await, ok(2, Minute, 1));
    assert_eq!(app.one(d, &[("mid", "/apiXv1")]).await, ok(2, Minute, 1));
    assert_eq!(app.one(d, &[("mid", "/api/v2/v1")]).await, ok(2, Minute, 0));
    assert_eq!(app.one(d, &[("mid", "/api-v2")]).await, Answer::NoLimit);
    assert_eq!(app.one(d, &[("multi", "s1e1p")]).await, ok(2, Minute, 1));
    assert_eq!(app.one(d, &[("multi", "sep")]).await, ok(2, Minute, 0));
    assert_eq!(app.one(d, &[("multi", "s-e-p-x")]).await, Answer::NoLimit);

    // Metric labels follow the peer's stat keys: the pattern on shared levels, the value
    // on a detailed_metric level; value_to_metric on a shared level adds nothing.
    let text = app.metrics();
    let hits = |rule: &str| metric(&text, &format!(r#"tollgate_hits_total{{domain="{d}",rule="{rule}"}}"#));
    assert_eq!(hits("descriptors[5].descriptors[0]:svc_svc-*.endpoint_/x"), Some(2.0), "{text}");
    assert_eq!(hits("descriptors[5].descriptors[0]:svc_svc-*.endpoint_/y"), Some(1.0), "{text}");
    assert_eq!(hits("descriptors[4].descriptors[0]"), Some(4.0), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_fields() {
    let app = serve(&fixtures("peer_shapes/flags.yaml")).await;
    let d = "shapes_flags";
    assert_eq!(app.one(d, &[("user", "u1")]).await, named(ok(2, Minute, 1), "per_user"));
    // Both replaced limits are dropped (and not charged) when the replacing one matches.
    let replaced =
        app.check(request(d, &[&[("user", "u1")], &[("partner", "p")], &[("category", "account")]])).await;
    assert_eq!(replaced.overall_code, Code::Ok as i32);
    let statuses: Vec<_> =
        replaced.statuses.iter().map(|s| (s.current_limit.is_some(), s.limit_remaining)).collect();
    assert_eq!(statuses, [(false, 0), (false, 0), (true, 3)]);
    assert_eq!(app.one(d, &[("user", "u1")]).await, named(ok(2, Minute, 0), "per_user"));
    assert_eq!(app.one(d, &[("partner", "p")]).await, named(ok(2, Minute, 1), "per_partner"));

    assert_eq!(app.repeat(2, d, &[("banned", "x")]).await, vec![over(0, Minute); 2], "0 blocks everything");
    assert_eq!(
        app.repeat(3, d, &[("trial", "t")]).await,
        vec![ok(1, Minute, 0); 3],
        "shadow_mode never denies"
    );
    assert_eq!(app.repeat(3, d, &[("free", "f")]).await, vec![Answer::Unlimited; 3]);

    // quota_mode: the request is over only when all its quota descriptors are.
    let quota = request(d, &[&[("service", "billing")], &[("service", "search")]]);
    let mut overall = Vec::new();
    for _ in 0..3 {
        overall.push(app.check(quota.clone()).await.overall_code == Code::Ok as i32);
    }
    assert_eq!(overall, [true, true, false]);

    assert_eq!(app.one(d, &[("caller", "alice")]).await, ok(2, Minute, 1));
    let deep = [("route", "api"), ("method", "GET"), ("subject", "s1")];
    assert_eq!(app.one(d, &deep).await, ok(2, Minute, 1));
    let text = app.metrics();
    let hits = |rule: &str| metric(&text, &format!(r#"tollgate_hits_total{{domain="{d}",rule="{rule}"}}"#));
    assert_eq!(hits("descriptors[8]:caller_alice"), Some(1.0), "detailed_metric: {text}");
    assert_eq!(
        hits("descriptors[9].descriptors[0].descriptors[0]:route_api.method_GET.subject"),
        Some(1.0),
        "value_to_metric on intermediate levels: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn units() {
    let app = serve(&fixtures("peer_shapes/units.yaml")).await;
    let cases: [(&str, Unit); 9] = [
        ("second", Second),
        ("minute", Minute),
        ("hour", Hour),
        ("day", Day),
        ("week", Week),
        ("month", Month),
        ("year", Year),
        ("upper", Second),
        ("mixed", Hour),
    ];
    for (value, unit) in cases {
        assert_eq!(app.one("shapes_units", &[("unit", value)]).await, ok(10, unit, 9), "{value}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn yaml_forms() {
    let app = serve(&fixtures("peer_shapes/yaml_forms.yaml")).await;
    let d = "shapes_yaml";
    for entry in [
        ("port", "8080"),
        ("enabled", "true"),
        ("404", "any"),
        ("day", "2024-01-31"),
        ("hex", "0x1F"),
        ("quoted", "a: b # not a comment"),
        ("folded", "two words"),
        ("flow", "style"),
    ] {
        assert_eq!(app.one(d, &[entry]).await, ok(2, Minute, 1), "{entry:?}");
    }
    assert_eq!(app.one(d, &[("hex", "31")]).await, Answer::NoLimit, "the text, not the number");
    assert_eq!(app.one(d, &[("tilde", "any")]).await, ok(3, Minute, 2), "`~`: no value");
    assert_eq!(app.one(d, &[("blank", "any")]).await, ok(3, Minute, 2), "`\"\"`: no value");
    assert_eq!(app.one(d, &[("nothing_below", "x")]).await, Answer::NoLimit);
    assert_eq!(app.one(d, &[("empty_below", "x")]).await, Answer::NoLimit);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_domain_without_descriptors() {
    let app = serve(&fixtures("peer_shapes/bare_domain.yaml")).await;
    assert_eq!(app.one("shapes_bare", &[("any", "x")]).await, Answer::NoLimit);
}

/// YAML merge keys (`<<: *base`), in the order the Go service applies them (`<<` first:
/// where yaml.v2 and the YAML spec agree). The fixture lives in its own directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merge_keys() {
    let app = serve(&fixtures("peer_shapes_merge_keys/merge_keys.yaml")).await;
    let d = "shapes_merge";
    assert_eq!(app.one(d, &[("client", "x")]).await, ok(2, Minute, 1));
    assert_eq!(app.one(d, &[("client", "batch")]).await, ok(2, Minute, 1), "its own node and bucket");
    assert_eq!(app.one(d, &[("tenant", "t")]).await, named(ok(2, Minute, 1), "tenant_limit"));
    assert_eq!(app.one(d, &[("user", "u")]).await, ok(3, Minute, 2), "an explicit field overrides");
    assert_eq!(app.one(d, &[("zone", "z")]).await, named(ok(2, Minute, 1), "zone_limit"));
}
