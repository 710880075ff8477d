//! The admin token (`--admin-token-file`): checking a presented token, and the id audit
//! lines name it by.
//!
//! The id is not a hash of the token alone (a bare SHA-256 prefix could be checked offline
//! against candidate tokens and is the same on every instance): it is the first 8 hex digits
//! of HMAC-SHA256 of the token under a 256-bit key drawn at random when the token is loaded,
//! once per process, and never shown. So one process names one token by one id for its
//! whole life (its audit lines correlate with each other and with the `admin token loaded`
//! line at startup), while another instance, or the same one after a restart, names it by
//! another id; and nothing in a log tells whether two instances share a token, or lets
//! anyone test a guess at it.

use sha2::{Digest, Sha256};

use crate::store::key::hmac_sha256;

/// The bearer token guarded admin endpoints require; never printed.
pub struct AdminToken {
    /// SHA-256 of the token: what `matches` compares.
    digest: sha2::digest::Output<Sha256>,
    /// The audit id (see the module doc).
    id: String,
}

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminToken(***)")
    }
}

impl AdminToken {
    /// The token in `text` (surrounding whitespace, such as a file's final newline, is not
    /// part of it), with an id keyed by a fresh random key. `None` if empty.
    pub fn new(text: &str) -> Option<AdminToken> {
        AdminToken::with_id_key(text, &rand::random::<[u8; 32]>())
    }

    /// `new` with a given id key (tests).
    fn with_id_key(text: &str, key: &[u8; 32]) -> Option<AdminToken> {
        let token = text.trim();
        if token.is_empty() {
            return None;
        }
        let mac = hmac_sha256(key, token.as_bytes());
        let id = mac.iter().take(4).map(|b| format!("{b:02x}")).collect();
        Some(AdminToken { digest: Sha256::digest(token.as_bytes()), id })
    }

    /// Whether `presented` is the token. Both sides are hashed first and the digests
    /// compared without early exit, so the time taken says nothing about the token.
    pub fn matches(&self, presented: &str) -> bool {
        let digest = Sha256::digest(presented.as_bytes());
        self.digest.iter().zip(digest.iter()).fold(0u8, |diff, (a, b)| diff | (a ^ b)) == 0
    }

    /// A short id for audit logs: 8 hex digits, stable for this process only (see the
    /// module doc). Names which token was used (after a rotation) without revealing it.
    pub fn id(&self) -> &str {
        &self.id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn the_token_matches_itself_only_and_never_prints() {
        let token = AdminToken::new("  s3cret-token\n").expect("a token");
        assert!(token.matches("s3cret-token"));
        assert!(!token.matches("s3cret-token2") && !token.matches("") && !token.matches("S3cret-token"));
        assert!(AdminToken::new(" \n").is_none(), "an empty file is no token");
        assert!(!format!("{token:?}").contains("s3cret"));
    }

    #[test]
    fn the_id_is_keyed_per_process_not_a_hash_of_the_token() {
        let token = AdminToken::new("s3cret-token").expect("a token");
        let id = token.id().to_string();
        assert_eq!(id.len(), 8);
        assert!(id.chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(token.id(), id, "stable for the token's life");
        assert_ne!(id, hex(&Sha256::digest(b"s3cret-token"))[..8], "not sha256(token)");
        // Under a given key it is that key's HMAC; another key (another process) names the
        // same token otherwise.
        let key = [7u8; 32];
        let keyed = AdminToken::with_id_key("s3cret-token", &key).expect("a token");
        assert_eq!(keyed.id(), &hex(&hmac_sha256(&key, b"s3cret-token"))[..8]);
        let other = AdminToken::with_id_key("s3cret-token", &[8u8; 32]).expect("a token");
        assert_ne!(keyed.id(), other.id());
    }

    /// RFC 4231 test cases 2 (a short key) and 6 (a key longer than the block).
    #[test]
    fn hmac_sha256_matches_rfc_4231() {
        assert_eq!(
            hex(&hmac_sha256(b"Jefe", b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert_eq!(
            hex(&hmac_sha256(&[0xaa; 131], b"Test Using Larger Than Block-Size Key - Hash Key First")),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }
}
