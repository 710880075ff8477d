//! The heartbeat (see `sync`'s module doc): this instance scored in the set of live
//! instances, the live count read back; Redis's clock learnt before the first beat; and
//! leaving the set when the instance stops.

use std::sync::atomic::Ordering;

use redis::{Pipeline, Value};
use tokio::time::Instant;

use crate::store::memory::now_us;
use crate::store::redis::cluster::key_slot;
use crate::store::redis::scripts::Call;

use super::super::health::{midpoint, sent_before};
use super::super::table::Approx;
use super::via::Via;

/// What the task needs besides the table: where to send, and how to name things there.
#[derive(Debug, Clone)]
pub struct SyncTarget {
    /// The sorted set of live instances (`<prefix>tg:approx:instances`).
    pub instances_key: String,
    /// This instance's member in it (random per process).
    pub id: String,
}

impl SyncTarget {
    pub fn new(key_prefix: &str) -> SyncTarget {
        SyncTarget {
            instances_key: format!("{key_prefix}tg:approx:instances"),
            id: format!("{:016x}", rand::random::<u64>()),
        }
    }
}

impl Approx {
    /// Beats the heartbeat (see the module doc) and takes its answer: the live count.
    pub(super) async fn beat(&self, via: Via<'_>, target: &SyncTarget, deadline: Instant) {
        let at = self.redis_now(now_us());
        let liveness = liveness_us(self.settings.interval_us());
        let slot = key_slot(target.instances_key.as_bytes());
        let add = |pipe: &mut Pipeline, i: usize, _: Call| {
            pipe.add_command(beat_command(target, i, at, liveness));
        };
        let replies = via.send(BEAT.len(), slot, deadline, add).await;
        let now = now_us();
        match replies.last() {
            Some(Ok(Value::Int(live))) => {
                self.beaten(u64::try_from(*live).unwrap_or(1), now);
                self.counters.syncs_ok.fetch_add(1, Ordering::Relaxed);
            }
            other => {
                // N stays what it was: a heartbeat key's master down must not make this
                // instance believe itself alone.
                let error = match other {
                    Some(Err(e)) => e.to_string(),
                    other => format!("unexpected heartbeat reply {other:?}"),
                };
                tracing::debug!(%error, "approximate heartbeat failed");
                self.failed(now);
            }
        }
    }

    /// Asks Redis's clock (`TIME`), so that the heartbeat is scored in it too (before the
    /// first beat, and before any beat when no call measured it within the last interval).
    pub(super) async fn learn_clock(&self, via: Via<'_>, target: &SyncTarget, deadline: Instant) {
        let slot = key_slot(target.instances_key.as_bytes());
        let started = Instant::now();
        let replies = via
            .send(1, slot, deadline, |pipe, _, _| {
                pipe.add_command(redis::cmd("TIME"));
            })
            .await;
        let answered = now_us();
        // Sent `took` before, by the monotonic clock: two wall-clock readings across a step
        // back would underflow, across a step forward put the midpoint in neither clock.
        let sent = sent_before(answered, started.elapsed());
        if let Some(Ok(Value::Array(parts))) = replies.first() {
            let number = |v: Option<&Value>| match v {
                Some(Value::BulkString(b)) => std::str::from_utf8(b).ok().and_then(|s| s.parse::<u64>().ok()),
                Some(Value::Int(i)) => u64::try_from(*i).ok(),
                _ => None,
            };
            if let (Some(secs), Some(micros)) = (number(parts.first()), number(parts.get(1))) {
                self.clock(secs.saturating_mul(1_000_000).saturating_add(micros), midpoint(sent, answered));
            }
        }
    }

    /// Takes this instance out of the heartbeat set (it is stopping: the others' `N`
    /// drops at their next beat instead of after the liveness span).
    pub async fn leave(&self, via: Via<'_>, target: &SyncTarget, deadline: Instant) {
        let slot = key_slot(target.instances_key.as_bytes());
        let add = |pipe: &mut Pipeline, _: usize, _: Call| {
            pipe.add_command(redis::cmd("ZREM").arg(&target.instances_key).arg(&target.id).clone());
        };
        via.send(1, slot, deadline, add).await;
    }
}

/// The heartbeat: four commands in one call (plain commands, not a script: `INFO
/// commandstats` tells them from syncs). The last answers the live instances.
const BEAT: [&str; 4] = ["ZADD", "ZREMRANGEBYSCORE", "PEXPIRE", "ZCARD"];

/// Command `i` of the heartbeat at `now` (Redis clock, µs).
fn beat_command(target: &SyncTarget, i: usize, now: u64, liveness: u64) -> redis::Cmd {
    let mut cmd = redis::cmd(BEAT[i]);
    cmd.arg(&target.instances_key);
    match i {
        0 => cmd.arg(now).arg(&target.id),
        1 => cmd.arg("-inf").arg(now.saturating_sub(liveness.saturating_add(1))),
        2 => cmd.arg(liveness.div_ceil(1000).saturating_mul(2)),
        _ => &mut cmd,
    };
    cmd
}

/// How long after its last beat an instance counts as live: 4 intervals, at least 1 s.
fn liveness_us(interval: u64) -> u64 {
    interval.saturating_mul(4).max(1_000_000)
}
