//! The script set: every Lua script's body as sent to Redis (the shared prelude, the
//! algorithm functions it calls, its entry), each hashed once into a `Script`, and `Call`,
//! whether a call names a script by SHA or sends its source.
//!
//! Part of `scripts`; imports none of its siblings. Holds no connection.

use std::sync::LazyLock;

/// The script bodies as sent to Redis: the shared prelude, the algorithm functions the
/// script runs (each written once, in `lua/algorithm/`), then the script's entry, which
/// reads its call (see `lua/README.md`). A script carries only the functions it calls:
/// Redis runs a script's whole body, so each function defined costs every call.
macro_rules! lua {
    ($($part:literal),+) => {
        concat!(include_str!("../../lua/prelude.lua"), $(include_str!(concat!("../../lua/", $part))),+)
    };
}

pub const GCRA_LUA: &str = lua!("algorithm/gcra.lua", "algorithm/penalty.lua", "single.lua", "gcra.lua");
pub const SLIDING_LUA: &str = lua!(
    "algorithm/window.lua",
    "algorithm/sliding_window.lua",
    "algorithm/penalty.lua",
    "single.lua",
    "sliding_window.lua"
);
pub const FIXED_LUA: &str = lua!(
    "algorithm/window.lua",
    "algorithm/fixed_window.lua",
    "algorithm/penalty.lua",
    "single.lua",
    "fixed_window.lua"
);
/// A fixed window over calendar periods (`Params::period`).
pub const CALENDAR_LUA: &str = lua!(
    "algorithm/window.lua",
    "algorithm/fixed_window.lua",
    "algorithm/penalty.lua",
    "single.lua",
    "calendar_window.lua"
);
/// A group of charges decided together (see `store::Groups`, `lua/README.md`).
pub const JOINT_LUA: &str = lua!(
    "algorithm/gcra.lua",
    "algorithm/window.lua",
    "algorithm/sliding_window.lua",
    "algorithm/fixed_window.lua",
    "algorithm/penalty.lua",
    "group.lua",
    "joint.lua"
);
/// A descriptor naming a reservation: reserved, settled or charged plain in one call with
/// the reservation's record (see `algorithm::reservation`, `lua/README.md`).
pub const RESERVE_LUA: &str = lua!(
    "algorithm/gcra.lua",
    "algorithm/window.lua",
    "algorithm/sliding_window.lua",
    "algorithm/fixed_window.lua",
    "algorithm/penalty.lua",
    "group.lua",
    "reserve.lua"
);
/// The charges of several requests for one server in one call (see `redis::batch`,
/// `lua/README.md`): every algorithm, joint and independent groups side by side.
pub const BATCH_LUA: &str = lua!(
    "algorithm/gcra.lua",
    "algorithm/window.lua",
    "algorithm/sliding_window.lua",
    "algorithm/fixed_window.lua",
    "algorithm/penalty.lua",
    "batch.lua"
);
/// Approximate mode's sync of many buckets (see `approx::sync`, `lua/approx.lua`).
pub static APPROX_LUA: LazyLock<Script> =
    LazyLock::new(|| Script::new(lua!("algorithm/window.lua", "approx.lua")));

/// The give-back of a denied or stale plain window consume (see `redis::plain`,
/// `lua/give_back.lua`): standalone, no prelude.
pub static GIVE_BACK_LUA: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/give_back.lua")));

/// How a script is called: by SHA (the normal case) or with its source (after `NOSCRIPT`;
/// `EVAL` also caches the script on that node).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    Sha,
    Source,
}

/// A Lua script with its SHA1, computed once.
#[derive(Debug)]
pub struct Script {
    sha: String,
    source: &'static str,
}

impl Script {
    pub(super) fn new(source: &'static str) -> Script {
        Script { sha: redis::Script::new(source).get_hash().to_string(), source }
    }

    /// The SHA1 `EVALSHA` names it by.
    pub fn sha(&self) -> &str {
        &self.sha
    }

    /// The body `EVAL` sends.
    pub fn source(&self) -> &'static str {
        self.source
    }
}
