//! The YAML as written: the structs mirroring envoyproxy/ratelimit's format plus Tollgate's
//! optional fields, and a best-effort map from config paths to source lines.
//!
//! This module owns shape only: every field stays optional and loosely typed (units,
//! algorithms as strings) so that `compile` can report *all* semantic problems at once.
//! The structs are built by `yaml::parse` (unknown fields and wrong types rejected with the
//! parser's line, merge keys resolved by `merge_keys`, floats where strings belong refused
//! by `floats`), which sits above this file: it imports none of them. It must not decide
//! what is valid, and does no I/O.

use std::collections::HashMap;

/// One file: one domain, with merge keys resolved. Built by `yaml::parse` only (from the layers
/// in `merge_keys`, whose field-for-field copy makes a field added here without its YAML
/// counterpart a compile error).
#[derive(Debug, Default)]
pub struct RawFile {
    /// Required and non-empty (checked by `compile`).
    pub domain: Option<String>,
    /// `open` (default), `closed` or `local`.
    pub failure_mode: Option<String>,
    /// `per_descriptor` (default) or `all_or_nothing`.
    pub charge: Option<String>,
    /// `descriptor` (default) or `domain`.
    pub hash_tag: Option<String>,
    /// `exact` (default) or `approximate`.
    pub consistency: Option<String>,
    /// `reservations: {key, ttl}`: descriptors whose last entry has `key` name a
    /// reservation.
    pub reservations: Option<RawReservations>,
    /// `None` when absent or null.
    pub descriptors: Option<Vec<RawDescriptor>>,
}

/// A domain's `reservations`, as written.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RawReservations {
    /// The entry key that names a reservation; required, non-empty.
    pub key: Option<String>,
    /// How long a reservation lives unsettled, in `penalty`'s syntax; required.
    pub ttl: Option<String>,
}

/// One node of the descriptor tree.
#[derive(Debug, Default)]
pub struct RawDescriptor {
    /// Required and non-empty.
    pub key: Option<String>,
    /// Exact value, a pattern with `*`, or absent (`""` too) for the default node.
    pub value: Option<String>,
    /// The limit of this node, if any.
    pub rate_limit: Option<RawRateLimit>,
    /// Several named limits of this node (never together with `rate_limit`); each entry
    /// has `rate_limit`'s fields, `name` required and `unlimited` refused (by `compile`).
    pub rate_limits: Option<Vec<RawRateLimit>>,
    /// Nested nodes; `None` when absent or null.
    pub descriptors: Option<Vec<RawDescriptor>>,
    /// Evaluate and count, but always answer OK.
    pub shadow_mode: bool,
    /// Metrics may carry the descriptor values.
    pub detailed_metric: bool,
    /// envoyproxy/ratelimit's quota mode flag, carried to the rule.
    pub quota_mode: bool,
    /// Metrics may carry this level's value.
    pub value_to_metric: bool,
    /// Every value matching this wildcard shares one bucket.
    pub share_threshold: bool,
    /// Hot buckets of this rule may be served from leases (blocks of tokens taken from
    /// Redis in one charge and spent locally; see `store::lease`).
    pub lease: bool,
    /// Free-form; kept for display only.
    pub metadata: Option<serde_yaml::Mapping>,
}

/// A descriptor's `rate_limit` block, or one entry of its `rate_limits`.
#[derive(Debug, Default)]
pub struct RawRateLimit {
    /// second … year, any case.
    pub unit: Option<String>,
    /// The window is this many units; at least 1 (default 1).
    pub unit_multiplier: Option<u64>,
    /// Required unless `unlimited`; 0 blocks everything.
    pub requests_per_unit: Option<u32>,
    /// Always OK, no bucket; excludes `unit`.
    pub unlimited: bool,
    /// Name other rules' `replaces` refer to (required in `rate_limits`).
    pub name: Option<String>,
    /// Rules this one replaces when both match; non-empty when present.
    pub replaces: Option<Vec<RawReplaces>>,
    /// `gcra` (default), `sliding_window` or `fixed_window`.
    pub algorithm: Option<String>,
    /// gcra only, > 0; defaults to `requests_per_unit`.
    pub burst: Option<u64>,
    /// The share of buckets enforced, 0 < r ≤ 1 (default 1); the others are as in shadow mode.
    pub rollout: Option<f64>,
    /// How long a bucket is denied after a consume it denied: `30s`, `10m`, `1h`; at most a
    /// day.
    pub penalty: Option<String>,
    /// The body and headers of the 429 a denial by this limit gets.
    pub response: Option<RawResponse>,
    /// Every consume is recorded, even past the limit (usage reported after the fact).
    pub overdraft: bool,
    /// The windows are calendar periods (a day, ISO week, month or year) in a time zone;
    /// fixed_window only.
    pub calendar: Option<RawCalendar>,
}

/// A limit's `calendar`, as written: `{}` is UTC.
#[derive(Debug, Default)]
pub struct RawCalendar {
    /// An IANA zone name (`Europe/Berlin`); absent: UTC.
    pub time_zone: Option<String>,
}

/// A limit's `response`, as written: every field optional (checked by `compile`).
#[derive(Debug, Default)]
pub struct RawResponse {
    /// A template: `{limit}`, `{window}` and `{reset}` stand for the denying limit's numbers.
    pub body: Option<String>,
    pub content_type: Option<String>,
    /// Header name → value template, in file order.
    pub headers: Option<Vec<(String, String)>>,
}

/// One entry of `rate_limit.replaces`.
#[derive(Debug, Default)]
pub struct RawReplaces {
    /// The `rate_limit.name` of the replaced rule; required, not this rule's own.
    pub name: Option<String>,
}

/// Lines of the config paths in one file (`descriptors[2].rate_limit.unit` → 14), found by
/// a scan of block-style YAML. Best effort: flow collections and other exotic layouts just
/// yield no line, which errors tolerate.
#[derive(Debug, Default)]
pub struct Positions {
    lines: HashMap<String, usize>,
}

enum Segment {
    Key(String),
    Item(usize),
}

struct Frame {
    column: usize,
    segment: Segment,
    /// Sequence items seen under this frame, to number the next one.
    items: usize,
}

impl Positions {
    /// Scans `source`. Never fails.
    pub fn scan(source: &str) -> Positions {
        let mut scan = Scan::default();
        for (n, line) in source.lines().enumerate() {
            scan.line(n + 1, line);
        }
        Positions { lines: scan.lines }
    }

    /// The line of `path`, else of the `<<:` that merged it into its mapping, else of its
    /// nearest ancestor (a missing field points at the mapping it is missing from); `None`
    /// for the file level or when the scan is lost.
    pub fn line_of(&self, path: &str) -> Option<usize> {
        let mut path = path;
        while !path.is_empty() {
            if let Some(line) = self.lines.get(path) {
                return Some(*line);
            }
            let parent = &path[..path.rfind(['.', '[']).unwrap_or(0)];
            if !path[parent.len()..].starts_with('[') {
                let merge = if parent.is_empty() { "<<".to_owned() } else { format!("{parent}.<<") };
                if let Some(line) = self.lines.get(&merge) {
                    return Some(*line);
                }
            }
            path = parent;
        }
        None
    }
}

#[derive(Default)]
struct Scan {
    lines: HashMap<String, usize>,
    stack: Vec<Frame>,
    /// Inside a `|`/`>` block scalar: lines indented deeper than this are its text.
    block_scalar: Option<usize>,
}

impl Scan {
    fn line(&mut self, line_no: usize, line: &str) {
        let mut rest = line.trim_start_matches(' ');
        let mut column = line.len() - rest.len();
        if let Some(parent) = self.block_scalar {
            if rest.is_empty() || column > parent {
                return;
            }
            self.block_scalar = None;
        }
        if rest.is_empty() || rest.starts_with(['#', '%']) || rest.starts_with("---") {
            return;
        }
        while let Some(after) = rest.strip_prefix("- ").or((rest == "-").then_some("")) {
            self.item(line_no, column);
            let content = after.trim_start_matches(' ');
            column += 2 + after.len() - content.len();
            rest = content;
        }
        if let Some((key, value)) = split_key(rest) {
            self.stack.retain(|f| f.column < column);
            self.push(line_no, column, Segment::Key(key.to_owned()));
            if value.starts_with(['|', '>']) {
                self.block_scalar = Some(column);
            }
        }
    }

    fn item(&mut self, line_no: usize, column: usize) {
        // A sequence may sit at its parent key's column (`descriptors:` then `- key: a`
        // at the same indent), so only deeper frames and sibling items end here.
        self.stack
            .retain(|f| f.column < column || (f.column == column && matches!(f.segment, Segment::Key(_))));
        let index = self.stack.last_mut().map_or(0, |parent| {
            parent.items += 1;
            parent.items - 1
        });
        self.push(line_no, column, Segment::Item(index));
    }

    fn push(&mut self, line_no: usize, column: usize, segment: Segment) {
        self.stack.push(Frame { column, segment, items: 0 });
        let mut path = String::new();
        for frame in &self.stack {
            match &frame.segment {
                Segment::Key(key) if path.is_empty() => path.push_str(key),
                Segment::Key(key) => {
                    path.push('.');
                    path.push_str(key);
                }
                Segment::Item(index) => path.push_str(&format!("[{index}]")),
            }
        }
        self.lines.entry(path).or_insert(line_no);
    }
}

/// `key: value` → `("key", "value")` for plain or quoted keys, after an anchor
/// (`&name key: value`); `None` for anything else.
fn split_key(text: &str) -> Option<(&str, &str)> {
    let text = match text.strip_prefix('&') {
        Some(anchored) => anchored.split_once(' ')?.1.trim_start_matches(' '),
        None => text,
    };
    if let Some(quote) = text.chars().next().filter(|c| matches!(c, '"' | '\'')) {
        let close = text[1..].find(quote)? + 1;
        let after = text[close + 1..].trim_start_matches(' ');
        let value = after.strip_prefix(':')?;
        return (value.is_empty() || value.starts_with(' ')).then(|| (&text[1..close], value.trim()));
    }
    if text.starts_with(['{', '[', '?', '&', '*', '!', '|', '>']) {
        return None;
    }
    let mut search = 0;
    while let Some(found) = text[search..].find(':') {
        let colon = search + found;
        let after = &text[colon + 1..];
        if after.is_empty() || after.starts_with(' ') {
            let key = text[..colon].trim_end();
            return (!key.is_empty() && !key.contains(" #")).then(|| (key, after.trim()));
        }
        search = colon + 1;
    }
    None
}
