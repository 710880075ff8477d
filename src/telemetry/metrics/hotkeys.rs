//! `tollgate_hot_key_share{domain,rank}`: the shape of each domain's skew, from the
//! hot-key sketches (`crate::telemetry::hotkeys`), refreshed before each scrape.
//!
//! Bounded labels: configured domains × ranks 1..=[`RANKS`], never a value. Every rank of
//! every configured domain is exported (0 where the domain has fewer busy buckets), and the
//! series of a domain a reload removed are removed with it.

use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, PoisonError};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Ranks exported per domain.
pub const RANKS: usize = 10;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HotKeyLabels {
    domain: String,
    rank: u32,
}

/// The gauge family and the domains it exported last.
#[derive(Debug)]
pub struct HotKeyShares {
    family: Family<HotKeyLabels, Gauge<f64, AtomicU64>>,
    exported: Mutex<Vec<String>>,
}

impl HotKeyShares {
    /// Registers the family in `registry`.
    pub fn register(registry: &mut Registry) -> HotKeyShares {
        let family = Family::<HotKeyLabels, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "tollgate_hot_key_share",
            "Share of the domain's charged decisions over the last minute taken by its rank-th \
             busiest bucket (rank 1..10), as this instance saw them",
            family.clone(),
        );
        HotKeyShares { family, exported: Mutex::new(Vec::new()) }
    }

    /// Sets every rank of each domain in `shares` (busiest first) and removes the series
    /// of domains no longer there.
    pub fn set(&self, shares: &[(String, Vec<f64>)]) {
        let mut exported = self.exported.lock().unwrap_or_else(PoisonError::into_inner);
        for gone in exported.iter().filter(|d| !shares.iter().any(|(name, _)| name == *d)) {
            for rank in 1..=RANKS as u32 {
                self.family.remove(&HotKeyLabels { domain: gone.clone(), rank });
            }
        }
        for (domain, values) in shares {
            for rank in 1..=RANKS {
                let share = values.get(rank - 1).copied().unwrap_or(0.0);
                let labels = HotKeyLabels { domain: domain.clone(), rank: rank as u32 };
                self.family.get_or_create(&labels).set(share);
            }
        }
        *exported = shares.iter().map(|(name, _)| name.clone()).collect();
    }
}
