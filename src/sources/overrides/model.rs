//! The incident switch's overrides as the admin endpoints and Redis know them: the scope,
//! the mode, the expiry, and the bounds on how long one lasts.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// `ttl_seconds` when the `POST` names none: an hour.
pub const DEFAULT_TTL_SECONDS: u64 = 3_600;
/// Longest `ttl_seconds`: a day. An incident switch left on must end by itself.
pub const MAX_TTL_SECONDS: u64 = 86_400;
/// The scope that covers every domain.
pub const ALL: &str = "all";

/// What an override does to the answers of its scope. `Open` is the stronger: where an
/// `all` and a domain's override meet, the stronger one applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Decide, count and charge as usual; answer OK.
    Shadow,
    /// Skip the store; answer OK.
    Open,
}

impl Mode {
    pub const ALL: [Mode; 2] = [Mode::Shadow, Mode::Open];

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Shadow => "shadow",
            Mode::Open => "open",
        }
    }
}

/// One override, as kept in Redis and answered by the admin endpoints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Override {
    /// `all`, or a domain.
    pub scope: String,
    pub mode: Mode,
    /// Unix time in milliseconds at which it ends by itself.
    pub expires_at_ms: u64,
    /// Unix time in milliseconds at which it was set.
    pub set_at_ms: u64,
    /// Who set it: the admin client's address and token id, as the audit line says.
    pub set_by: String,
}

impl Override {
    pub(super) fn covers(&self, domain: &str) -> bool {
        self.scope == ALL || self.scope == domain
    }

    pub fn is_active(&self, now_ms: u64) -> bool {
        now_ms < self.expires_at_ms
    }
}

/// Unix time now, in milliseconds.
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}
