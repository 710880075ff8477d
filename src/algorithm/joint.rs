//! Joint charges: several members decided at one instant that stand or fall together.
//!
//! Pure, like the rest of `algorithm`: the caller reads the stored state of each distinct
//! bucket of the group, calls [`apply`] with one `now`, and writes what it returns — or
//! nothing. `src/store/lua/joint.lua` is the same function for Redis (kept equal by
//! `tests/differential.rs`); the memory store calls this one under its shard locks.
//!
//! Semantics (the contract of `store::Groups`):
//! - members are decided in order over a scratch copy of the states: a bucket met twice
//!   sees the earlier member's effect (as two single charges at the same instant would);
//! - every member allowed → every member's write is applied (one final write per bucket,
//!   reflecting all its members) and each answers its own decision;
//! - any member denied (a consume that does not fit, a peek on an exhausted bucket) →
//!   nothing is written; each denied member answers its own denial, every other member
//!   answers [`describe`] of its bucket as stored: allowed, nothing charged — except
//!   the penalties the group's denials started (`penalty`): a breach is a breach whether
//!   or not the group stood, so each such bucket is written as stored with the penalty's
//!   end ([`Joint::marks`]; the longest end when several members of one bucket breached).
//!
//! [`apply_each`] is the same walk without the veto, for a *coalesced batch* (independent
//! charges that met in one script call): each member is applied if it fits, a denied one
//! writes nothing, and the others are applied all the same — the answers single charges
//! would get in that order at that instant (`joint.lua` with its `each` argument).

use super::apply as apply_one;
use super::bucket::{Decision, Hits, Params, State, Write};

/// One member of a group: which of the group's distinct buckets, with what parameters
/// and hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member {
    /// Index into the states passed to [`apply`].
    pub key: usize,
    pub params: Params,
    pub hits: Hits,
}

/// The final write of one bucket of a group that passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyWrite {
    /// Index into the states passed to [`apply`].
    pub key: usize,
    /// `Put` or `Delete`: buckets that end unchanged are not listed.
    pub write: Write,
    /// The parameters of the member that wrote last (a capped store ranks the state by them).
    pub params: Params,
}

/// The answers of a group, and what to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Joint {
    /// One per member, in order.
    pub decisions: Vec<Decision>,
    /// `Some` when every member was allowed: the writes to apply, by ascending key index.
    /// `None` when the group was denied: write nothing but [`marks`](Self::marks).
    pub writes: Option<Vec<KeyWrite>>,
    /// A denied group's penalties: each bucket a denial breached (a consume denied on a
    /// limit with a penalty), as stored with the penalty's end. Empty when it passed.
    pub marks: Vec<KeyWrite>,
}

impl Joint {
    /// Whether every member was allowed (and the writes must be applied).
    pub fn passed(&self) -> bool {
        self.writes.is_some()
    }
}

/// Decides a group at `now` on `stored` (the state of each distinct bucket, `None` =
/// never seen or expired). A member whose `key` is out of range sees no state and writes
/// nothing (callers never build one).
pub fn apply(stored: &[Option<State>], now: u64, members: &[Member]) -> Joint {
    let (mut decisions, writes, breached) = walk(stored, now, members);
    // An overdraw past its limit vetoes nothing: its usage counts whatever it answers.
    if decisions.iter().zip(members).all(|(d, m)| d.allowed || matches!(m.hits, Hits::Overdraw(_))) {
        return Joint { decisions, writes: Some(writes), marks: Vec::new() };
    }
    let mut marks: Vec<KeyWrite> = Vec::new();
    for ((decision, member), breached) in decisions.iter_mut().zip(members).zip(breached) {
        let state = stored.get(member.key).copied().flatten();
        if decision.allowed {
            *decision = describe(state, now, &member.params);
        } else if breached {
            let write = super::penalty::start(state, now, &member.params, *decision).write;
            let mark = KeyWrite { key: member.key, write, params: member.params };
            match marks.iter_mut().find(|m| m.key == member.key) {
                Some(m) if until(m.write) < until(write) => *m = mark,
                Some(_) => {}
                None => marks.push(mark),
            }
        }
    }
    marks.sort_unstable_by_key(|m| m.key);
    Joint { decisions, writes: None, marks }
}

/// The penalty end a mark writes.
fn until(write: Write) -> u64 {
    match write {
        Write::Put { state, .. } => state.until(),
        Write::Keep | Write::Delete => 0,
    }
}

/// Decides independent members at `now` on `stored`, in order: each is applied if it fits
/// (a denied member writes nothing and vetoes no other). The writes are always `Some`.
pub fn apply_each(stored: &[Option<State>], now: u64, members: &[Member]) -> Joint {
    let (decisions, writes, _) = walk(stored, now, members);
    Joint { decisions, writes: Some(writes), marks: Vec::new() }
}

/// Every member's own decision in order over a scratch copy of `stored`, the final write
/// of each bucket a member changed (by ascending key index), and which members breached (a
/// denial that started a penalty: the only denials that write).
fn walk(stored: &[Option<State>], now: u64, members: &[Member]) -> (Vec<Decision>, Vec<KeyWrite>, Vec<bool>) {
    let mut scratch = stored.to_vec();
    let mut last: Vec<Option<(Write, Params)>> = vec![None; stored.len()];
    let mut decisions = Vec::with_capacity(members.len());
    let mut breached = Vec::with_capacity(members.len());
    for member in members {
        let state = scratch.get(member.key).copied().flatten();
        let outcome = apply_one(state, now, &member.params, member.hits);
        let after = match outcome.write {
            Write::Keep => None,
            Write::Put { state, .. } => Some(Some(state)),
            Write::Delete => Some(None),
        };
        if let (Some(after), Some(slot)) = (after, scratch.get_mut(member.key)) {
            *slot = after;
            last[member.key] = Some((outcome.write, member.params));
        }
        breached.push(!outcome.decision.allowed && outcome.write != Write::Keep);
        decisions.push(outcome.decision);
    }
    let writes = last
        .into_iter()
        .enumerate()
        .filter_map(|(key, w)| w.map(|(write, params)| KeyWrite { key, write, params }))
        .collect();
    (decisions, writes, breached)
}

/// The answer of a member of a denied group that was not itself denied: its bucket as
/// stored, described as a peek would (remaining, reset), but allowed — nothing was charged.
pub fn describe(state: Option<State>, now: u64, params: &Params) -> Decision {
    Decision { allowed: true, ..apply_one(state, now, params, Hits::Peek).decision }
}

#[cfg(test)]
mod tests;
