//! A compiled rule: what one descriptor node enforces (`Rule`, its `Limit`s, the `Level`s
//! on the way to it, the `Unit` of a window) and the id the matcher's tree points at it by.
//!
//! The bottom of the compiled model: `matcher` (which stores `RuleId`s in its nodes) and
//! `model` (whose `Domain` holds the rules) both build on it, so it imports neither. Pure:
//! no I/O, no tokio, no metrics.

use std::sync::Arc;

use crate::algorithm::{Algorithm, Params};

/// Index of a rule in `Domain::rules` (`model`); what a matcher node points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RuleId(pub usize);

/// A node of the tree that carries a `rate_limit`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub id: RuleId,
    /// Config path of the node, e.g. `descriptors[2].descriptors[0]`; in a domain merged
    /// from several files, after the file's stem: `users:descriptors[0]`.
    pub path: String,
    /// `rate_limit.name`, used by `replaces`, metrics and `current_limit.name`. `None` on a
    /// node with `rate_limits` (each of its limits has its own name).
    pub name: Option<String>,
    pub limit: RuleLimit,
    pub shadow_mode: bool,
    pub quota_mode: bool,
    /// `lease: true`: hot buckets of this rule may be served from leases on a Redis store
    /// (`store::lease`); `--lease-hot-keys` does the same for every rule.
    pub lease: bool,
    pub detailed_metric: bool,
    pub value_to_metric: bool,
    /// Names of the rules this one replaces when both match in one request.
    pub replaces: Vec<String>,
    /// One entry per descriptor entry on the way to this node (root first).
    pub levels: Vec<Level>,
    /// Free-form `metadata` of the node, sorted by key: shown by `/rlconfig` and, with
    /// `--response-dynamic-metadata`, answered to Envoy when the descriptor passes.
    pub metadata: Vec<(String, serde_json::Value)>,
}

impl Rule {
    /// The name shown in metrics and logs: the rule's `name`, else its config path.
    pub fn label(&self) -> &str {
        self.name.as_deref().unwrap_or(&self.path)
    }

    /// The label of one of this rule's limits in metrics, logs and `explain`: the rule's
    /// label for a `rate_limit`, `<path>/<name>` for an entry of `rate_limits`.
    pub fn limit_label(&self, limit: &Limit) -> String {
        match &limit.name {
            Some(name) => format!("{}/{}", self.path, name),
            None => self.label().to_string(),
        }
    }

    /// The rule's limits (empty for `unlimited`).
    pub fn limits(&self) -> &[Limit] {
        match &self.limit {
            RuleLimit::Limited(limits) => limits,
            RuleLimit::Unlimited => &[],
        }
    }

    /// Whether a limit of the rule has a `penalty` (its buckets are never leased: a penalty
    /// must see every charge).
    pub fn penalized(&self) -> bool {
        self.limits().iter().any(|l| l.params.penalty_us > 0)
    }
}

/// What a matched rule enforces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleLimit {
    /// Charged against one bucket per limit: one for `rate_limit`, one per entry of
    /// `rate_limits` (in file order). A descriptor passes only if every limit passes, and
    /// then all are charged; if one denies, none is.
    Limited(Vec<Limit>),
    /// `unlimited: true`: always OK, no bucket.
    Unlimited,
}

/// One limit of a rule: its numbers and what enters its bucket identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limit {
    /// `rate_limits[].name` (required and unique within the node there; part of the bucket
    /// identity). `None` for a `rate_limit`, whose name (`Rule::name`) is not.
    pub name: Option<String>,
    /// The numbers: `params.unit_us` is the whole window, `unit × multiplier`.
    pub params: Params,
    /// The unit as written.
    pub unit: Unit,
    /// `unit_multiplier` (1 when absent): the window is this many units. Part of the
    /// bucket identity when not 1.
    pub multiplier: u64,
    /// `rollout`: the share of the limit's buckets that is enforced (the others are decided
    /// and counted as in shadow mode). Not part of the bucket identity: raising it by a
    /// reload changes no bucket.
    pub rollout: Rollout,
    /// `response`: the body and headers of the 429 when this limit denies.
    pub response: Option<Arc<DenialResponse>>,
    /// `overdraft: true`: every consume is recorded, even past the limit (`Hits::Overdraw`).
    pub overdraft: bool,
}

impl Limit {
    /// A limit of one unit, as `rate_limit` without `unit_multiplier` writes.
    pub fn single(params: Params, unit: Unit) -> Limit {
        Limit {
            name: None,
            params,
            unit,
            multiplier: 1,
            rollout: Rollout::FULL,
            response: None,
            overdraft: false,
        }
    }

    /// The window in words: `second`, `5 minutes` (see [`Unit::window`]).
    pub fn window(&self) -> String {
        self.unit.window(self.multiplier)
    }

    /// `penalty` in seconds (0: none).
    pub fn penalty_seconds(&self) -> u64 {
        self.params.penalty_us / 1_000_000
    }

    /// `penalty` as an operator writes it (`90s`, `10m`, `2h`); `None` without one.
    pub fn penalty_text(&self) -> Option<String> {
        match self.penalty_seconds() {
            0 => None,
            s if s % 3_600 == 0 => Some(format!("{}h", s / 3_600)),
            s if s % 60 == 0 => Some(format!("{}m", s / 60)),
            s => Some(format!("{s}s")),
        }
    }

    /// The window in seconds (`unit × unit_multiplier`).
    pub fn window_seconds(&self) -> u64 {
        self.unit.seconds().saturating_mul(self.multiplier)
    }

    /// What GCRA calls capacity (`burst`) and the windows their limit: the requests a
    /// fresh bucket admits at once.
    pub fn capacity(&self) -> u64 {
        match self.params.algorithm {
            Algorithm::Gcra => self.params.burst,
            Algorithm::SlidingWindow | Algorithm::FixedWindow => self.params.limit,
        }
    }
}

/// `rollout: r` of a limit (0 < r ≤ 1), in millionths: which of its buckets are enforced.
///
/// A bucket is enforced when the share of its key (`bucket_share`: the first 8 bytes of
/// the SHA-256 of the bucket key, read as a fraction of 2^64, in millionths) is below r. The
/// key is the same on every instance and across restarts, so a client is in or out
/// consistently; and raising r only adds buckets (one enforced at 0.1 stays enforced at
/// 0.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rollout(u32);

impl Rollout {
    /// Every bucket enforced (the default).
    pub const FULL: Rollout = Rollout(Rollout::MILLION);
    const MILLION: u32 = 1_000_000;

    /// `r` as written (0 < r ≤ 1, at least one millionth); `None` outside that range.
    pub fn from_share(r: f64) -> Option<Rollout> {
        if !(r > 0.0 && r <= 1.0) {
            return None;
        }
        let millionths = (r * f64::from(Rollout::MILLION)).round();
        (millionths >= 1.0).then_some(Rollout(millionths as u32))
    }

    /// The share as a fraction (what the config wrote, to a millionth).
    pub fn share(self) -> f64 {
        f64::from(self.0) / f64::from(Rollout::MILLION)
    }

    /// Whether only part of the buckets are enforced.
    pub fn is_partial(self) -> bool {
        self.0 < Rollout::MILLION
    }

    /// Whether the bucket `key` is enforced.
    pub fn enforces(self, key: &str) -> bool {
        !self.is_partial() || bucket_share(key) < self.0
    }
}

/// Where a bucket key falls in [0, 1 000 000): the first 8 bytes of its SHA-256 as a
/// fraction of 2^64, in millionths. Stable across instances, restarts and releases.
pub fn bucket_share(key: &str) -> u32 {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(key.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    let fraction = u128::from(u64::from_be_bytes(first));
    ((fraction * u128::from(Rollout::MILLION)) >> 64) as u32
}

/// One level of the path that leads to a rule: the entry key, how its value enters the
/// bucket identity, and whether it may enter the metric label.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Level {
    pub key: String,
    /// `Some(pattern)` when the node is a wildcard with `share_threshold: true`: every
    /// matching value shares one bucket, identified by the pattern. `None`: the request's
    /// value is part of the bucket identity.
    pub shared_pattern: Option<String>,
    /// The node's `value` as written (an exact value or a pattern with `*`); `None` for the
    /// value-less default node.
    pub value: Option<String>,
    /// `value_to_metric: true` on this node: the request's value goes into the `rule`
    /// metric label of the rules at and below it (unless the level shares a pattern).
    pub value_to_metric: bool,
}

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

/// A limit's `response`: what the client of a request it denies gets, as the RLS answer's
/// `raw_body` and `response_headers_to_add` (Envoy sends them as the 429's body and
/// headers). Validated and bounded by `compile`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DenialResponse {
    pub body: Option<Template>,
    /// Sent as `content-type` (Envoy lets it replace its own `text/plain`).
    pub content_type: Option<String>,
    /// Lower-case names, in file order.
    pub headers: Vec<(String, Template)>,
}

/// The longest `response.body`, in bytes as written (a rendered number adds at most 20).
pub const MAX_RESPONSE_BODY: usize = 4096;
/// The most `response.headers`.
pub const MAX_RESPONSE_HEADERS: usize = 16;
/// The longest header value and `content_type`, as written.
pub const MAX_RESPONSE_VALUE: usize = 512;

/// Text with placeholders for the denying limit's numbers, and nothing else: `{limit}`
/// (`requests_per_unit`), `{window}` (the window in seconds, `unit × unit_multiplier`),
/// `{reset}` (seconds until the request would pass). Every other brace is literal text (a
/// JSON body needs no escaping); a `{word}` naming none of the three (letters, digits and
/// `_`, such as a misspelt `{limt}`) is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template(Vec<Piece>);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Limit,
    Window,
    Reset,
}

impl Template {
    /// Parses `text`; a placeholder-like `{word}` that is none of the three is an error in
    /// words.
    pub fn parse(text: &str) -> Result<Template, String> {
        let mut pieces = Vec::new();
        let mut literal = String::new();
        let mut rest = text;
        while let Some(at) = rest.find('{') {
            literal.push_str(&rest[..at]);
            let tail = &rest[at..];
            let word = tail[1..]
                .find('}')
                .map(|end| &tail[1..=end])
                .filter(|w| !w.is_empty() && w.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'));
            let Some(word) = word else {
                literal.push('{');
                rest = &tail[1..];
                continue;
            };
            let piece = match word {
                "limit" => Piece::Limit,
                "window" => Piece::Window,
                "reset" => Piece::Reset,
                other => {
                    return Err(format!(
                        "unknown placeholder {{{other}}} (expected {{limit}}, {{window}} or {{reset}})"
                    ))
                }
            };
            if !literal.is_empty() {
                pieces.push(Piece::Text(std::mem::take(&mut literal)));
            }
            pieces.push(piece);
            rest = &tail[word.len() + 2..];
        }
        literal.push_str(rest);
        if !literal.is_empty() {
            pieces.push(Piece::Text(literal));
        }
        Ok(Template(pieces))
    }

    /// The text with the denying limit's numbers in place.
    pub fn render(&self, limit: u64, window: u64, reset: u64) -> String {
        let mut out = String::new();
        for piece in &self.0 {
            match piece {
                Piece::Text(text) => out.push_str(text),
                Piece::Limit => out.push_str(&limit.to_string()),
                Piece::Window => out.push_str(&window.to_string()),
                Piece::Reset => out.push_str(&reset.to_string()),
            }
        }
        out
    }
}

/// The longest `penalty`: a day.
pub const MAX_PENALTY_SECONDS: u64 = 86_400;

/// A `penalty` as written (`30s`, `10m`, `1h`: a whole number and one of `s`, `m`, `h`) in
/// seconds, from 1 to [`MAX_PENALTY_SECONDS`]; else why not, in words for the operator.
pub fn penalty_seconds(written: &str) -> Result<u64, String> {
    let expected = "expected a whole number of seconds, minutes or hours, such as 30s, 10m or 1h";
    let split = written.len().saturating_sub(1);
    let (number, suffix) = (written.get(..split).unwrap_or(""), written.get(split..).unwrap_or(""));
    let scale = match suffix {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        _ => return Err(expected.to_owned()),
    };
    if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
        return Err(expected.to_owned());
    }
    match number.parse::<u64>().ok().and_then(|n| n.checked_mul(scale)) {
        Some(0) => Err("must be at least 1s (leave penalty out for none)".to_owned()),
        Some(seconds) if seconds <= MAX_PENALTY_SECONDS => Ok(seconds),
        _ => Err("longer than a day, the longest penalty (24h)".to_owned()),
    }
}

/// Convenience for building limit parameters.
pub fn params(algorithm: Algorithm, limit: u64, unit: Unit, burst: Option<u64>) -> Params {
    params_window(algorithm, limit, unit, 1, burst)
}

/// Limit parameters for a window of `multiplier` units (`unit_multiplier`).
pub fn params_window(
    algorithm: Algorithm,
    limit: u64,
    unit: Unit,
    multiplier: u64,
    burst: Option<u64>,
) -> Params {
    Params {
        algorithm,
        limit,
        unit_us: unit.micros().saturating_mul(multiplier),
        burst: burst.unwrap_or(limit),
        penalty_us: 0,
    }
}
