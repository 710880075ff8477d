//! The share rule's `N` over time: the largest instance count the heartbeat answered within
//! the last [`PEAK_SPAN_US`], from a small ring of samples — one slot per second holding
//! that second's largest count, so it stays 32 slots whatever the sync interval. Not the
//! maximum and its time alone: once that maximum ages out, a smaller count seen after it
//! is still within the span and must not be forgotten. Pure: takes `now` (local µs) as an
//! argument; no I/O, no clock of its own.

/// How long a count a heartbeat answered weighs in `N` (µs): a rolling restart (one
/// instance leaves, its successor joins) or a brief partition does not widen the shares of
/// the instances that stay.
pub const PEAK_SPAN_US: u64 = 30_000_000;

/// The width of one slot (µs): a sample weighs for 30 s at least, 31 s at most.
const SLOT_US: u64 = 1_000_000;
/// Slots in the ring: more than the seconds a sample weighs (31), so the seconds within the
/// span never share a slot.
const SLOTS: usize = 32;

/// The counts of the last [`PEAK_SPAN_US`], by second.
#[derive(Debug, Clone, Default)]
pub struct Peaks {
    /// `(second, largest count answered in it)`; a count of 0 is an empty slot.
    slots: [(u64, u64); SLOTS],
}

impl Peaks {
    /// Records `count` answered at local `now` and answers the largest count of the span.
    pub fn record(&mut self, count: u64, now: u64) -> u64 {
        let second = now / SLOT_US;
        // Samples stamped after `now`: the clock stepped back. Their age is unknown, so they
        // are taken as seen now — weighing one more span — rather than forgotten at once
        // (a smaller N widens every share) or kept until the clock catches up (an hour's
        // step would pin N for an hour).
        let mut count = count;
        for slot in self.slots.iter_mut().filter(|s| s.1 > 0 && s.0 > second) {
            count = count.max(slot.1);
            *slot = (0, 0);
        }
        let slot = &mut self.slots[(second % SLOTS as u64) as usize];
        if slot.0 != second {
            *slot = (second, 0);
        }
        slot.1 = slot.1.max(count);
        self.largest(now)
    }

    /// The largest count recorded within the span before local `now` (0: none).
    pub fn largest(&self, now: u64) -> u64 {
        let second = now / SLOT_US;
        let span = PEAK_SPAN_US / SLOT_US;
        self.slots
            .iter()
            .filter(|(s, count)| *count > 0 && second.saturating_sub(*s) <= span)
            .map(|&(_, count)| count)
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000;

    #[test]
    fn the_largest_count_within_30_s_weighs_not_only_the_maximum() {
        let mut peaks = Peaks::default();
        let t = 1_000 * S;
        assert_eq!(peaks.record(5, t), 5);
        assert_eq!(peaks.record(4, t + 20 * S), 5);
        // The 5 is 31 s old: the 4, seen 11 s ago, is N — not the 2 answered now.
        assert_eq!(peaks.record(2, t + 31 * S), 4);
        assert_eq!(peaks.record(2, t + 40 * S), 4);
        // The 4 is past the span too.
        assert_eq!(peaks.record(2, t + 51 * S + S / 2), 2);
        assert_eq!(peaks.largest(t + 51 * S + S / 2), 2);
    }

    #[test]
    fn a_sample_weighs_30_s_at_least_and_31_at_most() {
        let mut peaks = Peaks::default();
        let t = 1_000 * S + 999_999;
        peaks.record(3, t);
        assert_eq!(peaks.largest(t + 30 * S), 3);
        assert_eq!(peaks.largest(t + 31 * S), 0);
    }

    #[test]
    fn many_beats_a_second_keep_the_ring_bounded_and_every_count() {
        let mut peaks = Peaks::default();
        let t = 1_000 * S;
        // A 10 ms interval for a minute: 6,000 samples in 32 slots.
        for i in 0..6_000u64 {
            let count = if i == 3_000 { 9 } else { 2 };
            peaks.record(count, t + i * 10_000);
        }
        // The 9 was 30 s ago (t + 30 s; now t + 59.99 s).
        assert_eq!(peaks.largest(t + 59_990_000), 9);
        assert_eq!(peaks.largest(t + 62 * S), 2);
    }

    #[test]
    fn a_clock_stepped_back_keeps_the_counts_one_more_span() {
        let mut peaks = Peaks::default();
        let t = 10_000 * S;
        peaks.record(6, t);
        // An hour back: the 6 is taken as seen now, not forgotten, not pinned for an hour.
        let back = t - 3_600 * S;
        assert_eq!(peaks.record(2, back), 6);
        assert_eq!(peaks.record(2, back + 30 * S), 6);
        assert_eq!(peaks.record(2, back + 32 * S), 2);
        // Forward: older than the span, forgotten; the count now is N.
        peaks.record(5, back + 33 * S);
        assert_eq!(peaks.record(3, back + 3_600 * S), 3);
    }
}
