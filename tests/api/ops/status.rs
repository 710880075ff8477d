//! The status page on a real Redis: `/v1/status` fills with the server's own rates as
//! traffic flows (ok, over limit, then failure policy once Redis stops), and `/` renders in
//! a real headless Chromium with rule names and non-zero rates, screenshot included.
//!
//! The browser is Debian's `chromium` (`make deps` installs it), or `$CHROMIUM_BIN`. With
//! `CI=true` a missing browser fails the test; elsewhere the browser test says it skipped.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;
use tollgate::app::StoreKind;

use crate::support::*;

/// A second domain for the browser's page: fail-closed, with an unlimited rule.
const LOGIN: &str = r#"
domain: login
failure_mode: closed
descriptors:
  - key: ip
    rate_limit: { name: per-ip, unit: minute, requests_per_unit: 30, algorithm: fixed_window }
  - key: health
    rate_limit: { unlimited: true }
"#;

const SHOP: &str = r#"
domain: shop
failure_mode: open
descriptors:
  - key: user
    rate_limit: { name: per-user, unit: second, requests_per_unit: 5 }
  - key: path
    rate_limit: { name: per-path, unit: hour, requests_per_unit: 1000000, algorithm: sliding_window }
"#;

/// A domain whose store failures are limited in process memory: counted as failure policy.
const EDGE: &str = r#"
domain: edge
failure_mode: local
descriptors:
  - key: ip
    rate_limit: { name: per-ip, unit: minute, requests_per_unit: 100 }
"#;

/// `/v1/status` as JSON.
async fn v1_status(app: &TestApp) -> Value {
    let response = app.admin("GET", "/v1/status").await;
    assert_eq!(response.status, 200, "{}", response.body);
    serde_json::from_str(&response.body).expect("/v1/status is JSON")
}

/// The domain of that name in `/v1/status`.
fn domain<'a>(status: &'a Value, name: &str) -> &'a Value {
    let domains = status["domains"].as_array().expect("domains");
    domains.iter().find(|d| d["name"] == name).unwrap_or_else(|| panic!("{name} in {status}"))
}

/// `per_second.<class>` of a rule of domain `shop`.
fn rate(status: &Value, rule: &str, class: &str) -> f64 {
    let rules = domain(status, "shop")["rules"].as_array().expect("rules");
    let rule = rules.iter().find(|r| r["rule"] == rule).unwrap_or_else(|| panic!("{rule} in {status}"));
    rule["per_second"][class].as_f64().unwrap_or_else(|| panic!("per_second.{class} of {rule}"))
}

/// Sends requests for `user=alice` (limit 5 per second, so most are denied) in small
/// batches until `/v1/status` shows `done`. The history counts complete seconds only, so
/// traffic has to run into the next second; bounded at 15 s.
async fn drive_until(app: &TestApp, done: impl Fn(&Value) -> bool) -> Value {
    let request = request("shop", &[&[("user", "alice")], &[("path", "/cart")]]);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        for _ in 0..10 {
            app.check(request.clone()).await;
        }
        let status = v1_status(app).await;
        if done(&status) {
            return status;
        }
        assert!(tokio::time::Instant::now() < deadline, "rates never showed: {status}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_status_shows_rates_store_and_config_from_real_traffic() {
    let mut app = spawn_app(StoreKind::Redis, &[("shop.yaml", SHOP), ("edge.yaml", EDGE)]).await;
    let status = drive_until(&app, |s| rate(s, "per-user", "over_limit") > 0.0).await;
    assert_eq!(status["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(status["config"]["version"].as_str().map(str::len), Some(16), "{status}");
    assert!(status["config"]["loaded_at"].as_u64().is_some(), "{status}");
    assert_eq!(status["config"]["last_error"], Value::Null);
    let store = &status["store"];
    assert_eq!((store["kind"].as_str(), store["healthy"].as_bool()), (Some("redis"), Some(true)), "{store}");
    assert_eq!(store["breaker"], "closed");
    assert!(store["p99_ms"].as_f64().is_some_and(|ms| ms > 0.0), "{store}");
    let shop = domain(&status, "shop");
    assert_eq!((shop["name"].as_str(), shop["failure_mode"].as_str()), (Some("shop"), Some("open")));
    assert!(rate(&status, "per-user", "ok") > 0.0, "{status}");
    assert!(rate(&status, "per-path", "ok") > 0.0, "{status}");
    assert_eq!(rate(&status, "per-path", "over_limit"), 0.0);
    assert_eq!(rate(&status, "per-user", "failure"), 0.0);
    let per_path = &shop["rules"][1];
    assert_eq!((per_path["limit"].as_u64(), per_path["unit"].as_str()), (Some(1_000_000), Some("hour")));
    assert_eq!(per_path["algorithm"], "sliding_window");

    // Redis gone: the fail-open answers, and the local limiter's, count as failure policy.
    let edge = request("edge", &[&[("ip", "192.0.2.9")]]);
    app.check(edge.clone()).await;
    app.redis().stop();
    for _ in 0..3 {
        assert!(!over(&app.check(edge.clone()).await), "the local limiter admits these");
    }
    let edge_rate = |s: &Value, class: &str| domain(s, "edge")["rules"][0]["per_second"][class].as_f64();
    let status =
        drive_until(&app, |s| rate(s, "per-user", "failure") > 0.0 && edge_rate(s, "failure") > Some(0.0))
            .await;
    assert!(rate(&status, "per-path", "failure") > 0.0, "{status}");
    assert_eq!(edge_rate(&status, "failure"), Some(0.05), "3 local decisions in the minute: {status}");
    assert_eq!(edge_rate(&status, "ok"), Some(0.017), "1 decided by Redis: {status}");

    // A reload that fails shows its error; the config keeps serving.
    std::fs::write(
        app.config_path().join("shop.yaml"),
        "domain: shop\ndescriptors: [ {key: user, rate_limit: {unit: fortnight}} ]\n",
    )
    .expect("write");
    let reload = app.admin("POST", "/reload").await;
    assert_eq!(reload.status, 422, "{}", reload.body);
    let error = v1_status(&app).await["config"]["last_error"].as_str().map(str::to_string);
    assert!(error.as_deref().is_some_and(|e| e.contains("fortnight")), "{error:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_and_json_need_no_admin_token() {
    let token = tempfile::NamedTempFile::new().expect("token file");
    std::fs::write(token.path(), "t0ken\n").expect("write token");
    let mut options = Options::new(StoreKind::Memory);
    options.admin_token_file = Some(token.path().to_path_buf());
    let app = spawn_with(options, &[("shop.yaml", SHOP)]).await;
    let page = app.admin("GET", "/").await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("<tr data-rule=\"per-user\">"), "{}", page.body);
    assert_eq!(app.admin("GET", "/v1/status").await.status, 200);
    assert_eq!(app.admin("POST", "/reload").await.status, 401, "the token still guards POST");
}

/// The browser: `$CHROMIUM_BIN`, else `chromium` or `chromium-browser` on PATH.
fn chromium() -> Option<PathBuf> {
    if let Some(bin) = std::env::var_os("CHROMIUM_BIN") {
        return Some(PathBuf::from(bin));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| ["chromium", "chromium-browser"].map(|name| dir.join(name)))
        .find(|candidate| candidate.is_file())
}

/// Runs headless Chromium on `url` with `args` before it; its stdout.
async fn headless(browser: &PathBuf, profile: &std::path::Path, args: &[&str], url: &str) -> String {
    let mut command = tokio::process::Command::new(browser);
    command
        // Root in CI: Chromium refuses to run as root with its sandbox.
        .args(["--no-sandbox", "--headless", "--disable-gpu", "--virtual-time-budget=3000"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(90), command.output())
        .await
        .expect("chromium finishes within 90 s")
        .expect("chromium runs");
    assert!(output.status.success(), "chromium failed: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The number in the `<td class="n {class}">` cell of the row of `rule`.
fn cell(dom: &str, rule: &str, class: &str) -> Option<f64> {
    let row = dom.split(&format!("<tr data-rule=\"{rule}\">")).nth(1)?.split("</tr>").next()?;
    let value = row.split(&format!("<td class=\"n {class}\">")).nth(1)?.split('<').next()?;
    value.trim().parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_renders_in_a_real_browser() {
    let Some(browser) = chromium() else {
        if std::env::var("CI").is_ok_and(|ci| ci == "true") {
            panic!("chromium is required in CI (make deps installs it; or set CHROMIUM_BIN)");
        }
        eprintln!("SKIPPED the_status_page_renders_in_a_real_browser: no chromium (make deps installs it)");
        return;
    };
    let app = spawn_app(StoreKind::Redis, &[("shop.yaml", SHOP), ("login.yaml", LOGIN)]).await;
    // A few seconds of traffic, so that the chart has a shape (the screenshot is
    // docs/status-page.png); then until complete seconds show it.
    let started = tokio::time::Instant::now();
    let login = request("login", &[&[("ip", "192.0.2.7")], &[("health", "probe")]]);
    drive_until(&app, |s| {
        started.elapsed() > Duration::from_secs(3) && rate(s, "per-user", "over_limit") > 0.0
    })
    .await;
    for _ in 0..40 {
        app.check(login.clone()).await;
    }
    drive_until(&app, |s| domain(s, "login")["rules"][0]["per_second"]["over_limit"].as_f64() > Some(0.0))
        .await;
    let url = format!("http://{}/", app.admin_addr());
    let profile = tempfile::tempdir().expect("profile dir");

    let dom = headless(&browser, profile.path(), &["--dump-dom"], &url).await;
    assert!(dom.contains("Tollgate") && dom.contains("shop"), "{dom}");
    for rule in ["per-user", "per-path"] {
        assert!(cell(&dom, rule, "ok").is_some_and(|ok| ok > 0.0), "{rule} ok rate in\n{dom}");
    }
    assert!(cell(&dom, "per-user", "over").is_some_and(|over| over > 0.0), "over rate in\n{dom}");
    assert!(dom.contains("<polyline"), "the last-minute chart is in the DOM");

    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"), PathBuf::from);
    std::fs::create_dir_all(&target).expect("target dir");
    let shot = target.join("status-page.png");
    let _ = std::fs::remove_file(&shot);
    let screenshot = format!("--screenshot={}", shot.display());
    headless(&browser, profile.path(), &[&screenshot, "--window-size=1200,760", "--hide-scrollbars"], &url)
        .await;
    let png = std::fs::read(&shot).expect("the screenshot was written");
    assert!(png.starts_with(b"\x89PNG"), "a PNG at {}", shot.display());
    println!("status page screenshot: {}", shot.display());
    eprintln!("status page screenshot: {}", shot.display());
}
