//! Fault injection against a real redis-server, hostile input, and Redis AUTH/TLS.

#[allow(dead_code)]
#[path = "../support/redis.rs"]
mod redis_support;
#[allow(dead_code)]
#[path = "../api/support.rs"]
mod support;

mod backlog;
mod faults;
mod hostile;
mod security;
