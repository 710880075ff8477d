//! Reservations in the memory store: a call naming a reservation is decided by
//! `algorithm::reservation` under the locks of its group's shards and of the records, so
//! the charge and the record change together, atomically with respect to every other
//! charge (as one `reserve.lua` call is in Redis).
//!
//! Records live in one map by their bucket's record key (`record_keys`), each a `Book`;
//! a book left empty is dropped. The periodic sweep (`sweep_expired`) also drops every
//! expired record, counting those still held (never settled), so that the records of a
//! bucket no call touches again do not stay.

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
            let (record, expired) = book.open(id, now);
            let out = reservation::apply(stored, record.as_ref(), now, members);
            if let Some(record) = out.record {
                book.put(id, record, now, reservation.ttl_us);
            }
            if book.is_empty() {
                books.remove(&record_key);
            }
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
        self.lock_books().values().map(Book::len).sum()
    }

    /// Drops every expired record (counting the held ones) and the books left empty.
    pub(super) fn sweep_books(&self, now: u64) {
        let mut books = self.lock_books();
        let mut expired = 0;
        books.retain(|_, book| {
            expired += book.expire(now);
            !book.is_empty()
        });
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
}
