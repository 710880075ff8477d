//! What one stream holds, as the status view reads it: its Envoy, its domain and its
//! buckets. The stream's task writes its book, the view reads it; each lock is held
//! briefly, never across an await, and never two at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use super::super::quota::Held;
use super::super::wire::BucketKey;

/// What the holder name of an Envoy named by `x-tollgate-envoy` starts with.
pub const NAMED_PREFIX: &str = "envoy:";

/// What one stream holds: its Envoy, its domain and its buckets.
#[derive(Debug)]
pub struct Book {
    pub holder: String,
    pub domain: Option<String>,
    pub buckets: HashMap<BucketKey, Held>,
}

/// Calls `each(holder, domain, bucket, held)` for every bucket of `books`, one book locked
/// at a time.
pub(super) fn view(books: &[Arc<Mutex<Book>>], mut each: impl FnMut(&str, &str, &BucketKey, &Held)) {
    for book in books {
        let book = book.lock().unwrap_or_else(PoisonError::into_inner);
        let domain = book.domain.as_deref().unwrap_or("");
        for (key, held) in &book.buckets {
            each(&book.holder, domain, key, held);
        }
    }
}
