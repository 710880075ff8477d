//! A limit's calendar (`rate_limit.calendar`): the time zone and unit whose civil periods —
//! the calendar day, the ISO week (from Monday 00:00), the month, the year — are a fixed
//! window's windows, and the one place those periods' bounds are computed
//! ([`Calendar::period_at`]): the memory store and the Redis scripts take them from here.
//!
//! Part of `rule`; imports only its sibling `unit`. Pure: the zone database is the one
//! `jiff` embeds (no file is read), and `now` is an argument.

use std::fmt;
use std::sync::Arc;

use jiff::civil::Date;
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan, Zoned};

use crate::algorithm::Period;

use super::unit::Unit;

/// A limit's calendar: periods of `unit` (day, week, month or year) in `zone`.
#[derive(Clone)]
pub struct Calendar {
    /// The zone's name as written (`UTC` for `calendar: {}`): what keys and displays use.
    name: Arc<str>,
    zone: TimeZone,
    unit: Unit,
}

impl PartialEq for Calendar {
    fn eq(&self, other: &Calendar) -> bool {
        self.name == other.name && self.unit == other.unit
    }
}

impl Eq for Calendar {}

impl fmt::Debug for Calendar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Calendar({}, {})", self.unit.as_str(), self.name)
    }
}

/// A calendar limit's period at an instant, as `/v1/usage`, `/rlconfig`, the status page
/// and `explain` show it. Instants are RFC 3339 in the limit's zone
/// (`2026-12-01T00:00:00+01:00`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PeriodView {
    /// In words: `calendar month, Europe/Berlin`.
    pub period: String,
    /// `day`, `week`, `month` or `year`.
    pub unit: &'static str,
    pub time_zone: String,
    /// The current period's first instant.
    pub start: String,
    /// The next period's first instant: when the count starts over.
    pub next_reset: String,
    /// The same instant in seconds since the epoch.
    pub next_reset_unix: u64,
}

/// Why a calendar was refused, in words for the operator (the caller adds the field).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CalendarError {
    #[error(
        "unknown time zone {0:?} (expected an IANA name such as Europe/Berlin or America/New_York, or UTC)"
    )]
    UnknownZone(String),
    #[error("unit {0} is not a calendar period (expected day, week, month or year)")]
    Unit(&'static str),
}

impl Calendar {
    /// Periods of `unit` in the IANA zone `zone` (`None`: UTC). Refuses units below a day
    /// and zones the embedded database does not know.
    pub fn new(zone: Option<&str>, unit: Unit) -> Result<Calendar, CalendarError> {
        if !matches!(unit, Unit::Day | Unit::Week | Unit::Month | Unit::Year) {
            return Err(CalendarError::Unit(unit.as_str()));
        }
        let (name, zone) = match zone {
            None => ("UTC", TimeZone::UTC),
            Some(name) => {
                let zone = TimeZone::get(name).map_err(|_| CalendarError::UnknownZone(name.to_owned()))?;
                (name, zone)
            }
        };
        Ok(Calendar { name: Arc::from(name), zone, unit })
    }

    /// The zone's name as written (`UTC` when none was).
    pub fn zone(&self) -> &str {
        &self.name
    }

    pub fn unit(&self) -> Unit {
        self.unit
    }

    /// The period in words: `calendar month, Europe/Berlin`.
    pub fn describe(&self) -> String {
        format!("calendar {}, {}", self.unit.as_str(), self.name)
    }

    /// The period that holds `now_us`, for displays.
    pub fn view(&self, now_us: u64) -> PeriodView {
        let period = self.period_at(now_us);
        PeriodView {
            period: self.describe(),
            unit: self.unit.as_str(),
            time_zone: self.name.to_string(),
            start: self.instant_text(period.start_us),
            next_reset: self.instant_text(period.end_us),
            next_reset_unix: period.end_us / 1_000_000,
        }
    }

    /// `us` (since the epoch) as RFC 3339 in the zone, to the second.
    fn instant_text(&self, us: u64) -> String {
        let at = i64::try_from(us / 1_000_000).ok().and_then(|s| Timestamp::from_second(s).ok());
        match at {
            Some(at) => at.to_zoned(self.zone.clone()).strftime("%Y-%m-%dT%H:%M:%S%:z").to_string(),
            None => format!("@{}", us / 1_000_000),
        }
    }

    /// The period that holds the instant `now_us` (µs since the epoch): from its first
    /// instant in the zone (the day's start: midnight, or the first instant after a
    /// daylight-saving gap at midnight) to the next period's first instant. Days are 23 to
    /// 25 hours long across daylight-saving changes, months 28 to 31 days.
    ///
    /// Never fails: an instant the zone arithmetic cannot place (before the year −9999 or
    /// after 9999, beyond any clock) gets the UTC day around it.
    pub fn period_at(&self, now_us: u64) -> Period {
        self.civil_period(now_us).unwrap_or_else(|| {
            let day = Unit::Day.micros();
            let start_us = now_us - now_us % day;
            Period { start_us, end_us: start_us.saturating_add(day) }
        })
    }

    fn civil_period(&self, now_us: u64) -> Option<Period> {
        let now = Timestamp::from_microsecond(i64::try_from(now_us).ok()?).ok()?;
        let today = now.to_zoned(self.zone.clone()).date();
        let first: Date = match self.unit {
            Unit::Week => {
                today.checked_sub(i64::from(today.weekday().to_monday_zero_offset()).days()).ok()?
            }
            Unit::Month => today.first_of_month(),
            Unit::Year => today.first_of_year(),
            _ => today,
        };
        let next = match self.unit {
            Unit::Week => first.checked_add(1.week()),
            Unit::Month => first.checked_add(1.month()),
            Unit::Year => first.checked_add(1.year()),
            _ => first.checked_add(1.day()),
        }
        .ok()?;
        let start_us = self.day_start(first)?;
        let end_us = self.day_start(next)?;
        (end_us > start_us).then_some(Period { start_us, end_us })
    }

    /// The first instant of `date` in the zone, in µs since the epoch.
    fn day_start(&self, date: Date) -> Option<u64> {
        let zoned: Zoned = date.to_zoned(self.zone.clone()).ok()?.start_of_day().ok()?;
        u64::try_from(zoned.timestamp().as_microsecond()).ok()
    }
}

#[cfg(test)]
mod tests;
