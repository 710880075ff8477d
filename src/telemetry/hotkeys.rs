//! The hot-key view: the busiest buckets of each domain over the last minute, for
//! `GET /v1/hotkeys`, the status page and `tollgate_hot_key_share{domain,rank}`.
//!
//! Layout: `sketch` (pure: a fixed-size space-saving table per domain over a sliding
//! window), this file (`HotKeys`: one sketch per configured domain, kept across reloads;
//! `SnapshotHotKeys::record`, fed by the request path with every bucket it charged, as a
//! [`ChargedBucket`]; and `view`, which turns a sketch into what the admin port shows).
//! It knows rules, bucket keys and entries, not the request path's plans or messages.
//!
//! A bucket is identified as its store key is (rule + the values that enter the key; the
//! pattern on `share_threshold` levels): the request path hands over the key of each
//! charged descriptor's first limit, and the sketch hashes it. Values are request bytes and can be credentials: the view shows a value
//! only where the config already shows it (an exact value, a `share_threshold` pattern) or
//! where the rule asks for values in metrics (`detailed_metric`, or `value_to_metric` on
//! that level); any other value is shown as `value_hash`, the 128-bit SHA-256 prefix that
//! bucket keys use for hashed parts (`store::key::part_digest`). Which values show follows
//! the serving config. An admin port anyone may reach ([`Values::Keyed`]) shows none of
//! these: every request value as `value_hmac`, keyed with a [`ViewKey`] drawn at random
//! per process, so that no hash shown there can be tested against a guess (an unkeyed
//! SHA-256 of an IPv4 address reverses in seconds). Must not know of HTTP or Prometheus.
//!
//! Cost on the request path, per charged descriptor: one SipHash of the bucket key, a scan
//! of [`sketch::SLOTS`] hashes and two increments; when the bucket is new to the table, a
//! scan for the lightest slot and a copy of the descriptor's entries into that slot's
//! reused buffers. Per request: one small vector of hashes and at most one lock of each
//! of the [`sketch::SHARDS`] shards (not one per descriptor).

pub mod sketch;

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex, PoisonError};

use serde::Serialize;

use crate::config::{Domain, Rule, Snapshot};
use crate::store::key::{digest_hex, hmac_sha256, part_digest};
use crate::store::Store;
use crate::telemetry::escape::escape;

use self::sketch::{Identity, Sketch, StoredEntry, MAX_PART_BYTES};

/// `top` of `/v1/hotkeys` when absent.
pub const DEFAULT_TOP: usize = 20;
/// Largest `top` answered (a larger one is cut to it).
pub const MAX_TOP: usize = 100;
/// Entries kept per bucket (requests have at most `--max-entries`; this bounds memory
/// whatever that flag says).
pub const MAX_ENTRIES: usize = 32;
/// The `rule` shown for a request's own `limit` override (its metric label too).
pub const OVERRIDE_RULE: &str = "request_override";

/// Whether this instance serves the bucket `key` from a lease (`store::lease`).
pub fn is_leased(store: &Store, key: &str) -> bool {
    store.is_leased(key)
}

/// One sketch per domain, kept across reloads by domain name (held by `Metrics`).
#[derive(Debug, Default)]
pub struct HotKeys {
    sketches: Mutex<HashMap<String, Arc<Sketch>>>,
    /// Keyed per process: clients cannot choose keys that share a slot.
    hasher: RandomState,
}

impl HotKeys {
    /// The sketches of a snapshot about to serve: a domain that served before keeps its
    /// sketch; sketches of domains that are gone are dropped. `now` is the second of
    /// `History::now`, the clock every call here uses.
    pub fn for_snapshot(&self, snapshot: &Snapshot, now: u64) -> SnapshotHotKeys {
        let mut sketches = self.sketches.lock().unwrap_or_else(PoisonError::into_inner);
        let domains: HashMap<String, Arc<Sketch>> = snapshot
            .domains
            .keys()
            .map(|name| {
                let sketch = sketches.get(name).cloned().unwrap_or_else(|| Arc::new(Sketch::new(now)));
                (name.clone(), sketch)
            })
            .collect();
        *sketches = domains.clone();
        SnapshotHotKeys { domains, hasher: self.hasher.clone() }
    }
}

/// The sketches of one snapshot's domains.
#[derive(Debug, Default)]
pub struct SnapshotHotKeys {
    domains: HashMap<String, Arc<Sketch>>,
    hasher: RandomState,
}

impl SnapshotHotKeys {
    /// The sketch of a configured domain.
    pub fn domain(&self, name: &str) -> Option<&Sketch> {
        self.domains.get(name).map(Arc::as_ref)
    }

    /// Counts each bucket a request charged once, at second `now`.
    pub fn record<'a, E>(
        &self,
        domain: &str,
        now: u64,
        charged: impl IntoIterator<Item = ChargedBucket<'a, E>>,
    ) where
        E: ExactSizeIterator<Item = (&'a [u8], &'a [u8])> + Clone,
    {
        let Some(sketch) = self.domains.get(domain) else { return };
        // Each bucket with the hash of its key (to describe it if it takes a slot).
        let buckets: Vec<_> =
            charged.into_iter().map(|bucket| (self.hasher.hash_one(bucket.key.as_bytes()), bucket)).collect();
        sketch.record_all(now, &buckets, fill);
    }

    /// The share of the window taken by each domain's `n` busiest buckets (see
    /// `Sketch::shares`), for `tollgate_hot_key_share`.
    pub fn shares(&self, now: u64, n: usize) -> Vec<(String, Vec<f64>)> {
        self.domains.iter().map(|(name, sketch)| (name.clone(), sketch.shares(now, n))).collect()
    }
}

/// One bucket a request charged, as the request path hands it to the sketch.
#[derive(Debug, Clone)]
pub struct ChargedBucket<'a, E> {
    /// The rule of the limit whose key names the bucket; `None` for a request's own `limit`.
    pub rule: Option<&'a Rule>,
    /// The bucket's store key: that of the descriptor's first limit.
    pub key: &'a str,
    /// The descriptor's entries as `(key, value)` bytes, in order.
    pub entries: E,
}

/// Describes a bucket that takes a slot, in the slot's own buffers.
fn fill<'a, E>(bucket: &ChargedBucket<'a, E>, identity: &mut Identity)
where
    E: ExactSizeIterator<Item = (&'a [u8], &'a [u8])> + Clone,
{
    let ChargedBucket { rule, key, entries } = bucket;
    match rule {
        Some(rule) => {
            let path = identity.rule_path.get_or_insert_with(String::new);
            path.clear();
            path.push_str(&rule.path);
        }
        None => identity.rule_path = None,
    }
    identity.key.clear();
    identity.key.push_str(key);
    // A rule's bucket holds the entries along its path; an override's, every entry.
    let count = rule.map_or(entries.len(), |r| r.levels.len()).min(MAX_ENTRIES);
    identity.entries.resize_with(count, StoredEntry::default);
    for (stored, (key, value)) in identity.entries.iter_mut().zip(entries.clone()) {
        stored.key.clear();
        stored.key.extend_from_slice(&key[..cut_at(key)]);
        stored.value.clear();
        stored.value.extend_from_slice(&value[..cut_at(value)]);
        stored.digest = (value.len() > MAX_PART_BYTES).then(|| part_digest(value));
    }
}

/// Where to cut `bytes` to keep at most `MAX_PART_BYTES`, backing off a UTF-8 character's
/// continuation bytes so that a cut text does not end in half a character.
fn cut_at(bytes: &[u8]) -> usize {
    if bytes.len() <= MAX_PART_BYTES {
        return bytes.len();
    }
    let mut end = MAX_PART_BYTES;
    while end > MAX_PART_BYTES - 3 && bytes[end] & 0xC0 == 0x80 {
        end -= 1;
    }
    end
}

/// `GET /v1/hotkeys`: a domain's busiest buckets. Field names are the API contract.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct HotKeysView {
    pub domain: String,
    /// Seconds the rates cover: the window (60), or the time since the domain was
    /// configured while shorter.
    pub since_seconds: u64,
    /// Busiest first.
    pub keys: Vec<HotKey>,
}

/// One busy bucket.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct HotKey {
    /// The rule's label (its name, else its config path); `request_override` for a
    /// request's own `limit`.
    pub rule: String,
    /// The entries that identify the bucket, in order.
    pub descriptor: Vec<HotEntry>,
    /// Charged decisions per second over `since_seconds` (a lower bound: exact for a
    /// bucket that stayed in the sketch over the window).
    pub rate_per_second: f64,
    /// Its share of the domain's charged decisions over the same window.
    pub share: f64,
    /// This instance serves the bucket from a lease (`is_leased`).
    pub leased: bool,
}

/// One entry: the key and either the value (escaped) or its hash.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct HotEntry {
    pub key: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// 32 hex digits: SHA-256 of the value's bytes, first 16 bytes (as in bucket keys).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value_hash: Option<String>,
    /// 32 hex digits, instead of `value` and `value_hash` on an open admin port
    /// ([`Values::Keyed`]): the first 16 bytes of HMAC-SHA256 under this process's
    /// [`ViewKey`]. One value shows the same digits within one process, and nothing outside
    /// it can compute them (nor match them with bucket keys).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value_hmac: Option<String>,
}

/// Which request values a view may show.
#[derive(Debug, Clone, Copy)]
pub enum Values<'k> {
    /// Those of rules that show values in metrics (`/v1/hotkeys`, behind the admin token,
    /// or on loopback).
    AsConfigured,
    /// None: every request value as its hash (the status page: no token needed on
    /// loopback without `--admin-token-file`, the token needed with it).
    Hashed,
    /// None, nor an unkeyed hash of one: every request value keyed-hashed with `key` (an
    /// admin port bound beyond loopback without `--admin-token-file`).
    Keyed(&'k ViewKey),
}

/// One `(key, value)` a view names without ever showing the value: its hash
/// (`value_hash`), or under [`Values::Keyed`] its keyed hash (`value_hmac`), computed as
/// for a hot bucket's entry, so the same value shows the same digits in both views.
pub fn hidden_entry(key: &str, value: &[u8], values: Values<'_>) -> HotEntry {
    let (kept, digest) = if value.len() > MAX_PART_BYTES {
        (value[..MAX_PART_BYTES].to_vec(), Some(part_digest(value)))
    } else {
        (value.to_vec(), None)
    };
    let stored = StoredEntry { key: key.as_bytes().to_vec(), value: kept, digest };
    let key = escape(key.as_bytes()).into_owned();
    match values {
        Values::Keyed(view_key) => {
            HotEntry { key, value: None, value_hash: None, value_hmac: Some(view_key.hmac_hex(&stored)) }
        }
        Values::AsConfigured | Values::Hashed => {
            let digest = stored.digest.unwrap_or_else(|| part_digest(&stored.value));
            HotEntry { key, value: None, value_hash: Some(digest_hex(&digest)), value_hmac: None }
        }
    }
}

/// A key drawn at random when the process starts, for [`Values::Keyed`]. Never shown nor
/// logged; another process (or a restart) hashes the same value to other digits.
#[derive(Clone)]
pub struct ViewKey([u8; 32]);

impl ViewKey {
    /// A fresh random key.
    pub fn random() -> ViewKey {
        ViewKey(rand::random())
    }

    /// `value_hmac` of a stored entry: of its value, or of its digest when the value was
    /// longer than the sketch keeps (a distinct first byte keeps the two apart).
    fn hmac_hex(&self, stored: &StoredEntry) -> String {
        let mut message = Vec::with_capacity(1 + stored.value.len());
        match &stored.digest {
            Some(digest) => {
                message.push(1);
                message.extend_from_slice(digest);
            }
            None => {
                message.push(0);
                message.extend_from_slice(&stored.value);
            }
        }
        let mut prefix = [0u8; 16];
        prefix.copy_from_slice(&hmac_sha256(&self.0, &message)[..16]);
        digest_hex(&prefix)
    }
}

impl std::fmt::Debug for ViewKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ViewKey(***)")
    }
}

/// The `top` busiest buckets of `domain` at second `now`; `leased` answers for a bucket
/// key (`is_leased`).
pub fn view(
    domain: &Domain,
    sketch: &Sketch,
    now: u64,
    top: usize,
    values: Values<'_>,
    leased: impl Fn(&str) -> bool,
) -> HotKeysView {
    let reading = sketch.read(now);
    let round = |x: f64, places: i32| {
        let scale = 10f64.powi(places);
        (x * scale).round() / scale
    };
    let keys = reading
        .buckets
        .iter()
        .take(top)
        .map(|bucket| {
            let identity = &bucket.identity;
            let rule = identity
                .rule_path
                .as_deref()
                .map(|path| (path, domain.rules.iter().find(|r| r.path == path)));
            let label = match rule {
                Some((_, Some(rule))) => rule.label().to_string(),
                Some((path, None)) => path.to_string(),
                None => OVERRIDE_RULE.to_string(),
            };
            let rule = rule.and_then(|(_, rule)| rule);
            HotKey {
                rule: label,
                descriptor: identity
                    .entries
                    .iter()
                    .enumerate()
                    .map(|(i, e)| entry(rule, i, e, values))
                    .collect(),
                rate_per_second: round(bucket.count / reading.since_seconds as f64, 3),
                share: if reading.total > 0.0 { round(bucket.count / reading.total, 4) } else { 0.0 },
                leased: leased(&identity.key),
            }
        })
        .collect();
    HotKeysView { domain: domain.name.clone(), since_seconds: reading.since_seconds, keys }
}

/// How entry `index` of a bucket of `rule` shows (see the module doc).
fn entry(rule: Option<&Rule>, index: usize, stored: &StoredEntry, values: Values<'_>) -> HotEntry {
    let key = escape(&stored.key).into_owned();
    let value = rule.and_then(|rule| {
        let level = rule.levels.get(index)?;
        if let Some(pattern) = &level.shared_pattern {
            return Some(escape(pattern.as_bytes()).into_owned());
        }
        if matches!(values, Values::AsConfigured) && (rule.detailed_metric || level.value_to_metric) {
            let mut shown = escape(&stored.value).into_owned();
            if stored.digest.is_some() {
                shown.push('…');
            }
            return Some(shown);
        }
        let exact = level.value.as_deref().filter(|v| !v.contains('*'))?;
        Some(escape(exact.as_bytes()).into_owned())
    });
    match (value, values) {
        (Some(value), _) => HotEntry { key, value: Some(value), value_hash: None, value_hmac: None },
        (None, Values::Keyed(view_key)) => {
            HotEntry { key, value: None, value_hash: None, value_hmac: Some(view_key.hmac_hex(stored)) }
        }
        (None, Values::AsConfigured | Values::Hashed) => {
            let digest = stored.digest.unwrap_or_else(|| part_digest(&stored.value));
            HotEntry { key, value: None, value_hash: Some(digest_hex(&digest)), value_hmac: None }
        }
    }
}
