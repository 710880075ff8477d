//! Tollgate: a rate-limit service for Envoy.
//!
//! The layers, top to bottom. A module imports only from its own layer or below, and no two
//! files import each other (`tests/layers.rs` reads every `use` line of `src/` and checks
//! both; it also holds `store/`'s own layers, named in `store`'s comment):
//!
//! | layer | modules | what |
//! |---|---|---|
//! | 1 | `main` | the binary: parses the command line and runs it |
//! | 2 | `cli` | the flags and subcommands (`serve`, `check`, `explain`, `usage`, `reset`) |
//! | 3 | `app` | the wiring: settings to a running server (store, tasks, gRPC, admin, shutdown) |
//! | 4 | `admin` | the admin HTTP server and the `usage`/`reset` client |
//! | 5 | `explain` | `tollgate explain`: how a descriptor is matched and charged |
//! | 6 | `status`, `reload`, `xds` | the status page; reloading the config from its files; the xDS config source (ADS client) |
//! | 7 | `service` | the gRPC request path: validate, plan, charge, record, respond |
//! | 8 | `live`, `check` | the serving config and its swap; `tollgate check` |
//! | 9 | `metrics`, `hotkeys`, `fresh`, `overrides` | counting (the one-minute history included), the busiest buckets, rules new in a reload, the incident switch |
//! | 10 | `store`, `rlconfig` | where buckets live (memory, Redis); the `/rlconfig` dump |
//! | 11 | `config` | policies: the YAML model, validation, the compiled matcher, loading |
//! | 12 | `algorithm`, `escape` | the pure math of every algorithm; escaping bytes for text |
//!
//! `config` and `algorithm` do no network I/O. No upward import is kept on purpose.
#![forbid(unsafe_code)]

pub mod admin;
pub mod algorithm;
pub mod app;
pub mod check;
pub mod cli;
pub mod config;
pub mod escape;
pub mod explain;
pub mod fresh;
pub mod hotkeys;
pub mod live;
pub mod metrics;
pub mod overrides;
pub mod reload;
pub mod rlconfig;
pub mod service;
pub mod status;
pub mod store;
pub mod trace;
pub mod xds;
