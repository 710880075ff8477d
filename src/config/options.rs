//! How a set of files becomes a snapshot: the load-time switches `serve`, `check` and
//! `explain` share (`--merge-domains`, `--default-algorithm`).
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
}

impl Default for LoadOptions {
    /// Today's behaviour: one file per domain, gcra.
    fn default() -> Self {
        LoadOptions { merge_domains: false, default_algorithm: Algorithm::Gcra }
    }
}
