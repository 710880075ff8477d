//! Invariants 8–11: what the operators' scenarios (`ops.rs`) and the budgets' answers
//! must show — a peek never reports more room than the bucket has after the stated sync
//! delay, a reset is seen by every instance within 1 s, an ended override never returns,
//! an overdraft's debt stays within its bound.

use crate::load::Outcome;
use crate::model_check::{model_troubled as troubled, read_missed};
use crate::ops::{OVERRIDE_TTL_S, OVERRIDE_VISIBLE_US, RESET_VISIBLE_US, SYNC_DELAY_US};
use crate::plan::Fault;
use crate::policies;
use crate::run::RunLog;
use crate::verdict::{faults_around, loss_until, secs, Verdict};

pub fn judge(log: &RunLog) -> Vec<Verdict> {
    vec![peeks(log), resets(log), overrides(log), debts(log)]
}

/// Whether a store fault (or a cut) reached `instance`, or an instance was killed or
/// drained, within `[a, b]` or its recovery before `a`; or data was lost.
fn disturbed(log: &RunLog, instances: &[usize], a: u64, b: u64) -> bool {
    log.faults.iter().any(|f| {
        let reaches = instances.iter().any(|i| f.fault.cuts(*i, log.instances))
            || matches!(f.fault, Fault::KillInstance { .. } | Fault::DrainInstance { .. });
        let until = f.heal + f.fault.recovery().as_micros() as u64;
        (reaches && f.start <= b && until >= a) || (f.data_loss && f.start <= b && loss_until(log, f) >= a)
    })
}

/// Invariant 8: a peek (on every instance but the spender a first read, or a read again
/// of a bucket it peeked before the spend) reports no more
/// room than the limit less what was admitted in its window, once the stated sync delay
/// (approximate; exact: none) has passed since the last admission.
fn peeks(log: &RunLog) -> Verdict {
    let (mut violations, mut checked, mut excused) = (Vec::new(), 0, 0);
    const MINUTE: u64 = 60_000_000;
    for check in &log.ops.peeks {
        let admitted: Vec<_> = check.spends.iter().filter(|p| p.status.is_some_and(|s| s.ok)).collect();
        let Some(first) = check.spends.first() else { continue };
        let last = check.spends.iter().map(|p| p.recv).max().unwrap_or(first.recv);
        let spent: u64 = admitted.iter().map(|p| p.hits).sum();
        let delay = if check.domain == "soak_minute" { 0 } else { SYNC_DELAY_US };
        for peek in &check.peeks {
            let Some(status) = peek.status else { continue };
            if first.sent / MINUTE != peek.recv / MINUTE || peek.sent < last + delay {
                continue;
            }
            let room = policies::PER_MINUTE.saturating_sub(spent);
            let over = u64::from(status.remaining) > room || (status.ok && room == 0);
            if !over {
                checked += 1;
                continue;
            }
            if disturbed(log, &[check.spender, peek.instance], first.sent, peek.recv) {
                excused += 1;
                continue;
            }
            checked += 1;
            violations.push(format!(
                "{} {}: {spent} admitted through instance {} by {:.3} s; instance {}'s peek at {:.3} s answered {} remaining {} (room {room}){}",
                check.domain,
                check.value,
                check.spender,
                secs(log, last),
                peek.instance,
                secs(log, peek.sent),
                if status.ok { "OK" } else { "OVER_LIMIT" },
                status.remaining,
                faults_around(log, first.sent, peek.recv)
            ));
        }
    }
    Verdict {
        name: "8 peeks never report room that is gone",
        slack: format!(
            "a peek in the spending's window, {} ms after its last admission on approximate domains (4 I idle wait + I/2 \
             wake + a sync call's 4 I ≥ 1 s deadline), at once on exact ones: remaining ≤ limit − admitted, denied at 0; \
             {excused} excused (a fault reached the spender or the peeker)",
            SYNC_DELAY_US / 1_000
        ),
        checked,
        violations,
    }
}

/// Invariant 9: after a reset answered, a charge on every instance 1 s later is admitted
/// (each instance had denied the bucket before the reset).
fn resets(log: &RunLog) -> Verdict {
    let (mut violations, mut checked, mut excused, mut inconclusive) = (Vec::new(), 0, 0, 0);
    for check in &log.ops.resets {
        let denied_by = |i: usize| {
            check.before.iter().any(|p| {
                p.instance == i && p.status.is_some_and(|s| !s.ok && !crate::ops_scenarios::failure_like(&s))
            })
        };
        if check.reset.2 != 200 || !(0..log.instances).all(denied_by) || check.after.is_empty() {
            inconclusive += 1;
            continue;
        }
        for probe in &check.after {
            let Some(status) = probe.status else { continue };
            checked += 1;
            if status.ok {
                continue;
            }
            let all: Vec<usize> = (0..log.instances).collect();
            // A failure answer is excused when the instance failed then; a real denial only
            // when a read of the bucket may have missed (or a fault reached the fleet).
            let excuse = if crate::ops_scenarios::failure_like(&status) {
                troubled(log, probe.instance, check.reset.0, probe.recv)
            } else {
                read_missed(log, probe.instance, check.reset.0, probe.recv)
            };
            if excuse || disturbed(log, &all, check.reset.0, probe.recv) {
                excused += 1;
                continue;
            }
            violations.push(format!(
                "{} {}: reset through instance {} answered at {:.3} s; instance {} denied a charge sent at {:.3} s \
                 (remaining {}, reset {:?} s){}",
                check.domain,
                check.value,
                check.through,
                secs(log, check.reset.1),
                probe.instance,
                secs(log, probe.sent),
                status.remaining,
                status.reset_s,
                faults_around(log, check.reset.0, probe.recv)
            ));
        }
    }
    Verdict {
        name: "9 resets seen everywhere",
        slack: format!(
            "a charge {} ms after the reset answered is admitted on every instance (exact, approximate, penalized); \
             {excused} excused (a fault; a failure answer on an instance failing then; a denial on one whose approximate read missed), {inconclusive} scenarios where not every instance denied first",
            RESET_VISIBLE_US / 1_000
        ),
        checked,
        violations,
    }
}

/// Invariant 10: an OK of `soak_incident` (which denies everything) comes only from an
/// override possibly in force on that instance: from its set's send to its end (the
/// `DELETE` answered, else its expiry) plus 1 s; an instance cut from Redis may keep it
/// until 1 s after it can read again (cut restored + 5 s recovery). An end taken while a
/// store fault held Redis reaches the other instances once Redis takes it (docs/operations.md,
/// "Fleet-wide"): until the fault's recovery + 1 s. Redis losing data it had taken (a
/// failover to a replica the end had not reached) may lose the end: until the expiry.
fn overrides(log: &RunLog) -> Verdict {
    let (mut violations, mut checked) = (Vec::new(), 0);
    for call in log.calls.iter().filter(|c| c.domain == "soak_incident") {
        let Outcome::Answered { overall: true, .. } = call.outcome else { continue };
        checked += 1;
        let explained = log.ops.overrides.iter().any(|o| {
            let expiry = o.set.0 + OVERRIDE_TTL_S * 1_000_000;
            let mut end = match o.end {
                Some((_, recv, 200)) => recv.min(expiry),
                _ => expiry,
            } + OVERRIDE_VISIBLE_US;
            if let Some((cut, _, healed)) = o.cut {
                if cut == call.instance {
                    end = end.max(healed + 5_000_000 + OVERRIDE_VISIBLE_US);
                }
            }
            if let Some((sent, _, 200)) = o.end {
                for f in &log.faults {
                    let recovered = f.heal + f.fault.recovery().as_micros() as u64;
                    if f.fault.is_store_fault() && f.start <= end && recovered >= sent {
                        end = end.max(recovered + OVERRIDE_VISIBLE_US);
                    }
                    if f.data_loss && f.start <= expiry && loss_until(log, f) >= sent {
                        end = end.max(expiry + OVERRIDE_VISIBLE_US);
                    }
                }
            }
            call.recv >= o.set.0 && call.sent <= end
        });
        if !explained {
            let near: Vec<String> = log
                .ops
                .overrides
                .iter()
                .filter(|o| o.set.0 <= call.recv && o.set.0 + 60_000_000 >= call.sent)
                .map(|o| {
                    format!(
                        "{} set via {} at {:.2} s ({}), ended via {} at {:?}, cut {:?}",
                        o.mode,
                        o.set_on,
                        secs(log, o.set.1),
                        o.set.2,
                        o.end_on,
                        o.end.map(|e| (format!("{:.2} s", secs(log, e.1)), e.2)),
                        o.cut.map(|c| (c.0, format!("{:.2}–{:.2} s", secs(log, c.1), secs(log, c.2))))
                    )
                })
                .collect();
            violations.push(format!(
                "instance {} answered OK at {:.3}–{:.3} s with no override in force; overrides: {}",
                call.instance,
                secs(log, call.sent),
                secs(log, call.recv),
                near.join("; ")
            ));
        }
    }
    Verdict {
        name: "10 ended overrides stay ended",
        slack: format!(
            "an OK within [set sent, end + {} ms] (end: DELETE answered 200, else expiry); the instance cut: until 5 s \
             after its cut ended + {} ms; an end during a store fault: its recovery + 1 s; Redis data lost after an \
             end: the expiry",
            OVERRIDE_VISIBLE_US / 1000,
            OVERRIDE_VISIBLE_US / 1000
        ),
        checked,
        violations,
    }
}

/// Invariant 11: every answer of a budget (`overdraft: true`) says the bucket is full again
/// within its debt's bound: GCRA's TAT never past now + tolerance + one unit, so no reset
/// past tolerance + unit + one emission interval (the wait for one hit); a fixed window's
/// debt ends with its window.
fn debts(log: &RunLog) -> Verdict {
    let (mut violations, mut checked) = (Vec::new(), 0);
    let rate = policies::BUDGET_PER_SECOND;
    let gcra_us = 1_000_000 + 1_000_000 + 1_000_000 / rate;
    for call in log.calls.iter().filter(|c| c.domain.starts_with("soak_budget")) {
        let Outcome::Answered { statuses, .. } = &call.outcome else { continue };
        let bound_us = if call.domain == "soak_budget_gcra" { gcra_us } else { 1_000_000 };
        for (i, status) in statuses.iter().enumerate() {
            if call.asks.get(i).is_none_or(|a| a.over.is_some()) {
                continue;
            }
            checked += 1;
            let Some(reset) = status.reset_s else { continue };
            if reset.max(0) as u64 > bound_us.div_ceil(1_000_000) {
                violations.push(format!(
                    "{} {}={} at {:.3} s on instance {}: hits {} answered reset {reset} s (bound {} s)",
                    call.domain,
                    call.descriptors[i].0,
                    call.descriptors[i].1,
                    secs(log, call.sent),
                    call.instance,
                    call.hits(i),
                    bound_us.div_ceil(1_000_000)
                ));
            }
        }
    }
    violations.sort();
    Verdict {
        name: "11 overdraft debt bounded",
        slack: format!(
            "GCRA {rate}/s: reset ≤ ⌈tolerance 1 s + unit 1 s + 1/{rate} s⌉ = {} s; fixed window: ≤ 1 s",
            gcra_us.div_ceil(1_000_000)
        ),
        checked,
        violations,
    }
}
