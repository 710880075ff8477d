use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Semaphore;

use super::*;
use crate::algorithm::{Algorithm, Hits, Params};

const PARAMS: Params = Params {
    algorithm: Algorithm::FixedWindow,
    limit: 3,
    unit_us: 60_000_000,
    burst: 0,
    penalty_us: 0,
    period: None,
};

/// A Redis stand-in: each call waits for a permit (so a test holds it in flight), then
/// admits consumes in order against one count per key, up to `PARAMS.limit`.
struct Gate {
    permits: Semaphore,
    calls: Mutex<Vec<(Vec<String>, Groups)>>,
    counts: Mutex<HashMap<String, u64>>,
}

impl Default for Gate {
    fn default() -> Gate {
        Gate { permits: Semaphore::new(0), calls: Mutex::default(), counts: Mutex::default() }
    }
}

impl Remote for Gate {
    async fn charge(&self, batch: &[Charge], groups: &Groups, _deadline: Instant) -> Charged {
        self.calls
            .lock()
            .expect("lock")
            .push((batch.iter().map(|c| c.key.clone()).collect(), groups.clone()));
        if let Ok(permit) = self.permits.acquire().await {
            permit.forget();
        }
        let mut counts = self.counts.lock().expect("lock");
        let results: Vec<Result<Decision, StoreError>> = batch
            .iter()
            .map(|c| {
                let count = counts.entry(c.key.clone()).or_default();
                let n = match c.hits {
                    Hits::Consume(n) => n,
                    _ => 0,
                };
                let allowed = *count + n <= PARAMS.limit;
                if allowed {
                    *count += n;
                }
                Ok(Decision { allowed, remaining: PARAMS.limit - *count, reset_us: 1 })
            })
            .collect();
        Charged::from(results)
    }
}

struct Fixture {
    table: Arc<Coalescer>,
    gate: Arc<Gate>,
}

impl Fixture {
    fn new() -> Fixture {
        Fixture::with_max_batch(16)
    }

    fn with_max_batch(max_batch: usize) -> Fixture {
        Fixture { table: Arc::new(Coalescer::new(max_batch)), gate: Arc::new(Gate::default()) }
    }

    /// One request charging `key`, in a task of its own.
    fn request(&self, key: &str, deadline: Instant) -> tokio::task::JoinHandle<Charged> {
        let (table, gate) = (self.table.clone(), self.gate.clone());
        let batch = vec![Charge { key: key.into(), params: PARAMS, hits: Hits::Consume(1) }];
        tokio::spawn(async move { charge(&table, &gate, &batch, &Groups::each(), deadline).await })
    }

    fn calls(&self) -> Vec<(Vec<String>, Groups)> {
        self.gate.calls.lock().expect("lock").clone()
    }

    fn waiting(&self) -> usize {
        self.table.waiting()
    }
}

/// Lets the other tasks run until `ready` holds (a readiness poll, no sleep).
async fn until(mut ready: impl FnMut() -> bool) {
    for _ in 0..10_000 {
        if ready() {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("condition never held");
}

fn far() -> Instant {
    Instant::now() + Duration::from_secs(60)
}

fn allowed(charged: &Charged) -> Vec<bool> {
    charged.results.iter().map(|r| matches!(r, Ok(d) if d.allowed)).collect()
}

#[tokio::test]
async fn distinct_keys_each_send_their_own_call_and_leave_nothing_behind() {
    let f = Fixture::new();
    f.gate.permits.add_permits(100);
    let answers: Vec<_> = ["a", "b", "c"].iter().map(|k| f.request(k, far())).collect();
    for answer in answers {
        assert_eq!(allowed(&answer.await.expect("task")), [true]);
    }
    assert_eq!(f.calls().len(), 3);
    assert!(f.calls().iter().all(|(_, groups)| groups.is_each()));
    assert_eq!(f.table.in_flight(), 0);
}

#[tokio::test]
async fn charges_behind_a_call_in_flight_go_as_one_batch_in_arrival_order() {
    let f = Fixture::new();
    let lead = f.request("hot", far());
    until(|| f.calls().len() == 1).await;
    let waiters: Vec<_> = (0..4).map(|_| f.request("hot", far())).collect();
    until(|| f.waiting() == 4).await;
    f.gate.permits.add_permits(2);
    assert_eq!(allowed(&lead.await.expect("task")), [true]);
    let mut answers = Vec::new();
    for waiter in waiters {
        let charged = waiter.await.expect("task");
        answers.push((allowed(&charged)[0], charged.shared));
    }
    // Limit 3: the lead and the first two of the batch; the batch's first counts the call.
    assert_eq!(answers, [(true, false), (true, true), (false, true), (false, true)]);
    let calls = f.calls();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(calls[1].0.len(), 4);
    assert!(calls[1].1.is_coalesced());
    until(|| f.table.in_flight() == 0).await;
}

#[tokio::test]
async fn cancelled_waiters_are_withdrawn_and_a_cancelled_lead_strands_nobody() {
    let f = Fixture::new();
    let lead = f.request("hot", far());
    until(|| f.calls().len() == 1).await;
    let waiters: Vec<_> = (0..4).map(|_| f.request("hot", far())).collect();
    until(|| f.waiting() == 4).await;
    // Cancel two waiters and the lead itself (its call may have run: today's rule).
    waiters[1].abort();
    waiters[3].abort();
    lead.abort();
    until(|| f.calls().len() == 2).await;
    f.gate.permits.add_permits(1);
    let survivors = [&waiters[0], &waiters[2]];
    until(|| survivors.iter().all(|w| w.is_finished())).await;
    let mut waiters = waiters.into_iter();
    let first = waiters.next().expect("waiter").await.expect("answered");
    let third = waiters.nth(1).expect("waiter").await.expect("answered");
    assert_eq!((allowed(&first), allowed(&third)), (vec![true], vec![true]));
    let calls = f.calls();
    assert_eq!(calls[1].0, ["hot", "hot"], "only the two survivors were sent");
    until(|| f.table.in_flight() == 0).await;
    assert_eq!(f.gate.counts.lock().expect("lock")["hot"], 2, "the cancelled were not charged");
}

#[tokio::test(start_paused = true)]
async fn each_waiter_keeps_its_own_deadline_and_a_late_one_is_not_sent() {
    let f = Fixture::new();
    let lead = f.request("hot", far());
    until(|| f.calls().len() == 1).await;
    let soon = f.request("hot", Instant::now() + Duration::from_millis(5));
    let patient = f.request("hot", far());
    until(|| f.waiting() == 2).await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    let timed_out = soon.await.expect("task");
    assert_eq!(timed_out.results, [Err(StoreError::Timeout)]);
    f.gate.permits.add_permits(2);
    assert_eq!(allowed(&lead.await.expect("task")), [true]);
    assert_eq!(allowed(&patient.await.expect("task")), [true]);
    let calls = f.calls();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[1].0, ["hot"], "the waiter past its deadline was withdrawn");
    assert!(calls[1].1.is_each(), "a batch of one is a plain call");
}

#[tokio::test]
async fn a_request_of_several_charges_sends_all_its_own_and_leads_the_free_keys() {
    let f = Fixture::new();
    let lead = f.request("hot", far());
    until(|| f.calls().len() == 1).await;
    let (table, gate) = (f.table.clone(), f.gate.clone());
    let several = tokio::spawn(async move {
        let batch: Vec<Charge> = ["cold", "hot"]
            .iter()
            .map(|k| Charge { key: (*k).into(), params: PARAMS, hits: Hits::Consume(1) })
            .collect();
        charge(&table, &gate, &batch, &Groups::each(), far()).await
    });
    // Both go at once, "hot" too although a call for it is in flight: no second round trip.
    until(|| f.calls().len() == 2).await;
    assert_eq!(f.calls()[1].0, ["cold", "hot"]);
    assert_eq!(f.waiting(), 0);
    // A single charge of "cold" now queues behind the request's call.
    let behind = f.request("cold", far());
    until(|| f.waiting() == 1).await;
    f.gate.permits.add_permits(3);
    lead.await.expect("task");
    let charged = several.await.expect("task");
    assert_eq!(allowed(&charged), [true, true]);
    assert!(!charged.shared, "it sent a call of its own");
    assert!(allowed(&behind.await.expect("task"))[0]);
    assert_eq!(f.calls().len(), 3, "the queued charge went in a call of its own after it");
    until(|| f.table.in_flight() == 0).await;
}

#[tokio::test]
async fn joint_groups_are_never_coalesced() {
    let f = Fixture::new();
    f.gate.permits.add_permits(10);
    let batch: Vec<Charge> =
        (0..2).map(|_| Charge { key: "hot".into(), params: PARAMS, hits: Hits::Consume(1) }).collect();
    let charged = charge(&f.table, &f.gate, &batch, &Groups::from_ends(vec![2]), far()).await;
    assert_eq!(charged.results.len(), 2);
    assert_eq!(f.table.in_flight(), 0, "a joint group takes no turn");
}

#[tokio::test]
async fn a_batch_holds_at_most_max_batch_charges_and_the_rest_go_next() {
    let f = Fixture::with_max_batch(2);
    let lead = f.request("hot", far());
    until(|| f.calls().len() == 1).await;
    let waiters: Vec<_> = (0..5).map(|_| f.request("hot", far())).collect();
    until(|| f.waiting() == 5).await;
    f.gate.permits.add_permits(10);
    lead.await.expect("task");
    for waiter in waiters {
        waiter.await.expect("task");
    }
    let sizes: Vec<usize> = f.calls().iter().map(|(keys, _)| keys.len()).collect();
    assert_eq!(sizes, [1, 2, 2, 1], "the lead, then batches of at most 2 in arrival order");
    until(|| f.table.in_flight() == 0).await;
}
