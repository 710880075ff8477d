//! One wake of the sync task: collect, send the calls (at most so many outstanding, each
//! by its own deadline), fold each answer as it comes; on full wakes the heartbeat too, and
//! while buckets are held the reset log (`approx::resets`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::future::{join3, join_all};
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::store::charge::StoreError;
use crate::store::memory::now_us;
use crate::store::redis::cluster::key_slot;

use super::super::health::sent_before;
use super::super::table::Approx;
use super::call::command;
use super::heartbeat::SyncTarget;
use super::reply::parse;
use super::via::Via;
use super::wake::Wake;

/// How long a sync call may take before it counts as failed: 4 intervals, at least 1 s.
pub fn sync_deadline(interval: Duration) -> Duration {
    (interval * 4).max(Duration::from_secs(1))
}

impl Approx {
    /// One wake: collect, send, fold; on full wakes (see [`Wake`]) the heartbeat is beaten
    /// too, when `heartbeat` (an approximate domain is configured) or buckets are held.
    /// `leave`: this is the last wake — take this instance out of the heartbeat set.
    /// Returns how many buckets were sent.
    pub async fn tick(
        &self,
        via: Via<'_>,
        target: &SyncTarget,
        wake: Wake,
        heartbeat: bool,
        budget: usize,
    ) -> usize {
        let beat = wake == Wake::Full && (heartbeat || !self.is_empty());
        let deadline = sync_deadline(self.settings.interval);
        // The beat is scored in Redis's clock: asked again when no call measured it within
        // the last interval (`Approx::clock_is_fresh`), so a wall clock that stepped
        // since scores at most that one beat wrong.
        if beat && !self.clock_is_fresh() {
            self.learn_clock(via, target, Instant::now() + deadline).await;
        }
        if beat && !self.scripts_loaded.load(Ordering::Relaxed) {
            self.load_scripts(via, target, Instant::now() + deadline).await;
        }
        let mut items = self.collect(now_us(), wake, budget);
        // The reset log, once per wake while buckets are held (`approx::resets`).
        let follow = wake != Wake::Last && !self.is_empty();
        if items.is_empty() && !beat && !follow {
            return 0;
        }
        let writes = items.iter().filter(|i| !i.unsent.is_empty()).count() as u64;
        self.counters.keys_written.fetch_add(writes, Ordering::Relaxed);
        let chunks = via.chunks(&mut items);
        let permits = Semaphore::new(via.calls_in_flight());
        let gone = AtomicBool::new(false);
        let calls = chunks.iter().map(|chunk| async {
            let _permit = permits.acquire().await;
            if gone.load(Ordering::Relaxed) {
                // Redis did not answer this wake's earlier call: this one was not sent.
                self.settle_failed(chunk.to_vec(), now_us());
                return;
            }
            let started = Instant::now();
            let slot = key_slot(chunk[0].key.as_bytes());
            let mut replies =
                via.send(1, slot, Instant::now() + deadline, |pipe, _, call| {
                pipe.add_command(command(chunk, call, self.settings.window_keys));
            }).await;
            let answered = now_us();
            // Sent `took` before, by the monotonic clock: a wall clock stepped meanwhile
            // moves neither reading apart.
            let sent = sent_before(answered, started.elapsed());
            let reply = replies.pop().unwrap_or(Err(StoreError::Server("no reply for a sync call".into())));
            match reply.and_then(|value| parse(value, chunk.len())) {
                Ok((redis_now, counts)) => self.settle_ok(chunk, &counts, redis_now, sent, answered),
                Err(error) => {
                    if error.is_unreachable() {
                        gone.store(true, Ordering::Relaxed);
                    }
                    if self.failing_since.load(Ordering::Relaxed) == 0 {
                        tracing::warn!(%error, buckets = chunk.len(), "approximate sync call failed: increments kept for the next wake");
                    }
                    self.settle_failed(chunk.to_vec(), answered);
                }
            }
        });
        let heartbeat = async {
            if beat {
                self.beat(via, target, Instant::now() + deadline).await;
            }
        };
        let resets = async {
            if follow {
                self.follow_resets(via, Instant::now() + deadline).await;
            }
        };
        let started = Instant::now();
        join3(heartbeat, join_all(calls), resets).await;
        tracing::trace!(
            buckets = items.len(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "approximate sync wake"
        );
        items.len()
    }
}
