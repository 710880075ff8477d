//! The flags that say how the config's files load, shared by `serve`, `check` and
//! `explain`, and the `LoadOptions` they make.

use clap::{Args, ValueEnum};

use crate::algorithm::Algorithm;
use crate::config::LoadOptions;

/// How the config's files load: the same flags for `serve`, `check` and `explain`, so that
/// `check` accepts exactly what `serve` serves.
#[derive(Debug, Clone, Args)]
pub struct LoadFlags {
    /// Merge the files that name the same domain (envoyproxy/ratelimit's
    /// MERGE_DOMAIN_CONFIG=true) instead of refusing them.
    #[arg(long, env = "TOLLGATE_MERGE_DOMAINS")]
    pub merge_domains: bool,
    /// Algorithm of every limit that names none, and of a request's own `limit` override
    /// (a `burst` still means gcra). Part of every bucket's identity: changing it starts
    /// those buckets afresh.
    #[arg(long, env = "TOLLGATE_DEFAULT_ALGORITHM", value_enum, default_value = "gcra")]
    pub default_algorithm: DefaultAlgorithm,
    /// Charge `all_or_nothing` in every domain that sets no `charge`: a request with any
    /// descriptor denied charges none (envoyproxy/ratelimit's
    /// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT). A domain's own `charge` wins.
    #[arg(long, env = "TOLLGATE_STOP_CHARGING_WHEN_OVER_LIMIT")]
    pub stop_charging_when_over_limit: bool,
}

/// `--default-algorithm`'s values: the names of the YAML `algorithm` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "snake_case")]
pub enum DefaultAlgorithm {
    Gcra,
    FixedWindow,
    SlidingWindow,
}

impl LoadFlags {
    /// The options the config loads with.
    pub fn options(&self) -> LoadOptions {
        LoadOptions {
            merge_domains: self.merge_domains,
            default_algorithm: match self.default_algorithm {
                DefaultAlgorithm::Gcra => Algorithm::Gcra,
                DefaultAlgorithm::FixedWindow => Algorithm::FixedWindow,
                DefaultAlgorithm::SlidingWindow => Algorithm::SlidingWindow,
            },
            stop_charging_when_over_limit: self.stop_charging_when_over_limit,
        }
    }
}
