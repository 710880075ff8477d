//! What one bucket of one Envoy is assigned: the usage it reported is charged to the RLS
//! bucket of the same descriptor, the claims ledger says who else holds it, and
//! `algorithm::share` sizes this Envoy's token bucket from the store's headroom.
//!
//! For each bucket usage (or a re-evaluation the stream asks for: a window's edge, a
//! DENY_ALL's refill, a share taken for a newcomer), in order:
//! 1. map the id onto the policy (`map`); no limit → ALLOW_ALL for [`TTL_UNLIMITED`] s,
//!    or `abandon_action` when the bucket had a limit before (its rule was removed);
//! 2. charge the reported `allowed` as an overdraw of every limit of the rule (recorded
//!    whether or not it fits, within the debt cap, as `overdraft: true` does): RLS and
//!    RLQS traffic spend one budget; `allowed: 0` peeks. The answers are the headroom;
//! 3. write this holder into the bucket's claims ledger (`store::rlqs`) and read the
//!    others;
//! 4. share the headroom among the live holders by demand (`algorithm::share::shares`),
//!    cap this holder's capacity at the headroom less every other holder's outstanding
//!    claim, take the tightest limit, and record the grant as this holder's claim;
//! 5. answer a token bucket (TTL [`TTL_ASSIGNED`] s) or DENY_ALL when nothing is left.
//!
//! A token bucket Envoy already runs is replaced keeping its fill *ratio*, so an Envoy
//! that ran dry would stay dry: a fresh (full) bucket is sent as `[DENY_ALL, token_bucket]`
//! in one response — Envoy applies both before any request sees the first — when the
//! Envoy reported denials (it ran dry) or at a window's edge. Its capacity came from the
//! ledger like any grant.
//!
//! The store failing answers the domain's `failure_mode`: `open` ALLOW_ALL, `closed`
//! DENY_ALL, `local` a share of this instance's memory buckets among the holders this
//! instance knows (`store::rlqs::LocalLedger`), each for [`TTL_FAILURE`] s so Envoy is
//! answered from the store again soon after it is back.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::algorithm::share::Grant;
use crate::algorithm::Decision;
use crate::config::{Domain, FailureMode, Lookup};
use crate::sources::overrides::{Mode, Overrides};
use crate::sources::serving::Live;
use crate::store::key::KeySecret;
use crate::store::rlqs::{Hold, LocalLedger};
use crate::store::{Charge, MemoryStore, Store, StoreError};
use crate::telemetry::metrics::Metrics;

use super::super::limiter::RateLimiter;
use super::map::{self, Mapping};
use super::wire::{self, Blanket, BucketKey, Ttl};

/// Seconds a token bucket or DENY_ALL from the store lives in Envoy: past two 5 s report
/// periods and a reconnect, so one lost report never lets an assignment expire.
pub const TTL_ASSIGNED: u32 = 15;
/// Seconds an ALLOW_ALL for a bucket no limit applies to lives.
pub const TTL_UNLIMITED: u32 = 300;
/// Seconds an answer of the failure policy lives: Envoy is back on the store's answers
/// within two reports of the store returning.
pub const TTL_FAILURE: u32 = 10;
/// How long a claim is kept in the ledger after its last write: the assignment's TTL and
/// a margin for clocks and the answer's way to Envoy.
pub const KEEP_MS: u64 = (TTL_ASSIGNED as u64 + 5) * 1000;
/// How long a report waits for the store, per call. RLQS is off the request path: nothing
/// waits on this but the next assignment, so it is longer than the RLS store timeout.
pub const STORE_DEADLINE: Duration = Duration::from_secs(1);

fn ttl(seconds: u32) -> Ttl {
    Ttl(NonZeroU32::new(seconds).unwrap_or(NonZeroU32::MIN))
}

/// What the service assigns with: the RLS path's config, store and metrics, and the ledger
/// of the memory store.
#[derive(Debug)]
pub struct Quota {
    live: Arc<Live>,
    store: Arc<Store>,
    /// `failure_mode: local` buckets (the RLS path's own).
    local: Arc<MemoryStore>,
    /// The claims ledger of the memory store, and of `failure_mode: local` while the store fails.
    ledger: LocalLedger,
    metrics: Arc<Metrics>,
    overrides: Arc<Overrides>,
    key_prefix: String,
    key_secret: Option<KeySecret>,
    /// This instance's name in the ledger (random per process): where pushes for the
    /// holders of its streams go.
    instance: String,
}

impl Quota {
    /// Shares everything with `limiter`: one config, one store, one budget.
    pub fn new(limiter: &RateLimiter) -> Quota {
        let settings = limiter.settings();
        Quota {
            live: limiter.live(),
            store: limiter.store(),
            local: limiter.local_store(),
            ledger: LocalLedger::default(),
            metrics: limiter.metrics(),
            overrides: limiter.overrides(),
            key_prefix: settings.key_prefix.clone(),
            key_secret: settings.key_secret.clone(),
            instance: format!("{:016x}", rand::random::<u64>()),
        }
    }

    /// The metrics the service records to.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The store assignments are charged to.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// This instance's name in the ledger.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// The inbox of `instance`: pushes for the holders of its streams from other instances.
    pub fn inbox_key(&self, instance: &str) -> String {
        format!("{}tollgate-rlqs-inbox:{instance}", self.key_prefix)
    }

    /// The claims ledger of the memory store.
    pub fn ledger(&self) -> &LocalLedger {
        &self.ledger
    }

    /// `holder`'s entry in a bucket's ledger as `held` has it: live, its claim unchanged.
    fn hold<'a>(&'a self, holder: &'a str, held: &Held) -> Hold<'a> {
        Hold {
            holder,
            demand: held.demand,
            newcomer: held.newcomer,
            live: true,
            claim: None,
            keep_ms: KEEP_MS,
            instance: &self.instance,
        }
    }

    /// The ledger key of a bucket whose first limit's bucket key is `key`.
    pub fn ledger_key(key: &str) -> String {
        format!("{key}:rlqs")
    }
}

impl Quota {
    /// Answers `ask` for the bucket `key` of the report domain `domain`, held by `holder`.
    pub async fn assign(
        &self,
        domain: &str,
        key: &BucketKey,
        holder: &str,
        held: &mut Held,
        ask: Ask,
    ) -> Answer {
        if let Ask::Report { allowed, denied, immediate } = ask {
            held.demand = allowed.saturating_add(denied);
            held.newcomer = immediate && held.ledger.is_none() && !held.limited;
        }
        let active = self.live.load();
        let entries = match map::map(&active.snapshot, domain, key) {
            Mapping::UnknownDomain => return self.unlimited(key, held, "unknown_domain"),
            Mapping::NoPath => return self.unlimited(key, held, "no_rule"),
            Mapping::Descriptor { lookup: Lookup::NoMatch | Lookup::Allow, .. } => {
                return self.unlimited(key, held, "no_rule")
            }
            Mapping::Descriptor { entries, lookup: Lookup::Rule(_) } => entries,
        };
        let Some(domain) = active.snapshot.domain(domain) else {
            return self.unlimited(key, held, "unknown_domain");
        };
        let incident = self.overrides.mode(domain.name.as_bytes());
        if incident == Some(Mode::Open) {
            self.metrics.override_request(&domain.name, Mode::Open.as_str());
            held.running = None;
            return self
                .sent(Answer::one(wire::blanket(key, Blanket::AllowAll, ttl(TTL_FAILURE))), "allow_all");
        }
        let allowed = match ask {
            Ask::Report { allowed, .. } => allowed,
            Ask::Again { .. } => 0,
        };
        let (charges, shadow) =
            match charges::charges(domain, &entries, allowed, &self.key_prefix, self.key_secret.as_ref()) {
                Ok(planned) => planned,
                Err(reason) => return self.unlimited(key, held, reason),
            };
        let ledger_key = Quota::ledger_key(&charges[0].key);
        held.limited = true;
        held.ledger = Some(ledger_key.clone());
        let deadline = Instant::now() + STORE_DEADLINE;
        let shared =
            self.share(&self.store, &self.ledger, &charges, &ledger_key, holder, held, deadline).await;
        if shadow || incident == Some(Mode::Shadow) {
            // A shadow rule (or an incident's shadow mode) is charged and never denies.
            held.running = None;
            return self
                .sent(Answer::one(wire::blanket(key, Blanket::AllowAll, ttl(TTL_ASSIGNED))), "allow_all");
        }
        let fresh = match ask {
            Ask::Report { denied, .. } => denied > 0,
            Ask::Again { fresh } => fresh,
        };
        tracing::debug!(holder, ?ask, fresh, running = ?held.running, "RLQS: assign");
        match shared {
            Ok(shared) => self.grant(key, held, shared, fresh),
            Err(error) => self.failed(key, domain, &charges, &ledger_key, holder, held, &error, fresh),
        }
    }

    /// No limit applies to the bucket: ALLOW_ALL for long, or `abandon` when one did.
    fn unlimited(&self, key: &BucketKey, held: &mut Held, reason: &'static str) -> Answer {
        self.metrics.rlqs().unlimited(reason);
        held.running = None;
        if std::mem::take(&mut held.limited) {
            let mut answer = Answer::one(wire::abandon(key));
            answer.forget = true;
            return self.sent(answer, "abandon");
        }
        self.sent(Answer::one(wire::blanket(key, Blanket::AllowAll, ttl(TTL_UNLIMITED))), "allow_all")
    }

    /// Counts the actions of `answer` (all of kind `action`, a DENY_ALL of a fresh pair aside).
    fn sent(&self, answer: Answer, action: &'static str) -> Answer {
        if answer.actions.len() == 2 {
            self.metrics.rlqs().assignment("deny_all");
        }
        self.metrics.rlqs().assignment(action);
        answer
    }

    /// Charges `charges`, writes the holder into the ledger and shares the headroom.
    #[allow(clippy::too_many_arguments)]
    async fn share(
        &self,
        store: &Store,
        ledger: &LocalLedger,
        charges: &[Charge],
        ledger_key: &str,
        holder: &str,
        held: &Held,
        deadline: Instant,
    ) -> Result<Shared, StoreError> {
        let decisions: Vec<Decision> =
            store.charge(charges, deadline).await.into_iter().collect::<Result<_, _>>()?;
        let hold = self.hold(holder, held);
        let holders = store.hold(ledger, ledger_key, &hold, deadline).await?;
        let mut shared = shared(charges, &decisions, held, &holders);
        let claimed = Hold { claim: Some(shared.grant.max_tokens()), ..hold };
        let after = store.hold(ledger, ledger_key, &claimed, deadline).await?;
        // Another instance may have granted this bucket between the read and this write:
        // the write answers every claim written before it, so the later of two writers
        // sees the other and gives back what no longer fits (the earlier one is seen).
        let room = decisions.iter().map(|d| d.remaining).min().unwrap_or(0);
        let others: u64 = after.others.iter().fold(0, |sum, h| sum.saturating_add(h.claim));
        let fits = room.saturating_sub(others);
        if shared.grant.max_tokens() > fits {
            shared.grant = shrunk(shared.grant, fits);
            let hold = Hold { claim: Some(shared.grant.max_tokens()), ..hold };
            store.hold(ledger, ledger_key, &hold, deadline).await?;
        }
        tracing::debug!(
            holder, ledger_key, demand = held.demand, room, others = ?after.others.iter().map(|h| (&h.holder, h.claim, h.live)).collect::<Vec<_>>(),
            grant = ?shared.grant, "RLQS: shared"
        );
        Ok(shared)
    }

    /// The answer for a grant the store backed.
    fn grant(&self, key: &BucketKey, held: &mut Held, shared: Shared, fresh: bool) -> Answer {
        let Shared { grant, wake, shrink } = shared;
        let mut answer = match grant {
            Grant::DenyAll => {
                held.running = None;
                let answer = Answer::one(wire::blanket(key, Blanket::DenyAll, ttl(TTL_ASSIGNED)));
                self.sent(answer, "deny_all")
            }
            Grant::TokenBucket(bucket) => {
                let assign = wire::token_bucket(key, bucket, ttl(TTL_ASSIGNED));
                // A running bucket keeps its fill ratio when replaced: a dry one is given a
                // full one through a blanket rule first.
                let actions = match held.running {
                    Some(_) if fresh => vec![wire::blanket(key, Blanket::DenyAll, ttl(TTL_ASSIGNED)), assign],
                    _ => vec![assign],
                };
                held.running = Some(bucket);
                self.sent(Answer { actions, ..Answer::default() }, "token_bucket")
            }
        };
        answer.wake = wake;
        answer.shrink = shrink;
        answer
    }

    /// The store failed: the domain's failure policy answers, for a short TTL.
    #[allow(clippy::too_many_arguments)]
    fn failed(
        &self,
        key: &BucketKey,
        domain: &Domain,
        charges: &[Charge],
        ledger_key: &str,
        holder: &str,
        held: &mut Held,
        error: &StoreError,
        fresh: bool,
    ) -> Answer {
        tracing::debug!(domain = %domain.name, error = %error, "RLQS: the store failed; the failure policy answers");
        match domain.failure_mode {
            FailureMode::Open => {
                self.metrics.rlqs().failure_answer("open");
                held.running = None;
                self.sent(Answer::one(wire::blanket(key, Blanket::AllowAll, ttl(TTL_FAILURE))), "allow_all")
            }
            FailureMode::Closed => {
                self.metrics.rlqs().failure_answer("closed");
                held.running = None;
                self.sent(Answer::one(wire::blanket(key, Blanket::DenyAll, ttl(TTL_FAILURE))), "deny_all")
            }
            FailureMode::Local => {
                self.metrics.rlqs().failure_answer("local");
                let now = crate::store::memory::now_us();
                let decisions = self.local.charge_group_at(charges, now);
                let hold = self.hold(holder, held);
                let holders = self.ledger.hold(ledger_key, &hold, now / 1000);
                let shared = shared(charges, &decisions, held, &holders);
                let claim = Hold { claim: Some(shared.grant.max_tokens()), ..hold };
                self.ledger.hold(ledger_key, &claim, now / 1000);
                let mut answer = self.grant(key, held, shared, fresh);
                answer.shrink.clear();
                for action in &mut answer.actions {
                    wire::set_ttl(action, ttl(TTL_FAILURE));
                }
                answer
            }
        }
    }

    /// Releases `holder`'s share of the bucket at `ledger_key`: its demand no longer weighs
    /// (its stream ended). A named Envoy's claim stays until it expires: the Envoy may spend
    /// it until its assignment does, and finds it again when it reconnects under its name.
    /// An unnamed stream's claim goes with it: nothing tells its Envoy's next stream from
    /// another Envoy, and a claim kept for an Envoy that restarted would starve its next
    /// stream for the claim's life (its reconnect may then spend that claim twice: the
    /// bound counts it).
    pub async fn release(&self, ledger_key: &str, holder: &str, named: bool, held: &Held) {
        let hold = Hold { live: false, claim: if named { None } else { Some(0) }, ..self.hold(holder, held) };
        let deadline = Instant::now() + STORE_DEADLINE;
        if let Err(error) = self.store.hold(&self.ledger, ledger_key, &hold, deadline).await {
            tracing::debug!(error = %error, "RLQS: releasing a share failed; it expires with its claim");
        }
    }
}

mod charges;
mod held;
mod shared;

pub use held::{Answer, Ask, Assignment, Held, Shrink};
pub use shared::{shared, shrunk, Shared};
