//! What a soak run does, drawn from its seed before it starts: the topology, the instances,
//! the policies, and the schedule of faults. The same seed draws the same schedule, so a
//! failing run is replayed by its seed (the workload's timing is the machine's).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::time::Duration;

/// Which Redis the instances share.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Topology {
    /// One redis-server behind a TCP front.
    Single,
    /// A master, a replica and a sentinel.
    Sentinel,
    /// Three masters, each with a replica, every node behind a TCP front it announces.
    Cluster,
}

impl Topology {
    pub fn parse(text: &str) -> Option<Topology> {
        match text {
            "single" => Some(Topology::Single),
            "sentinel" => Some(Topology::Sentinel),
            "cluster" => Some(Topology::Cluster),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Topology::Single => "single",
            Topology::Sentinel => "sentinel",
            Topology::Cluster => "cluster",
        }
    }
}

/// A config reload the schedule can draw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reload {
    /// `soak_fixed`'s limit moves between 20 and 30 per second.
    LimitChanged,
    /// `soak_fixed` gains (or loses) a rule for a second key.
    RuleAdded,
    /// `soak_switch` moves between `consistency: exact` and `approximate`.
    Switched,
    /// `soak_sliding` gains (or loses) a `penalty`.
    PenaltyAdded,
}

/// One fault of the schedule. Targets (`master`, `instance`) are indexes taken modulo what
/// the topology has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// SIGSTOP a Redis master, SIGCONT after the hold.
    Freeze { master: usize },
    /// SIGKILL a Redis master, start it again (empty) after the hold.
    KillRedis,
    /// Every reply through a master's front held this long, for the hold.
    Latency { master: usize, millis: u64 },
    /// Every connection open through a master's front goes silent (no FIN, no RST).
    Silence { master: usize },
    /// `CLIENT KILL TYPE normal` on every master.
    ClientKill,
    /// Sentinel: `SENTINEL FAILOVER`; cluster: `CLUSTER FAILOVER` on a master's replica.
    Failover { master: usize },
    /// Cluster: the slot of a hot key moved to another master while it is charged.
    SlotMigration { key: usize },
    /// SIGKILL a Tollgate instance, start it again after the hold.
    KillInstance { instance: usize },
    /// SIGTERM a Tollgate instance (it drains), start it again once it exited.
    DrainInstance { instance: usize },
    /// A policy file rewritten (hot reload on every instance).
    Reload(Reload),
    /// One instance's own front to Redis drops every reply (the command ran, the instance
    /// saw its connection close): that instance cut from Redis, the others not. Never drawn:
    /// the operators' override scenario applies it (`ops.rs`, single topology).
    CutInstance { instance: usize },
}

impl Fault {
    /// Whether the fault is one of the store's: while it lasts and for its recovery time
    /// after, invariant 2 (healthy means deciding) does not apply to any instance.
    pub fn is_store_fault(self) -> bool {
        !matches!(self, Fault::KillInstance { .. } | Fault::DrainInstance { .. } | Fault::Reload(_))
    }

    /// Whether the fault keeps `instance` from its store (every store fault does, a cut
    /// only the instance cut).
    pub fn cuts(self, instance: usize, instances: usize) -> bool {
        match self {
            Fault::CutInstance { instance: i } => i % instances == instance,
            fault => fault.is_store_fault(),
        }
    }

    /// The stated recovery time after the fault heals (docs/reliability.md): the breaker's
    /// cool-down and probe, a silent connection's reply timeout, a sentinel's master switch.
    pub fn recovery(self) -> Duration {
        match self {
            Fault::ClientKill | Fault::SlotMigration { .. } => Duration::from_secs(2),
            Fault::KillInstance { .. } | Fault::DrainInstance { .. } | Fault::Reload(_) => Duration::ZERO,
            _ => Duration::from_secs(5),
        }
    }

    /// The kind's name, for the tally of draws.
    pub fn kind(self) -> &'static str {
        match self {
            Fault::Freeze { .. } => "freeze",
            Fault::KillRedis => "kill_redis",
            Fault::Latency { .. } => "latency",
            Fault::Silence { .. } => "silence",
            Fault::ClientKill => "client_kill",
            Fault::Failover { .. } => "failover",
            Fault::SlotMigration { .. } => "slot_migration",
            Fault::KillInstance { .. } => "kill_instance",
            Fault::DrainInstance { .. } => "drain_instance",
            Fault::Reload(Reload::LimitChanged) => "reload_limit",
            Fault::Reload(Reload::RuleAdded) => "reload_rule",
            Fault::Reload(Reload::Switched) => "reload_switch",
            Fault::Reload(Reload::PenaltyAdded) => "reload_penalty",
            Fault::CutInstance { .. } => "cut_instance",
        }
    }
}

/// One step of the schedule: wait `gap` (healthy), then apply `fault` and hold it `hold`.
#[derive(Clone, Copy, Debug)]
pub struct Step {
    pub gap: Duration,
    pub fault: Fault,
    pub hold: Duration,
}

/// A planted violation, one per invariant: the soak must report it (`tests/soak/main.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plant {
    /// A bucket's count deleted from Redis mid-window: it admits past its limit.
    OverLimit,
    /// Redis frozen 2 s with no fault recorded: the breaker opens while "healthy".
    UndeclaredFreeze,
    /// A freeze recorded as healed while Redis stays frozen 6 s more.
    SlowRecovery,
    /// An instance stopped (SIGSTOP) for 3 s with no fault recorded: a wedged runtime.
    Wedged,
    /// An extra charge of a counted bucket written straight to Redis: a double charge.
    DoubleCharge,
    /// Idle connections opened to an instance and never closed: connections grow.
    Leak,
    /// The buckets of one client's own keys deleted from Redis for 1.5 s: answers no
    /// sequence of exact decisions gives.
    ForgetOwned,
    /// A spent bucket deleted between its spending and the other instances' peeks.
    PeekForgotten,
    /// A reset recorded but never sent: the instances go on denying.
    ResetUnsent,
    /// An override set again, unrecorded, after its recorded end.
    OverrideReplayed,
    /// A budget's GCRA state written far in the future: a debt past its bound.
    DebtPlanted,
}

/// Everything a run needs, drawn from the seed.
#[derive(Clone, Debug)]
pub struct Plan {
    pub seed: u64,
    pub topology: Topology,
    pub run: Duration,
    pub instances: usize,
    pub steps: Vec<Step>,
    pub plant: Option<Plant>,
}

/// The last stretch of every run has no fault: recoveries complete inside the run.
pub const QUIET_TAIL: Duration = Duration::from_secs(7);

impl Plan {
    /// The schedule for `seed` on `topology`, over `run`.
    pub fn draw(seed: u64, topology: Topology, run: Duration) -> Plan {
        let mut rng = StdRng::seed_from_u64(seed);
        let instances = 3;
        let mut steps = Vec::new();
        let mut at = Duration::ZERO;
        loop {
            let gap = Duration::from_millis(rng.random_range(1_500..4_000));
            let fault = draw_fault(&mut rng, topology, instances);
            let hold = match fault {
                Fault::Freeze { .. } => ms(&mut rng, 100, 5_000),
                // A sentinel fails over after 1 s down: a shorter kill is a restart.
                Fault::KillRedis if topology == Topology::Sentinel => ms(&mut rng, 100, 800),
                Fault::KillRedis => ms(&mut rng, 100, 3_000),
                Fault::Latency { .. } => ms(&mut rng, 500, 3_000),
                Fault::Silence { .. } => ms(&mut rng, 200, 1_500),
                Fault::KillInstance { .. } => ms(&mut rng, 100, 2_000),
                _ => Duration::ZERO,
            };
            let end = at + gap + hold + fault.recovery().max(Duration::from_secs(2));
            if end + QUIET_TAIL > run {
                break;
            }
            at = end;
            steps.push(Step { gap, fault, hold });
        }
        Plan { seed, topology, run, instances, steps, plant: None }
    }

    /// The command that replays this run.
    pub fn replay_command(&self) -> String {
        format!(
            "SOAK_SEED={} SOAK_TOPOLOGY={} SOAK_SECS={} cargo test --test soak -- --ignored --exact replay --nocapture",
            self.seed,
            self.topology.name(),
            self.run.as_secs()
        )
    }
}

fn ms(rng: &mut StdRng, low: u64, high: u64) -> Duration {
    Duration::from_millis(rng.random_range(low..=high))
}

fn draw_fault(rng: &mut StdRng, topology: Topology, instances: usize) -> Fault {
    let master = rng.random_range(0..3);
    let instance = rng.random_range(0..instances);
    let reload = [Reload::LimitChanged, Reload::RuleAdded, Reload::Switched, Reload::PenaltyAdded]
        [rng.random_range(0..4)];
    let mut kinds: Vec<Fault> = vec![
        Fault::Freeze { master },
        Fault::ClientKill,
        Fault::KillInstance { instance },
        Fault::DrainInstance { instance },
        Fault::Reload(reload),
    ];
    match topology {
        Topology::Single => kinds.extend([
            Fault::KillRedis,
            Fault::Latency { master, millis: rng.random_range(5..=60) },
            Fault::Silence { master },
        ]),
        Topology::Sentinel => kinds.extend([Fault::KillRedis, Fault::Failover { master }]),
        Topology::Cluster => kinds.extend([
            Fault::KillRedis,
            Fault::Latency { master, millis: rng.random_range(5..=60) },
            Fault::Silence { master },
            Fault::Failover { master },
            Fault::SlotMigration { key: rng.random_range(0..4) },
        ]),
    }
    kinds[rng.random_range(0..kinds.len())]
}
