//! The soak: every stated guarantee checked under a seeded random schedule of faults, with
//! real processes only — `tollgate serve` instances started into paced client traffic, a
//! real Redis in one of three topologies (single behind a TCP front; master + replica +
//! sentinel; three masters with replicas, each behind a front), and the faults a production
//! deployment produces (`plan.rs`). Each run ends with a verdict per invariant
//! (`verdict.rs`), drawn from the clients' own log, once-a-second probes and Redis's counts.
//!
//! - `single`, `sentinel`, `cluster`: one short run per topology, on every `make test`; the
//!   seed is drawn from the clock unless `SOAK_SEED` is set, and printed with the command
//!   that replays it.
//! - `replay` (ignored): `SOAK_SEED`, `SOAK_TOPOLOGY`, `SOAK_SECS`; the long runs of
//!   docs/reliability.md.
//! - `planted_*`: one violation per invariant planted from outside (`plan::Plant`), each
//!   reported by its verdict: the invariants can fail.

#[allow(dead_code)]
#[path = "../support/front.rs"]
mod front_support;
#[allow(dead_code)]
#[path = "../support/redis.rs"]
mod redis_support;

mod fleet;
mod load;
mod model;
mod model_check;
mod ops;
mod ops_scenarios;
mod plan;
mod policies;
mod run;
mod stores;
mod verdict;
mod verdict_ops;
mod watch;

use std::collections::BTreeMap;
use std::sync::RwLock;
use std::time::Duration;

use plan::{Plan, Plant, Topology};
use verdict::Verdict;

/// A run judged on its timing (a topology's CI run, a replay) takes the machine alone; the
/// planted runs, whose planted violation fails its invariant however busy the machine is,
/// may overlap one another (as many as the test harness runs at once: two threads on a
/// 2-core machine), which halves their share of CI's time.
static RUNS: RwLock<()> = RwLock::new(());

/// A CI run per topology lasts this long (plus set-up).
const CI_RUN: Duration = Duration::from_secs(35);
/// A planted run: no scheduled fault, one planted violation.
const PLANT_RUN: Duration = Duration::from_secs(12);
/// A planted run whose plant is an operator's scenario (`ops.rs`): it starts once every
/// instance is ready and takes a few seconds, and clients must answer after it.
const OPS_PLANT_RUN: Duration = Duration::from_secs(20);

fn seed() -> u64 {
    std::env::var("SOAK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| load::now_us() % 1_000_000_007)
}

/// Runs `plan` and prints its report; the verdicts.
fn soak(plan: Plan) -> (Vec<Verdict>, String) {
    let (_alone, _shared) = if plan.plant.is_some() {
        (None, Some(RUNS.read().unwrap_or_else(|e| e.into_inner())))
    } else {
        (Some(RUNS.write().unwrap_or_else(|e| e.into_inner())), None)
    };
    println!(
        "soak: seed {} on {} for {} s ({} steps)",
        plan.seed,
        plan.topology.name(),
        plan.run.as_secs(),
        plan.steps.len()
    );
    println!("replay: {}", plan.replay_command());
    println!("schedule:");
    for step in &plan.steps {
        println!(
            "  after {:>5} ms: {:?}, held {} ms",
            step.gap.as_millis(),
            step.fault,
            step.hold.as_millis()
        );
    }
    let replay = plan.replay_command();
    let log = run::run(plan);
    let verdicts = verdict::judge(&log);
    println!("soak: {} of {} planned steps ran", log.faults.len(), log.plan.steps.len());
    let mut tally: BTreeMap<&str, usize> = BTreeMap::new();
    for f in &log.faults {
        *tally.entry(f.fault.kind()).or_default() += 1;
    }
    let answered = log.calls.iter().filter(|c| matches!(c.outcome, load::Outcome::Answered { .. })).count();
    let descriptors: usize = log.calls.iter().map(|c| c.descriptors.len()).sum();
    println!(
        "soak: {} calls ({answered} answered, {descriptors} descriptors) in {:.1} s; faults {tally:?}",
        log.calls.len(),
        (log.end - log.start) as f64 / 1e6
    );
    let mut report = String::new();
    for v in &verdicts {
        let line = format!(
            "  {} {:<28} checked {:>6}; slack: {}\n",
            if v.passed() { "PASS" } else { "FAIL" },
            v.name,
            v.checked,
            v.slack
        );
        report.push_str(&line);
        for violation in v.violations.iter().take(8) {
            report.push_str(&format!("      {violation}\n"));
        }
        if v.violations.len() > 8 {
            report.push_str(&format!("      … {} more\n", v.violations.len() - 8));
        }
    }
    print!("{report}");
    // Every violation, for a look after the run: target/tmp/soak/<topology>-<seed>/.
    let kept = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("soak").join(format!(
        "{}-{}",
        log.plan.topology.name(),
        log.plan.seed
    ));
    let all: Vec<String> =
        verdicts.iter().flat_map(|v| v.violations.iter().map(move |x| format!("{}: {x}", v.name))).collect();
    let _ = std::fs::write(kept.join("violations.txt"), all.join("\n"));
    if verdicts.iter().any(|v| !v.passed()) {
        for (i, text) in log.logs.iter().enumerate() {
            let tail: Vec<&str> = text.lines().rev().take(15).collect();
            println!(
                "--- instance {i} log tail ---\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
    }
    (verdicts, format!("{report}replay: {replay}"))
}

fn ci(topology: Topology) {
    let (verdicts, report) = soak(Plan::draw(seed(), topology, CI_RUN));
    assert!(verdicts.iter().all(Verdict::passed), "soak on {} found violations:\n{report}", topology.name());
}

#[test]
fn single() {
    ci(Topology::Single);
}

#[test]
fn sentinel() {
    ci(Topology::Sentinel);
}

#[test]
fn cluster() {
    ci(Topology::Cluster);
}

/// `SOAK_SEED=… SOAK_TOPOLOGY=single|sentinel|cluster SOAK_SECS=… cargo test --test soak --
/// --ignored --exact replay --nocapture`
#[test]
#[ignore]
fn replay() {
    let topology =
        std::env::var("SOAK_TOPOLOGY").ok().and_then(|t| Topology::parse(&t)).unwrap_or(Topology::Single);
    let secs = std::env::var("SOAK_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(CI_RUN.as_secs());
    ci_with(topology, Duration::from_secs(secs));
}

fn ci_with(topology: Topology, run: Duration) {
    let (verdicts, report) = soak(Plan::draw(seed(), topology, run));
    assert!(verdicts.iter().all(Verdict::passed), "soak on {} found violations:\n{report}", topology.name());
}

/// A run with no scheduled fault and `plant`: the verdict `invariant` must fail.
fn planted(plant: Plant, invariant: &str) {
    let run = match plant {
        Plant::PeekForgotten | Plant::ResetUnsent | Plant::OverrideReplayed => OPS_PLANT_RUN,
        _ => PLANT_RUN,
    };
    let mut plan = Plan::draw(seed(), Topology::Single, run);
    plan.steps.clear();
    plan.plant = Some(plant);
    let (verdicts, report) = soak(plan);
    let verdict = verdicts.iter().find(|v| v.name.starts_with(invariant)).expect("an invariant of that name");
    assert!(!verdict.passed(), "planted {plant:?}, yet invariant {invariant} passed:\n{report}");
}

#[test]
fn planted_bucket_over_its_limit_fails_invariant_1() {
    planted(Plant::OverLimit, "1 ");
}

#[test]
fn planted_undeclared_freeze_fails_invariant_2() {
    planted(Plant::UndeclaredFreeze, "2 ");
}

#[test]
fn planted_late_recovery_fails_invariant_3() {
    planted(Plant::SlowRecovery, "3 ");
}

#[test]
fn planted_wedged_instance_fails_invariant_4() {
    planted(Plant::Wedged, "4 ");
}

#[test]
fn planted_double_charge_fails_invariant_5() {
    planted(Plant::DoubleCharge, "5 ");
}

#[test]
fn planted_connection_leak_fails_invariant_6() {
    planted(Plant::Leak, "6 ");
}

#[test]
fn planted_forgotten_own_keys_fail_invariant_7() {
    planted(Plant::ForgetOwned, "7 ");
}

#[test]
fn planted_peek_of_a_forgotten_bucket_fails_invariant_8() {
    planted(Plant::PeekForgotten, "8 ");
}

#[test]
fn planted_unsent_reset_fails_invariant_9() {
    planted(Plant::ResetUnsent, "9 ");
}

#[test]
fn planted_replayed_override_fails_invariant_10() {
    planted(Plant::OverrideReplayed, "10 ");
}

#[test]
fn planted_debt_past_its_bound_fails_invariant_11() {
    planted(Plant::DebtPlanted, "11 ");
}
