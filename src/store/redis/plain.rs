//! Fixed and sliding windows at plain commands' price (`--redis-windows plain`): a window
//! consume decided from four plain commands, the answer computed here from their replies
//! by the same pure function the scripts mirror (`algorithm::apply`), instead of one
//! script call. The commands of a call's charges go as one pipeline: a batch lane's call
//! carries every rider's (`batch::plain`), `--no-batch` a request's own, a cluster master's
//! its part of a request's (`cluster::plain`).
//!
//! The bucket's key and what is stored under it are exactly the scripts' (`lua/README.md`,
//! "Plain window commands"): the hash `{s, c, p}` of `fixed_window.lua` and
//! `sliding_window.lua`, so `/v1/usage`, `/v1/reset`, a switch back to `lua` and a rolling
//! upgrade read the same buckets. Per charge, in this order, on its one key (one slot):
//!
//! 1. `HSETNX key s <ws>`: a new bucket starts in this instance's window `ws`;
//! 2. `HMGET key s p u`: which window the bucket is in, the previous count, a penalty;
//! 3. `HINCRBY key c <n>`: the count with this consume in it (every concurrent consume sees
//!    the others' increments: nothing is admitted past the limit);
//! 4. `PEXPIREAT key <end> NX`: the scripts' expiry, set only on a bucket that has none.
//!
//! The read comes before the increment: a bucket found in this window cannot roll before
//! the increment lands (only a later window rolls it), so the count read is this window's.
//! A bucket found in another window, or serving a penalty, is *stale*: its increment is
//! given back and the charge is decided by its script (a second round trip, once per
//! bucket and window: the stale charges of one call are one pipeline, their give-backs
//! then one `batch.lua` call for them all). A denied consume gives its increment back after the answer, in a
//! task of its own with its own deadline (`GIVE_BACK_TIMEOUT`): until it has run, other
//! requests see the bucket fuller than it is (under-admission, never over-admission); a
//! give-back that is lost leaves the count high until the window ends. A give-back is
//! `give_back.lua`, which takes the count back only while the bucket is still in the
//! window the consume saw: a plain `HINCRBY -n` that landed after the window rolled would
//! take `n` off the next window, an over-admission.
//!
//! Everything else (GCRA, peeks, refunds, overdrafts, penalties, calendar periods, joint
//! groups, a limit of 0) keeps its script: [`split`] says which charges go plain. Needs
//! Redis ≥ 7.0 (`PEXPIREAT … NX`).

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::{Cmd, Pipeline, ServerErrorKind, Value};
use tokio::time::Instant;

use crate::algorithm::{apply, Algorithm, Decision, Hits, Params, State};
use crate::store::charge::{Charge, Groups, StoreError};

use super::link::Link;
use super::scripts::{parse, parse_batch, send_entries, Call, Scripts, GIVE_BACK_LUA};

/// Which path decides a fixed- or sliding-window consume on Redis (`--redis-windows`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Windows {
    /// One script call per charge (or per batch), as every other algorithm.
    #[default]
    Lua,
    /// Plain commands decided here (this module); everything else keeps its script.
    Plain,
}

impl Windows {
    /// The name on the command line, `/rlconfig` and the status page.
    pub fn as_str(self) -> &'static str {
        match self {
            Windows::Lua => "lua",
            Windows::Plain => "plain",
        }
    }
}

impl std::str::FromStr for Windows {
    type Err = String;

    /// `lua` or `plain`.
    fn from_str(s: &str) -> Result<Windows, String> {
        match s {
            "lua" => Ok(Windows::Lua),
            "plain" => Ok(Windows::Plain),
            other => Err(format!("expected lua or plain, not {other:?}")),
        }
    }
}

/// Commands per plain charge in a pipeline.
pub const COMMANDS: usize = 4;

/// How long a give-back may take, from when it is sent (not the request's deadline).
pub const GIVE_BACK_TIMEOUT: Duration = Duration::from_secs(1);

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

/// The window `now` is in for a limit of `unit_us`: its start and the bucket's expiry (ms,
/// as the scripts' `window_expiry`: the window's end, two windows on for a sliding window).
fn window(charge: &Charge, now: u64) -> (u64, u64) {
    let unit = charge.params.unit_us.max(1);
    let ws = now - now % unit;
    let windows = if charge.params.algorithm == Algorithm::SlidingWindow { 2 } else { 1 };
    let end = ws.saturating_add(unit.saturating_mul(windows));
    (ws, end.div_ceil(1000).max(1))
}

fn consumed(charge: &Charge) -> u64 {
    match charge.hits {
        Hits::Consume(n) => n.min(crate::algorithm::MAX_VALUE),
        _ => 0,
    }
}

/// Appends the [`COMMANDS`] commands of the plain charge `charge` at `now` (µs since the
/// epoch, this instance's clock) to `pipe`.
pub fn push_commands(pipe: &mut Pipeline, charge: &Charge, now: u64) {
    let (ws, expiry_ms) = window(charge, now);
    let key = charge.key.as_str();
    pipe.add_command(redis::cmd("HSETNX").arg(key).arg("s").arg(ws).to_owned());
    pipe.add_command(redis::cmd("HMGET").arg(key).arg("s").arg("p").arg("u").to_owned());
    pipe.add_command(redis::cmd("HINCRBY").arg(key).arg("c").arg(consumed(charge)).to_owned());
    pipe.add_command(redis::cmd("PEXPIREAT").arg(key).arg(expiry_ms).arg("NX").to_owned());
}

/// An increment to take back from a bucket, if it is still in the window `start` (the
/// hash's `s` as the consume read it; empty: it had none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GiveBack {
    pub key: String,
    pub start: String,
    pub n: u64,
}

impl GiveBack {
    /// `EVALSHA <sha> 1 <key> <start> <n>` (`give_back.lua`), or its `EVAL`.
    pub fn command(&self, call: Call) -> Cmd {
        let (name, body) = match call {
            Call::Sha => ("EVALSHA", GIVE_BACK_LUA.sha()),
            Call::Source => ("EVAL", GIVE_BACK_LUA.source()),
        };
        redis::cmd(name).arg(body).arg(1).arg(&self.key).arg(&self.start).arg(self.n).to_owned()
    }
}

/// What the replies of a plain charge say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Read {
    /// Decided; a denial's increment to give back.
    Decided(Decision, Option<GiveBack>),
    /// The bucket is in another window or serving a penalty: give the increment back, and
    /// decide the charge by its script.
    Stale(GiveBack),
    /// Redis answered an error (or nothing readable).
    Failed(StoreError),
}

/// Reads the [`COMMANDS`] replies of `charge` sent at `now` (see [`push_commands`]).
pub fn read(charge: &Charge, now: u64, replies: &[Value]) -> Read {
    if let Some(error) = replies.iter().find_map(server_error) {
        return Read::Failed(error);
    }
    let [_, Value::Array(fields), Value::Int(count), _] = replies else {
        return Read::Failed(StoreError::Server(format!("unexpected plain replies {replies:?}")));
    };
    let text = |i: usize| match fields.get(i) {
        Some(Value::BulkString(b)) => Some(String::from_utf8_lossy(b).into_owned()),
        Some(Value::SimpleString(s)) => Some(s.clone()),
        _ => None,
    };
    let (ws, _) = window(charge, now);
    let (start, previous, penalty) = (text(0), text(1), text(2));
    let n = consumed(charge);
    let back = |start: String| GiveBack { key: charge.key.clone(), start, n };
    let counted = u64::try_from(*count).unwrap_or(0);
    if start.as_deref() != Some(ws.to_string().as_str()) || penalty.is_some() || counted < n {
        return Read::Stale(back(start.unwrap_or_default()));
    }
    let previous = match charge.params.algorithm {
        // As the scripts' `int`: garbage (or a negative) is 0.
        Algorithm::SlidingWindow => previous.and_then(|p| p.parse::<u64>().ok()).unwrap_or(0),
        _ => 0,
    };
    let state = State::Window { start: ws, current: counted - n, previous, until: 0 };
    let decision = apply(Some(state), now, &charge.params, charge.hits).decision;
    let give_back = (!decision.allowed).then(|| back(ws.to_string()));
    Read::Decided(decision, give_back)
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

/// This instance's clock, µs since the epoch.
pub fn now_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

/// The replies of a pipeline of plain charges, read: one result per charge (a stale
/// charge's is a placeholder until its script has decided it), the stale charges
/// (position, index into the batch, give-back), and the denials' give-backs.
#[derive(Debug, Default)]
pub struct Sorted {
    pub results: Results,
    pub stale: Vec<(usize, usize, GiveBack)>,
    pub denied: Vec<GiveBack>,
}

impl Sorted {
    /// Reads the charge `batch[i]` sent at `now`, at position `k`, from its `replies`.
    pub fn push(&mut self, k: usize, i: usize, charge: &Charge, now: u64, replies: &[Value]) {
        match read(charge, now, replies) {
            Read::Decided(decision, back) => {
                self.results.push(Ok(decision));
                self.denied.extend(back);
            }
            Read::Stale(back) => {
                self.results.push(Err(StoreError::Server("stale plain window".into())));
                self.stale.push((k, i, back));
            }
            Read::Failed(error) => self.results.push(Err(error)),
        }
    }
}

/// Charges `plain` (all [`eligible`]) as one pipeline on `link` by `deadline`: one result
/// per charge, in order. Stale buckets are decided again by their script (their increment
/// given back first, in the same call); denials' increments are given back by a task of
/// their own, after the answer.
pub async fn charge(link: &Arc<Link>, scripts: &Scripts, plain: &[&Charge], deadline: Instant) -> Results {
    let now = now_us();
    let mut pipe = Pipeline::with_capacity(COMMANDS * plain.len());
    plain.iter().for_each(|charge| push_commands(&mut pipe, charge, now));
    let count = COMMANDS * plain.len();
    let values = match link.send_weighted(pipe, count, count, deadline).await {
        Ok(values) => values,
        Err(e) => return vec![Err(e.into()); plain.len()],
    };
    let mut sorted = Sorted::default();
    for (k, charge) in plain.iter().enumerate() {
        let replies = values.get(k * COMMANDS..(k + 1) * COMMANDS).unwrap_or(&[]);
        sorted.push(k, k, charge, now, replies);
    }
    give_back(link, sorted.denied);
    if !sorted.stale.is_empty() {
        redo(link, scripts, plain, &sorted.stale, &mut sorted.results, deadline).await;
    }
    sorted.results
}

/// Decides the stale charges again as one pipeline by `deadline`: each one's give-back,
/// then one script call for them all (`batch.lua`, each charge on its own; a charge alone
/// takes its algorithm's script). The give-backs run before the script reads the buckets.
async fn redo(
    link: &Link,
    scripts: &Scripts,
    batch: &[&Charge],
    stale: &[(usize, usize, GiveBack)],
    results: &mut [Result<Decision, StoreError>],
    deadline: Instant,
) {
    let k = stale.len();
    let charges: Vec<Charge> = stale.iter().map(|(_, i, _)| batch[*i].clone()).collect();
    let each = Groups::each();
    let add = |pipe: &mut Pipeline, e: usize, call: Call| {
        let command = match (e < k, k) {
            (true, _) => stale[e].2.command(call),
            (false, 1) => scripts.command(&charges[0], call),
            (false, _) => scripts.batch(&[(&charges[..], &each)], call),
        };
        pipe.add_command(command);
    };
    let mut replies = send_entries(link, k + 1, 2 * k, deadline, add).await;
    let reply = replies
        .pop()
        .unwrap_or_else(|| Err(StoreError::Server("no reply for a plain window's script".into())));
    let decided = match k {
        1 => vec![reply.and_then(parse)],
        _ => parse_batch(reply, k),
    };
    for ((position, _, _), result) in stale.iter().zip(decided) {
        results[*position] = result;
    }
}

/// Sends the give-backs of denied consumes in a task that owns them, with its own
/// deadline: a request that gives up (its deadline, its client gone) still gives back.
fn give_back(link: &Arc<Link>, backs: Vec<GiveBack>) {
    if backs.is_empty() {
        return;
    }
    let link = link.clone();
    tokio::spawn(async move {
        let deadline = Instant::now() + GIVE_BACK_TIMEOUT;
        let add = |pipe: &mut Pipeline, i: usize, call: Call| {
            pipe.add_command(backs[i].command(call));
        };
        let replies = send_entries(&link, backs.len(), backs.len(), deadline, add).await;
        let failed = replies.iter().filter(|r| !matches!(r, Ok(Value::Int(_)))).count();
        if failed > 0 {
            tracing::debug!(
                failed,
                "plain window give-backs failed: those counts stay high until their windows end"
            );
        }
    });
}

#[cfg(test)]
mod tests;
