//! Per-key coalescing of charges on the Redis client path (`--no-coalesce` turns it off).
//!
//! While a script call charging bucket K is in flight from this instance, later charges of
//! K do not send their own: they wait, and go together in the next call for K as one
//! script call — `joint.lua` in its `each` mode (`Groups::coalesced`), which applies them in
//! arrival order, each only if it fits, and answers each its own decision. Exact: the
//! answers the same charges sent one by one in that order would get (see `lua/README.md`).
//!
//! Where it sits: inside `Guarded`, after the over-limit cache and the breaker's admission,
//! in front of the client (`Remote`). Every request still passes both guards itself; the
//! breaker records a coalesced call once (by its first member, see [`Charged::shared`]).
//! A batch is one command on the wire, but counts as the charges it carries against
//! `--redis-max-inflight` (`Link::send_weighted`), and holds at most that many (the rest
//! wait for the next call): the charges a stalled Redis may run for requests already
//! answered stay within the cap, as without coalescing.
//!
//! Only a request of one charge decided alone waits for a call in flight. A request of
//! several charges sends them all in its own pipeline (leading the keys that were free, so
//! that single charges queue behind it), and a request with joint groups (several limits of
//! one descriptor, `all_or_nothing`) goes as it is, as whole calls.
//!
//! Data structures and cost. A table of [`SHARDS`] mutex-guarded maps from the 64-bit hash
//! of a bucket key to the charges waiting for it; an entry exists while a call for that
//! key is in flight. The fast path (no call in flight for K) is one probe and insert under
//! one shard's lock, then one remove when the call ends: no task, no allocation, no key
//! copy. Only a charge that finds its key busy allocates (its copy and a oneshot channel).
//!
//! Ownership and cancellation. The charge that found the key free (the *lead*) holds a
//! [`Lead`] across its call; when the call ends or its request is cancelled, `Lead`'s drop
//! takes the waiters and spawns a task that sends them — so no request's future owns
//! anyone else's batch. Before sending, the task withdraws (does not charge) every waiter
//! whose request is gone (its receiver dropped) or whose deadline has passed; each waiter
//! waits for its answer only until its own deadline (then `Timeout`, answered by the
//! failure policy as any store timeout). Once sent, a call follows today's rules: a
//! timed-out member may have been charged, and nothing is re-sent. The task holds a
//! `Lead` for the batch it sends, so the next waiters follow the same way.
//!
//! Hashes are keyed (`RandomState`), so a collision is luck, not an attack; a batch that
//! ever held two keys is sent as one `each` call per key, in one pipeline.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::algorithm::Decision;

use super::charge::{Charge, Groups, StoreError};
use super::remote::{Charged, Remote};

/// Lock shards of the table: enough that two cores rarely meet on one.
pub const SHARDS: usize = 64;

/// One charge's answer and whether it was its batch's first member (the one that counts
/// the call for the breaker).
type Answer = (Result<Decision, StoreError>, bool);

/// A charge waiting for the call in flight on its key to end.
struct Waiter {
    charge: Charge,
    deadline: Instant,
    answer: oneshot::Sender<Answer>,
}

/// One lock shard: key hash → the charges waiting for the call in flight on that key.
type Shard = HashMap<u64, Vec<Waiter>, BuildHasherDefault<Spread>>;

/// Which keys have a call in flight, and who waits for each.
pub struct Coalescer {
    hasher: RandomState,
    /// Most charges in one coalesced call (`--redis-max-inflight`).
    max_batch: usize,
    shards: Box<[Mutex<Shard>]>,
}

impl std::fmt::Debug for Coalescer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coalescer").field("keys_in_flight", &self.in_flight()).finish()
    }
}

/// What a charge does: send its own call, or wait for the one in flight.
enum Turn {
    Lead,
    Wait(oneshot::Receiver<Answer>),
}

impl Coalescer {
    /// An empty table whose calls carry at most `max_batch` charges each.
    pub fn new(max_batch: usize) -> Coalescer {
        Coalescer {
            hasher: RandomState::new(),
            max_batch: max_batch.max(1),
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::default())).collect(),
        }
    }

    /// Keys with a call in flight now (for tests and `Debug`).
    pub fn in_flight(&self) -> usize {
        self.shards.iter().map(|s| lock(s).len()).sum()
    }

    /// Charges waiting for a call in flight now (for tests).
    pub fn waiting(&self) -> usize {
        self.shards.iter().map(|s| lock(s).values().map(Vec::len).sum::<usize>()).sum()
    }

    fn shard(&self, hash: u64) -> MutexGuard<'_, Shard> {
        // The high bits pick the shard; the map uses the whole hash.
        lock(&self.shards[(hash >> 58) as usize % SHARDS])
    }

    /// Leads `charge`'s key (no call in flight: one probe and insert) or queues behind it.
    fn turn(&self, hash: u64, charge: &Charge, deadline: Instant) -> Turn {
        let mut shard = self.shard(hash);
        match shard.get_mut(&hash) {
            None => {
                shard.insert(hash, Vec::new());
                Turn::Lead
            }
            Some(waiting) => {
                let (answer, receiver) = oneshot::channel();
                waiting.push(Waiter { charge: charge.clone(), deadline, answer });
                Turn::Wait(receiver)
            }
        }
    }

    /// Leads `hash`'s key if no call is in flight for it (one probe and insert); never queues.
    fn try_lead(&self, hash: u64) -> bool {
        let mut shard = self.shard(hash);
        if shard.contains_key(&hash) {
            return false;
        }
        shard.insert(hash, Vec::new());
        true
    }

    /// Ends a lead's turn: the waiters to send next (the first `max_batch`), or none (the
    /// key is free again).
    fn release(&self, hash: u64) -> Vec<Waiter> {
        let mut shard = self.shard(hash);
        match shard.get_mut(&hash) {
            Some(waiting) if waiting.len() > self.max_batch => waiting.drain(..self.max_batch).collect(),
            Some(waiting) if !waiting.is_empty() => std::mem::take(waiting),
            _ => {
                shard.remove(&hash);
                Vec::new()
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Charges `batch` through `client`, coalescing charges of keys with a call in flight (see
/// the module doc). Joint groups go straight to the client.
pub async fn charge<C>(
    table: &Arc<Coalescer>,
    client: &Arc<C>,
    batch: &[Charge],
    groups: &Groups,
    deadline: Instant,
) -> Charged
where
    C: Remote + Send + Sync + 'static,
{
    if !groups.is_each() {
        return client.charge(batch, groups, deadline).await;
    }
    if let [charge] = batch {
        let hash = table.hasher.hash_one(&charge.key);
        return match table.turn(hash, charge, deadline) {
            Turn::Lead => {
                let _lead = Lead { table, client, hash };
                client.charge(batch, groups, deadline).await
            }
            Turn::Wait(receiver) => {
                let (result, first) = wait(receiver, deadline).await;
                Charged { results: vec![result], refunds: Vec::new(), shared: !first }
            }
        };
    }
    charge_several(table, client, batch, deadline).await
}

/// A request of several charges never waits: all of them go as the request's own pipeline
/// (one round trip, as without coalescing), and it leads the keys that were free, so that
/// single charges arriving meanwhile queue behind its call. Waiting for a busy key's next
/// call would cost such a request a second round trip for one of its descriptors: measured
/// at Zipf 1.1 with 4 descriptors, that made requests slower than not coalescing at all
/// (docs/performance.md). Exactness does not depend on it: Redis runs the calls of one key
/// one after the other whatever their order.
async fn charge_several<C>(
    table: &Arc<Coalescer>,
    client: &Arc<C>,
    batch: &[Charge],
    deadline: Instant,
) -> Charged
where
    C: Remote + Send + Sync + 'static,
{
    let leads: Vec<Lead<'_, C>> = batch
        .iter()
        .filter_map(|charge| {
            let hash = table.hasher.hash_one(&charge.key);
            table.try_lead(hash).then_some(Lead { table, client, hash })
        })
        .collect();
    let charged = client.charge(batch, &Groups::each(), deadline).await;
    drop(leads);
    charged
}

/// A waiter's answer by its own deadline. A sender dropped unanswered means the charge was
/// withdrawn (its deadline passed before its batch was sent) or, with the runtime shutting
/// down, never sent: a timeout either way, and it was not charged.
async fn wait(mut receiver: oneshot::Receiver<Answer>, deadline: Instant) -> Answer {
    match crate::store::deadline::within(deadline, &mut receiver).await {
        Some(Ok(answer)) => answer,
        Some(Err(_)) | None => (Err(StoreError::Timeout), false),
    }
}

/// The turn of the call in flight for one key. Dropped when the call ends or its future is
/// cancelled: hands the waiters to a task of their own (never to a request's future).
struct Lead<'a, C: Remote + Send + Sync + 'static> {
    table: &'a Arc<Coalescer>,
    client: &'a Arc<C>,
    hash: u64,
}

impl<C: Remote + Send + Sync + 'static> Drop for Lead<'_, C> {
    fn drop(&mut self) {
        let waiters = self.table.release(self.hash);
        if waiters.is_empty() {
            return;
        }
        let (table, client, hash) = (self.table.clone(), self.client.clone(), self.hash);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    let _lead = Lead { table: &table, client: &client, hash };
                    send(&*client, waiters).await;
                });
            }
            // No runtime (it is shutting down): the waiters' senders drop, nothing was sent.
            Err(_) => {
                drop(waiters);
                drop(table.release(hash));
            }
        }
    }
}

/// Sends the waiters that are still wanted as one coalesced call and answers each.
async fn send<C: Remote>(client: &C, mut waiters: Vec<Waiter>) {
    let now = Instant::now();
    // Withdrawn: the request is gone, or its deadline passed (it answers Timeout itself).
    waiters.retain(|w| !w.answer.is_closed() && w.deadline > now);
    let Some(deadline) = waiters.iter().map(|w| w.deadline).max() else {
        return;
    };
    // One run per key in arrival order (one key but for a hash collision).
    waiters.sort_by(|a, b| a.charge.key.cmp(&b.charge.key));
    let mut ends = Vec::new();
    for i in 1..waiters.len() {
        if waiters[i].charge.key != waiters[i - 1].charge.key {
            ends.push(i);
        }
    }
    ends.push(waiters.len());
    let (charges, answers): (Vec<Charge>, Vec<_>) = waiters.into_iter().map(|w| (w.charge, w.answer)).unzip();
    let groups = if charges.len() == 1 { Groups::each() } else { Groups::coalesced(ends) };
    let Charged { results, .. } = client.charge(&charges, &groups, deadline).await;
    let mut results = results.into_iter();
    for (i, answer) in answers.into_iter().enumerate() {
        let result =
            results.next().unwrap_or(Err(StoreError::Server("no reply for a coalesced charge".into())));
        // A receiver gone by now (its request was cancelled after the send) is fine.
        let _ = answer.send((result, i == 0));
    }
}

/// The map's hasher: the keys are already keyed SipHash values, used as they are.
#[derive(Default)]
struct Spread(u64);

impl Hasher for Spread {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

#[cfg(test)]
mod tests;
