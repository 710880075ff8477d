use super::*;
use crate::store::MemoryStore;

fn table() -> (Overrides, Store) {
    (Overrides::new("", Arc::new(Metrics::new())), Store::Memory(MemoryStore::new(10)))
}

fn wanted(scope: &str, mode: Mode, ttl_ms: u64) -> Override {
    let now = now_ms();
    Override { scope: scope.into(), mode, expires_at_ms: now + ttl_ms, set_at_ms: now, set_by: "test".into() }
}

#[tokio::test]
async fn an_override_covers_its_scope_and_the_stronger_mode_wins() {
    let (overrides, store) = table();
    assert_eq!(overrides.mode(b"api"), None);
    assert_eq!(overrides.set(&store, wanted("api", Mode::Shadow, 60_000)).await, Ok(false), "memory: local");
    assert_eq!((overrides.mode(b"api"), overrides.mode(b"web")), (Some(Mode::Shadow), None));
    overrides.set(&store, wanted(ALL, Mode::Open, 60_000)).await.expect("set");
    assert_eq!((overrides.mode(b"api"), overrides.mode(b"web")), (Some(Mode::Open), Some(Mode::Open)));
    // A second POST of a scope replaces the first.
    overrides.set(&store, wanted(ALL, Mode::Shadow, 60_000)).await.expect("set");
    assert_eq!(overrides.active().len(), 2);
    assert_eq!(overrides.mode(b"web"), Some(Mode::Shadow));
    let (ended, stored) = overrides.end(&store, ALL).await;
    assert_eq!((ended.map(|o| o.mode), stored), (Some(Mode::Shadow), Ok(false)));
    assert_eq!((overrides.mode(b"api"), overrides.mode(b"web")), (Some(Mode::Shadow), None));
    assert_eq!(overrides.end(&store, ALL).await.0, None, "nothing left to end");
}

#[tokio::test]
async fn an_override_ends_by_itself_at_its_expiry() {
    let (overrides, store) = table();
    overrides.set(&store, wanted("api", Mode::Open, 300)).await.expect("set");
    assert_eq!(overrides.mode(b"api"), Some(Mode::Open));
    let ends = overrides.active()[0].expires_at_ms;
    while now_ms() < ends {
        tokio::time::sleep(Duration::from_millis(ends - now_ms())).await;
    }
    assert_eq!(overrides.mode(b"api"), None, "ended at its expiry, no timer needed");
    assert!(overrides.active().is_empty());
}

#[test]
fn overrides_read_back_are_capped_at_the_longest_ttl_from_their_set_time_and_from_now() {
    let day = MAX_TTL_SECONDS * 1000;
    let now = now_ms();
    let o = |set_at_ms, expires_at_ms| Override {
        scope: "api".into(),
        mode: Mode::Open,
        expires_at_ms,
        set_at_ms,
        set_by: "hand".into(),
    };
    assert_eq!(stored::capped(o(now, now + 60_000), now).expires_at_ms, now + 60_000, "within: kept");
    assert_eq!(stored::capped(o(now - 1_000, u64::MAX), now).expires_at_ms, now - 1_000 + day);
    assert_eq!(stored::capped(o(u64::MAX - 5, u64::MAX), now).expires_at_ms, now + day, "set in the future");
}

#[test]
fn a_read_names_each_scope_by_its_field_and_keeps_the_version_of_ends() {
    let bulk = |s: &str| s.to_string();
    let now = now_ms();
    let live = format!(
        r#"{{"version":7,"scope":"other","mode":"shadow","expires_at_ms":{},"set_at_ms":{now},"set_by":"b","id":"x"}}"#,
        now + 1_000
    );
    let reply = vec![
        (bulk("api"), bulk(&live)),
        (bulk("web"), bulk(r#"{"version":9,"scope":"web","ended":true,"id":"y"}"#)),
        (
            bulk("old"),
            bulk(&format!(
                r#"{{"scope":"old","mode":"open","expires_at_ms":{},"set_at_ms":{now},"set_by":"a"}}"#,
                now + 5
            )),
        ),
        (bulk("junk"), bulk("not json")),
    ];
    let read = stored::read(reply, now);
    let scopes: Vec<(&str, Mode)> = read.overrides.iter().map(|o| (o.scope.as_str(), o.mode)).collect();
    assert_eq!(scopes, [("api", Mode::Shadow), ("old", Mode::Open)], "an end is no override");
    let mut versions: Vec<(&str, u64)> = read.versions.iter().map(|(s, v)| (s.as_str(), *v)).collect();
    versions.sort();
    assert_eq!(versions, [("api", 7), ("old", 0), ("web", 9)], "a record without a version is 0");
}

#[tokio::test(start_paused = true)]
async fn a_pending_set_lapses_at_its_ttl_by_the_monotonic_clock_whatever_the_wall_clock_says() {
    // A wall clock far behind: by it the set would stay active for ten days.
    let behind = now_ms() - 10 * MAX_TTL_SECONDS * 1000;
    let set = Override { expires_at_ms: behind + 60_000, set_at_ms: behind, ..wanted("api", Mode::Open, 0) };
    let change = stored::Change::new("api", Some(set), 3);
    let end = stored::Change::new("api", None, 3);
    assert!(!change.lapsed(behind) && !end.lapsed(behind));
    tokio::time::advance(Duration::from_secs(60)).await;
    assert!(change.lapsed(behind), "its 60 s have passed");
    assert!(!end.lapsed(behind));
    tokio::time::advance(Duration::from_secs(MAX_TTL_SECONDS)).await;
    assert!(end.lapsed(behind), "nothing an end could end outlives the longest TTL");
}
