//! `tollgate explain`: which rule each descriptor of a request matches, and why.
//!
//! `explain` walks a domain's compiled tree entry by entry with the matcher's own choices
//! (`Branch::explain_step`: exact value, first matching wildcard in file order, value-less
//! default), says why a walk stops (unknown key, unmatched value, deeper than the tree, a
//! node without a limit), and then runs the request path's own `plan` on the descriptors so
//! that `replaces` and the bucket key are exactly what the server would do. Pure: takes a
//! `Snapshot`, returns an `Explanation` whose `Display` is the command's output; only
//! `explain_path` reads files. It never charges anything and knows nothing of stores.
//!
//! Keys and values are bytes, as on the request path: `--descriptor` takes `\xNN` for a
//! byte, and the output shows values in `escape`'s form (the one logs and metric labels
//! use), so a value copied from either can be explained as it is.

use std::path::Path;
use std::str::FromStr;

use crate::config::matcher::Step;
use crate::config::{ConfigErrors, Domain, Rule, Snapshot};
use crate::service::plan::{self, Plan};
use crate::service::wire::RateLimitDescriptor;
use crate::telemetry::escape::unescape;

/// One `--descriptor k=v[,k=v…]` argument: its entries in order, as bytes. A `\` escapes
/// the next character, so values may hold `,` (`\,`); `\xNN` is the byte `NN` (a value
/// that is not UTF-8, as `escape` shows it); `=` in values needs no escape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescriptorArg(pub Vec<(Vec<u8>, Vec<u8>)>);

impl FromStr for DescriptorArg {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut entries = Vec::new();
        for part in split_unescaped(s, ',') {
            // The first unescaped `=` ends the key; the value may hold more.
            let Some(at) = find_unescaped(part, '=') else {
                return Err(format!("{part:?} is not key=value (entries are separated by `,`)"));
            };
            let (key, value) = (unescape(&part[..at])?, unescape(&part[at + 1..])?);
            if key.is_empty() {
                return Err(format!("{part:?} has an empty key"));
            }
            entries.push((key, value));
        }
        Ok(DescriptorArg(entries))
    }
}

/// Splits on `separator` where it is not escaped by a `\`, keeping the escapes.
fn split_unescaped(s: &str, separator: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut rest = s;
    while let Some(at) = find_unescaped(rest, separator) {
        parts.push(&rest[..at]);
        rest = &rest[at + separator.len_utf8()..];
    }
    parts.push(rest);
    parts
}

/// The byte offset of the first `separator` not escaped by a `\`.
fn find_unescaped(s: &str, separator: char) -> Option<usize> {
    let mut chars = s.char_indices();
    while let Some((at, c)) = chars.next() {
        if c == '\\' {
            chars.next();
        } else if c == separator {
            return Some(at);
        }
    }
    None
}

/// How one entry chose its node, or why it found none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum How {
    Exact,
    Wildcard { pattern: String, position: usize, wildcards: usize },
    Default { exact: usize, wildcards: Vec<String> },
    NoKey { keys: Vec<String> },
    NoValue { exact: usize, wildcards: Vec<String> },
}

/// One entry of the walk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Walked<'a> {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub how: How,
    /// The limit of a node passed through (not the last): it does not apply.
    pub passed_rule: Option<&'a Rule>,
}

/// What the walk reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict<'a> {
    /// An entry found no node (see its `How`).
    Missed,
    /// The node of entry `matched` has no nested descriptors, and the descriptor goes on.
    DeeperThanTree {
        matched: usize,
    },
    /// The last entry reached a node with nested descriptors but no limit.
    InnerNode,
    /// The last entry reached a node with neither a limit nor nested descriptors.
    Allow,
    Rule(&'a Rule),
}

/// What the server would do with the descriptor, within the whole request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied<'a> {
    /// OK, nothing charged (no match, explicit allow).
    Nothing,
    Unlimited,
    /// Charged to this bucket (key with an empty `--redis-key-prefix`); with `rate_limits`,
    /// `others` holds every limit charged with its bucket (`key` is the first's).
    Charged {
        key: String,
        others: Vec<(String, String)>,
    },
    /// Its rule's name is in `replaces` of the rule of descriptor `descriptor` (0-based).
    ReplacedBy {
        rule: &'a Rule,
        descriptor: usize,
    },
}

/// One descriptor explained.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescriptorReport<'a> {
    pub entries: Vec<(Vec<u8>, Vec<u8>)>,
    pub walk: Vec<Walked<'a>>,
    pub verdict: Verdict<'a>,
    pub applied: Applied<'a>,
}

/// A whole request explained; `Display` renders the command's text.
#[derive(Debug, Clone)]
pub struct Explanation<'a> {
    pub domain_name: String,
    /// `None`: the domain is not configured (every descriptor is OK, nothing charged).
    pub domain: Option<&'a Domain>,
    pub version: String,
    /// Configured domains, sorted (shown when `domain` is unknown).
    pub known_domains: Vec<String>,
    pub descriptors: Vec<DescriptorReport<'a>>,
}

/// Explains how `snapshot` answers a request for `domain` with these descriptors.
pub fn explain<'a>(snapshot: &'a Snapshot, domain: &str, descriptors: &[DescriptorArg]) -> Explanation<'a> {
    let mut known_domains: Vec<String> = snapshot.domains.keys().cloned().collect();
    known_domains.sort();
    let found = snapshot.domain(domain);
    let reports = match found {
        None => descriptors
            .iter()
            .map(|d| DescriptorReport {
                entries: d.0.clone(),
                walk: Vec::new(),
                verdict: Verdict::Missed,
                applied: Applied::Nothing,
            })
            .collect(),
        Some(found) => explain_domain(found, descriptors),
    };
    Explanation {
        domain_name: domain.to_string(),
        domain: found,
        version: snapshot.version.clone(),
        known_domains,
        descriptors: reports,
    }
}

/// Loads the config at `path` like `check` (with the same `options` as `serve`) and
/// explains: the text of `tollgate explain`.
pub fn explain_path(
    path: &Path,
    options: &crate::config::LoadOptions,
    domain: &str,
    descriptors: &[DescriptorArg],
) -> Result<String, ConfigErrors> {
    let snapshot = crate::config::load_path_with(path, options)?;
    Ok(explain(&snapshot, domain, descriptors).to_string())
}

fn explain_domain<'a>(domain: &'a Domain, descriptors: &[DescriptorArg]) -> Vec<DescriptorReport<'a>> {
    let walks: Vec<(Vec<Walked<'a>>, Verdict<'a>)> = descriptors.iter().map(|d| walk(domain, &d.0)).collect();
    let verdicts: Vec<Verdict<'a>> = walks.iter().map(|(_, verdict)| *verdict).collect();
    let applied = applied(domain, descriptors, &verdicts);
    walks
        .into_iter()
        .zip(applied)
        .zip(descriptors)
        .map(|(((walk, verdict), applied), d)| DescriptorReport {
            entries: d.0.clone(),
            walk,
            verdict,
            applied,
        })
        .collect()
}

/// The walk of `Domain::lookup`, one `Walked` per entry reached.
fn walk<'a>(domain: &'a Domain, entries: &[(Vec<u8>, Vec<u8>)]) -> (Vec<Walked<'a>>, Verdict<'a>) {
    let mut branch = &domain.tree.root;
    let mut walked = Vec::with_capacity(entries.len());
    for (depth, (key, value)) in entries.iter().enumerate() {
        let (how, node) = match branch.explain_step(key, value) {
            Step::Exact(node) => (How::Exact, Some(node)),
            Step::Wildcard { node, pattern, position, wildcards } => {
                (How::Wildcard { pattern, position, wildcards }, Some(node))
            }
            Step::Default { node, exact, wildcards } => (How::Default { exact, wildcards }, Some(node)),
            Step::NoKey { keys } => (How::NoKey { keys }, None),
            Step::NoValue { exact, wildcards } => (How::NoValue { exact, wildcards }, None),
        };
        let last = depth + 1 == entries.len();
        let rule = node.and_then(|n| n.rule).and_then(|id| domain.rules.get(id.0));
        let passed_rule = if last { None } else { rule };
        walked.push(Walked { key: key.clone(), value: value.clone(), how, passed_rule });
        let Some(node) = node else {
            return (walked, Verdict::Missed);
        };
        if last {
            let verdict = match rule {
                Some(rule) => Verdict::Rule(rule),
                None if node.children.is_empty() => Verdict::Allow,
                None => Verdict::InnerNode,
            };
            return (walked, verdict);
        }
        if node.children.is_empty() {
            return (walked, Verdict::DeeperThanTree { matched: depth + 1 });
        }
        branch = &node.children;
    }
    (walked, Verdict::Missed)
}

/// Runs the request path's `plan` on the descriptors: replaces and bucket keys as served.
fn applied<'a>(
    domain: &'a Domain,
    descriptors: &[DescriptorArg],
    verdicts: &[Verdict<'a>],
) -> Vec<Applied<'a>> {
    let request: Vec<RateLimitDescriptor> =
        descriptors.iter().map(|d| RateLimitDescriptor::from_entries(d.0.iter().cloned())).collect();
    let (plans, charges, _) = plan::plan(domain, &request, 0, "");
    plans
        .iter()
        .zip(verdicts)
        .map(|(plan, verdict)| match (plan, verdict) {
            (Plan::Limited(limit), _) => {
                let keys: Vec<(Option<String>, String)> = limit
                    .limits()
                    .zip(&charges[limit.charges.clone()])
                    .map(|(one, charge)| (one.name.clone(), charge.key.clone()))
                    .collect();
                match keys.first() {
                    None => Applied::Nothing,
                    Some((None, key)) => Applied::Charged { key: key.clone(), others: Vec::new() },
                    Some((Some(_), key)) => Applied::Charged {
                        key: key.clone(),
                        others: keys
                            .iter()
                            .map(|(name, key)| (name.clone().unwrap_or_default(), key.clone()))
                            .collect(),
                    },
                }
            }
            (Plan::Unlimited(_), _) => Applied::Unlimited,
            (Plan::Pass, Verdict::Rule(rule)) => replaced_by(rule, verdicts),
            (Plan::Pass, _) => Applied::Nothing,
        })
        .collect()
}

fn replaced_by<'a>(rule: &Rule, verdicts: &[Verdict<'a>]) -> Applied<'a> {
    let name = rule.name.as_deref().unwrap_or_default();
    verdicts
        .iter()
        .enumerate()
        .find_map(|(descriptor, verdict)| match verdict {
            Verdict::Rule(other) if other.replaces.iter().any(|r| r == name) => {
                Some(Applied::ReplacedBy { rule: other, descriptor })
            }
            _ => None,
        })
        .unwrap_or(Applied::Nothing)
}

mod render;

#[cfg(test)]
mod tests;
