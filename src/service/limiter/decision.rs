//! The decision record: what deciding one request did, as a plain value. The request path
//! returns it beside the response, and its readers take what they need afterwards — the
//! headers and the dynamic metadata the deciding limits, the traced path a description
//! for the span (`traced::Observed`) — so that deciding knows nothing of spans.
//!
//! It holds what deciding makes anyway (the plans, borrowed from the config snapshot, the
//! charges, results and verdicts), moved in, never copied: an untraced request builds it
//! without an allocation and drops it. Only the traced path turns it into text.

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::DescriptorStatus;

use crate::algorithm::Decision;
use crate::sources::overrides::Mode;
use crate::store::{Charge, StoreError};

use super::super::plan::Plan;
use super::super::respond::Verdict;
use super::super::traced::{self, decided_by, Observed, StoreCall};
use super::super::{dynamic_metadata, headers};

/// How one request was decided.
#[derive(Debug)]
pub(super) struct DecisionRecord<'a> {
    /// The version of the config snapshot that decided it.
    pub config_version: &'a str,
    /// The incident override in force for the domain, if one was.
    pub incident: Option<Mode>,
    /// Global shadow mode (or a shadow override) turned a denial into OK.
    pub shadowed: bool,
    pub route: Route<'a>,
}

/// What answered the request's descriptors.
#[derive(Debug)]
pub(super) enum Route<'a> {
    /// All alike, before anything was planned or charged.
    Whole(Whole),
    /// Each by its plan: the rule matched, the store's charge, the verdict.
    Charged(Charged<'a>),
}

/// Why every descriptor of a request was answered alike, without the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Whole {
    /// The domain is not configured: OK.
    UnknownDomain,
    /// An incident override in `open` mode: OK.
    OverrideOpen,
    /// Past the size bounds (`bounds::Oversize::as_str`): the failure policy answered.
    Oversized(&'static str),
}

/// A request that was planned and charged. Per descriptor, `plans` and `verdicts`; per
/// charge, `charges`, `results` and `local` (empty when no charge was decided locally).
#[derive(Debug)]
pub(super) struct Charged<'a> {
    pub plans: Vec<Plan<'a>>,
    pub charges: Vec<Charge>,
    pub results: Vec<Result<Decision, StoreError>>,
    pub verdicts: Vec<Option<Verdict>>,
    /// Which charges `failure_mode: local` decided in this instance's memory.
    pub local: Vec<bool>,
    /// The approximate mode's local estimates decided (no store call of its own).
    pub approximate: bool,
    /// The store call, when it was watched (a traced request that charged the store).
    pub store: Option<Box<StoreCall>>,
}

impl<'a> DecisionRecord<'a> {
    /// A record of `route`. An override counts only for a configured domain: an unknown
    /// one is answered as unknown whatever the switch says.
    pub fn new(config_version: &'a str, incident: Option<Mode>, route: Route<'a>) -> Self {
        let incident = match route {
            Route::Whole(Whole::UnknownDomain) => None,
            _ => incident,
        };
        DecisionRecord { config_version, incident, shadowed: false, route }
    }

    /// Per descriptor, what the headers take from the limit that decided it (see
    /// `headers::Decided`); its policy name only when `named`. Empty when nothing was
    /// charged.
    pub fn decided(&self, named: bool) -> Vec<Option<headers::Decided>> {
        let Route::Charged(charged) = &self.route else { return Vec::new() };
        let decided = |(plan, verdict): (&Plan<'_>, &Option<Verdict>)| {
            let (Plan::Limited(limit), Some(verdict)) = (plan, verdict) else { return None };
            limit.limits().nth(verdict.limit).map(|one| {
                let policy = match (named, limit.name_of(one), limit.rule) {
                    (false, _, _) => String::new(),
                    (true, "", Some(rule)) => rule.label().to_string(),
                    (true, name, _) => name.to_string(),
                };
                headers::Decided {
                    count: one.params.limit,
                    window: one.window_seconds(),
                    policy,
                    response: one.response.clone(),
                }
            })
        };
        charged.plans.iter().zip(&charged.verdicts).map(decided).collect()
    }

    /// The merged `metadata` of the rules passed (`dynamic_metadata::passed`), given the
    /// codes as decided (before shadow mode): empty when nothing was charged.
    pub fn passed(&self, statuses: &[DescriptorStatus]) -> serde_json::Map<String, serde_json::Value> {
        match &self.route {
            Route::Charged(charged) => dynamic_metadata::passed(&charged.plans, statuses),
            Route::Whole(_) => serde_json::Map::new(),
        }
    }

    /// What the server span tells of it, for a request of `descriptors` descriptors.
    pub fn observed(self, descriptors: usize) -> Observed {
        let mut observed = Observed {
            config_version: self.config_version.to_string(),
            shadowed: self.shadowed,
            incident: self.incident.map(Mode::as_str),
            ..Observed::default()
        };
        match self.route {
            Route::Whole(whole) => {
                let by = match whole {
                    Whole::UnknownDomain => decided_by::UNKNOWN_DOMAIN,
                    Whole::OverrideOpen => decided_by::OVERRIDE_OPEN,
                    Whole::Oversized(reason) => {
                        observed.oversized = Some(reason);
                        decided_by::FAILURE_POLICY
                    }
                };
                traced::describe_all(&mut observed, descriptors, by);
            }
            Route::Charged(charged) => {
                let Charged { plans, charges, results, verdicts, local, approximate, store } = charged;
                // `describe` reads what the store call saw (who answered which key).
                observed.store = store.map(|call| *call);
                traced::describe(&mut observed, &plans, &results, &verdicts, &local, approximate, &charges);
            }
        }
        observed
    }
}
