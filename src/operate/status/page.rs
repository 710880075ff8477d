//! The status page as HTML: one self-contained document rendered on the server.
//!
//! No external assets and no script: styles are inline, each rule's last minute is an
//! inline SVG chart, and a `<meta http-equiv="refresh">` reloads the page every few
//! seconds. Every string that comes from the config or the store (domain and rule names,
//! limit names, reload errors, versions, Redis addresses) is HTML-escaped. Pure: formats a
//! `Status`, nothing else.

use std::fmt::Write as _;

use super::{DomainStatus, RuleStatus, Status};
use crate::telemetry::hotkeys::HotKey;
use crate::telemetry::metrics::history::{Class, Minute};

/// Seconds between automatic reloads of the page.
pub const REFRESH_SECONDS: u32 = 5;

/// `text` with `&`, `<`, `>`, `"` and `'` escaped: safe in element content and in quoted
/// attribute values.
pub fn escape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

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
    let _ = write!(
        out,
        "<p class=\"muted\">Rates are decisions per second over the last minute, as counted by this \
         instance. Generated at {}; reloads every {REFRESH_SECONDS} s. JSON: \
         <a href=\"/v1/status\">/v1/status</a>.</p>\n</body></html>\n",
        utc(status.generated_at)
    );
    out
}

/// The busiest buckets of each domain that has any: rule, entries (values hashed as
/// `#` and the hash's first 12 digits, or keyed-hashed as `~` and 12 digits on an open
/// admin port; the full digits in the cell's title), rate, share. Left out, saying so,
/// when the request did not carry the admin token.
fn hot_keys_section(out: &mut String, status: &Status) {
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

fn hot_key_row(out: &mut String, domain: &str, key: &HotKey) {
    let entries: Vec<String> = key
        .descriptor
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
        .collect();
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

fn config_card(out: &mut String, status: &Status) {
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

fn store_card(out: &mut String, status: &Status) {
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

fn domain_table(out: &mut String, domain: &DomainStatus) {
    let name = escape_html(&domain.name);
    let _ = write!(
        out,
        "<section class=\"domain\" data-domain=\"{name}\"><h2>Domain <code>{name}</code></h2>\
         <p class=\"muted\">failure mode <b>{}</b>, charge <b>{}</b>, consistency <b>{}</b></p>\n\
         <table><thead><tr><th>Rule</th><th>Limit</th><th>Algorithm</th><th>OK/s</th>\
         <th>Over limit/s</th><th>Failure/s</th><th>Last minute</th></tr></thead><tbody>\n",
        domain.failure_mode, domain.charge, domain.consistency
    );
    for rule in &domain.rules {
        rule_row(out, rule);
    }
    if domain.rules.is_empty() {
        out.push_str("<tr><td colspan=\"7\" class=\"muted\">no rule</td></tr>\n");
    }
    out.push_str("</tbody></table></section>\n");
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

fn rule_row(out: &mut String, rule: &RuleStatus) {
    let label = escape_html(&rule.rule);
    let shadow = if rule.shadow_mode { " <span class=\"muted\">(shadow)</span>" } else { "" };
    let rates = rule.per_second;
    let _ = writeln!(
        out,
        "<tr data-rule=\"{label}\"><td class=\"rule\"><code>{label}</code>{shadow}</td><td>{}</td><td>{}</td>\
         <td class=\"n ok\">{:.2}</td><td class=\"n over\">{:.2}</td><td class=\"n fail\">{:.2}</td><td>{}</td></tr>",
        limit_text(rule),
        algorithm_text(rule),
        rates.ok,
        rates.over_limit,
        rates.failure,
        sparkline(&rule.minute)
    );
}

/// "100 per minute", "5 per 30 seconds"; every limit of a rule with several, with names.
fn limit_text(rule: &RuleStatus) -> String {
    if rule.unlimited {
        return "unlimited".to_string();
    }
    let one = |limit: u64, unit: &str, multiplier: u64, rollout: f64, penalty: u64| {
        let mut window = match multiplier {
            1 => format!("{limit} per {unit}"),
            n => format!("{limit} per {n} {unit}s"),
        };
        if rollout < 1.0 {
            // The share enforced: a staged rule, shown as such.
            let percent = (rollout * 1_000_000.0).round() / 10_000.0;
            window.push_str(&format!(" <span class=\"muted rollout\">(rollout {percent}%)</span>"));
        }
        if penalty > 0 {
            window.push_str(&format!(" <span class=\"muted penalty\">(penalty {penalty} s)</span>"));
        }
        window
    };
    if rule.limits.is_empty() {
        return match (rule.limit, rule.unit, rule.unit_multiplier) {
            (Some(limit), Some(unit), multiplier) => one(
                limit,
                unit,
                multiplier.unwrap_or(1),
                rule.rollout.unwrap_or(1.0),
                rule.penalty_seconds.unwrap_or(0),
            ),
            _ => String::new(),
        };
    }
    rule.limits
        .iter()
        .map(|l| {
            let name = l.name.as_deref().map(|n| format!("{}: ", escape_html(n))).unwrap_or_default();
            format!("{name}{}", one(l.limit, l.unit, l.unit_multiplier, l.rollout, l.penalty_seconds))
        })
        .collect::<Vec<_>>()
        .join("<br>")
}

fn algorithm_text(rule: &RuleStatus) -> String {
    if rule.limits.is_empty() {
        return rule.algorithm.unwrap_or("").to_string();
    }
    rule.limits.iter().map(|l| l.algorithm).collect::<Vec<_>>().join("<br>")
}

const CHART_WIDTH: usize = 180;
const CHART_HEIGHT: u64 = 32;

/// The minute as an inline SVG: one line per class (ok green, over limit red, failure
/// amber), one point per second, scaled to the busiest second.
pub fn sparkline(minute: &Minute) -> String {
    let peak = minute.seconds.iter().flat_map(|s| s.iter().copied()).max().unwrap_or(0).max(1);
    let step = CHART_WIDTH as f64 / (minute.seconds.len().max(2) - 1) as f64;
    let totals: Vec<u64> =
        [Class::Ok, Class::OverLimit, Class::Failure].iter().map(|c| minute.series(*c).sum()).collect();
    let mut svg = format!(
        "<svg class=\"spark\" width=\"{CHART_WIDTH}\" height=\"{CHART_HEIGHT}\" viewBox=\"-1 -1 {} {}\" \
         role=\"img\"><title>last minute: {} ok, {} over limit, {} failure</title>\
         <rect x=\"-1\" y=\"-1\" width=\"{}\" height=\"{}\" fill=\"#f6f8fa\"/>",
        CHART_WIDTH + 2,
        CHART_HEIGHT + 2,
        totals[0],
        totals[1],
        totals[2],
        CHART_WIDTH + 2,
        CHART_HEIGHT + 2,
    );
    for (class, colour) in
        [(Class::Ok, "#1a7f37"), (Class::OverLimit, "#c62828"), (Class::Failure, "#b26a00")]
    {
        if totals[class as usize] == 0 {
            continue;
        }
        let points: Vec<String> = minute
            .series(class)
            .enumerate()
            .map(|(i, n)| {
                let y = CHART_HEIGHT as f64 * (1.0 - n as f64 / peak as f64);
                format!("{:.1},{y:.1}", i as f64 * step)
            })
            .collect();
        let _ = write!(
            svg,
            "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.5\" points=\"{}\"/>",
            points.join(" ")
        );
    }
    svg.push_str("</svg>");
    svg
}

/// Unix seconds as `YYYY-MM-DD hh:mm:ss UTC`.
pub fn utc(unix: u64) -> String {
    let (days, rest) = (unix / 86_400, unix % 86_400);
    let (year, month, day) = civil_date(days);
    format!("{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC", rest / 3600, rest % 3600 / 60, rest % 60)
}

/// The Gregorian date of a day count since 1970-01-01: whole years off, then whole months
/// (a few dozen steps; the page is rendered once per view).
fn civil_date(mut days: u64) -> (u64, u64, u64) {
    let leap = |year: u64| (year.is_multiple_of(4) && !year.is_multiple_of(100)) || year.is_multiple_of(400);
    let mut year = 1970;
    loop {
        let length = if leap(year) { 366 } else { 365 };
        if days < length {
            break;
        }
        days -= length;
        year += 1;
    }
    let february = if leap(year) { 29 } else { 28 };
    let mut month = 1;
    for length in [31, february, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31] {
        if days < length {
            break;
        }
        days -= length;
        month += 1;
    }
    (year, month, days + 1)
}
