//! The seam between the guards and the Redis topologies: what a Redis client does
//! (`Remote`: charge a batch, renew its connections; `Reset`: delete bucket keys) and what
//! it answers (`Charged`). The topologies (`redis::single`, `redis::sentinel`,
//! `redis::cluster`) implement it; `guarded` and `coalesce` call it.

use std::future::Future;

use tokio::time::Instant;

use crate::algorithm::Decision;

use super::charge::{Charge, Groups, Reservation, Reserved, StoreError};

/// A Redis client: charges a batch whose `groups` stand or fall together (see [`Groups`])
/// by a deadline, one result per charge, in order.
pub trait Remote {
    fn charge(
        &self,
        batch: &[Charge],
        groups: &Groups,
        deadline: Instant,
    ) -> impl Future<Output = Charged> + Send;

    /// Replaces the client's connections by new ones, made in the background (the breaker
    /// opened: its probe must not ride a connection from before the outage).
    fn renew(&self) {}

    /// One `reserve.lua` call for `group` (one descriptor's limits, on one slot) naming
    /// `reservation`, by `deadline`, on the charges' connections: never batched with other
    /// requests nor coalesced. Sent once (`NOSCRIPT`: once more with the source). A client
    /// without the script answers `Unavailable`.
    fn reserve(
        &self,
        group: &[Charge],
        reservation: &Reservation,
        deadline: Instant,
    ) -> impl Future<Output = Result<Reserved, StoreError>> + Send {
        let _ = (group, reservation, deadline);
        async { Err(StoreError::Unavailable("this client keeps no reservations".into())) }
    }
}

/// What a client answers for a batch.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Charged {
    /// One per charge, in order.
    pub results: Vec<Result<Decision, StoreError>>,
    /// Refunds the client sent on its own, with their answers (the cluster undoing the
    /// applied parts of a denied group): the over-limit cache learns them like any refund.
    pub refunds: Vec<(Charge, Result<Decision, StoreError>)>,
    /// Every result came from coalesced calls whose first member was another request's
    /// charge: that request records the call for the breaker, so this one does not (a
    /// coalesced call counts once, like any call). False for a client's own answers.
    pub shared: bool,
}

impl From<Vec<Result<Decision, StoreError>>> for Charged {
    fn from(results: Vec<Result<Decision, StoreError>>) -> Charged {
        Charged { results, refunds: Vec::new(), shared: false }
    }
}

/// A Redis client that serves an operator: deletes bucket keys, and sends one command on
/// one key (the state the fleet shares, `crate::store::shared`).
pub trait Reset {
    /// Deletes `keys` (never empty) by `deadline`.
    fn reset(
        &self,
        keys: &[String],
        deadline: Instant,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Sends `command`, whose only key is `key`, by `deadline` (on a cluster, to the master
    /// of `key`'s slot); its reply, or the error it answered.
    fn command(
        &self,
        key: &str,
        command: ::redis::Cmd,
        deadline: Instant,
    ) -> impl Future<Output = Result<::redis::Value, StoreError>> + Send;
}
