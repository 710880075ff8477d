//! The store's vocabulary, below everything else in `store/`: what a charge is, how the
//! charges of a batch are grouped, the answer of a member the store did not look at, and
//! why a charge got no decision. Every store, guard and topology speaks it; it knows
//! nothing of any of them.

use std::ops::Range;

use crate::algorithm::reservation::Phase;
use crate::algorithm::{Decision, Hits, Params};

/// One bucket to charge: built by the service from a matched rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Charge {
    /// The bucket key (see `key`), unique per bucket identity.
    pub key: String,
    pub params: Params,
    pub hits: Hits,
}

/// Which charges of a batch stand or fall together. A group is a run of consecutive
/// charges: they are decided at one instant, in order (a key met twice sees the first
/// charge), and either every one is applied or — when any of them is denied — none is.
/// The default puts every charge in a group of its own (each decided alone, as before
/// groups existed).
///
/// Answers of a denied group: each denied member answers its denial; every other member
/// answers `allowed` with the numbers of its bucket as it is (nothing was charged), or
/// [`NOT_EVALUATED`] when the store did not look at it (the over-limit cache denied the
/// group without asking Redis).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Groups {
    /// The exclusive end of each group, increasing; empty: every charge alone.
    ends: Vec<usize>,
    /// Each group is a coalesced batch (see [`Groups::coalesced`]), not a joint group.
    coalesced: bool,
}

impl Groups {
    /// Every charge in a group of its own.
    pub fn each() -> Groups {
        Groups::default()
    }

    /// Groups ending (exclusive) at each of `ends`, which must increase; the last must be
    /// the batch's length. Groups of one may be given or left implicit.
    pub fn from_ends(ends: Vec<usize>) -> Groups {
        debug_assert!(ends.windows(2).all(|w| w[0] < w[1]), "group ends must increase");
        if ends.iter().enumerate().all(|(i, &end)| end == i + 1) {
            return Groups::each();
        }
        Groups { ends, coalesced: false }
    }

    /// A coalesced batch (`coalesce`): each group, ending (exclusive) at each of `ends`, is
    /// a run of *independent* charges of one bucket sent as one script call (`joint.lua`'s
    /// `each` mode): each is applied if it fits, in order, and a denial vetoes no other.
    /// Never built for requests: only the coalescer sends these.
    pub fn coalesced(ends: Vec<usize>) -> Groups {
        debug_assert!(ends.windows(2).all(|w| w[0] < w[1]), "group ends must increase");
        Groups { ends, coalesced: true }
    }

    /// Whether the groups are coalesced batches (independent members), not joint groups.
    pub fn is_coalesced(&self) -> bool {
        self.coalesced
    }

    /// Whether every charge is alone (no group of two or more).
    pub fn is_each(&self) -> bool {
        self.ends.is_empty()
    }

    /// The groups of a batch of `len` charges, as ranges, in order.
    pub fn ranges(&self, len: usize) -> impl Iterator<Item = Range<usize>> + '_ {
        let explicit = !self.ends.is_empty();
        let mut start = 0;
        let mut ends = self.ends.iter().copied();
        std::iter::from_fn(move || {
            if start >= len {
                return None;
            }
            let end = if explicit { ends.next().unwrap_or(len).min(len) } else { start + 1 };
            let range = start..end.max(start + 1);
            start = range.end;
            Some(range)
        })
    }
}

/// The answer of a member of a denied group that the store did not look at (see
/// [`Groups`]): allowed, nothing charged, numbers unknown. `remaining` is past anything an
/// algorithm answers ([`crate::algorithm::MAX_VALUE`]), so it cannot be mistaken for one.
pub const NOT_EVALUATED: Decision = Decision { allowed: true, remaining: u64::MAX, reset_us: 0 };

/// A call naming a reservation (`reservations:` in a domain): the charges of one
/// descriptor's limits (a group, on one slot) and the reservation they reserve or settle
/// (`algorithm::reservation`). Never coalesced, leased or answered from the over-limit
/// cache: every such call is one script call (Redis) or one locked decision (memory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    /// The reservation's id as stored: the client's value keyed as a bucket key's part
    /// would be (`key`), never raw when it should not be.
    pub id: String,
    /// How long a record lives (µs): a reservation not settled by then stays charged.
    pub ttl_us: u64,
}

/// The answers of a call naming a reservation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reserved {
    /// One per charge of the group, in order.
    pub decisions: Vec<Decision>,
    /// What the call did: reserved, refused, settled, or plain.
    pub phase: Phase,
    /// Reservations beside the same bucket the call found expired still held (never
    /// settled: they stay charged).
    pub expired: u64,
}

/// Where the records of reservations on the bucket `key` live (the first bucket of the
/// group): a hash (id → record) and a sorted set (id by expiry), under `key`'s Redis
/// Cluster hash tag — `key`'s own tag when it has one, else `key` itself as the tag (a key
/// without a tag hashes whole, as the tag `{key}` does) — so that one script call on
/// `key`'s slot holds the charge and the record. (Bucket keys hold no brace outside their
/// tag: parts with braces are hashed, `key`.)
pub fn record_keys(key: &str) -> (String, String) {
    let tagged = key.find('{').is_some_and(|open| key[open + 1..].find('}').is_some_and(|len| len > 0));
    let base = if tagged { key.to_string() } else { format!("{{{key}}}") };
    (format!("{base}:rsv"), format!("{base}:rsx"))
}

/// Why a charge got no decision. Every variant is answered by the domain's failure policy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The deadline passed before Redis answered (the script may still have run).
    #[error("store deadline exceeded")]
    Timeout,
    /// No connection could be had, or the connection failed.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// Redis answered this charge with an error.
    #[error("store error: {0}")]
    Server(String),
    /// The circuit breaker is open: Redis was not called.
    #[error("store circuit breaker open")]
    CircuitOpen,
    /// The connection already has `--redis-max-inflight` commands outstanding: Redis was
    /// not called (a backlog behind a stalled server would charge for answered requests).
    #[error("store overloaded: too many commands in flight")]
    Overloaded,
}

impl StoreError {
    /// A short, bounded label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::Timeout => "timeout",
            StoreError::Unavailable(_) => "unavailable",
            StoreError::Server(_) => "server_error",
            StoreError::CircuitOpen => "circuit_open",
            StoreError::Overloaded => "overloaded",
        }
    }

    /// The store could not be reached or did not keep up (not an error a script answered):
    /// what the circuit breaker and health reporting count as failures.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, StoreError::Timeout | StoreError::Unavailable(_) | StoreError::Overloaded)
    }
}

#[cfg(test)]
mod groups_tests {
    use super::{record_keys, Groups};

    #[test]
    fn records_share_their_bucket_slot() {
        assert_eq!(record_keys("tg:g2s:1:a").0, "{tg:g2s:1:a}:rsv");
        assert_eq!(record_keys("tg:m:{api1:a}g2s:3:day").1, "tg:m:{api1:a}g2s:3:day:rsx");
    }

    #[test]
    fn groups_cover_the_batch_in_order() {
        let each: Vec<_> = Groups::each().ranges(3).collect();
        assert_eq!(each, [0..1, 1..2, 2..3]);
        let joint: Vec<_> = Groups::from_ends(vec![2, 3, 6]).ranges(6).collect();
        assert_eq!(joint, [0..2, 2..3, 3..6]);
        assert!(Groups::from_ends(vec![1, 2]).is_each());
        assert_eq!(Groups::each().ranges(0).count(), 0);
    }
}
