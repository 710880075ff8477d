//! The deliberate differences from envoyproxy/ratelimit listed in
//! docs/migration.md ("Differences"), each pinned: if one of these tests has to change,
//! so does that document.

use std::process::Command;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit::Minute;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::google::protobuf::UInt64Value;

use crate::support::*;

/// `tollgate check` on one file holding `yaml`: its exit success and its stderr.
fn check(yaml: &str) -> (bool, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("policy.yaml");
    std::fs::write(&file, yaml).expect("write policy");
    let out =
        Command::new(env!("CARGO_BIN_EXE_tollgate")).arg("check").arg(&file).output().expect("run check");
    (out.status.success(), String::from_utf8_lossy(&out.stderr).replace(&format!("{}", file.display()), "F"))
}

/// The peer reads a missing `requests_per_unit` as 0 and blocks everything; Tollgate
/// refuses the file (a forgotten field must not turn into an outage).
#[test]
fn rate_limit_without_requests_per_unit_is_an_error() {
    let (ok, stderr) = check("domain: d\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: minute\n");
    assert!(!ok);
    assert!(
        stderr.starts_with("F:4: descriptors[0].rate_limit.requests_per_unit: missing requests_per_unit"),
        "{stderr}"
    );
    // Written out, 0 is allowed and blocks everything, as in the peer.
    let (ok, stderr) = check(
        "domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 0}\n",
    );
    assert!(ok, "{stderr}");
}

/// The peer's YAML parser keeps the last of two equal keys in one mapping (silently
/// dropping, say, a whole first `descriptors` list); Tollgate refuses the file.
#[test]
fn the_same_key_twice_in_one_mapping_is_an_error() {
    let cases = [
        ("domain: d\ndescriptors:\n  - key: k\n    value: a\n    value: b\n", "descriptors[0].value: duplicate field `value`"),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 1}\ndescriptors:\n  - key: b\n",
            "descriptors: duplicate field `descriptors`",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n      requests_per_unit: 1\n      requests_per_unit: 5\n",
            "descriptors[0].rate_limit.requests_per_unit: duplicate field `requests_per_unit`",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    metadata: {team: a, team: b}\n",
            "descriptors[0].metadata: duplicate entry with key \"team\"",
        ),
    ];
    for (yaml, expected) in cases {
        let (ok, stderr) = check(yaml);
        assert!(!ok && stderr.contains(expected), "{yaml}\n{stderr}");
    }
}

/// A descriptor without entries (Envoy's `skip_if_absent` with no header present): OK with
/// no limit, as the peer answers it, and the request's other descriptors are decided.
/// (Tollgate once refused the request as INVALID_ARGUMENT, which let Envoy fail open for
/// every descriptor of it: no longer a difference.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_descriptor_without_entries_is_ok_and_the_others_are_decided() {
    let app = serve_yaml(&[(
        "d.yaml",
        "domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 2}\n",
    )])
    .await;
    let response = app.call(request("d", &[&[("user", "a")], &[]])).await.expect("answered");
    assert_eq!(response.statuses[1].code, 1, "OK");
    assert!(response.statuses[1].current_limit.is_none(), "no limit");
    assert_eq!(response.statuses[0].limit_remaining, 1, "the other descriptor was charged");
}

/// A peek (`hits_addend: 0`) answers "would one more request pass": at exactly the limit
/// that is OVER_LIMIT in Tollgate, while the peer answers OK with 0 remaining. Below the
/// limit both answer OK, and neither consumes anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peek_at_exactly_the_limit_is_over_limit() {
    let policy = "domain: d\ndescriptors:\n  - key: gcra\n    rate_limit: {unit: minute, requests_per_unit: 2}\n  \
                  - key: window\n    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: fixed_window}\n";
    let app = serve_yaml(&[("d.yaml", policy)]).await;
    for key in ["gcra", "window"] {
        let mut peek = request("d", &[&[(key, "a")]]);
        peek.descriptors[0].hits_addend = Some(UInt64Value { value: 0 });
        let code_and_remaining = |r: envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse| {
            (r.overall_code == Code::Ok as i32, r.statuses[0].limit_remaining)
        };
        assert_eq!(app.one("d", &[(key, "a")]).await, ok(2, Minute, 1), "{key}");
        assert_eq!(code_and_remaining(app.check(peek.clone()).await), (true, 1), "{key}: below the limit");
        assert_eq!(
            code_and_remaining(app.check(peek.clone()).await),
            (true, 1),
            "{key}: a peek consumes nothing"
        );
        assert_eq!(app.one("d", &[(key, "a")]).await, ok(2, Minute, 0), "{key}");
        assert_eq!(code_and_remaining(app.check(peek).await), (false, 0), "{key}: at the limit");
    }
}

/// By default (`charge: per_descriptor`, the peer's default without
/// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`), when one descriptor of a request is denied,
/// Tollgate still charges the request's other descriptors; `charge: all_or_nothing` or
/// `--stop-charging-when-over-limit` stop that. The denied descriptor itself consumes
/// nothing, which the peer does not do even with the setting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_request_still_charges_its_other_descriptors() {
    let policy =
        "domain: d\ndescriptors:\n  - key: tight\n    rate_limit: {unit: minute, requests_per_unit: 1}\n  \
                  - key: loose\n    rate_limit: {unit: minute, requests_per_unit: 5}\n";
    let app = serve_yaml(&[("d.yaml", policy)]).await;
    let both = request("d", &[&[("tight", "a")], &[("loose", "a")]]);
    let first = app.check(both.clone()).await;
    assert_eq!(first.overall_code, Code::Ok as i32);
    let second = app.check(both).await;
    assert_eq!(second.overall_code, Code::OverLimit as i32);
    assert_eq!(second.statuses[1].code, Code::Ok as i32);
    assert_eq!(second.statuses[1].limit_remaining, 3, "charged although the request was denied");
}

/// With `charge: all_or_nothing` (what the peer's `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`
/// is for) a denied request charges none of its descriptors: the other descriptor reports
/// its bucket as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_or_nothing_charges_no_descriptor_of_a_denied_request() {
    let policy = "domain: d\ncharge: all_or_nothing\ndescriptors:\n  - key: tight\n    rate_limit: {unit: minute, \
                  requests_per_unit: 1}\n  - key: loose\n    rate_limit: {unit: minute, requests_per_unit: 5}\n";
    let app = serve_yaml(&[("d.yaml", policy)]).await;
    let both = request("d", &[&[("tight", "a")], &[("loose", "a")]]);
    assert_eq!(app.check(both.clone()).await.overall_code, Code::Ok as i32);
    let second = app.check(both).await;
    assert_eq!(second.overall_code, Code::OverLimit as i32);
    assert_eq!(second.statuses[1].code, Code::Ok as i32);
    assert_eq!(second.statuses[1].limit_remaining, 4, "not charged: the request was denied");
}
