//! The test front itself (`tests/support/front.rs`), driven by plain blocking redis-rs
//! clients: forwarding and counters, a moved target, silenced connections, a slow set-up,
//! and closing on drop.

use std::time::{Duration, Instant};

use crate::front_support::Front;
use crate::redis_support::RedisServer;

fn connect(front: &Front) -> redis::Connection {
    let client = redis::Client::open(front.url()).expect("client");
    let conn = client.get_connection_with_timeout(Duration::from_secs(2)).expect("connect through the front");
    conn.set_read_timeout(Some(Duration::from_secs(2))).expect("read timeout");
    conn
}

fn get(conn: &mut redis::Connection, key: &str) -> redis::RedisResult<Option<String>> {
    redis::cmd("GET").arg(key).query(conn)
}

#[test]
fn forwards_both_ways_and_counts() {
    let redis = RedisServer::start();
    let front = Front::to_port(redis.port());
    let mut conn = connect(&front);
    let _: () = redis::cmd("SET").arg("k").arg("v").query(&mut conn).expect("SET through the front");
    assert_eq!(get(&mut conn, "k").expect("GET"), Some("v".to_string()));
    let mut direct = redis.client();
    assert_eq!(get(&mut direct, "k").expect("GET direct"), Some("v".to_string()), "reached the real Redis");
    let stats = front.stats();
    assert_eq!(stats.accepted, 1, "{stats:?}");
    assert!(stats.to_redis > 0 && stats.to_client > 0 && stats.swallowed == 0, "{stats:?}");
}

#[test]
fn a_new_target_takes_new_connections_only() {
    let (a, b) = (RedisServer::start(), RedisServer::start());
    let _: () = redis::cmd("SET").arg("who").arg("a").query(&mut a.client()).expect("SET a");
    let _: () = redis::cmd("SET").arg("who").arg("b").query(&mut b.client()).expect("SET b");
    let front = Front::to_port(a.port());
    let mut old = connect(&front);
    front.set_target_port(b.port());
    let mut new = connect(&front);
    assert_eq!(get(&mut old, "who").expect("old"), Some("a".to_string()), "keeps its upstream");
    assert_eq!(get(&mut new, "who").expect("new"), Some("b".to_string()), "goes to the new target");
}

#[test]
fn silenced_connections_swallow_everything_and_never_close() {
    let redis = RedisServer::start();
    let front = Front::to_port(redis.port());
    let mut old = connect(&front);
    assert_eq!(get(&mut old, "k").expect("GET before"), None);
    front.silence_existing();
    old.set_read_timeout(Some(Duration::from_millis(300))).expect("read timeout");
    let started = Instant::now();
    let err = get(&mut old, "k").expect_err("no answer on a silenced connection");
    assert!(err.is_timeout(), "a timeout, not a closed connection: {err:?}");
    assert!(started.elapsed() >= Duration::from_millis(250), "{:?}", started.elapsed());
    assert!(front.stats().swallowed > 0, "{:?}", front.stats());
    // New connections work normally.
    let mut new = connect(&front);
    let _: () = redis::cmd("SET").arg("k").arg("new").query(&mut new).expect("SET on a new connection");
    assert_eq!(get(&mut new, "k").expect("GET new"), Some("new".to_string()));
    // The silenced connection is still open: the client still sees nothing, not an EOF.
    let err = get(&mut old, "k").expect_err("still silent");
    assert!(err.is_timeout(), "{err:?}");
}

#[test]
fn delayed_first_bytes_slow_only_new_connections_and_only_at_first() {
    let redis = RedisServer::start();
    let front = Front::to_port(redis.port());
    let mut old = connect(&front);
    let delay = Duration::from_millis(300);
    front.delay_first_bytes(delay);
    let started = Instant::now();
    let mut new = connect(&front);
    assert_eq!(get(&mut new, "k").expect("GET"), None);
    assert!(started.elapsed() >= delay, "first answer held: {:?}", started.elapsed());
    let started = Instant::now();
    assert_eq!(get(&mut new, "k").expect("GET"), None);
    assert_eq!(get(&mut old, "k").expect("GET old"), None);
    assert!(started.elapsed() < delay, "later answers are not held: {:?}", started.elapsed());
}

#[test]
fn dropping_the_front_closes_its_listener_and_connections() {
    let redis = RedisServer::start();
    let front = Front::to_port(redis.port());
    let addr = front.addr();
    let mut conn = connect(&front);
    assert_eq!(get(&mut conn, "k").expect("GET"), None);
    drop(front);
    let err = get(&mut conn, "k").expect_err("connection closed");
    assert!(!err.is_timeout(), "closed, not silent: {err:?}");
    assert!(std::net::TcpStream::connect(addr).is_err(), "listener closed");
}
