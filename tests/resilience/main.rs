//! Fault injection against a real redis-server (directly or through a TCP front that
//! moves, silences or slows connections), hostile input, and Redis AUTH/TLS.

#[allow(dead_code)]
#[path = "../support/front.rs"]
mod front_support;
#[allow(dead_code)]
#[path = "../support/redis.rs"]
mod redis_support;
#[allow(dead_code)]
#[path = "../api/support.rs"]
mod support;

mod backlog;
mod eviction;
mod faults;
mod front;
mod hostile;
mod raw_bytes;
mod reconnect;
mod renew;
mod security;
mod series;
