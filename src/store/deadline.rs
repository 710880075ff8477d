//! Waiting for an answer until a deadline, without turning a late timer into a timeout.
//!
//! A deadline that expires while this process is not running (a CPU-starved node, a
//! throttled container, a busy shared machine) wakes the waiting task and the connection's
//! reader in the same turn of the runtime. If the waiting task runs first, a reply already
//! in the socket would count as a timeout — and a charge Redis made would be answered by
//! the failure policy. [`within`] gives the runtime a few turns after the deadline before
//! it calls it a timeout: each `yield_now` lets the runtime poll its I/O driver and run the
//! tasks that carry a reply to this one (the connection's reader, the call's task), so a
//! reply that came in time is taken and one still not here is a real timeout. The caller
//! waits microseconds longer, never another deadline.
//!
//! Measured by the soak (`tests/soak`, docs/reliability.md): on a CPU-contended machine,
//! store timeouts on a healthy Redis fell from about 100 to about 25 per 10 s per instance.

use std::future::Future;

use futures_util::FutureExt as _;
use tokio::time::Instant;

/// Turns given to the runtime after the deadline: the reader, the call's task and the
/// waker of this one each take one.
const TURNS_AFTER_DEADLINE: usize = 3;

/// `future`'s output if it is ready by `deadline` (or within a few runtime turns after
/// it); `None` otherwise. `future` is borrowed, so a caller may keep it (a spawned call
/// goes on, a receiver can still be dropped).
pub async fn within<F: Future + Unpin>(deadline: Instant, future: &mut F) -> Option<F::Output> {
    if let Ok(output) = tokio::time::timeout_at(deadline, &mut *future).await {
        return Some(output);
    }
    for _ in 0..TURNS_AFTER_DEADLINE {
        tokio::task::yield_now().await;
        if let Some(output) = (&mut *future).now_or_never() {
            return Some(output);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn an_answer_sent_in_the_turn_the_deadline_expires_is_taken() {
        let (sender, mut receiver) = tokio::sync::oneshot::channel::<u32>();
        let deadline = Instant::now() + Duration::from_millis(5);
        // A task that answers once the deadline has passed, in the next turn after the
        // waiter's timer fired (the reply that was "in the socket" when the timer fired).
        tokio::spawn(async move {
            tokio::time::sleep_until(deadline).await;
            let _ = sender.send(7);
        });
        std::thread::sleep(Duration::from_millis(20)); // this runtime stalls past the deadline
        assert_eq!(within(deadline, &mut receiver).await.map(Result::ok), Some(Some(7)));
    }

    #[tokio::test]
    async fn an_answer_that_never_comes_is_a_timeout_soon_after_the_deadline() {
        let never = std::future::pending::<()>();
        let mut never = std::pin::pin!(never);
        let started = Instant::now();
        assert!(within(started + Duration::from_millis(5), &mut never).await.is_none());
        assert!(started.elapsed() < Duration::from_millis(100));
    }
}
