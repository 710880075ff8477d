//! `explain`: descriptor parsing, every way a walk can go, replaces, keys, and agreement
//! with `Domain::lookup` (explain must never tell a different story than the server).

use std::path::PathBuf;

use crate::algorithm::Algorithm;
use crate::config::{compile_sources, Lookup, RuleLimit, Snapshot, Unit};
use crate::store::key;

use super::*;

const POLICY: &str = r#"
domain: api
descriptors:
  - key: user
    rate_limit: { name: per-user, unit: minute, requests_per_unit: 600, burst: 50 }
    descriptors:
      - key: path
        value: "/v1/search*"
        rate_limit: { name: per-user-search, unit: minute, requests_per_unit: 60 }
      - key: path
        value: "/v1/*"
        rate_limit: { unit: hour, requests_per_unit: 100, algorithm: sliding_window }
  - key: user
    value: vip
    rate_limit: { unlimited: true }
  - key: tier
    value: gold
    rate_limit: { name: gold, unit: hour, requests_per_unit: 100, replaces: [{ name: per-user }] }
  - key: group
    descriptors:
      - key: member
        rate_limit: { unit: day, requests_per_unit: 5, algorithm: fixed_window }
  - key: open
  - key: trial
    shadow_mode: true
    quota_mode: true
    rate_limit: { unit: second, requests_per_unit: 0 }
"#;

fn snapshot() -> Snapshot {
    compile_sources(&[(PathBuf::from("api.yaml"), POLICY.to_string())]).expect("valid policy")
}

fn arg(s: &str) -> DescriptorArg {
    s.parse().expect("descriptor")
}

fn one<'a>(snapshot: &'a Snapshot, descriptor: &str) -> DescriptorReport<'a> {
    let explanation = explain(snapshot, "api", &[arg(descriptor)]);
    explanation.descriptors.into_iter().next().expect("one report")
}

/// The walk's verdict, in `Lookup` terms, for comparison with the server's matcher.
fn as_lookup<'a>(verdict: Verdict<'a>) -> Lookup<'a> {
    match verdict {
        Verdict::Rule(rule) => Lookup::Rule(rule),
        Verdict::Allow => Lookup::Allow,
        Verdict::Missed | Verdict::DeeperThanTree { .. } | Verdict::InnerNode => Lookup::NoMatch,
    }
}

#[test]
fn parses_descriptor_arguments() {
    let entries = |s: &str| s.parse::<DescriptorArg>().map(|d| d.0);
    let pair = |k: &[u8], v: &[u8]| (k.to_vec(), v.to_vec());
    assert_eq!(entries("user=alice,path=/v1/x"), Ok(vec![pair(b"user", b"alice"), pair(b"path", b"/v1/x")]));
    assert_eq!(entries("q=a=b"), Ok(vec![pair(b"q", b"a=b")]));
    assert_eq!(entries(r"q=a\,b,k=\\"), Ok(vec![pair(b"q", b"a,b"), pair(b"k", b"\\")]));
    assert_eq!(entries(r"a\=b=c"), Ok(vec![pair(b"a=b", b"c")]));
    assert_eq!(entries("k="), Ok(vec![pair(b"k", b"")]));
    assert_eq!(entries(r"k=\xff\xfe,\xff=\\xff"), Ok(vec![pair(b"k", b"\xff\xfe"), pair(b"\xff", b"\\xff")]));
    assert!(entries("alice").is_err());
    assert!(entries("=v").is_err());
    assert!(entries("a=1,").is_err());
    assert!(entries(r"k=\xf").is_err());
}

#[test]
fn default_node_then_first_matching_wildcard() {
    let snapshot = snapshot();
    let report = one(&snapshot, "user=alice,path=/v1/search/x");
    assert_eq!(report.walk.len(), 2);
    assert!(matches!(&report.walk[0].how, How::Default { exact: 1, wildcards } if wildcards.is_empty()));
    assert_eq!(report.walk[0].passed_rule.and_then(|r| r.name.as_deref()), Some("per-user"));
    assert_eq!(
        report.walk[1].how,
        How::Wildcard { pattern: "/v1/search*".into(), position: 1, wildcards: 2 }
    );
    let Verdict::Rule(rule) = report.verdict else { panic!("expected a rule: {report:?}") };
    assert_eq!(rule.name.as_deref(), Some("per-user-search"));
    let expected = key::rule_key(
        "",
        "api",
        rule,
        Algorithm::Gcra,
        Unit::Minute,
        [("user", "alice"), ("path", "/v1/search/x")].into_iter(),
    );
    assert_eq!(report.applied, Applied::Charged { key: expected, others: vec![] });

    let second = one(&snapshot, "user=alice,path=/v1/other");
    assert_eq!(second.walk[1].how, How::Wildcard { pattern: "/v1/*".into(), position: 2, wildcards: 2 });
    assert!(matches!(second.verdict, Verdict::Rule(r) if r.path == "descriptors[0].descriptors[1]"));
}

#[test]
fn every_way_a_walk_stops() {
    let snapshot = snapshot();
    let unmatched = one(&snapshot, "user=alice,path=/x");
    assert_eq!(unmatched.verdict, Verdict::Missed);
    assert_eq!(
        unmatched.walk[1].how,
        How::NoValue { exact: 0, wildcards: vec!["/v1/search*".into(), "/v1/*".into()] }
    );
    let unknown = one(&snapshot, "country=fr");
    assert!(matches!(&unknown.walk[0].how, How::NoKey { keys } if keys.len() == 5 && keys[0] == "group"));
    assert_eq!(one(&snapshot, "user=a,path=/v1/x,extra=1").verdict, Verdict::DeeperThanTree { matched: 2 });
    assert_eq!(one(&snapshot, "group=g").verdict, Verdict::InnerNode);
    assert_eq!(one(&snapshot, "open=x").verdict, Verdict::Allow);
    assert_eq!(one(&snapshot, "open=x").applied, Applied::Nothing);
    let vip = one(&snapshot, "user=vip");
    assert_eq!(vip.walk[0].how, How::Exact);
    assert_eq!(vip.applied, Applied::Unlimited);
}

#[test]
fn replaces_across_descriptors() {
    let snapshot = snapshot();
    let explanation = explain(&snapshot, "api", &[arg("user=alice"), arg("tier=gold")]);
    let [user, gold] = &explanation.descriptors[..] else { panic!("two reports") };
    assert!(matches!(&user.applied, Applied::ReplacedBy { rule, descriptor: 1 } if rule.label() == "gold"));
    assert!(matches!(&gold.applied, Applied::Charged { .. }));
    let text = explanation.to_string();
    assert!(text.contains("replaced by rule gold of descriptor 2"), "{text}");
    assert!(text.contains("replaces \"per-user\": descriptor 1"), "{text}");
    // Alone, gold replaces nothing and per-user is charged.
    let alone = explain(&snapshot, "api", &[arg("tier=gold")]).to_string();
    assert!(alone.contains("replaces \"per-user\": no given descriptor matched it"), "{alone}");
}

#[test]
fn walk_agrees_with_the_matcher() {
    let snapshot = snapshot();
    let domain = snapshot.domain("api").expect("api");
    for descriptor in [
        "user=alice",
        "user=vip",
        "user=vip,path=/v1/x",
        "user=alice,path=/v1/search",
        "user=alice,path=/v1/",
        "user=alice,path=/v2",
        "user=alice,path=/v1/x,z=1",
        "tier=gold",
        "tier=silver",
        "group=g",
        "group=g,member=m",
        "group=g,other=m",
        "open=x",
        "open=x,more=y",
        "trial=t",
        "nothing=here",
    ] {
        let report = one(&snapshot, descriptor);
        assert_eq!(as_lookup(report.verdict), domain.lookup(report.entries.iter().cloned()), "{descriptor}");
    }
}

#[test]
fn text_names_rule_numbers_flags_and_key() {
    let snapshot = snapshot();
    let text = explain(&snapshot, "api", &[arg("user=alice,path=/v1/search/x"), arg("trial=t")]).to_string();
    for expected in [
        "domain api: failure_mode open, file api.yaml",
        "descriptor 1: user=alice, path=/v1/search/x",
        "1. user=alice: default node of key \"user\"",
        "this node's own limit per-user does not apply",
        "2. path=/v1/search/x: wildcard \"/v1/search*\" (the first that matches, in file order: #1 of the 2",
        "→ rule per-user-search (path descriptors[0].descriptors[0])",
        "limit: requests_per_unit 60 per minute (gcra), burst 60",
        "bucket key: tg:g2m:",
        "descriptor 2: trial=t",
        "rule descriptors[5] (path descriptors[5], unnamed: metrics use the path)",
        "requests_per_unit 0 per second (gcra), burst 0: blocks everything",
        "flags: shadow_mode (counted and reported, never denies), quota_mode",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    let limits =
        snapshot.domain("api").map(|d| d.rules.iter().filter(|r| r.limit == RuleLimit::Unlimited).count());
    assert_eq!(limits, Some(1));
}

#[test]
fn bytes_that_are_not_utf8_are_explained_escaped_in_their_own_bucket() {
    let snapshot = snapshot();
    let ff = one(&snapshot, r"user=\xff");
    let Applied::Charged { key: ff_key, .. } = &ff.applied else { panic!("charged: {ff:?}") };
    assert!(ff_key.contains('#'), "hashed like a long value: {ff_key}");
    let Applied::Charged { key: text_key, .. } = one(&snapshot, r"user=\\xff").applied else { panic!() };
    assert_ne!(ff_key, &text_key, "the byte and the text `\\xff` are different buckets");
    // A wildcard takes a value that is not UTF-8; a key that is not UTF-8 is no configured key.
    let path = one(&snapshot, r"user=alice,path=/v1/\xff");
    assert!(matches!(&path.walk[1].how, How::Wildcard { position: 2, .. }), "{path:?}");
    assert!(matches!(one(&snapshot, r"\xff=alice").walk[0].how, How::NoKey { .. }));
    let text = explain(&snapshot, "api", &[arg(r"user=\xff\xfe,path=/v1/\\")]).to_string();
    for expected in [r"descriptor 1: user=\xff\xfe, path=/v1/\\", r"1. user=\xff\xfe: default node"] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
}

#[test]
fn unknown_domain_is_answered_ok() {
    let snapshot = snapshot();
    let explanation = explain(&snapshot, "apii", &[arg("user=alice")]);
    assert!(explanation.domain.is_none());
    let text = explanation.to_string();
    assert!(text.contains("domain \"apii\" is not configured"), "{text}");
    assert!(text.contains("configured domains: api"), "{text}");
}

proptest::proptest! {
    /// Any descriptor over the policy's keys and values: explain's verdict is the matcher's.
    #[test]
    fn walk_agrees_with_the_matcher_on_any_descriptor(
        entries in proptest::collection::vec(
            (
                proptest::sample::select(vec!["user", "path", "tier", "group", "member", "open", "trial", "x"]),
                proptest::sample::select(vec!["alice", "vip", "gold", "/v1/search/x", "/v1/y", "/x", ""]),
            ),
            1..5,
        )
    ) {
        let snapshot = snapshot();
        let domain = snapshot.domain("api").expect("api");
        let arg = DescriptorArg(entries.iter().map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec())).collect());
        let explanation = explain(&snapshot, "api", &[arg]);
        let report = &explanation.descriptors[0];
        proptest::prop_assert_eq!(as_lookup(report.verdict), domain.lookup(entries.iter().copied()));
        proptest::prop_assert_eq!(report.walk.len() <= entries.len(), true);
    }
}

#[test]
fn text_lists_every_limit_of_rate_limits_with_its_window_and_the_domain_modes() {
    let policy = r#"
domain: api
charge: all_or_nothing
hash_tag: domain
descriptors:
  - key: api_key
    rate_limits:
      - { name: burst, unit: second, requests_per_unit: 20 }
      - { name: five, unit: minute, unit_multiplier: 5, requests_per_unit: 7, algorithm: sliding_window }
"#;
    let snapshot = compile_sources(&[(PathBuf::from("api.yaml"), policy.to_string())]).expect("valid policy");
    let text = explain(&snapshot, "api", &[arg("api_key=k")]).to_string();
    for expected in [
        "domain api: failure_mode open, charge all_or_nothing, hash_tag domain, file api.yaml",
        "→ rule descriptors[0] (path descriptors[0], rate_limits: metrics use descriptors[0]/<name>)",
        "limits (a bucket each; the descriptor passes only if every one passes):",
        "      burst: requests_per_unit 20 per second (gcra), burst 20",
        "      five: requests_per_unit 7 per 5 minutes (sliding_window)",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
}

#[test]
fn text_says_an_approximate_domain_decides_its_buckets_locally() {
    let policy = "domain: edge\nconsistency: approximate\ndescriptors:\n  - key: ip\n    rate_limit: { unit: minute, requests_per_unit: 1000, algorithm: sliding_window }\n";
    let edge = compile_sources(&[(PathBuf::from("edge.yaml"), policy.to_string())]).expect("valid policy");
    let text = explain(&edge, "edge", &[arg("ip=1"), arg("other=2")]).to_string();
    assert!(
        text.contains("domain edge: failure_mode open, consistency approximate, file edge.yaml"),
        "{text}"
    );
    assert_eq!(
        text.matches("decided locally (consistency approximate)").count(),
        1,
        "only the charged one:\n{text}"
    );
    let exact = explain(&snapshot(), "api", &[arg("user=alice")]).to_string();
    assert!(
        !exact.contains("consistency") && !exact.contains("decided locally"),
        "the default goes unsaid:\n{exact}"
    );
}

#[test]
fn text_shows_a_calendar_period_its_next_reset_and_its_own_key() {
    let policy = "domain: billing\ndescriptors:\n  - key: plan\n    rate_limit:\n      unit: month\n      requests_per_unit: 1000\n      calendar: {time_zone: Europe/Berlin}\n";
    let billing =
        compile_sources(&[(PathBuf::from("billing.yaml"), policy.to_string())]).expect("valid policy");
    let text = explain(&billing, "billing", &[arg("plan=pro")]).to_string();
    for expected in [
        "requests_per_unit 1000 per calendar month, Europe/Berlin (fixed_window), this period ",
        "(the count starts over at the next reset, ",
        "tg:cM:7:billing4:plan3:pro@13:Europe/Berlin",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
}
