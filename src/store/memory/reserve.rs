//! Reservations in the memory store: a call naming a reservation is decided by
//! `algorithm::reservation` under the locks of its group's shards and of the records, so
//! the charge and the record change together, atomically with respect to every other
//! charge (as one `reserve.lua` call is in Redis).
//!
//! Records live in one map by their bucket's record key (`record_keys`), each a `Book`;
//! a book left empty is dropped. The periodic sweep (`sweep_expired`) also drops every
//! expired record, counting those still held (never settled), so that the records of a
//! bucket no call touches again do not stay.
//!
//! Records are capped at the store's bucket cap (`--memory-max-keys`): a client naming new
//! ids faster than they expire (a flood of refused reservations leaves a record each) must
//! not grow memory without bound. At the cap a call is still decided and charged, but a
//! new record is not kept (counted in `unrecorded_reservations`): a hold without its
//! record is never given back and a later call naming it is a first call again — charged
//! twice, never under-charged (the conservative side).

use std::sync::atomic::Ordering;
use std::sync::MutexGuard;

use super::{now_us, Book, MemoryStore};
use crate::algorithm::reservation;
use crate::store::charge::{record_keys, Charge, Reservation, Reserved};

use std::collections::HashMap;

impl MemoryStore {
    /// A call naming `reservation` for `group` (one descriptor's limits) with the system
    /// clock.
    pub fn reserve(&self, group: &[Charge], reservation: &Reservation) -> Reserved {
        self.reserve_at(group, reservation, now_us())
    }

    /// A call naming `reservation` for `group` at `now` (µs since the epoch): reserved,
    /// settled or charged plain by `algorithm::reservation::apply`, its record written with
    /// the charge.
    pub fn reserve_at(&self, group: &[Charge], reservation: &Reservation, now: u64) -> Reserved {
        let Some(first) = group.first() else {
            return Reserved { decisions: Vec::new(), phase: reservation::Phase::Plain, expired: 0 };
        };
        let (record_key, _) = record_keys(&first.key);
        let id = reservation.id.as_bytes();
        let (decisions, (phase, expired)) = self.charge_locked(group, now, |stored, members| {
            let mut books = self.lock_books();
            let book = books.entry(record_key.clone()).or_default();
            let before = book.len();
            let (record, expired) = book.open(id, now);
            let out = reservation::apply(stored, record.as_ref(), now, members);
            if let Some(record) = out.record {
                let held = self.records.load(Ordering::Relaxed) + book.len() - before;
                if book.contains(id) || held < self.capacity() {
                    book.put(id, record, now, reservation.ttl_us);
                } else {
                    self.unrecorded_reservations.fetch_add(1, Ordering::Relaxed);
                }
            }
            let after = book.len();
            if book.is_empty() {
                books.remove(&record_key);
            }
            // Under the books lock: the count moves with the books.
            let records = self.records.load(Ordering::Relaxed) + after - before;
            self.records.store(records, Ordering::Relaxed);
            (out.joint, (out.phase, expired))
        });
        Reserved { decisions, phase, expired }
    }

    /// Reservations the periodic sweep found expired still held (never settled).
    pub fn expired_reservations(&self) -> u64 {
        self.expired_reservations.load(Ordering::Relaxed)
    }

    /// Records held now, over every bucket (for tests and metrics).
    pub fn reservation_records(&self) -> usize {
        let _books = self.lock_books();
        self.records.load(Ordering::Relaxed)
    }

    /// Drops every expired record (counting the held ones) and the books left empty.
    pub(super) fn sweep_books(&self, now: u64) {
        let mut books = self.lock_books();
        let mut expired = 0;
        books.retain(|_, book| {
            expired += book.expire(now);
            !book.is_empty()
        });
        self.records.store(books.values().map(Book::len).sum(), Ordering::Relaxed);
        self.expired_reservations.fetch_add(expired, Ordering::Relaxed);
    }

    fn lock_books(&self) -> MutexGuard<'_, HashMap<String, Book>> {
        self.books.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::reservation::Phase;
    use crate::algorithm::{Algorithm, Hits, Params};

    const NOW: u64 = 1_700_000_000_000_000;
    const P: Params = Params {
        algorithm: Algorithm::FixedWindow,
        limit: 10,
        unit_us: 3_600_000_000,
        burst: 10,
        penalty_us: 0,
        period: None,
    };

    fn call(store: &MemoryStore, id: &str, hits: Hits, now: u64) -> Reserved {
        let group = [Charge { key: "b".into(), params: P, hits }];
        store.reserve_at(&group, &Reservation { id: id.into(), ttl_us: 60_000_000 }, now)
    }

    #[test]
    fn reserve_settle_and_expire_in_memory() {
        let store = MemoryStore::new(100);
        let r = call(&store, "a", Hits::Consume(6), NOW);
        assert_eq!((r.phase, r.decisions[0].remaining), (Phase::Reserved, 4));
        assert_eq!(call(&store, "b", Hits::Consume(6), NOW).phase, Phase::Refused, "the hold counts");
        let peek = store.charge_at(&Charge { key: "b".into(), params: P, hits: Hits::Peek }, NOW);
        assert_eq!(peek.remaining, 4, "a plain peek sees the hold");
        let r = call(&store, "a", Hits::Consume(2), NOW);
        assert_eq!((r.phase, r.decisions[0].remaining), (Phase::Settled, 8));
        assert_eq!(call(&store, "c", Hits::Consume(3), NOW).phase, Phase::Reserved);
        assert_eq!(store.reservation_records(), 3, "a and b done, c held");
        store.sweep_expired(NOW + 60_000_000);
        assert_eq!((store.expired_reservations(), store.reservation_records()), (1, 0));
        let peek =
            store.charge_at(&Charge { key: "b".into(), params: P, hits: Hits::Peek }, NOW + 60_000_000);
        assert_eq!(peek.remaining, 5, "c's hold stays charged");
    }

    /// A flood of new ids (each refusal leaves a record) stops at the bucket cap; a call
    /// past it is decided and counted, its record not kept; a kept record still settles.
    #[test]
    fn records_stop_at_the_bucket_cap_and_a_call_past_it_is_charged_never_freed() {
        let store = MemoryStore::new(4);
        assert_eq!(store.capacity(), 4);
        assert_eq!(call(&store, "held", Hits::Consume(10), NOW).phase, Phase::Reserved);
        for i in 0..9 {
            assert_eq!(call(&store, &format!("f{i}"), Hits::Consume(1), NOW).phase, Phase::Refused);
        }
        let stats = store.stats();
        assert_eq!((stats.reservation_records, stats.unrecorded_reservations), (4, 6));
        assert_eq!(store.reservation_records(), 4);
        let r = call(&store, "held", Hits::Consume(4), NOW);
        assert_eq!((r.phase, r.decisions[0].remaining), (Phase::Settled, 6), "its record was kept");
        // Past the cap, an admitted reservation is charged with no record: never given back.
        let r = call(&store, "late", Hits::Consume(2), NOW);
        assert_eq!((r.phase, r.decisions[0].remaining), (Phase::Reserved, 4));
        assert_eq!(store.stats().unrecorded_reservations, 7);
        let r = call(&store, "late", Hits::Consume(1), NOW);
        assert_eq!((r.phase, r.decisions[0].remaining), (Phase::Reserved, 3), "a first call again");
        store.sweep_expired(NOW + 60_000_000);
        assert_eq!(store.stats().reservation_records, 0, "the sweep recounts");
    }
}
