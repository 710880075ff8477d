//! Integration tests: the whole server over gRPC, on the memory store and on a real Redis.

// Shared helpers: not every test binary uses every helper.
#[allow(dead_code)]
#[path = "../support/ads/mod.rs"]
mod ads;
#[allow(dead_code)]
#[path = "../support/front.rs"]
mod front_support;
#[allow(dead_code)]
#[path = "../support/otlp.rs"]
mod otlp;
#[allow(dead_code)]
#[path = "../support/redis.rs"]
mod redis_support;

mod budget_combos;
mod calendar;
mod cli;
mod controls;
mod joint_store;
mod migration;
mod new_limits;
mod ops;
mod options;
mod overdraft;
mod plain_windows;
mod redis_store;
mod reservations;
mod reserve_scenario;
mod reserve_store;
mod rlqs;
mod scenarios;
#[allow(dead_code)]
mod support;
mod traces;
mod xds;
