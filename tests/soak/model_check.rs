//! Invariant 7's walk: each modelled key's calls in the order its client sent them, its
//! candidate states narrowed by every answer (`model.rs` says what each may be).

use std::collections::{HashMap, HashSet};

use tollgate::algorithm::{self, Hits, State};

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
    let mut calls: Vec<&crate::load::Call> = log.calls.iter().collect();
    calls.sort_by_key(|c| c.sent);
    let mut keys: HashMap<Key, KeyModel> = HashMap::new();
    let (mut violations, mut checked, mut excused) = (Vec::new(), 0usize, 0usize);
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
            match km.step(log, mode, &event) {
                Step::Unanswered => {}
                Step::Checked => checked += 1,
                Step::Excused => excused += 1,
                Step::Violated(what) => {
                    checked += 1;
                    violations.push(format!(
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
                    ));
                }
            }
            km.history.push(describe(log, &event));
            if km.history.len() > 6 {
                km.history.remove(0);
            }
        }
    }
    violations.sort();
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
        checked,
        violations,
    }
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
            self.candidates = prune(next, event);
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
        self.candidates = prune(next, event);
        self.finish(call);
        match verdict {
            None => Step::Checked,
            Some(_) if loss || (failure && model_troubled(log, call.instance, call.sent, call.recv)) => {
                Step::Excused
            }
            Some(what) => Step::Violated(what),
        }
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
                self.candidates = prune(std::mem::take(&mut self.candidates), event);
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
        || y.failures > x.failures
        || y.failure_decisions > x.failure_decisions
        || y.first_read_misses > x.first_read_misses
}

/// A candidate's room at an instant: summed over its buckets, the summed reset reversed,
/// each bucket's (remaining, reset µs), and the pending charges landed in it.
type Room = (u64, std::cmp::Reverse<u64>, Vec<(u64, u64)>, Vec<u32>);

/// Deduplicated candidates, at most [`MAX_CANDIDATES`] and the extremes below: ordered by
/// the room they leave at the call's answer, the extremes and an even spread between kept;
/// with several buckets, also for each room of each bucket the candidates leaving the least
/// and the most room in all (an answer reports one bucket of a key's limits; the others'
/// count must survive among the candidates it leaves).
fn prune(states: Vec<Candidate>, event: &Event<'_>) -> Vec<Candidate> {
    let mut seen = HashSet::new();
    let mut unique: Vec<Candidate> =
        states.into_iter().filter(|c| seen.insert((fingerprint(&c.states), c.landed.clone()))).collect();
    if unique.len() <= MAX_CANDIDATES {
        return unique;
    }
    let params = &event.variants[0];
    let at = event.call.recv;
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
        (remaining, std::cmp::Reverse(reset), each, c.landed.clone())
    };
    unique.sort_by_cached_key(room);
    // One state per room first (states leaving the same rooms answer alike), then a spread.
    let mut last_room = None;
    unique.retain(|s| {
        let r = Some(room(s));
        let keep = r != last_room;
        last_room = r;
        keep
    });
    if unique.len() <= MAX_CANDIDATES {
        return unique;
    }
    let last = unique.len() - 1;
    let mut keep: Vec<usize> = (0..MAX_CANDIDATES).map(|i| i * last / (MAX_CANDIDATES - 1)).collect();
    let buckets = params.len();
    if buckets > 1 {
        // Sorted by room in all: the first and last of each bucket's remaining.
        let rooms: Vec<Vec<u64>> = unique.iter().map(|c| room(c).2.iter().map(|e| e.0).collect()).collect();
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
    keep.into_iter().map(|i| unique[i].clone()).collect()
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
