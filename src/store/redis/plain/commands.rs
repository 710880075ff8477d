//! The plain commands of a window consume (`plain`'s list, in order) and the give-back of
//! its increment.

use redis::{Cmd, Pipeline, Value};
use std::ops::Range;

use crate::algorithm::{Algorithm, Hits};
use crate::store::charge::Charge;
use crate::store::key::window_key;

use super::super::scripts::{Call, GIVE_BACK_LUA};

/// The window `now` is in for a charge's limit.
pub(super) struct Window {
    /// Its start, µs.
    pub(super) start: u64,
    /// The limit's unit, µs (at least 1).
    pub(super) unit: u64,
    /// When its window key expires, ms: at the window's end (two windows on for a sliding
    /// window: it is the next one's previous count), and [`grace`] after that.
    pub(super) expiry_ms: u64,
    pub(super) sliding: bool,
}

/// How long a window key outlives its window: the unit, at most a second. An instance
/// whose clock runs behind Redis's still finds its window's key for that long.
fn grace(unit: u64) -> u64 {
    unit.min(1_000_000)
}

pub(super) fn window(charge: &Charge, now: u64) -> Window {
    let unit = charge.params.unit_us.max(1);
    let start = now - now % unit;
    let sliding = charge.params.algorithm == Algorithm::SlidingWindow;
    let windows = if sliding { 2 } else { 1 };
    let end = start.saturating_add(unit.saturating_mul(windows)).saturating_add(grace(unit));
    Window { start, unit, expiry_ms: end.div_ceil(1000).max(1), sliding }
}

pub(super) fn consumed(charge: &Charge) -> u64 {
    match charge.hits {
        Hits::Consume(n) => n.min(crate::algorithm::MAX_VALUE),
        _ => 0,
    }
}

/// The commands of the plain charge `charge` in a pipeline: three for a fixed window, four
/// for a sliding one (at most `plain::COMMANDS`).
pub fn commands(charge: &Charge) -> usize {
    match charge.params.algorithm {
        Algorithm::SlidingWindow => 4,
        _ => 3,
    }
}

/// Appends the [`commands`] of the plain charge `charge` at `now` (µs since the epoch,
/// this instance's clock) to `pipe`.
pub fn push_commands(pipe: &mut Pipeline, charge: &Charge, now: u64) {
    let w = window(charge, now);
    let key = charge.key.as_str();
    let own = window_key(key, w.start);
    pipe.add_command(redis::cmd("SET").arg(&own).arg(0).arg("NX").arg("PXAT").arg(w.expiry_ms).to_owned());
    pipe.add_command(redis::cmd("INCRBY").arg(&own).arg(consumed(charge)).to_owned());
    pipe.add_command(redis::cmd("HMGET").arg(key).arg("s").arg("c").arg("p").arg("u").to_owned());
    if w.sliding {
        let before = window_key(key, w.start.saturating_sub(w.unit));
        pipe.add_command(redis::cmd("GET").arg(before).to_owned());
    }
}

/// A pipeline of the plain charges' [`commands`] at `now`, and where each one's replies
/// are in its reply.
pub fn pipeline<'c>(charges: impl Iterator<Item = &'c Charge>, now: u64) -> (Pipeline, Vec<Range<usize>>) {
    let mut pipe = Pipeline::new();
    let (mut at, mut next) = (Vec::new(), 0);
    for charge in charges {
        push_commands(&mut pipe, charge, now);
        let k = commands(charge);
        at.push(next..next + k);
        next += k;
    }
    (pipe, at)
}

/// An increment to take back from a window key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GiveBack {
    /// The window key the consume incremented.
    pub key: String,
    pub n: u64,
}

impl GiveBack {
    /// `EVALSHA <sha> 1 <window key> <n>` (`give_back.lua`), or its `EVAL`.
    pub fn command(&self, call: Call) -> Cmd {
        let (name, body) = match call {
            Call::Sha => ("EVALSHA", GIVE_BACK_LUA.sha()),
            Call::Source => ("EVAL", GIVE_BACK_LUA.source()),
        };
        redis::cmd(name).arg(body).arg(1).arg(&self.key).arg(self.n).to_owned()
    }

    /// The give-back of `charge`'s increment at `now`, if its replies say it ran (its
    /// `INCRBY` answered a count): for a charge whose other commands were redirected.
    pub fn of_replies(charge: &Charge, now: u64, replies: &[Value]) -> Option<GiveBack> {
        matches!(replies.get(1), Some(Value::Int(_))).then(|| GiveBack {
            key: window_key(&charge.key, window(charge, now).start),
            n: consumed(charge),
        })
    }
}
