//! Policies: the YAML model, its validation, the compiled matcher, and loading from disk.
//!
//! Layout: `raw` (the YAML's structs, `deny_unknown_fields`; YAML merge keys resolved by
//! `merge_keys`, floats where strings belong refused by `floats`), `compile` (validation
//! collecting every error, building the immutable `model`), `matcher` (hash-per-level tree walk),
//! `loader` (the only part that touches the file system). Everything but `loader` is pure.
//! The request path only sees `model` types (`Snapshot`, `Domain::lookup`, `Rule`).

pub mod compile;
pub mod error;
mod floats;
pub mod loader;
pub mod matcher;
mod merge_keys;
pub mod model;
pub mod raw;

#[cfg(test)]
mod tests;

pub use compile::compile_sources;
pub use error::{ConfigError, ConfigErrors};
pub use loader::load_path;
pub use model::{Domain, FailureMode, Level, Lookup, Rule, RuleId, RuleLimit, Snapshot, Unit};
