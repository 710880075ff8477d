use std::sync::Mutex;
use std::time::Duration;

use super::*;
use crate::algorithm::{Algorithm, Params};

const PARAMS: Params = Params {
    algorithm: Algorithm::Gcra,
    limit: 5,
    unit_us: 60_000_000,
    burst: 5,
    penalty_us: 0,
    period: None,
};
const DENIED: Decision = Decision { allowed: false, remaining: 0, reset_us: 5_000_000 };
const ALLOWED: Decision = Decision { allowed: true, remaining: 4, reset_us: 1 };

/// A Redis stand-in: denies every consume of a key starting with `over`, and every member
/// listed in `deny` (by batch position); records what it was sent; reports `refunds`.
#[derive(Default)]
struct Fake {
    deny: Vec<usize>,
    refunds: Vec<(Charge, Result<Decision, StoreError>)>,
    sent: Mutex<Vec<(Vec<String>, Groups)>>,
}

impl Remote for Fake {
    async fn charge(&self, batch: &[Charge], groups: &Groups, _deadline: Instant) -> Charged {
        let keys = batch.iter().map(|c| c.key.clone()).collect();
        self.sent.lock().expect("lock").push((keys, groups.clone()));
        let results = batch
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let over = c.key.starts_with("over") && matches!(c.hits, Hits::Consume(_));
                Ok(if over || self.deny.contains(&i) { DENIED } else { ALLOWED })
            })
            .collect();
        Charged { results, refunds: self.refunds.clone(), shared: false }
    }
}

fn consume(key: &str) -> Charge {
    Charge { key: key.into(), params: PARAMS, hits: Hits::Consume(1) }
}

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(5)
}

fn sent(store: &Guarded<Fake>) -> Vec<(Vec<String>, Groups)> {
    store.client().sent.lock().expect("lock").clone()
}

#[tokio::test]
async fn a_group_with_a_cached_denial_is_answered_locally() {
    let store = Guarded::new(Fake::default(), None);
    let first = store.charge(&[consume("a"), consume("over")], &Groups::from_ends(vec![2]), deadline()).await;
    assert_eq!(first, [Ok(ALLOWED), Ok(DENIED)]);
    assert_eq!(store.over_limit().len(), 1, "the denial is learned");

    let local = store.charge(&[consume("b"), consume("over")], &Groups::from_ends(vec![2]), deadline()).await;
    assert_eq!(local[0], Ok(NOT_EVALUATED));
    assert!(matches!(local[1], Ok(d) if !d.allowed && d.reset_us > 0));
    assert_eq!(sent(&store).len(), 1, "Redis was not asked");

    // The groups that can pass still go, regrouped: [x, over] local, [y, z] remote.
    let batch = [consume("x"), consume("over"), consume("y"), consume("z")];
    let mixed = store.charge(&batch, &Groups::from_ends(vec![2, 4]), deadline()).await;
    assert_eq!(mixed[0], Ok(NOT_EVALUATED));
    assert_eq!(&mixed[2..], [Ok(ALLOWED), Ok(ALLOWED)]);
    let last = sent(&store).pop().expect("sent");
    assert_eq!(last, (vec!["y".to_string(), "z".to_string()], Groups::from_ends(vec![2])));
}

#[tokio::test]
async fn a_group_with_a_refund_always_goes_to_redis() {
    let store = Guarded::new(Fake::default(), None);
    store.charge(&[consume("over")], &Groups::each(), deadline()).await;
    assert_eq!(store.over_limit().len(), 1);
    let refund = Charge { hits: Hits::Refund(1), ..consume("c") };
    let batch = [refund, consume("over")];
    let results = store.charge(&batch, &Groups::from_ends(vec![2]), deadline()).await;
    assert_eq!(results, [Ok(ALLOWED), Ok(DENIED)], "answered by Redis");
    assert_eq!(sent(&store).len(), 2);
}

#[tokio::test]
async fn only_the_first_member_of_a_bucket_in_its_group_teaches_a_denial() {
    // The second "k" is denied after the first's hit, which the denied group never applied.
    let store = Guarded::new(Fake { deny: vec![1], ..Fake::default() }, None);
    let results = store.charge(&[consume("k"), consume("k")], &Groups::from_ends(vec![2]), deadline()).await;
    assert_eq!(results, [Ok(ALLOWED), Ok(DENIED)]);
    assert!(store.over_limit().is_empty(), "nothing learned");
    // Alone (each charge its own group), the same answer is a real denial of the bucket.
    let store = Guarded::new(Fake { deny: vec![1], ..Fake::default() }, None);
    store.charge(&[consume("k"), consume("k")], &Groups::each(), deadline()).await;
    assert_eq!(store.over_limit().len(), 1);
}

#[tokio::test]
async fn refunds_the_client_made_are_learned_as_refunds() {
    // Whatever its key, a refund the client reports goes through the cache's refund rule:
    // here it drops the denial learned from the same call (as it would one it overtook).
    let refund = Charge { hits: Hits::Refund(1), ..consume("over-r") };
    let fake = Fake { refunds: vec![(refund, Ok(ALLOWED))], ..Fake::default() };
    let store = Guarded::new(fake, None);
    store.charge(&[consume("over-r"), consume("b")], &Groups::from_ends(vec![2]), deadline()).await;
    assert!(store.over_limit().is_empty(), "the refund dropped the denial");
}
