//! The key of a bucket as a shard's table holds it: inline when it is short (almost every
//! key: `tg:g2s:5:bench4:user8:k123456` is 29 bytes), boxed otherwise.
//!
//! Inline keys spare the store an allocation per new bucket and a free per evicted or
//! swept one, and a lookup the cache miss of following a pointer to compare the key: with
//! a million buckets, every charge of a new or rarely used key pays for each. Compared
//! and hashed as the `str` it holds, so a table of these keys is probed with a `&str`.

use std::hash::{Hash, Hasher};

use indexmap::Equivalent;

/// Longest key held inline: with its length and tag, 48 bytes, so that a table entry
/// (hash, key, bucket state) is 128 bytes, two cache lines.
const INLINE: usize = 46;

/// A bucket key owned by the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum StoredKey {
    Inline { len: u8, bytes: [u8; INLINE] },
    Boxed(Box<str>),
}

impl StoredKey {
    /// The bytes of the key (UTF-8: it was made from a `&str`).
    pub(super) fn as_bytes(&self) -> &[u8] {
        match self {
            StoredKey::Inline { len, bytes } => &bytes[..usize::from(*len)],
            StoredKey::Boxed(key) => key.as_bytes(),
        }
    }
}

impl From<&str> for StoredKey {
    fn from(key: &str) -> StoredKey {
        if key.len() > INLINE {
            return StoredKey::Boxed(key.into());
        }
        let mut bytes = [0; INLINE];
        bytes[..key.len()].copy_from_slice(key.as_bytes());
        // `key.len() <= INLINE < 256`.
        StoredKey::Inline { len: key.len() as u8, bytes }
    }
}

/// The hash of the `str` it holds (`str`'s own `Hash`: its bytes, then `0xff`), so that
/// the table finds a key by the hash of a `&str`.
impl Hash for StoredKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write(self.as_bytes());
        state.write_u8(0xff);
    }
}

/// A `&str` finds the key that holds the same bytes.
impl Equivalent<StoredKey> for str {
    fn equivalent(&self, key: &StoredKey) -> bool {
        self.as_bytes() == key.as_bytes()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::hash_map::RandomState;
    use std::hash::BuildHasher;

    use super::*;

    #[test]
    fn short_keys_are_inline_long_ones_boxed_and_both_hash_as_their_str() {
        let hasher = RandomState::new();
        for len in [0, 1, 29, INLINE, INLINE + 1, 300] {
            let text = "k".repeat(len);
            let key = StoredKey::from(text.as_str());
            assert_eq!(matches!(key, StoredKey::Inline { .. }), len <= INLINE, "{len}");
            assert_eq!(key.as_bytes(), text.as_bytes());
            assert_eq!(hasher.hash_one(&key), hasher.hash_one(text.as_str()), "{len}");
            assert!(text.as_str().equivalent(&key));
            assert!(!"other".equivalent(&key));
        }
    }
}
