//! A compiled rule: what one descriptor node enforces (`Rule`, its `Limit`s, the `Level`s
//! on the way to it, the `Unit` of a window) and the id the matcher's tree points at it by.
//!
//! The bottom of the compiled model: `matcher` (which stores `RuleId`s in its nodes) and
//! `model` (whose `Domain` holds the rules) both build on it, so it imports neither. Pure:
//! no I/O, no tokio, no metrics.
//!
//! This file holds the rule and the path to it; a limit's parts live beside it, each
//! re-exported here so `config::rule::X` names them all: `limit` (a `Limit` and the
//! helpers that build its `Params`), `calendar` (the periods of a calendar limit), `unit` (the window's unit), `rollout` (the share of
//! buckets enforced), `response` (the body and headers of a denial). They import one
//! another, never this file.

mod calendar;
mod limit;
mod response;
mod rollout;
mod unit;

pub use self::calendar::{Calendar, CalendarError, PeriodView};
pub use self::limit::{params, params_window, penalty_seconds, Limit, MAX_PENALTY_SECONDS};
pub use self::response::{
    DenialResponse, Template, MAX_RESPONSE_BODY, MAX_RESPONSE_HEADERS, MAX_RESPONSE_VALUE,
};
pub use self::rollout::{bucket_share, Rollout};
pub use self::unit::Unit;

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
