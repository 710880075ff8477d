//! The incident switch's metrics (`crate::sources::overrides`): `tollgate_override_active{scope,mode}`
//! (1 while an override of that scope and mode is in force, refreshed before each scrape)
//! and `tollgate_override_requests_total{domain,mode}` (requests answered under one), and
//! `tollgate_override_replays_refused_total{change}` (`set`, `end`: changes made while
//! Redis was unreachable that Redis refused because another instance changed the scope).
//! Scopes are `all` and the configured domains, each exported at 0 from startup (a reload's
//! new domains from that load), so an alert on an active override needs no `absent()`.

use std::collections::BTreeSet;
use std::sync::{Mutex, PoisonError};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The `mode` label values, as `overrides::Mode::as_str` writes them.
pub const MODES: [&str; 2] = ["shadow", "open"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ScopeMode {
    scope: String,
    mode: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ChangeLabel {
    change: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DomainMode {
    domain: String,
    mode: &'static str,
}

/// The families of the incident switch.
#[derive(Debug)]
pub struct OverrideMetrics {
    active: Family<ScopeMode, Gauge>,
    requests: Family<DomainMode, Counter>,
    refused: Family<ChangeLabel, Counter>,
    /// The scopes exported so far: `all` and every domain configured since startup.
    scopes: Mutex<BTreeSet<String>>,
}

impl OverrideMetrics {
    /// Registers the families, with scope `all` and both changes at 0.
    pub fn register(registry: &mut Registry) -> OverrideMetrics {
        let metrics = OverrideMetrics {
            active: Family::default(),
            requests: Family::default(),
            refused: Family::default(),
            scopes: Mutex::new(BTreeSet::new()),
        };
        registry.register(
            "tollgate_override_active",
            "1 while an incident override (POST /v1/override) of this scope (all, or a domain) \
             and mode (shadow: decided, answered OK; open: store skipped, answered OK) is in force",
            metrics.active.clone(),
        );
        registry.register(
            "tollgate_override_requests",
            "Requests answered under an incident override, by domain and mode",
            metrics.requests.clone(),
        );
        registry.register(
            "tollgate_override_replays_refused",
            "Override changes (set, end) made while Redis was unreachable that Redis refused \
             when they were sent again: another instance had changed that scope since",
            metrics.refused.clone(),
        );
        for change in ["set", "end"] {
            metrics.refused.get_or_create(&ChangeLabel { change }).inc_by(0);
        }
        metrics.export_scope("all");
        metrics
    }

    /// Exports `scope` (a configured domain, or `all`) at 0 in every mode.
    pub fn export_scope(&self, scope: &str) {
        for mode in MODES {
            // Created at 0; an existing gauge keeps its value (set before each scrape).
            let _ = self.active.get_or_create(&ScopeMode { scope: scope.to_string(), mode });
        }
        if scope != "all" {
            for mode in MODES {
                self.requests.get_or_create(&DomainMode { domain: scope.to_string(), mode }).inc_by(0);
            }
        }
        self.scopes.lock().unwrap_or_else(PoisonError::into_inner).insert(scope.to_string());
    }

    /// Removes the series of `scope` (a domain no longer configured).
    pub fn remove_scope(&self, scope: &str) {
        for mode in MODES {
            self.active.remove(&ScopeMode { scope: scope.to_string(), mode });
            self.requests.remove(&DomainMode { domain: scope.to_string(), mode });
        }
        self.scopes.lock().unwrap_or_else(PoisonError::into_inner).remove(scope);
    }

    /// Sets every exported scope's gauges from `active(scope, mode)`.
    pub fn set_active(&self, active: impl Fn(&str, &str) -> bool) {
        let scopes = self.scopes.lock().unwrap_or_else(PoisonError::into_inner).clone();
        for scope in scopes {
            for mode in MODES {
                let on = i64::from(active(&scope, mode));
                self.active.get_or_create(&ScopeMode { scope: scope.clone(), mode }).set(on);
            }
        }
    }

    /// One pending `change` (`set` or `end`) refused by Redis.
    pub fn replay_refused(&self, change: &'static str) {
        self.refused.get_or_create(&ChangeLabel { change }).inc();
    }

    /// One request of a configured `domain` answered under an override in `mode`.
    pub fn request(&self, domain: &str, mode: &'static str) {
        self.requests.get_or_create(&DomainMode { domain: domain.to_string(), mode }).inc();
    }
}
