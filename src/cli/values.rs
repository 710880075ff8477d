//! Parsers of flag values that clap does not know: durations, shares, the Sentinel
//! address list and header names. Each answers a message clap shows as it is.

use std::time::Duration;

use crate::service::headers::LimitHeaderNames;

/// `--redis-sentinel`: the master's name and the sentinels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentinelArg {
    pub master: String,
    pub sentinels: Vec<String>,
}

/// `master_name,host:port[,host:port…]`.
pub fn parse_sentinel(s: &str) -> Result<SentinelArg, String> {
    let mut parts = s.split(',').map(str::trim).filter(|p| !p.is_empty());
    let master = parts.next().unwrap_or_default().to_string();
    let sentinels: Vec<String> = parts.map(str::to_string).collect();
    if master.is_empty() || master.contains(':') || sentinels.is_empty() {
        return Err("expected master_name,host:port[,host:port...]".into());
    }
    Ok(SentinelArg { master, sentinels })
}

/// `LIMIT,REMAINING,RESET`: three distinct HTTP header names.
pub fn parse_limit_header_names(s: &str) -> Result<LimitHeaderNames, String> {
    let names: Vec<&str> = s.split(',').map(str::trim).collect();
    let [limit, remaining, reset] = names[..] else {
        return Err(format!("expected three header names LIMIT,REMAINING,RESET, got {s:?}"));
    };
    // RFC 9110 `token`: what a field name may hold.
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if let Some(bad) = names.iter().find(|n| n.is_empty() || !n.chars().all(token)) {
        return Err(format!("{bad:?} is not an HTTP header name"));
    }
    let lower: Vec<String> = names.iter().map(|n| n.to_ascii_lowercase()).collect();
    if lower[0] == lower[1] || lower[0] == lower[2] || lower[1] == lower[2] {
        return Err(format!("the three header names must differ, got {s:?}"));
    }
    Ok(LimitHeaderNames { limit: limit.into(), remaining: remaining.into(), reset: reset.into() })
}

/// An HTTP path for `--metrics-path`: starts with `/`.
pub fn parse_metrics_path(s: &str) -> Result<String, String> {
    if s.starts_with('/') && !s.contains(['?', '#']) {
        Ok(s.to_string())
    } else {
        Err(format!("expected a path starting with / (e.g. /metrics), got {s:?}"))
    }
}

/// A share from 0 to 1 (e.g. `0.5`).
pub fn parse_share(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(share) if (0.0..=1.0).contains(&share) => Ok(share),
        _ => Err(format!("expected a share from 0 to 1 (e.g. 0.5), got {s:?}")),
    }
}

/// `90s`, `30m`, `1h`, `500ms` or plain seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    let n: u64 = digits.parse().map_err(|_| format!("invalid duration {s:?} (e.g. 90s, 30m, 1h)"))?;
    let secs = match unit {
        "" | "s" => n,
        "m" => n.saturating_mul(60),
        "h" => n.saturating_mul(3600),
        "ms" => return Ok(Duration::from_millis(n)),
        _ => return Err(format!("invalid duration unit in {s:?} (use ms, s, m or h)")),
    };
    Ok(Duration::from_secs(secs))
}
