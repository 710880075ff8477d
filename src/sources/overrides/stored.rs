//! The overrides as Redis keeps them, and the one way an instance changes them.
//!
//! One hash, one field per scope. Each value is a record: an override (its JSON as the
//! admin endpoints know it) or an end (`"ended": true`), with the `id` of the change that
//! wrote it and the scope's `version` (the store's script stamps it from the server's clock). A
//! change carries the version of its scope that its instance last read (its base) and is
//! taken only over that version: a change that waited out a partition is refused once
//! another instance changed the scope, so an ended override stays ended and a newer one
//! stays as it was set. A change whose reply was lost is taken once (its id is found).
//! Records are kept [`KEEP`] after their version, longer than any pending change may wait.
//!
//! Reading caps every override at [`MAX_TTL_SECONDS`] from when it was set and from now,
//! whoever wrote it. An older release ignores the ends (no `mode`) and reads the rest.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::time::Instant;

use super::model::{Override, MAX_TTL_SECONDS};
use crate::store::shared::{RecordChange, Taken};
use crate::store::{Store, StoreError};

/// How long a record outlives its version: the longest TTL (no pending change waits
/// longer, see `Change::lapsed`) and an hour for the servers' clock drift and steps.
pub const KEEP: Duration = Duration::from_secs(MAX_TTL_SECONDS + 3_600);

/// A change of one scope this instance made.
#[derive(Debug, Clone)]
pub(super) struct Change {
    pub scope: String,
    /// `Some`: set it; `None`: end the scope's override.
    pub set: Option<Override>,
    /// Names this change in Redis (random): a replay of a write that landed is found.
    pub id: String,
    /// The scope's version this instance had read when the change was made (0: none).
    pub base: u64,
    /// When it was made, on the monotonic clock.
    pub made: Instant,
}

impl Change {
    pub fn new(scope: &str, set: Option<Override>, base: u64) -> Change {
        Change {
            scope: scope.to_string(),
            set,
            id: format!("{:016x}", rand::random::<u64>()),
            base,
            made: Instant::now(),
        }
    }

    /// `set` or `end`, as logs and metrics name it.
    pub fn kind(&self) -> &'static str {
        if self.set.is_some() {
            "set"
        } else {
            "end"
        }
    }

    /// Whether it is no use sending any more: a set past its TTL (by the wall clock, or by
    /// the monotonic clock since it was made, whichever says so first: a record is kept
    /// [`KEEP`] by the server's clock, so no wall clock decides alone), an end past the
    /// longest TTL (nothing it could end outlives that).
    pub fn lapsed(&self, now_ms: u64) -> bool {
        let waited = self.made.elapsed();
        match &self.set {
            Some(o) => {
                let ttl = Duration::from_millis(o.expires_at_ms.saturating_sub(o.set_at_ms));
                !o.is_active(now_ms) || waited >= ttl
            }
            None => waited >= Duration::from_secs(MAX_TTL_SECONDS),
        }
    }

    /// The record written for it, without `version` (the script puts it first).
    fn record(&self) -> String {
        let record = match &self.set {
            Some(o) => json!({
                "scope": o.scope,
                "mode": o.mode.as_str(),
                "expires_at_ms": o.expires_at_ms,
                "set_at_ms": o.set_at_ms,
                "set_by": o.set_by,
                "id": self.id,
            }),
            None => json!({ "scope": self.scope, "ended": true, "id": self.id }),
        };
        record.to_string()
    }
}

/// Sends `change` to the hash `key` by `deadline`; `None` on the memory store.
pub(super) async fn write(
    store: &Store,
    key: &str,
    change: &Change,
    deadline: Instant,
) -> Option<Result<Taken, StoreError>> {
    let record = change.record();
    let sent = RecordChange {
        field: &change.scope,
        id: &change.id,
        base: change.base,
        record: &record,
        keep_ms: KEEP.as_millis() as u64,
        longest_ms: MAX_TTL_SECONDS * 1000,
    };
    store.change_record(key, &sent, deadline).await
}

/// What one read of the hash says.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Read {
    /// The overrides it holds, capped (`capped`), ended ones included.
    pub overrides: Vec<Override>,
    /// Every scope's version (0 for a record without one).
    pub versions: HashMap<String, u64>,
}

/// Reads the hash's (field, record) pairs; the field names the scope. A value that is not a
/// record is skipped.
pub(super) fn read(records: Vec<(String, String)>, now_ms: u64) -> Read {
    let mut read = Read::default();
    for (scope, text) in records {
        let Ok(record) = serde_json::from_str::<Value>(&text) else { continue };
        read.versions.insert(scope.clone(), record["version"].as_u64().unwrap_or(0));
        if record["ended"] == json!(true) {
            continue;
        }
        if let Ok(mut o) = serde_json::from_value::<Override>(record) {
            o.scope = scope;
            read.overrides.push(capped(o, now_ms));
        }
    }
    read
}

/// `o` ending no later than the longest TTL after it was set, nor after now (a set time in
/// the future is not believed).
pub(super) fn capped(mut o: Override, now_ms: u64) -> Override {
    let longest = MAX_TTL_SECONDS * 1000;
    o.expires_at_ms =
        o.expires_at_ms.min(o.set_at_ms.saturating_add(longest)).min(now_ms.saturating_add(longest));
    o
}
