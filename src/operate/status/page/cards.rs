//! The page's two cards: the config (version, last reload error, where it comes from: files
//! or an xDS stream) and the store (kind, address, health, breaker, latency, approximate
//! mode's buckets and sync).
//!
//! Part of `page`. Pure.

use std::fmt::Write as _;

use super::format::{escape_html, utc};
use crate::operate::status::Status;

pub(super) fn config_card(out: &mut String, status: &Status) {
    let config = &status.config;
    let _ = write!(
        out,
        "<section class=\"card\" id=\"config\"><h2>Config</h2><dl><dt>version</dt><dd><code>{}</code></dd>\
         <dt>loaded</dt><dd>{}</dd><dt>last reload error</dt><dd>",
        escape_html(&config.version),
        utc(config.loaded_at)
    );
    match (&config.last_error, config.last_error_at) {
        (Some(error), at) => {
            let at = at.map(utc).unwrap_or_default();
            let _ = write!(out, "<span class=\"bad\">{at}</span><pre>{}</pre>", escape_html(error));
        }
        (None, _) => out.push_str("none"),
    }
    out.push_str("</dd>");
    source_rows(out, status);
    out.push_str("</dl></section>\n");
}

/// Where the config comes from: files, or the xDS server with its stream's state, the
/// version acknowledged, the resources rejected and the last rejection sent.
fn source_rows(out: &mut String, status: &Status) {
    let Some(xds) = &status.config.xds else {
        out.push_str("<dt>source</dt><dd>files</dd>");
        return;
    };
    let stream = if xds.connected {
        "<span class=\"ok\">connected</span>".to_string()
    } else {
        let why = xds.last_stream_error.as_deref().map(escape_html).unwrap_or_default();
        format!("<span class=\"bad\">not connected</span> {why}")
    };
    let _ = write!(
        out,
        "<dt>source</dt><dd>xDS <code>{}</code> (node <code>{}</code>), {stream}</dd><dt>acked version</dt><dd>{}</dd>",
        escape_html(&xds.server),
        escape_html(&xds.node_id),
        match &xds.acked_version {
            Some(version) => format!("<code>{}</code>", escape_html(version)),
            None => "<span class=\"bad\">none: no snapshot yet, nothing is limited</span>".to_string(),
        }
    );
    if !xds.rejected.is_empty() {
        let names: Vec<String> = xds.rejected.iter().map(|n| escape_html(n)).collect();
        let _ = write!(
            out,
            "<dt>rejected resources</dt><dd><span class=\"bad\">{}</span></dd>",
            names.join(", ")
        );
    }
    if let Some(nack) = &xds.last_nack {
        let _ = write!(
            out,
            "<dt>last rejection</dt><dd>version <code>{}</code> at {}<pre>{}</pre></dd>",
            escape_html(&nack.version),
            utc(nack.at),
            escape_html(&nack.message)
        );
    }
}

pub(super) fn store_card(out: &mut String, status: &Status) {
    let store = &status.store;
    let health =
        if store.healthy { "<span class=\"ok\">up</span>" } else { "<span class=\"bad\">down</span>" };
    let breaker = match store.breaker {
        Some("closed") => "closed".to_string(),
        Some(state) => format!("<span class=\"bad\">{state}</span>"),
        None => "<span class=\"muted\">none</span>".to_string(),
    };
    let p99 = store.p99_ms.map_or_else(
        || "<span class=\"muted\">no call in the last minute</span>".to_string(),
        |ms| format!("{ms} ms"),
    );
    let approximate = store.approximate.as_ref().map_or_else(String::new, |a| {
        let synced = a
            .last_sync_seconds_ago
            .map_or_else(|| "<span class=\"muted\">never</span>".to_string(), |s| format!("{s:.1} s ago"));
        let mode = if a.ready { "" } else { " (warming up: decided exactly)" };
        format!(
            "<dt>approximate buckets</dt><dd>idle {}, low {}, normal {}, hot {}</dd>\
             <dt>approximate sync</dt><dd>{synced}, {} live instance(s), N = {}{mode}; \
             backlog {} bucket(s), oldest {:.1} s</dd>",
            a.idle,
            a.low,
            a.normal,
            a.hot,
            a.live_instances,
            a.instances,
            a.backlog_buckets,
            a.backlog_oldest_seconds
        )
    });
    let _ = writeln!(
        out,
        "<section class=\"card\" id=\"store\"><h2>Store</h2><dl><dt>kind</dt><dd>{}</dd>\
         <dt>address</dt><dd><code>{}</code></dd><dt>health</dt><dd>{health}</dd>\
         <dt>breaker</dt><dd>{breaker}</dd><dt>p99 latency (1 min)</dt><dd>{p99}</dd>{approximate}</dl></section>",
        store.kind,
        escape_html(&store.detail)
    );
}
