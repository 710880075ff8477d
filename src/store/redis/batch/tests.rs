use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::*;
use crate::algorithm::{Algorithm, Hits, Params};
use crate::store::redis::link::LinkSettings;

const PARAMS: Params = Params {
    algorithm: Algorithm::Gcra,
    limit: 10,
    unit_us: 1_000_000,
    burst: 10,
    penalty_us: 0,
    period: None,
};

/// A batcher whose link never connects (nothing here sends).
fn batcher(lanes: usize, max_charges: usize) -> Arc<Batcher> {
    let settings = LinkSettings { connections: 1, reply_timeout: Duration::from_secs(1), max_inflight: 4096 };
    let connect: super::super::link::Connect =
        Arc::new(|_| Box::pin(async { Err(StoreError::Unavailable("no server in this test".into())) }));
    let link = Arc::new(Link::new(settings, "nowhere".into(), connect));
    let health = Arc::new(Health::new("nowhere".into()));
    Arc::new(Batcher::new(link, Arc::new(Scripts::new()), health, lanes, max_charges))
}

/// Queues a rider of `n` charges; its receiver.
fn queue(b: &Batcher, n: usize) -> oneshot::Receiver<Answer> {
    let (answer, receiver) = oneshot::channel();
    let charges =
        (0..n).map(|i| Charge { key: format!("k{i}"), params: PARAMS, hits: Hits::Consume(1) }).collect();
    let deadline = Instant::now() + Duration::from_secs(5);
    b.lock().riders.push_back(Rider { charges, groups: Groups::each(), deadline, answer });
    receiver
}

#[test]
fn a_call_takes_the_queue_up_to_its_charges_and_a_lane_frees_only_when_none_wait() {
    let b = batcher(2, 5);
    b.lock().busy = 2;
    let _r: Vec<_> = [2, 2, 2, 7].iter().map(|&n| queue(&b, n)).collect();
    // 2 + 2 fit in 5, the third would pass it.
    assert_eq!(b.next_or_free().iter().map(|r| r.charges.len()).collect::<Vec<_>>(), [2, 2]);
    assert_eq!(b.lock().busy, 2, "the lane carries the next call");
    // A rider larger than a call still goes, alone.
    assert_eq!(b.next_or_free().iter().map(|r| r.charges.len()).collect::<Vec<_>>(), [2]);
    assert_eq!(b.next_or_free().iter().map(|r| r.charges.len()).collect::<Vec<_>>(), [7]);
    assert!(b.next_or_free().is_empty());
    assert_eq!(b.lock().busy, 1, "nobody waits: the lane is free");
}

#[test]
fn the_bound_never_passes_64_charges_whatever_max_inflight_allows() {
    assert_eq!(batcher(1, 4096).max_charges, MAX_CHARGES);
    assert_eq!(batcher(1, 0).max_charges, 1);
}

#[test]
fn with_plain_windows_a_call_holds_the_charges_whose_commands_fit_in_max_inflight() {
    let b = batcher(1, 16);
    b.lock().busy = 1;
    let _r: Vec<_> = (0..6).map(|_| queue(&b, 1)).collect();
    b.set_windows(Windows::Plain);
    // Four commands a charge: 4 charges are 16 commands, the connection's cap.
    assert_eq!(b.next_or_free().len(), 4);
    b.set_windows(Windows::Lua);
    assert_eq!(b.next_or_free().len(), 2, "scripts: one command a charge, 16 a call");
    assert_eq!(batcher(1, 4096).call_bound(), MAX_CHARGES);
    let tiny = batcher(1, 2);
    tiny.set_windows(Windows::Plain);
    assert_eq!(tiny.call_bound(), 1, "never below one charge");
}

#[tokio::test]
async fn a_request_finding_a_lane_free_and_nobody_queued_goes_at_once() {
    let b = batcher(1, 64);
    let charge = Charge { key: "k".into(), params: PARAMS, hits: Hits::Consume(1) };
    // No server: the call fails (unreachable), but it was this request's own, on the lane.
    let deadline = Instant::now() + Duration::from_millis(200);
    let charged = b.charge(std::slice::from_ref(&charge), &Groups::each(), deadline).await;
    assert!(!charged.shared, "its own call counts for the breaker");
    assert!(charged.results[0].is_err());
    assert_eq!(b.lanes_in_use(), 0, "the lane is free again");
    assert_eq!(b.queued(), 0);
}
