//! Script calls over a link: a batch of charges (or of joint groups) as one `EVALSHA`
//! pipeline, and the `NOSCRIPT` rule — the entries answered that way go again, once, as one
//! `EVAL` pipeline (they did not run). Never re-sends after a transport error or a timeout
//! (the script may have run); deadlines are the caller's.
//!
//! Part of `scripts`: builds its entries with `commands` and reads them with `replies`.

use redis::{Pipeline, Value};
use tokio::time::Instant;

use crate::algorithm::Decision;
use crate::store::charge::{Charge, Groups, StoreError};
use crate::store::redis::link::Link;
use crate::store::redis::reply::is_noscript;

use super::commands::Scripts;
use super::replies::{parse, parse_part};
use super::sources::Call;

/// Sends `batch` as one `EVALSHA` pipeline over `link`; entries answered `NOSCRIPT` are
/// sent again, once, as one `EVAL` pipeline (they did not run). One round trip, two if
/// scripts were missing, all by `deadline`. A `READONLY` entry did not run either, but is
/// not re-sent here: the lifecycle has taken that connection out, and the charge is a
/// store failure (`Unavailable`) so the breaker sees it.
pub async fn charge_pipelined(
    link: &Link,
    scripts: &Scripts,
    batch: &[Charge],
    deadline: Instant,
) -> Vec<Result<Decision, StoreError>> {
    let add = |pipe: &mut Pipeline, i: usize, call: Call| {
        pipe.add_command(scripts.command(&batch[i], call));
    };
    let replies = send_entries(link, batch.len(), batch.len(), deadline, add).await;
    replies.into_iter().map(|reply| reply.and_then(parse)).collect()
}

/// As [`charge_pipelined`], for a batch whose `groups` stand or fall together: each group
/// is one pipeline entry (a group of one, its algorithm's script; a larger one, one
/// `joint.lua` call), still one pipeline, one round trip. `Groups::each()` is exactly
/// [`charge_pipelined`].
pub async fn charge_groups_pipelined(
    link: &Link,
    scripts: &Scripts,
    batch: &[Charge],
    groups: &Groups,
    deadline: Instant,
) -> Vec<Result<Decision, StoreError>> {
    if groups.is_each() {
        return charge_pipelined(link, scripts, batch, deadline).await;
    }
    let parts: Vec<Vec<usize>> = groups.ranges(batch.len()).map(Iterator::collect).collect();
    let coalesced = groups.is_coalesced();
    let add = |pipe: &mut Pipeline, i: usize, call: Call| {
        pipe.add_command(scripts.part(batch, &parts[i], coalesced, call));
    };
    // A coalesced call weighs its charges against `--redis-max-inflight` (see `Link`).
    let weight = if coalesced { batch.len() } else { parts.len() };
    let replies = send_entries(link, parts.len(), weight, deadline, add).await;
    let mut results = Vec::with_capacity(batch.len());
    for (part, reply) in parts.iter().zip(replies) {
        results.extend(parse_part(reply, part.len()));
    }
    results
}

/// Sends `count` entries (`add` appends entry `i` called by `Call`) as one pipeline counted
/// as `weight` commands in flight; the entries answered `NOSCRIPT` go again, once, as one
/// `EVAL` pipeline. One reply per entry.
pub(crate) async fn send_entries(
    link: &Link,
    count: usize,
    weight: usize,
    deadline: Instant,
    add: impl Fn(&mut Pipeline, usize, Call),
) -> Vec<Result<Value, StoreError>> {
    let mut pipe = Pipeline::with_capacity(count);
    (0..count).for_each(|i| add(&mut pipe, i, Call::Sha));
    let values = match link.send_weighted(pipe, count, weight, deadline).await {
        Ok(values) => values,
        Err(e) => return vec![Err(e.into()); count],
    };
    let missing: Vec<usize> = (0..count).filter(|&i| values.get(i).is_some_and(is_noscript)).collect();
    let mut replies: Vec<Result<Value, StoreError>> = values.into_iter().map(Ok).collect();
    replies.resize_with(count, || Err(StoreError::Server("no reply for a pipeline entry".into())));
    if !missing.is_empty() {
        let mut retry = Pipeline::with_capacity(missing.len());
        missing.iter().for_each(|&i| add(&mut retry, i, Call::Source));
        let weight = if count == weight { missing.len() } else { weight };
        match link.send_weighted(retry, missing.len(), weight, deadline).await {
            Ok(values) => {
                for (&i, value) in missing.iter().zip(values) {
                    replies[i] = Ok(value);
                }
            }
            Err(e) => {
                let err = StoreError::from(e);
                missing.iter().for_each(|&i| replies[i] = Err(err.clone()));
            }
        }
    }
    replies
}
