//! Batching across requests (`--no-batch` turns it off): the charges of requests queued
//! for one server go to Redis together, as one `batch.lua` call that decides each group on
//! its own (`lua/README.md`, "Batches").
//!
//! Why: a script call costs Redis a fixed ~5 µs of CPU (reading and parsing the command,
//! entering Lua, the script's definitions, `TIME`, writing the reply) before the first
//! charge; a decision itself costs ~5 µs more (docs/performance.md, "Session 9"). One call
//! for many charges pays the fixed part once.
//!
//! How, without a timer: a server has a few *lanes* (calls in flight from this instance at
//! once: [`LANES_PER_CONNECTION`] per connection). A request that finds a lane free and no
//! one queued sends its own charges at once — one call, whatever its descriptors — so a
//! charge never waits for company. A request that finds every lane busy queues; when a
//! lane's call ends, the lane takes everything queued (up to `max_charges` charges) as its
//! next call. Under load the calls grow with the queue; at low load nothing changes.
//!
//! The rules, each kept here:
//! - **A batch is owned by a task, never by one request's future.** The request that holds
//!   a lane holds a [`Lane`] across its own call; when that call ends or its future is
//!   dropped (the client reset the stream), the `Lane`'s drop takes the queue and spawns a
//!   task that sends it and holds the lane in turn.
//! - **A rider past its own deadline is withdrawn before the write**, as is one whose
//!   request is gone (its receiver dropped): it is not charged and answers `Timeout` by
//!   itself. **Each rider waits only to its own deadline**; the call runs to the latest.
//! - **What fails in Redis fails its group only**, for every failure Redis can cause:
//!   `batch.lua` checks each group's arguments and reads its keys (`redis.pcall`: a key of
//!   the wrong type is an error returned, not raised) before anything of the group is
//!   decided, and answers an error entry per member of a group that failed there, which
//!   changes nothing; the other groups are decided and written. There is no `pcall` per
//!   group: deciding raises no error on anything a key can hold — unreadable state is no
//!   state, every number is clamped (`tests/differential/junk.rs`) — so a Lua error past
//!   the reads would be a bug in the script, and would fail the whole call.
//!   A write Redis refuses at the end (out of memory: then every write fails) is the error
//!   of every group that wrote. A call that failed or timed out is every rider's error:
//!   each "may have run", and nothing is re-sent.
//! - **Bounded**: at most `max_charges` charges per call (`MAX_CHARGES`, and never past
//!   `--redis-max-inflight`), counted as that many commands against
//!   `--redis-max-inflight` (`Link::send_weighted`), since a stalled Redis may run them
//!   all after their requests were answered. A long script blocks every other client of
//!   that Redis: 64 charges run in ~0.4 ms.
//! - **The breaker counts a call once**, batched or coalesced alike: by its first rider
//!   ([`Charged::shared`] is set for the others). A rider withdrawn or timed out before a
//!   call took it counts for nothing: the call in flight that held it up counts.
//! - **The over-limit cache learns per rider**: each request gets its own results back and
//!   `Guarded` learns from them as from any call.
//!
//! With `--redis-windows plain` a call's window consumes are plain commands instead, every
//! rider's in one pipeline beside the script call for the rest (`batch::plain`): the same
//! lanes, the same bound, one write for many requests.
//!
//! Only the single-node and Sentinel stores batch. On a cluster one script call may only
//! touch one slot; concurrent requests there rarely share one (16,384 slots), so the
//! cluster keeps one pipeline per master per request (see `cluster`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::algorithm::Decision;

use super::super::charge::{Charge, Groups, StoreError};
use super::super::remote::Charged;
use super::health::Health;
use super::link::Link;
use super::plain::Windows;
use super::scripts::{charge_groups_pipelined, parse_batch, send_entries, Scripts};

mod plain;

/// Calls in flight at once from one instance to one server, per connection. One: the
/// fewer lanes, the more each call carries (measured in docs/performance.md, "Session 10":
/// two lanes per connection halved the charges per call for no more requests per second).
pub const LANES_PER_CONNECTION: usize = 1;

/// Most charges in one call, whatever `--redis-max-inflight` allows.
pub const MAX_CHARGES: usize = 64;

type Results = Vec<Result<Decision, StoreError>>;

/// A rider's results and whether it was its call's first rider (the one that counts the
/// call for the breaker).
type Answer = (Results, bool);

/// A request's charges queued for the next call.
struct Rider {
    charges: Vec<Charge>,
    groups: Groups,
    deadline: Instant,
    answer: oneshot::Sender<Answer>,
}

/// Lanes in use, and who waits for one.
#[derive(Default)]
struct Queue {
    busy: usize,
    riders: VecDeque<Rider>,
}

/// One server's batching: its lanes and its queue.
pub struct Batcher {
    link: Arc<Link>,
    scripts: Arc<Scripts>,
    health: Arc<Health>,
    lanes: usize,
    max_charges: usize,
    /// `--redis-max-inflight`: with plain windows a call's bound is its commands, not its
    /// charges (see [`call_bound`](Batcher::call_bound)).
    max_inflight: usize,
    queue: Mutex<Queue>,
    /// `--redis-windows plain`: window consumes go as plain commands (`batch::plain`).
    plain: AtomicBool,
}

/// What a request does: send its own call on a free lane, or wait for a lane's next call.
enum Turn {
    Lead,
    Wait(oneshot::Receiver<Answer>),
}

impl Batcher {
    /// Batches over `link` with `lanes` calls in flight at once, at most `max_charges`
    /// charges per call.
    pub fn new(
        link: Arc<Link>,
        scripts: Arc<Scripts>,
        health: Arc<Health>,
        lanes: usize,
        max_charges: usize,
    ) -> Batcher {
        Batcher {
            link,
            scripts,
            health,
            lanes: lanes.max(1),
            max_charges: max_charges.clamp(1, MAX_CHARGES),
            max_inflight: max_charges.max(1),
            queue: Mutex::new(Queue::default()),
            plain: AtomicBool::new(false),
        }
    }

    /// Decides window consumes by `windows` (`--redis-windows`; `Lua` until called).
    pub fn set_windows(&self, windows: Windows) {
        self.plain.store(windows == Windows::Plain, Ordering::Relaxed);
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Charges queued now (for tests).
    pub fn queued(&self) -> usize {
        self.lock().riders.iter().map(|r| r.charges.len()).sum()
    }

    /// Lanes carrying a call now (for tests).
    pub fn lanes_in_use(&self) -> usize {
        self.lock().busy
    }

    /// Charges `batch` (whose `groups` stand or fall together) by `deadline`: at once on a
    /// free lane, else with the next call of a lane (see the module doc).
    pub async fn charge(self: &Arc<Self>, batch: &[Charge], groups: &Groups, deadline: Instant) -> Charged {
        let turn = {
            let mut queue = self.lock();
            if queue.busy < self.lanes && queue.riders.is_empty() {
                queue.busy += 1;
                Turn::Lead
            } else {
                let (answer, receiver) = oneshot::channel();
                queue.riders.push_back(Rider {
                    charges: batch.to_vec(),
                    groups: groups.clone(),
                    deadline,
                    answer,
                });
                Turn::Wait(receiver)
            }
        };
        match turn {
            Turn::Lead => {
                let _lane = Lane { batcher: self.clone() };
                let results = self.send(&[(batch, groups)], deadline).await;
                Charged { results, refunds: Vec::new(), shared: false }
            }
            Turn::Wait(mut receiver) => {
                match crate::store::deadline::within(deadline, &mut receiver).await {
                    Some(Ok((results, first))) => Charged { results, refunds: Vec::new(), shared: !first },
                    // Withdrawn (its deadline passed before a call took it), or never sent
                    // (the runtime is shutting down): not charged. Timed out while its call
                    // is out: it may have run. A timeout either way; the call counts.
                    Some(Err(_)) | None => Charged {
                        results: vec![Err(StoreError::Timeout); batch.len()],
                        refunds: Vec::new(),
                        shared: true,
                    },
                }
            }
        }
    }

    /// One call for `riders` (a request's charges and their groups each), by `deadline`:
    /// with `--redis-windows plain` their window consumes as plain commands beside the rest
    /// (`batch::plain`), else [`send_scripts`](Batcher::send_scripts). One result per
    /// charge, riders in order.
    async fn send(&self, riders: &[(&[Charge], &Groups)], deadline: Instant) -> Results {
        let results = match self.plain.load(Ordering::Relaxed) {
            true => self.send_mixed(riders, deadline).await,
            false => self.send_scripts(riders, deadline).await,
        };
        self.health.record(&results);
        results
    }

    /// One script call for `riders`: one rider of one charge takes its algorithm's script
    /// (the cheapest call); anything else is one `batch.lua` call.
    async fn send_scripts(&self, riders: &[(&[Charge], &Groups)], deadline: Instant) -> Results {
        match riders {
            [(batch, groups)] if batch.len() == 1 => {
                charge_groups_pipelined(&self.link, &self.scripts, batch, groups, deadline).await
            }
            _ => {
                let charges: usize = riders.iter().map(|(batch, _)| batch.len()).sum();
                let add = |pipe: &mut redis::Pipeline, _: usize, call| {
                    pipe.add_command(self.scripts.batch(riders, call));
                };
                let mut replies = send_entries(&self.link, 1, charges, deadline, add).await;
                let reply =
                    replies.pop().unwrap_or_else(|| Err(StoreError::Server("no reply for a batch".into())));
                parse_batch(reply, charges)
            }
        }
    }

    /// Most charges in one call: `max_charges`, or with plain windows as many as fit in
    /// `--redis-max-inflight` at four commands each (a call's commands must stay within the
    /// connection's cap, as a script call's charges do: else it fails `Overloaded` beside
    /// any other call on its connection).
    fn call_bound(&self) -> usize {
        match self.plain.load(Ordering::Relaxed) {
            true => (self.max_inflight / super::plain::COMMANDS).clamp(1, MAX_CHARGES),
            false => self.max_charges,
        }
    }

    /// Takes the next call's riders off the queue (at least one, then while they fit in
    /// [`call_bound`](Batcher::call_bound)), or frees the lane when none wait.
    fn next_or_free(&self) -> Vec<Rider> {
        let bound = self.call_bound();
        let mut queue = self.lock();
        let mut taken: Vec<Rider> = Vec::new();
        let mut charges = 0;
        while let Some(rider) = queue.riders.front() {
            if !taken.is_empty() && charges + rider.charges.len() > bound {
                break;
            }
            charges += rider.charges.len();
            taken.extend(queue.riders.pop_front());
        }
        if taken.is_empty() {
            queue.busy = queue.busy.saturating_sub(1);
        }
        taken
    }

    /// Sends the riders still wanted as one call and answers each.
    async fn send_riders(&self, mut riders: Vec<Rider>) {
        let now = Instant::now();
        // Withdrawn: the request is gone, or its deadline passed (it answers Timeout itself).
        riders.retain(|r| !r.answer.is_closed() && r.deadline > now);
        let Some(deadline) = riders.iter().map(|r| r.deadline).max() else {
            return;
        };
        let layout: Vec<(&[Charge], &Groups)> =
            riders.iter().map(|r| (r.charges.as_slice(), &r.groups)).collect();
        let mut results = self.send(&layout, deadline).await.into_iter();
        drop(layout);
        for (i, rider) in riders.into_iter().enumerate() {
            let mine: Results = results.by_ref().take(rider.charges.len()).collect();
            // A receiver gone by now (its request was cancelled after the send) is fine.
            let _ = rider.answer.send((mine, i == 0));
        }
    }
}

/// A lane held by a call: dropped when the call ends or its future is cancelled, it hands
/// the queue to a task of its own (never to a request's future), or frees the lane.
struct Lane {
    batcher: Arc<Batcher>,
}

impl Drop for Lane {
    fn drop(&mut self) {
        let riders = self.batcher.next_or_free();
        if riders.is_empty() {
            return;
        }
        let batcher = self.batcher.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    let _lane = Lane { batcher: batcher.clone() };
                    batcher.send_riders(riders).await;
                });
            }
            // No runtime (it is shutting down): the riders' senders drop, nothing was sent;
            // the lane is free again.
            Err(_) => {
                drop(riders);
                let mut queue = batcher.lock();
                queue.busy = queue.busy.saturating_sub(1);
            }
        }
    }
}

#[cfg(test)]
mod tests;
