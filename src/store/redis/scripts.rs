//! The Lua scripts as Redis commands, and their replies as decisions: what every Redis
//! store (single node, Sentinel, Cluster) sends and reads, whatever connection carries it.
//!
//! Owns the script sources and SHAs (computed once), building an `EVALSHA`/`EVAL` command
//! or pipeline for a batch of charges, parsing the `{allowed, remaining, reset_us}` reply,
//! and the `NOSCRIPT` rule: retry once, with `EVAL`, only the entries that failed that way.
//! It holds no connection and never retries after a transport error or a timeout (the
//! script may have run). Deadlines are the caller's. What a reply or a client error means
//! (`NOSCRIPT`, `READONLY`, transport) is `redis::reply`'s, below this module and the link.
//!
//! A pipeline entry is one script call: a single charge (its algorithm's script), a *part*
//! — charges of one joint group on one slot — sent as one `joint.lua` call, whose reply
//! holds one decision per member, or a batch (`redis::batch`): every group of several
//! requests as one `batch.lua` call, whose reply holds three entries per charge.
//!
//! Its parts, each re-exported here so that `redis::scripts::X` names them all: `sources`
//! (the script bodies and their SHAs, `Call`), `commands` (`Scripts`: a charge, a joint part
//! or a batch as a command), `replies` (a reply as decisions), `pipeline` (sending a batch
//! with the `NOSCRIPT` retry). They import one another, never this file.

mod commands;
mod pipeline;
mod replies;
mod sources;

pub use self::commands::Scripts;
pub(crate) use self::pipeline::send_entries;
pub use self::pipeline::{charge_groups_pipelined, charge_pipelined};
pub use self::replies::{parse, parse_batch, parse_part, parse_reserve};
pub use self::sources::{
    Call, Script, Sources, APPROX_LUA, BATCH_LUA, CALENDAR_LUA, FIXED_LUA, GCRA_LUA, GIVE_BACK_LUA,
    JOINT_LUA, RESERVE_LUA, SLIDING_LUA, WITHOUT_WINDOW_KEYS, WITH_WINDOW_KEYS,
};

#[cfg(test)]
mod tests;
