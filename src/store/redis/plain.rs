//! Fixed and sliding windows at plain commands' price (`--redis-windows plain`): a window
//! consume decided from three plain commands (four for a sliding window), the answer
//! computed here from their replies by the same pure function the scripts mirror
//! (`algorithm::apply`), instead of one script call. The commands of a call's charges go
//! as one pipeline: a batch lane's call carries every rider's (`batch::plain`),
//! `--no-batch` a request's own, a cluster master's its part of a request's
//! (`cluster::plain`).
//!
//! A plain consume counts in its **window's own key** ([`window_key`]: `<bucket>:<ws>` in
//! the bucket's hash tag, one slot with it), beside the scripts' hash `{s, c, p, u}` under
//! the bucket key (`lua/README.md`, "Plain window commands"): a window's count is its
//! key's plus the hash's when the hash is in that window. The scripts read both (`fold`
//! in `lua/prelude.lua`) and write their share to the hash, so `/v1/usage`, `/v1/reset`,
//! a switch back to `lua` and instances on either path read the same buckets. Per charge,
//! in this order:
//!
//! 1. `SET <window key> 0 NX PXAT <expiry>`: a new window key, with its expiry from the
//!    start (its window's end, two windows on for a sliding window, plus [`grace`]);
//! 2. `INCRBY <window key> <n>`: the window key's count with this consume in it (every
//!    concurrent consume sees the others' increments: nothing is admitted past the limit);
//! 3. `HMGET <bucket> s c p u`: the scripts' share (and a penalty);
//! 4. (sliding) `GET <previous window's key>`.
//!
//! The increment comes before the hash is read: a script that runs between them saw the
//! increment and wrote the hash's share net of it (or lowered the window key, a refund),
//! so the sum is never below the count (never an over-admission). No window is ever
//! rolled or stale: a window's key names its window. A bucket serving a penalty (its rule
//! had one before a reload), or whose keys hold what the commands cannot read (text,
//! another type: `reply::unreadable`), is handed to the script after its increment, if one
//! ran, is given back. A
//! denied consume gives its increment back after the answer, in a task of its own with
//! its own deadline (`GIVE_BACK_TIMEOUT`): until it has run, other requests see the bucket
//! fuller than it is (under-admission, never over-admission); a give-back that is lost
//! leaves the count high until the window ends. A give-back is `give_back.lua`, which
//! takes the count back only while the window key exists (a `DECRBY` on a key gone would
//! leave `-n` without an expiry).
//!
//! Everything else (GCRA, peeks, refunds, overdrafts, penalties, calendar periods, joint
//! groups, a limit of 0) keeps its script: [`split`] says which charges go plain. Needs
//! Redis ≥ 6.2 (`SET … PXAT`; `KEEPTTL` from 6.0).

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::{Pipeline, Value};
use tokio::time::Instant;

use crate::algorithm::Decision;
use crate::store::charge::{Charge, Groups, StoreError};

use super::link::Link;
use super::scripts::{parse, parse_batch, send_entries, Call, Scripts};

mod commands;
mod reply;
mod split;
pub use commands::{commands, pipeline, push_commands, GiveBack};
pub use reply::{read, Read};
pub use split::{eligible, scatter, serves, split, Results, Split};

/// Which path decides a fixed- or sliding-window consume on Redis (`--redis-windows`), and
/// whether the scripts read window keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Windows {
    /// One script call per charge (or per batch), as every other algorithm; the scripts
    /// read no window key.
    #[default]
    Lua,
    /// As `Lua`, but the scripts count window keys (the plain consumes of other instances):
    /// the step every instance takes before any runs `Plain`, and after all leave it, for
    /// two windows.
    Read,
    /// Plain commands decided here (this module); everything else keeps its script, which
    /// reads window keys.
    Plain,
}

impl Windows {
    /// The name on the command line, `/rlconfig` and the status page.
    pub fn as_str(self) -> &'static str {
        match self {
            Windows::Lua => "lua",
            Windows::Read => "read",
            Windows::Plain => "plain",
        }
    }

    /// Whether the scripts count window keys.
    pub fn reads_window_keys(self) -> bool {
        self != Windows::Lua
    }
}

impl std::str::FromStr for Windows {
    type Err = String;

    /// `lua`, `read` or `plain`.
    fn from_str(s: &str) -> Result<Windows, String> {
        match s {
            "lua" => Ok(Windows::Lua),
            "read" => Ok(Windows::Read),
            "plain" => Ok(Windows::Plain),
            other => Err(format!("expected lua, read or plain, not {other:?}")),
        }
    }
}

/// Commands per plain charge in a pipeline, at most (a sliding window's; a fixed window's
/// are three).
pub const COMMANDS: usize = 4;

/// How long a give-back may take, from when it is sent (not the request's deadline).
pub const GIVE_BACK_TIMEOUT: Duration = Duration::from_secs(1);

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
    pub stale: Vec<(usize, usize, Option<GiveBack>)>,
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
    let (pipe, at) = pipeline(plain.iter().copied(), now);
    let count = at.last().map_or(0, |r| r.end);
    let values = match link.send_weighted(pipe, count, count, deadline).await {
        Ok(values) => values,
        Err(e) => return vec![Err(e.into()); plain.len()],
    };
    let mut sorted = Sorted::default();
    for (k, (charge, range)) in plain.iter().zip(at).enumerate() {
        sorted.push(k, k, charge, now, values.get(range).unwrap_or(&[]));
    }
    give_back(link, sorted.denied);
    if !sorted.stale.is_empty() {
        redo(link, scripts, plain, &sorted.stale, &mut sorted.results, deadline).await;
    }
    sorted.results
}

/// Decides the stale charges again as one pipeline by `deadline`: the give-backs of those
/// whose increment ran, then one script call for them all (`batch.lua`, each charge on its own; a charge alone
/// takes its algorithm's script). The give-backs run before the script reads the buckets.
async fn redo(
    link: &Link,
    scripts: &Scripts,
    batch: &[&Charge],
    stale: &[(usize, usize, Option<GiveBack>)],
    results: &mut [Result<Decision, StoreError>],
    deadline: Instant,
) {
    let k = stale.len();
    let charges: Vec<Charge> = stale.iter().map(|(_, i, _)| batch[*i].clone()).collect();
    let backs: Vec<&GiveBack> = stale.iter().filter_map(|(_, _, back)| back.as_ref()).collect();
    let b = backs.len();
    let each = Groups::each();
    let add = |pipe: &mut Pipeline, e: usize, call: Call| {
        let command = match (e < b, k) {
            (true, _) => backs[e].command(call),
            (false, 1) => scripts.command(&charges[0], call),
            (false, _) => scripts.batch(&[(&charges[..], &each)], call),
        };
        pipe.add_command(command);
    };
    let mut replies = send_entries(link, b + 1, b + k, deadline, add).await;
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
