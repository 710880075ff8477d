//! The compiled, immutable policy model: what the request path sees.
//!
//! Built only by `compile` from validated YAML; never mutated after construction (a reload
//! builds a whole new `Snapshot`). A `Domain` holds its rules (`rule`, re-exported here) and
//! its descriptor tree (`matcher`); `Domain::lookup` turns the node the tree walk reaches
//! into an answer. Pure: no I/O, no tokio, no metrics.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::SystemTime;

use crate::algorithm::Algorithm;

use super::matcher::Tree;
pub use super::rule::{params, params_window, Level, Limit, Rule, RuleId, RuleLimit, Unit};

/// One whole, consistent configuration: every domain, plus identity for operators.
#[derive(Debug)]
pub struct Snapshot {
    pub domains: HashMap<String, Domain>,
    /// Content hash of every loaded file (hex, 16 chars): shown in logs, metrics, /rlconfig.
    pub version: String,
    pub loaded_at: SystemTime,
    /// The files the snapshot was built from, in load order.
    pub files: Vec<PathBuf>,
    /// `--default-algorithm` the snapshot was compiled with (shown in `/rlconfig`).
    pub default_algorithm: Algorithm,
}

impl Snapshot {
    /// The domain of that name, if configured.
    pub fn domain(&self, name: &str) -> Option<&Domain> {
        self.domains.get(name)
    }

    /// Whether any domain is `consistency: approximate`.
    pub fn has_approximate(&self) -> bool {
        self.domains.values().any(|d| d.consistency == Consistency::Approximate)
    }

    /// Number of rules (limited, unlimited or allow nodes with a rate_limit) over all domains.
    pub fn rule_count(&self) -> usize {
        self.domains.values().map(|d| d.rules.len()).sum()
    }
}

/// What a domain answers for descriptors whose store call failed or timed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FailureMode {
    /// Answer OK (the default, as Envoy's own filter does when the service fails).
    #[default]
    Open,
    /// Answer OVER_LIMIT with the limit and 0 remaining.
    Closed,
    /// Limit with the same rules in this instance's memory until the store is back
    /// (per instance, so looser than the global limit by the number of instances).
    Local,
}

impl FailureMode {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureMode::Open => "open",
            FailureMode::Closed => "closed",
            FailureMode::Local => "local",
        }
    }
}

/// How a domain charges a request whose descriptors are not all within their limits
/// (the domain's `charge` field; `--stop-charging-when-over-limit` sets the default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ChargeMode {
    /// Each descriptor is charged on its own (envoyproxy/ratelimit's behaviour): a denied
    /// descriptor charges nothing, the others are charged.
    #[default]
    PerDescriptor,
    /// A request with any descriptor denied charges none of them (shadow and quota rules
    /// excepted: they are charged per descriptor, as they never deny a request alone).
    AllOrNothing,
}

impl ChargeMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ChargeMode::PerDescriptor => "per_descriptor",
            ChargeMode::AllOrNothing => "all_or_nothing",
        }
    }

    /// Parses the YAML `charge` value.
    pub fn parse(s: &str) -> Option<ChargeMode> {
        match s {
            "per_descriptor" => Some(ChargeMode::PerDescriptor),
            "all_or_nothing" => Some(ChargeMode::AllOrNothing),
            _ => None,
        }
    }
}

/// Which part of a bucket key Redis Cluster hashes (the domain's `hash_tag` field).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HashTag {
    /// The descriptor's own identity: buckets spread over the cluster; the limits of one
    /// descriptor (`rate_limits`) share a slot.
    #[default]
    Descriptor,
    /// `hash_tag: domain`: every bucket of the domain on one slot (one master), so an
    /// `all_or_nothing` request is one script call; that master carries the whole domain.
    Domain,
}

impl HashTag {
    pub fn as_str(self) -> &'static str {
        match self {
            HashTag::Descriptor => "descriptor",
            HashTag::Domain => "domain",
        }
    }
}

/// How a domain's buckets are decided (the domain's `consistency` field).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Consistency {
    /// Every charge is one atomic store call: the global limit holds exactly (today's
    /// behaviour).
    #[default]
    Exact,
    /// `consistency: approximate`: decisions are made locally from an estimate synced to
    /// Redis in the background, with no store call on the request path and a stated
    /// over-admission. Serves `sliding_window` and `fixed_window` limits only, without
    /// leases (checked by `compile`).
    Approximate,
}

impl Consistency {
    pub fn as_str(self) -> &'static str {
        match self {
            Consistency::Exact => "exact",
            Consistency::Approximate => "approximate",
        }
    }

    /// Parses the YAML `consistency` value (lower case; the caller folds the case).
    pub fn parse(s: &str) -> Option<Consistency> {
        match s {
            "exact" => Some(Consistency::Exact),
            "approximate" => Some(Consistency::Approximate),
            _ => None,
        }
    }

    /// Whether this mode can serve limits of `algorithm`.
    pub fn serves(self, algorithm: Algorithm) -> bool {
        match self {
            Consistency::Exact => true,
            Consistency::Approximate => {
                matches!(algorithm, Algorithm::SlidingWindow | Algorithm::FixedWindow)
            }
        }
    }
}

/// One domain's compiled policy.
#[derive(Debug)]
pub struct Domain {
    pub name: String,
    pub failure_mode: FailureMode,
    /// `charge`: per descriptor (default) or all or nothing.
    pub charge: ChargeMode,
    /// `hash_tag`: what Redis Cluster hashes in this domain's bucket keys.
    pub hash_tag: HashTag,
    /// `consistency`: exact (default) or approximate (local estimates synced in the
    /// background; every limit of the domain is then a sliding or fixed window).
    pub consistency: Consistency,
    /// `reservations`: descriptors whose last entry has its key name a reservation
    /// (`algorithm::reservation`); `None`: no descriptor does.
    pub reservations: Option<Reservations>,
    /// The file this domain came from (the first of `files`).
    pub file: PathBuf,
    /// Every file this domain came from, in file-name order: one, or several merged with
    /// `--merge-domains`.
    pub files: Vec<PathBuf>,
    /// `--default-algorithm`: the algorithm of a request's own `limit` override (limits
    /// in the files have theirs resolved already).
    pub default_algorithm: Algorithm,
    /// Every node that carries a `rate_limit` (or `unlimited`), in file order.
    /// `RuleId` indexes this vector.
    pub rules: Vec<Rule>,
    pub(crate) tree: Tree,
}

/// A domain's `reservations`, compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservations {
    /// The entry key that names a reservation (the descriptor's last entry).
    pub key: String,
    /// How long a reservation lives unsettled (µs): then it stays charged.
    pub ttl_us: u64,
}

impl Domain {
    /// Matches one request descriptor, given as its `(key, value)` entries in order, as
    /// bytes (`&[u8]` from a request, or `&str`).
    ///
    /// Walks one level per entry (exact value, then first matching wildcard in file order,
    /// then the value-less default; no backtracking). The answer is decided by the node the
    /// last entry reaches: its rule, an explicit allow (no rule, no children) or `NoMatch`
    /// (no node, children but no rule, or a request deeper than the tree). No entries:
    /// `NoMatch`. Costs O(entries) hash lookups and allocates nothing.
    pub fn lookup<I, K, V>(&self, entries: I) -> Lookup<'_>
    where
        I: IntoIterator<Item = (K, V)>,
        I::IntoIter: ExactSizeIterator,
        K: AsRef<[u8]>,
        V: AsRef<[u8]>,
    {
        let Some(node) = self.tree.reach(entries.into_iter()) else {
            return Lookup::NoMatch;
        };
        match node.rule.and_then(|id| self.rules.get(id.0)) {
            Some(rule) => Lookup::Rule(rule),
            None if node.children.is_empty() => Lookup::Allow,
            None => Lookup::NoMatch,
        }
    }
}

/// What a descriptor's entries reach in a domain's tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup<'a> {
    /// No node for these entries (or the request is deeper than the tree): OK, no limit.
    NoMatch,
    /// The last entry reached a node with neither a limit nor children: explicit allow.
    Allow,
    /// The last entry reached a node with a `rate_limit`.
    Rule(&'a Rule),
}
