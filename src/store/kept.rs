//! A few Redis connections kept open and shared by every request, connected in the
//! background.
//!
//! Both kinds this holds are multiplexed (a Sentinel master's `MultiplexedConnection`, a
//! `ClusterConnection`): cloning one is cheap and many requests use it at once, so there is
//! no checkout per request and no pool `PING` on the request path. A connection is made by
//! a spawned task, never by the request that found the slot empty: a request only waits for
//! it (under its own deadline), so a connect slower than the deadline still completes and
//! serves the next requests, and at most one connect per slot runs at a time however many
//! requests arrive while Redis is down. A connection a request saw fail is `discard`ed; the
//! next request starts a fresh connect. This module knows nothing of scripts or charges.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;

use super::StoreError;

/// Makes one new connection (from a deadpool pool, taken out of it).
pub type Connect<C> = Arc<dyn Fn() -> ConnectFuture<C> + Send + Sync>;
/// What `Connect` returns.
pub type ConnectFuture<C> = Pin<Box<dyn Future<Output = Result<C, StoreError>> + Send>>;

/// Longest one background connect may take before it counts as failed.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// `count` shared connections, used round-robin.
pub struct Kept<C> {
    inner: Arc<Inner<C>>,
}

struct Inner<C> {
    slots: Box<[Slot<C>]>,
    next_slot: AtomicUsize,
    next_id: AtomicU64,
    connect: Connect<C>,
}

struct Slot<C> {
    state: Mutex<State<C>>,
    /// Signalled when a background connect finishes, whatever its outcome.
    settled: Notify,
}

struct State<C> {
    conn: Option<(C, u64)>,
    connecting: bool,
    last_error: Option<StoreError>,
}

/// A shared connection lent to one request; `discard` it if it failed.
pub struct Lease<C> {
    pub conn: C,
    slot: usize,
    id: u64,
}

impl<C: Clone + Send + 'static> Kept<C> {
    /// No connection is made until a request needs one.
    pub fn new(count: usize, connect: Connect<C>) -> Kept<C> {
        let slots = (0..count.max(1))
            .map(|_| Slot {
                state: Mutex::new(State { conn: None, connecting: false, last_error: None }),
                settled: Notify::new(),
            })
            .collect();
        Kept {
            inner: Arc::new(Inner {
                slots,
                next_slot: AtomicUsize::new(0),
                next_id: AtomicU64::new(0),
                connect,
            }),
        }
    }

    /// A connection to share: a kept one, or the one a background connect makes (waiting
    /// for it; the caller bounds the wait by its deadline). A failed connect is this
    /// request's `Unavailable`; the next request tries again.
    pub async fn get(&self) -> Result<Lease<C>, StoreError> {
        let slot = self.inner.next_slot.fetch_add(1, Ordering::Relaxed) % self.inner.slots.len();
        if let Some((conn, id)) = &self.inner.lock(slot).conn {
            return Ok(Lease { conn: conn.clone(), slot, id: *id });
        }
        let settled = self.inner.slots[slot].settled.notified();
        tokio::pin!(settled);
        // Registered before looking, so a connect finishing in between still wakes us.
        settled.as_mut().enable();
        {
            let mut state = self.inner.lock(slot);
            if let Some((conn, id)) = &state.conn {
                return Ok(Lease { conn: conn.clone(), slot, id: *id });
            }
            if !state.connecting {
                state.connecting = true;
                tokio::spawn(connect(self.inner.clone(), slot));
            }
        }
        settled.await;
        let state = self.inner.lock(slot);
        match (&state.conn, &state.last_error) {
            (Some((conn, id)), _) => Ok(Lease { conn: conn.clone(), slot, id: *id }),
            (None, Some(e)) => Err(e.clone()),
            (None, None) => Err(StoreError::Unavailable("no connection".into())),
        }
    }

    /// Stops sharing a connection that failed (only if its slot still holds that one).
    pub fn discard(&self, lease: &Lease<C>) {
        let mut state = self.inner.lock(lease.slot);
        if state.conn.as_ref().is_some_and(|(_, id)| *id == lease.id) {
            state.conn = None;
        }
    }

    /// Stops sharing every connection (they point at a node that is no longer the right one).
    pub fn discard_all(&self) {
        for slot in 0..self.inner.slots.len() {
            self.inner.lock(slot).conn = None;
        }
    }

    /// Connections currently kept.
    #[cfg(test)]
    pub fn open(&self) -> usize {
        (0..self.inner.slots.len()).filter(|&i| self.inner.lock(i).conn.is_some()).count()
    }
}

impl<C> Inner<C> {
    fn lock(&self, slot: usize) -> MutexGuard<'_, State<C>> {
        self.slots[slot].state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

async fn connect<C>(inner: Arc<Inner<C>>, slot: usize) {
    let result = match tokio::time::timeout(CONNECT_TIMEOUT, (inner.connect)()).await {
        Ok(result) => result,
        Err(_) => Err(StoreError::Unavailable(format!("connect took over {CONNECT_TIMEOUT:?}"))),
    };
    {
        let mut state = inner.lock(slot);
        state.connecting = false;
        match result {
            Ok(conn) => {
                let id = inner.next_id.fetch_add(1, Ordering::Relaxed);
                state.conn = Some((conn, id));
                state.last_error = None;
            }
            Err(e) => {
                tracing::debug!(error = %e, "redis connect failed");
                state.last_error = Some(e);
            }
        }
    }
    inner.slots[slot].settled.notify_waiters();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counting(fail: bool) -> (Connect<u32>, Arc<AtomicUsize>) {
        let calls = Arc::new(AtomicUsize::new(0));
        let seen = calls.clone();
        let connect: Connect<u32> = Arc::new(move || {
            let n = seen.fetch_add(1, Ordering::SeqCst) as u32;
            Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                if fail {
                    Err(StoreError::Unavailable("refused".into()))
                } else {
                    Ok(n)
                }
            })
        });
        (connect, calls)
    }

    #[tokio::test]
    async fn one_connect_serves_every_waiting_request_and_a_discard_reconnects() {
        let (connect, calls) = counting(false);
        let kept = Kept::new(1, connect);
        let (a, b) = tokio::join!(kept.get(), kept.get());
        let (a, b) = (a.expect("a"), b.expect("b"));
        assert_eq!((a.conn, b.conn, calls.load(Ordering::SeqCst)), (0, 0, 1));
        assert_eq!(kept.get().await.expect("kept").conn, 0);
        kept.discard(&a);
        assert_eq!(kept.open(), 0);
        assert_eq!(kept.get().await.expect("fresh").conn, 1);
        // A stale lease does not throw away the new connection.
        kept.discard(&b);
        assert_eq!(kept.open(), 1);
        kept.discard_all();
        assert_eq!(kept.open(), 0);
    }

    #[tokio::test]
    async fn a_connect_outlives_the_request_that_gave_up_and_failures_reach_waiters() {
        let (connect, calls) = counting(false);
        let kept = Kept::new(1, connect);
        assert!(tokio::time::timeout(Duration::from_millis(5), kept.get()).await.is_err());
        assert!(tokio::time::timeout(Duration::from_secs(2), async {
            while kept.open() == 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .is_ok());
        assert_eq!(calls.load(Ordering::SeqCst), 1);

        let (connect, _) = counting(true);
        let failing = Kept::new(2, connect);
        assert!(matches!(failing.get().await, Err(StoreError::Unavailable(_))));
    }
}
