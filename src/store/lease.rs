//! Leases: a hot bucket's tokens taken from Redis in blocks, one charge per block, and spent
//! by this instance without a Redis call per request.
//!
//! This module owns the lease table: per bucket key, the local rate (hits in the current and
//! the previous lease time), the lease (tokens left, when it ends, the Redis answer that
//! granted it), a refill in flight, and a hint of what still fits (the last Redis answer).
//! It does no I/O and reads no clock: callers pass `now`. `leasing` charges through it,
//! refills and returns in tasks, and runs the sweeper.
//!
//! Rules, each for a reason:
//! - Only a group of one `Consume(n)` of a leasable rule (`lease: true`, or every rule with
//!   `--lease-hot-keys`) is served from a lease: joint groups must be decided at one
//!   instant in Redis, peeks describe the bucket, refunds must reach it (a refund also
//!   drops this key's lease and gives its tokens back).
//! - A key is leased once it saw at least [`MIN_BLOCK`] hits within a lease time. A block
//!   is `max(hits in the current, hits in the previous lease time)` — the key's rate ×
//!   lease time — capped by a tenth of the bucket ([`LEASE_SHARE`]: GCRA's burst, a
//!   window's limit) and by what the last Redis answer said still fits (fresh for one
//!   lease time). A tenth: when one instance is denied, every other holds at most a tenth
//!   of the bucket unspent, so three instances strand at most a fifth, while a key at its
//!   limit still takes ten requests per Redis call. A block that cannot be
//!   `max(MIN_BLOCK, n)` is not taken: the request goes to Redis alone.
//! - A denied or failed block sets the hint to "nothing fits": single charges go to Redis
//!   for a lease time, and their answers set the hint again (never hold more than fits).
//! - A lease is spent only until `sent + lease_time`, `sent` being when its charge was
//!   sent (Redis took the tokens later): tokens are never spent more than a lease time
//!   after Redis counted them. A window lease also ends at its window's end (as seen from
//!   `sent`, so early, never late), and its unused tokens are given back only while a
//!   quarter of a lease time is left in that window — a refund that ran in the next
//!   window would give that window tokens it never counted.
//! - Params that differ from the lease's (a reload changed the rule) drop the lease: its
//!   tokens go back and the new limit applies from this request on.
//! - Unused tokens go back (a `Refund`) from the sweeper: expired leases, dropped leases
//!   and evicted keys queue a [`Return`]; the sweeper sends them in batches. The queue is
//!   bounded by count and by age (`returns`): what the breaker refuses waits at most until
//!   its tokens would have refilled anyway, so an outage stores up no credit for later.
//! - Memory is bounded: at most `max_keys` keys (sharded); a full shard evicts a sampled
//!   key without a lease first, else the one holding the fewest tokens (its tokens go back).
//! - A refill belongs to a task, never to a request: a request that stops waiting leaves
//!   the block's tokens in the table, spent by others or given back when the lease ends.
//!   Each refill has a number; an answer whose number is no longer the key's (the key was
//!   reset, evicted or re-parameterised meanwhile) gives its block straight back.
//!
//! The files, top to bottom (each imports only from those below it):
//! - `take`: a leasable charge served, or the block to take (a refill), and Redis's
//!   answers turned into leases and hints;
//! - `returns`: the way back: the sweeper, the bounded queue of returns, eviction;
//! - `stats`: the counters;
//! - `table`: the table itself (shards of entries, the queue, the counters' cells);
//! - `entry`: one key's state (meter, lease, hint) and the lock rule; `refund`: one
//!   return and when it is too late; `settings`: the settings and a block's bounds.

mod entry;
mod refund;
mod returns;
mod settings;
mod stats;
mod table;
mod take;

pub use refund::Return;
pub use settings::{LeaseSettings, DEFAULT_LEASE_TIME, LEASE_MAX_KEYS, LEASE_SHARE, MIN_BLOCK};
pub use stats::{Dropped, LeaseStats};
pub use table::LeaseTable;
pub use take::{Refill, Take};

#[cfg(test)]
mod tests;
