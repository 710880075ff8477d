//! `rollout`: the share of a limit's buckets that is enforced, and where a bucket key falls
//! in that share (`bucket_share`, stable across instances, restarts and releases).
//!
//! Part of `rule`; imports none of its siblings. Pure.

/// `rollout: r` of a limit (0 < r ≤ 1), in millionths: which of its buckets are enforced.
///
/// A bucket is enforced when the share of its key (`bucket_share`: the first 8 bytes of
/// the SHA-256 of the bucket key, read as a fraction of 2^64, in millionths) is below r. The
/// key is the same on every instance and across restarts, so a client is in or out
/// consistently; and raising r only adds buckets (one enforced at 0.1 stays enforced at
/// 0.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rollout(u32);

impl Rollout {
    /// Every bucket enforced (the default).
    pub const FULL: Rollout = Rollout(Rollout::MILLION);
    const MILLION: u32 = 1_000_000;

    /// `r` as written (0 < r ≤ 1, at least one millionth); `None` outside that range.
    pub fn from_share(r: f64) -> Option<Rollout> {
        if !(r > 0.0 && r <= 1.0) {
            return None;
        }
        let millionths = (r * f64::from(Rollout::MILLION)).round();
        (millionths >= 1.0).then_some(Rollout(millionths as u32))
    }

    /// The share as a fraction (what the config wrote, to a millionth).
    pub fn share(self) -> f64 {
        f64::from(self.0) / f64::from(Rollout::MILLION)
    }

    /// Whether only part of the buckets are enforced.
    pub fn is_partial(self) -> bool {
        self.0 < Rollout::MILLION
    }

    /// Whether the bucket `key` is enforced.
    pub fn enforces(self, key: &str) -> bool {
        !self.is_partial() || bucket_share(key) < self.0
    }
}

/// Where a bucket key falls in [0, 1 000 000): the first 8 bytes of its SHA-256 as a
/// fraction of 2^64, in millionths. Stable across instances, restarts and releases.
pub fn bucket_share(key: &str) -> u32 {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(key.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    let fraction = u128::from(u64::from_be_bytes(first));
    ((fraction * u128::from(Rollout::MILLION)) >> 64) as u32
}
