//! A script's reply as decisions: one `{allowed, remaining, reset_us}` (`parse`), one per
//! member of a joint call (`parse_part`), three entries per charge of a batch call
//! (`parse_batch`). A reply of the wrong shape is every charge's error; a `READONLY` reply
//! is a store failure (`Unavailable`), like an unreachable master.
//!
//! Part of `scripts`; imports none of its siblings.

use redis::{ServerErrorKind, Value};

use crate::algorithm::reservation::Phase;
use crate::algorithm::Decision;
use crate::store::charge::{Reserved, StoreError};

/// The reply of a `batch.lua` call of `charges` charges — three entries per charge
/// (`allowed`, `remaining`, `reset_us`, or an error and two zeros: its group failed) — as
/// one result per charge, in order. A failed call, or a reply of the wrong shape, is every
/// charge's error.
pub fn parse_batch(reply: Result<Value, StoreError>, charges: usize) -> Vec<Result<Decision, StoreError>> {
    let items = match reply {
        Ok(Value::Array(items)) if items.len() == 3 * charges => items,
        Ok(Value::Array(items)) => {
            let e =
                StoreError::Server(format!("batch reply of {} entries for {charges} charges", items.len()));
            return vec![Err(e); charges];
        }
        Ok(other) => {
            return vec![parse(other).and(Err(StoreError::Server("unexpected batch reply".into()))); charges]
        }
        Err(e) => return vec![Err(e); charges],
    };
    let mut items = items.into_iter();
    let mut results = Vec::with_capacity(charges);
    while let (Some(allowed), Some(remaining), Some(reset_us)) = (items.next(), items.next(), items.next()) {
        results.push(match allowed {
            Value::ServerError(_) => parse(allowed),
            allowed => parse(Value::Array(vec![allowed, remaining, reset_us])),
        });
    }
    results
}

/// A script's `{allowed, remaining, reset_us}` reply.
pub fn parse(value: Value) -> Result<Decision, StoreError> {
    let as_u64 = |v: &Value| match v {
        Value::Int(i) => Some((*i).max(0) as u64),
        _ => None,
    };
    match value {
        Value::Array(items) if items.len() == 3 => {
            match (as_u64(&items[0]), as_u64(&items[1]), as_u64(&items[2])) {
                (Some(allowed), Some(remaining), Some(reset_us)) => {
                    Ok(Decision { allowed: allowed == 1, remaining, reset_us })
                }
                _ => Err(StoreError::Server(format!("unexpected script reply {items:?}"))),
            }
        }
        // The node is a replica now (a failover): a store failure, like an unreachable master.
        Value::ServerError(e) if e.kind() == Some(ServerErrorKind::ReadOnly) => {
            Err(StoreError::Unavailable(format!("READONLY: {}", e.details().unwrap_or(""))))
        }
        Value::ServerError(e) => {
            Err(StoreError::Server(format!("{}: {}", e.code(), e.details().unwrap_or(""))))
        }
        other => Err(StoreError::Server(format!("unexpected script reply {other:?}"))),
    }
}

/// The reply of one script call of `members` charges (see [`Scripts::part`](super::commands::Scripts::part)): one result
/// per member; an error (or a reply of the wrong shape) is every member's.
pub fn parse_part(reply: Result<Value, StoreError>, members: usize) -> Vec<Result<Decision, StoreError>> {
    let value = match reply {
        Ok(value) => value,
        Err(e) => return vec![Err(e); members],
    };
    if members == 1 {
        return vec![parse(value)];
    }
    match value {
        Value::Array(items) if items.len() == members => items.into_iter().map(parse).collect(),
        Value::Array(items) => {
            let e = StoreError::Server(format!("joint reply of {} decisions for {members}", items.len()));
            vec![Err(e); members]
        }
        other => vec![parse(other).and(Err(StoreError::Server("unexpected joint reply".into()))); members],
    }
}

/// The reply of a `reserve.lua` call of `members` charges: three entries per member, then
/// the phase and the count of reservations found expired unsettled. An error (or a reply
/// of the wrong shape) is the call's.
pub fn parse_reserve(reply: Result<Value, StoreError>, members: usize) -> Result<Reserved, StoreError> {
    let items = match reply? {
        Value::Array(items) if items.len() == 3 * members + 2 => items,
        other => {
            return Err(parse(other).err().unwrap_or(StoreError::Server("unexpected reserve reply".into())))
        }
    };
    let int = |v: &Value| match v {
        Value::Int(i) => Ok((*i).max(0) as u64),
        other => Err(StoreError::Server(format!("unexpected reserve reply entry {other:?}"))),
    };
    let decisions = items[..3 * members]
        .chunks_exact(3)
        .map(|d| parse(Value::Array(d.to_vec())))
        .collect::<Result<Vec<Decision>, StoreError>>()?;
    let phase = Phase::from_code(int(&items[3 * members])?)
        .ok_or_else(|| StoreError::Server("unknown reservation phase".into()))?;
    Ok(Reserved { decisions, phase, expired: int(&items[3 * members + 1])? })
}
