//! One `approx.lua` call: the buckets it carries ([`Item`], at most [`CHUNK`]) and the
//! command that carries them (see the script for the layout).

use crate::algorithm::{Algorithm, Params};
use crate::store::redis::scripts::{Call, APPROX_LUA};

use super::super::window::Unsent;

/// Buckets per script call: a call runs alone on the server, so it is kept short (~1 ms).
pub const CHUNK: usize = 512;

/// One bucket sent in a tick.
#[derive(Debug, Clone)]
pub struct Item {
    pub key: Box<str>,
    pub params: Params,
    /// Increments to add, by window (empty: a read).
    pub unsent: Unsent,
    /// An evicted bucket's increments: written, its answer not folded anywhere.
    pub orphan: bool,
}

/// One `approx.lua` call for `items` (see the script for the layout); `window_keys`: the
/// buckets' window keys count too (`ApproxSettings::window_keys`).
pub(super) fn command(items: &[Item], call: Call, window_keys: bool) -> redis::Cmd {
    let (name, body) = match call {
        Call::Sha => ("EVALSHA", APPROX_LUA.sha()),
        Call::Source => ("EVAL", APPROX_LUA.source()),
    };
    let mut cmd = redis::cmd(name);
    cmd.arg(body).arg(items.len());
    for item in items {
        cmd.arg(&*item.key);
    }
    cmd.arg(if window_keys { "w" } else { "" }).arg("").arg("").arg("").arg("").arg("");
    for item in items {
        let algorithm = if item.params.algorithm == Algorithm::SlidingWindow { 1 } else { 2 };
        let u = item.unsent;
        cmd.arg(algorithm).arg(item.params.unit_us).arg(u.start).arg(u.delta).arg(u.carry);
    }
    cmd
}

/// [`command`] by SHA, for the unit tests of the call's layout.
#[cfg(test)]
pub(in crate::store::approx) fn command_for_tests(items: &[Item]) -> redis::Cmd {
    command(items, Call::Sha, false)
}
