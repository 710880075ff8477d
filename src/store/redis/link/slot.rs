//! The slots of a link and their state machine: each slot holds at most one connection,
//! made by a background connect (at most one in flight per slot), and loses it for good
//! when it is retired (closed by its server, failed, `READONLY`, silent, or renewed), which
//! starts its replacement at once. A connect that lands after a renew is dropped. Sending
//! is `call`'s; the lock order of the slots is `held`'s.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use redis::aio::MultiplexedConnection;
use redis::AsyncConnectionConfig;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::super::super::charge::StoreError;
use super::held::{lock_slot, SlotGuard};
use super::settings::{Connect, LinkSettings, Replaced, CONNECT_TIMEOUT};
use super::watch::DisconnectWatch;

pub(super) struct Inner {
    pub(super) slots: Box<[Slot]>,
    pub(super) next_slot: AtomicUsize,
    next_id: AtomicU64,
    connect: Connect,
    pub(super) settings: LinkSettings,
    /// The server as shown in logs (no password).
    pub(super) name: String,
    /// Reply times are µs since this instant.
    epoch: Instant,
    pub(super) replaced: Mutex<Replaced>,
    /// Bumped by every `renew`: a connect started before it (to the master the sentinels
    /// named then, while a breaker's outage began) is not kept when it lands after it.
    pub(super) generation: AtomicU64,
}

pub(super) struct Slot {
    state: Mutex<SlotState>,
    /// Signalled when a background connect finishes, whatever its outcome.
    pub(super) settled: Notify,
}

#[derive(Default)]
pub(super) struct SlotState {
    pub(super) conn: Option<Arc<Conn>>,
    pub(super) connecting: bool,
    pub(super) last_error: Option<StoreError>,
}

/// One live connection and what is known of its health.
pub(super) struct Conn {
    pub(super) mc: MultiplexedConnection,
    id: u64,
    slot: usize,
    /// Commands written and not yet answered (or given up on after `reply_timeout`).
    pub(super) inflight: AtomicUsize,
    /// When the last reply arrived (µs since `Inner::epoch`); the connect time at first.
    pub(super) last_reply_us: AtomicU64,
    pub(super) retired: AtomicBool,
}

/// Why a connection was retired (counted in `Replaced`, and logged).
pub(super) enum Reason {
    Closed,
    Failed(String),
    ReadOnly,
    NoReply,
    Renewed,
}

impl Inner {
    /// `settings.connections` empty slots (at least one).
    pub(super) fn new(settings: LinkSettings, name: String, connect: Connect) -> Inner {
        let slots = (0..settings.connections.max(1))
            .map(|_| Slot { state: Mutex::new(SlotState::default()), settled: Notify::new() })
            .collect();
        Inner {
            slots,
            next_slot: AtomicUsize::new(0),
            next_id: AtomicU64::new(0),
            connect,
            settings,
            name,
            epoch: Instant::now(),
            replaced: Mutex::new(Replaced::default()),
            generation: AtomicU64::new(0),
        }
    }

    /// The slot's state; at most one slot lock per thread at a time (see `held`).
    pub(super) fn lock(&self, slot: usize) -> SlotGuard<'_, SlotState> {
        lock_slot(&self.slots[slot].state)
    }

    pub(super) fn now_us(&self) -> u64 {
        self.epoch.elapsed().as_micros() as u64
    }

    /// Spawns a connect for `slot` unless it has a connection or one is being made.
    pub(super) fn start_connect(self: &Arc<Self>, slot: usize) {
        {
            let mut state = self.lock(slot);
            if state.conn.is_some() || state.connecting {
                return;
            }
            state.connecting = true;
        }
        tokio::spawn(connect(self.clone(), slot));
    }

    /// Takes `conn` out for good and starts making its replacement.
    pub(super) fn retire(self: &Arc<Self>, conn: &Conn, reason: Reason) {
        if conn.retired.swap(true, Ordering::AcqRel) {
            return;
        }
        {
            let mut replaced = self.replaced.lock().unwrap_or_else(|e| e.into_inner());
            match &reason {
                Reason::Closed => replaced.closed += 1,
                Reason::Failed(_) => replaced.failed += 1,
                Reason::ReadOnly => replaced.readonly += 1,
                Reason::NoReply => replaced.no_reply += 1,
                Reason::Renewed => replaced.renewed += 1,
            }
        }
        let why = match &reason {
            Reason::Closed => "closed by the server".to_string(),
            Reason::Failed(e) => format!("failed: {e}"),
            Reason::ReadOnly => "answered READONLY: the node is a replica now".to_string(),
            Reason::NoReply => {
                format!("no reply for {:?} with commands outstanding", self.settings.reply_timeout)
            }
            Reason::Renewed => "renewed".to_string(),
        };
        if matches!(reason, Reason::Renewed) {
            tracing::info!(redis = %self.name, "replacing redis connection: {why}");
        } else {
            tracing::warn!(redis = %self.name, "replacing redis connection: {why}");
        }
        {
            let mut state = self.lock(conn.slot);
            if state.conn.as_ref().is_some_and(|c| c.id == conn.id) {
                state.conn = None;
            }
        }
        self.start_connect(conn.slot);
    }

    /// The server closed connection `id` (seen by its reader): retire it if still kept.
    fn closed(self: &Arc<Self>, slot: usize, id: u64) {
        let conn = self.lock(slot).conn.clone().filter(|c| c.id == id);
        if let Some(conn) = conn {
            self.retire(&conn, Reason::Closed);
        }
    }
}

/// One background connect of `slot` (see `Inner::start_connect`): keeps the connection, or
/// the error a request waiting for the slot answers; wakes the slot's waiters either way.
async fn connect(inner: Arc<Inner>, slot: usize) {
    let generation = inner.generation.load(Ordering::Acquire);
    let id = inner.next_id.fetch_add(1, Ordering::Relaxed);
    let weak = Arc::downgrade(&inner);
    let watch = DisconnectWatch::new(move || {
        if let Some(inner) = weak.upgrade() {
            // Retiring only takes short locks and spawns the reconnect.
            inner.closed(slot, id);
        }
    });
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        // Replies are timed by `call`, which knows whether the connection is silent.
        .set_response_timeout(None)
        .set_push_sender(watch);
    let result = match tokio::time::timeout(CONNECT_TIMEOUT, (inner.connect)(config)).await {
        Ok(result) => result,
        Err(_) => Err(StoreError::Unavailable(format!("redis connect took over {CONNECT_TIMEOUT:?}"))),
    };
    // Renewed while this connect was in flight: its server may be the one the renew moves
    // away from (a master the sentinels replaced: found by the soak, a connect to the
    // frozen old master landing after the switch and charging it, still a master, for
    // seconds). Dropped, and the slot connects again, asking afresh.
    let stale = inner.generation.load(Ordering::Acquire) != generation;
    let result = match result {
        Ok(_) if stale => Err(StoreError::Unavailable("renewed while connecting".into())),
        result => result,
    };
    {
        let mut state = inner.lock(slot);
        state.connecting = false;
        match result {
            Ok(mc) => {
                let conn = Conn {
                    mc,
                    id,
                    slot,
                    inflight: AtomicUsize::new(0),
                    last_reply_us: AtomicU64::new(inner.now_us()),
                    retired: AtomicBool::new(false),
                };
                state.conn = Some(Arc::new(conn));
                state.last_error = None;
            }
            Err(e) => {
                tracing::debug!(redis = %inner.name, error = %e, "redis connect failed");
                state.last_error = Some(e);
            }
        }
    }
    if stale {
        // The slot's lock is released: `start_connect` takes it again.
        inner.start_connect(slot);
    }
    inner.slots[slot].settled.notify_waiters();
}
