use proptest::prelude::*;

use super::*;
use crate::config::{RuleId, RuleLimit};
use crate::telemetry::escape::hidden;

fn escaped(bytes: &[u8], max: usize) -> String {
    let mut out = String::from("prefix:");
    escape_into(&mut out, bytes, max);
    out.strip_prefix("prefix:").expect("appends only").to_string()
}

#[test]
fn printable_text_stays_as_it_is() {
    assert_eq!(escaped(b"/api/v1/users?id=7&x=a b", 64), "/api/v1/users?id=7&x=a b");
    assert_eq!(escaped("café ünïcødé 東京 🚀".as_bytes(), 64), "café ünïcødé 東京 🚀");
    assert_eq!(escaped(b"", 64), "");
    assert_eq!(escaped(b"\"quoted\" {braces} *", 64), "\"quoted\" {braces} *");
}

#[test]
fn control_bytes_and_backslash_are_escaped() {
    assert_eq!(escaped(b"a\nb\rc\td\0e\x1b[31m\x7f", 64), r"a\x0ab\x0dc\x09d\x00e\x1b[31m\x7f");
    assert_eq!(escaped(br"C:\path", 64), r"C:\\path");
    // An escape written by the client stays distinguishable from a real control byte.
    assert_ne!(escaped(br"\x0a", 64), escaped(b"\n", 64));
}

#[test]
fn bytes_that_are_not_utf8_are_escaped_one_by_one() {
    assert_eq!(escaped(b"\xff\xfe", 64), r"\xff\xfe");
    assert_eq!(escaped(b"ok\xc3(", 64), r"ok\xc3(");
    // A sequence cut short at the end of the value.
    assert_eq!(escaped(b"ab\xe6\x9d", 64), r"ab\xe6\x9d");
    // Encoded surrogates are not UTF-8.
    assert_eq!(escaped(b"\xed\xa0\x80", 64), r"\xed\xa0\x80");
}

#[test]
fn invisible_and_reordering_characters_are_escaped() {
    assert_eq!(escaped("a\u{202e}b".as_bytes(), 64), r"a\u{202e}b", "right-to-left override");
    assert_eq!(escaped("a\u{200b}b".as_bytes(), 64), r"a\u{200b}b", "zero-width space");
    assert_eq!(escaped("\u{feff}x".as_bytes(), 64), r"\u{feff}x", "byte order mark");
    assert_eq!(escaped("\u{85}".as_bytes(), 64), r"\u{0085}", "C1 control");
    assert_eq!(escaped("\u{2028}".as_bytes(), 64), r"\u{2028}", "line separator");
    assert_eq!(escaped("\u{e000}".as_bytes(), 64), r"\u{e000}", "private use");
    assert_eq!(escaped("\u{ffff}".as_bytes(), 64), r"\u{ffff}", "non-character");
}

#[test]
fn long_values_are_cut_with_a_mark_within_the_limit() {
    assert_eq!(escaped(&[b'x'; 16], 16), "x".repeat(16), "exactly the limit: not cut");
    assert_eq!(escaped(&[b'x'; 17], 16), format!("{}…", "x".repeat(13)));
    let huge = vec![b'y'; 4096];
    assert_eq!(escaped(&huge, 64).len(), 64);
    // Never inside an escape or a character.
    assert_eq!(escaped(b"0123456789ab\xff\xff\xff", 16), "0123456789ab…");
    assert_eq!(escaped("0123456789ab東京".as_bytes(), 16), "0123456789ab…");
    assert_eq!(escaped("0123456789東".as_bytes(), 16), "0123456789東", "13 bytes fit");
}

proptest! {
    #[test]
    fn escaped_parts_are_bounded_printable_and_distinct(
        a in proptest::collection::vec(any::<u8>(), 0..200),
        b in proptest::collection::vec(any::<u8>(), 0..200),
        max in MIN_LABEL_VALUE_BYTES..128,
    ) {
        let (ea, eb) = (escaped(&a, max), escaped(&b, max));
        prop_assert!(ea.len() <= max);
        prop_assert!(!ea.chars().any(|c| c.is_control() || hidden(c)), "{ea:?}");
        let cut = |e: &str| e.ends_with(CUT);
        if a != b && !cut(&ea) && !cut(&eb) {
            prop_assert_ne!(ea, eb);
        }
    }
}

fn level(key: &str, value: Option<&str>, shared: bool, value_to_metric: bool) -> Level {
    Level {
        key: key.into(),
        shared_pattern: shared.then(|| value.unwrap_or_default().to_string()),
        value: value.map(str::to_string),
        value_to_metric,
    }
}

fn rule(detailed_metric: bool, levels: Vec<Level>) -> Rule {
    Rule {
        id: RuleId(0),
        path: "descriptors[0]".into(),
        name: Some("r".into()),
        limit: RuleLimit::Unlimited,
        shadow_mode: false,
        quota_mode: false,
        lease: false,
        detailed_metric,
        value_to_metric: false,
        replaces: vec![],
        levels,
        metadata: vec![],
    }
}

fn label(rule: &Rule, values: &[&str]) -> Option<String> {
    carries_values(rule).then(|| compose(rule, values.iter().map(|v| v.as_bytes()), 64))
}

#[test]
fn value_to_metric_levels_carry_their_values_like_the_peer_stat_key() {
    // The peer's README example: route and http_method opt in, subject_id does not.
    let example = rule(
        false,
        vec![
            level("route", None, false, true),
            level("http_method", None, false, true),
            level("subject_id", None, false, false),
        ],
    );
    assert_eq!(
        label(&example, &["api", "GET", "123"]).as_deref(),
        Some("r:route_api.http_method_GET.subject_id")
    );
    // Exact values show (they come from the config); a wildcard without the flag shows its pattern.
    let mixed = rule(
        false,
        vec![
            level("user", None, false, true),
            level("action", Some("read*"), false, false),
            level("m", Some("GET"), false, false),
        ],
    );
    assert_eq!(label(&mixed, &["bob", "readme", "GET"]).as_deref(), Some("r:user_bob.action_read*.m_GET"));
    let wildcard = rule(false, vec![level("action", Some("read*"), false, true)]);
    assert_eq!(label(&wildcard, &["readme"]).as_deref(), Some("r:action_readme"));
}

#[test]
fn value_to_metric_writes_the_key_alone_for_an_empty_value_like_the_peer() {
    // The peer's TestValueToMetric_WithEmptyValue: `domain.route.http_method_GET.subject_id`,
    // `domain.route_draw.http_method.subject_id`, `domain.route.http_method.subject_id`.
    let example = rule(
        false,
        vec![
            level("route", None, false, true),
            level("http_method", None, false, true),
            level("subject_id", None, false, false),
        ],
    );
    let cases = [
        (["", "GET", "123"], "r:route.http_method_GET.subject_id"),
        (["draw", "", "123"], "r:route_draw.http_method.subject_id"),
        (["", "", "123"], "r:route.http_method.subject_id"),
    ];
    for (values, expected) in cases {
        assert_eq!(label(&example, &values).as_deref(), Some(expected), "{values:?}");
    }
}

#[test]
fn share_threshold_levels_show_their_pattern_never_the_value() {
    let shared = rule(false, vec![level("path", Some("/api/*"), true, true)]);
    assert!(!carries_values(&shared), "nothing from the request: the plain rule label");
    let detailed =
        rule(true, vec![level("path", Some("/api/*"), true, false), level("user", None, false, false)]);
    assert_eq!(label(&detailed, &["/api/42", "alice"]).as_deref(), Some("r:path_/api/*.user_alice"));
}

#[test]
fn detailed_metric_carries_every_value_the_config_does_not_fix() {
    let detailed = rule(true, vec![level("ip", None, false, false), level("m", Some("GET"), false, false)]);
    assert_eq!(label(&detailed, &["192.0.2.1", "GET"]).as_deref(), Some("r:ip_192.0.2.1.m_GET"));
    assert_eq!(label(&detailed, &["", "GET"]).as_deref(), Some("r:ip_.m_GET"), "an empty value");
    let exact_only = rule(true, vec![level("m", Some("GET"), false, false)]);
    assert!(!carries_values(&exact_only));
    let plain = rule(false, vec![level("ip", None, false, false)]);
    assert!(!carries_values(&plain));
}

#[test]
fn each_part_is_escaped_and_cut() {
    let detailed = rule(true, vec![level("a", None, false, false), level("b", None, false, false)]);
    let long = vec![b'z'; 4096];
    let values: [&[u8]; 2] = [b"\xff\n", &long];
    let composed = compose(&detailed, values, 16);
    assert_eq!(composed, format!(r"r:a_\xff\x0a.b_{}…", "z".repeat(13)));
    assert_eq!(other(detailed.label()), "r:_other_");
}
