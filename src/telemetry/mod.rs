//! What Tollgate tells about itself: Prometheus metrics and the one-minute history the
//! status page reads (`metrics`), OpenTelemetry spans of a request (`trace`), the busiest
//! buckets of each domain (`hotkeys`), and the one escaped text form in which request bytes
//! reach logs, labels and pages (`escape`).
//!
//! Layers inside, top to bottom: `trace`; `metrics`; `hotkeys`; `escape`. Nothing here
//! decides a request: the request path feeds these, and the admin port reads them.

pub mod escape;
pub mod hotkeys;
pub mod metrics;
pub mod trace;
