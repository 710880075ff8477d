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
//!
//! The files, from the bottom up: `settings` (what a link is built from and reports),
//! `held` (the lock order of the slots), `watch` (a connection's disconnects), `slot`
//! (each slot's connection: made, retired, replaced), `call` (one pipeline on one
//! connection), then this file: `Link`, which picks a connection for each call.

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use redis::{Pipeline, Value};
use tokio::time::Instant;

mod call;
mod held;
mod settings;
mod slot;
mod watch;

pub use self::settings::{
    socket_settings, Connect, ConnectFuture, LinkSettings, Replaced, SendError, CONNECT_TIMEOUT,
    SYNC_REPLY_TIMEOUT,
};

use self::call::call;
use self::slot::{Conn, Inner, Reason};
use super::super::charge::StoreError;

/// A few shared connections to one server, made and replaced in the background.
pub struct Link {
    inner: Arc<Inner>,
}

impl fmt::Debug for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Link").field("server", &self.inner.name).finish_non_exhaustive()
    }
}

impl Link {
    /// No connection is made until `warm` or a first call.
    pub fn new(settings: LinkSettings, name: String, connect: Connect) -> Link {
        Link { inner: Arc::new(Inner::new(settings, name, connect)) }
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

    /// As [`send`](Self::send), on the first live connection and without taking a turn of
    /// the round robin: an operator's command (`Reset::command`, every 250 ms for the
    /// overrides) must not change which connection the next requests take.
    pub async fn send_aside(
        &self,
        pipe: Pipeline,
        count: usize,
        deadline: Instant,
    ) -> Result<Vec<Value>, SendError> {
        self.send_on(pipe, count, count, (deadline, deadline), false).await
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
        self.send_on(pipe, count, weight, (deadline, deadline), true).await
    }

    /// As [`send_weighted`](Self::send_weighted), sent by `deadline` (or not at all) and
    /// its replies waited for until `replies_by`: for a caller that must learn whether the
    /// commands ran after its own request gave up (a cluster group's parts, whose applied
    /// consumes are refunded when another part was denied).
    pub async fn send_weighted_until(
        &self,
        pipe: Pipeline,
        count: usize,
        weight: usize,
        deadline: Instant,
        replies_by: Instant,
    ) -> Result<Vec<Value>, SendError> {
        self.send_on(pipe, count, weight, (deadline, replies_by.max(deadline)), true).await
    }

    /// `(deadline, replies_by)`: sent by the first (never after: a command sent late could
    /// charge for a request answered long ago), answered by the second.
    async fn send_on(
        &self,
        pipe: Pipeline,
        count: usize,
        weight: usize,
        (deadline, replies_by): (Instant, Instant),
        turn: bool,
    ) -> Result<Vec<Value>, SendError> {
        let conn = match tokio::time::timeout_at(deadline, self.lease(turn)).await {
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
        let Some(finished) = crate::store::deadline::within(replies_by, &mut call).await else {
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
    /// `turn`: take this round's slot and advance the round robin; else start from slot 0
    /// and leave it as it is.
    async fn lease(&self, turn: bool) -> Result<Arc<Conn>, StoreError> {
        let inner = &self.inner;
        let slots = inner.slots.len();
        let first = if turn { inner.next_slot.fetch_add(1, Ordering::Relaxed) % slots } else { 0 };
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
