//! Tollgate as a Rate Limit Quota Service, through two real Envoys 1.40 whose only limit is
//! the `rate_limit_quota` filter, against two Tollgate instances on one Redis
//! (`harness::rlqs`): the limit held across the fleet within the stated bound, a light user
//! never denied, a reload applied within a report period, Redis down on a fail-closed domain,
//! and an Envoy restart that does not hand the budget back.
//!
//! The bound (`algorithm::share::bound`): per window of a window limit `L`,
//! with `N` Envoys holding the bucket, the fleet admits at most `L + 2N` (one token of refill
//! per Envoy per window, and each Envoy's first request, decided by `no_assignment_behavior`
//! before any assignment); GCRA, over any interval `t`, `burst + ρ·t + N`. The window test
//! holds the fleet to `L + 2N` exactly; the GCRA reload test allows `N` more, a margin for
//! the spans it cuts mid-stream, so `burst + ρ·t + 2N`. Requests are
//! counted client-side: 200 admitted, 429 with
//! `x-quota-denied: true` denied, anything else fails the test. Tollgate's answers are
//! bounded too: they follow reports (one per Envoy per 5 s), never requests.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::harness::envoy;
use crate::harness::free_loopback;
use crate::harness::load::{
    count, epoch_secs, metric, request, sleep_until, window_start, Load, Outcome, Samples, Target,
};
use crate::harness::rlqs::{bootstrap, policy, Fleet, REPORT_PERIOD};

/// Envoys in every fleet.
const N: usize = 2;
/// How late, past one report period, a loaded 2-core machine may apply what changed.
const MARGIN: Duration = Duration::from_millis(1500);

/// `user` through both Envoys, each every `every`.
fn both(fleet: &Fleet, user: &'static str, every: Duration) -> Vec<Target> {
    (0..N).map(|envoy| Target { envoy, addr: fleet.listener(envoy), user, every }).collect()
}

fn assert_no_others(samples: &Samples, fleet: &Fleet) {
    let others = samples.others();
    assert!(
        others.is_empty(),
        "{} answers were neither 200 nor the quota's 429: {:#?}\n{}",
        others.len(),
        &others[..others.len().min(5)],
        fleet.logs()
    );
}

/// Every matching request must have `outcome`; at least `min` of them.
fn assert_all(
    samples: &[&crate::harness::load::Sample],
    outcome: &Outcome,
    min: usize,
    what: &str,
    fleet: &Fleet,
) {
    let wrong: Vec<_> = samples.iter().filter(|s| s.outcome != *outcome).collect();
    assert!(samples.len() >= min, "{what}: only {} requests", samples.len());
    assert!(
        wrong.is_empty(),
        "{what}: {} of {} not {outcome:?}: {:#?}\n{}",
        wrong.len(),
        samples.len(),
        &wrong[..wrong.len().min(5)],
        fleet.logs()
    );
}

#[test]
fn the_rlqs_bootstrap_validates() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = bootstrap(free_loopback(), free_loopback(), free_loopback(), "envoy-a");
    envoy::validate_value(&config, dir.path(), "rlqs.yaml")
        .unwrap_or_else(|e| panic!("envoy rejects it:\n{e}"));
}

/// a + b: alice at 4× a fixed window's limit through both Envoys, bob at a tenth of it.
/// The window is two report periods long, so at 4× the limit is spent within half a
/// report period of each edge: an Envoy that admits more than its grant until its next
/// report shows in the count. Every finding is collected, then reported together.
#[test]
fn one_users_limit_holds_across_two_envoys_while_a_light_user_is_never_denied() {
    const WINDOW: Duration = Duration::from_secs(10);
    const LIMIT: usize = 20;
    let limit = "{ name: per-user, unit: second, unit_multiplier: 10, requests_per_unit: 20, algorithm: fixed_window }";
    let fleet = Fleet::start(&policy("open", limit));
    // 4 per second per Envoy: 80 per window, 4× the limit. bob: 1 per Envoy per window.
    let mut targets = both(&fleet, "alice", Duration::from_millis(250));
    targets.extend(both(&fleet, "bob", WINDOW));
    let load = Load::start(&targets);
    fleet.wait_stream(0);
    fleet.wait_stream(1);
    let ready = SystemTime::now();
    let first_full = window_start(ready, WINDOW) + WINDOW;
    let end = first_full + 3 * WINDOW;
    sleep_until(end + Duration::from_millis(300));
    let samples = load.stop();
    let assignments: f64 =
        fleet.tollgates.iter().map(|t| metric(t.admin, "tollgate_rlqs_assignments_total", &[])).sum();
    assert_no_others(&samples, &fleet);
    fleet.dump(&samples);

    let mut findings = Vec::new();
    let bound = LIMIT + 2 * N;
    let mut window = window_start(samples.0[0].sent, WINDOW);
    let mut seen = Vec::new();
    while window < end {
        let admitted = samples.admitted_touching("alice", window, window + WINDOW);
        let sent = samples.sent_in(Some("alice"), window, window + WINDOW).len();
        let full = window >= first_full;
        let at = epoch_secs(window);
        seen.push(format!(
            "window {at:.0}: alice admitted {admitted} of {sent}{}",
            if full { "" } else { " (partial)" }
        ));
        if admitted > bound {
            findings.push(format!("window {at:.0}: alice admitted {admitted}, bound {bound}"));
        }
        if full && sent < 3 * LIMIT {
            findings.push(format!("window {at:.0}: alice sent only {sent}, not 3× the limit"));
        }
        // Starvation is looked for from the second full window: the first one may be
        // charged the partial window's usage, which the first periodic report carries
        // across the edge (Envoy's reports say how many, never when: docs/rlqs.md).
        if window > first_full && admitted < LIMIT / 2 {
            findings.push(format!("window {at:.0}: alice starved, {admitted} admitted"));
        }
        window += WINDOW;
    }
    let bob = samples.sent_in(Some("bob"), UNIX_EPOCH, end + WINDOW);
    let bob_denied: Vec<_> = bob
        .iter()
        .filter(|s| s.outcome != Outcome::Admitted)
        .map(|s| (s.envoy, epoch_secs(s.sent)))
        .collect();
    if !bob_denied.is_empty() {
        findings.push(format!(
            "bob at a tenth of the limit denied {} of {} (envoy, time): {bob_denied:?}",
            bob_denied.len(),
            bob.len()
        ));
    }
    // Tollgate's work follows reports, not requests: per bucket an Envoy holds, one answer
    // per report, a top-up per window edge, a few pushes; 4 per report period is ample.
    let held = 2 * N;
    let run = end.duration_since(samples.0[0].sent).expect("end after start").as_secs_f64();
    let most = (held * 4) as f64 * (run / REPORT_PERIOD.as_secs_f64() + 1.0);
    if assignments > most {
        findings.push(format!(
            "{assignments} assignments in {run:.0} s for {held} held buckets, at most {most:.0}"
        ));
    }
    eprintln!("{seen:#?}\nbob: {} sent; assignments: {assignments}", bob.len());
    assert!(bob.len() >= 6, "bob sent only {}", bob.len());
    assert!(findings.is_empty(), "{findings:#?}\n{seen:#?}\n{}", fleet.logs());
}

/// c: a GCRA limit halved by a reload; from one report period (+ margin) on, the new rate.
#[test]
fn a_reload_that_halves_the_limit_applies_within_one_report_period() {
    let (rate, burst) = (8.0, 8.0);
    let fleet = Fleet::start(&policy(
        "open",
        "{ name: per-user, unit: second, requests_per_unit: 8, burst: 8, algorithm: gcra }",
    ));
    // 12 per second per Envoy: 3× the limit.
    let load = Load::start(&both(&fleet, "alice", Duration::from_millis(83)));
    fleet.wait_stream(0);
    fleet.wait_stream(1);
    let ready = SystemTime::now();
    // Before: from one report period + margin after the streams opened (assignments in place).
    let (from, span) = (ready + REPORT_PERIOD + MARGIN, Duration::from_secs(8));
    sleep_until(from + span);
    let reloaded = SystemTime::now();
    fleet.reload(&policy(
        "open",
        "{ name: per-user, unit: second, requests_per_unit: 4, burst: 4, algorithm: gcra }",
    ));
    let (after, after_span) = (reloaded + REPORT_PERIOD + MARGIN, Duration::from_secs(10));
    sleep_until(after + after_span + Duration::from_millis(200));
    let samples = load.stop();
    assert_no_others(&samples, &fleet);

    let admitted = |from, span| count(&samples.sent_in(Some("alice"), from, from + span), &Outcome::Admitted);
    let (before_n, after_n) = (admitted(from, span), admitted(after, after_span));
    let t = span.as_secs_f64();
    let (before_max, before_min) = (burst + rate * t + 2.0 * N as f64, 0.7 * rate * t);
    eprintln!("before the reload: {before_n} admitted in {t} s (bound {before_max}, floor {before_min})");
    assert!(
        before_n as f64 <= before_max && before_n as f64 >= before_min,
        "before the reload: {before_n} admitted in {t} s, not within [{before_min}, {before_max}]\n{}",
        fleet.logs()
    );
    let t = after_span.as_secs_f64();
    let (after_max, after_min) = (burst / 2.0 + rate / 2.0 * t + 2.0 * N as f64, rate / 2.0 * t / 4.0);
    eprintln!(
        "from {:?} after the reload: {after_n} admitted in {t} s (bound {after_max})",
        REPORT_PERIOD + MARGIN
    );
    assert!(after_n as f64 <= after_max, "the halved limit was not applied {:?} after the reload: {after_n} admitted in {t} s, bound {after_max}\n{}", REPORT_PERIOD + MARGIN, fleet.logs());
    assert!(
        after_n as f64 >= after_min,
        "starved after the reload: {after_n} admitted in {t} s\n{}",
        fleet.logs()
    );
}

/// d: Redis stopped under a `failure_mode: closed` domain: all denied within one report
/// period (+ margin); restarted: all admitted again within two report periods (+ margin).
#[test]
fn with_redis_down_a_closed_domain_denies_within_a_report_period_and_resumes() {
    // Two report periods (docs/rlqs.md, "Failures"): the first report after Redis returns
    // may still meet the circuit breaker or a link being replaced, the next one may not.
    let recovery = 2 * REPORT_PERIOD + MARGIN;
    let mut fleet = Fleet::start(&policy(
        "closed",
        "{ name: per-user, unit: second, requests_per_unit: 100, burst: 100, algorithm: gcra }",
    ));
    let mut targets = both(&fleet, "alice", Duration::from_millis(200));
    targets.extend(both(&fleet, "bob", Duration::from_millis(500)));
    let load = Load::start(&targets);
    for i in 0..N {
        fleet.wait_stream(i);
        let admin = fleet.tollgates[i].admin;
        let assigned =
            || metric(admin, "tollgate_rlqs_assignments_total", &[("action", "token_bucket")]) >= 2.0;
        fleet.wait("token buckets for alice and bob", Duration::from_secs(15), assigned);
    }
    // Steady state first: shares settle within a report period (a newcomer's share is
    // taken from the holders at once; before 40c07ca, only at their next report).
    std::thread::sleep(REPORT_PERIOD + MARGIN);
    let ok_from = SystemTime::now();
    std::thread::sleep(Duration::from_secs(3));
    let stopped = SystemTime::now();
    fleet.redis.stop();
    let deny_from = stopped + REPORT_PERIOD + MARGIN;
    let deny_span = Duration::from_secs(4);
    sleep_until(deny_from + deny_span);
    let back = SystemTime::now();
    fleet.redis.restart();
    sleep_until(back + recovery + Duration::from_secs(3));
    let samples = load.stop();
    assert_no_others(&samples, &fleet);

    assert_all(&samples.sent_in(None, ok_from, stopped), &Outcome::Admitted, 20, "Redis up", &fleet);
    let down = samples.sent_in(None, deny_from, deny_from + deny_span);
    assert_all(&down, &Outcome::Denied, 20, "Redis down, from one report period + margin on", &fleet);
    let denials = |i: usize| {
        metric(fleet.tollgates[i].admin, "tollgate_rlqs_assignments_total", &[("action", "deny_all")])
    };
    assert!((0..N).all(|i| denials(i) >= 1.0), "no deny_all assignment counted\n{}", fleet.logs());
    let resumed = samples.sent_in(None, back + recovery, back + recovery + Duration::from_secs(3));
    let last_denied = samples
        .sent_in(None, back, back + recovery)
        .iter()
        .filter(|s| s.outcome != Outcome::Admitted)
        .map(|s| s.done)
        .max();
    eprintln!(
        "Redis back: last denial {:?} after the restart",
        last_denied.map(|t| t.duration_since(back).unwrap_or_default())
    );
    assert_all(&resumed, &Outcome::Admitted, 10, "Redis back, after recovery", &fleet);
}

/// e: alice's window budget spent through Envoy A; A killed and restarted: the budget stays
/// spent, past the 15 s life of every assignment granted before the restart.
#[test]
fn an_envoy_restarted_mid_window_does_not_reset_the_budget() {
    const WINDOW: Duration = Duration::from_secs(600);
    const LIMIT: usize = 10;
    // The whole test (≈ 40 s) within one window: a fresh one if less than a minute is left.
    let now = SystemTime::now();
    if window_start(now, WINDOW) + WINDOW < now + Duration::from_secs(60) {
        sleep_until(window_start(now, WINDOW) + WINDOW + Duration::from_millis(100));
    }
    let mut fleet = Fleet::start(&policy("open", "{ name: per-user, unit: minute, unit_multiplier: 10, requests_per_unit: 10, algorithm: fixed_window }"));
    let window = window_start(SystemTime::now(), WINDOW);
    let a = fleet.listener(0);
    let tollgate_a = fleet.tollgates[0].admin;
    let assignments = || metric(tollgate_a, "tollgate_rlqs_assignments_total", &[]);
    let first = request(0, a, "alice");
    assert_eq!(first.outcome, Outcome::Admitted, "the first request of a bucket has no assignment yet");
    fleet.wait_stream(0);
    fleet.wait("the answer to the first report", Duration::from_secs(10), || assignments() >= 1.0);
    let mut spent = vec![first];
    for _ in 0..30 {
        spent.push(request(0, a, "alice"));
        std::thread::sleep(Duration::from_millis(100));
    }
    let spent = Samples(spent);
    assert_no_others(&spent, &fleet);
    let admitted_before = count(&spent.0.iter().collect::<Vec<_>>(), &Outcome::Admitted);
    eprintln!("before the restart: {admitted_before} of {} admitted", spent.0.len());
    assert!(
        (LIMIT / 2..=LIMIT + 3 * N).contains(&admitted_before),
        "before the restart: {admitted_before} admitted, limit {LIMIT}\n{}",
        fleet.logs()
    );
    assert_eq!(
        spent.0.last().map(|s| &s.outcome),
        Some(&Outcome::Denied),
        "the budget was not spent\n{}",
        fleet.logs()
    );

    // The usage reaches the store with A's next report (every bucket it holds, each tick).
    let reports = metric(tollgate_a, "tollgate_rlqs_reports_total", &[]);
    fleet.wait("A's usage reported", 2 * REPORT_PERIOD + MARGIN, || {
        metric(tollgate_a, "tollgate_rlqs_reports_total", &[]) > reports
    });
    fleet.restart_envoy(0);
    let restarted = SystemTime::now();
    // Both Envoys now, A fresh and B never used for alice: each admits its first request
    // (no assignment yet) and at most one more racing Tollgate's first answer.
    let load = Load::start(&both(&fleet, "alice", Duration::from_millis(200)));
    fleet.wait_stream(0);
    fleet.wait_stream(1);
    sleep_until(restarted + Duration::from_secs(20));
    let after = load.stop();
    assert_no_others(&after, &fleet);
    assert!(SystemTime::now() < window + WINDOW, "the test outlived its window");
    for i in 0..N {
        let own: Vec<_> = after.0.iter().filter(|s| s.envoy == i).collect();
        let admitted = count(&own, &Outcome::Admitted);
        eprintln!("after the restart, Envoy {i}: {admitted} of {} admitted", own.len());
        assert!(
            admitted <= 2,
            "Envoy {i} admitted {admitted} of {} after A's restart: the budget was reset\n{}",
            own.len(),
            fleet.logs()
        );
    }
}
