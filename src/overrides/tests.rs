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
fn an_hgetall_reply_reads_in_resp2_and_resp3() {
    use ::redis::Value;
    let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
    let resp2 = Value::Array(vec![bulk("all"), bulk("{}"), bulk("api"), bulk("x")]);
    assert_eq!(fields(resp2), [("all".into(), "{}".into()), ("api".into(), "x".into())]);
    let resp3 = Value::Map(vec![(bulk("all"), bulk("{}"))]);
    assert_eq!(fields(resp3), [("all".to_string(), "{}".to_string())]);
    assert!(fields(Value::Nil).is_empty());
}
