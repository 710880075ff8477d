//! Operators' resets, seen by every instance: `POST /v1/reset` through any instance deletes
//! the buckets in Redis and appends each key to a log (a stream, `<prefix>tg:approx:resets`,
//! written by `sync::reset_log`). Each instance reads the log from where it left off once
//! per wake while it holds buckets — one read per wake, not per bucket, so buckets nobody
//! charges still cost nothing — and every bucket held here that was read before the reset
//! is emptied and read again before its next decision ([`Bucket::reset`]). So an instance
//! that only denies a bucket (a local denial writes nothing, so it never syncs it) sees the
//! reset within a wake.
//!
//! [`Bucket::reset`]: super::bucket::Bucket::reset

use std::sync::{Mutex, OnceLock};

use crate::store::memory::now_us;

use super::table::{lock, Approx};

/// The log keeps about this many entries (`XADD … MAXLEN ~`): an instance that falls
/// further behind (cut off from Redis through that many resets) misses the oldest.
pub const RESET_LOG_LEN: u64 = 10_000;

/// The log expires this long (ms) after its last entry.
pub const RESET_LOG_TTL_MS: u64 = 600_000;

/// Where this instance follows the log.
#[derive(Debug, Default)]
pub struct ResetLog {
    /// `<prefix>tg:approx:resets`, named once at startup ([`Approx::name_reset_log`]).
    key: OnceLock<Box<str>>,
    /// The id of the last entry read (`<ms>-<seq>`, Redis's clock); `None`: from the start.
    last: Mutex<Option<String>>,
}

impl Approx {
    /// Names the reset log under the store's key prefix (`--redis-key-prefix`); before
    /// this, and in tests, it is unprefixed. Only the first call counts.
    pub fn name_reset_log(&self, key_prefix: &str) {
        let _ = self.resets.key.set(format!("{key_prefix}tg:approx:resets").into());
    }

    /// The reset log's key.
    pub fn reset_log_key(&self) -> &str {
        self.resets.key.get().map_or("tg:approx:resets", |key| key)
    }

    /// Where the next read of the log starts (exclusive).
    pub(super) fn reset_log_from(&self) -> String {
        let last = self.resets.last.lock().unwrap_or_else(|e| e.into_inner());
        last.clone().unwrap_or_else(|| "0-0".into())
    }

    /// The log was read up to `id` (inclusive).
    pub(super) fn reset_log_read(&self, id: String) {
        *self.resets.last.lock().unwrap_or_else(|e| e.into_inner()) = Some(id);
    }

    /// A log entry: `key` was reset in Redis before `at` (Redis µs). Its bucket, if held
    /// here and read before that, is emptied and read again before its next decision.
    pub(super) fn reset_seen(&self, key: &str, at: u64) {
        let mut shard = lock(&self.shards[self.shard_of(key)]);
        if let Some(bucket) = shard.map.get_mut(key) {
            let now = bucket.redis_now(now_us());
            bucket.reset(at, now);
        }
    }
}
