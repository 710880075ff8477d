//! Unit tests of `plain`: splitting batches and reading replies.
