//! The invariants, checked from the clients' own log, the probes and Redis's counts after
//! the run. Each verdict states its slack (docs/scaling.md's and docs/reliability.md's); a
//! violation names the bucket or instance and the moment, with the faults around it.

use std::collections::HashMap;

use crate::load::Outcome;
use crate::plan::{Fault, Reload};
use crate::policies::{self, Toggles};
use crate::run::RunLog;

/// The share of an instance's store calls in healthy time that invariant 2 allows to fail,
/// at the soak's load (`load::CLIENTS_PER_INSTANCE` clients every `load::PACE` per instance,
/// about 375 requests/s and 1,000 descriptors/s each, three debug-built instances, their
/// Redis, fronts and clients on this 2-core machine): lone 10 ms store timeouts while the
/// process was descheduled, 0–0.9 % of calls in runs on a quiet machine. What the invariant
/// is for — a breaker opening, a connection pool gone bad, a stall — fails far above it (the
/// planted freeze: 25–30 %).
pub const HEALTHY_FAILURE_SHARE: f64 = 0.02;
/// Invariant 6's bounds per process.
pub const MAX_RSS_KB: u64 = 256 * 1024;
pub const MAX_FDS: u64 = 256;
pub const MAX_SERIES: u64 = 5_000;

/// One invariant's result.
pub struct Verdict {
    pub name: &'static str,
    pub slack: String,
    pub checked: usize,
    pub violations: Vec<String>,
}

impl Verdict {
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}

pub fn judge(log: &RunLog) -> Vec<Verdict> {
    let mut all = vec![
        limits_hold(log),
        healthy_means_deciding(log),
        recovery(log),
        always_answering(log),
        charged_once(log),
        bounded(log),
        crate::model_check::judge(log),
    ];
    all.extend(crate::verdict_ops::judge(log));
    all
}

pub fn secs(log: &RunLog, at: u64) -> f64 {
    (at as f64 - log.start as f64) / 1e6
}

/// Until when a data-losing fault may leave buckets counted afresh or twice: a second
/// after it healed; on Sentinel 5 s, since the sentinels may fail over only after the
/// fault (a restarted master, seconds later) and each instance follows within its 1 s
/// poll, so for up to a second two masters count the same buckets (docs/scaling.md, Scaling).
pub fn loss_until(log: &RunLog, f: &crate::run::Happened) -> u64 {
    let after = if log.plan.topology == crate::plan::Topology::Sentinel { 5_000_000 } else { 1_000_000 };
    f.heal + after
}

/// Whether `[a, b]` overlaps a fault that lost Redis data, widened by [`loss_until`].
/// A Sentinel master restarted empty counts twice: the restart starts its buckets afresh,
/// and the sentinels may then fail over to the replica (which still holds the older
/// counts) — a second fresh start, with two masters counting apart until every instance
/// followed.
fn data_losses(log: &RunLog, a: u64, b: u64) -> u64 {
    let sentinel = log.plan.topology == crate::plan::Topology::Sentinel;
    log.faults
        .iter()
        .filter(|f| f.data_loss && f.start <= b && loss_until(log, f) >= a)
        .map(|f| if sentinel && matches!(f.fault, Fault::KillRedis) { 2 } else { 1 })
        .sum()
}

/// Whether a reload flipping `which` was written within `[a − 2 s, b]` (instances apply a
/// reload within about a second; a window it touched may see either limit).
fn reload_near(log: &RunLog, which: Reload, a: u64, b: u64) -> bool {
    log.reloads.iter().any(|r| {
        r.at + 2_000_000 >= a && r.at <= b && {
            let flipped = |t: Toggles| match which {
                Reload::LimitChanged => t.limit_changed,
                Reload::RuleAdded => t.rule_added,
                Reload::Switched => t.switched,
                Reload::PenaltyAdded => t.penalty_added,
            };
            flipped(r.before) != flipped(r.after)
        }
    })
}

/// The toggles in force at `at`.
pub fn toggles_at(log: &RunLog, at: u64) -> Toggles {
    log.reloads.iter().rfind(|r| r.at <= at).map(|r| r.after).unwrap_or_default()
}

fn instance_kills(log: &RunLog, a: u64, b: u64) -> u64 {
    log.faults
        .iter()
        .filter(|f| matches!(f.fault, Fault::KillInstance { .. }) && f.start <= b && f.start + 1_000_000 >= a)
        .count() as u64
}

/// An admission the clients saw: a descriptor answered OK, with the hits it charged (or,
/// in a bucket's refunds, the hits it gave back).
struct Admission {
    sent: u64,
    recv: u64,
    instance: usize,
    hits: u64,
}

/// One bucket's admissions, and the refunds answered for it (each may have freed room).
#[derive(Default)]
struct Charges {
    admitted: Vec<Admission>,
    refunds: Vec<Admission>,
}

impl Charges {
    /// Hits refunded by calls overlapping `[a, b]`: room they may have given back.
    fn refunded(&self, a: u64, b: u64) -> u64 {
        self.refunds.iter().filter(|r| r.sent <= b && r.recv >= a).map(|r| r.hits).sum()
    }
}

/// Admissions and refunds per `(domain, bucket)`; a request `limit` override's bucket is
/// `override/key=value`. A refund counts whether or not its answer was seen: one cut off
/// by its client (or answered with an error) may still have been applied, up to when an
/// unseen charge may land (`model_check::settle`).
fn admissions(log: &RunLog) -> HashMap<(&'static str, String), Charges> {
    let mut out: HashMap<(&'static str, String), Charges> = HashMap::new();
    for call in &log.calls {
        let answered = match &call.outcome {
            Outcome::Answered { overall, ok, .. } => Some((*overall, ok)),
            _ => None,
        };
        for (i, (key, value)) in call.descriptors.iter().enumerate() {
            let ask = call.asks[i];
            let bucket =
                if ask.over.is_some() { format!("override/{key}={value}") } else { format!("{key}={value}") };
            let hits = call.hits(i);
            let entry = out.entry((call.domain, bucket)).or_default();
            if ask.refund {
                let recv = match answered {
                    Some(_) => call.recv,
                    None => crate::model_check::settle(log, call.sent, call.recv).max(call.recv),
                };
                entry.refunds.push(Admission { sent: call.sent, recv, instance: call.instance, hits });
                continue;
            }
            let Some((overall, ok)) = answered else { continue };
            // All or nothing: a denied request charged none of its descriptors, whatever
            // each descriptor's own status says.
            if ok[i] && hits > 0 && (call.domain != "soak_aon" || overall) {
                entry.admitted.push(Admission {
                    sent: call.sent,
                    recv: call.recv,
                    instance: call.instance,
                    hits,
                });
            }
        }
    }
    out
}

/// Invariant 1: per bucket and window, admissions ≤ limit + the slack of its mode.
fn limits_hold(log: &RunLog) -> Verdict {
    let mut violations = Vec::new();
    let mut checked = 0;
    let n = log.instances as u64;
    for ((domain, bucket), charges) in admissions(log) {
        let list = &charges.admitted;
        if let Some(value) = bucket.strip_prefix("override/") {
            let rate = u64::from(crate::load::override_rate(value.split_once('=').map_or(value, |x| x.1)));
            checked += list.len();
            gcra_check(log, (domain, &bucket), &charges, (rate, rate, 0), &mut violations);
            continue;
        }
        let windows: Vec<(u64, &'static str)> = match domain {
            "soak_multi" => vec![(1_000_000, "s"), (60_000_000, "m")],
            "soak_fixed" | "soak_sliding" | "soak_aon" | "soak_approx" | "soak_switch"
            | "soak_budget_fixed" | "soak_penalty" => vec![(1_000_000, "")],
            "soak_minute" | "soak_approx_minute" => vec![(60_000_000, "")],
            "soak_gcra" | "soak_lease" | "soak_budget_gcra" => {
                checked += list.len();
                let numbers = match domain {
                    "soak_lease" => {
                        (policies::LEASE_PER_SECOND, policies::LEASE_PER_SECOND, policies::LEASE_TIME_MS)
                    }
                    "soak_budget_gcra" => (policies::BUDGET_PER_SECOND, policies::BUDGET_PER_SECOND, 0),
                    _ => (policies::PER_SECOND, policies::PER_SECOND, 0),
                };
                gcra_check(log, (domain, &bucket), &charges, numbers, &mut violations);
                continue;
            }
            _ => continue,
        };
        for (width, name) in windows {
            let mut per_window: HashMap<u64, u64> = HashMap::new();
            for a in list {
                // Decided within [sent, recv]: counted when that lies inside one window.
                if a.sent / width == a.recv / width {
                    *per_window.entry(a.sent / width).or_default() += a.hits;
                }
            }
            for (w, admitted) in per_window {
                checked += 1;
                let (ws, we) = (w * width, (w + 1) * width);
                let (limit, mut slack) = match (domain, name) {
                    ("soak_multi", "s") => (policies::MULTI_SECOND, 0),
                    ("soak_multi", _) => (policies::MULTI_MINUTE, 0),
                    ("soak_fixed", _) => {
                        let raised = toggles_at(log, ws).limit_changed
                            || toggles_at(log, we).limit_changed
                            || reload_near(log, Reload::LimitChanged, ws, we);
                        (if raised { policies::RAISED } else { policies::PER_SECOND }, 0)
                    }
                    ("soak_approx", _) => (
                        policies::APPROX_PER_SECOND,
                        approx_slack(policies::APPROX_PER_SECOND, n, instance_kills(log, ws, we)),
                    ),
                    ("soak_approx_minute", _) => (
                        policies::PER_MINUTE,
                        approx_slack(policies::PER_MINUTE, n, instance_kills(log, ws, we)),
                    ),
                    ("soak_minute", _) => (policies::PER_MINUTE, 0),
                    ("soak_budget_fixed", _) => (policies::BUDGET_PER_SECOND, 0),
                    ("soak_penalty", _) => (policies::PENALTY_PER_SECOND, 0),
                    ("soak_switch", _) => {
                        let approximate = toggles_at(log, ws).switched || toggles_at(log, we).switched;
                        let switched = reload_near(log, Reload::Switched, ws, we);
                        let l = policies::PER_SECOND;
                        let mode = if approximate || switched {
                            approx_slack(l, n, instance_kills(log, ws, we))
                        } else {
                            0
                        };
                        (l, mode + if switched { l } else { 0 })
                    }
                    _ => (policies::PER_SECOND, 0),
                };
                slack += limit * data_losses(log, ws, we) + charges.refunded(ws, we);
                if admitted > limit + slack {
                    violations.push(format!(
                        "{domain} {bucket}{}: {admitted} admitted in the window at {:.1} s, limit {limit} + slack {slack}{}",
                        if name.is_empty() { String::new() } else { format!(" (limit {name})") },
                        secs(log, ws),
                        faults_around(log, ws, we)
                    ) + &timeline(log, list, ws, we)
                        + &refunds_shown(log, &charges, ws, we));
                }
            }
        }
    }
    violations.sort();
    Verdict {
        name: "1 limits hold",
        slack: "in hits: fixed/sliding windows: limit per window (+ the limit per data-losing fault touching it; + \
                the hits refunded in it; approximate: (N−1)·⌈L/2N⌉ + 2N, + ⌈L/2N⌉ per instance killed; a domain \
                switched: + L); GCRA (and request overrides): burst + rate·t + refunds (+ rate·lease time for leases; \
                + burst per data-losing fault, + burst + rate·1 s on Sentinel)"
            .into(),
        checked,
        violations,
    }
}

/// The approximate bound's excess over the limit (docs/scaling.md, "Approximate mode").
fn approx_slack(limit: u64, n: u64, kills: u64) -> u64 {
    let share = limit.div_ceil(2 * n);
    (n - 1) * share + 2 * n + kills * share
}

/// The longest interval the GCRA check looks at: over-admission shows within a few
/// emission intervals of its cause (the state is one TAT), and every pair of admissions
/// within 10 s costs the check time on long runs.
const GCRA_HORIZON_US: u64 = 10_000_000;

/// GCRA: in any interval of length t, at most burst + rate·t hits admitted, + the hits
/// refunded meanwhile (+ rate·lease time when leased, + burst per data-losing fault, +
/// burst + rate·1 s on Sentinel, where two masters may count apart for a second); t is
/// taken from the first admission's send to the last one's answer, so the check never
/// blames latency.
fn gcra_check(
    log: &RunLog,
    (domain, bucket): (&str, &str),
    charges: &Charges,
    (rate, burst, lease): (u64, u64, u64),
    violations: &mut Vec<String>,
) {
    let list = &charges.admitted;
    let mut sorted: Vec<&Admission> = list.iter().collect();
    sorted.sort_by_key(|a| a.sent);
    for i in 0..sorted.len() {
        let (mut last_recv, mut count) = (0, 0);
        for admission in &sorted[i..] {
            last_recv = last_recv.max(admission.recv);
            count += admission.hits;
            let span_us = last_recv.saturating_sub(sorted[i].sent);
            if span_us > GCRA_HORIZON_US {
                break;
            }
            let allowed = (burst as f64 + (span_us + lease * 1_000) as f64 / 1e6 * rate as f64 + 1.0) as u64
                + charges.refunded(sorted[i].sent, last_recv);
            if count <= allowed {
                continue;
            }
            // A data-losing fault starts the bucket afresh: + burst. On Sentinel two masters
            // may also count it apart until every instance has followed the switch (within
            // its 1 s poll; docs/scaling.md: "for that second a bucket may admit up to twice
            // its limit"): + rate · 1 s more.
            let per_loss =
                if log.plan.topology == crate::plan::Topology::Sentinel { burst + rate } else { burst };
            let allowed =
                allowed + per_loss * data_losses(log, sorted[i].sent.saturating_sub(1_000_000), last_recv);
            if count > allowed {
                violations.push(
                    format!(
                    "{domain} {bucket}: {count} admitted within {:.3} s from {:.2} s, allowed {allowed}{}",
                    span_us as f64 / 1e6,
                    secs(log, sorted[i].sent),
                    faults_around(log, sorted[i].sent, last_recv)
                ) + &timeline(log, list, sorted[i].sent, last_recv)
                        + &refunds_shown(log, charges, sorted[i].sent, last_recv),
                );
                return;
            }
        }
    }
}

/// The bucket's admissions in `[a, b]`: when sent and answered (s into the run) and by
/// which instance.
fn timeline(log: &RunLog, list: &[Admission], a: u64, b: u64) -> String {
    labelled(log, "timeline (sent–answered@instance)", list, a, b)
}

/// The refunds overlapping `[a, b]` (an unanswered one until it may have landed).
fn refunds_shown(log: &RunLog, charges: &Charges, a: u64, b: u64) -> String {
    if charges.refunds.iter().any(|x| x.recv >= a && x.sent <= b) {
        labelled(log, "refunds", &charges.refunds, a, b)
    } else {
        String::new()
    }
}

fn labelled(log: &RunLog, label: &str, list: &[Admission], a: u64, b: u64) -> String {
    let mut inside: Vec<&Admission> = list.iter().filter(|x| x.recv >= a && x.sent <= b).collect();
    inside.sort_by_key(|x| x.sent);
    let shown: Vec<String> = inside
        .iter()
        .take(60)
        .map(|x| format!("{:.3}–{:.3}@{}×{}", secs(log, x.sent), secs(log, x.recv), x.instance, x.hits))
        .collect();
    format!("\n        {label}: {}", shown.join(" "))
}

pub fn faults_around(log: &RunLog, a: u64, b: u64) -> String {
    let near: Vec<String> = log
        .faults
        .iter()
        .filter(|f| f.start <= b + 2_000_000 && f.heal + 6_000_000 >= a)
        .map(|f| {
            format!("{} {:.1}–{:.1} s ({})", f.fault.kind(), secs(log, f.start), secs(log, f.heal), f.note)
        })
        .chain(
            log.reloads
                .iter()
                .filter(|r| r.at <= b && r.at + 3_000_000 >= a)
                .map(|r| format!("reload at {:.1} s → {:?}", secs(log, r.at), r.after)),
        )
        .collect();
    if near.is_empty() {
        String::new()
    } else {
        format!("; around it: {}", near.join("; "))
    }
}

/// Whether `[a, b]` is outside every fault that kept `instance` from its store (every
/// store fault; a cut only the instance cut) and its recovery time.
fn healthy(log: &RunLog, instance: usize, a: u64, b: u64) -> bool {
    a >= log.ready
        && !log.faults.iter().any(|f| {
            f.fault.cuts(instance, log.instances)
                && f.start <= b
                && f.heal + f.fault.recovery().as_micros() as u64 >= a
        })
}

/// Invariant 2: outside a fault and its recovery, the breaker never opens and store
/// failures stay under the stated rate.
fn healthy_means_deciding(log: &RunLog) -> Verdict {
    let mut violations = Vec::new();
    let mut checked = 0;
    for instance in 0..log.instances {
        let samples: Vec<_> = log
            .samples
            .iter()
            .filter(|s| s.instance == instance && s.counted && s.metrics.is_some())
            .collect();
        let (mut failures, mut calls, mut healthy_us) = (0.0, 0.0, 0u64);
        // The intervals that failed most, to tell a burst from a steady rate.
        let mut worst: Vec<(f64, u64, u64)> = Vec::new();
        let mut by_outcome: std::collections::BTreeMap<String, f64> = Default::default();
        for pair in samples.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            if a.pid != b.pid || !healthy(log, instance, a.at, b.at) {
                continue;
            }
            checked += 1;
            let (ma, mb) = (a.metrics.as_ref().expect("scraped"), b.metrics.as_ref().expect("scraped"));
            if mb.breaker_open || mb.opens > ma.opens {
                violations.push(format!(
                    "instance {instance}: breaker open at {:.1} s, healthy since{}",
                    secs(log, b.at),
                    faults_around(log, a.at, b.at)
                ));
            }
            failures += (mb.failures - ma.failures).max(0.0);
            calls += (mb.calls - ma.calls).max(0.0);
            worst.push(((mb.failures - ma.failures).max(0.0), a.at, b.at));
            for (outcome, value) in &mb.by_outcome {
                let before = ma.by_outcome.get(outcome).copied().unwrap_or(0.0);
                *by_outcome.entry(outcome.clone()).or_default() += (value - before).max(0.0);
            }
            healthy_us += b.at - a.at;
        }
        if healthy_us > 0 {
            let rate = failures / (healthy_us as f64 / 10e6);
            let share = if calls > 0.0 { failures / calls } else { 0.0 };
            if share > HEALTHY_FAILURE_SHARE {
                worst.sort_by(|x, y| y.0.total_cmp(&x.0));
                let worst: Vec<String> = worst
                    .iter()
                    .take(3)
                    .map(|(n, a, b)| {
                        format!(
                            "{n} in {:.1}–{:.1} s{}",
                            secs(log, *a),
                            secs(log, *b),
                            faults_around(log, *a, *b)
                        )
                    })
                    .collect();
                violations.push(format!(
                    "instance {instance}: {failures} of {calls} store calls failed in {:.1} s of healthy time ({:.2} %, {rate:.1} per 10 s); most: {}",
                    healthy_us as f64 / 1e6,
                    share * 100.0,
                    worst.join(" | ")
                ));
            }
            println!(
                "  instance {instance}: {failures} of {calls} store calls failed {by_outcome:?} in {:.1} s healthy ({:.2} %, {rate:.2} per 10 s)",
                healthy_us as f64 / 1e6,
                share * 100.0
            );
        }
    }
    Verdict {
        name: "2 healthy means deciding",
        slack: format!(
            "breaker never open; store failures ≤ {} % of the instance's store calls outside faults + recovery",
            HEALTHY_FAILURE_SHARE * 100.0
        ),
        checked,
        violations,
    }
}

/// Invariant 3: after each store fault heals, every live instance decides again within the
/// fault's stated recovery time (its canary answered by the store).
fn recovery(log: &RunLog) -> Verdict {
    let mut violations = Vec::new();
    let mut checked = 0;
    for fault in log.faults.iter().filter(|f| f.fault.is_store_fault()) {
        let limit = fault.heal + fault.fault.recovery().as_micros() as u64;
        for instance in 0..log.instances {
            // A cut keeps only its instance from the store. Another fault on this instance
            // that began before this one's recovery ended and heals later is judged on its
            // own (its recovery is the one this instance waits for).
            if !fault.fault.cuts(instance, log.instances) {
                continue;
            }
            let disturbed = log.faults.iter().any(|f| {
                !std::ptr::eq(f, fault) && f.start <= limit && f.heal >= fault.heal
                    && (f.fault.cuts(instance, log.instances)
                        || matches!(f.fault, Fault::KillInstance { instance: i } | Fault::DrainInstance { instance: i } if i % log.instances == instance))
            });
            if disturbed {
                continue;
            }
            let first = log
                .canaries
                .iter()
                .filter(|c| c.instance == instance && c.sent >= fault.heal && c.decided)
                .map(|c| c.recv)
                .min();
            // A fault healed so late that the run's probes ended before its stated
            // recovery time (an operator's cut restored as the run stops) cannot be judged.
            let probed_until = log.canaries.iter().filter(|c| c.instance == instance).map(|c| c.sent).max();
            if first.is_none() && probed_until.is_none_or(|at| at < limit) {
                continue;
            }
            checked += 1;
            match first {
                Some(at) if at <= limit => {}
                other => violations.push(format!(
                    "instance {instance}: {} healed at {:.1} s, first decision {} (stated: within {} s)",
                    fault.fault.kind(),
                    secs(log, fault.heal),
                    other.map_or("never".to_string(), |at| format!("at {:.1} s", secs(log, at))),
                    fault.fault.recovery().as_secs()
                )),
            }
        }
    }
    Verdict {
        name: "3 recovery within the stated time",
        slack: "2 s (connections reset, slot moved), 5 s (others)".into(),
        checked,
        violations,
    }
}

/// Invariant 4: every live instance answers `/healthz` and a `ShouldRateLimit` within 1 s,
/// every second.
fn always_answering(log: &RunLog) -> Verdict {
    let mut violations = Vec::new();
    let counted: Vec<_> = log.samples.iter().filter(|s| s.counted).collect();
    for s in &counted {
        if s.healthz_ms.is_none() || s.rls_ms.is_none() {
            violations.push(format!(
                "instance {} at {:.1} s: /healthz {:?} ms, ShouldRateLimit {:?} ms",
                s.instance,
                secs(log, s.at),
                s.healthz_ms,
                s.rls_ms
            ));
        }
    }
    Verdict {
        name: "4 always answering",
        slack: "none: each probe within 1 s".into(),
        checked: counted.len(),
        violations,
    }
}

/// The value a `soak_count` key counts: from `cnt-e` to the end of the value.
fn counted_value(key: &str) -> Option<String> {
    let at = key.find("cnt-e")?;
    Some(key[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-').collect())
}

/// Invariant 5: for exact fixed-window buckets, Redis's count equals the admissions the
/// clients saw plus at most the charges whose answer they did not see as OK.
fn charged_once(log: &RunLog) -> Verdict {
    let redis: HashMap<String, u64> =
        log.counts.iter().filter_map(|(k, c)| Some((counted_value(k)?, *c))).collect();
    let epoch_of = |value: &str| -> u64 {
        value.trim_start_matches("cnt-e").split('-').next().and_then(|e| e.parse().ok()).unwrap_or(0)
    };
    // Per value: (admitted, unseen, first sent). An OK answered after the epoch was read
    // may have been charged after it: unseen, as are failures, denials and cancellations.
    let mut seen: HashMap<String, (u64, u64, u64)> = HashMap::new();
    for call in log.calls.iter().filter(|c| c.domain == "soak_count") {
        let value = &call.descriptors[0].1;
        let Some(read_at) = log.count_reads.get(&epoch_of(value)).map(|r| r.started) else { continue };
        let entry = seen.entry(value.clone()).or_insert((0, 0, u64::MAX));
        if call.unseen() || call.recv >= read_at {
            entry.1 += 1
        } else {
            entry.0 += 1
        }
        entry.2 = entry.2.min(call.sent);
    }
    let mut violations = Vec::new();
    let (mut checked, mut excluded) = (0, 0);
    for (value, (ok, unseen, first)) in &seen {
        let read = log.count_reads[&epoch_of(value)];
        let read_at = read.started;
        // A fault that lost data between the bucket's first charge and the end of its read
        // (Redis ran the read somewhere before `done`) lost (some of) its count; an hour
        // boundary would start a new window.
        let lost =
            log.faults.iter().any(|f| f.data_loss && loss_until(log, f) >= *first && f.start <= read.done);
        let hour = 3_600_000_000;
        if lost || first / hour != read_at / hour {
            excluded += 1;
            continue;
        }
        checked += 1;
        let count = redis.get(value).copied().unwrap_or(0);
        if count < *ok || count > ok + unseen {
            violations.push(format!(
                "{value}: Redis counts {count}, clients saw {ok} admitted and {unseen} unanswered or failed (allowed {ok}..={}){}",
                ok + unseen,
                faults_around(log, *first, read_at)
            ));
        }
    }
    violations.sort();
    Verdict {
        name: "5 no charge twice, none lost",
        slack: format!(
            "count ∈ [admitted, admitted + unseen], read 1.5 s after each 3 s epoch (the slowest read took {} ms); {excluded} buckets a data-losing fault touched before their read was answered not compared",
            log.count_reads.values().map(|r| r.done.saturating_sub(r.started) / 1000).max().unwrap_or(0)
        ),
        checked,
        violations,
    }
}

/// Invariant 6: per process, RSS, open descriptors and metric series under stated bounds,
/// and none of them growing from the first third of its life to the last.
fn bounded(log: &RunLog) -> Verdict {
    let mut violations = Vec::new();
    let mut checked = 0;
    let mut pids: HashMap<(usize, u32), Vec<&crate::watch::Sample>> = HashMap::new();
    for s in log.samples.iter().filter(|s| s.counted && s.rss_kb > 0) {
        pids.entry((s.instance, s.pid)).or_default().push(s);
    }
    for ((instance, pid), samples) in pids {
        checked += samples.len();
        let series = |s: &&crate::watch::Sample| s.metrics.as_ref().map_or(0, |m| m.series);
        for s in &samples {
            if s.rss_kb > MAX_RSS_KB || s.fds > MAX_FDS || series(s) > MAX_SERIES {
                violations.push(format!(
                    "instance {instance} (pid {pid}) at {:.1} s: RSS {} kB, {} descriptors, {} series",
                    secs(log, s.at),
                    s.rss_kb,
                    s.fds,
                    series(s)
                ));
                break;
            }
        }
        if samples.len() >= 9 {
            let third = samples.len() / 3;
            let (early, late) = (&samples[1..third], &samples[samples.len() - third..]);
            let max = |part: &[&crate::watch::Sample], f: &dyn Fn(&&crate::watch::Sample) -> u64| {
                part.iter().map(f).max().unwrap_or(0)
            };
            let fds = (max(early, &|s| s.fds), max(late, &|s| s.fds));
            let rss = (max(early, &|s| s.rss_kb), max(late, &|s| s.rss_kb));
            let ser = (max(early, &series), max(late, &series));
            if fds.1 > fds.0 + 32 || rss.1 > rss.0 * 3 / 2 + 32 * 1024 || ser.1 > ser.0 + 200 {
                violations.push(format!(
                    "instance {instance} (pid {pid}) grows: descriptors {} → {}, RSS {} → {} kB, series {} → {}",
                    fds.0, fds.1, rss.0, rss.1, ser.0, ser.1
                ));
            }
        }
    }
    Verdict {
        name: "6 bounded",
        slack: format!(
            "RSS ≤ {} MiB, ≤ {MAX_FDS} descriptors, ≤ {MAX_SERIES} series; last third ≤ first third + 32 descriptors, ×1.5 + 32 MiB RSS, + 200 series",
            MAX_RSS_KB / 1024
        ),
        checked,
        violations,
    }
}
