//! Which charges of a batch go plain (`--redis-windows plain`), and putting the two sides'
//! results back in the batch's order.

use crate::algorithm::{Algorithm, Decision, Hits, Params};
use crate::store::charge::{Charge, Groups, StoreError};

/// Whether `charge` may be decided by plain commands: a consume of at least one hit on a
/// fixed (not calendar) or sliding window of a limit above 0 without a penalty.
pub fn eligible(charge: &Charge) -> bool {
    matches!(charge.hits, Hits::Consume(n) if n >= 1) && serves(&charge.params)
}

/// Whether a limit of `params` has its consumes decided plain (when they are alone in
/// their group): a fixed (not calendar) or sliding window above 0 without a penalty.
pub fn serves(params: &Params) -> bool {
    matches!(params.algorithm, Algorithm::FixedWindow | Algorithm::SlidingWindow)
        && params.period.is_none()
        && params.penalty_us == 0
        && params.limit > 0
}

/// A batch cut in two: the charges decided plain, and the rest with their groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    /// Indices of the plain charges, in order.
    pub plain: Vec<usize>,
    /// Indices of the other charges, in order.
    pub rest: Vec<usize>,
    /// The groups of the rest (re-indexed): joint groups kept whole, coalesced runs kept.
    pub rest_groups: Groups,
}

/// The plain charges of `batch`: eligible charges alone in their group, or members of a
/// coalesced run (independent charges). A joint group of several keeps its script whole.
/// `None` when no charge goes plain.
pub fn split(batch: &[Charge], groups: &Groups) -> Option<Split> {
    let (mut plain, mut rest, mut ends) = (Vec::new(), Vec::new(), Vec::new());
    for range in groups.ranges(batch.len()) {
        let independent = range.len() == 1 || groups.is_coalesced();
        let before = rest.len();
        for i in range {
            if independent && eligible(&batch[i]) {
                plain.push(i);
            } else {
                rest.push(i);
            }
        }
        if rest.len() > before {
            ends.push(rest.len());
        }
    }
    if plain.is_empty() {
        return None;
    }
    let rest_groups = if groups.is_coalesced() { Groups::coalesced(ends) } else { Groups::from_ends(ends) };
    Some(Split { plain, rest, rest_groups })
}

impl Split {
    /// The charges kept on their script, in order.
    pub fn rest_charges(&self, batch: &[Charge]) -> Vec<Charge> {
        self.rest.iter().map(|&i| batch[i].clone()).collect()
    }

    /// The results of a batch of `len` charges in its order, from the plain charges' (in
    /// [`plain`](Split::plain)'s order) and the rest's (in [`rest`](Split::rest)'s).
    pub fn merge(&self, len: usize, plain: Results, rest: Results) -> Results {
        scatter(len, [(&self.plain, plain), (&self.rest, rest)])
    }
}

/// One result per charge.
pub type Results = Vec<Result<Decision, StoreError>>;

/// `len` results, each side's placed at its indices (a missing one is an error).
pub fn scatter(len: usize, sides: [(&[usize], Results); 2]) -> Results {
    let mut results = vec![Err(StoreError::Server("no result".into())); len];
    for (at, side) in sides {
        for (&i, result) in at.iter().zip(side) {
            results[i] = result;
        }
    }
    results
}
