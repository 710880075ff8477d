//! Invariant 7's walk: each modelled key's calls in the order its client sent them, its
//! candidate states narrowed by every answer (`model.rs` says what each may be).

use std::collections::{HashMap, HashSet};

use tollgate::algorithm::{self, Hits, Params, State};

use crate::load::Status;
use crate::model::{self, Event, Key, Mode, States};
use crate::run::RunLog;
use crate::verdict::{self, Verdict};

/// How many candidate states a key keeps (the extremes and an even spread between).
const MAX_CANDIDATES: usize = 32;
/// How many candidates pending charges may make before they are pruned while landing.
const LANDING_CAP: usize = 512;
/// How long after its send a charge whose outcome was not seen may still land, when no
/// store fault holds it: a cancelled request whose script was already sent.
const SETTLE_US: u64 = 1_000_000;

/// A charge not seen that may still land: its event's params, hits and shape, from when
/// (its send) until when.
struct Pending {
    id: u32,
    variants: Vec<Vec<tollgate::algorithm::Params>>,
    hits: Vec<Hits>,
    multi: bool,
    sent: u64,
    until: u64,
}

/// One state the key's buckets may be in, and which of the pending charges have landed in
/// it (each lands once at most).
#[derive(Clone)]
struct Candidate {
    states: States,
    landed: Vec<u32>,
}

impl Candidate {
    fn fresh(n: usize) -> Candidate {
        Candidate { states: vec![None; n], landed: Vec::new() }
    }

    /// `states` reached from this candidate, with `landed` one more when the step landed a
    /// pending charge.
    fn then(&self, states: States, landed: Option<u32>) -> Candidate {
        let mut next = Candidate { states, landed: self.landed.clone() };
        next.landed.extend(landed);
        next
    }
}

/// What the model holds of one key.
struct KeyModel {
    candidates: Vec<Candidate>,
    pending: Vec<Pending>,
    next_pending: u32,
    /// The last call's latency: the over-limit cache measures a denial's time left from the
    /// send of the call Redis denied, so it says up to that much less.
    last_latency: u64,
    last_recv: u64,
    /// Until when a data-losing fault may have left the buckets anywhere between fresh and
    /// as modelled (a failover loses only the writes not replicated): the loss, then every
    /// window live then rolled over. Answers until then are not judged.
    tainted_until: u64,
    history: Vec<String>,
}

pub fn judge(log: &RunLog) -> Verdict {
    let walked = walk(log, &HashSet::new());
    let mut violations: Vec<String> = walked.violations.iter().map(|(_, v)| v.clone()).collect();
    if !walked.violations.is_empty() {
        // The walk again, recording each violating key's candidates step by step.
        let keys: HashSet<Key> = walked.violations.iter().map(|(k, _)| k.clone()).collect();
        let traced = walk(log, &keys);
        let path = std::env::temp_dir().join(format!(
            "tollgate-soak-trace-{}-{}.txt",
            log.plan.seed,
            log.plan.topology.name()
        ));
        match std::fs::write(&path, traced.traces.join("\n")) {
            Ok(()) => violations.push(format!("(the model's walk of these keys: {})", path.display())),
            Err(e) => {
                violations.push(format!("(the model's walk could not be written to {}: {e})", path.display()))
            }
        }
    }
    violations.sort();
    let excused = walked.excused;
    Verdict {
        name: "7 exact answers",
        slack: format!(
            "own keys (one client at a time): code, remaining and reset as the algorithms give them at some instant \
             between send and answer, from a state the earlier answers leave possible (configs of reloads within 2 s \
             both; unseen charges may land once, any time up to 1 s after their send or a fault's heal; a failure-policy answer is \
             excused when the instance's failure counters grew or a store fault reached it; a data-losing fault adds \
             a fresh bucket and excuses the key until its windows live then rolled over); a denial from the over-limit cache may say up to the previous call's latency less; \
             approximate domains: a charge of at most the limit on an empty window is admitted; {excused} excused"
        ),
        checked: walked.checked,
        violations,
    }
}

/// What one walk over the calls found; `traces`: the traced keys' steps.
struct Walked {
    violations: Vec<(Key, String)>,
    checked: usize,
    excused: usize,
    traces: Vec<String>,
}

/// Walks every modelled key's calls in send order; for the keys in `traced`, records each
/// step: the call (times in µs since the run's start, and within the second), its answer,
/// and the candidates and pending charges after it.
fn walk(log: &RunLog, traced: &HashSet<Key>) -> Walked {
    let mut calls: Vec<&crate::load::Call> = log.calls.iter().collect();
    calls.sort_by_key(|c| c.sent);
    let mut keys: HashMap<Key, KeyModel> = HashMap::new();
    let mut out = Walked { violations: Vec::new(), checked: 0, excused: 0, traces: Vec::new() };
    for call in calls {
        for (key, mode, event) in model::events(log, call) {
            let n = event.variants[0].len();
            let km = keys.entry(key.clone()).or_insert_with(|| KeyModel {
                candidates: vec![Candidate::fresh(n)],
                pending: Vec::new(),
                next_pending: 0,
                last_latency: 0,
                last_recv: 0,
                tainted_until: 0,
                history: Vec::new(),
            });
            let step = km.step(log, mode, &event);
            if traced.contains(&key) {
                out.traces.push(km.trace(log, &key, &event, &step));
            }
            match step {
                Step::Unanswered => {}
                Step::Checked => out.checked += 1,
                Step::Excused => out.excused += 1,
                Step::Violated(what) => {
                    out.checked += 1;
                    let text = format!(
                        "{} {} ({}) at {:.3}–{:.3} s on instance {}: {:?} {what}; earlier: {}{}",
                        key.0,
                        key.1,
                        if key.2 { "override" } else { "rule" },
                        verdict::secs(log, call.sent),
                        verdict::secs(log, call.recv),
                        call.instance,
                        event.hits,
                        km.history.join(" | "),
                        verdict::faults_around(log, call.sent, call.recv)
                    );
                    out.violations.push((key.clone(), text));
                }
            }
            km.history.push(describe(log, &event));
            if km.history.len() > 6 {
                km.history.remove(0);
            }
        }
    }
    out
}

enum Step {
    Unanswered,
    Checked,
    Excused,
    Violated(String),
}

impl KeyModel {
    fn step(&mut self, log: &RunLog, mode: Mode, event: &Event<'_>) -> Step {
        let call = event.call;
        if let Some(until) = loss_end(log, self.last_recv.min(call.sent), call.recv) {
            self.candidates.push(Candidate::fresh(event.variants[0].len()));
            let unit = event.variants.iter().flatten().map(|p| p.unit_us).max().unwrap_or(0);
            self.tainted_until = self.tainted_until.max(until + unit);
        }
        let loss = call.sent <= self.tainted_until;
        self.land_pending(call.sent, event);
        let states: Vec<States> = self.candidates.iter().map(|c| c.states.clone()).collect();
        let predictions = model::predict(&states, event);
        let Some(observed) = model::observed(event) else {
            // Landed during the call, or not (yet): a pending charge.
            let id = self.pend(log, event);
            let mut next: Vec<Candidate> =
                predictions.into_iter().map(|p| self.candidates[p.from].then(p.next, Some(id))).collect();
            next.append(&mut self.candidates);
            self.candidates = prune(next, &event.variants[0], event.call.recv);
            self.finish(call);
            return Step::Unanswered;
        };
        let failure = observed.iter().any(model::failure_like);
        let same_code: Vec<&model::Prediction> = predictions
            .iter()
            .filter(|p| p.statuses.iter().zip(&observed).all(|(s, o)| s.0 == o.ok))
            .collect();
        let verdict = match mode {
            Mode::Exact => self.exact(&same_code, &observed, event.call.domain == "soak_aon"),
            Mode::Approximate => approximate(&states, event, &observed),
        };
        // Successors: the predictions that gave exactly this answer, else this code, else all.
        let mut exact: Vec<&model::Prediction> =
            same_code.iter().copied().filter(|p| matches(p, &observed, 0)).collect();
        if exact.is_empty() {
            exact = same_code
                .iter()
                .copied()
                .filter(|p| {
                    p.statuses
                        .iter()
                        .zip(&observed)
                        .all(|(s, o)| s.1.min(u64::from(u32::MAX)) == u64::from(o.remaining))
                })
                .collect();
        }
        let chosen: Vec<&model::Prediction> = if mode == Mode::Exact && !exact.is_empty() {
            exact
        } else if !same_code.is_empty() {
            same_code
        } else {
            predictions.iter().collect()
        };
        let mut next: Vec<Candidate>;
        if failure {
            // A store timeout answers as the failure policy and may have charged: landed
            // during the call, or not (yet), a pending charge.
            let id = self.pend(log, event);
            next =
                predictions.iter().map(|p| self.candidates[p.from].then(p.next.clone(), Some(id))).collect();
            next.append(&mut self.candidates);
        } else {
            next = chosen.iter().map(|p| self.candidates[p.from].then(p.next.clone(), None)).collect();
        }
        self.candidates = prune(next, &event.variants[0], event.call.recv);
        self.finish(call);
        match verdict {
            None => Step::Checked,
            Some(_) if loss || (failure && model_troubled(log, call.instance, call.sent, call.recv)) => {
                Step::Excused
            }
            Some(what) => Step::Violated(what),
        }
    }

    /// One traced step: the call, its answer and verdict, then every candidate (each
    /// bucket's state, the pending charges landed in it) and the charges still pending.
    fn trace(&self, log: &RunLog, key: &Key, event: &Event<'_>, step: &Step) -> String {
        let call = event.call;
        let at = |t: u64| format!("{:.6} (+{:06} µs in its second)", verdict::secs(log, t), t % 1_000_000);
        let verdict = match step {
            Step::Unanswered => "unanswered".to_string(),
            Step::Checked => "checked".to_string(),
            Step::Excused => "excused".to_string(),
            Step::Violated(what) => format!("VIOLATED: {what}"),
        };
        let mut out = format!(
            "{} {}: sent {} answered {} on instance {}: {:?} → {}; {verdict}\n",
            key.0,
            key.1,
            at(call.sent),
            at(call.recv),
            call.instance,
            event.hits,
            describe(log, event)
        );
        for c in &self.candidates {
            out.push_str(&format!("    candidate {:?} landed {:?}\n", c.states, c.landed));
        }
        for p in &self.pending {
            out.push_str(&format!(
                "    pending #{} {:?} sent {} until {}\n",
                p.id,
                p.hits,
                verdict::secs(log, p.sent),
                verdict::secs(log, p.until)
            ));
        }
        out
    }

    fn finish(&mut self, call: &crate::load::Call) {
        self.last_latency = call.recv.saturating_sub(call.sent);
        self.last_recv = call.recv;
    }

    /// Exact mode: some prediction gives this code, and remaining and reset lie within
    /// what the predictions of that code give (each between its extremes: the candidates
    /// are a sample of the states possible, so the answer is held to their envelope).
    /// In an all-or-nothing group the over-limit cache denied (`grouped`), the members it
    /// did not decide answer as not evaluated: OK, 0 remaining, no reset, nothing charged
    /// (docs/reliability.md, "Over-limit cache").
    fn exact(&self, same_code: &[&model::Prediction], observed: &[Status], grouped: bool) -> Option<String> {
        if same_code.is_empty() {
            return Some(format!("answered {}, which no exact decision gives", show(observed)));
        }
        let mut ranges = Vec::new();
        let mut inside = true;
        for (k, o) in observed.iter().enumerate() {
            let rem = same_code.iter().map(|p| p.statuses[k].1.min(u64::from(u32::MAX)));
            let (rem_lo, rem_hi) = (rem.clone().min().unwrap_or(0), rem.max().unwrap_or(0));
            let reset = same_code.iter().map(|p| p.statuses[k].2);
            let (reset_lo, reset_hi) = (reset.clone().min().unwrap_or(0), reset.max().unwrap_or(0));
            // A denial from the over-limit cache counts its time left from the earlier call's send.
            let early = if o.ok { 0 } else { self.last_latency };
            let seconds = (reset_lo.saturating_sub(early).div_ceil(1_000_000), reset_hi.div_ceil(1_000_000));
            let not_evaluated =
                grouped && o.ok && o.remaining == 0 && o.reset_s.is_none() && observed.iter().any(|x| !x.ok);
            inside &= not_evaluated
                || (rem_lo..=rem_hi).contains(&u64::from(o.remaining))
                    && o.reset_s.is_none_or(|r| (seconds.0..=seconds.1).contains(&(r.max(0) as u64)));
            ranges.push(format!("remaining {rem_lo}..={rem_hi}, reset {}..={} s", seconds.0, seconds.1));
        }
        (!inside).then(|| format!("answered {}, exact decisions give {}", show(observed), ranges.join("; ")))
    }

    /// Records `event`'s charge as pending: it may land until it settles.
    fn pend(&mut self, log: &RunLog, event: &Event<'_>) -> u32 {
        let id = self.next_pending;
        self.next_pending = self.next_pending.wrapping_add(1);
        self.pending.push(Pending {
            id,
            variants: event.variants.clone(),
            hits: event.hits.clone(),
            multi: event.multi,
            sent: event.call.sent,
            until: settle(log, event.call.sent, event.call.recv),
        });
        id
    }

    /// Charges not seen that may have landed since the previous answer (and before `at`,
    /// this call's send) are applied, as more possibilities, to every candidate they have
    /// not landed in: several of them together, each at instants spread over the gap (a
    /// GCRA bucket refills meanwhile; a window may roll over; a refund landing after a
    /// consume leaves more room than one before, as a count does not go below zero). Then
    /// the ones settled before `at` are dropped.
    fn land_pending(&mut self, at: u64, event: &Event<'_>) {
        for k in 0..self.pending.len() {
            let p = &self.pending[k];
            let (from, to) = (self.last_recv.max(p.sent), at.min(p.until));
            if to < from {
                continue;
            }
            let mut added = Vec::new();
            for c in self.candidates.iter().filter(|c| !c.landed.contains(&p.id)) {
                for params in &p.variants {
                    for t in model::landing_instants(from, to, params) {
                        let next = model::apply(&c.states, t, params, &p.hits, p.multi).next;
                        added.push(c.then(next, Some(p.id)));
                    }
                }
            }
            self.candidates.extend(added);
            if self.candidates.len() > LANDING_CAP {
                self.candidates =
                    prune(std::mem::take(&mut self.candidates), &event.variants[0], event.call.recv);
            }
        }
        let settled: Vec<u32> = self.pending.iter().filter(|p| p.until < at).map(|p| p.id).collect();
        self.pending.retain(|p| p.until >= at);
        if !settled.is_empty() {
            for c in &mut self.candidates {
                c.landed.retain(|id| !settled.contains(id));
            }
        }
    }
}

/// Whether the answer is one the prediction gives: same codes, same remaining, same reset
/// in whole seconds rounded up — a denial's reset allowed `early_us` less (the over-limit
/// cache's).
fn matches(p: &model::Prediction, observed: &[Status], early_us: u64) -> bool {
    p.statuses.iter().zip(observed).all(|(&(allowed, remaining, reset_us), o)| {
        let reset_ok = match o.reset_s {
            None => true,
            Some(r) => {
                let r = r.max(0) as u64;
                let exact = reset_us.div_ceil(1_000_000);
                r == exact
                    || (!allowed && r < exact && r >= reset_us.saturating_sub(early_us).div_ceil(1_000_000))
            }
        };
        allowed == o.ok && u64::from(o.remaining) == remaining.min(u64::from(u32::MAX)) && reset_ok
    })
}

/// Approximate mode for one client: a consume of at most the limit on a window every
/// candidate holds empty is admitted.
fn approximate(candidates: &[States], event: &Event<'_>, observed: &[Status]) -> Option<String> {
    let (Hits::Consume(n), [params]) = (event.hits[0], event.variants[0].as_slice()) else { return None };
    if event.variants.len() > 1 || n > params.limit || observed[0].ok {
        return None;
    }
    let empty = |t: u64| {
        candidates
            .iter()
            .all(|s| algorithm::apply(s[0], t, params, Hits::Peek).decision.remaining == params.limit)
    };
    (empty(event.call.sent) && empty(event.call.recv)).then(|| {
        format!(
            "a charge of {n} on an empty window of {} was denied ({}): exact mode admits it",
            params.limit,
            show(observed)
        )
    })
}

fn show(statuses: &[Status]) -> String {
    let one = |s: &Status| {
        format!(
            "{} remaining {} reset {:?} s",
            if s.ok { "OK" } else { "OVER_LIMIT" },
            s.remaining,
            s.reset_s
        )
    };
    statuses.iter().map(one).collect::<Vec<_>>().join(" + ")
}

fn describe(log: &RunLog, event: &Event<'_>) -> String {
    let answer = match model::observed(event) {
        Some(s) => show(&s),
        None => "no answer".into(),
    };
    format!("{:.3}@{} {:?} → {answer}", verdict::secs(log, event.call.sent), event.call.instance, event.hits)
}

/// Until when an unseen charge sent at `sent` may land: a second after its send, or after
/// the heal of a store fault that held it.
pub fn settle(log: &RunLog, sent: u64, recv: u64) -> u64 {
    let held = log
        .faults
        .iter()
        .filter(|f| f.fault.is_store_fault() && f.start <= recv && f.heal >= sent)
        .map(|f| f.heal)
        .max()
        .unwrap_or(0);
    (sent + SETTLE_US).max(held + SETTLE_US)
}

/// The end of the latest data-losing fault in force around `[a, b]` (see `loss_until`).
fn loss_end(log: &RunLog, a: u64, b: u64) -> Option<u64> {
    log.faults
        .iter()
        .filter(|f| f.data_loss && f.start <= b && verdict::loss_until(log, f) >= a)
        .map(|f| verdict::loss_until(log, f))
        .max()
}

/// Whether instance `instance`'s answers in `[a, b]` may be its failure policy's (or an
/// approximate first read's that missed its deadline): a fault kept it from its store then
/// (or in the recovery time before), or its failure counters grew between the scrapes
/// around `[a, b]`, or no scrape brackets it.
pub fn model_troubled(log: &RunLog, instance: usize, a: u64, b: u64) -> bool {
    counters_grew(log, instance, a, b, true)
}

/// Whether instance `instance` may have answered in `[a, b]` from an approximate read that
/// missed its deadline (a denial that is not the failure policy's): a fault kept it from
/// its store, its first-read misses grew between the scrapes around `[a, b]`, or no scrape
/// brackets it. Store failures elsewhere on the instance do not count: a busy machine's
/// lone timeouts must not excuse a real denial.
pub fn read_missed(log: &RunLog, instance: usize, a: u64, b: u64) -> bool {
    counters_grew(log, instance, a, b, false)
}

fn counters_grew(log: &RunLog, instance: usize, a: u64, b: u64, failures: bool) -> bool {
    let faulted = log.faults.iter().any(|f| {
        // A drained or killed instance answers by its failure policy while its store goes.
        let own = matches!(f.fault, crate::plan::Fault::KillInstance { instance: i } | crate::plan::Fault::DrainInstance { instance: i } if i % log.instances == instance);
        (own || f.fault.cuts(instance, log.instances))
            && f.start <= b
            && f.heal + f.fault.recovery().as_micros() as u64 >= a
    });
    if faulted {
        return true;
    }
    let samples: Vec<_> =
        log.samples.iter().filter(|s| s.instance == instance && s.metrics.is_some()).collect();
    let before = samples.iter().rev().find(|s| s.scraped.1 <= a);
    let after = samples.iter().find(|s| s.scraped.0 >= b);
    let (Some(before), Some(after)) = (before, after) else { return true };
    let (x, y) = (before.metrics.as_ref().expect("scraped"), after.metrics.as_ref().expect("scraped"));
    before.pid != after.pid
        || (failures && (y.failures > x.failures || y.failure_decisions > x.failure_decisions))
        || y.first_read_misses > x.first_read_misses
}

/// A candidate's room at an instant: summed over its buckets, the summed reset reversed,
/// and each bucket's (remaining, reset µs).
type Room = (u64, std::cmp::Reverse<u64>, Vec<(u64, u64)>);

/// Deduplicated candidates, at most [`MAX_CANDIDATES`] and the extremes below, judged by
/// the room each leaves at `at` (the call's answer) under `params`.
///
/// A candidate whose landed charges include another's with the same states adds nothing
/// (the other may still land all it can). Distinct rooms at the call's answer come first:
/// one candidate per room, the one with the fewest charges landed — candidates that differ
/// only in which pending charges landed in them must not crowd out a state that answers
/// differently. Ordered by room, the extremes and an even spread between are kept; with
/// several buckets, also for each room of each bucket the candidates leaving the least and
/// the most room in all (an answer reports one bucket of a key's limits; the others' count
/// must survive among the candidates it leaves). Slots left are filled, evenly spread, with
/// the other candidates.
fn prune(states: Vec<Candidate>, params: &[Params], at: u64) -> Vec<Candidate> {
    let mut seen = HashSet::new();
    let mut unique: Vec<Candidate> =
        states.into_iter().filter(|c| seen.insert((fingerprint(&c.states), sorted(&c.landed)))).collect();
    if unique.len() <= MAX_CANDIDATES {
        return unique;
    }
    // Drop the candidates another with the same states and fewer landed charges covers.
    unique.sort_by_cached_key(|c| (fingerprint(&c.states), c.landed.len()));
    let mut minimal: Vec<Candidate> = Vec::new();
    for c in unique {
        let covered = minimal
            .iter()
            .rev()
            .take_while(|m| m.states == c.states)
            .any(|m| m.landed.iter().all(|id| c.landed.contains(id)));
        if !covered {
            minimal.push(c);
        }
    }
    if minimal.len() <= MAX_CANDIDATES {
        return minimal;
    }
    // The room summed over the buckets orders the spread; each bucket's own room and reset
    // tell states apart (two limits of one key leaving 5 + 90 and 4 + 91 do not answer alike).
    let room = |c: &Candidate| -> Room {
        let each: Vec<(u64, u64)> = c
            .states
            .iter()
            .zip(params)
            .map(|(state, p)| {
                let d = algorithm::apply(*state, at, p, Hits::Peek).decision;
                (d.remaining, d.reset_us)
            })
            .collect();
        let (remaining, reset) = each.iter().fold((0, 0), |(r, t), (a, b)| (r + a, t + b));
        (remaining, std::cmp::Reverse(reset), each)
    };
    minimal.sort_by_cached_key(|c| (room(c), c.landed.len()));
    // One candidate per room (the first: fewest landed), the others set aside.
    let (mut firsts, mut rest) = (Vec::new(), Vec::new());
    let mut last_room = None;
    for c in minimal {
        let r = Some(room(&c));
        if r != last_room {
            firsts.push(c);
        } else {
            rest.push(c);
        }
        last_room = r;
    }
    let mut kept = spread(&firsts, |c| room(c).2.iter().map(|e| e.0).collect(), params.len());
    let left = MAX_CANDIDATES.saturating_sub(kept.len());
    if rest.len() <= left {
        kept.extend(rest);
    } else if left > 0 {
        let last = rest.len() - 1;
        let picks = (0..left).map(|i| if left == 1 { 0 } else { i * last / (left - 1) });
        kept.extend(picks.map(|i| rest[i].clone()));
    }
    kept
}

/// Of `ordered` (by room), at most [`MAX_CANDIDATES`] spread evenly with both ends, and with
/// several buckets each bucket's room's first and last (`rooms`: each bucket's remaining).
fn spread(ordered: &[Candidate], rooms: impl Fn(&Candidate) -> Vec<u64>, buckets: usize) -> Vec<Candidate> {
    if ordered.len() <= MAX_CANDIDATES {
        return ordered.to_vec();
    }
    let last = ordered.len() - 1;
    let mut keep: Vec<usize> = (0..MAX_CANDIDATES).map(|i| i * last / (MAX_CANDIDATES - 1)).collect();
    if buckets > 1 {
        let rooms: Vec<Vec<u64>> = ordered.iter().map(&rooms).collect();
        for k in 0..buckets {
            let mut ends: std::collections::BTreeMap<u64, (usize, usize)> = Default::default();
            for (i, r) in rooms.iter().enumerate() {
                ends.entry(r[k]).and_modify(|e| e.1 = i).or_insert((i, i));
            }
            keep.extend(ends.values().flat_map(|&(a, b)| [a, b]));
        }
    }
    keep.sort_unstable();
    keep.dedup();
    keep.into_iter().map(|i| ordered[i].clone()).collect()
}

fn sorted(ids: &[u32]) -> Vec<u32> {
    let mut v = ids.to_vec();
    v.sort_unstable();
    v
}

fn fingerprint(states: &States) -> Vec<(u8, u64, u64, u64, u64)> {
    states
        .iter()
        .map(|s| match s {
            None => (0, 0, 0, 0, 0),
            Some(State::Gcra { tat, rem, until }) => (1, *tat, *rem, *until, 0),
            Some(State::Window { start, current, previous, until }) => {
                (2, *start, *current, *previous, *until)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use tollgate::algorithm::{Algorithm, Params, State};

    use super::{prune, Candidate, MAX_CANDIDATES};

    fn minute(limit: u64) -> Params {
        Params {
            algorithm: Algorithm::FixedWindow,
            limit,
            unit_us: 60_000_000,
            burst: limit,
            penalty_us: 0,
            period: None,
        }
    }

    fn counted(current: u64, landed: Vec<u32>) -> Candidate {
        let state = State::Window { start: 0, current, previous: 0, until: 0 };
        Candidate { states: vec![Some(state)], landed }
    }

    /// Seen in a soak run: a large charge answered by the failure policy landed when Redis
    /// thawed (49 of 50), while many candidates at 50 differed only in which of six small
    /// pending charges landed in them; the spread kept those and dropped the only 49.
    #[test]
    fn a_room_of_its_own_survives_candidates_that_differ_only_in_what_landed() {
        let mut all: Vec<Candidate> = Vec::new();
        for mask in 0u32..64 {
            let landed: Vec<u32> = (0..6).filter(|b| mask & (1 << b) != 0).map(|b| b + 1).collect();
            all.push(counted(50, [vec![0], landed.clone()].concat()));
            all.push(counted(7 + landed.len() as u64, landed));
        }
        all.push(counted(49, vec![0]));
        let kept = prune(all, &[minute(50)], 1_000_000);
        assert!(kept.len() <= MAX_CANDIDATES + 2, "{} kept", kept.len());
        let currents: Vec<u64> = kept
            .iter()
            .map(|c| match c.states[0] {
                Some(State::Window { current, .. }) => current,
                _ => unreachable!(),
            })
            .collect();
        for want in [7, 8, 9, 10, 11, 12, 13, 49, 50] {
            assert!(currents.contains(&want), "no candidate at {want}: {currents:?}");
        }
    }

    /// A candidate with the same states as another and more charges landed adds nothing.
    #[test]
    fn a_candidate_covered_by_one_with_fewer_landed_is_dropped() {
        let mut all: Vec<Candidate> = (0..40).map(|i| counted(i, vec![])).collect();
        all.push(counted(3, vec![1, 2]));
        let kept = prune(all, &[minute(50)], 1_000_000);
        assert!(!kept.iter().any(|c| c.landed == vec![1, 2]));
    }
}
