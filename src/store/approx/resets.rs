//! Operators' resets, seen by every instance: `POST /v1/reset` through any instance deletes
//! the buckets in Redis and appends each key to a log (a stream, `<prefix>tg:approx:resets`,
//! written by `sync::reset_log`). Each instance reads the log from where it left off once
//! per wake while it holds buckets — one read per wake, not per bucket, so buckets nobody
//! charges still cost nothing — and every bucket held here that was read before the reset
//! is emptied and read again before its next decision ([`Bucket::reset`]). So an instance
//! that only denies a bucket (a local denial writes nothing, so it never syncs it) sees the
//! reset within a wake. This file is where the log is followed; `table` applies an entry
//! to the bucket it names (`Approx::reset_seen`).
//!
//! [`Bucket::reset`]: super::bucket::Bucket::reset

use std::sync::{Mutex, OnceLock};

/// The log keeps about this many entries (`XADD … MAXLEN ~`): an instance that falls
/// further behind (cut off from Redis through that many resets) misses the oldest.
pub const RESET_LOG_LEN: u64 = 10_000;

/// The log expires this long (ms) after its last entry.
pub const RESET_LOG_TTL_MS: u64 = 600_000;

/// Where this instance follows the log.
#[derive(Debug, Default)]
pub struct ResetLog {
    /// `<prefix>tg:approx:resets`, named once at startup ([`ResetLog::name`]).
    key: OnceLock<Box<str>>,
    /// The id of the last entry read (`<ms>-<seq>`, Redis's clock); `None`: from the start.
    last: Mutex<Option<String>>,
}

impl ResetLog {
    /// Names the log under the store's key prefix (`--redis-key-prefix`); before this, and
    /// in tests, it is unprefixed. Only the first call counts.
    pub fn name(&self, key_prefix: &str) {
        let _ = self.key.set(format!("{key_prefix}tg:approx:resets").into());
    }

    /// The log's key.
    pub fn key(&self) -> &str {
        self.key.get().map_or("tg:approx:resets", |key| key)
    }

    /// Where the next read of the log starts (exclusive).
    pub fn from(&self) -> String {
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        last.clone().unwrap_or_else(|| "0-0".into())
    }

    /// The log was read up to `id` (inclusive).
    pub fn read(&self, id: String) {
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some(id);
    }
}
