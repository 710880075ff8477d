//! Invariant 7, the exact model: a key only one client sends (`load::owned`) is charged
//! one request at a time, so exact mode's answer to each request is known — the pure
//! algorithms of the library (`tollgate::algorithm`, held equal to the Lua scripts by the
//! differential tests) applied in the client's order. Each answer (code, remaining, reset)
//! must be one of those the algorithms give at some instant between its send and its
//! answer, from some state the earlier answers leave possible (`Candidates`).
//! Approximate domains are held to what their mode states for one client: a charge exact
//! mode admits on an empty bucket is admitted. On a cluster an all-or-nothing pair may
//! span two masters, each part charged at its own instant of the call.
//!
//! What the model cannot know it widens, never guesses: a call without an answer (cancelled,
//! an instance killed) or answered by the failure policy (a store timeout may have run the
//! script) may or may not have charged, until it settles; a reload near a request gives
//! both configs; a fault that lost Redis data adds a fresh bucket and excuses the answers
//! until the loss is over (`verdict::loss_until`).

use tollgate::algorithm::{self, joint, Algorithm, Decision, Hits, Params, State, Write};

use crate::load::{Call, Outcome, Status};
use crate::policies as p;
use crate::run::RunLog;
use crate::verdict;

/// A model key: domain, value, and whether it is the request override's bucket.
pub(crate) type Key = (&'static str, String, bool);
/// The states of a key's buckets (one per limit of the descriptor, or per member of an
/// all-or-nothing pair).
pub(crate) type States = Vec<Option<State>>;

/// Instants tried between a call's send and its answer, besides window edges.
const INSTANTS: u64 = 6;

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Exact,
    Approximate,
}

/// Whether `domain`'s own keys are modelled, and how.
pub(crate) fn mode(domain: &str) -> Option<Mode> {
    match domain {
        "soak_gcra" | "soak_sliding" | "soak_fixed" | "soak_aon" | "soak_budget_gcra"
        | "soak_budget_fixed" | "soak_penalty" | "soak_minute" | "soak_multi" => Some(Mode::Exact),
        "soak_approx" | "soak_switch" | "soak_approx_minute" => Some(Mode::Approximate),
        _ => None,
    }
}

fn window(algorithm: Algorithm, limit: u64, unit_us: u64, penalty_s: u64) -> Params {
    Params { algorithm, limit, unit_us, burst: limit, penalty_us: penalty_s * 1_000_000, period: None }
}

/// The limits of `domain`'s rule under `t` (one per bucket of a key), and whether a consume
/// there is an overdraw.
pub(crate) fn limits(domain: &str, t: crate::policies::Toggles) -> (Vec<Params>, bool) {
    use Algorithm::{FixedWindow as F, Gcra as G, SlidingWindow as S};
    const SEC: u64 = 1_000_000;
    let ps = match domain {
        "soak_gcra" => vec![window(G, p::PER_SECOND, SEC, 0)],
        "soak_sliding" => {
            vec![window(S, p::PER_SECOND, SEC, if t.penalty_added { p::ADDED_PENALTY_SECONDS } else { 0 })]
        }
        "soak_fixed" => vec![window(F, if t.limit_changed { p::RAISED } else { p::PER_SECOND }, SEC, 0)],
        "soak_multi" => vec![window(F, p::MULTI_SECOND, SEC, 0), window(F, p::MULTI_MINUTE, 60 * SEC, 0)],
        "soak_aon" => vec![window(F, p::PER_SECOND, SEC, 0), window(F, p::PER_SECOND, SEC, 0)],
        "soak_budget_gcra" => vec![window(G, p::BUDGET_PER_SECOND, SEC, 0)],
        "soak_budget_fixed" => vec![window(F, p::BUDGET_PER_SECOND, SEC, 0)],
        "soak_penalty" => vec![window(F, p::PENALTY_PER_SECOND, SEC, p::PENALTY_SECONDS)],
        "soak_minute" | "soak_approx_minute" => vec![window(F, p::PER_MINUTE, 60 * SEC, 0)],
        "soak_approx" => vec![window(F, p::APPROX_PER_SECOND, SEC, 0)],
        _ => vec![window(F, p::PER_SECOND, SEC, 0)],
    };
    (ps, domain.starts_with("soak_budget"))
}

/// A request override's limit: `--default-algorithm` (GCRA), its rate a second, burst the
/// rate, no penalty, no overdraft.
fn override_limit(rate: u32) -> Params {
    window(Algorithm::Gcra, u64::from(rate), 1_000_000, 0)
}

/// One request's part on one key: the members charged and which answers they are.
pub(crate) struct Event<'a> {
    pub call: &'a Call,
    /// The limits' params, one variant per config possibly in force.
    pub variants: Vec<Vec<Params>>,
    pub hits: Vec<Hits>,
    /// Descriptor indexes answered: one (a single limit, or several limits of one
    /// descriptor, reported by the deciding one) or two (an all-or-nothing pair).
    pub answers: Vec<usize>,
    pub multi: bool,
    /// An all-or-nothing pair on a cluster: its members may hash to different masters,
    /// each charged at its own instant of the call (a window may roll over between them).
    pub spanning: bool,
}

fn hits_of(call: &Call, i: usize, overdraw: bool) -> Hits {
    let n = call.hits(i);
    if call.asks[i].refund {
        Hits::Refund(n)
    } else if n == 0 {
        Hits::Peek
    } else if overdraw {
        Hits::Overdraw(n)
    } else {
        Hits::Consume(n)
    }
}

/// The toggles possibly in force at an instance during `[a, b]`: the ones written last
/// before it, and those of every reload written within 2 s before `b` (instances apply a
/// reload within about a second).
fn toggle_variants(log: &RunLog, a: u64, b: u64) -> Vec<crate::policies::Toggles> {
    let mut out = vec![verdict::toggles_at(log, a.saturating_sub(2_000_000))];
    for r in log.reloads.iter().filter(|r| r.at <= b && r.at + 2_000_000 >= a) {
        out.push(r.before);
        out.push(r.after);
    }
    out
}

/// The events of `call` on modelled keys.
pub(crate) fn events<'a>(log: &RunLog, call: &'a Call) -> Vec<(Key, Mode, Event<'a>)> {
    let Some(mode) = mode(call.domain) else { return Vec::new() };
    let toggles = toggle_variants(log, call.sent, call.recv);
    let variants = |overdraw_ps: &dyn Fn(crate::policies::Toggles) -> Vec<Params>| {
        let mut v: Vec<Vec<Params>> = toggles.iter().map(|t| overdraw_ps(*t)).collect();
        v.dedup();
        v
    };
    let mut out = Vec::new();
    if call.domain == "soak_aon" {
        let own = call.descriptors.len() == 2 && call.descriptors.iter().all(|(_, v)| v.starts_with("own-"));
        if own {
            let hits = vec![hits_of(call, 0, false), hits_of(call, 1, false)];
            let key = (call.domain, call.descriptors[0].1.clone(), false);
            let variants = variants(&|t| limits(call.domain, t).0);
            let spanning = log.plan.topology == crate::plan::Topology::Cluster;
            out.push((
                key,
                mode,
                Event { call, variants, hits, answers: vec![0, 1], multi: false, spanning },
            ));
        }
        return out;
    }
    for (i, (_, value)) in call.descriptors.iter().enumerate() {
        if !value.starts_with("own-") {
            continue;
        }
        let key = (call.domain, value.clone(), call.asks[i].over.is_some());
        let event = match call.asks[i].over {
            Some(rate) => Event {
                call,
                variants: vec![vec![override_limit(rate)]],
                hits: vec![hits_of(call, i, false)],
                answers: vec![i],
                multi: false,
                spanning: false,
            },
            None => {
                let overdraw = limits(call.domain, Default::default()).1;
                let variants = variants(&|t| limits(call.domain, t).0);
                let n = variants[0].len();
                Event {
                    call,
                    variants,
                    hits: vec![hits_of(call, i, overdraw); n],
                    answers: vec![i],
                    multi: n > 1,
                    spanning: false,
                }
            }
        };
        out.push((key, mode, event));
    }
    out
}

/// One prediction: the statuses answered (allowed, remaining, reset µs), the state after,
/// and the index of the candidate it was made from.
pub(crate) struct Prediction {
    pub statuses: Vec<(bool, u64, u64)>,
    pub next: States,
    pub from: usize,
}

/// Applies `hits` (one per member, or one for all the limits of one descriptor) at `t` on
/// `state` under `params`; `multi`: several limits of one descriptor, reported by the
/// deciding one.
pub(crate) fn apply(state: &States, t: u64, params: &[Params], hits: &[Hits], multi: bool) -> Prediction {
    if params.len() == 1 {
        let o = algorithm::apply(state[0], t, &params[0], hits[0]);
        let next = vec![written(state[0], o.write)];
        let d = o.decision;
        return Prediction { statuses: vec![(d.allowed, d.remaining, d.reset_us)], next, from: 0 };
    }
    let members: Vec<joint::Member> = params
        .iter()
        .enumerate()
        .map(|(key, params)| joint::Member { key, params: *params, hits: hits[key.min(hits.len() - 1)] })
        .collect();
    let j = joint::apply(state, t, &members);
    let mut next = state.clone();
    for w in j.writes.as_ref().unwrap_or(&j.marks) {
        next[w.key] = written(next[w.key], w.write);
    }
    let statuses = if multi {
        let d = deciding(&j.decisions, params);
        vec![(d.allowed, d.remaining, d.reset_us)]
    } else {
        j.decisions.iter().map(|d| (d.allowed, d.remaining, d.reset_us)).collect()
    };
    Prediction { statuses, next, from: 0 }
}

fn written(state: Option<State>, write: Write) -> Option<State> {
    match write {
        Write::Keep => state,
        Write::Put { state, .. } => Some(state),
        Write::Delete => None,
    }
}

/// The limit a descriptor of several limits reports: the first denied, else the lowest
/// remaining relative to its capacity (`service::respond::deciding`).
fn deciding(decisions: &[Decision], params: &[Params]) -> Decision {
    if let Some(d) = decisions.iter().find(|d| !d.allowed) {
        return *d;
    }
    let capacity = |p: &Params| if p.algorithm == Algorithm::Gcra { p.burst } else { p.limit };
    *decisions
        .iter()
        .zip(params)
        .min_by(|(a, pa), (b, pb)| {
            (u128::from(a.remaining) * u128::from(capacity(pb)))
                .cmp(&(u128::from(b.remaining) * u128::from(capacity(pa))))
        })
        .map(|(d, _)| d)
        .expect("a decision")
}

/// The instants tried for a call: its send, its answer, evenly between, and both sides of
/// every window edge between (a fixed window's reset jumps there).
fn instants(sent: u64, recv: u64, params: &[Params]) -> Vec<u64> {
    let recv = recv.max(sent);
    let mut out: Vec<u64> = (0..=INSTANTS).map(|i| sent + (recv - sent) * i / INSTANTS).collect();
    for p in params {
        let unit = p.unit_us.max(1);
        let mut edge = (sent / unit + 1) * unit;
        while edge <= recv {
            out.extend([edge - 1, edge]);
            edge += unit;
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// The instants an unseen charge is tried at when it may have landed in `[from, to]`:
/// both ends, evenly between (a GCRA bucket refills continuously), and both sides of each
/// limit's first and last window edge inside (a charge landed in a window that rolled over
/// before `to` counts no more in it, but a longer window of the key may still hold it).
pub(crate) fn landing_instants(from: u64, to: u64, params: &[Params]) -> Vec<u64> {
    const SPREAD: u64 = 4;
    let to = to.max(from);
    let mut out: Vec<u64> = (0..=SPREAD).map(|i| from + (to - from) * i / SPREAD).collect();
    for p in params {
        let unit = p.unit_us.max(1);
        let first = (from / unit + 1) * unit;
        let last = to / unit * unit;
        for edge in [first, last] {
            if edge > from && edge <= to {
                out.extend([edge - 1, edge]);
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// Evaluates `event` on every candidate: the predictions, each with its instant and the
/// index of its candidate.
pub(crate) fn predict(candidates: &[States], event: &Event<'_>) -> Vec<Prediction> {
    let mut out = Vec::new();
    for params in &event.variants {
        let ts = instants(event.call.sent, event.call.recv, params);
        for &t in &ts {
            for (from, state) in candidates.iter().enumerate() {
                out.push(Prediction { from, ..apply(state, t, params, &event.hits, event.multi) });
            }
        }
        if event.spanning && params.len() == 2 {
            for (&a, &b) in ts.iter().flat_map(|a| ts.iter().map(move |b| (a, b))).filter(|(a, b)| a != b) {
                for (from, state) in candidates.iter().enumerate() {
                    out.extend(apart(state, [a, b], params, &event.hits).map(|p| Prediction { from, ..p }));
                }
            }
        }
    }
    out
}

/// A spanning pair whose members were charged at instants `at`, one each, when both are
/// admitted (a denied part undoes the others: `apply` at one instant models that).
fn apart(state: &States, at: [u64; 2], params: &[Params], hits: &[Hits]) -> Option<Prediction> {
    let mut statuses = Vec::new();
    let mut next = state.clone();
    for (k, &t) in at.iter().enumerate() {
        let o = algorithm::apply(state[k], t, &params[k], hits[k.min(hits.len() - 1)]);
        if !o.decision.allowed {
            return None;
        }
        statuses.push((true, o.decision.remaining, o.decision.reset_us));
        next[k] = written(state[k], o.write);
    }
    Some(Prediction { statuses, next, from: 0 })
}

/// The observed statuses of the event's answers, when the call was answered.
pub(crate) fn observed(event: &Event<'_>) -> Option<Vec<Status>> {
    match &event.call.outcome {
        Outcome::Answered { statuses, .. } => {
            event.answers.iter().map(|i| statuses.get(*i).copied()).collect()
        }
        _ => None,
    }
}

/// The failure policy's answer of a fail-closed domain: denied, nothing left, retry in 1 s.
pub(crate) fn failure_like(s: &Status) -> bool {
    !s.ok && s.remaining == 0 && s.reset_s == Some(1)
}
