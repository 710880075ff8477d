//! One connection lifecycle for every Redis topology: how a connection is made, shared,
//! watched and replaced. Topologies differ only in how they find a server (`Connect`).
//!
//! A `Link` keeps a few multiplexed connections to one server, shared round-robin by every
//! request (one request is one pipeline, one round trip). The rules, each learned from a
//! fault that stopped limiting:
//! - **Connecting never happens inside a request's deadline.** A connect runs in a spawned
//!   task (at most one per slot at a time); a request only waits for it under its own
//!   deadline, so a TLS + AUTH set-up slower than the store timeout still completes and
//!   serves the next requests. A replaced connection is re-made at once, in the background.
//! - **A connection is taken out for good** when its server closes it (RESP3 push
//!   `Disconnection`, seen before any request tries it), when it fails a call, when it
//!   answers `READONLY` (a demoted master keeps answering `PING`, so nothing may hand it
//!   back), or when it has had commands outstanding and no reply at all for
//!   `reply_timeout` (a silent connection: a NAT entry dropped, a dead VM). Not "N
//!   timeouts": every request in flight on a multiplexed connection times out together in
//!   one stall, and a reply on it proves it alive.
//! - **Calls are detached.** The pipeline is sent and awaited by a spawned task that owns
//!   the connection's in-flight count and reply clock, so a request dropped at any `.await`
//!   (the client reset the stream) changes nothing shared; the request waits for the
//!   task's answer until its own deadline.
//! - **Bounded backlog.** At most `max_inflight` commands are outstanding per connection;
//!   past that a call fails at once (`Overloaded`) instead of queueing behind a frozen
//!   server that would, when it resumes, charge buckets for requests answered long ago.
//! - **Socket options** (`socket_settings`): `TCP_NODELAY`, keepalive and
//!   `TCP_USER_TIMEOUT` on every socket, so the kernel also drops a dead peer.
//!
//! A call's error says whether the commands may have run (`SendError::MaybeRan`: never
//! re-send) or certainly did not (`SendError::NotSent`). This module knows nothing of
//! scripts or charges.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use redis::aio::{AsyncPushSender, MultiplexedConnection, SendError as PushSendError};
use redis::io::tcp::{socket2, TcpSettings};
use redis::{AsyncConnectionConfig, Pipeline, PushInfo, PushKind, Value};
use tokio::sync::Notify;
use tokio::time::Instant;

mod held;

use self::held::{lock_slot, SlotGuard};
use super::super::charge::StoreError;
use super::reply::{classify, is_readonly};

/// Longest one background connect (TCP, TLS, AUTH, `HELLO`) may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// Makes one connection with the given config (which carries the lifecycle's push sender).
pub type Connect = Arc<dyn Fn(AsyncConnectionConfig) -> ConnectFuture + Send + Sync>;
/// What `Connect` returns.
pub type ConnectFuture = Pin<Box<dyn Future<Output = Result<MultiplexedConnection, StoreError>> + Send>>;

/// How connections are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkSettings {
    /// Connections kept open and shared by all requests.
    pub connections: usize,
    /// A connection with commands outstanding and no reply for this long is replaced.
    pub reply_timeout: Duration,
    /// Commands outstanding per connection past which a call fails at once.
    pub max_inflight: usize,
}

/// How long approximate mode's sync connection may have commands outstanding without any
/// reply before it is taken out (unless the store's reply timeout is longer): a sync call
/// is judged by its own deadline, not by the request path's silent-connection rule.
pub const SYNC_REPLY_TIMEOUT: Duration = Duration::from_secs(1);

impl LinkSettings {
    /// The settings of approximate mode's own connection: one connection, silent only
    /// after [`SYNC_REPLY_TIMEOUT`].
    pub fn for_sync(self) -> LinkSettings {
        LinkSettings { connections: 1, reply_timeout: self.reply_timeout.max(SYNC_REPLY_TIMEOUT), ..self }
    }
}

/// Why a call got no reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendError {
    /// The commands were never written: sending them elsewhere cannot charge twice.
    NotSent(StoreError),
    /// The commands may have run (timed out, or the connection failed after writing).
    MaybeRan(StoreError),
}

impl From<SendError> for StoreError {
    fn from(e: SendError) -> StoreError {
        match e {
            SendError::NotSent(e) | SendError::MaybeRan(e) => e,
        }
    }
}

/// Why connections were replaced, since the start (for metrics and tests).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Replaced {
    pub closed: u64,
    pub failed: u64,
    pub readonly: u64,
    pub no_reply: u64,
    pub renewed: u64,
}

impl std::ops::Add for Replaced {
    type Output = Replaced;

    fn add(self, b: Replaced) -> Replaced {
        Replaced {
            closed: self.closed + b.closed,
            failed: self.failed + b.failed,
            readonly: self.readonly + b.readonly,
            no_reply: self.no_reply + b.no_reply,
            renewed: self.renewed + b.renewed,
        }
    }
}

/// A few shared connections to one server, made and replaced in the background.
pub struct Link {
    inner: Arc<Inner>,
}

impl fmt::Debug for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Link").field("server", &self.inner.name).finish_non_exhaustive()
    }
}

struct Inner {
    slots: Box<[Slot]>,
    next_slot: AtomicUsize,
    next_id: AtomicU64,
    connect: Connect,
    settings: LinkSettings,
    /// The server as shown in logs (no password).
    name: String,
    /// Reply times are µs since this instant.
    epoch: Instant,
    replaced: Mutex<Replaced>,
    /// Bumped by every `renew`: a connect started before it (to the master the sentinels
    /// named then, while a breaker's outage began) is not kept when it lands after it.
    generation: AtomicU64,
}

struct Slot {
    state: Mutex<SlotState>,
    /// Signalled when a background connect finishes, whatever its outcome.
    settled: Notify,
}

#[derive(Default)]
struct SlotState {
    conn: Option<Arc<Conn>>,
    connecting: bool,
    last_error: Option<StoreError>,
}

/// One live connection and what is known of its health.
struct Conn {
    mc: MultiplexedConnection,
    id: u64,
    slot: usize,
    /// Commands written and not yet answered (or given up on after `reply_timeout`).
    inflight: AtomicUsize,
    /// When the last reply arrived (µs since `Inner::epoch`); the connect time at first.
    last_reply_us: AtomicU64,
    retired: AtomicBool,
}

enum Reason {
    Closed,
    Failed(String),
    ReadOnly,
    NoReply,
    Renewed,
}

impl Link {
    /// No connection is made until `warm` or a first call.
    pub fn new(settings: LinkSettings, name: String, connect: Connect) -> Link {
        let slots = (0..settings.connections.max(1))
            .map(|_| Slot { state: Mutex::new(SlotState::default()), settled: Notify::new() })
            .collect();
        Link {
            inner: Arc::new(Inner {
                slots,
                next_slot: AtomicUsize::new(0),
                next_id: AtomicU64::new(0),
                connect,
                settings,
                name,
                epoch: Instant::now(),
                replaced: Mutex::new(Replaced::default()),
                generation: AtomicU64::new(0),
            }),
        }
    }

    /// Starts connecting every empty slot in the background (needs a Tokio runtime).
    pub fn warm(&self) {
        for slot in 0..self.inner.slots.len() {
            self.inner.start_connect(slot);
        }
    }

    /// Sends `count` commands as one pipeline and waits for their replies until `deadline`.
    /// Replies come in order, one per command (a server error is a `Value`, not an error).
    pub async fn send(
        &self,
        pipe: Pipeline,
        count: usize,
        deadline: Instant,
    ) -> Result<Vec<Value>, SendError> {
        self.send_weighted(pipe, count, count, deadline).await
    }

    /// As [`send`](Self::send), counted as `weight` commands against `max_inflight`: a
    /// coalesced call counts as the charges it carries, so that the charges a stalled server
    /// may run after their requests were answered stay within the cap.
    pub async fn send_weighted(
        &self,
        pipe: Pipeline,
        count: usize,
        weight: usize,
        deadline: Instant,
    ) -> Result<Vec<Value>, SendError> {
        let conn = match tokio::time::timeout_at(deadline, self.lease()).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => return Err(SendError::NotSent(e)),
            Err(_) => return Err(SendError::NotSent(StoreError::Timeout)),
        };
        let before = conn.inflight.fetch_add(weight, Ordering::AcqRel);
        // A batch larger than the cap still goes out alone on an idle connection.
        if before > 0 && before + weight > self.inner.settings.max_inflight {
            conn.inflight.fetch_sub(weight, Ordering::AcqRel);
            return Err(SendError::NotSent(StoreError::Overloaded));
        }
        let mut call = tokio::spawn(call(self.inner.clone(), conn, pipe, count, weight));
        // A reply the runtime has not read yet when a late timer fires still counts.
        let Some(finished) = crate::store::deadline::within(deadline, &mut call).await else {
            return Err(SendError::MaybeRan(StoreError::Timeout));
        };
        match finished {
            Ok(Ok(values)) => Ok(values),
            Ok(Err(e)) => Err(SendError::MaybeRan(e)),
            Err(join) => Err(SendError::MaybeRan(StoreError::Unavailable(format!("redis call: {join}")))),
        }
    }

    /// Replaces every connection by a new one (made in the background): after the breaker
    /// opened, so that its probe uses a connection made since; after a master switch.
    pub fn renew(&self) {
        self.inner.generation.fetch_add(1, Ordering::AcqRel);
        for slot in 0..self.inner.slots.len() {
            let conn = self.inner.lock(slot).conn.clone();
            match conn {
                Some(conn) => self.inner.retire(&conn, Reason::Renewed),
                None => self.inner.start_connect(slot),
            }
        }
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        (0..self.inner.slots.len()).filter(|&i| self.inner.lock(i).conn.is_some()).count()
    }

    /// Connections replaced since the start, by reason.
    pub fn replaced(&self) -> Replaced {
        *self.inner.replaced.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A live connection: this round's slot, else any other live one (a slot being
    /// re-made does not stall requests another connection can carry), else the one a
    /// background connect makes for this slot (the caller bounds the wait).
    async fn lease(&self) -> Result<Arc<Conn>, StoreError> {
        let inner = &self.inner;
        let slots = inner.slots.len();
        let first = inner.next_slot.fetch_add(1, Ordering::Relaxed) % slots;
        for i in 0..slots {
            // The slot's guard ends with this statement: `start_connect` locks another slot,
            // and two callers holding one slot each while locking the other's would wait
            // for each other for good.
            let conn = inner.lock((first + i) % slots).conn.clone();
            if let Some(conn) = conn {
                if i > 0 {
                    inner.start_connect(first);
                }
                return Ok(conn);
            }
        }
        loop {
            let settled = inner.slots[first].settled.notified();
            tokio::pin!(settled);
            // Registered before looking again, so a connect finishing in between still wakes us.
            settled.as_mut().enable();
            let conn = inner.lock(first).conn.clone();
            if let Some(conn) = conn {
                return Ok(conn);
            }
            inner.start_connect(first);
            settled.await;
            let state = inner.lock(first);
            match (&state.conn, &state.last_error) {
                (Some(conn), _) => return Ok(conn.clone()),
                // A connect that landed after a renew was dropped and the slot connects
                // again: wait for that one (the caller bounds the wait).
                (None, _) if state.connecting => continue,
                (None, Some(e)) => return Err(e.clone()),
                (None, None) => return Err(StoreError::Unavailable("no redis connection".into())),
            }
        }
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        // Connections close once their in-flight calls end; nothing reconnects them.
        for slot in 0..self.inner.slots.len() {
            let conn = self.inner.lock(slot).conn.take();
            if let Some(conn) = conn {
                conn.retired.store(true, Ordering::Relaxed);
            }
        }
    }
}

/// One pipeline on `conn`, owned by a spawned task: the reply clock, the in-flight count
/// and the decision to replace the connection never depend on the request still waiting.
///
/// The commands count as outstanding until their reply arrives or the connection is taken
/// out: a command that outlived its request is still on the wire, and a stalled server
/// would run it when it resumes. Every `reply_timeout` without a reply the task looks at
/// the connection: replies arriving for others mean it is slow, not silent (keep waiting);
/// none for `reply_timeout` means silent (take it out).
async fn call(
    inner: Arc<Inner>,
    conn: Arc<Conn>,
    pipe: Pipeline,
    count: usize,
    weight: usize,
) -> Result<Vec<Value>, StoreError> {
    let _inflight = Inflight(conn.clone(), weight);
    let mut mc = conn.mc.clone();
    let reply_timeout = inner.settings.reply_timeout;
    let reply = mc.send_packed_commands(&pipe, 0, count);
    tokio::pin!(reply);
    loop {
        match tokio::time::timeout(reply_timeout, &mut reply).await {
            Ok(Ok(values)) => {
                conn.last_reply_us.store(inner.now_us(), Ordering::Relaxed);
                if values.iter().any(is_readonly) {
                    inner.retire(&conn, Reason::ReadOnly);
                }
                return Ok(values);
            }
            Ok(Err(e)) => {
                inner.retire(&conn, Reason::Failed(e.to_string()));
                return Err(classify(&e));
            }
            Err(_) if conn.retired.load(Ordering::Acquire) => return Err(StoreError::Timeout),
            Err(_) => {
                let silent = inner.now_us().saturating_sub(conn.last_reply_us.load(Ordering::Relaxed));
                if silent >= reply_timeout.as_micros() as u64 {
                    inner.retire(&conn, Reason::NoReply);
                    return Err(StoreError::Timeout);
                }
            }
        }
    }
}

/// Commands of one call counted as outstanding until the call's task ends.
struct Inflight(Arc<Conn>, usize);

impl Drop for Inflight {
    fn drop(&mut self) {
        self.0.inflight.fetch_sub(self.1, Ordering::AcqRel);
    }
}

impl Inner {
    /// The slot's state; at most one slot lock per thread at a time (see `held`).
    fn lock(&self, slot: usize) -> SlotGuard<'_, SlotState> {
        lock_slot(&self.slots[slot].state)
    }

    fn now_us(&self) -> u64 {
        self.epoch.elapsed().as_micros() as u64
    }

    /// Spawns a connect for `slot` unless it has a connection or one is being made.
    fn start_connect(self: &Arc<Self>, slot: usize) {
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
    fn retire(self: &Arc<Self>, conn: &Conn, reason: Reason) {
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

async fn connect(inner: Arc<Inner>, slot: usize) {
    let generation = inner.generation.load(Ordering::Acquire);
    let id = inner.next_id.fetch_add(1, Ordering::Relaxed);
    let watch = DisconnectWatch { inner: Arc::downgrade(&inner), slot, id };
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

/// Receives a connection's push messages: `Disconnection` retires it at once, before a
/// request writes to a connection its server has already closed.
struct DisconnectWatch {
    inner: Weak<Inner>,
    slot: usize,
    id: u64,
}

impl AsyncPushSender for DisconnectWatch {
    fn send(&self, info: PushInfo) -> Result<(), PushSendError> {
        if info.kind == PushKind::Disconnection {
            if let Some(inner) = self.inner.upgrade() {
                // Called from the connection's reader: retiring only takes short locks and
                // spawns the reconnect.
                inner.closed(self.slot, self.id);
            }
        }
        Ok(())
    }
}

/// `TCP_NODELAY`, keepalive probes after 10 s idle (every 5 s), and `TCP_USER_TIMEOUT` of
/// 10 s (unacknowledged data aborts the connection): the kernel's own dead-peer detection,
/// under the lifecycle's `reply_timeout`.
pub fn socket_settings() -> TcpSettings {
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(Duration::from_secs(10))
        .with_interval(Duration::from_secs(5))
        .with_retries(3);
    let settings = TcpSettings::default().set_nodelay(true).set_keepalive(keepalive);
    #[cfg(target_os = "linux")]
    let settings = settings.set_user_timeout(Duration::from_secs(10));
    settings
}
