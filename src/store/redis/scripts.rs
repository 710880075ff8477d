//! The Lua scripts as Redis commands, and their replies as decisions: what every Redis
//! store (single node, Sentinel, Cluster) sends and reads, whatever connection carries it.
//!
//! Owns the script sources and SHAs (computed once), building an `EVALSHA`/`EVAL` command
//! or pipeline for a batch of charges, parsing the `{allowed, remaining, reset_us}` reply,
//! and the `NOSCRIPT` rule: retry once, with `EVAL`, only the entries that failed that way.
//! It holds no connection and never retries after a transport error or a timeout (the
//! script may have run). Deadlines are the caller's. What a reply or a client error means
//! (`NOSCRIPT`, `READONLY`, transport) is `redis::reply`'s, below this module and the link.
//!
//! A pipeline entry is one script call: a single charge (its algorithm's script), a *part*
//! — charges of one joint group on one slot — sent as one `joint.lua` call, whose reply
//! holds one decision per member, or a batch (`redis::batch`): every group of several
//! requests as one `batch.lua` call, whose reply holds three entries per charge.

use std::collections::HashMap;
use std::sync::LazyLock;

use redis::{Cmd, Pipeline, ServerErrorKind, Value};
use tokio::time::Instant;

use crate::algorithm::{Algorithm, Decision, Hits, Params};

use super::super::charge::{Charge, Groups, StoreError};
use super::link::Link;
use super::reply::is_noscript;

/// The script bodies as sent to Redis: the shared prelude, the algorithm functions the
/// script runs (each written once, in `lua/algorithm/`), then the script's entry, which
/// reads its call (see `lua/README.md`). A script carries only the functions it calls:
/// Redis runs a script's whole body, so each function defined costs every call.
macro_rules! lua {
    ($($part:literal),+) => {
        concat!(include_str!("../lua/prelude.lua"), $(include_str!(concat!("../lua/", $part))),+)
    };
}

pub const GCRA_LUA: &str = lua!("algorithm/gcra.lua", "algorithm/penalty.lua", "single.lua", "gcra.lua");
pub const SLIDING_LUA: &str = lua!(
    "algorithm/window.lua",
    "algorithm/sliding_window.lua",
    "algorithm/penalty.lua",
    "single.lua",
    "sliding_window.lua"
);
pub const FIXED_LUA: &str = lua!(
    "algorithm/window.lua",
    "algorithm/fixed_window.lua",
    "algorithm/penalty.lua",
    "single.lua",
    "fixed_window.lua"
);
/// A group of charges decided together (see `store::Groups`, `lua/README.md`).
pub const JOINT_LUA: &str = lua!(
    "algorithm/gcra.lua",
    "algorithm/window.lua",
    "algorithm/sliding_window.lua",
    "algorithm/fixed_window.lua",
    "algorithm/penalty.lua",
    "joint.lua"
);
/// The charges of several requests for one server in one call (see `redis::batch`,
/// `lua/README.md`): every algorithm, joint and independent groups side by side.
pub const BATCH_LUA: &str = lua!(
    "algorithm/gcra.lua",
    "algorithm/window.lua",
    "algorithm/sliding_window.lua",
    "algorithm/fixed_window.lua",
    "algorithm/penalty.lua",
    "batch.lua"
);
/// Approximate mode's sync of many buckets (see `approx::sync`, `lua/approx.lua`).
pub static APPROX_LUA: LazyLock<Script> =
    LazyLock::new(|| Script::new(lua!("algorithm/window.lua", "approx.lua")));

/// How a script is called: by SHA (the normal case) or with its source (after `NOSCRIPT`;
/// `EVAL` also caches the script on that node).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    Sha,
    Source,
}

/// A Lua script with its SHA1, computed once.
#[derive(Debug)]
pub struct Script {
    sha: String,
    source: &'static str,
}

impl Script {
    fn new(source: &'static str) -> Script {
        Script { sha: redis::Script::new(source).get_hash().to_string(), source }
    }

    /// The SHA1 `EVALSHA` names it by.
    pub fn sha(&self) -> &str {
        &self.sha
    }

    /// The body `EVAL` sends.
    pub fn source(&self) -> &'static str {
        self.source
    }
}

/// The three algorithm scripts, the joint one and the batch one (see `lua/README.md` for
/// their contract).
#[derive(Debug)]
pub struct Scripts {
    gcra: Script,
    sliding: Script,
    fixed: Script,
    joint: Script,
    batch: Script,
}

impl Default for Scripts {
    fn default() -> Scripts {
        Scripts::new()
    }
}

impl Scripts {
    /// Hashes the embedded sources.
    pub fn new() -> Scripts {
        Scripts {
            gcra: Script::new(GCRA_LUA),
            sliding: Script::new(SLIDING_LUA),
            fixed: Script::new(FIXED_LUA),
            joint: Script::new(JOINT_LUA),
            batch: Script::new(BATCH_LUA),
        }
    }

    /// `EVALSHA <sha> 1 <key> <limit> <unit_us> <burst> <mode> <n>` (or `EVAL <source> …`),
    /// then `'' <penalty_us>` for a limit with a penalty. The bucket key is the only key: a
    /// cluster client routes the command by it.
    pub fn command(&self, charge: &Charge, call: Call) -> Cmd {
        let script = match charge.params.algorithm {
            Algorithm::Gcra => &self.gcra,
            Algorithm::SlidingWindow => &self.sliding,
            Algorithm::FixedWindow => &self.fixed,
        };
        let (name, body) = match call {
            Call::Sha => ("EVALSHA", script.sha.as_str()),
            Call::Source => ("EVAL", script.source),
        };
        let (mode, n) = mode(charge.hits);
        let p = &charge.params;
        let mut cmd = redis::cmd(name);
        cmd.arg(body).arg(1).arg(&charge.key).arg(p.limit).arg(p.unit_us).arg(p.burst).arg(mode).arg(n);
        if p.penalty_us > 0 {
            // No test clock (`''`: the server's TIME), then the penalty.
            cmd.arg("").arg(p.penalty_us);
        }
        cmd
    }

    /// The script call of the charges `members` of `batch` (indices, in order; every key on
    /// one slot): [`command`](Self::command) for one member, `joint.lua` for more — in its
    /// `each` mode when `coalesced` (independent members, see `Groups::coalesced`).
    pub fn part(&self, batch: &[Charge], members: &[usize], coalesced: bool, call: Call) -> Cmd {
        match members {
            [one] => self.command(&batch[*one], call),
            _ => {
                let mut cmd = self.joint(members.iter().map(|&i| &batch[i]), call);
                if coalesced {
                    // No test clock (`''`: the server's TIME), then the `each` flag.
                    cmd.arg("").arg(1);
                }
                cmd
            }
        }
    }

    /// `EVALSHA <sha> <k> <key>… <m> (<key index> <algorithm> <limit> <unit_us> <burst>
    /// <mode> <n> <penalty_us>)×m`: the distinct keys in order of first use, then each member.
    pub fn joint<'a>(&self, members: impl Iterator<Item = &'a Charge> + Clone, call: Call) -> Cmd {
        let (name, body) = match call {
            Call::Sha => ("EVALSHA", self.joint.sha.as_str()),
            Call::Source => ("EVAL", self.joint.source),
        };
        let mut keys: Vec<&str> = Vec::new();
        let mut args: Vec<(usize, &Charge)> = Vec::new();
        for charge in members {
            let index = keys.iter().position(|k| *k == charge.key).unwrap_or_else(|| {
                keys.push(&charge.key);
                keys.len() - 1
            });
            args.push((index + 1, charge));
        }
        let mut cmd = redis::cmd(name);
        cmd.arg(body).arg(keys.len());
        for key in &keys {
            cmd.arg(*key);
        }
        cmd.arg(args.len());
        for (index, charge) in args {
            let p = &charge.params;
            let (mode, n) = mode(charge.hits);
            cmd.arg(index)
                .arg(p.algorithm.as_str())
                .arg(p.limit)
                .arg(p.unit_us)
                .arg(p.burst)
                .arg(mode)
                .arg(n)
                .arg(p.penalty_us);
        }
        cmd
    }
}

impl Scripts {
    /// `EVALSHA <sha> <k> <key>… '' <r> (<algorithm> <limit> <unit_us> <burst> <penalty_us>)×r
    /// (<kind> <m> (<key index> <rule index> <mode> <n>)×m)…`: every group of every rider
    /// (a request's charges and how they are grouped), in order, as one `batch.lua` call;
    /// the keys and the rules (algorithm and numbers) once each, by first use. A rider's
    /// groups of one and coalesced groups are independent (`e`), its other groups joint
    /// (`j`). The reply holds one entry per charge, riders in order ([`parse_batch`]).
    pub fn batch<'a>(&self, riders: &[(&'a [Charge], &Groups)], call: Call) -> Cmd {
        let (name, body) = match call {
            Call::Sha => ("EVALSHA", self.batch.sha.as_str()),
            Call::Source => ("EVAL", self.batch.source),
        };
        let charges: usize = riders.iter().map(|(batch, _)| batch.len()).sum();
        // Keys by first use: a linear scan for a small call, a map past that (a call holds
        // at most 64 charges, `batch::MAX_CHARGES`). Rules are few: always a scan.
        let mut keys: Vec<&'a str> = Vec::with_capacity(charges);
        let mut key_index: Option<HashMap<&'a str, usize>> = (charges > 16).then(HashMap::new);
        let mut rules: Vec<&'a Params> = Vec::new();
        let mut members: Vec<u64> = Vec::with_capacity(4 * charges);
        let mut layout: Vec<(&str, usize)> = Vec::new();
        for &(batch, groups) in riders {
            for range in groups.ranges(batch.len()) {
                let kind = if range.len() == 1 || groups.is_coalesced() { "e" } else { "j" };
                layout.push((kind, range.len()));
                for charge in &batch[range] {
                    let key = charge.key.as_str();
                    let k = match &mut key_index {
                        Some(map) => *map.entry(key).or_insert_with(|| {
                            keys.push(key);
                            keys.len()
                        }),
                        None => match keys.iter().position(|k| *k == key) {
                            Some(i) => i + 1,
                            None => {
                                keys.push(key);
                                keys.len()
                            }
                        },
                    };
                    let r = match rules.iter().position(|p| **p == charge.params) {
                        Some(i) => i + 1,
                        None => {
                            rules.push(&charge.params);
                            rules.len()
                        }
                    };
                    let (mode, n) = mode(charge.hits);
                    members.extend([k as u64, r as u64, u64::from(mode), n]);
                }
            }
        }
        let mut cmd = redis::cmd(name);
        cmd.arg(body).arg(keys.len());
        for key in &keys {
            cmd.arg(*key);
        }
        // No test clock: the server's TIME.
        cmd.arg("").arg(rules.len());
        for p in rules {
            cmd.arg(p.algorithm.as_str()).arg(p.limit).arg(p.unit_us).arg(p.burst).arg(p.penalty_us);
        }
        let mut members = members.chunks_exact(4);
        for (kind, m) in layout {
            cmd.arg(kind).arg(m);
            for member in members.by_ref().take(m) {
                cmd.arg(member);
            }
        }
        cmd
    }
}

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

/// The script's `mode` and `n` for `hits`.
fn mode(hits: Hits) -> (u8, u64) {
    match hits {
        Hits::Consume(n) => (0, n),
        Hits::Peek => (1, 0),
        Hits::Overdraw(n) => (3, n),
        Hits::Refund(n) => (2, n),
    }
}

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

/// The reply of one script call of `members` charges (see [`Scripts::part`]): one result
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

#[cfg(test)]
mod tests;
