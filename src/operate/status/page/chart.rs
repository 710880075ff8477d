//! A rule's last minute as an inline SVG chart (`sparkline`): no script, no external asset.
//!
//! Part of `page`; imports none of its siblings. Pure.

use std::fmt::Write as _;

use crate::telemetry::metrics::history::{Class, Minute};

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
