//! The script calls as Redis commands: `Scripts` (the set, hashed once) builds the
//! `EVALSHA`/`EVAL` of a single charge (its algorithm's script), of a part of a joint group
//! (`joint.lua`) and of a batch of several requests (`batch.lua`), by the contract in
//! `lua/README.md`.
//!
//! Part of `scripts`; builds commands only: sending them is `pipeline`'s, reading their
//! replies `replies`'.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use redis::Cmd;

use crate::algorithm::{Algorithm, Hits, Params};
use crate::store::charge::{record_keys, Charge, Groups, Reservation};

use super::sources::{Call, Script, Sources, WITHOUT_WINDOW_KEYS, WITH_WINDOW_KEYS};

/// The request scripts, twice: built without and with window keys (`sources::Sources`),
/// the ones in use chosen by `--redis-windows` ([`Scripts::read_window_keys`]).
#[derive(Debug)]
pub struct Scripts {
    without: Set,
    with: Set,
    window_keys: AtomicBool,
}

/// The algorithm scripts, the joint one, the batch one and the reservation one, hashed
/// (see `lua/README.md` for their contract).
#[derive(Debug)]
struct Set {
    gcra: Script,
    sliding: Script,
    fixed: Script,
    calendar: Script,
    joint: Script,
    batch: Script,
    reserve: Script,
}

impl Set {
    fn new(sources: Sources) -> Set {
        Set {
            gcra: Script::new(sources.gcra),
            sliding: Script::new(sources.sliding),
            fixed: Script::new(sources.fixed),
            calendar: Script::new(sources.calendar),
            joint: Script::new(sources.joint),
            batch: Script::new(sources.batch),
            reserve: Script::new(sources.reserve),
        }
    }
}

impl Default for Scripts {
    fn default() -> Scripts {
        Scripts::new()
    }
}

impl Scripts {
    /// Hashes the embedded sources; the scripts without window keys in use.
    pub fn new() -> Scripts {
        Scripts {
            without: Set::new(WITHOUT_WINDOW_KEYS),
            with: Set::new(WITH_WINDOW_KEYS),
            window_keys: AtomicBool::new(false),
        }
    }

    /// Calls the scripts that read window keys (`--redis-windows read` or `plain`), or not.
    pub fn read_window_keys(&self, on: bool) {
        self.window_keys.store(on, Ordering::Relaxed);
    }

    fn set(&self) -> &Set {
        match self.window_keys.load(Ordering::Relaxed) {
            true => &self.with,
            false => &self.without,
        }
    }

    /// `EVALSHA <sha> 1 <key> <limit> <unit_us> <burst> <mode> <n>` (or `EVAL <source> …`),
    /// then `'' <penalty_us>` for a limit with a penalty. The bucket key is the only key: a
    /// cluster client routes the command by it.
    pub fn command(&self, charge: &Charge, call: Call) -> Cmd {
        let script = match (charge.params.algorithm, charge.params.period) {
            (Algorithm::Gcra, _) => &self.set().gcra,
            (Algorithm::SlidingWindow, _) => &self.set().sliding,
            (Algorithm::FixedWindow, Some(_)) => &self.set().calendar,
            (Algorithm::FixedWindow, None) => &self.set().fixed,
        };
        let (name, body) = match call {
            Call::Sha => ("EVALSHA", script.sha()),
            Call::Source => ("EVAL", script.source()),
        };
        let (mode, n) = mode(charge.hits);
        let p = &charge.params;
        let (_, unit_us, burst) = wire(p);
        let mut cmd = redis::cmd(name);
        cmd.arg(body).arg(1).arg(&charge.key).arg(p.limit).arg(unit_us).arg(burst).arg(mode).arg(n);
        if p.penalty_us > 0 {
            // No test clock (`''`: the server's TIME), then the penalty.
            cmd.arg("").arg(p.penalty_us);
        }
        cmd
    }

    /// The script call of the charges `members` of `batch` (indices, in order; every key on
    /// one slot): [`command`](Self::command) for one member, `joint.lua` for more — in its
    /// `each` mode when `coalesced` (independent members, see `Groups::coalesced`).
    pub fn part(&self, batch: &[Charge], members: &[usize], coalesced: bool, call: Call) -> Cmd {
        match members {
            [one] => self.command(&batch[*one], call),
            _ => {
                let mut cmd = self.joint(members.iter().map(|&i| &batch[i]), call);
                if coalesced {
                    // No test clock (`''`: the server's TIME), then the `each` flag.
                    cmd.arg("").arg(1);
                }
                cmd
            }
        }
    }

    /// `EVALSHA <sha> <k> <key>… <m> (<key index> <algorithm> <limit> <unit_us> <burst>
    /// <mode> <n> <penalty_us>)×m`: the distinct keys in order of first use, then each member.
    pub fn joint<'a>(&self, members: impl Iterator<Item = &'a Charge> + Clone, call: Call) -> Cmd {
        members_command(&self.set().joint, members, call, &[], |_| {})
    }

    /// `EVALSHA <sha> <k + 2> <key>… <R> <X> <id> <ttl_us> '' <m> (<key index> <algorithm>
    /// <limit> <unit_us> <burst> <mode> <n> <penalty_us>)×m`: `reserve.lua`'s call for the
    /// charges of `group` naming `reservation` (the record keys under the first bucket's
    /// hash tag, `record_keys`).
    pub fn reserve(&self, group: &[Charge], reservation: &Reservation, call: Call) -> Cmd {
        let (r, x) = record_keys(group.first().map_or("", |c| c.key.as_str()));
        let head = |cmd: &mut Cmd| {
            // No test clock: the server's TIME.
            cmd.arg(&reservation.id).arg(reservation.ttl_us).arg("");
        };
        members_command(&self.set().reserve, group.iter(), call, &[&r, &x], head)
    }
}

/// A call of `script` over `members`: the number of keys, the members' distinct keys in
/// order of first use, `extra` keys, `head`'s arguments, then `<m>` and 8 arguments per
/// member (`joint.lua`'s layout).
fn members_command<'a>(
    script: &Script,
    members: impl Iterator<Item = &'a Charge>,
    call: Call,
    extra: &[&str],
    head: impl Fn(&mut Cmd),
) -> Cmd {
    let (name, body) = match call {
        Call::Sha => ("EVALSHA", script.sha()),
        Call::Source => ("EVAL", script.source()),
    };
    let mut keys: Vec<&str> = Vec::new();
    let mut args: Vec<(usize, &Charge)> = Vec::new();
    for charge in members {
        let index = keys.iter().position(|k| *k == charge.key).unwrap_or_else(|| {
            keys.push(&charge.key);
            keys.len() - 1
        });
        args.push((index + 1, charge));
    }
    let mut cmd = redis::cmd(name);
    cmd.arg(body).arg(keys.len() + extra.len());
    for key in keys.iter().chain(extra) {
        cmd.arg(*key);
    }
    head(&mut cmd);
    cmd.arg(args.len());
    for (index, charge) in args {
        let p = &charge.params;
        let (mode, n) = mode(charge.hits);
        let (algorithm, unit_us, burst) = wire(p);
        cmd.arg(index).arg(algorithm).arg(p.limit).arg(unit_us).arg(burst).arg(mode).arg(n).arg(p.penalty_us);
    }
    cmd
}

impl Scripts {
    /// `EVALSHA <sha> <k> <key>… '' <r> (<algorithm> <limit> <unit_us> <burst> <penalty_us>)×r
    /// (<kind> <m> (<key index> <rule index> <mode> <n>)×m)…`: every group of every rider
    /// (a request's charges and how they are grouped), in order, as one `batch.lua` call;
    /// the keys and the rules (algorithm and numbers) once each, by first use. A rider's
    /// groups of one and coalesced groups are independent (`e`), its other groups joint
    /// (`j`). The reply holds one entry per charge, riders in order ([`parse_batch`](super::replies::parse_batch)).
    pub fn batch<'a>(&self, riders: &[(&'a [Charge], &Groups)], call: Call) -> Cmd {
        let (name, body) = match call {
            Call::Sha => ("EVALSHA", self.set().batch.sha()),
            Call::Source => ("EVAL", self.set().batch.source()),
        };
        let charges: usize = riders.iter().map(|(batch, _)| batch.len()).sum();
        // Keys by first use: a linear scan for a small call, a map past that (a call holds
        // at most 64 charges, `batch::MAX_CHARGES`). Rules are few: always a scan.
        let mut keys: Vec<&'a str> = Vec::with_capacity(charges);
        let mut key_index: Option<HashMap<&'a str, usize>> = (charges > 16).then(HashMap::new);
        let mut rules: Vec<&'a Params> = Vec::new();
        let mut members: Vec<u64> = Vec::with_capacity(4 * charges);
        let mut layout: Vec<(&str, usize)> = Vec::new();
        for &(batch, groups) in riders {
            for range in groups.ranges(batch.len()) {
                let kind = if range.len() == 1 || groups.is_coalesced() { "e" } else { "j" };
                layout.push((kind, range.len()));
                for charge in &batch[range] {
                    let key = charge.key.as_str();
                    let k = match &mut key_index {
                        Some(map) => *map.entry(key).or_insert_with(|| {
                            keys.push(key);
                            keys.len()
                        }),
                        None => match keys.iter().position(|k| *k == key) {
                            Some(i) => i + 1,
                            None => {
                                keys.push(key);
                                keys.len()
                            }
                        },
                    };
                    let r = match rules.iter().position(|p| **p == charge.params) {
                        Some(i) => i + 1,
                        None => {
                            rules.push(&charge.params);
                            rules.len()
                        }
                    };
                    let (mode, n) = mode(charge.hits);
                    members.extend([k as u64, r as u64, u64::from(mode), n]);
                }
            }
        }
        let mut cmd = redis::cmd(name);
        cmd.arg(body).arg(keys.len());
        for key in &keys {
            cmd.arg(*key);
        }
        // No test clock: the server's TIME.
        cmd.arg("").arg(rules.len());
        for p in rules {
            let (algorithm, unit_us, burst) = wire(p);
            cmd.arg(algorithm).arg(p.limit).arg(unit_us).arg(burst).arg(p.penalty_us);
        }
        let mut members = members.chunks_exact(4);
        for (kind, m) in layout {
            cmd.arg(kind).arg(m);
            for member in members.by_ref().take(m) {
                cmd.arg(member);
            }
        }
        cmd
    }
}

/// The algorithm, `unit_us` and `burst` arguments of a limit: its own, but for a calendar
/// period (`Params::period`), which is `calendar_window` with the period's end in place of
/// `unit_us` and its start in place of `burst` (the fixed window reads no burst; see
/// `lua/README.md`, "Calendar periods").
fn wire(p: &Params) -> (&'static str, u64, u64) {
    match p.period {
        Some(period) => ("calendar_window", period.end_us, period.start_us),
        None => (p.algorithm.as_str(), p.unit_us, p.burst),
    }
}

/// The script's `mode` and `n` for `hits`.
fn mode(hits: Hits) -> (u8, u64) {
    match hits {
        Hits::Consume(n) => (0, n),
        Hits::Peek => (1, 0),
        Hits::Overdraw(n) => (3, n),
        Hits::Refund(n) => (2, n),
    }
}
