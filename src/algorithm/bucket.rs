//! What the algorithms take in and give back, in the words every caller uses: the limit's
//! `Params` (and its `Algorithm`), the `Hits` asked, a bucket's stored `State`, and an
//! application's `Outcome` (the `Decision` answered, the `Write` the store must make).
//!
//! Data only, at the bottom of `algorithm`: the three algorithms and the dispatch over
//! them (`algorithm::apply`) build on it.

/// Which algorithm a rule uses. A closed set: the YAML `algorithm` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// Generic cell rate algorithm: smooth, with a configurable burst. The default.
    Gcra,
    /// Two-epoch weighted counter: smooths fixed-window edges without per-request state.
    SlidingWindow,
    /// Epoch-aligned fixed windows, as envoyproxy/ratelimit (denials consume nothing).
    FixedWindow,
}

impl Algorithm {
    /// The name used in YAML, metrics and `/rlconfig`.
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::Gcra => "gcra",
            Algorithm::SlidingWindow => "sliding_window",
            Algorithm::FixedWindow => "fixed_window",
        }
    }
}

/// One calendar period (`rate_limit.calendar`): a fixed window whose bounds are not
/// `unit_us`-aligned but computed from a time zone's civil calendar (a day, an ISO week, a
/// month, a year). Computed once, in Rust (`config::Calendar::period_at`), from the
/// instance's clock when the charge is built, and carried to the algorithm (memory) or the
/// script (Redis) with the charge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Period {
    /// The period's first µs (since the epoch).
    pub start_us: u64,
    /// The next period's first µs; `> start_us`.
    pub end_us: u64,
}

/// The numbers one limit is enforced with. Built once at config compile time; a calendar
/// limit's `period` is filled in per charge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    pub algorithm: Algorithm,
    /// Requests admitted per `unit_us`. 0 denies everything (never divided by).
    pub limit: u64,
    /// Length of the unit (second, minute, ... year) in microseconds.
    pub unit_us: u64,
    /// GCRA only: how many requests may arrive at once on a full bucket.
    /// Equal to `limit` unless the rule says otherwise; ignored by the window algorithms.
    pub burst: u64,
    /// `penalty`: once a consume is denied, the bucket denies everything for this many µs
    /// after the breach (see `algorithm::penalty`). 0: no penalty.
    pub penalty_us: u64,
    /// A fixed window on a calendar (`rate_limit.calendar`): the period the instance's
    /// clock is in when the charge was built (see `fixed_window::apply`). `None` for every
    /// other limit, and in a compiled rule (the service fills it in per charge).
    pub period: Option<Period>,
}

/// How a descriptor charges its bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hits {
    /// Consume `n` (n >= 1) if all of them fit; a denial consumes nothing.
    Consume(u64),
    /// `hits_addend: 0`: answer whether one hit would pass now and describe the bucket;
    /// consume nothing.
    Peek,
    /// `is_negative_hits`: give `n` back, never past a full bucket; always allowed.
    Refund(u64),
    /// A consume on a limit with `overdraft: true` (usage reported after the fact, such as
    /// an LLM's tokens): `n` is recorded whether or not it fits, and answered as a consume
    /// would be — denied once past the limit, with the time until one hit fits again.
    Overdraw(u64),
}

impl Hits {
    /// These hits on a limit with `overdraft: true`: a consume becomes an overdraw.
    pub fn overdrawn(self) -> Hits {
        match self {
            Hits::Consume(n) => Hits::Overdraw(n),
            other => other,
        }
    }
}

/// The answer for one bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    /// Requests still admissible after this charge; 0 when denied.
    pub remaining: u64,
    /// Allowed: microseconds until the bucket is fully restored.
    /// Denied: microseconds until this same request would pass.
    pub reset_us: u64,
}

/// State kept per bucket, in memory or (with the same fields) in Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// GCRA: the theoretical arrival time, `tat + rem / limit` µs since the epoch
    /// (`rem < limit`): whole µs plus the sub-µs remainder, so that an emission interval
    /// `unit / limit` that is not a whole number of µs is never rounded (see `gcra`).
    /// `until`: the end of a penalty (µs since the epoch; 0 or past: none), see `penalty`.
    Gcra { tat: u64, rem: u64, until: u64 },
    /// Both window algorithms: the start of the current window and its counters
    /// (`previous` is always 0 for the fixed window), and `until` as GCRA's.
    Window { start: u64, current: u64, previous: u64, until: u64 },
}

impl State {
    /// The end of the bucket's penalty (0: never penalized).
    pub fn until(self) -> u64 {
        match self {
            State::Gcra { until, .. } | State::Window { until, .. } => until,
        }
    }
}

/// What the store must do with the bucket after a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    /// Nothing changed (denials, peeks).
    Keep,
    /// Store the new state; it carries no information after `expires_at` (µs since epoch).
    Put { state: State, expires_at: u64 },
    /// The bucket is back to full: the state can be dropped.
    Delete,
}

/// One application of an algorithm: the answer and the state change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub decision: Decision,
    pub write: Write,
}
