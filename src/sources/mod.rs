//! Where the policies in force come from and how they change while serving: the serving
//! snapshot and its swap (`serving`), reloading it from its files (`reload`), the xDS
//! client that feeds it instead (`xds`), which buckets a change of policy starts afresh
//! (`key_changes`), and the operator's incident overrides shared through the store
//! (`overrides`).
//!
//! Layers inside, top to bottom: `reload`, `xds`; `serving`; `key_changes`, `overrides`.
//! The policies themselves — their model, validation and compiled matcher — are `config`'s.

pub mod key_changes;
pub mod overrides;
pub mod reload;
pub mod serving;
pub mod xds;
