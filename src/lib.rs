//! Tollgate: a rate-limit service for Envoy.
//!
//! Layout: `config` (policies: model, matcher, loading) and `algorithm` (pure math) form the
//! core and do no network I/O; `store` keeps buckets (memory or Redis); `service` is the
//! gRPC request path; `admin` the HTTP admin (`status` its status page); `app` wires them;
//! `cli` parses flags.
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
pub mod reload;
pub mod rlconfig;
pub mod service;
pub mod status;
pub mod store;
