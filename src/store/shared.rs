//! State an operator shares with the whole fleet through the store: one command on one
//! key, beside the charges (`crate::sources::overrides` keeps the incident switch this way). No
//! guard is consulted nor taught (the breaker, the over-limit cache): this is an operator's
//! call, not traffic. The memory store shares nothing: its state is this process's.
//!
//! A shared record hash holds one JSON record per field, each stamped with a `version` by
//! the server's clock. [`Store::read_records`] reads every field (`HGETALL`, RESP2 or
//! RESP3); [`Store::change_record`] changes one field only over the version its instance
//! last read (`lua/shared_change.lua`), so that a change that waited out a partition never
//! undoes a newer one. What the records mean is the caller's.

use tokio::time::Instant;

use super::charge::StoreError;
use super::remote::Reset;
use super::Store;

/// The script of [`Store::change_record`] (its comment says what it takes and returns).
const SHARED_CHANGE: &str = include_str!("lua/shared_change.lua");

/// One change of one field of a shared record hash.
#[derive(Debug, Clone, Copy)]
pub struct RecordChange<'a> {
    /// The field (the record's scope).
    pub field: &'a str,
    /// Names the change (random): the replay of a write that landed is found by it.
    pub id: &'a str,
    /// The field's version the instance last read (0: none).
    pub base: u64,
    /// The record, a JSON object without `version` (the script puts it first).
    pub record: &'a str,
    /// How long a record is kept after its version, in ms.
    pub keep_ms: u64,
    /// How long a record without a version (an older release's) is kept after it was set, in ms.
    pub longest_ms: u64,
}

/// How Redis took a [`RecordChange`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// The hash holds it, at this version of its field.
    Applied(u64),
    /// The field is at this other version: someone changed it since the base was read.
    Refused(u64),
}

impl Store {
    /// Whether other instances see what `command` writes (every Redis topology).
    pub fn is_shared(&self) -> bool {
        !matches!(self, Store::Memory(_))
    }

    /// Sends `command`, whose only key is `key`, by `deadline`. `None` on the memory store.
    pub async fn command(
        &self,
        key: &str,
        command: ::redis::Cmd,
        deadline: Instant,
    ) -> Option<Result<::redis::Value, StoreError>> {
        Some(match self {
            Store::Memory(_) => return None,
            Store::Redis(redis) => redis.client().command(key, command, deadline).await,
            Store::Sentinel(sentinel) => sentinel.client().command(key, command, deadline).await,
            Store::Cluster(cluster) => cluster.client().command(key, command, deadline).await,
        })
    }

    /// Every (field, record) of the shared hash `key`, read by `deadline`; text fields only.
    /// `None` on the memory store.
    pub async fn read_records(
        &self,
        key: &str,
        deadline: Instant,
    ) -> Option<Result<Vec<(String, String)>, StoreError>> {
        let command = ::redis::cmd("HGETALL").arg(key).to_owned();
        Some(self.command(key, command, deadline).await?.map(fields))
    }

    /// Sends `change` to the shared hash `key` by `deadline`. `None` on the memory store.
    pub async fn change_record(
        &self,
        key: &str,
        change: &RecordChange<'_>,
        deadline: Instant,
    ) -> Option<Result<Taken, StoreError>> {
        let command = ::redis::cmd("EVAL")
            .arg(SHARED_CHANGE)
            .arg(1)
            .arg(key)
            .arg(change.field)
            .arg(change.id)
            .arg(change.base)
            .arg(change.record)
            .arg(change.keep_ms)
            .arg(change.longest_ms)
            .to_owned();
        Some(self.command(key, command, deadline).await?.and_then(|value| taken(&value)))
    }
}

/// The script's `{taken, version}`.
fn taken(value: &::redis::Value) -> Result<Taken, StoreError> {
    use ::redis::Value;
    if let Value::Array(items) = value {
        if let [Value::Int(taken), Value::Int(version)] = items.as_slice() {
            let version = u64::try_from(*version).unwrap_or(0);
            return Ok(if *taken == 1 { Taken::Applied(version) } else { Taken::Refused(version) });
        }
    }
    Err(StoreError::Server(format!("unexpected reply of the shared change script: {value:?}")))
}

/// The (field, value) pairs of an `HGETALL` reply, RESP2 or RESP3; text fields only.
fn fields(value: ::redis::Value) -> Vec<(String, String)> {
    use ::redis::Value;
    let text = |v: Value| match v {
        Value::BulkString(bytes) => String::from_utf8(bytes).ok(),
        Value::SimpleString(s) => Some(s),
        _ => None,
    };
    match value {
        Value::Map(pairs) => pairs.into_iter().filter_map(|(k, v)| Some((text(k)?, text(v)?))).collect(),
        Value::Array(items) => {
            let mut items = items.into_iter();
            let mut pairs = Vec::new();
            while let (Some(k), Some(v)) = (items.next(), items.next()) {
                if let (Some(k), Some(v)) = (text(k), text(v)) {
                    pairs.push((k, v));
                }
            }
            pairs
        }
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_hgetall_reply_reads_in_resp2_and_resp3() {
        use ::redis::Value;
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let resp2 = Value::Array(vec![bulk("all"), bulk("{}"), bulk("api"), bulk("x")]);
        assert_eq!(fields(resp2), [("all".into(), "{}".into()), ("api".into(), "x".into())]);
        let resp3 = Value::Map(vec![(bulk("all"), bulk("{}"))]);
        assert_eq!(fields(resp3), [("all".to_string(), "{}".to_string())]);
        assert!(fields(Value::Nil).is_empty());
    }

    #[test]
    fn the_script_answers_taken_or_refused_with_the_version() {
        use ::redis::Value;
        assert_eq!(taken(&Value::Array(vec![Value::Int(1), Value::Int(7)])).ok(), Some(Taken::Applied(7)));
        assert_eq!(taken(&Value::Array(vec![Value::Int(0), Value::Int(9)])).ok(), Some(Taken::Refused(9)));
        assert!(taken(&Value::Nil).is_err());
    }
}
