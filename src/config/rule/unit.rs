//! The `rate_limit.unit` of a rule (`Unit`): its parsing, its length, and how it is written
//! in words and in bucket keys.
//!
//! Part of `rule`; imports none of its siblings. Pure.

/// The `rate_limit.unit` of a rule. Month is 30 days, year 365 days.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unit {
    Second,
    Minute,
    Hour,
    Day,
    Week,
    Month,
    Year,
}

impl Unit {
    /// Parses a YAML unit, any case.
    pub fn parse(s: &str) -> Option<Unit> {
        Some(match s.to_ascii_lowercase().as_str() {
            "second" => Unit::Second,
            "minute" => Unit::Minute,
            "hour" => Unit::Hour,
            "day" => Unit::Day,
            "week" => Unit::Week,
            "month" => Unit::Month,
            "year" => Unit::Year,
            _ => return None,
        })
    }

    pub fn seconds(self) -> u64 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => 86_400,
            Unit::Week => 7 * 86_400,
            Unit::Month => 30 * 86_400,
            Unit::Year => 365 * 86_400,
        }
    }

    /// A window of `multiplier` units in words, as `explain`, `/rlconfig` and config errors
    /// write it: `second` for 1 (so "20 per second"), else `5 minutes`.
    pub fn window(self, multiplier: u64) -> String {
        match multiplier {
            1 => self.as_str().to_owned(),
            n => format!("{n} {}s", self.as_str()),
        }
    }

    pub fn micros(self) -> u64 {
        self.seconds() * 1_000_000
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Unit::Second => "second",
            Unit::Minute => "minute",
            Unit::Hour => "hour",
            Unit::Day => "day",
            Unit::Week => "week",
            Unit::Month => "month",
            Unit::Year => "year",
        }
    }

    /// One character used in bucket keys (stable across releases: keys live in Redis).
    pub fn key_char(self) -> char {
        match self {
            Unit::Second => 's',
            Unit::Minute => 'm',
            Unit::Hour => 'h',
            Unit::Day => 'd',
            Unit::Week => 'w',
            Unit::Month => 'M',
            Unit::Year => 'y',
        }
    }
}
