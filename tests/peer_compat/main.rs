//! envoyproxy/ratelimit compatibility: every config shape the peer's own tests and
//! examples load, answered as the peer answers (`shapes`), and the deliberate
//! differences, each pinned (`differences`). On the memory store: what is compared is
//! config loading and matching, which every store shares.

mod differences;
mod shapes;
mod support;
