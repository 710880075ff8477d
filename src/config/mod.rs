//! Policies: the YAML model, its validation, the compiled matcher, and loading from disk
//! or from xDS resources.
//!
//! Layout: `yaml` (one file's text to `raw`, the YAML's structs: `deny_unknown_fields`,
//! merge keys resolved by `merge_keys`, floats where strings belong refused by `floats`),
//! `domains` (which files make which domain, and the domain-level fields), `compile`
//! (validation collecting every error, building the immutable `model`; a node's
//! `rate_limit` / `rate_limits` in `compile::limits`, what an approximate domain refuses in
//! `compile::consistency`), `model` (snapshot and domains, over `matcher`: the
//! hash-per-level tree walk, and `rule`: a compiled rule and its limits), `loader` (the
//! only part that touches the file system), `options` (the load-time switches), `xds`
//! (`RateLimitConfig` resources from xDS, compiled one by one like files). Everything but
//! `loader` is pure.
//! The request path only sees `model` types (`Snapshot`, `Domain::lookup`, `Rule`).
//!
//! Layers inside, top to bottom (`tests/layers.rs`): `xds`; this file; `loader`; `compile`;
//! `domains`; `model`, `yaml`; `matcher`, `merge_keys`; `error`, `floats`, `options`, `raw`,
//! `rule`.

pub mod compile;
mod domains;
pub mod error;
mod floats;
pub mod loader;
pub mod matcher;
mod merge_keys;
pub mod model;
pub mod options;
pub mod raw;
pub mod rule;
pub mod xds;
pub mod yaml;

#[cfg(test)]
mod tests;

pub use compile::{compile_sources, compile_sources_with};
pub use error::{ConfigError, ConfigErrors};
pub use loader::{load_path, load_path_with};
pub use model::{ChargeMode, Consistency, Domain, FailureMode, HashTag, Lookup, Reservations, Snapshot};
pub use options::LoadOptions;
pub use rule::{Level, Limit, Rule, RuleId, RuleLimit, Unit};
