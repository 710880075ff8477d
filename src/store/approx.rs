//! Approximate mode (`consistency: approximate`): decisions made in process from a local
//! estimate of each bucket, kept close to Redis by one background sync per store.
//!
//! Redis is on the request path only for a bucket's first read (`sync::read_unread`: a
//! bucket this instance never read is read before it is decided) and while the instance
//! warms up (until its heartbeat has counted the other instances, `is_ready`, approximate
//! domains are decided exactly). A bucket's level is the last count read from Redis,
//! rolled and decayed by its own window algorithm, plus what this instance admitted since
//! (`bucket`, over `window`). The sync task (`sync`) writes, every half `--sync-interval-ms`, the
//! increments admitted since a bucket's last write and folds the counts each write answers.
//! How often a bucket with increments is written depends on how close it is to its limit
//! (`tier`); local traffic promotes it at once, only a read demotes it.
//!
//! **Shares.** Between two syncs of a bucket an instance admits at most
//! `⌈(limit − level at the last sync) / 2N⌉` of it, where `N` is the largest number of
//! live instances a heartbeat counted in the last 30 s (alone too: `N = 1`). That caps what the instances can admit
//! on stale views: the over-admission is bounded by what the others admitted and wrote
//! since this instance's last sync, not `N ×` the limit (docs/scaling.md, "Approximate mode"). The
//! price: a burst that meets one instance gets `1/2N` of the headroom per sync, the rest
//! sync by sync. Every instance wakes on the same wall-clock grid (multiples of half the
//! interval), so their views are about equally old.
//!
//! **Redis down.** Decisions go on from the estimates, each instance within its share (so
//! all of them together within the limit as last seen); increments wait in the buckets and
//! are written when Redis answers again. Once the last good sync is older than the
//! staleness limit, a bucket not synced within that limit answers a store error, and the
//! domain's `failure_mode` decides.
//!
//! Memory: the same cap and sharded layout as the memory store. A full shard drops spent
//! buckets first, then the lowest of a sample; an evicted bucket's unsent increments are
//! kept apart (bounded) and written by the next sync, so eviction never loses admissions.
//!
//! Only the window algorithms are served (their state is two counts that add up); GCRA is
//! rejected by `tollgate check` for approximate domains.
//!
//! The files, top to bottom (each imports only from those below it):
//! - `sync`: the background sync and the first reads (its own files in its comment);
//! - `decide`: a charge or a group decided on the estimates, and the share rule;
//! - `evict`: room made in a full shard; `health`: what is known of Redis (clock offset,
//!   `N`, warm-up, staleness, a sync task lost), over `peak` (`N`'s samples of the last
//!   30 s);
//! - `table`: the sharded table of buckets, its counters and views;
//! - `bucket`: one bucket's estimate; below it `tier` (how often it is written) and
//!   `window` (window counts and unsent increments); `settings`.

pub mod bucket;
mod claim;
mod decide;
mod evict;
mod health;
mod peak;
mod resets;
mod settings;
pub mod sync;
mod table;
pub mod tier;
pub mod window;

pub use claim::{Claim, Local, Read};
pub use health::PEAK_SPAN_US;
pub use settings::ApproxSettings;
pub use table::{Approx, BucketView, Counters};

#[cfg(test)]
mod tests;
