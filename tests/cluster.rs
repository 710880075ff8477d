//! Redis Cluster and Sentinel, for real: each test starts its own 3-master cluster (or
//! master + replica + sentinel) on free loopback ports and the whole app in-process.
//!
//! `scenarios` is `tests/api/scenarios.rs` itself (and `new_limits` is `tests/api/new_limits.rs`) — the scenario suite every store passes —
//! run here with `StoreKind::Redis` meaning a cluster (see `support`). `scaling` covers
//! what only a cluster shows; `faults` a cluster behind TCP fronts (`support/front.rs`)
//! whose connections go silent; `sentinel` the Sentinel store; `joint` groups charged together on a cluster and on
//! Sentinel; `aon_members` all-or-nothing groups spanning slots hammered (each member answers
//! its own bucket); `approximate` approximate mode's sync on a cluster; `cli` the flags.
//!
//! A missing `redis-server` or `redis-cli` is a loud failure (`make test` installs them).

#[allow(dead_code)]
#[path = "support/approx.rs"]
mod approx_support;
#[allow(dead_code)]
#[path = "support/cluster.rs"]
mod cluster_support;
#[allow(dead_code)]
#[path = "support/front.rs"]
mod front_support;
#[allow(dead_code)]
#[path = "support/sentinel.rs"]
mod sentinel_support;

#[path = "cluster/aon_late.rs"]
mod aon_late;
#[path = "cluster/aon_members.rs"]
mod aon_members;
#[path = "cluster/approximate.rs"]
mod approximate;
#[path = "cluster/approximate_surface.rs"]
mod approximate_surface;
#[path = "cluster/calendar.rs"]
mod calendar;
#[path = "cluster/cli.rs"]
mod cli;
#[path = "cluster/coalesce.rs"]
mod coalesce;
#[path = "cluster/faults.rs"]
mod faults;
#[path = "cluster/joint.rs"]
mod joint;
#[path = "api/new_limits.rs"]
mod new_limits;
#[path = "cluster/plain.rs"]
mod plain;
#[path = "cluster/ready.rs"]
mod ready;
#[path = "api/reservations.rs"]
mod reservations;
#[path = "cluster/reserve.rs"]
mod reserve;
#[path = "api/reserve_scenario.rs"]
mod reserve_scenario;
#[path = "cluster/reset.rs"]
mod reset;
#[path = "cluster/rlqs.rs"]
mod rlqs;
#[path = "cluster/scaling.rs"]
mod scaling;
#[path = "api/scenarios.rs"]
mod scenarios;
#[path = "cluster/sentinel.rs"]
mod sentinel;
#[allow(dead_code)]
#[path = "cluster/support.rs"]
mod support;
#[path = "cluster/tls.rs"]
mod tls;
