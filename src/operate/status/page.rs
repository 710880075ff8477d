//! The status page as HTML: one self-contained document rendered on the server.
//!
//! No external assets and no script: styles are inline, each rule's last minute is an
//! inline SVG chart, and a `<meta http-equiv="refresh">` reloads the page every few
//! seconds. Every string that comes from the config or the store (domain and rule names,
//! limit names, reload errors, versions, Redis addresses) is HTML-escaped. Pure: formats a
//! `Status`, nothing else.
//!
//! This file holds the document's frame, its style and the override banner; its sections
//! live beside it: `cards` (config and store), `domains` (a table per domain), `hot_keys`,
//! `chart` (the SVG of a minute) and `format` (`escape_html`, `utc`), re-exported here.
//! They import one another, never this file.

mod cards;
mod chart;
mod domains;
mod format;
mod hot_keys;

use std::fmt::Write as _;

pub use self::chart::sparkline;
pub use self::format::{escape_html, utc};

use self::cards::{config_card, store_card};
use self::domains::domain_table;
use self::hot_keys::{hot_keys_section, rlqs_section};
use super::Status;

/// Seconds between automatic reloads of the page.
pub const REFRESH_SECONDS: u32 = 5;

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#1d2430;background:#fff}\
.banner{background:#fdecea;border:1px solid #e0a39c;border-radius:6px;padding:.6em 1em;margin:0 0 1em}\
h1{font-size:1.5em;margin:0 0 .6em}h2{font-size:1.15em;margin:1.4em 0 .3em}\
dl{display:grid;grid-template-columns:max-content auto;gap:.15em 1em;margin:0}dt{color:#5a6472}dd{margin:0}\
.cards{display:flex;gap:1.5em;flex-wrap:wrap}.card{border:1px solid #d6dbe1;border-radius:6px;padding:.7em 1em}\
.card h2{margin:0 0 .4em}\
table{border-collapse:collapse;min-width:60%}th,td{border-bottom:1px solid #e3e7ec;padding:.3em .8em;text-align:left;vertical-align:middle}\
th{color:#5a6472;font-weight:600}td.n{text-align:right;font-variant-numeric:tabular-nums}\
.ok{color:#1a7f37}.over{color:#c62828}.fail{color:#b26a00}.bad{color:#c62828;font-weight:600}\
pre{white-space:pre-wrap;margin:0;color:#c62828}.muted{color:#5a6472}";

/// The whole page.
pub fn render(status: &Status) -> String {
    let mut out = String::with_capacity(4096);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"{REFRESH_SECONDS}\">\
         <meta name=\"viewport\" content=\"width=device-width\">\
         <title>Tollgate status</title><style>{STYLE}</style></head><body>\n\
         <h1>Tollgate {}</h1>\n",
        escape_html(status.version)
    );
    override_banner(&mut out, status);
    out.push_str("<div class=\"cards\">");
    config_card(&mut out, status);
    store_card(&mut out, status);
    out.push_str("</div>\n");
    for domain in &status.domains {
        domain_table(&mut out, domain);
    }
    if status.domains.is_empty() {
        out.push_str("<p class=\"muted\">No domain is configured.</p>\n");
    }
    hot_keys_section(&mut out, status);
    rlqs_section(&mut out, status);
    let _ = write!(
        out,
        "<p class=\"muted\">Rates are decisions per second over the last minute, as counted by this \
         instance. Generated at {}; reloads every {REFRESH_SECONDS} s. JSON: \
         <a href=\"/v1/status\">/v1/status</a>.</p>\n</body></html>\n",
        utc(status.generated_at)
    );
    out
}

/// The incident overrides in force, one line each, above everything else.
fn override_banner(out: &mut String, status: &Status) {
    for o in &status.overrides {
        let what = match o.mode {
            "open" => "the store is skipped and every request is answered OK",
            _ => "requests are decided and counted, and answered OK",
        };
        let scope = if o.scope == "all" {
            "every domain".to_string()
        } else {
            format!("domain <code>{}</code>", escape_html(&o.scope))
        };
        let _ = writeln!(
            out,
            "<div class=\"banner\" data-override=\"{}\" data-mode=\"{}\"><strong>Incident override: {}              mode</strong> on {scope}: {what}. Ends by itself at {} (in {} s);              <code>DELETE /v1/override?scope={}</code> ends it now.</div>",
            escape_html(&o.scope),
            o.mode,
            o.mode,
            utc(o.expires_at),
            o.expires_in_seconds,
            escape_html(&o.scope),
        );
    }
}
