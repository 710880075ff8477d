use std::time::Duration;

use super::*;
use crate::app::ServeSettings;
use crate::service::headers::LimitHeaderNames;
use crate::store::breaker::BreakerSettings;
use crate::telemetry::metrics::SeriesLimits;

fn breaker(args: &[&str]) -> Result<BreakerSettings, clap::Error> {
    let cli = Cli::try_parse_from(["tollgate", "serve"].iter().chain(args))?;
    match cli.command {
        Command::Serve(serve) => Ok(serve.settings().expect("settings").redis.breaker),
        other => panic!("not serve: {other:?}"),
    }
}

#[test]
fn breaker_flags_default_to_the_breaker_defaults_and_parse() {
    assert_eq!(breaker(&[]).expect("defaults"), BreakerSettings::default());
    let set = breaker(&[
        "--breaker-failures",
        "2",
        "--breaker-failure-rate",
        "0.25",
        "--breaker-window-ms",
        "500",
        "--breaker-cooldown-ms",
        "300",
    ])
    .expect("flags");
    assert_eq!(
        set,
        BreakerSettings {
            failures: 2,
            failure_rate: 0.25,
            window: Duration::from_millis(500),
            cooldown: Duration::from_millis(300),
        }
    );
    assert!(breaker(&["--breaker-failure-rate", "1.5"]).is_err(), "a share is at most 1");
    assert!(breaker(&["--breaker-failure-rate", "-0.1"]).is_err());
    assert!(breaker(&["--breaker-window-ms", "5"]).is_err(), "a window of at least 10 ms");
}

fn serve(args: &[&str]) -> Result<ServeSettings, clap::Error> {
    let cli = Cli::try_parse_from(["tollgate", "serve"].iter().chain(args))?;
    match cli.command {
        Command::Serve(serve) => Ok(serve.settings().expect("settings")),
        other => panic!("not serve: {other:?}"),
    }
}

#[test]
fn limit_headers_take_the_peers_names_unless_renamed() {
    let plain = serve(&[]).expect("defaults");
    assert_eq!((plain.limit_headers, plain.response_dynamic_metadata), (None, false));
    let on = serve(&["--limit-headers", "--response-dynamic-metadata"]).expect("flags");
    assert_eq!(on.limit_headers, Some(LimitHeaderNames::default()));
    assert!(on.response_dynamic_metadata);
    let renamed = serve(&["--limit-headers", "--limit-header-names", "A-Limit, A-Remaining,A-Reset"]);
    let want = LimitHeaderNames {
        limit: "A-Limit".into(),
        remaining: "A-Remaining".into(),
        reset: "A-Reset".into(),
    };
    assert_eq!(renamed.expect("names").limit_headers, Some(want));
    assert!(serve(&["--limit-header-names", "a,b,c"]).is_err(), "names without the headers do nothing");
    for bad in ["a,b", "a,b,c,d", "a,,c", "a b,c,d", "a,B,b", "x:y,b,c"] {
        assert!(parse_limit_header_names(bad).is_err(), "{bad}");
    }
}

fn series(args: &[&str]) -> Result<SeriesLimits, clap::Error> {
    let cli = Cli::try_parse_from(["tollgate", "serve"].iter().chain(args))?;
    match cli.command {
        Command::Serve(serve) => Ok(serve.settings().expect("settings").metric_series),
        other => panic!("not serve: {other:?}"),
    }
}

#[test]
fn series_flags_default_to_64_bytes_and_1000_sets() {
    assert_eq!(series(&[]).expect("defaults"), SeriesLimits::default());
    assert_eq!(
        SeriesLimits::default(),
        SeriesLimits { max_label_value_bytes: 64, max_detailed_series: 1000 }
    );
    let set = series(&["--max-label-value-bytes", "32", "--max-detailed-series", "0"]).expect("flags");
    assert_eq!(set, SeriesLimits { max_label_value_bytes: 32, max_detailed_series: 0 });
    assert!(series(&["--max-label-value-bytes", "8"]).is_err(), "room for an escape and the mark");
}
