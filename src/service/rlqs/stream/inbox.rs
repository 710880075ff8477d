//! Pushes between streams: a holder whose share fell below its claim looks again at once.
//! On this instance a push goes straight to its stream's line; a holder whose stream is on
//! another instance is reached through that instance's inbox in the store (`Store::notify`),
//! which every instance on a shared store reads every [`POLL`] (`poll`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::super::quota::{Quota, Shrink, STORE_DEADLINE};
use super::super::wire::BucketKey;

/// How often an instance reads its inbox: the delay of a push to another instance.
pub const POLL: Duration = Duration::from_millis(250);

/// What a stream is asked to look at again.
#[derive(Debug, Clone)]
pub enum Push {
    /// A bucket, by its id (this instance).
    Bucket(BucketKey),
    /// Every bucket of the stream whose ledger key is this (another instance).
    Ledger(String),
}

/// Each live holder's lines, by holder name (an Envoy with two filter domains opens two
/// streams under one name).
pub type Lines = Arc<Mutex<HashMap<String, Vec<mpsc::Sender<Push>>>>>;

/// Adds `line` to `holder`'s lines.
pub fn register(lines: &Lines, holder: &str, line: &mpsc::Sender<Push>) {
    let mut lines = lines.lock().unwrap_or_else(PoisonError::into_inner);
    lines.entry(holder.to_string()).or_default().push(line.clone());
}

/// Removes `line` from `holder`'s lines (the holder with it when it was the last).
pub fn unregister(lines: &Lines, holder: &str, line: &mpsc::Sender<Push>) {
    let mut lines = lines.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(held) = lines.get_mut(holder) {
        held.retain(|l| !l.same_channel(line));
        if held.is_empty() {
            lines.remove(holder);
        }
    }
}

/// Sends `push` to every stream of `holder` on this instance; a full line is a stream
/// behind (its next report answers anyway).
pub fn deliver(lines: &Lines, holder: &str, push: &Push) {
    let lines = lines.lock().unwrap_or_else(PoisonError::into_inner);
    for line in lines.get(holder).into_iter().flatten() {
        let _ = line.try_send(push.clone());
    }
}

/// Pushes to every holder of `shrink`: on this instance through `lines`, elsewhere through
/// the other instance's inbox (one store call each, by the report's deadline).
pub async fn shrink(quota: &Quota, lines: &Lines, shrink: &[Shrink], key: &BucketKey, ledger: Option<&str>) {
    for one in shrink {
        if one.instance == quota.instance() {
            deliver(lines, &one.holder, &Push::Bucket(key.clone()));
        } else if let Some(ledger) = ledger {
            let message = format!("{}\t{ledger}", one.holder);
            let deadline = Instant::now() + STORE_DEADLINE;
            if let Err(error) =
                quota.store().notify(&quota.inbox_key(&one.instance), &message, deadline).await
            {
                tracing::debug!(error = %error, "RLQS: a push to another instance failed; its next report shrinks it");
            }
        }
    }
}

/// Reads this instance's inbox every [`POLL`] while it holds a stream and delivers each
/// push, until `shutdown`. Only on a shared store (one instance alone has no inbox).
pub async fn poll(quota: Arc<Quota>, lines: Lines, mut shutdown: watch::Receiver<bool>) {
    let key = quota.inbox_key(quota.instance());
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => return,
            _ = tick.tick() => {}
        }
        // No stream here, no push to deliver: an instance that serves no RLQS costs the
        // store nothing (an idle fleet makes no call at all).
        if lines.lock().unwrap_or_else(PoisonError::into_inner).is_empty() {
            continue;
        }
        let messages = match quota.store().take_inbox(&key, Instant::now() + STORE_DEADLINE).await {
            Ok(messages) => messages,
            Err(error) => {
                tracing::debug!(error = %error, "RLQS: reading this instance's inbox failed");
                continue;
            }
        };
        for message in messages {
            if let Some((holder, ledger)) = message.split_once('\t') {
                deliver(&lines, holder, &Push::Ledger(ledger.to_string()));
            }
        }
    }
}
