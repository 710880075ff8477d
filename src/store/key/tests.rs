//! Unit tests of `key`: parts that cannot collide, shared levels, hashed values, distinct
//! namespaces, and the format live buckets depend on.

use super::*;
use crate::config::Level;

fn rule(levels: &[(&str, Option<&str>)]) -> Rule {
    use crate::algorithm::Params;
    Rule {
        id: crate::config::RuleId(0),
        path: "descriptors[0]".into(),
        name: None,
        limit: crate::config::RuleLimit::Limited(vec![crate::config::Limit::single(
            Params {
                algorithm: Algorithm::Gcra,
                limit: 1,
                unit_us: 1,
                burst: 1,
                penalty_us: 0,
                period: None,
            },
            Unit::Second,
        )]),
        shadow_mode: false,
        quota_mode: false,
        lease: false,
        detailed_metric: false,
        value_to_metric: false,
        replaces: vec![],
        levels: levels
            .iter()
            .map(|(k, p)| Level {
                key: k.to_string(),
                shared_pattern: p.map(str::to_string),
                ..Level::default()
            })
            .collect(),
        metadata: vec![],
    }
}

fn key(r: &Rule, entries: &[(&str, &str)]) -> String {
    rule_key("", "api", r, Algorithm::Gcra, Unit::Minute, entries.iter().copied())
}

#[test]
fn literal_parts_are_length_prefixed() {
    let r = rule(&[("user", None)]);
    assert_eq!(key(&r, &[("user", "alice")]), "tg:g2m:3:api4:user5:alice");
}

#[test]
fn separators_in_values_cannot_collide() {
    let r2 = rule(&[("a", None), ("b", None)]);
    let one = key(&r2, &[("a", "x1:b"), ("b", "y")]);
    let two = key(&r2, &[("a", "x"), ("b", "1:by")]);
    assert_ne!(one, two);
}

#[test]
fn shared_levels_use_the_pattern() {
    let r = rule(&[("path", Some("/api/*"))]);
    assert_eq!(key(&r, &[("path", "/api/a")]), key(&r, &[("path", "/api/b")]));
    let own = rule(&[("path", None)]);
    assert_ne!(key(&own, &[("path", "/api/a")]), key(&own, &[("path", "/api/b")]));
    // A literal value equal to the pattern is still a different part.
    assert_ne!(key(&r, &[("path", "/api/*")]), key(&own, &[("path", "/api/*")]));
}

#[test]
fn long_braced_and_control_values_are_hashed_and_distinct() {
    let r = rule(&[("k", None)]);
    let long = "x".repeat(10_000);
    let a = key(&r, &[("k", &long)]);
    assert!(a.len() < 60, "{a}");
    assert!(!key(&r, &[("k", "{tag}")]).contains('{'));
    assert!(!key(&r, &[("k", "a\nb")]).contains('\n'));
    assert_ne!(key(&r, &[("k", "{a}")]), key(&r, &[("k", "{b}")]));
    let long2 = format!("{}y", "x".repeat(9_999));
    assert_ne!(a, key(&r, &[("k", &long2)]));
}

#[test]
fn bytes_that_are_not_utf8_are_hashed_each_to_its_own_key() {
    let r = rule(&[("k", None)]);
    let bytes_key = |value: &[u8]| {
        rule_key("", "api", &r, Algorithm::Gcra, Unit::Minute, [(&b"k"[..], value)].into_iter())
    };
    let ff = bytes_key(b"\xff");
    assert!(ff.contains('#'), "hashed: {ff}");
    assert_eq!(ff, bytes_key(b"\xff"), "the same bytes, the same bucket");
    let others =
        [bytes_key(b"\xfe"), bytes_key(b"\xff\xfe"), bytes_key(b"\\xff"), key(&r, &[("k", "\u{fffd}")])];
    for other in &others {
        assert_ne!(&ff, other);
    }
    // Valid UTF-8 given as bytes keeps the key it had as text (live buckets survive).
    assert_eq!(bytes_key(b"alice"), key(&r, &[("k", "alice")]));
    let over = |value: &[u8]| {
        override_key("", "api", Algorithm::Gcra, Unit::Minute, [(&b"k"[..], value)].into_iter())
    };
    assert_ne!(over(b"\xff"), over(b"\xfe"));
    // A key (not only a value) that is not UTF-8 is hashed as well.
    assert!(override_key("", "api", Algorithm::Gcra, Unit::Minute, [(&b"\xff"[..], &b"v"[..])].into_iter())
        .contains('#'));
}

#[test]
fn algorithm_unit_domain_and_override_are_distinct_namespaces() {
    let r = rule(&[("user", None)]);
    let e = [("user", "alice")];
    let base = key(&r, &e);
    let other_algo = rule_key("", "api", &r, Algorithm::SlidingWindow, Unit::Minute, e.iter().copied());
    let other_unit = rule_key("", "api", &r, Algorithm::Gcra, Unit::Hour, e.iter().copied());
    let other_domain = rule_key("", "web", &r, Algorithm::Gcra, Unit::Minute, e.iter().copied());
    let over = override_key("", "api", Algorithm::Gcra, Unit::Minute, e.iter().copied());
    // GCRA state is at format 2 (sub-µs remainder): never read a format-1 bucket.
    assert!(base.starts_with("tg:g2m:") && over.starts_with("tg:o2m:"), "{base} {over}");
    // `--default-algorithm` decides an override's algorithm: each has its own buckets.
    let over_fixed = override_key("", "api", Algorithm::FixedWindow, Unit::Minute, e.iter().copied());
    let over_sliding = override_key("", "api", Algorithm::SlidingWindow, Unit::Minute, e.iter().copied());
    assert!(over_fixed.starts_with("tg:ofm:") && over_sliding.starts_with("tg:osm:"), "{over_fixed}");
    let all = [&base, &other_algo, &other_unit, &other_domain, &over, &over_fixed, &over_sliding];
    for (i, a) in all.iter().enumerate() {
        for b in &all[i + 1..] {
            assert_ne!(a, b);
        }
    }
    assert!(
        rule_key("pfx:", "api", &r, Algorithm::Gcra, Unit::Minute, e.iter().copied()).starts_with("pfx:tg:")
    );
}

#[test]
fn parts_read_as_the_formatted_length_and_hex_they_always_had() {
    for len in [0, 1, 9, 10, 47, MAX_LITERAL_PART, 100, 12345] {
        let (mut fast, text) = (String::new(), "é".repeat(len.min(3)));
        push_len(&mut fast, len);
        assert_eq!(fast, len.to_string());
        push_part(&mut fast, text.as_bytes());
        assert_eq!(fast, format!("{len}{}:{text}", text.len()));
    }
    let digest = part_digest(b"x".repeat(100).as_slice());
    let formatted: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(digest_hex(&digest), formatted);
    assert!(!is_plain("a\u{85}b") && !is_plain("{") && is_plain("é/ü ~"));
}

#[test]
fn a_key_secret_keys_values_stably_and_never_prints() {
    let secret = KeySecret::new(b"  0123456789abcdef0123456789abcdef\n").expect("32 bytes");
    let keyed = secret.value(b"192.0.2.77");
    assert_eq!(keyed.len(), 33);
    assert_eq!(keyed[0], b'~');
    assert!(keyed[1..].iter().all(u8::is_ascii_hexdigit));
    assert_eq!(secret.value(b"192.0.2.77"), keyed, "stable");
    assert_ne!(secret.value(b"192.0.2.78"), keyed);
    // The first 16 bytes of HMAC-SHA256 under the trimmed secret.
    let mac = hmac_sha256(b"0123456789abcdef0123456789abcdef", b"192.0.2.77");
    let hex: String = mac[..16].iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(keyed[1..], *hex.as_bytes());
    let other = KeySecret::new(b"fedcba9876543210fedcba9876543210").expect("32 bytes");
    assert_ne!(other.value(b"192.0.2.77"), keyed, "another secret, another key");
    assert!(!format!("{secret:?}").contains("0123"));
    let short = KeySecret::new(b"short\n").map(|_| ()).expect_err("too short");
    assert!(short.contains("5 bytes") && short.contains("at least 32"), "{short}");
}
