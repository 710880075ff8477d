//! envoyproxy/ratelimit compatibility: every config shape the peer's own tests and
//! examples load, answered as the peer answers (`shapes`), and the deliberate
//! differences, each pinned (`differences`). On the memory store: what is compared is
//! config loading and matching, which every store shares.

#[allow(dead_code)]
#[path = "../api/support.rs"]
mod api_support;
#[allow(dead_code)]
#[path = "../support/redis.rs"]
mod redis_support;

mod differences;
mod shapes;
mod support;
