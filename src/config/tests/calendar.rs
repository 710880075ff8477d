//! `rate_limit.calendar`: what loads (a zone, `{}` for UTC, the fixed window implied) and
//! every refusal with its path and line.

use super::{load, matched, one_error, only_domain};
use crate::algorithm::Algorithm;
use crate::config::Limit;

fn limit(yaml: &str) -> Limit {
    let snapshot = load(yaml);
    matched(only_domain(&snapshot), &[("plan", "pro")]).limits()[0].clone()
}

fn yaml(fields: &str) -> String {
    format!("domain: d\ndescriptors:\n  - key: plan\n    rate_limit:\n{fields}")
}

#[test]
fn a_calendar_loads_with_its_zone_and_implies_the_fixed_window() {
    let l = limit(&yaml("      unit: month\n      requests_per_unit: 1000\n      calendar:\n        time_zone: Europe/Berlin\n"));
    assert_eq!(l.params.algorithm, Algorithm::FixedWindow, "calendar is fixed_window's alone");
    let calendar = l.calendar.as_ref().expect("a calendar");
    assert_eq!(calendar.zone(), "Europe/Berlin");
    assert_eq!(l.period_text(), "calendar month, Europe/Berlin");
    assert_eq!(l.params.period, None, "the period is the charge's, not the rule's");
    assert!(l.charge_params(1_780_000_000_000_000).period.is_some());
    let utc = limit(&yaml(
        "      unit: week\n      requests_per_unit: 5\n      algorithm: fixed_window\n      calendar: {}\n",
    ));
    assert_eq!(utc.period_text(), "calendar week, UTC");
    let bare = limit(&yaml("      unit: day\n      requests_per_unit: 5\n      calendar:\n"));
    assert_eq!(bare.period_text(), "calendar day, UTC", "`calendar:` alone is `{{}}`");
    let plain =
        limit(&yaml("      unit: month\n      requests_per_unit: 5\n      algorithm: fixed_window\n"));
    assert_eq!(
        (plain.calendar.is_none(), plain.period_text()),
        (true, "month".to_owned()),
        "30 days as before"
    );
}

#[test]
fn refusals_name_the_field_and_line() {
    let cases = [
        ("      unit: month\n      requests_per_unit: 5\n      algorithm: gcra\n      calendar: {}\n", "rate_limit.calendar", 8, "algorithm gcra"),
        ("      unit: month\n      requests_per_unit: 5\n      algorithm: sliding_window\n      calendar: {}\n", "rate_limit.calendar", 8, "algorithm sliding_window"),
        ("      unit: hour\n      requests_per_unit: 5\n      calendar: {}\n", "rate_limit.unit", 5, "unit hour is not a calendar period"),
        ("      unit: day\n      unit_multiplier: 2\n      requests_per_unit: 5\n      calendar: {}\n", "rate_limit.unit_multiplier", 6, "unit_multiplier 2 with calendar"),
        ("      unit: day\n      requests_per_unit: 5\n      calendar:\n        time_zone: Europe/Atlantis\n", "rate_limit.calendar.time_zone", 8, "unknown time zone \"Europe/Atlantis\""),
        ("      unit: day\n      requests_per_unit: 5\n      penalty: 1m\n      calendar: {}\n", "rate_limit.penalty", 7, "penalty with calendar"),
        ("      unit: day\n      requests_per_unit: 5\n      calendar: {zone: UTC}\n", "", 7, "unknown field `zone`"),
    ];
    for (fields, path, line, fragment) in cases {
        let (at, found) = one_error(&yaml(fields), fragment);
        let expected = if path.is_empty() { String::new() } else { format!("descriptors[0].{path}") };
        if !path.is_empty() {
            assert_eq!(at, expected, "{fragment}");
        }
        assert_eq!(found, Some(line), "{fragment}: {at}");
    }
}

#[test]
fn a_calendar_is_refused_with_leases_and_approximate_mode() {
    let lease = "domain: d\ndescriptors:\n  - key: plan\n    lease: true\n    rate_limit: {unit: day, requests_per_unit: 5, calendar: {}}\n";
    assert_eq!(
        one_error(lease, "lease: true on a rule with a calendar"),
        ("descriptors[0].lease".into(), Some(4))
    );
    let approx = "domain: d\nconsistency: approximate\ndescriptors:\n  - key: plan\n    rate_limit:\n      unit: day\n      requests_per_unit: 5\n      calendar: {}\n";
    let (at, line) = one_error(approx, "consistency: approximate");
    assert_eq!((at.as_str(), line), ("descriptors[0].rate_limit.calendar", Some(8)));
}
