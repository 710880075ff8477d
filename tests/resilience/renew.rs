//! A connect in flight when the link is renewed (a sentinel's master switch, the breaker
//! opening) is not kept: found by the soak (`tests/soak`, seed 202 on Sentinel). The old
//! master was frozen; a connect to it, started when the sentinels still named it, landed
//! after the switch and the renew, and charged it — still a master in its own view — for
//! 8 s beside the new one: buckets admitted up to 25 for a limit of 20.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::Value;
use tokio::sync::Notify;
use tokio::time::Instant;
use tollgate::store::redis::link::{Connect, Link, LinkSettings};
use tollgate::store::redis::{connect_to, connection_info};

use crate::redis_support::RedisServer;

/// `INCR renew` on every connection the link has, with a generous deadline.
async fn incr(link: &Link) -> bool {
    let mut pipe = redis::pipe();
    pipe.cmd("INCR").arg("renew");
    let sent = link.send(pipe, 1, Instant::now() + Duration::from_secs(2)).await;
    matches!(sent.as_deref(), Ok([Value::Int(_)]))
}

fn count(server: &RedisServer) -> i64 {
    server.cli(&["GET", "renew"]).parse().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_in_flight_at_a_renew_is_not_kept() {
    let (old, new) = (RedisServer::start(), RedisServer::start());
    // Where connects go, as the sentinels would answer; the first connect to the old
    // master is held until the test lets it land (a frozen master resuming).
    let target = Arc::new(Mutex::new(old.url()));
    let (gate, entered) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let held = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let connect: Connect = {
        let (target, gate, entered, held) = (target.clone(), gate.clone(), entered.clone(), held.clone());
        Arc::new(move |config| {
            let url = target.lock().expect("target").clone();
            let (gate, entered, held) = (gate.clone(), entered.clone(), held.clone());
            Box::pin(async move {
                let info = connection_info(&url, &Default::default())?;
                if held.swap(false, std::sync::atomic::Ordering::SeqCst) {
                    entered.notify_one();
                    gate.notified().await;
                }
                connect_to(info, Default::default())(config).await
            })
        })
    };
    let settings =
        LinkSettings { connections: 1, reply_timeout: Duration::from_millis(300), max_inflight: 64 };
    let link = Link::new(settings, "renew-test".into(), connect);
    link.warm();
    // The connect to the old master is in flight (held). The master switches.
    entered.notified().await;
    *target.lock().expect("target") = new.url();
    link.renew();
    gate.notify_one();
    for _ in 0..5 {
        assert!(incr(&link).await, "a command reaches a master");
    }
    assert_eq!(count(&old), 0, "nothing went to the old master");
    assert_eq!(count(&new), 5, "every command went to the new master");
}
