//! A limit's `response`: the body, `content_type` and headers a denied client gets, each
//! template parsed and everything bounded.
//!
//! Part of `compile` (called by `numbers` for each limit); the header rules are `headers`'.
//! Every problem is pushed, none stops the walk. Pure.

use std::sync::Arc;

use super::super::raw::RawRateLimit;
use super::super::rule::{DenialResponse, Template, MAX_RESPONSE_BODY, MAX_RESPONSE_HEADERS};
use super::headers::{header_name, header_value};
use super::Builder;

impl Builder<'_> {
    /// `response`: `Some(None)` when absent, `None` after an error. Every template parses,
    /// and everything is bounded: the body, the number of headers, each value; header names
    /// are HTTP tokens and none Envoy or HTTP owns.
    pub(super) fn response(&mut self, raw: &RawRateLimit, at: &str) -> Option<Option<Arc<DenialResponse>>> {
        let Some(written) = raw.response.as_ref() else {
            return Some(None);
        };
        let before = self.errors.len();
        let at = format!("{at}.response");
        if written.body.is_none() && written.headers.as_ref().is_none_or(Vec::is_empty) {
            self.error(&at, "an empty response: give a body, headers, or both (or remove response)");
        }
        let body = written.body.as_deref().and_then(|body| {
            if body.len() > MAX_RESPONSE_BODY {
                self.error(
                    format!("{at}.body"),
                    format!("a body of {} bytes: at most {MAX_RESPONSE_BODY}", body.len()),
                );
                return None;
            }
            Template::parse(body).map_err(|why| self.error(format!("{at}.body"), why)).ok()
        });
        if let Some(content_type) = written.content_type.as_deref() {
            if written.body.is_none() {
                self.error(
                    format!("{at}.content_type"),
                    "content_type without a body: it describes the body (give one, or remove it)",
                );
            } else if let Err(why) = header_value(content_type) {
                self.error(format!("{at}.content_type"), why);
            } else if !content_type.contains('/') {
                self.error(
                    format!("{at}.content_type"),
                    format!("{content_type:?} is not a media type (such as application/json)"),
                );
            }
        }
        let written_headers = written.headers.as_deref().unwrap_or_default();
        if written_headers.len() > MAX_RESPONSE_HEADERS {
            self.error(
                format!("{at}.headers"),
                format!("{} headers: at most {MAX_RESPONSE_HEADERS}", written_headers.len()),
            );
        }
        let mut headers = Vec::with_capacity(written_headers.len());
        for (name, value) in written_headers {
            let path = format!("{at}.headers.{name}");
            let lower = name.to_ascii_lowercase();
            if let Err(why) = header_name(&lower) {
                self.error(&path, why);
                continue;
            }
            if let Err(why) = header_value(value) {
                self.error(&path, why);
                continue;
            }
            match Template::parse(value) {
                Ok(template) => headers.push((lower, template)),
                Err(why) => self.error(&path, why),
            }
        }
        (self.errors.len() == before).then(|| {
            let content_type = written.content_type.clone();
            Some(Arc::new(DenialResponse { body, content_type, headers }))
        })
    }
}
