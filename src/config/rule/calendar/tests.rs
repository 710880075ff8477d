//! Period bounds at fixed instants: daylight-saving days, months of 28 to 31 days, ISO
//! weeks across a year end, a leap year, and the edges of each period.

use super::*;

fn us(rfc3339: &str) -> u64 {
    let ts: Timestamp = rfc3339.parse().unwrap();
    u64::try_from(ts.as_microsecond()).unwrap()
}

fn period(zone: Option<&str>, unit: Unit, at: &str) -> (u64, u64) {
    let p = Calendar::new(zone, unit).unwrap().period_at(us(at));
    (p.start_us, p.end_us)
}

const HOUR: u64 = 3_600_000_000;
const DAY: u64 = 24 * HOUR;

/// Every instant of the period maps to it; the instant at its end starts the next one.
fn assert_edges(calendar: &Calendar, start: u64, end: u64) {
    let at = |t| calendar.period_at(t);
    assert_eq!(at(start), Period { start_us: start, end_us: end });
    assert_eq!(at(end - 1), Period { start_us: start, end_us: end });
    assert_eq!(at(end).start_us, end, "the next period starts where this one ends");
    assert_eq!(at(start - 1).end_us, start, "the previous period ends where this one starts");
}

#[test]
fn berlin_spring_forward_day_is_23_hours() {
    let berlin = Some("Europe/Berlin");
    let (start, end) = period(berlin, Unit::Day, "2026-03-29T12:00:00Z");
    assert_eq!(start, us("2026-03-28T23:00:00Z"), "midnight CET");
    assert_eq!(end, us("2026-03-29T22:00:00Z"), "midnight CEST");
    assert_eq!(end - start, 23 * HOUR);
    assert_edges(&Calendar::new(berlin, Unit::Day).unwrap(), start, end);
}

#[test]
fn berlin_fall_back_day_is_25_hours() {
    let berlin = Some("Europe/Berlin");
    let (start, end) = period(berlin, Unit::Day, "2026-10-25T01:30:00Z");
    assert_eq!(start, us("2026-10-24T22:00:00Z"), "midnight CEST");
    assert_eq!(end, us("2026-10-25T23:00:00Z"), "midnight CET");
    assert_eq!(end - start, 25 * HOUR);
    assert_edges(&Calendar::new(berlin, Unit::Day).unwrap(), start, end);
}

#[test]
fn months_of_28_29_30_and_31_days() {
    let utc = |at| period(None, Unit::Month, at);
    assert_eq!(utc("2026-02-14T00:00:00Z"), (us("2026-02-01T00:00:00Z"), us("2026-03-01T00:00:00Z")));
    assert_eq!(utc("2026-02-14T00:00:00Z").1 - utc("2026-02-14T00:00:00Z").0, 28 * DAY);
    assert_eq!(utc("2024-02-29T23:59:59Z").1 - utc("2024-02-29T23:59:59Z").0, 29 * DAY, "leap February");
    assert_eq!(utc("2026-04-30T12:00:00Z").1 - utc("2026-04-30T12:00:00Z").0, 30 * DAY);
    let (start, end) = utc("2026-01-31T23:59:59.999999Z");
    assert_eq!((start, end), (us("2026-01-01T00:00:00Z"), us("2026-02-01T00:00:00Z")));
    assert_eq!(end - start, 31 * DAY);
    assert_edges(&Calendar::new(None, Unit::Month).unwrap(), start, end);
}

#[test]
fn a_berlin_month_spans_the_change_to_summer_time() {
    let (start, end) = period(Some("Europe/Berlin"), Unit::Month, "2026-03-31T21:59:59Z");
    assert_eq!(start, us("2026-02-28T23:00:00Z"));
    assert_eq!(end, us("2026-03-31T22:00:00Z"));
    assert_eq!(end - start, 31 * DAY - HOUR);
    // 22:00Z on the 31st is already April 1st in Berlin.
    let april = period(Some("Europe/Berlin"), Unit::Month, "2026-03-31T22:00:00Z");
    assert_eq!(april, (us("2026-03-31T22:00:00Z"), us("2026-04-30T22:00:00Z")));
}

#[test]
fn iso_week_starts_on_monday_across_a_year_end() {
    // 2026-01-01 is a Thursday: its ISO week runs from Monday 2025-12-29.
    let (start, end) = period(None, Unit::Week, "2026-01-01T08:00:00Z");
    assert_eq!((start, end), (us("2025-12-29T00:00:00Z"), us("2026-01-05T00:00:00Z")));
    assert_edges(&Calendar::new(None, Unit::Week).unwrap(), start, end);
    // A Sunday late evening is still the week that began six days before.
    let sunday = period(None, Unit::Week, "2026-01-04T23:59:59Z");
    assert_eq!(sunday, (start, end));
    // In Tokyo (UTC+9) the week begins nine hours before UTC's.
    let tokyo = period(Some("Asia/Tokyo"), Unit::Week, "2026-01-01T08:00:00Z");
    assert_eq!(tokyo, (us("2025-12-28T15:00:00Z"), us("2026-01-04T15:00:00Z")));
}

#[test]
fn a_leap_year_has_366_days_and_a_year_starts_on_january_first() {
    let (start, end) = period(None, Unit::Year, "2024-07-01T00:00:00Z");
    assert_eq!((start, end), (us("2024-01-01T00:00:00Z"), us("2025-01-01T00:00:00Z")));
    assert_eq!(end - start, 366 * DAY);
    let (start, end) = period(Some("America/New_York"), Unit::Year, "2026-01-01T04:59:59Z");
    assert_eq!((start, end), (us("2025-01-01T05:00:00Z"), us("2026-01-01T05:00:00Z")));
    assert_eq!(end - start, 365 * DAY);
}

#[test]
fn refuses_units_below_a_day_and_unknown_zones() {
    assert_eq!(Calendar::new(None, Unit::Hour).unwrap_err(), CalendarError::Unit("hour"));
    let unknown = Calendar::new(Some("Mars/Olympus_Mons"), Unit::Day).unwrap_err();
    assert_eq!(unknown, CalendarError::UnknownZone("Mars/Olympus_Mons".into()));
    let berlin = Calendar::new(Some("Europe/Berlin"), Unit::Month).unwrap();
    assert_eq!(berlin.describe(), "calendar month, Europe/Berlin");
    assert_eq!(Calendar::new(None, Unit::Week).unwrap().describe(), "calendar week, UTC");
}

#[test]
fn the_view_shows_the_period_and_its_next_reset_in_the_zone() {
    let berlin = Calendar::new(Some("Europe/Berlin"), Unit::Month).unwrap();
    let view = berlin.view(us("2026-11-29T15:00:00Z"));
    assert_eq!(view.period, "calendar month, Europe/Berlin");
    assert_eq!((view.unit, view.time_zone.as_str()), ("month", "Europe/Berlin"));
    assert_eq!(view.start, "2026-11-01T00:00:00+01:00");
    assert_eq!(view.next_reset, "2026-12-01T00:00:00+01:00");
    assert_eq!(view.next_reset_unix, us("2026-11-30T23:00:00Z") / 1_000_000);
}
