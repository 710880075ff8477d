//! Charging through the lease table (`lease`): serve from leases, refill in tasks, return
//! from the sweeper. Above the dispatch (`Store`): refills and returns are charges like
//! any other, through the whole store.
//!
//! `Store::charge_leasing` is the request path. Each leasable charge asks the table
//! (`take`); a refill is spawned as a task that owns the block's charge and its answer, so
//! a request dropped while it waits strands nothing. Waiters wait for the refill (within
//! their own deadline) and ask again — one the block did not cover may start or wait for
//! the next, up to `WAIT_ROUNDS` refills; whatever the leases did not answer goes to the
//! store in one call, as without leases. Refills and returns go through
//! [`Store::charge`], so the breaker and the over-limit cache see them like any charge.
//!
//! A waiter whose deadline passes while it waits answers as a plain store timeout would,
//! never more open: from a lease that holds enough by then, else from the over-limit cache
//! (a denial Redis just gave), else `StoreError::Timeout` — the domain's failure policy,
//! counted as `outcome="timeout"`. It starts no refill past its deadline.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::algorithm::{Decision, Hits};

use super::charge::{Charge, Groups, StoreError};
use super::lease::{LeaseStats, LeaseTable, Refill, Return, Take};
use super::probe::{self, Answered};
use super::Store;

/// How many refills a request may wait for before it goes to Redis alone.
const WAIT_ROUNDS: usize = 3;
/// Returns sent per sweeper tick (one pipeline).
const RETURN_BATCH: usize = 512;

impl Store {
    /// The lease table, on a Redis store built with one.
    pub fn leases(&self) -> Option<&LeaseTable> {
        match self {
            Store::Memory(_) => None,
            Store::Redis(r) => r.leases(),
            Store::Cluster(c) => c.leases(),
            Store::Sentinel(s) => s.leases(),
        }
    }

    /// Whether this instance holds, or is taking, a lease on bucket `key` (the hot-key
    /// view's `leased`). False on a store without leases.
    pub fn is_leased(&self, key: &str) -> bool {
        self.leases().is_some_and(|t| t.is_leased(key, Instant::now()))
    }

    /// [`charge_groups`](Self::charge_groups), serving from leases the charges whose
    /// `leasable` flag is set (groups of one `Consume` only; an empty slice: none). A
    /// refund drops its key's lease. Answers one result per charge, in order, by `deadline`.
    pub async fn charge_leasing(
        self: &Arc<Self>,
        batch: &[Charge],
        groups: &Groups,
        leasable: &[bool],
        deadline: Instant,
    ) -> Vec<Result<Decision, StoreError>> {
        let Some(table) = self.leases() else { return self.charge_groups(batch, groups, deadline).await };
        let now = Instant::now();
        for charge in batch.iter().filter(|c| matches!(c.hits, Hits::Refund(_))) {
            table.drop_key(&charge.key, now, true);
        }
        if !leasable.contains(&true) {
            return self.charge_groups(batch, groups, deadline).await;
        }
        let single = |i: usize| -> Option<u64> {
            match (leasable.get(i), &batch[i].hits) {
                (Some(true), Hits::Consume(n)) => Some(*n),
                _ => None,
            }
        };
        let mut results: Vec<Option<Result<Decision, StoreError>>> = vec![None; batch.len()];
        let mut waits: Vec<(usize, watch::Receiver<bool>)> = Vec::new();
        for range in groups.ranges(batch.len()) {
            let i = range.start;
            let Some(hits) = single(i).filter(|_| range.len() == 1) else { continue };
            match table.take(&batch[i].key, &batch[i].params, hits, now, true) {
                Take::Served(d) => results[i] = Some(Ok(d)),
                Take::Wait(waiting) => waits.push((i, waiting)),
                Take::Refill(refill) => {
                    waits.push((i, refill.subscribe()));
                    tokio::spawn(refill_task(self.clone(), refill, table.settings().store_timeout));
                }
                Take::Remote => {}
            }
        }
        // A waiter the block did not cover may start (or wait for) the next one: a few
        // rounds, each within the request's deadline, then Redis alone.
        for _ in 0..WAIT_ROUNDS {
            if waits.is_empty() {
                break;
            }
            join_all(waits.iter_mut().map(|(_, w)| wait(w, deadline))).await;
            let now = Instant::now();
            if now >= deadline {
                // Out of time: a lease that holds enough now still answers; the others go
                // on as any charge past its deadline (the over-limit cache, else a store
                // timeout: the failure policy). No refill is started for them.
                for (i, _) in waits.drain(..) {
                    let (charge, hits) = (&batch[i], single(i).unwrap_or(1));
                    results[i] = table.spend(&charge.key, &charge.params, hits, now).map(Ok);
                }
                break;
            }
            let mut again = Vec::new();
            for (i, _) in waits {
                let (charge, hits) = (&batch[i], single(i).unwrap_or(1));
                match table.take(&charge.key, &charge.params, hits, now, false) {
                    Take::Served(d) => results[i] = Some(Ok(d)),
                    Take::Wait(waiting) => again.push((i, waiting)),
                    Take::Refill(refill) => {
                        again.push((i, refill.subscribe()));
                        tokio::spawn(refill_task(self.clone(), refill, table.settings().store_timeout));
                    }
                    Take::Remote => {}
                }
            }
            waits = again;
        }
        self.charge_rest(table, batch, groups, leasable, results, deadline).await
    }

    /// Sends the charges the leases did not answer, in one call, and teaches the table
    /// what Redis said of the leasable ones.
    async fn charge_rest(
        &self,
        table: &LeaseTable,
        batch: &[Charge],
        groups: &Groups,
        leasable: &[bool],
        mut results: Vec<Option<Result<Decision, StoreError>>>,
        deadline: Instant,
    ) -> Vec<Result<Decision, StoreError>> {
        probe::note(|seen| {
            let leased = batch.iter().zip(&results).filter(|(_, r)| r.is_some());
            seen.answered.extend(leased.map(|(c, _)| (c.key.clone(), Answered::Lease)));
        });
        let mut missing = Vec::new();
        let mut ends = Vec::new();
        for range in groups.ranges(batch.len()) {
            if results[range.clone()].iter().all(Option::is_some) {
                continue;
            }
            missing.extend(range);
            ends.push(missing.len());
        }
        if !missing.is_empty() {
            let remote: Vec<Charge> = missing.iter().map(|&i| batch[i].clone()).collect();
            let answers = self.charge_groups(&remote, &Groups::from_ends(ends), deadline).await;
            let now = Instant::now();
            for (i, result) in missing.into_iter().zip(answers) {
                if leasable.get(i) == Some(&true) && matches!(batch[i].hits, Hits::Consume(_)) {
                    table.learn(&batch[i].key, &batch[i].params, &result, now);
                }
                results[i] = Some(result);
            }
        }
        // Every slot is filled: by a lease or by the store.
        results.into_iter().map(|r| r.unwrap_or(Err(StoreError::Timeout))).collect()
    }
}

/// Waits until the refill `waiting` watches is done, or `deadline`.
async fn wait(waiting: &mut watch::Receiver<bool>, deadline: Instant) {
    // A dropped sender (the task ended without an answer) also ends the wait.
    let _ = tokio::time::timeout_at(deadline, waiting.wait_for(|done| *done)).await;
}

/// Takes `refill.block` tokens in one charge and hands the answer to the table. Owned by
/// its task: no request's cancellation can stop it halfway.
async fn refill_task(store: Arc<Store>, refill: Refill, timeout: Duration) {
    let sent = Instant::now();
    let charge = Charge { key: refill.key.clone(), params: refill.params, hits: Hits::Consume(refill.block) };
    let result = store.charge(&[charge], sent + timeout).await.pop().unwrap_or(Err(StoreError::Timeout));
    if let Some(table) = store.leases() {
        table.filled(refill, sent, &result, Instant::now());
    }
}

/// The sweeper: every eighth of a lease time, ends expired leases and sends their unused
/// tokens back, until `stop` resolves; then gives every lease back once. `report` gets the
/// table's counters after each tick (the metrics).
pub async fn sweep_leases(store: Arc<Store>, stop: impl Future<Output = ()>, report: impl Fn(&LeaseStats)) {
    let Some(table) = store.leases() else { return };
    let timeout = table.settings().store_timeout;
    let mut tick = tokio::time::interval((table.settings().time / 8).max(Duration::from_millis(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => break,
            _ = tick.tick() => {
                let returns = table.sweep(Instant::now(), RETURN_BATCH, false);
                send_returns(&store, table, returns, timeout).await;
                report(&table.stats());
            }
        }
    }
    let returns = table.sweep(Instant::now(), usize::MAX, true);
    send_returns(&store, table, returns, timeout).await;
}

/// Sends `returns` as refunds: GCRA returns together, window returns together with the
/// earliest of their last moments as the deadline.
async fn send_returns(store: &Store, table: &LeaseTable, returns: Vec<Return>, timeout: Duration) {
    if returns.is_empty() {
        return;
    }
    let now = Instant::now();
    let (windows, plain): (Vec<Return>, Vec<Return>) = returns.into_iter().partition(|r| r.by.is_some());
    let window_deadline =
        windows.iter().filter_map(|r| r.by).min().map_or(now + timeout, |by| by.min(now + timeout));
    let send = |returns: Vec<Return>, deadline: Instant| async move {
        if returns.is_empty() {
            return;
        }
        let charges: Vec<Charge> = returns
            .iter()
            .map(|r| Charge { key: r.key.clone(), params: r.params, hits: Hits::Refund(r.tokens) })
            .collect();
        let results = store.charge(&charges, deadline).await;
        let now = Instant::now();
        for (ret, result) in returns.into_iter().zip(results) {
            table.returned(ret, &result, now);
        }
    };
    tokio::join!(send(plain, now + timeout), send(windows, window_deadline));
}
