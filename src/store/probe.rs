//! What the store did for one request, for its trace (`crate::telemetry::trace`): which charges the
//! over-limit cache or a lease answered, how many calls went out, whether one was another
//! request's, what the breaker said.
//!
//! A task-local, set only around a traced request's charge ([`observe`]): everywhere else
//! [`note`] finds none and costs one thread-local read. Only the request's own task writes
//! it; work the request hands to other tasks (a lease's refill, a queued batch sent by
//! another request's lane) is seen where the request gets its answer back. Nothing shared
//! depends on it: a request dropped mid-charge drops its probe with it.

use std::cell::RefCell;
use std::future::Future;

/// Who answered a charge without a store call of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answered {
    /// The over-limit cache: a bucket Redis has just denied.
    OverLimitCache,
    /// A lease held by this instance.
    Lease,
}

/// What the store noted while charging one request.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Seen {
    /// Store calls the request's charges went out in (0: none left the process).
    pub calls: u32,
    /// One of them was another request's (coalesced, or batched behind a busy lane).
    pub shared: bool,
    /// `open` when the breaker answered without calling the store; `half_open` when
    /// this request's call was the breaker's probe.
    pub breaker: Option<&'static str>,
    /// Bucket keys answered without a call, and by whom.
    pub answered: Vec<(String, Answered)>,
}

impl Seen {
    /// Who answered `key` without a call, if anyone did.
    pub fn answered(&self, key: &str) -> Option<Answered> {
        self.answered.iter().find(|(k, _)| k == key).map(|(_, by)| *by)
    }
}

tokio::task_local! {
    static PROBE: RefCell<Seen>;
}

/// Runs `charge` with a probe, and answers what it saw beside its output.
pub async fn observe<F: Future>(charge: F) -> (F::Output, Seen) {
    PROBE
        .scope(RefCell::new(Seen::default()), async move {
            let output = charge.await;
            (output, PROBE.with(|seen| seen.take()))
        })
        .await
}

/// Notes into the probe of the running request, if it has one.
pub(crate) fn note(f: impl FnOnce(&mut Seen)) {
    let _ = PROBE.try_with(|seen| f(&mut seen.borrow_mut()));
}
