//! The hot keys section: the busiest buckets of each domain, their values hashed (or left
//! out without the admin token).
//!
//! Part of `page`. Pure.

use std::fmt::Write as _;

use super::format::escape_html;
use crate::operate::status::{DomainStatus, Status};
use crate::telemetry::hotkeys::HotKey;

/// The busiest buckets of each domain that has any: rule, entries (values hashed as
/// `#` and the hash's first 12 digits, or keyed-hashed as `~` and 12 digits on an open
/// admin port; the full digits in the cell's title), rate, share. Left out, saying so,
/// when the request did not carry the admin token.
pub(super) fn hot_keys_section(out: &mut String, status: &Status) {
    if status.hot_keys_hidden {
        out.push_str(
            "<section id=\"hot-keys\"><h2>Hot keys</h2><p class=\"muted\">Hidden: the busiest \
             buckets need the admin token (<code>Authorization: Bearer &lt;token&gt;</code> on \
             this page, <code>/v1/status</code> or <code>/v1/hotkeys</code>).</p></section>\n",
        );
        return;
    }
    let busy: Vec<&DomainStatus> = status.domains.iter().filter(|d| !d.hot_keys.is_empty()).collect();
    if busy.is_empty() {
        return;
    }
    out.push_str("<section id=\"hot-keys\"><h2>Hot keys</h2>");
    if status.hot_keys_keyed {
        out.push_str(
            "<p class=\"muted\">Values keyed-hashed with a key of this process (<code>~</code>): \
             the admin port is reachable beyond loopback without an admin token.</p>",
        );
    }
    out.push_str(
        "<table><thead><tr><th>Domain</th><th>Rule</th>\
         <th>Descriptor</th><th>Per second</th><th>Share</th><th>Leased</th></tr></thead><tbody>\n",
    );
    for domain in busy {
        for key in &domain.hot_keys {
            hot_key_row(out, &domain.name, key);
        }
    }
    out.push_str("</tbody></table></section>\n");
}

/// The RLQS section: streams open, buckets held, and the busiest buckets with their Envoy
/// and assignment (values hashed as in the hot keys). Left out when no stream ever opened.
pub(super) fn rlqs_section(out: &mut String, status: &Status) {
    let rlqs = &status.rlqs;
    if rlqs.streams == 0 && rlqs.buckets_held == 0 {
        return;
    }
    let _ = write!(
        out,
        "<section id=\"rlqs\"><h2>Quota in Envoy (RLQS)</h2><p>{} streams, {} buckets held.</p>",
        rlqs.streams, rlqs.buckets_held
    );
    if !rlqs.buckets.is_empty() {
        out.push_str(
            "<table><thead><tr><th>Domain</th><th>Bucket</th><th>Envoy</th><th>Demand</th>\
             <th>Assigned</th></tr></thead><tbody>\n",
        );
        for bucket in &rlqs.buckets {
            let assigned = match (bucket.max_tokens, bucket.tokens_per_fill, bucket.fill_interval_seconds) {
                (Some(max), Some(fill), Some(every)) => format!("{max} tokens, {fill} per {every} s"),
                _ => bucket.assignment.to_string(),
            };
            let _ = writeln!(
                out,
                "<tr class=\"rlqs-bucket\"><td><code>{}</code></td><td><code>{}</code></td><td><code>{}</code></td>\
                 <td class=\"n\">{}</td><td>{}</td></tr>",
                escape_html(&bucket.domain),
                entries(&bucket.bucket).join(", "),
                escape_html(&bucket.envoy),
                bucket.demand,
                escape_html(&assigned)
            );
        }
        out.push_str("</tbody></table>");
    }
    out.push_str("</section>\n");
}

fn entries(descriptor: &[crate::telemetry::hotkeys::HotEntry]) -> Vec<String> {
    descriptor
        .iter()
        .map(|entry| match (&entry.value, &entry.value_hash, &entry.value_hmac) {
            (Some(value), _, _) => format!("{}={}", escape_html(&entry.key), escape_html(value)),
            (None, Some(hash), _) => format!(
                "{}=<span title=\"{hash}\">#{}</span>",
                escape_html(&entry.key),
                hash.get(..12).unwrap_or(hash)
            ),
            (None, None, Some(keyed)) => format!(
                "{}=<span title=\"{keyed}\">~{}</span>",
                escape_html(&entry.key),
                keyed.get(..12).unwrap_or(keyed)
            ),
            (None, None, None) => escape_html(&entry.key),
        })
        .collect()
}

fn hot_key_row(out: &mut String, domain: &str, key: &HotKey) {
    let entries = entries(&key.descriptor);
    let _ = writeln!(
        out,
        "<tr class=\"hot-key\"><td><code>{}</code></td><td><code>{}</code></td><td><code>{}</code></td>\
         <td class=\"n\">{:.2}</td><td class=\"n\">{:.1} %</td><td>{}</td></tr>",
        escape_html(domain),
        escape_html(&key.rule),
        entries.join(", "),
        key.rate_per_second,
        key.share * 100.0,
        if key.leased { "yes" } else { "no" }
    );
}
