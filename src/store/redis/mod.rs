//! The Redis stores: one connection lifecycle (`link`) under three topologies that differ
//! only in how they find their servers.
//!
//! - `single`: one server (or a proxy / cloud primary endpoint) at a fixed address;
//! - `sentinel`: the master the sentinels name, asked at every connect and watched;
//! - `cluster`: every master of a Redis Cluster, routed by slot with redirects followed
//!   here (a command redirected with `MOVED`/`ASK`/`TRYAGAIN` did not run, so re-sending it
//!   is exact; nothing else is ever re-sent).
//!
//! Below the link and the scripts, `reply` says what a reply or a client error means.
//!
//! What they share: `settings` (what a store is built from), `connect` (URLs, connecting,
//! redaction), `server` (one server's connections, scripts and health: the single node's
//! and the Sentinel master's), `health`. From the bottom up: `reply`, `link`, `tls` (the CA
//! and client certificate, read again for every connection), `connect`, `settings`, `health`, `slots`, `batch` (requests batched into one call), `server`,
//! then the topologies.

mod batch;
pub mod cluster;
pub mod connect;
mod health;
pub mod link;
pub mod plain;
pub mod prepare;
pub(crate) mod reply;
pub mod scripts;
pub mod sentinel;
mod server;
pub mod settings;
pub mod single;
pub mod slots;
pub mod tls;

pub use self::connect::{
    address, client, connect_to, connection_info, host_port, node_url, redact_url, with_address,
};
pub use self::health::Health;
pub use self::plain::Windows;
pub use self::settings::{
    RedisSettings, DEFAULT_BATCH, DEFAULT_COALESCE, DEFAULT_MAX_INFLIGHT, MIN_REPLY_TIMEOUT,
};
pub use self::single::RedisStore;
pub use self::tls::{CertInfo, ClientCert, Tls};
