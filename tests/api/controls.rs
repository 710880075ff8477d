//! Operator controls (issue 28), on real Redis with several instances: staged enforcement
//! (`rollout`), the incident switch (`/v1/override`; across a partition: `partition`),
//! penalties and keyed-hashed identifiers; and the metrics the dashboard uses, present from
//! startup (`ops::deploy`).

mod incident;
mod partition;
mod penalty;
mod rollout;
mod secret;
