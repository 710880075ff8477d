//! What the replies of a plain charge's commands say (`plain::push_commands`): a decision
//! computed from them, a bucket for its script, or a failure.

use redis::{ServerErrorKind, Value};

use crate::algorithm::{apply, Decision, State};
use crate::store::charge::{Charge, StoreError};
use crate::store::key::window_key;

use super::commands::{consumed, window, GiveBack};

/// What the replies of a plain charge say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Read {
    /// Decided; a denial's increment to give back.
    Decided(Decision, Option<GiveBack>),
    /// The bucket serves a penalty (its rule had one), or another writer left what the
    /// commands cannot read under its keys ([`unreadable`]): give the increment back (if
    /// one ran), and decide the charge by its script.
    Stale(Option<GiveBack>),
    /// Redis answered an error (or nothing readable).
    Failed(StoreError),
}

/// A stored count as the scripts' `int` reads it: garbage (or a negative) is 0.
fn count_of(value: Option<&Value>) -> u64 {
    let text = match value {
        Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
        Some(Value::SimpleString(s)) => s.clone(),
        Some(Value::Int(i)) => return u64::try_from(*i).unwrap_or(0),
        _ => return 0,
    };
    text.parse::<u64>().map_or(0, |n| n.min(crate::algorithm::MAX_VALUE))
}

/// Reads the [`commands`] replies of `charge` sent at `now` (see [`push_commands`]): the
/// window's count is its key's (with this consume in it) plus the hash's when the hash is
/// in that window (a script wrote it); a sliding window's previous count likewise.
pub fn read(charge: &Charge, now: u64, replies: &[Value]) -> Read {
    if let Some(error) = replies.iter().find_map(server_error) {
        if replies.iter().all(|v| !matches!(v, Value::ServerError(_)) || unreadable(v)) {
            return Read::Stale(GiveBack::of_replies(charge, now, replies));
        }
        return Read::Failed(error);
    }
    let w = window(charge, now);
    let (count, fields, before) = match replies {
        [_, Value::Int(count), Value::Array(fields)] if !w.sliding => (*count, fields, None),
        [_, Value::Int(count), Value::Array(fields), before] if w.sliding => (*count, fields, Some(before)),
        _ => return Read::Failed(StoreError::Server(format!("unexpected plain replies {replies:?}"))),
    };
    let n = consumed(charge);
    let back = GiveBack { key: window_key(&charge.key, w.start), n };
    let counted = u64::try_from(count).unwrap_or(0);
    let present = |i: usize| !matches!(fields.get(i), None | Some(Value::Nil));
    if present(3) || counted < n {
        return Read::Stale(Some(back));
    }
    let (mut current, mut previous) = (0, 0);
    if present(0) {
        let start = count_of(fields.first());
        if start == w.start {
            current = count_of(fields.get(1));
            previous = if w.sliding { count_of(fields.get(2)) } else { 0 };
        } else if w.sliding && w.start >= w.unit && start == w.start - w.unit {
            previous = count_of(fields.get(1));
        }
    }
    if w.start >= w.unit {
        previous = previous.saturating_add(count_of(before));
    }
    let max = crate::algorithm::MAX_VALUE;
    let current = current.saturating_add(counted - n).min(max);
    let state = State::Window { start: w.start, current, previous: previous.min(max), until: 0 };
    let decision = apply(Some(state), now, &charge.params, charge.hits).decision;
    let give_back = (!decision.allowed).then_some(back);
    Read::Decided(decision, give_back)
}

/// An error about what a key holds, not about Redis: a key of another type, text, or a
/// count `INCRBY` cannot add to. The script reads such keys as the `lua` path does (a
/// window key it cannot read counts 0; a bucket of another type is an error there too).
fn unreadable(value: &Value) -> bool {
    let Value::ServerError(e) = value else { return false };
    let details = e.details().unwrap_or("");
    e.code() == "WRONGTYPE"
        || (e.code() == "ERR" && (details.contains("not an integer") || details.contains("overflow")))
}

fn server_error(value: &Value) -> Option<StoreError> {
    match value {
        // The node is a replica now (a failover): a store failure, as for a script.
        Value::ServerError(e) if e.kind() == Some(ServerErrorKind::ReadOnly) => {
            Some(StoreError::Unavailable(format!("READONLY: {}", e.details().unwrap_or(""))))
        }
        Value::ServerError(e) => {
            Some(StoreError::Server(format!("{}: {}", e.code(), e.details().unwrap_or(""))))
        }
        _ => None,
    }
}
