//! Operating Tollgate: the admin HTTP server and its client (`admin`: health, metrics,
//! reload, usage and reset, the busiest buckets, incident overrides), the status page
//! (`status`), the `/rlconfig` dump (`rlconfig`), and the offline commands `tollgate check`
//! (`check`) and `tollgate explain` (`explain`).
//!
//! Layers inside, top to bottom: `admin`; `explain`, `status`, `check`, `rlconfig`. None of
//! it is on the request path.

pub mod admin;
pub mod check;
pub mod explain;
pub mod rlconfig;
pub mod status;
