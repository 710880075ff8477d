//! `reservations: {key, ttl}` (issue 40): what loads, and every refusal with its field and
//! line.

use super::{errors, found, load, one_error, only_domain};
use crate::config::Reservations;

fn domain(head: &str, descriptors: &str) -> String {
    format!("domain: d\n{head}descriptors:\n{descriptors}")
}

const LIMITED: &str = "  - key: user\n    rate_limit:\n      unit: hour\n      requests_per_unit: 5\n";

#[test]
fn reservations_load_with_a_key_and_a_ttl_in_penaltys_syntax() {
    let snapshot = load(&domain("reservations:\n  key: request\n  ttl: 10m\n", LIMITED));
    let expected = Reservations { key: "request".into(), ttl_us: 600_000_000 };
    assert_eq!(only_domain(&snapshot).reservations, Some(expected));
    let flow = load(&domain("reservations: {key: r, ttl: 30s}\n", LIMITED));
    assert_eq!(only_domain(&flow).reservations.as_ref().map(|r| r.ttl_us), Some(30_000_000));
    assert_eq!(only_domain(&load(&domain("", LIMITED))).reservations, None, "absent: none");
}

#[test]
fn a_missing_or_bad_key_or_ttl_names_its_field_and_line() {
    let (path, line) = one_error(&domain("reservations:\n  ttl: 1m\n", LIMITED), "need a key");
    assert_eq!((path.as_str(), line), ("reservations.key", Some(2)));
    let (path, line) = one_error(&domain("reservations:\n  key: r\n", LIMITED), "need a ttl");
    assert_eq!((path.as_str(), line), ("reservations.ttl", Some(2)));
    for (bad, fragment) in [("10", "expected a whole number"), ("0s", "at least 1s"), ("25h", "longest ttl")]
    {
        let yaml = domain(&format!("reservations:\n  key: r\n  ttl: {bad}\n"), LIMITED);
        let (path, line) = one_error(&yaml, fragment);
        assert_eq!((path.as_str(), line), ("reservations.ttl", Some(4)), "{bad}");
    }
    let all = found(&errors(&domain("reservations:\n  key: r\n  ttl: 1m\n  hold: 3\n", LIMITED)));
    assert!(all[0].2.contains("unknown field `hold`"), "{all:?}");
}

#[test]
fn reservations_refuse_approximate_domains_all_or_nothing_leases_and_unlimited() {
    let head = "reservations: {key: r, ttl: 1m}\n";
    let window =
        "  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 5, algorithm: fixed_window}\n";
    let (path, line) =
        one_error(&domain(&format!("consistency: approximate\n{head}"), window), "approximate");
    assert_eq!((path.as_str(), line), ("reservations", Some(3)));
    let (path, line) =
        one_error(&domain(&format!("charge: all_or_nothing\n{head}"), LIMITED), "all_or_nothing");
    assert_eq!((path.as_str(), line), ("reservations", Some(3)));
    let leased = format!("{LIMITED}    lease: true\n");
    let (path, line) = one_error(&domain(head, &leased), "lease: true in a domain with reservations");
    assert_eq!((path.as_str(), line), ("descriptors[0].lease", Some(8)));
    let unlimited = "  - key: user\n    rate_limit:\n      unlimited: true\n";
    let (path, line) = one_error(&domain(head, unlimited), "unlimited in a domain with reservations");
    assert_eq!((path.as_str(), line), ("descriptors[0].rate_limit.unlimited", Some(6)));
    let named = "  - key: user\n    descriptors:\n      - key: r\n        rate_limit: {unit: hour, requests_per_unit: 5}\n";
    let (path, line) = one_error(&domain(head, named), "could never match");
    assert_eq!((path.as_str(), line), ("descriptors[0].descriptors[0].key", Some(6)));
    // Without reservations, each of these loads as before.
    load(&domain("", unlimited));
    load(&domain("", &leased));
    load(&domain("", named));
}
