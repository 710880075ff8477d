//! The operators' three scenarios (see `ops.rs`), each one fresh key or one override.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::Rng;

use crate::load::{now_us, Status};
use crate::ops::{
    delete_keys, Fleet, OverrideSet, PeekCheck, Probe, ResetCheck, OVERRIDE_TTL_S, RESET_VISIBLE_US,
    SYNC_DELAY_US,
};
use crate::plan::{Fault, Plant};
use crate::policies;
use crate::run::Happened;

/// The failure policy's answer of a fail-closed domain: denied, nothing left, retry in 1 s.
pub fn failure_like(s: &Status) -> bool {
    !s.ok && s.remaining == 0 && s.reset_s == Some(1)
}

/// A denial by the algorithm, not the failure policy's (denied, 0 left, retry in 1 s).
fn denied(p: &Probe) -> bool {
    p.status.is_some_and(|s: Status| !s.ok && !failure_like(&s))
}

fn limit_of(domain: &str) -> u64 {
    match domain {
        "soak_penalty" => policies::PENALTY_PER_SECOND,
        _ => policies::PER_MINUTE,
    }
}

impl Fleet<'_> {
    /// A fresh key spent through one instance, then peeked through every instance (the
    /// others first) once the stated sync delay has passed. Half the time every instance
    /// peeked it before the spend too, so that the late peeks are reads again of a bucket
    /// read once (approximate), not first reads.
    pub(crate) fn spend_then_peek(&mut self, rng: &mut StdRng) -> PeekCheck {
        let planted = self.ops.plant == Some(Plant::PeekForgotten);
        let domain = if !planted && rng.random_bool(0.5) { "soak_approx_minute" } else { "soak_minute" };
        let value = self.fresh("pk");
        let n = self.instances();
        let spender = rng.random_range(0..n);
        if rng.random_bool(0.5) {
            for i in 0..n {
                self.charge(i, domain, &value, 0);
            }
        }
        let target = rng.random_range(1..=policies::PER_MINUTE);
        let (mut spends, mut spent) = (Vec::new(), 0);
        for _ in 0..6 {
            if spent >= target {
                break;
            }
            let probe = self.charge(spender, domain, &value, rng.random_range(1..=target - spent));
            if probe.status.is_some_and(|s| s.ok) {
                spent += probe.hits;
            }
            spends.push(probe);
        }
        if planted {
            delete_keys(&self.ops.view, &value);
        }
        let delay = if domain == "soak_minute" { 50_000 } else { SYNC_DELAY_US + 50_000 };
        self.pause(Duration::from_micros(delay));
        let peeks = (1..=n).map(|i| (spender + i) % n).map(|i| self.charge(i, domain, &value, 0)).collect();
        PeekCheck { domain, value, spender, spends, peeks }
    }

    /// A fresh key exhausted through one instance until every instance denies it, reset
    /// through one instance, charged on every instance 1 s after the reset answered.
    pub(crate) fn reset(&mut self, rng: &mut StdRng) -> ResetCheck {
        let planted = self.ops.plant == Some(Plant::ResetUnsent);
        let domain = if planted {
            "soak_minute"
        } else {
            ["soak_minute", "soak_approx_minute", "soak_penalty"][rng.random_range(0..3)]
        };
        let value = self.fresh("rst");
        let n = self.instances();
        let (spender, through) = (rng.random_range(0..n), rng.random_range(0..n));
        let mut before = vec![self.charge(spender, domain, &value, limit_of(domain))];
        // Charged one at a time until denied for 300 ms on end (at most 4 s).
        let started = now_us();
        let mut since: Option<u64> = None;
        while now_us() < started + 4_000_000 && !self.stopping() {
            let probe = self.charge(spender, domain, &value, 1);
            since = if denied(&probe) { since.or(Some(probe.sent)) } else { None };
            before.push(probe);
            if since.is_some_and(|at| now_us() >= at + 300_000) {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        if domain == "soak_approx_minute" {
            self.pause(Duration::from_micros(SYNC_DELAY_US));
        }
        // Every other instance denies it too (each tries for at most 2 s).
        for i in (1..n).map(|i| (spender + i) % n) {
            let started = now_us();
            while now_us() < started + 2_000_000 && !self.stopping() {
                let probe = self.charge(i, domain, &value, 1);
                let done = denied(&probe);
                before.push(probe);
                if done {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let path = format!("/v1/reset?domain={domain}&descriptor=k%3D{value}");
        let reset = if planted {
            let at = now_us();
            (at, at, 200)
        } else {
            let (sent, recv, status, _) = self.admin(through, "POST", &path, "");
            (sent, recv, status)
        };
        self.pause(Duration::from_micros((reset.1 + RESET_VISIBLE_US).saturating_sub(now_us())));
        let after = if self.stopping() {
            Vec::new()
        } else {
            (0..n).map(|i| self.charge(i, domain, &value, 1)).collect()
        };
        ResetCheck { domain, value, through, before, reset, after }
    }

    /// An override of `soak_incident` set through one instance and ended through another;
    /// on the single topology half the time with the setting instance cut from Redis from
    /// before the set until a second after the end. The cut, as a fault, if there was one.
    pub(crate) fn override_cycle(&mut self, rng: &mut StdRng) -> (OverrideSet, Option<Happened>) {
        let n = self.instances();
        let set_on = rng.random_range(0..n);
        let end_on = (set_on + rng.random_range(1..n)) % n;
        let mode = ["open", "shadow"][rng.random_range(0..2)];
        // A planted run never cuts: a cut's unseen charges would hide a plant, and a set that
        // stays pending on the cut instance makes its end a 404 (then only its expiry ends it).
        let may_cut = self.ops.plant.is_none() && !self.ops.fronts.is_empty();
        let front = (may_cut && rng.random_bool(0.5)).then(|| self.ops.fronts[set_on].clone());
        let cut_at = now_us();
        if let Some(front) = &front {
            front.cut_replies(true);
            self.pause(Duration::from_millis(300));
        }
        let body = format!(r#"{{"scope":"soak_incident","mode":"{mode}","ttl_seconds":{OVERRIDE_TTL_S}}}"#);
        let (sent, recv, status, _) = self.admin(set_on, "POST", "/v1/override", &body);
        self.pause(Duration::from_millis(1_500));
        let (end_sent, end_recv, end_status, _) =
            self.admin(end_on, "DELETE", "/v1/override?scope=soak_incident", "");
        self.pause(Duration::from_millis(1_000));
        let mut cut = None;
        let mut fault = None;
        if let Some(front) = &front {
            front.cut_replies(false);
            let heal = now_us();
            cut = Some((set_on, cut_at, heal));
            fault = Some(Happened {
                fault: Fault::CutInstance { instance: set_on },
                start: cut_at,
                heal,
                data_loss: false,
                note: format!("instance {set_on}'s replies from Redis dropped (override set through it)"),
            });
        }
        if self.ops.plant == Some(Plant::OverrideReplayed) {
            // Set again after its end, and recorded nowhere.
            self.admin(set_on, "POST", "/v1/override", &body);
        }
        let set = OverrideSet {
            mode,
            set_on,
            set: (sent, recv, status),
            end_on,
            end: Some((end_sent, end_recv, end_status)),
            cut,
        };
        (set, fault)
    }

    fn stopping(&self) -> bool {
        self.stop.load(std::sync::atomic::Ordering::SeqCst)
    }
}
