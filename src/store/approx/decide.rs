//! Deciding on the estimates: a charge alone or a group all or nothing, by its window
//! algorithm (`joint` for groups), then the share rule — between two syncs of a bucket an
//! instance admits at most its share of the headroom the last sync showed. A consume larger
//! than a whole share, on an estimate with room for it, is not denied for good: the group
//! is claimed (`claim`) and decided against Redis by the caller.

use std::sync::atomic::Ordering;
use std::sync::MutexGuard;

use crate::algorithm::joint::{self, Member};
use crate::algorithm::{self, Decision, Hits};
use crate::store::charge::{Charge, Groups, StoreError};
use crate::store::memory::now_us;

use super::bucket::Bucket;
use super::claim::{Claim, Held, Local};
use super::table::{lock, queue, Approx, Shard};

impl Approx {
    /// Decides a batch whose `groups` stand or fall together (see [`Groups`]), locally.
    /// Every charge must be [`served`](Self::serves). Answers a store error only for a
    /// bucket whose estimate is stale (see the module doc). A consume larger than a share
    /// is denied here (`Store::charge_approximate` claims it instead, see
    /// [`decide_group_at`]).
    ///
    /// [`decide_group_at`]: Self::decide_group_at
    pub fn charge_groups(&self, batch: &[Charge], groups: &Groups) -> Vec<Result<Decision, StoreError>> {
        let now = now_us();
        let mut results = Vec::with_capacity(batch.len());
        for range in groups.ranges(batch.len()) {
            results.extend(self.charge_group_at(&batch[range], now));
        }
        results
    }

    /// One group decided locally at local time `now` (µs), its consumes larger than a share
    /// denied by the share rule: [`decide_group_at`](Self::decide_group_at) without claims.
    pub fn charge_group_at(&self, group: &[Charge], now: u64) -> Vec<Result<Decision, StoreError>> {
        match self.decide_group_at(group, now, false) {
            Local::Decided(results) => results,
            // Not answered without claims; never reached.
            Local::Exact(_) | Local::Busy => vec![Ok(self.share_denial()); group.len()],
        }
    }

    /// One group at local time `now` (µs), decided on the estimates — or, with `claims`,
    /// when a consume is larger than its bucket's whole share and the estimates have room
    /// for the group, claimed for a decision against Redis ([`Local::Exact`]; a bucket
    /// another call holds: [`Local::Busy`]). Stale estimates answer a store error.
    pub fn decide_group_at(&self, group: &[Charge], now: u64, claims: bool) -> Local<'_> {
        match group {
            [charge] => self.charge_one(charge, now, claims),
            _ => self.charge_several(group, now, claims),
        }
    }

    /// A charge decided alone, at local time `now`: one shard lock, no allocation but a
    /// new bucket's key (and its key again when it first has something to send). What
    /// [`charge_several`] does for a group of one.
    ///
    /// [`charge_several`]: Self::charge_several
    fn charge_one(&self, charge: &Charge, now: u64, claims: bool) -> Local<'_> {
        let mut shard = lock(&self.shards[self.shard_of(&charge.key)]);
        let index = match shard.map.get_index_of(&*charge.key) {
            Some(index) => index,
            None => {
                // Made even when stale: its own sync (or read) may prove its master healthy.
                self.make_room(&mut shard, self.redis_now(now), &[]);
                shard.map.insert_full(charge.key.as_str().into(), Bucket::new(charge.params, self.offset())).0
            }
        };
        let Shard { map, dirty, .. } = &mut *shard;
        let Some((key, bucket)) = map.get_index_mut(index) else {
            let vanished = StoreError::Server("approximate bucket vanished under its lock".into());
            return Local::Decided(vec![Err(vanished)]);
        };
        if self.bucket_stale(bucket, now) {
            return Local::Decided(vec![Err(self.stale(1))]);
        }
        // A reload may change the limit: the estimate is read under the new one.
        bucket.params = charge.params;
        let redis_now = bucket.redis_now(now);
        let state = Some(bucket.estimate(redis_now).state());
        let mut decision = algorithm::apply(state, redis_now, &charge.params, charge.hits).decision;
        if decision.allowed && self.over_share(bucket, charge.hits, 0, redis_now) {
            if claims && self.beyond_share(bucket, charge.hits, redis_now) {
                if bucket.is_busy() {
                    return Local::Busy;
                }
                return Local::Exact(Claim::new(self, vec![Held::take(key, bucket, charge.hits, redis_now)]));
            }
            decision = self.share_denial();
        }
        if decision.allowed {
            match charge.hits {
                Hits::Consume(n) | Hits::Overdraw(n) => bucket.admit(n, redis_now, now),
                Hits::Refund(n) => bucket.refund(n, redis_now, now),
                Hits::Peek => {}
            }
        }
        queue(key, bucket, dirty);
        bucket.promote(redis_now);
        Local::Decided(vec![Ok(decision)])
    }

    /// Counts `charges` answered stale; the error they answer.
    pub(super) fn stale(&self, charges: usize) -> StoreError {
        self.counters.stale.fetch_add(charges as u64, Ordering::Relaxed);
        StoreError::Unavailable("approximate estimate stale: Redis not synced".into())
    }

    /// Whether `hits`, after `earlier` hits of the same group on the same bucket, would
    /// take `bucket` past this instance's share (see [`within_share`]). Always checked,
    /// alone too: an instance that believes itself alone may not be (one that joined has
    /// not been counted yet), and a share bounds what it writes unseen.
    pub(super) fn over_share(&self, bucket: &Bucket, hits: Hits, earlier: u64, now: u64) -> bool {
        let Hits::Consume(n) = hits else { return false };
        !within_share(bucket, n.saturating_add(earlier), now, self.instances())
    }

    /// Whether `hits` is more than this instance's whole share of `bucket` (nothing of
    /// its own spent): a consume the share rule alone would deny until the bucket empties.
    pub(super) fn beyond_share(&self, bucket: &Bucket, hits: Hits, now: u64) -> bool {
        let Hits::Consume(n) = hits else { return false };
        n > share(bucket, now, self.instances())
    }

    /// The answer of a charge the share rule denies (counted): retry after half an
    /// interval, when the bucket's next sync may widen the share.
    pub(super) fn share_denial(&self) -> Decision {
        self.counters.share_denials.fetch_add(1, Ordering::Relaxed);
        Decision { allowed: false, remaining: 0, reset_us: self.settings.interval_us() / 2 }
    }

    /// A group of two or more at local time `now` (µs): its shards locked in ascending
    /// order (the memory store's rule, so groups cannot deadlock), decided on the
    /// estimates, charged all or nothing — or claimed whole (see [`decide_group_at`]).
    /// Making room for a new member never evicts another member.
    ///
    /// [`decide_group_at`]: Self::decide_group_at
    fn charge_several(&self, group: &[Charge], now: u64, claims: bool) -> Local<'_> {
        let mut order: Vec<usize> = group.iter().map(|c| self.shard_of(&c.key)).collect();
        let shard_of = order.clone();
        order.sort_unstable();
        order.dedup();
        let mut locked: Vec<MutexGuard<'_, Shard>> = order.iter().map(|&i| lock(&self.shards[i])).collect();
        let guard = |i: usize| order.binary_search(&shard_of[i]).unwrap_or(0);
        let members: Vec<&str> = group.iter().map(|c| c.key.as_str()).collect();
        let offset = self.offset();
        for (i, charge) in group.iter().enumerate() {
            let shard = &mut locked[guard(i)];
            if !shard.map.contains_key(&*charge.key) {
                self.make_room(shard, now.saturating_add_signed(offset), &members);
                shard.map.insert(charge.key.as_str().into(), Bucket::new(charge.params, offset));
            }
        }
        let stale = group.iter().enumerate().any(|(i, c)| {
            locked[guard(i)].map.get(&*c.key).is_none_or(|bucket| self.bucket_stale(bucket, now))
        });
        if stale {
            return Local::Decided(vec![Err(self.stale(group.len())); group.len()]);
        }
        for (i, charge) in group.iter().enumerate() {
            if let Some(bucket) = locked[guard(i)].map.get_mut(&*charge.key) {
                // A reload may change the limit: the estimate is read under the new one.
                bucket.params = charge.params;
            }
        }
        let buckets: Vec<Bucket> = group
            .iter()
            .enumerate()
            .map(|(i, c)| {
                locked[guard(i)].map.get(&*c.key).copied().unwrap_or_else(|| Bucket::new(c.params, offset))
            })
            .collect();
        // One instant for the group, in the clock of its first member's master.
        let redis_now = buckets.first().map_or(self.redis_now(now), |b| b.redis_now(now));
        let (mut decisions, beyond) = self.decide(group, &buckets, redis_now);
        if claims && beyond {
            // A member larger than its share, on estimates with room for the whole group.
            return self.claim_group(group, &mut locked, guard, redis_now);
        }
        let all_allowed = decisions.iter().all(|d| d.allowed);
        for (i, charge) in group.iter().enumerate() {
            let Shard { map, dirty, .. } = &mut *locked[guard(i)];
            let Some((_, key, bucket)) = map.get_full_mut(&*charge.key) else { continue };
            if all_allowed {
                match charge.hits {
                    Hits::Consume(n) | Hits::Overdraw(n) => bucket.admit(n, redis_now, now),
                    Hits::Refund(n) => bucket.refund(n, redis_now, now),
                    Hits::Peek => {}
                }
            }
            queue(key, bucket, dirty);
            bucket.promote(redis_now);
        }
        if !all_allowed && group.len() > 1 {
            // A denied group: the members that passed describe their bucket as it is.
            for (decision, (charge, bucket)) in decisions.iter_mut().zip(group.iter().zip(&buckets)) {
                if decision.allowed {
                    let state = Some(bucket.estimate(redis_now).state());
                    *decision = algorithm::apply(state, redis_now, &charge.params, Hits::Peek).decision;
                    decision.allowed = true;
                }
            }
        }
        Local::Decided(decisions.into_iter().map(Ok).collect())
    }

    /// Claims every bucket of `group` (see `claim`; `slot(i)`: the index in `locked` of
    /// member `i`'s shard) at `now` (Redis clock), or answers [`Local::Busy`] if one of
    /// them has a call in flight.
    fn claim_group(
        &self,
        group: &[Charge],
        locked: &mut [MutexGuard<'_, Shard>],
        slot: impl Fn(usize) -> usize,
        now: u64,
    ) -> Local<'_> {
        let busy = group
            .iter()
            .enumerate()
            .any(|(i, c)| locked[slot(i)].map.get(&*c.key).is_some_and(Bucket::is_busy));
        if busy {
            return Local::Busy;
        }
        let mut held: Vec<Held> = Vec::with_capacity(group.len());
        for (i, charge) in group.iter().enumerate() {
            if let Some((_, key, bucket)) = locked[slot(i)].map.get_full_mut(&*charge.key) {
                match held.iter_mut().find(|h| *h.key == **key) {
                    Some(h) => h.reserve(bucket, charge.hits, now),
                    None => held.push(Held::take(key, bucket, charge.hits, now)),
                }
            }
        }
        Local::Exact(Claim::new(self, held))
    }

    /// The decisions of a group of two or more on the buckets' estimates at `now` (Redis
    /// clock): `joint::apply`'s answers, then the share rule for every consuming member —
    /// a bucket met twice spends its share once for both. And whether the estimates have
    /// room for the whole group but a member (with the earlier ones on its bucket) is
    /// larger than its bucket's whole share: a group to decide against Redis.
    pub(super) fn decide(&self, group: &[Charge], buckets: &[Bucket], now: u64) -> (Vec<Decision>, bool) {
        let mut keys: Vec<&str> = Vec::with_capacity(group.len());
        let mut stored = Vec::with_capacity(group.len());
        let members: Vec<Member> = group
            .iter()
            .zip(buckets)
            .map(|(c, b)| {
                let key = keys.iter().position(|k| *k == c.key).unwrap_or_else(|| {
                    keys.push(&c.key);
                    stored.push(Some(b.estimate(now).state()));
                    keys.len() - 1
                });
                Member { key, params: c.params, hits: c.hits }
            })
            .collect();
        let mut decisions = joint::apply(&stored, now, &members).decisions;
        let room = decisions.iter().all(|d| d.allowed);
        let mut beyond = false;
        let mut spent = vec![0u64; keys.len()];
        for ((decision, member), bucket) in decisions.iter_mut().zip(&members).zip(buckets) {
            if !decision.allowed {
                continue;
            }
            let earlier = spent[member.key];
            if let Hits::Consume(n) = member.hits {
                spent[member.key] = earlier.saturating_add(n);
            }
            if self.over_share(bucket, member.hits, earlier, now) {
                beyond |= room && self.beyond_share(bucket, Hits::Consume(spent[member.key]), now);
                *decision = self.share_denial();
            }
        }
        (decisions, beyond)
    }
}

/// The share rule: `n` more fit in this instance's share of the headroom the last sync
/// showed, `⌈(limit − base level) / (2 × instances)⌉`. Half of a fair share: the others'
/// admissions this instance has not seen yet are at most their own half shares, so the
/// instances together stay at or under the headroom while their views are one sync old
/// (docs/scaling.md, "Approximate mode").
pub(super) fn within_share(bucket: &Bucket, n: u64, now: u64, instances: u64) -> bool {
    let p = &bucket.params;
    let own = bucket.own.at(now, p).level(now, p);
    own.saturating_add(n) <= share(bucket, now, instances)
}

/// This instance's share of `bucket` between two syncs: `⌈(limit − base level) / 2N⌉`.
fn share(bucket: &Bucket, now: u64, instances: u64) -> u64 {
    let p = &bucket.params;
    let base = bucket.base.at(now, p).level(now, p);
    p.limit.saturating_sub(base).div_ceil(instances.saturating_mul(2))
}
