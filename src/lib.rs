//! Tollgate: a rate-limit service for Envoy.
//!
//! The house by concern, top to bottom. A module imports only from its own area or an area
//! below it, inside an area only from its own layer or below (each area's comment names its
//! layers), and no two files import each other. `tests/layers.rs` reads every `use` line of
//! `src/`, follows `pub use` re-exports, and checks all three.
//!
//! | layer | area | modules | what |
//! |---|---|---|---|
//! | 1 | `main` | | the binary: parses the command line and runs it |
//! | 2 | `cli` | `serve`, `xds`, `tracing`, `peer`, `load`, `values` | the flags and subcommands (`serve`, `check`, `explain`, `usage`, `reset`) |
//! | 3 | `app` | `servers`, `tasks`, `loading`, `store`, `settings` | the wiring: settings to a running server (store, tasks, gRPC, admin, shutdown) |
//! | 4 | `operate` | `admin`, `explain`, `status`, `check`, `rlconfig` | operating it: the admin HTTP server and its client, `tollgate explain`, the status page, `tollgate check`, the `/rlconfig` dump |
//! | 5 | `service` | `server`, `limiter`, `traced`, `record`, `respond`, `headers`, `dynamic_metadata`, `plan`, `bounds`, `wire` | the gRPC request path: validate, plan, charge, record, respond; the RLQS streams (`rlqs`) |
//! | 6 | `sources` | `reload`, `xds`, `serving`, `key_changes`, `overrides` | where policies come from: the serving snapshot and its swap, file reloads, xDS, which buckets a change resets, the incident overrides |
//! | 7 | `telemetry` | `trace`, `metrics`, `hotkeys`, `escape` | what it tells: spans, metrics and the one-minute history, the busiest buckets, escaped request bytes |
//! | 8 | `store` | (see `store`'s comment) | where buckets live (memory, Redis), the approximate mode, leases, the shared Redis hashes and Lua scripts |
//! | 9 | `config` | (see `config`'s comment) | policies: the YAML model, validation, the compiled matcher, loading |
//! | 10 | `algorithm` | `gcra`, `sliding_window`, `fixed_window`, `joint`, `penalty`, `bucket`, `saturating` | the pure math of every algorithm |
//!
//! `config` and `algorithm` do no network I/O. No upward import is kept on purpose.
#![forbid(unsafe_code)]

pub mod algorithm;
pub mod app;
pub mod cli;
pub mod config;
pub mod operate;
pub mod service;
pub mod sources;
pub mod store;
pub mod telemetry;
