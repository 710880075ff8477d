//! The operator controls of a limit (issue 28): `rollout` and `penalty`. Every accepted
//! shape, and every misuse with its path and line.

use super::{load, matched, one_error, only_domain};
use crate::config::rule::{bucket_share, Rollout};

fn limited(extra: &str) -> String {
    format!("domain: d\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: hour\n      requests_per_unit: 5\n{extra}")
}

#[test]
fn rollout_loads_per_limit_and_defaults_to_every_bucket() {
    let snapshot = load(&limited("      rollout: 0.1\n"));
    let rule = matched(only_domain(&snapshot), &[("user", "a")]);
    assert_eq!(rule.limits()[0].rollout, Rollout::from_share(0.1).expect("0.1"));
    assert!(rule.limits()[0].rollout.is_partial());
    let snapshot = load(&limited(""));
    let rule = matched(only_domain(&snapshot), &[("user", "a")]);
    assert_eq!(rule.limits()[0].rollout, Rollout::FULL);

    let several = "domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n      \
                   - { name: a, unit: second, requests_per_unit: 2 }\n      \
                   - { name: b, unit: day, requests_per_unit: 9, rollout: 0.5 }\n";
    let snapshot = load(several);
    let limits = matched(only_domain(&snapshot), &[("k", "v")]).limits().to_vec();
    assert_eq!((limits[0].rollout.share(), limits[1].rollout.share()), (1.0, 0.5));
}

#[test]
fn a_rollout_outside_zero_to_one_names_its_path_and_line() {
    for bad in ["0", "-0.5", "1.5", "0.0000001", ".nan"] {
        let (path, line) = one_error(&limited(&format!("      rollout: {bad}\n")), "outside (0, 1]");
        assert_eq!((path.as_str(), line), ("descriptors[0].rate_limit.rollout", Some(7)), "{bad}");
    }
    let (path, line) = one_error(&limited("      rollout: half\n"), "expected f64");
    assert_eq!((path.as_str(), line), ("descriptors[0].rate_limit.rollout", Some(7)));
    let unlimited =
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unlimited: true, rollout: 0.5 }\n";
    let (path, _) = one_error(unlimited, "together with unlimited");
    assert_eq!(path, "descriptors[0].rate_limit.rollout");
}

#[test]
fn bucket_shares_are_stable_and_spread_evenly() {
    // Stable across releases: a share is a function of the key alone (these are fixed).
    assert_eq!(bucket_share("k"), bucket_share("k"));
    let in_tenth = (0..100_000).filter(|i| bucket_share(&format!("api_user_u{i}")) < 100_000).count();
    assert!((9_500..=10_500).contains(&in_tenth), "{in_tenth} of 100000 under a tenth");
    // Monotone: a bucket enforced at 0.1 is enforced at 0.5.
    let (tenth, half) = (Rollout::from_share(0.1).expect("r"), Rollout::from_share(0.5).expect("r"));
    for i in 0..10_000 {
        let key = format!("k{i}");
        assert!(!tenth.enforces(&key) || half.enforces(&key), "{key}");
    }
    assert!(Rollout::FULL.enforces("anything"));
}

#[test]
fn penalty_loads_per_limit_in_seconds_minutes_or_hours() {
    for (written, seconds) in [("30s", 30), ("10m", 600), ("1h", 3_600), ("24h", 86_400), ("1440m", 86_400)] {
        let snapshot = load(&limited(&format!("      penalty: {written}\n")));
        let limit = &matched(only_domain(&snapshot), &[("user", "a")]).limits()[0];
        assert_eq!(
            (limit.params.penalty_us, limit.penalty_seconds()),
            (seconds * 1_000_000, seconds),
            "{written}"
        );
    }
    let snapshot = load(&limited(""));
    let rule = matched(only_domain(&snapshot), &[("user", "a")]);
    assert_eq!((rule.limits()[0].params.penalty_us, rule.penalized()), (0, false));
    let several = "domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n      \
                   - { name: a, unit: second, requests_per_unit: 2, penalty: 90s }\n      \
                   - { name: b, unit: day, requests_per_unit: 9 }\n";
    let snapshot = load(several);
    let rule = matched(only_domain(&snapshot), &[("k", "v")]);
    assert_eq!(rule.limits()[0].penalty_text().as_deref(), Some("90s"));
    assert_eq!(rule.limits()[1].penalty_text(), None);
    assert!(rule.penalized());
}

#[test]
fn a_bad_penalty_names_its_path_and_line() {
    for (bad, why) in [
        ("10", "expected a whole number of seconds, minutes or hours"),
        ("10 m", "expected a whole number"),
        ("1.5h", "expected a whole number"),
        ("-5m", "expected a whole number"),
        ("10d", "expected a whole number"),
        ("0s", "at least 1s"),
        ("25h", "longer than a day"),
        ("99999999999999999999h", "longer than a day"),
    ] {
        let (path, line) = one_error(&limited(&format!("      penalty: \"{bad}\"\n")), why);
        assert_eq!((path.as_str(), line), ("descriptors[0].rate_limit.penalty", Some(7)), "{bad}");
    }
    let unlimited = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unlimited: true, penalty: 1m }\n";
    let (path, _) = one_error(unlimited, "together with unlimited");
    assert_eq!(path, "descriptors[0].rate_limit.penalty");
    let leased = "domain: d\ndescriptors:\n  - key: k\n    lease: true\n    \
                  rate_limit: { unit: second, requests_per_unit: 5, penalty: 1m }\n";
    let (path, _) = one_error(leased, "lease: true on a rule with a penalty");
    assert_eq!(path, "descriptors[0].lease");
    let approximate = "domain: d\nconsistency: approximate\ndescriptors:\n  - key: k\n    \
                       rate_limit: { unit: second, requests_per_unit: 5, algorithm: sliding_window, penalty: 1m }\n";
    let (path, _) = one_error(approximate, "consistency: approximate");
    assert_eq!(path, "descriptors[0].rate_limit.penalty");
}

#[test]
fn templates_take_the_limits_numbers_and_nothing_else() {
    use crate::config::rule::Template;
    // JSON needs no escaping: only the three placeholders are replaced.
    let t =
        Template::parse(r#"{"limit": {limit}, "window": {window}, "reset": {reset}, "x": { }, "{": "}"}"#)
            .expect("parses");
    assert_eq!(t.render(5, 60, 12), r#"{"limit": 5, "window": 60, "reset": 12, "x": { }, "{": "}"}"#);
    assert_eq!(Template::parse("{limit").expect("literal").render(1, 2, 3), "{limit");
    for bad in ["{user}", "{limt}", "a {Reset} b", "{remote_address}"] {
        let e = Template::parse(bad).expect_err(bad);
        assert!(e.contains("unknown placeholder"), "{bad}: {e}");
    }
}

#[test]
fn a_response_loads_and_its_misuse_names_path_and_line() {
    let yaml = limited(
        "      response:\n        body: 'slow down: {limit} per {window} s'\n        \
         content_type: text/plain; charset=utf-8\n        headers:\n          X-Quota: '{limit}'\n          \
         x-retry-in: '{reset}'\n",
    );
    let snapshot = load(&yaml);
    let limit = &matched(only_domain(&snapshot), &[("user", "a")]).limits()[0];
    let response = limit.response.as_ref().expect("a response");
    assert_eq!(
        response.body.as_ref().map(|b| b.render(5, 3600, 1)).as_deref(),
        Some("slow down: 5 per 3600 s")
    );
    let names: Vec<&str> = response.headers.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["x-quota", "x-retry-in"], "lower-cased, in file order");

    for (extra, path, why) in [
        ("      response: {}\n", "descriptors[0].rate_limit.response", "an empty response"),
        (
            "      response: { body: '{user}' }\n",
            "descriptors[0].rate_limit.response.body",
            "unknown placeholder",
        ),
        (
            "      response: { body: x, content_type: json }\n",
            "descriptors[0].rate_limit.response.content_type",
            "not a media type",
        ),
        (
            "      response: { headers: { content-length: '5' } }\n",
            "descriptors[0].rate_limit.response.headers.content-length",
            "may not be set",
        ),
        (
            "      response: { headers: { 'bad name': x } }\n",
            "descriptors[0].rate_limit.response.headers.bad name",
            "not a header name",
        ),
        (
            "      response: { headers: { x-a: \"line\\nbreak\" } }\n",
            "descriptors[0].rate_limit.response.headers.x-a",
            "printable ASCII",
        ),
        (
            "      response: { body: x, colour: red }\n",
            "descriptors[0].rate_limit.response.colour",
            "unknown field",
        ),
    ] {
        let (got, line) = one_error(&limited(extra), why);
        assert_eq!(got, path, "{extra}");
        assert_eq!(line, Some(7), "{extra}");
    }
    let long = format!("      response: {{ body: '{}' }}\n", "x".repeat(5000));
    let (path, _) = one_error(&limited(&long), "at most 4096");
    assert_eq!(path, "descriptors[0].rate_limit.response.body");
}

#[test]
fn overdraft_loads_and_refuses_what_would_not_count_it() {
    let snapshot = load(&limited("      overdraft: true\n"));
    assert!(matched(only_domain(&snapshot), &[("user", "a")]).limits()[0].overdraft);
    let snapshot = load(&limited(""));
    assert!(!matched(only_domain(&snapshot), &[("user", "a")]).limits()[0].overdraft);
    let (path, line) = one_error(&limited("      overdraft: true\n      penalty: 1m\n"), "with a penalty");
    assert_eq!((path.as_str(), line), ("descriptors[0].rate_limit.overdraft", Some(7)));
    let all_or_nothing = format!("charge: all_or_nothing\n{}", limited("      overdraft: true\n"));
    let (path, _) = one_error(&all_or_nothing, "all_or_nothing");
    assert_eq!(path, "descriptors[0].rate_limit.overdraft");
    let mixed = "domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n      \
                 - { name: tokens, unit: minute, requests_per_unit: 1000, overdraft: true }\n      \
                 - { name: requests, unit: minute, requests_per_unit: 60 }\n";
    let (path, _) = one_error(mixed, "some limits of a descriptor");
    assert_eq!(path, "descriptors[0].rate_limits[1].overdraft");
    let unlimited =
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unlimited: true, overdraft: true }\n";
    let (path, _) = one_error(unlimited, "together with unlimited");
    assert_eq!(path, "descriptors[0].rate_limit.overdraft");
}

#[test]
fn a_response_may_not_set_a_field_the_generated_headers_own() {
    // `--response-headers`, `--limit-headers`, `--ratelimit-headers ietf` and Envoy's own
    // header options write these: a template beside them would send a second value (two
    // `Retry-After`, which RFC 9110 makes a singleton). Names compare case-insensitively.
    for name in [
        "retry-after",
        "Retry-After",
        "x-ratelimit-limit",
        "X-RateLimit-Remaining",
        "x-ratelimit-reset",
        "x-ratelimit-anything",
        "ratelimit",
        "RateLimit-Policy",
        "ratelimit-limit",
        "RateLimit-Remaining",
        "ratelimit-reset",
    ] {
        let extra = format!("      response: {{ body: x, headers: {{ {name}: '{{reset}}' }} }}\n");
        let (path, line) = one_error(&limited(&extra), "generated");
        assert_eq!(path, format!("descriptors[0].rate_limit.response.headers.{name}"), "{name}");
        assert_eq!(line, Some(7), "{name}");
    }
    // `content-type` has its own field in any case, and that field describes the body.
    let (path, _) = one_error(
        &limited("      response: { body: x, headers: { Content-Type: a/b } }\n"),
        "use content_type",
    );
    assert_eq!(path, "descriptors[0].rate_limit.response.headers.Content-Type");
    let (path, line) = one_error(
        &limited("      response: { content_type: application/json, headers: { x-a: b } }\n"),
        "without a body",
    );
    assert_eq!((path.as_str(), line), ("descriptors[0].rate_limit.response.content_type", Some(7)));
    // Names that merely resemble them stay free.
    for name in ["x-retry-after-hint", "x-ratelimited-by", "ratelimits"] {
        let snapshot = load(&limited(&format!("      response: {{ headers: {{ {name}: x }} }}\n")));
        let rule = matched(only_domain(&snapshot), &[("user", "a")]);
        assert_eq!(rule.limits()[0].response.as_ref().expect("response").headers.len(), 1, "{name}");
    }
}
