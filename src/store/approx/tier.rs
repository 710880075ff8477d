//! How close a bucket is to its limit ([`Tier`]), which sets how often its increments are
//! written. Plain values.

/// How close a bucket is to its limit, which sets how often its increments are written
/// (each write also reads the bucket back).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tier {
    /// Below 10 % of the limit: written every 4 sync intervals.
    Idle,
    /// 10–50 %: written every interval.
    Low,
    /// 50–80 %: written every interval.
    Normal,
    /// Above 80 %: written every half interval.
    Hot,
}

impl Tier {
    /// The tier of `level` against `limit`.
    pub fn of(level: u64, limit: u64) -> Tier {
        // level / limit compared in integers: 10 × level against limit, and so on.
        let level = u128::from(level);
        let limit = u128::from(limit);
        if level * 10 > limit * 8 {
            Tier::Hot
        } else if level * 2 > limit {
            Tier::Normal
        } else if level * 10 >= limit {
            Tier::Low
        } else {
            Tier::Idle
        }
    }

    /// How long after a send the next one of a bucket with increments is due, in µs, for
    /// a sync interval of `interval` µs.
    pub fn send_after(self, interval: u64) -> u64 {
        match self {
            Tier::Idle => interval.saturating_mul(4),
            Tier::Low | Tier::Normal => interval,
            Tier::Hot => interval / 2,
        }
    }

    /// `idle`, `low`, `normal` or `hot`.
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Idle => "idle",
            Tier::Low => "low",
            Tier::Normal => "normal",
            Tier::Hot => "hot",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiers_follow_the_level() {
        assert_eq!(Tier::of(0, 100), Tier::Idle);
        assert_eq!(Tier::of(9, 100), Tier::Idle);
        assert_eq!(Tier::of(10, 100), Tier::Low);
        assert_eq!(Tier::of(50, 100), Tier::Low);
        assert_eq!(Tier::of(51, 100), Tier::Normal);
        assert_eq!(Tier::of(80, 100), Tier::Normal);
        assert_eq!(Tier::of(81, 100), Tier::Hot);
        assert_eq!(Tier::of(1, 0), Tier::Hot);
        assert_eq!(Tier::Hot.send_after(250), 125);
        assert_eq!(Tier::Idle.send_after(250), 1000);
    }
}
