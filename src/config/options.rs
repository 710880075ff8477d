//! How a set of files becomes a snapshot: the load-time switches `serve`, `check` and
//! `explain` share (`--merge-domains`, `--default-algorithm`,
//! `--stop-charging-when-over-limit`).
//!
//! Pure data: no I/O, no validation. The same options must be given to every command that
//! loads a config, or `check` would accept what `serve` refuses (or compile other buckets).

use crate::algorithm::Algorithm;

/// Load-time switches that change what a config means, not what it says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadOptions {
    /// `--merge-domains` (envoyproxy/ratelimit's `MERGE_DOMAIN_CONFIG=true`): files naming
    /// the same domain merge into one domain instead of failing to load.
    pub merge_domains: bool,
    /// `--default-algorithm`: the algorithm of every limit that names none (and of a
    /// request's own `limit` override). A `burst` without `algorithm` still means gcra.
    pub default_algorithm: Algorithm,
    /// `--stop-charging-when-over-limit` (envoyproxy/ratelimit's
    /// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`): every domain that sets no `charge`
    /// charges `all_or_nothing`; a domain's own `charge` wins.
    pub stop_charging_when_over_limit: bool,
}

impl Default for LoadOptions {
    /// Today's behaviour: one file per domain, gcra, each descriptor charged on its own.
    fn default() -> Self {
        LoadOptions {
            merge_domains: false,
            default_algorithm: Algorithm::Gcra,
            stop_charging_when_over_limit: false,
        }
    }
}
