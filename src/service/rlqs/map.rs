//! A bucket id as a policy descriptor: which descriptor of the RLS policy an RLQS bucket is,
//! and what the policy answers for it.
//!
//! A bucket id is a map, a descriptor an ordered list, so the order comes from the policy:
//! - one entry `{k: v}` is the descriptor `[(k, v)]`;
//! - several entries take the key order of the first rule of the domain, in file order
//!   (`Domain::rules`), whose path from the root has exactly the id's keys (each once).
//!   The typical Envoy id `{name: user, user: alice}` is then `key: name, value: user →
//!   key: user` (descriptor `[(name, user), (user, alice)]`). No such rule: no policy.
//!   Paths that end on an explicit allow (no `rate_limit`, no children) carry no rule and
//!   are not searched: an id that would reach one gets no policy, which also allows.
//!
//! The descriptor is then matched by `Domain::lookup`, the RLS path's own matcher (exact,
//! wildcard in file order, default; no backtracking), so an RLQS bucket and the RLS
//! descriptor with the same entries reach the same rule. Pure: no I/O, no store.

use super::wire::BucketKey;
use crate::config::{Domain, Lookup, Snapshot};

/// What a bucket id is in the policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mapping<'c, 'k> {
    /// The report's domain is not configured.
    UnknownDomain,
    /// The id's keys are the keys of no rule's path: no policy applies.
    NoPath,
    /// The id as a descriptor, in the policy's key order, and what the matcher answers for
    /// it (a rule, an explicit allow or no match).
    Descriptor { entries: Vec<(&'k str, &'k str)>, lookup: Lookup<'c> },
}

/// Maps the bucket `key` of a report for `domain` onto the policy of `snapshot` (see the
/// module doc). Allocates the descriptor only.
pub fn map<'c, 'k>(snapshot: &'c Snapshot, domain: &str, key: &'k BucketKey) -> Mapping<'c, 'k> {
    let Some(domain) = snapshot.domain(domain) else {
        return Mapping::UnknownDomain;
    };
    match descriptor(domain, key) {
        Some(entries) => {
            let lookup = domain.lookup(entries.iter().copied());
            Mapping::Descriptor { entries, lookup }
        }
        None => Mapping::NoPath,
    }
}

/// The id's entries in the key order of the first rule path with exactly its keys (a
/// single entry as it is); `None` when no rule path has them.
fn descriptor<'k>(domain: &Domain, key: &'k BucketKey) -> Option<Vec<(&'k str, &'k str)>> {
    if key.entries().len() == 1 {
        return Some(key.entries().collect());
    }
    // The id's entries are sorted by key, each key once: a binary search finds one.
    let entries: Vec<(&str, &str)> = key.entries().collect();
    let index = |k: &str| entries.binary_search_by(|(e, _)| (*e).cmp(k)).ok();
    domain.rules.iter().find_map(|rule| {
        if rule.levels.len() != entries.len() {
            return None;
        }
        // Same length, every level's key in the id, none twice: the same set of keys.
        let mut used = vec![false; entries.len()];
        let mut ordered = Vec::with_capacity(entries.len());
        for level in &rule.levels {
            let i = index(&level.key)?;
            if std::mem::replace(&mut used[i], true) {
                return None;
            }
            ordered.push(entries[i]);
        }
        Some(ordered)
    })
}

#[cfg(test)]
mod tests;
