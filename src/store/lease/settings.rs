//! How leases are taken: the settings (`--lease-hot-keys`, `--lease-time-ms`) and the
//! bounds on a block. Plain values; no state.

use std::time::Duration;

/// `--lease-time-ms` default.
pub const DEFAULT_LEASE_TIME: Duration = Duration::from_millis(100);
/// Keys the table tracks (leased or measured), ≈ 150 bytes each.
pub const LEASE_MAX_KEYS: usize = 10_000;
/// A block is at most `1 / LEASE_SHARE` of the bucket (see `lease`'s module doc).
pub const LEASE_SHARE: u64 = 10;
/// The smallest block worth a lease: one token would cost a charge and a return.
pub const MIN_BLOCK: u64 = 2;

/// How leases are taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseSettings {
    /// `--lease-hot-keys`: every rule is leasable, not only those with `lease: true`.
    pub every_rule: bool,
    /// `--lease-time-ms`: how long a block may be spent after its charge was sent.
    pub time: Duration,
    /// Most keys tracked.
    pub max_keys: usize,
    /// The deadline of refills and returns (the store timeout).
    pub store_timeout: Duration,
}

impl Default for LeaseSettings {
    fn default() -> Self {
        LeaseSettings {
            every_rule: false,
            time: DEFAULT_LEASE_TIME,
            max_keys: LEASE_MAX_KEYS,
            store_timeout: Duration::from_millis(10),
        }
    }
}
