//! The background sync of approximate mode: one task per store, woken every half interval,
//! and the first read of a bucket on a request's path.
//!
//! **Work per wake follows what changed.** A bucket is sent only when this instance has
//! increments for it (admissions or refunds since its last send); each write also answers
//! the bucket's counts, which is its read. A bucket nobody here charges costs nothing,
//! however full it is. Each shard keeps the keys of its buckets with something to send
//! (oldest first), so a wake walks those, not every bucket held. When increments go: hot
//! buckets on every wake (half an interval), low and normal ones every full interval (the
//! grid every instance shares), idle ones once their oldest increment waited 4 intervals,
//! on whichever wake that falls (`tier::Tier`).
//!
//! **Calls stand alone.** A wake's buckets go as `approx.lua` calls of up to [`CHUNK`]
//! buckets, at most [`CALLS_IN_FLIGHT`] outstanding on the sync's connection, each judged
//! by its own deadline ([`sync_deadline`],
//! not the store timeout) and folded as soon as it answers, with its own clock offset.
//! A call that fails puts its increments back for the next wake; once one fails for want
//! of Redis, the calls not yet sent in that wake are not sent (they certainly did not run).
//! A call that timed out or lost its connection after it was written may have run: its
//! increments are written again with the next wake, so Redis may count them twice — an
//! error toward denying, never toward admitting (docs/scaling.md, "Approximate mode").
//!
//! **A bounded wake.** A wake sends at most [`MAX_PER_WAKE`] buckets; the rest wait, oldest
//! first, and are counted as the backlog (`tollgate_approximate_backlog_*`). A bucket that
//! waits keeps deciding within its share, so a backlog costs admissions, never the bound.
//!
//! On a Redis Cluster a script call may only hold keys of one slot: the buckets go as one
//! call per slot touched (still at most [`CHUNK`] each), each sent to its master
//! ([`Via::Cluster`]); a `MOVED`/`ASK` entry did not run and follows its redirect alone.
//!
//! **The heartbeat**, every full interval: this instance's id scored with Redis's time in
//! a sorted set, entries older than the liveness span dropped, the live count read back —
//! the `N` of the share rule (on a cluster, on the master of that key's slot). Plain
//! commands, sent as a call of their own, only where an approximate domain is configured
//! or buckets are held: an exact-only deployment sends Redis nothing more. The first beat
//! goes at start. A beat is scored in Redis's clock as last measured, after a `TIME` when no
//! call measured it within the last interval (by the monotonic clock): a local wall clock
//! that steps scores at most one beat wrong, and a call's duration never comes from two
//! wall-clock readings (`health::sent_before`).
//!
//! The task runs under a supervisor (`store::syncing`): ended or panicked, it is started
//! again and the instance decides approximate domains exactly until it beats again.
//!
//! **First reads.** A bucket this instance has never read is read on the request's path
//! before it is decided (`read_unread`): a new instance, or a new key, cannot spend
//! counts other instances wrote. A read that does not answer by the request's deadline
//! leaves the bucket held to a share of the whole limit until its first sync.
//!
//! The task owns everything in flight: no request waits for it, and stopping it sends the
//! increments still waiting once and takes this instance out of the heartbeat set.
//!
//! **Claims.** A group with a consume larger than a share is decided against Redis
//! (`approx::claim`): its buckets' increments written, the exact charge, its buckets read
//! back — the writes and reads are `approx.lua` calls on the request path (`claimed`).
//!
//! **Resets.** Every wake (while buckets are held) reads the operators' reset log from where
//! it left off: a bucket reset through any instance is read again before its next decision
//! here (`approx::resets`).
//!
//! The files, top to bottom (each imports only from those below it): `tick` (one wake),
//! `first_read` and `claimed`; `heartbeat`; `fold` (an answer folded, a failure put back) and
//! `wake` (what a wake sends); `via` (where calls go); `call` (one call's buckets and
//! command) and `reply` (what it answers).

mod call;
mod claimed;
mod first_read;
mod fold;
mod heartbeat;
mod reply;
mod reset_log;
mod tick;
mod via;
mod wake;

#[cfg(test)]
pub(super) use call::command_for_tests;
pub use call::{Item, CHUNK};
pub use heartbeat::SyncTarget;
pub use tick::sync_deadline;
pub use via::{Via, CALLS_IN_FLIGHT};
pub use wake::{Wake, FORGET_AFTER_US, MAX_PER_WAKE};
