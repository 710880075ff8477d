//! The reset log's calls (see `approx::resets`): a reset appended by the instance that
//! made it, and the log read once per wake by every instance.

use redis::Value;
use tokio::time::Instant;

use crate::store::charge::StoreError;
use crate::store::redis::cluster::key_slot;

use super::super::resets::{RESET_LOG_LEN, RESET_LOG_TTL_MS};
use super::super::table::Approx;
use super::via::Via;

/// Entries read per wake at most (the rest on the next wake).
const READ_PER_WAKE: usize = 1_000;

impl Approx {
    /// Appends `keys` to the reset log (after their `DEL`), by `deadline`: one `XADD` per key
    /// (the log capped at about [`RESET_LOG_LEN`] entries), and the log's expiry.
    pub async fn log_resets(
        &self,
        via: Via<'_>,
        keys: &[String],
        deadline: Instant,
    ) -> Result<(), StoreError> {
        let log = self.reset_log_key();
        let replies = via
            .send(keys.len() + 1, key_slot(log.as_bytes()), deadline, |pipe, i, _| match keys.get(i) {
                Some(key) => {
                    let mut xadd = redis::cmd("XADD");
                    xadd.arg(log).arg("MAXLEN").arg("~").arg(RESET_LOG_LEN).arg("*").arg("k").arg(key);
                    pipe.add_command(xadd);
                }
                None => {
                    pipe.add_command(redis::cmd("PEXPIRE").arg(log).arg(RESET_LOG_TTL_MS).clone());
                }
            })
            .await;
        for reply in replies {
            match reply? {
                Value::ServerError(e) => {
                    return Err(StoreError::Server(format!("{}: {}", e.code(), e.details().unwrap_or(""))));
                }
                _ => continue,
            }
        }
        Ok(())
    }

    /// Reads the reset log from where this instance left off, by `deadline`, and marks the
    /// buckets reset since (see `approx::resets`). A failed read is tried again next wake.
    pub(super) async fn follow_resets(&self, via: Via<'_>, deadline: Instant) {
        let log = self.reset_log_key();
        let from = self.reset_log_from();
        let mut replies = via
            .send(1, key_slot(log.as_bytes()), deadline, |pipe, _, _| {
                let mut xread = redis::cmd("XREAD");
                xread.arg("COUNT").arg(READ_PER_WAKE).arg("STREAMS").arg(log).arg(&from);
                pipe.add_command(xread);
            })
            .await;
        let entries = match replies.pop() {
            Some(Ok(value)) => entries(value),
            Some(Err(error)) => {
                tracing::debug!(%error, "reading the reset log failed: again next wake");
                return;
            }
            None => return,
        };
        let mut last = None;
        for (id, key) in entries {
            // Ids are `<ms>-<seq>` of Redis's clock when the entry was added, after the
            // `DEL`: every answer from the next millisecond on follows the reset.
            let Some(ms) = id.split('-').next().and_then(|ms| ms.parse::<u64>().ok()) else { continue };
            if let Some(key) = key {
                self.reset_seen(&key, ms.saturating_add(1).saturating_mul(1_000));
            }
            last = Some(id);
        }
        if let Some(id) = last {
            self.reset_log_read(id);
        }
    }
}

/// The entries of an `XREAD` reply of one stream (RESP2 or RESP3): each id, and its key.
fn entries(value: Value) -> Vec<(String, Option<String>)> {
    let stream = match value {
        Value::Array(mut streams) if !streams.is_empty() => match streams.swap_remove(0) {
            Value::Array(mut pair) if pair.len() == 2 => pair.pop(),
            _ => None,
        },
        Value::Map(mut streams) if !streams.is_empty() => Some(streams.swap_remove(0).1),
        _ => None,
    };
    let Some(Value::Array(items)) = stream else { return Vec::new() };
    items
        .into_iter()
        .filter_map(|item| {
            let Value::Array(mut parts) = item else { return None };
            let fields = parts.pop()?;
            let id = text(parts.pop()?)?;
            let key = match fields {
                Value::Array(mut fields) if fields.len() == 2 => fields.pop().and_then(text),
                Value::Map(mut fields) if fields.len() == 1 => text(fields.swap_remove(0).1),
                _ => None,
            };
            Some((id, key))
        })
        .collect()
}

fn text(value: Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes).ok(),
        Value::SimpleString(s) => Some(s),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn an_xread_reply_reads_in_resp2_and_resp3() {
        let entry =
            |id: &str, key: &str| Value::Array(vec![bulk(id), Value::Array(vec![bulk("k"), bulk(key)])]);
        let items = Value::Array(vec![entry("5-0", "a"), entry("7-1", "b")]);
        let want =
            vec![("5-0".to_string(), Some("a".to_string())), ("7-1".to_string(), Some("b".to_string()))];
        let resp2 = Value::Array(vec![Value::Array(vec![bulk("log"), items.clone()])]);
        assert_eq!(entries(resp2), want);
        assert_eq!(entries(Value::Map(vec![(bulk("log"), items)])), want);
        assert!(entries(Value::Nil).is_empty());
    }
}
