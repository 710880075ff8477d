//! The lock of one connection slot, and the lock order every caller keeps: **a thread
//! holds at most one slot lock at a time**. `Link::lease` once held a slot's guard (the
//! scrutinee of an `if let`) while `start_connect` locked another slot; two workers
//! re-making both connections at once each held the slot the other wanted, for good, and
//! the runtime stopped (issue 23). The deadlock needs a rare interleaving; the pattern does
//! not, so debug builds (every test) check the pattern itself on each lock and panic at the
//! first nested one. Release builds keep only the plain guard.

use std::ops::{Deref, DerefMut};
use std::sync::{Mutex, MutexGuard};

#[cfg(debug_assertions)]
thread_local! {
    /// Slot locks this thread holds. A guard never crosses an `.await` (a `MutexGuard` is
    /// not `Send`), so a thread-local count follows it exactly.
    static HELD: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// A held slot lock (see the module doc).
pub(super) struct SlotGuard<'a, T>(MutexGuard<'a, T>);

/// Locks `mutex`, a slot's state. Every mutation under it is a single assignment: a
/// poisoned slot is still consistent.
pub(super) fn lock_slot<T>(mutex: &Mutex<T>) -> SlotGuard<'_, T> {
    #[cfg(debug_assertions)]
    HELD.with(|held| {
        assert_eq!(held.get(), 0, "a Redis connection slot locked while this thread holds another");
        held.set(1);
    });
    SlotGuard(mutex.lock().unwrap_or_else(|e| e.into_inner()))
}

impl<T> Deref for SlotGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> DerefMut for SlotGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

impl<T> Drop for SlotGuard<'_, T> {
    fn drop(&mut self) {
        #[cfg(debug_assertions)]
        HELD.with(|held| held.set(0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_slot_at_a_time_then_another() {
        let (a, b) = (Mutex::new(1), Mutex::new(2));
        {
            let mut first = lock_slot(&a);
            *first += 1;
        }
        let second = lock_slot(&b);
        assert_eq!(*second, 2);
        drop(second);
        assert_eq!(*lock_slot(&a), 2);
    }

    #[test]
    #[should_panic(expected = "holds another")]
    fn a_slot_locked_while_another_is_held_is_caught() {
        let (a, b) = (Mutex::new(()), Mutex::new(()));
        let _held = lock_slot(&a);
        let _nested = lock_slot(&b);
    }
}
