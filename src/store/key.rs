//! Bucket keys: one short string per bucket identity, the same in memory and in Redis.
//!
//! Identity (docs/architecture.md#bucket-identity) = domain + the entry keys and values along the matched path (the
//! wildcard pattern instead of the value on `share_threshold` levels) + algorithm + unit.
//! `requests_per_unit` and `burst` are not part of it, so raising a limit applies to live
//! buckets. Every part is length-prefixed, so no value can make two identities share a key;
//! parts that are long, hold braces (Redis Cluster hash tags) or control characters, or are
//! not UTF-8 (Envoy forwards header bytes ≥ 0x80 as they come), are replaced by a 128-bit
//! SHA-256 prefix of their bytes under a distinct marker. Hashing the raw bytes keeps every
//! distinct value its own bucket (no lossy decoding merges `\xff` with `\xfe`), and keys
//! stay UTF-8 text whatever clients send.
//!
//! Format: `<prefix>tg:<tag><unit>:<part>...` where a part is `<len>:<bytes>` (literal),
//! `#<32 hex>` (hashed) or `*<part>` (shared wildcard pattern), and the tag names the
//! algorithm and the version of its stored state (see [`GCRA_TAG`]). Keys live in Redis
//! across releases: changing this format orphans every live bucket.
//!
//! Limits added later extend the format without changing the keys above (a config that
//! uses none of them keeps its buckets):
//! - a window of N units (`unit_multiplier: N`, N > 1) writes N after the unit character:
//!   `tg:g2s30:…` (a window of 30 seconds), which no one-unit key can be;
//! - an entry of `rate_limits` has a key per limit that includes its name, with the
//!   descriptor's identity in a Redis Cluster hash tag so that the limits of one descriptor
//!   share a slot (one script call charges them all): `tg:m:{<domain><parts>}<tag><unit>[N]:
//!   <name part>` (parts never hold braces: those are hashed);
//! - a calendar limit (`calendar`) has the tag [`CALENDAR_TAG`] and ends in `@` and its
//!   zone as a part: `tg:cM:3:api4:user5:alice@13:Europe/Berlin` (no part starts with `@`);
//! - `hash_tag: domain` puts `{<domain part>}` right after `tg:` in every key of the
//!   domain, before the key it would otherwise have: one slot for the whole domain.

use std::borrow::Cow;
use std::fmt::Write as _;

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use crate::algorithm::Algorithm;
use crate::config::{Domain, HashTag, Limit, Rule, Unit};

/// Key tag of GCRA buckets: `g` and the version of the state format, bumped whenever the
/// state stored under the key changes meaning, so that two releases never read each
/// other's state during a rolling upgrade (the upgrade starts those buckets afresh).
/// Version 2: the TAT with its sub-µs remainder (`"<tat>:<rem>"`); version 1 (`g`) was the
/// TAT alone.
pub const GCRA_TAG: &str = "g2";
/// Key tag of request `limit` overrides charged with GCRA (`--default-algorithm gcra`),
/// versioned with [`GCRA_TAG`].
pub const OVERRIDE_TAG: &str = "o2";
/// Key tag of request `limit` overrides charged with a sliding window.
pub const OVERRIDE_SLIDING_TAG: &str = "os";
/// Key tag of request `limit` overrides charged with a fixed window.
pub const OVERRIDE_FIXED_TAG: &str = "of";
/// Key tag of sliding-window buckets (state format 1).
pub const SLIDING_TAG: &str = "s";
/// Key tag of fixed-window buckets (state format 1).
pub const FIXED_TAG: &str = "f";
/// Key tag of fixed windows over calendar periods (`rate_limit.calendar`; state format 1:
/// the window hash with the period's end in `p`). Its own tag, so that a limit that turns
/// `calendar` on or off starts a fresh count rather than read the other's state; the zone
/// follows the key's parts (`@<zone part>`), so that a change of zone starts afresh too.
pub const CALENDAR_TAG: &str = "c";

/// Parts longer than this are hashed: keys stay short whatever clients send.
pub const MAX_LITERAL_PART: usize = 48;

/// Shortest `--key-secret-file` secret, in bytes (after trimming surrounding whitespace).
pub const MIN_SECRET_BYTES: usize = 32;

/// `--key-secret-file`: request values enter bucket keys keyed-hashed, never in the clear.
///
/// A value becomes `~` and the first 16 bytes of HMAC-SHA256(secret, value) in hex (33
/// characters: a literal key part). The same value gives the same text on every instance
/// with the same secret, so buckets are shared as before; without the secret nobody can
/// tell which value a key holds, nor test a guess (an IPv4 address, a user id) against it.
/// Turning it on or rotating the secret starts every bucket afresh. Never printed.
#[derive(Clone)]
pub struct KeySecret {
    /// HMAC-SHA256 keyed with the secret: its inner and outer hashes hold the secret's
    /// padded blocks already absorbed, so each value costs two SHA-256 blocks, not four.
    mac: Hmac<Sha256>,
}

impl std::fmt::Debug for KeySecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeySecret(***)")
    }
}

impl KeySecret {
    /// The secret in a file's `contents` (surrounding whitespace, such as a final newline,
    /// is not part of it); at least [`MIN_SECRET_BYTES`] bytes.
    pub fn new(contents: &[u8]) -> Result<KeySecret, String> {
        let secret = contents.trim_ascii();
        if secret.len() < MIN_SECRET_BYTES {
            return Err(format!(
                "the key secret has {} bytes: at least {MIN_SECRET_BYTES} are needed (e.g. `openssl rand \
                 -hex 32`, 64 characters)",
                secret.len()
            ));
        }
        // HMAC takes a key of any length (a longer one is hashed first): this cannot fail.
        let mac = Hmac::<Sha256>::new_from_slice(secret).map_err(|e| e.to_string())?;
        Ok(KeySecret { mac })
    }

    /// What enters keys, metrics and the hot-key view in place of `value`.
    pub fn value(&self, value: &[u8]) -> Vec<u8> {
        let mac = self.mac.clone().chain_update(value).finalize().into_bytes();
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut keyed = Vec::with_capacity(33);
        keyed.push(b'~');
        for byte in &mac[..16] {
            keyed.extend_from_slice(&[HEX[usize::from(byte >> 4)], HEX[usize::from(byte & 0xf)]]);
        }
        keyed
    }
}

/// HMAC-SHA256 (RFC 2104) of `message` under `key`.
pub fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    // `new_from_slice` refuses no key length for HMAC; the empty key is the fallback only
    // to keep this path free of `expect`.
    let mac = Hmac::<Sha256>::new_from_slice(key)
        .unwrap_or_else(|_| <Hmac<Sha256> as Mac>::new(&Default::default()));
    mac.chain_update(message).finalize().into_bytes().into()
}

/// The key of the bucket of `limit` (one of `rule`'s limits) for these request entries, in
/// `domain` (its name and `hash_tag`).
pub fn limit_key<K: AsRef<[u8]>, V: AsRef<[u8]>>(
    prefix: &str,
    domain: &Domain,
    rule: &Rule,
    limit: &Limit,
    entries: impl Iterator<Item = (K, V)>,
) -> String {
    let prefix = tagged_prefix(prefix, domain);
    let tag = match limit.calendar {
        Some(_) => CALENDAR_TAG,
        None => algo_tag(limit.params.algorithm),
    };
    let Some(name) = &limit.name else {
        let mut key = head(&prefix, tag, limit.unit, &domain.name);
        push_levels(&mut key, rule, entries);
        if limit.multiplier != 1 {
            insert_multiplier(&mut key, prefix.len(), limit.multiplier);
        }
        push_zone(&mut key, limit);
        return key;
    };
    let mut key = String::with_capacity(prefix.len() + 80);
    key.push_str(&prefix);
    key.push_str("tg:m:{");
    push_part(&mut key, domain.name.as_bytes());
    push_levels(&mut key, rule, entries);
    key.push('}');
    key.push_str(tag);
    key.push(limit.unit.key_char());
    if limit.multiplier != 1 {
        let _ = write!(key, "{}", limit.multiplier);
    }
    key.push(':');
    push_part(&mut key, name.as_bytes());
    push_zone(&mut key, limit);
    key
}

/// A calendar limit's zone at the end of its key (see [`CALENDAR_TAG`]).
fn push_zone(key: &mut String, limit: &Limit) {
    if let Some(calendar) = &limit.calendar {
        key.push('@');
        push_part(key, calendar.zone().as_bytes());
    }
}

/// The key of the bucket for a request's own `limit` override in `domain` (see
/// [`override_key`]), with the domain's `hash_tag`.
pub fn domain_override_key<K: AsRef<[u8]>, V: AsRef<[u8]>>(
    prefix: &str,
    domain: &Domain,
    algorithm: Algorithm,
    unit: Unit,
    entries: impl Iterator<Item = (K, V)>,
) -> String {
    override_key(&tagged_prefix(prefix, domain), &domain.name, algorithm, unit, entries)
}

/// `prefix`, and with `hash_tag: domain` the domain's hash tag after it (only then built).
fn tagged_prefix<'p>(prefix: &'p str, domain: &Domain) -> Cow<'p, str> {
    match domain.hash_tag {
        HashTag::Descriptor => Cow::Borrowed(prefix),
        HashTag::Domain => {
            let mut tagged = String::with_capacity(prefix.len() + domain.name.len() + 8);
            tagged.push_str(prefix);
            tagged.push_str("tg:{");
            push_part(&mut tagged, domain.name.as_bytes());
            tagged.push('}');
            Cow::Owned(tagged)
        }
    }
}

/// Writes the window's multiplier after the unit character of a key made by `rule_key`
/// (whose `tg:<tag><unit>` starts at `at`): `tg:g2s:` becomes `tg:g2s30:`.
fn insert_multiplier(key: &mut String, at: usize, multiplier: u64) {
    // "tg:" then the tag then the unit character, then ':' — the first ':' after "tg:".
    let head = at + "tg:".len();
    if let Some(colon) = key[head..].find(':') {
        key.insert_str(head + colon, &multiplier.to_string());
    }
}

/// The key of the bucket `rule` charges for these request entries.
///
/// `entries` are the descriptor's entries as bytes (`&str` or `&[u8]`), the same that
/// matched `rule` (so there is one per `rule.levels`).
pub fn rule_key<K: AsRef<[u8]>, V: AsRef<[u8]>>(
    prefix: &str,
    domain: &str,
    rule: &Rule,
    algorithm: Algorithm,
    unit: Unit,
    entries: impl Iterator<Item = (K, V)>,
) -> String {
    let mut key = head(prefix, algo_tag(algorithm), unit, domain);
    push_levels(&mut key, rule, entries);
    key
}

/// The parts of the matched path: each level's key, and its value or shared pattern.
fn push_levels<K: AsRef<[u8]>, V: AsRef<[u8]>>(
    key: &mut String,
    rule: &Rule,
    entries: impl Iterator<Item = (K, V)>,
) {
    for (level, (_, value)) in rule.levels.iter().zip(entries) {
        push_part(key, level.key.as_bytes());
        match &level.shared_pattern {
            Some(pattern) => {
                key.push('*');
                push_part(key, pattern.as_bytes());
            }
            None => push_part(key, value.as_ref()),
        }
    }
}

/// The key of the bucket for a request's own `limit` override: its own namespace (`o`,
/// then the algorithm: `--default-algorithm` decides it, and a change of the flag must
/// start fresh buckets rather than read another algorithm's state), the override's unit,
/// and every entry of the descriptor.
pub fn override_key<K: AsRef<[u8]>, V: AsRef<[u8]>>(
    prefix: &str,
    domain: &str,
    algorithm: Algorithm,
    unit: Unit,
    entries: impl Iterator<Item = (K, V)>,
) -> String {
    let tag = match algorithm {
        Algorithm::Gcra => OVERRIDE_TAG,
        Algorithm::SlidingWindow => OVERRIDE_SLIDING_TAG,
        Algorithm::FixedWindow => OVERRIDE_FIXED_TAG,
    };
    let mut key = head(prefix, tag, unit, domain);
    for (k, v) in entries {
        push_part(&mut key, k.as_ref());
        push_part(&mut key, v.as_ref());
    }
    key
}

fn head(prefix: &str, tag: &str, unit: Unit, domain: &str) -> String {
    let mut key = String::with_capacity(prefix.len() + 64);
    key.push_str(prefix);
    key.push_str("tg:");
    key.push_str(tag);
    key.push(unit.key_char());
    key.push(':');
    push_part(&mut key, domain.as_bytes());
    key
}

fn algo_tag(algorithm: Algorithm) -> &'static str {
    match algorithm {
        Algorithm::Gcra => GCRA_TAG,
        Algorithm::SlidingWindow => SLIDING_TAG,
        Algorithm::FixedWindow => FIXED_TAG,
    }
}

/// A reservation's id as stored beside its bucket (`store::Reservation::id`): the entry's
/// value (keyed first with `--key-secret-file`, by the caller) treated as a key part — kept
/// as written when short and plain, else its 128-bit SHA-256 prefix — so that its length
/// is bounded and no client value lands raw where a bucket key's would not.
pub fn reservation_id(value: &[u8]) -> String {
    let mut id = String::new();
    push_part(&mut id, value);
    id
}

fn push_part(key: &mut String, part: &[u8]) {
    let literal = (part.len() <= MAX_LITERAL_PART)
        .then(|| std::str::from_utf8(part).ok())
        .flatten()
        .filter(|text| is_plain(text));
    if let Some(text) = literal {
        push_len(key, text.len());
        key.push(':');
        key.push_str(text);
    } else {
        key.push('#');
        push_hex(key, &part_digest(part));
    }
}

/// No brace and no control character: a part that can stay literal. Printable ASCII (the
/// common case) is decided byte by byte; anything else char by char.
fn is_plain(text: &str) -> bool {
    let printable = |b: &u8| (0x20..0x7f).contains(b) && *b != b'{' && *b != b'}';
    text.as_bytes().iter().all(printable) || !text.chars().any(|c| c == '{' || c == '}' || c.is_control())
}

/// `n` in decimal, without the formatting machinery for the lengths a literal part has.
fn push_len(key: &mut String, n: usize) {
    if n >= 100 {
        // Writing to a String cannot fail.
        let _ = write!(key, "{n}");
        return;
    }
    if n >= 10 {
        key.push(char::from(b'0' + (n / 10) as u8));
    }
    key.push(char::from(b'0' + (n % 10) as u8));
}

/// The 128-bit SHA-256 prefix of a part: what a hashed part of a key is made of.
pub(crate) fn part_digest(part: &[u8]) -> [u8; 16] {
    let digest = Sha256::digest(part);
    let mut prefix = [0; 16];
    prefix.copy_from_slice(&digest[..16]);
    prefix
}

/// `digest` as the 32 lowercase hex digits a hashed key part shows after its `#`, so that
/// an operator can match a hash shown elsewhere (the hot-key view) with a key.
pub(crate) fn digest_hex(digest: &[u8; 16]) -> String {
    let mut hex = String::with_capacity(32);
    push_hex(&mut hex, digest);
    hex
}

fn push_hex(out: &mut String, digest: &[u8; 16]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for byte in digest {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0xf)]));
    }
}

/// The key of the count of `bucket`'s window starting at `start` (µs), kept by plain window
/// commands (`redis::plain`): `<bucket>:<start>` in the bucket's Redis Cluster hash tag
/// (`{<bucket>}:<start>` when it has none), so that both are in one slot; as `window_key`
/// in `lua/prelude.lua`. A bucket key with a `}` but no hash tag (only a
/// `--redis-key-prefix` can make one) keeps `<bucket>:<start>`.
pub fn window_key(bucket: &str, start: u64) -> String {
    if has_hash_tag(bucket) || bucket.contains('}') {
        format!("{bucket}:{start}")
    } else {
        format!("{{{bucket}}}:{start}")
    }
}

/// Whether Redis Cluster hashes only part of `key`: a `{` followed, later, by a `}` with
/// something between the first `{` and that `}`.
fn has_hash_tag(key: &str) -> bool {
    key.find('{').is_some_and(|open| key[open + 1..].find('}').is_some_and(|close| close > 0))
}

/// The window keys an operator's reset of the bucket `key` of a fixed or sliding window
/// (not a calendar period) of `unit_us` deletes beside it at `now` (µs): the previous,
/// current and next window's (an instance whose clock is a window off is still found).
pub fn window_keys_around(key: &str, unit_us: u64, now: u64) -> Vec<String> {
    let unit = unit_us.max(1);
    let start = now - now % unit;
    [start.checked_sub(unit), Some(start), start.checked_add(unit)]
        .into_iter()
        .flatten()
        .map(|start| window_key(key, start))
        .collect()
}

#[cfg(test)]
mod tests;
