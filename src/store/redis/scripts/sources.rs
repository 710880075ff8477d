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
    ($flag:literal; $($part:literal),+) => {
        concat!(
            include_str!(concat!("../../lua/", $flag)),
            include_str!("../../lua/prelude.lua"),
            $(include_str!(concat!("../../lua/", $part))),+
        )
    };
}

/// The request scripts, each once: built as `lua/window_keys_off.lua` (for `--redis-windows
/// lua`: no window key is read) or `lua/window_keys_on.lua` (`read`, `plain`: the scripts
/// fold window keys in, `prelude.lua`) says.
#[derive(Debug, Clone, Copy)]
pub struct Sources {
    pub gcra: &'static str,
    pub sliding: &'static str,
    pub fixed: &'static str,
    pub calendar: &'static str,
    pub joint: &'static str,
    pub batch: &'static str,
    pub reserve: &'static str,
}

macro_rules! sources {
    ($flag:literal) => {
        Sources {
            gcra: lua!($flag; "algorithm/gcra.lua", "algorithm/penalty.lua", "single.lua", "gcra.lua"),
            sliding: lua!($flag;
                "algorithm/window.lua",
                "algorithm/sliding_window.lua",
                "algorithm/penalty.lua",
                "single.lua",
                "sliding_window.lua"
            ),
            fixed: lua!($flag;
                "algorithm/window.lua",
                "algorithm/fixed_window.lua",
                "algorithm/penalty.lua",
                "single.lua",
                "fixed_window.lua"
            ),
            calendar: lua!($flag;
                "algorithm/window.lua",
                "algorithm/fixed_window.lua",
                "algorithm/penalty.lua",
                "single.lua",
                "calendar_window.lua"
            ),
            joint: lua!($flag;
                "algorithm/gcra.lua",
                "algorithm/window.lua",
                "algorithm/sliding_window.lua",
                "algorithm/fixed_window.lua",
                "algorithm/penalty.lua",
                "group.lua",
                "joint.lua"
            ),
            batch: lua!($flag;
                "algorithm/gcra.lua",
                "algorithm/window.lua",
                "algorithm/sliding_window.lua",
                "algorithm/fixed_window.lua",
                "algorithm/penalty.lua",
                "batch.lua"
            ),
            reserve: lua!($flag;
                "algorithm/gcra.lua",
                "algorithm/window.lua",
                "algorithm/sliding_window.lua",
                "algorithm/fixed_window.lua",
                "algorithm/penalty.lua",
                "group.lua",
                "reserve.lua"
            ),
        }
    };
}

/// The scripts of `--redis-windows lua`: no window key read.
pub const WITHOUT_WINDOW_KEYS: Sources = sources!("window_keys_off.lua");
/// The scripts of `--redis-windows read` and `plain`: window keys folded in.
pub const WITH_WINDOW_KEYS: Sources = sources!("window_keys_on.lua");

pub const GCRA_LUA: &str = WITHOUT_WINDOW_KEYS.gcra;
pub const SLIDING_LUA: &str = WITHOUT_WINDOW_KEYS.sliding;
pub const FIXED_LUA: &str = WITHOUT_WINDOW_KEYS.fixed;
pub const CALENDAR_LUA: &str = WITHOUT_WINDOW_KEYS.calendar;
pub const JOINT_LUA: &str = WITHOUT_WINDOW_KEYS.joint;
pub const RESERVE_LUA: &str = WITHOUT_WINDOW_KEYS.reserve;
pub const BATCH_LUA: &str = WITHOUT_WINDOW_KEYS.batch;

/// Approximate mode's sync of many buckets (see `approx::sync`, `lua/approx.lua`): built to
/// read window keys, which it does only when a call asks (its ARGV[1]).
pub static APPROX_LUA: LazyLock<Script> =
    LazyLock::new(|| Script::new(lua!("window_keys_on.lua"; "algorithm/window.lua", "approx.lua")));

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
