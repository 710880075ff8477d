//! The compiled descriptor tree and the walk that matches a request descriptor against it.
//!
//! Each level is a hash map from entry key to that key's nodes, which are themselves a hash
//! map by exact value, an ordered list of wildcard patterns and an optional value-less
//! default. A lookup costs O(entries) hash probes whatever the number of rules; wildcards
//! are the only linear part (per key, per level). Lookups allocate nothing.
//!
//! Request keys and values are bytes (Envoy forwards header bytes that are not UTF-8), so
//! the maps are keyed by bytes and patterns match bytes: a value that is not UTF-8 equals
//! no configured (UTF-8) value, but a wildcard matches it like any other (`/api/*` takes
//! `/api/\xff`; otherwise one such byte would slip past a wildcard rule), and so does the
//! value-less default.
//!
//! This module owns matching only: it is built by `compile` (which has already rejected
//! duplicates and invalid values) and must not validate, do I/O or know about stores. Its
//! nodes name rules by `RuleId` (`rule`); what a reached node answers, and the rules
//! themselves, are `model`'s (`Domain::lookup`), which builds on this tree.

use std::collections::HashMap;

use super::rule::RuleId;

/// A domain's descriptor tree: the top-level `descriptors`.
#[derive(Debug, Default)]
pub(crate) struct Tree {
    pub(crate) root: Branch,
}

/// One `descriptors` list: its nodes grouped by key.
#[derive(Debug, Default)]
pub(crate) struct Branch {
    keys: HashMap<Box<[u8]>, Candidates>,
}

/// The nodes of one key at one level, in match precedence.
#[derive(Debug, Default)]
struct Candidates {
    exact: HashMap<Box<[u8]>, Node>,
    /// In file order: the first matching pattern wins.
    wildcards: Vec<(Pattern, Node)>,
    default: Option<Node>,
}

/// One descriptor node.
#[derive(Debug, Default)]
pub(crate) struct Node {
    /// The rule of this node's `rate_limit`, if it has one.
    pub(crate) rule: Option<RuleId>,
    /// Its nested `descriptors` (empty: a leaf).
    pub(crate) children: Branch,
}

/// A value with `*` wildcards, pre-split on `*` so matching allocates nothing.
#[derive(Debug)]
struct Pattern {
    /// At least two parts; `*` sits between consecutive parts.
    parts: Vec<String>,
    /// Sum of the parts' lengths: a shorter value cannot match.
    fixed_len: usize,
}

impl Pattern {
    fn new(value: &str) -> Pattern {
        let parts: Vec<String> = value.split('*').map(str::to_owned).collect();
        let fixed_len = parts.iter().map(String::len).sum();
        Pattern { parts, fixed_len }
    }

    /// Each `*` matches any, possibly empty, run of bytes. Leftmost-first placement of the
    /// middle parts is enough for patterns whose only metacharacter is `*`.
    fn matches(&self, value: &[u8]) -> bool {
        let (Some((first, rest)), Some(last)) = (self.parts.split_first(), self.parts.last()) else {
            return false;
        };
        if value.len() < self.fixed_len || !value.starts_with(first.as_bytes()) {
            return false;
        }
        if !value.ends_with(last.as_bytes()) {
            return false;
        }
        // fixed_len guarantees first and last do not overlap.
        let mut middle = &value[first.len()..value.len() - last.len()];
        for part in &rest[..rest.len().saturating_sub(1)] {
            match memchr::memmem::find(middle, part.as_bytes()) {
                Some(at) => middle = &middle[at + part.len()..],
                None => return false,
            }
        }
        true
    }
}

/// Whether a configured value is a wildcard pattern.
pub(crate) fn is_wildcard(value: &str) -> bool {
    value.contains('*')
}

impl Branch {
    /// Adds a node for `key` (and `value`, `None` for the default node). Insertion order is
    /// file order, which decides between wildcards. `compile` rejects duplicates first; a
    /// duplicate reaching here is ignored (the first node stays).
    pub(crate) fn insert(&mut self, key: &str, value: Option<&str>, node: Node) {
        let candidates = self.keys.entry(key.as_bytes().into()).or_default();
        match value {
            None => {
                candidates.default.get_or_insert(node);
            }
            Some(v) if is_wildcard(v) => candidates.wildcards.push((Pattern::new(v), node)),
            Some(v) => {
                candidates.exact.entry(v.as_bytes().into()).or_insert(node);
            }
        }
    }

    /// True when the branch has no node (a leaf's children).
    pub(crate) fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The node one entry reaches: exact value, then the first matching wildcard, then the
    /// default. No backtracking: the caller commits to the node returned.
    fn step(&self, key: &[u8], value: &[u8]) -> Option<&Node> {
        let candidates = self.keys.get(key)?;
        candidates
            .exact
            .get(value)
            .or_else(|| {
                candidates.wildcards.iter().find(|(pattern, _)| pattern.matches(value)).map(|(_, node)| node)
            })
            .or(candidates.default.as_ref())
    }
}

/// How one entry chose its node (or why it found none), for `explain`, which must show the
/// reasoning of `Branch::step` step by step. Built by `Branch::explain_step`.
#[derive(Debug)]
pub(crate) enum Step<'b> {
    /// The value is one of the key's exact values.
    Exact(&'b Node),
    /// The first wildcard, in file order, that matches: `position` (1-based) of `wildcards`.
    Wildcard { node: &'b Node, pattern: String, position: usize, wildcards: usize },
    /// No exact value, no wildcard matched: the key's value-less node.
    Default { node: &'b Node, exact: usize, wildcards: Vec<String> },
    /// The key has no node at this level; `keys` are the keys that do (sorted).
    NoKey { keys: Vec<String> },
    /// The key is here, but no exact value or wildcard matches and it has no default.
    NoValue { exact: usize, wildcards: Vec<String> },
}

impl Branch {
    /// The same choice as `step`, with its reasons. Allocates; not for the request path.
    pub(crate) fn explain_step(&self, key: &[u8], value: &[u8]) -> Step<'_> {
        let Some(candidates) = self.keys.get(key) else {
            // Configured keys are UTF-8: the conversion is lossless.
            let mut keys: Vec<String> =
                self.keys.keys().map(|k| String::from_utf8_lossy(k).into_owned()).collect();
            keys.sort();
            return Step::NoKey { keys };
        };
        if let Some(node) = candidates.exact.get(value) {
            return Step::Exact(node);
        }
        let wildcards = candidates.wildcards.len();
        if let Some((index, (pattern, node))) =
            candidates.wildcards.iter().enumerate().find(|(_, (pattern, _))| pattern.matches(value))
        {
            return Step::Wildcard { node, pattern: pattern.parts.join("*"), position: index + 1, wildcards };
        }
        let patterns = candidates.wildcards.iter().map(|(pattern, _)| pattern.parts.join("*")).collect();
        match &candidates.default {
            Some(node) => Step::Default { node, exact: candidates.exact.len(), wildcards: patterns },
            None => Step::NoValue { exact: candidates.exact.len(), wildcards: patterns },
        }
    }
}

impl Tree {
    /// The node the last of `entries` reaches, walking one level per entry (`Branch::step`:
    /// no backtracking). `None` when an entry finds no node, or with no entries. What that
    /// node answers (its rule, an allow) is `Domain::lookup`'s. Allocates nothing.
    pub(crate) fn reach<I, K, V>(&self, entries: I) -> Option<&Node>
    where
        I: ExactSizeIterator<Item = (K, V)>,
        K: AsRef<[u8]>,
        V: AsRef<[u8]>,
    {
        let last = entries.len().saturating_sub(1);
        let mut branch = &self.root;
        for (depth, (key, value)) in entries.enumerate() {
            let node = branch.step(key.as_ref(), value.as_ref())?;
            if depth == last {
                return Some(node);
            }
            branch = &node.children;
        }
        None
    }
}

#[cfg(test)]
mod pattern_tests {
    use super::Pattern;

    fn m(pattern: &str, value: &str) -> bool {
        Pattern::new(pattern).matches(value.as_bytes())
    }

    #[test]
    fn star_matches_bytes_that_are_not_utf8() {
        let p = |pattern: &str, value: &[u8]| Pattern::new(pattern).matches(value);
        assert!(p("/api/*", b"/api/\xff"));
        assert!(p("*", b"\xff\xfe"));
        assert!(p("a*ä*z", b"a\xff\xc3\xa4\xfez"), "a UTF-8 part found among other bytes");
        assert!(!p("/api/*", b"/ap\xff/x"));
        // A part is matched as whole bytes, never as a prefix of a longer character.
        assert!(!p("*ä", &"ä".as_bytes()[..1]));
    }

    #[test]
    fn star_anywhere() {
        assert!(m("files/*", "files/a.pdf"));
        assert!(m("files/*", "files/"));
        assert!(!m("files/*", "file"));
        assert!(m("*.pdf", "x.pdf"));
        assert!(!m("*.pdf", "x.pdfx"));
        assert!(m("/api/*/action", "/api/123/action"));
        assert!(!m("/api/*/action", "/api/123/other"));
        assert!(m("/api/*/resource/*/action", "/api/v1/resource/9/action"));
        assert!(!m("/api/*/resource/*/action", "/api/v1/resourc/9/action"));
        assert!(m("*", ""));
        assert!(m("**", "anything"));
        assert!(m("a*b*c", "abc"));
        assert!(m("a*b*c", "aXbYbZc"));
        assert!(!m("a*b*c", "aXcYb"));
    }

    #[test]
    fn prefix_and_suffix_do_not_overlap() {
        assert!(!m("ab*ba", "aba"));
        assert!(m("ab*ba", "abba"));
        assert!(!m("a*a", "a"));
    }
}
