//! Who holds each RLQS bucket, and what each holder may still spend: the claims ledger the
//! RLQS service shares out a limit by (`crate::service::rlqs`).
//!
//! A holder is one Envoy (the name its stream gives) holding one bucket. Its entry keeps
//! its latest demand, whether it is a newcomer (only the immediate report so far), whether
//! its stream is open (`live`), and its claim: the `max_tokens` last granted to it, which
//! the Envoy may spend without asking until its assignment expires. An entry is kept
//! `keep_ms` from its last write — the assignment's TTL and a margin — so a claim outlives
//! a stream that ended while the Envoy may still spend it, and a holder that reconnects to
//! another instance under the same name finds its entry.
//!
//! On every Redis topology the ledger is one hash per bucket, changed by one script
//! (`lua/rlqs_holders.lua`) per write: the fleet's instances see one ledger. On the memory
//! store (and for `failure_mode: local` while Redis fails) it is this process's
//! [`LocalLedger`], with the same semantics.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use tokio::time::Instant;

use super::charge::StoreError;
use super::Store;

/// The script of [`Store::hold`].
const HOLDERS: &str = include_str!("lua/rlqs_holders.lua");

/// At most this many buckets in a [`LocalLedger`]; past it, a write first drops every
/// expired entry, then (still full) refuses new buckets.
pub const LOCAL_MAX_BUCKETS: usize = 1_000_000;

/// One write of a holder's entry.
#[derive(Debug, Clone, Copy)]
pub struct Hold<'a> {
    /// The holder's name.
    pub holder: &'a str,
    /// `allowed + denied` of its latest report.
    pub demand: u64,
    /// Only its immediate report so far.
    pub newcomer: bool,
    /// Its stream is open.
    pub live: bool,
    /// Its new claim; `None` keeps the recorded one (0 when none).
    pub claim: Option<u64>,
    /// How long the entry is kept from now, in ms.
    pub keep_ms: u64,
    /// The Tollgate instance holding its stream (no whitespace): where a push for it goes.
    pub instance: &'a str,
}

/// A holder as the ledger has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holding {
    pub holder: String,
    pub demand: u64,
    pub newcomer: bool,
    pub live: bool,
    pub claim: u64,
    /// The instance holding its stream.
    pub instance: String,
}

/// What a write answers: the writer's claim as recorded, and every other holder.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Holders {
    pub claim: u64,
    pub others: Vec<Holding>,
}

impl Store {
    /// Writes `hold` into the ledger `key` by `deadline` and answers who else holds it
    /// (the memory store: `local`).
    pub async fn hold(
        &self,
        local: &LocalLedger,
        key: &str,
        hold: &Hold<'_>,
        deadline: Instant,
    ) -> Result<Holders, StoreError> {
        let claim = hold.claim.map_or(-1, |c| i64::try_from(c).unwrap_or(i64::MAX));
        let command = ::redis::cmd("EVAL")
            .arg(HOLDERS)
            .arg(1)
            .arg(key)
            .arg(hold.holder)
            .arg(hold.demand)
            .arg(u8::from(hold.newcomer))
            .arg(u8::from(hold.live))
            .arg(claim)
            .arg(hold.keep_ms)
            .arg(hold.instance)
            .to_owned();
        match self.command(key, command, deadline).await {
            None => Ok(local.hold(key, hold, super::memory::now_us() / 1000)),
            Some(reply) => holders(&reply?),
        }
    }
}

/// The script of [`Store::holders`]: every entry not expired, as `{0, field, demand,
/// newcomer, live, claim, instance, ...}` (the reply of the holders script with no writer). Writes
/// nothing.
const READ: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {0}
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local d, n, l, c, e, inst = string.match(all[i + 1], '^(%d+) (%d) (%d) (%d+) (%d+) ?(%S*)$')
  if e and tonumber(e) > now then
    out[#out + 1] = all[i]
    out[#out + 1] = tonumber(d)
    out[#out + 1] = tonumber(n)
    out[#out + 1] = tonumber(l)
    out[#out + 1] = tonumber(c)
    out[#out + 1] = inst
  end
end
return out
"#;

impl Store {
    /// Every holder of the ledger `key` now, by `deadline`; nothing written (the memory
    /// store: `local`).
    pub async fn holders(
        &self,
        local: &LocalLedger,
        key: &str,
        deadline: Instant,
    ) -> Result<Vec<Holding>, StoreError> {
        let command = ::redis::cmd("EVAL").arg(READ).arg(1).arg(key).to_owned();
        match self.command(key, command, deadline).await {
            None => Ok(local.read(key, super::memory::now_us() / 1000)),
            Some(reply) => Ok(holders(&reply?)?.others),
        }
    }
}

/// Appends a message to an instance's inbox, keeps it 10 s and at most 10,000 messages.
const NOTIFY: &str = r#"
redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[1], 10000)
if redis.call('LLEN', KEYS[1]) > 10000 then
  redis.call('LTRIM', KEYS[1], -10000, -1)
end
return 1
"#;

/// Takes up to 1,000 messages from an inbox, oldest first.
const TAKE: &str = r#"
local taken = redis.call('LRANGE', KEYS[1], 0, 999)
if #taken > 0 then
  redis.call('LTRIM', KEYS[1], #taken, -1)
end
return taken
"#;

impl Store {
    /// Leaves `message` in the inbox `key` of another instance by `deadline` (nothing on
    /// the memory store: there is no other instance).
    pub async fn notify(&self, key: &str, message: &str, deadline: Instant) -> Result<(), StoreError> {
        let command = ::redis::cmd("EVAL").arg(NOTIFY).arg(1).arg(key).arg(message).to_owned();
        match self.command(key, command, deadline).await {
            None => Ok(()),
            Some(reply) => reply.map(|_| ()),
        }
    }

    /// Takes the messages waiting in this instance's inbox `key` by `deadline`.
    pub async fn take_inbox(&self, key: &str, deadline: Instant) -> Result<Vec<String>, StoreError> {
        let command = ::redis::cmd("EVAL").arg(TAKE).arg(1).arg(key).to_owned();
        match self.command(key, command, deadline).await {
            None => Ok(Vec::new()),
            Some(reply) => match reply? {
                ::redis::Value::Array(items) => Ok(items
                    .into_iter()
                    .filter_map(|v| match v {
                        ::redis::Value::BulkString(b) => String::from_utf8(b).ok(),
                        _ => None,
                    })
                    .collect()),
                other => Err(StoreError::Server(format!("unexpected reply of the inbox: {other:?}"))),
            },
        }
    }
}

/// The script's `{claim, field, demand, newcomer, live, claim, instance, ...}`.
fn holders(value: &::redis::Value) -> Result<Holders, StoreError> {
    use ::redis::Value;
    let bad = || StoreError::Server(format!("unexpected reply of the RLQS holders script: {value:?}"));
    let Value::Array(items) = value else { return Err(bad()) };
    let int = |v: &Value| match v {
        Value::Int(i) => u64::try_from(*i).ok(),
        _ => None,
    };
    let (first, rest) = items.split_first().ok_or_else(bad)?;
    let claim = int(first).ok_or_else(bad)?;
    let mut others = Vec::with_capacity(rest.len() / 6);
    for chunk in rest.chunks(6) {
        let [Value::BulkString(name), demand, newcomer, live, claim, Value::BulkString(instance)] = chunk
        else {
            return Err(bad());
        };
        others.push(Holding {
            holder: String::from_utf8_lossy(name).into_owned(),
            demand: int(demand).ok_or_else(bad)?,
            newcomer: int(newcomer).ok_or_else(bad)? == 1,
            live: int(live).ok_or_else(bad)? == 1,
            claim: int(claim).ok_or_else(bad)?,
            instance: String::from_utf8_lossy(instance).into_owned(),
        });
    }
    Ok(Holders { claim, others })
}

/// One bucket's holders in a [`LocalLedger`]: each with its entry's expiry (ms).
type Entries = HashMap<String, (Holding, u64)>;

/// The ledger in this process's memory: the memory store's, and the one a `failure_mode:
/// local` domain shares out by while Redis fails.
#[derive(Debug, Default)]
pub struct LocalLedger {
    buckets: Mutex<HashMap<String, Entries>>,
}

impl LocalLedger {
    /// [`Store::hold`] in memory at `now_ms`.
    pub fn hold(&self, key: &str, hold: &Hold<'_>, now_ms: u64) -> Holders {
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        if buckets.len() >= LOCAL_MAX_BUCKETS && !buckets.contains_key(key) {
            buckets.retain(|_, holders| {
                holders.retain(|_, (_, expires)| *expires > now_ms);
                !holders.is_empty()
            });
            if buckets.len() >= LOCAL_MAX_BUCKETS {
                return Holders::default();
            }
        }
        let holders = buckets.entry(key.to_string()).or_default();
        holders.retain(|_, (_, expires)| *expires > now_ms);
        let recorded = holders.get(hold.holder).map_or(0, |(h, _)| h.claim);
        let claim = hold.claim.unwrap_or(recorded);
        let others = holders
            .iter()
            .filter(|(name, _)| *name != hold.holder)
            .map(|(_, (holding, _))| holding.clone())
            .collect();
        let holding = Holding {
            holder: hold.holder.to_string(),
            demand: hold.demand,
            newcomer: hold.newcomer,
            live: hold.live,
            claim,
            instance: hold.instance.to_string(),
        };
        holders.insert(hold.holder.to_string(), (holding, now_ms.saturating_add(hold.keep_ms)));
        Holders { claim, others }
    }

    /// Every holder of `key` not expired at `now_ms`.
    pub fn read(&self, key: &str, now_ms: u64) -> Vec<Holding> {
        let buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(holders) = buckets.get(key) else { return Vec::new() };
        holders
            .values()
            .filter(|(_, expires)| *expires > now_ms)
            .map(|(holding, _)| holding.clone())
            .collect()
    }

    /// Buckets held now (expired entries included until their bucket is written again).
    pub fn len(&self) -> usize {
        self.buckets.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// Whether no bucket is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold(holder: &str, demand: u64, claim: Option<u64>) -> Hold<'_> {
        Hold { holder, demand, newcomer: false, live: true, claim, keep_ms: 1000, instance: "i1" }
    }

    #[test]
    fn a_holder_sees_the_others_and_keeps_its_claim_until_it_expires() {
        let ledger = LocalLedger::default();
        assert_eq!(ledger.hold("b", &hold("a", 5, Some(7)), 0), Holders { claim: 7, others: vec![] });
        let seen = ledger.hold("b", &hold("c", 1, None), 10);
        assert_eq!(seen.claim, 0);
        assert_eq!(seen.others.len(), 1);
        assert_eq!((seen.others[0].holder.as_str(), seen.others[0].claim), ("a", 7));
        // `a` writes again without a claim: its 7 stays.
        assert_eq!(ledger.hold("b", &hold("a", 9, None), 20).claim, 7);
        // Past `a`'s keep, `c` holds alone.
        let alone = ledger.hold("b", &hold("c", 1, None), 1021);
        assert!(alone.others.is_empty(), "{alone:?}");
    }

    #[test]
    fn the_script_reply_reads_into_holders() {
        use ::redis::Value;
        let reply = Value::Array(vec![
            Value::Int(4),
            Value::BulkString(b"envoy-b".to_vec()),
            Value::Int(12),
            Value::Int(0),
            Value::Int(1),
            Value::Int(6),
            Value::BulkString(b"i2".to_vec()),
        ]);
        let read = holders(&reply).expect("reads");
        assert_eq!(read.claim, 4);
        assert_eq!(
            read.others,
            [Holding {
                holder: "envoy-b".into(),
                demand: 12,
                newcomer: false,
                live: true,
                claim: 6,
                instance: "i2".into()
            }]
        );
        assert!(holders(&Value::Array(vec![Value::Int(1), Value::Int(2)])).is_err());
        assert!(holders(&Value::Nil).is_err());
    }
}
