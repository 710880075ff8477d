//! The `rule` label of rules that put request values into metrics, composed as
//! envoyproxy/ratelimit composes its stat keys, and each part made safe to show.
//!
//! A rule *carries values* when at least one level of its path takes the request's value
//! into the label: every wildcard or default level of a `detailed_metric` rule, and every
//! wildcard or default level that sets `value_to_metric` itself (an intermediate level
//! counts for the rules below it). Its label is `<rule>:<part>.<part>…`, one part per
//! level, where a part is `<key>_<request value>` on levels that carry the value (`<key>`
//! alone for an empty value under `value_to_metric`, `<key>_` under `detailed_metric`, as
//! the peer writes them),
//! `<key>_<pattern>` on `share_threshold` levels (the value never shows there: all
//! matching values share one bucket), `<key>_<value>` on exact-value levels, the pattern
//! on other wildcard levels, and `<key>` alone on other default levels. Rules that carry
//! no value keep the plain `<rule>` label.
//!
//! Every part is escaped and truncated by [`escape_into`], which takes bytes so that values
//! that are not UTF-8 show too. Pure: no metrics, no I/O.

use crate::config::{Level, Rule};
use crate::telemetry::escape::{push_byte, push_char};

/// Default of `--max-label-value-bytes`.
pub const DEFAULT_MAX_LABEL_VALUE_BYTES: usize = 64;

/// Smallest `--max-label-value-bytes`: room for one escape and the truncation mark.
pub const MIN_LABEL_VALUE_BYTES: usize = 16;

/// Appended to a part cut at the byte limit (counted within it).
const CUT: &str = "…";

/// Where one level's part of the label comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part<'r> {
    /// `<key>` alone.
    Key,
    /// `<key>_<text>`, the text from the config (an exact value or a pattern).
    Config(&'r str),
    /// `<key>_<the request's value>`.
    Request,
}

fn part<'r>(rule: &Rule, level: &'r Level) -> Part<'r> {
    if let Some(pattern) = &level.shared_pattern {
        return Part::Config(pattern);
    }
    match &level.value {
        Some(exact) if !exact.contains('*') => Part::Config(exact),
        _ if rule.detailed_metric || level.value_to_metric => Part::Request,
        Some(pattern) => Part::Config(pattern),
        None => Part::Key,
    }
}

/// Whether the rule's label carries request values (and so is composed per request and
/// counted against `--max-detailed-series`).
pub fn carries_values(rule: &Rule) -> bool {
    rule.levels.iter().any(|level| part(rule, level) == Part::Request)
}

/// The label of one decision of a rule that carries values: `values` are the request's
/// entry values in order (one per level); each part is escaped and at most `max` bytes.
pub fn compose<'v>(rule: &Rule, values: impl IntoIterator<Item = &'v [u8]>, max: usize) -> String {
    compose_as(rule, rule.label(), values, max)
}

/// [`compose`] under another base label: `base` is one limit's label (`Rule::limit_label`)
/// for a rule with several limits.
pub fn compose_as<'v>(
    rule: &Rule,
    base: &str,
    values: impl IntoIterator<Item = &'v [u8]>,
    max: usize,
) -> String {
    let mut label = String::with_capacity(base.len() + 2 * max);
    label.push_str(base);
    label.push(':');
    for (i, (level, value)) in rule.levels.iter().zip(values).enumerate() {
        if i > 0 {
            label.push('.');
        }
        escape_into(&mut label, level.key.as_bytes(), max);
        match part(rule, level) {
            Part::Key => {}
            Part::Config(text) => {
                label.push('_');
                escape_into(&mut label, text.as_bytes(), max);
            }
            // The peer writes `key` alone for an empty value under `value_to_metric`
            // (its TestValueToMetric_WithEmptyValue) but `key_` under `detailed_metric`.
            Part::Request if value.is_empty() && !rule.detailed_metric => {}
            Part::Request => {
                label.push('_');
                escape_into(&mut label, value, max);
            }
        }
    }
    label
}

/// The label decisions of the rule labelled `rule` count under once its domain has
/// `--max-detailed-series` value label sets.
pub fn other(rule: &str) -> String {
    format!("{rule}:_other_")
}

/// Appends `bytes` to `out`, escaped and at most `max` bytes long.
///
/// The text form of `crate::telemetry::escape`: printable characters stay; `\` becomes `\\`; ASCII
/// control bytes and bytes that are not part of valid UTF-8 become `\xNN`; control,
/// format (invisible, bidirectional), private-use and non-characters become `\u{NNNN}`.
/// So a label never holds a byte that changes how it displays, and distinct inputs that
/// fit stay distinct. Past `max` the output is cut between two escapes or characters and
/// ends with `…` (`max` counts it).
pub fn escape_into(out: &mut String, bytes: &[u8], max: usize) {
    let start = out.len();
    // The longest prefix that leaves room for the cut mark.
    let mut fits_with_mark = start;
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            push_char(out, c);
            if !within(out, start, max, &mut fits_with_mark) {
                return cut(out, fits_with_mark);
            }
        }
        for &byte in chunk.invalid() {
            push_byte(out, byte);
            if !within(out, start, max, &mut fits_with_mark) {
                return cut(out, fits_with_mark);
            }
        }
    }
}

/// Whether `out` (from `start`) is still within `max`; tracks where a cut would go.
fn within(out: &str, start: usize, max: usize, fits_with_mark: &mut usize) -> bool {
    let len = out.len() - start;
    if len + CUT.len() <= max {
        *fits_with_mark = out.len();
    }
    len <= max
}

fn cut(out: &mut String, at: usize) {
    out.truncate(at);
    out.push_str(CUT);
}

#[cfg(test)]
mod tests;
