//! Sending one pipeline on a connection, in a spawned task that owns the connection's
//! in-flight count and reply clock, and retires the connection when it fails, answers
//! `READONLY` or stays silent for `reply_timeout`. A request waits for the task's answer
//! under its own deadline (`Link::send_weighted`); whether it still waits changes nothing.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use redis::{Pipeline, Value};

use super::super::super::charge::StoreError;
use super::super::reply::{classify, is_readonly};
use super::slot::{Conn, Inner, Reason};

/// One pipeline on `conn`, owned by a spawned task: the reply clock, the in-flight count
/// and the decision to replace the connection never depend on the request still waiting.
///
/// The commands count as outstanding until their reply arrives or the connection is taken
/// out: a command that outlived its request is still on the wire, and a stalled server
/// would run it when it resumes. Every `reply_timeout` without a reply the task looks at
/// the connection: replies arriving for others mean it is slow, not silent (keep waiting);
/// none for `reply_timeout` means silent (take it out).
pub(super) async fn call(
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
