use std::collections::HashMap;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;

/// Ranks 0..n drawn with probability ∝ 1 / (rank + 1)^s (inverse of the cumulative sum).
struct Zipf {
    cumulative: Vec<f64>,
}

impl Zipf {
    fn new(n: usize, s: f64) -> Zipf {
        let mut sum = 0.0;
        let cumulative = (1..=n)
            .map(|rank| {
                sum += 1.0 / (rank as f64).powf(s);
                sum
            })
            .collect();
        Zipf { cumulative }
    }

    fn sample(&self, rng: &mut StdRng) -> usize {
        let total = self.cumulative.last().copied().unwrap_or(0.0);
        let x = rng.random::<f64>() * total;
        self.cumulative.partition_point(|c| *c < x).min(self.cumulative.len() - 1)
    }
}

/// A well-spread hash of a key number (the service hashes bucket keys with SipHash).
fn hash(key: usize) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    BuildHasherDefault::<DefaultHasher>::default().hash_one(key)
}

fn record(sketch: &Sketch, now: u64, key: usize) {
    sketch.record(now, hash(key), |identity| identity.key = format!("k{key}"));
}

fn count_of(reading: &Reading, key: usize) -> Option<f64> {
    let name = format!("k{key}");
    reading.buckets.iter().find(|b| b.identity.key == name).map(|b| b.count)
}

#[test]
fn heavy_hitters_of_a_zipf_stream_are_found_with_their_counts() {
    let zipf = Zipf::new(100_000, 1.1);
    let mut rng = StdRng::seed_from_u64(7);
    let sketch = Sketch::new(1);
    let mut truth: HashMap<usize, u64> = HashMap::new();
    const DRAWS: usize = 200_000;
    for _ in 0..DRAWS {
        let key = zipf.sample(&mut rng);
        *truth.entry(key).or_default() += 1;
        record(&sketch, 10, key);
    }
    let reading = sketch.read(10);
    assert_eq!(reading.total, DRAWS as f64);
    assert!(reading.buckets.len() <= SHARDS * SLOTS);
    let mut busiest: Vec<(usize, u64)> = truth.into_iter().collect();
    busiest.sort_by_key(|b| std::cmp::Reverse(b.1));
    for (rank, &(key, true_count)) in busiest.iter().take(10).enumerate() {
        let position = reading.buckets.iter().position(|b| b.identity.key == format!("k{key}"));
        let position =
            position.unwrap_or_else(|| panic!("rank {rank} (key {key}, {true_count} hits) missing"));
        assert!(position < 15, "rank {rank} shown at {position}");
        let count = reading.buckets[position].count;
        // A lower bound, and close: these buckets hold their slot from early on.
        assert!(count <= true_count as f64, "rank {rank}: {count} > {true_count}");
        assert!(count >= 0.95 * true_count as f64, "rank {rank}: {count} of {true_count}");
    }
    let shares = sketch.shares(10, 10);
    assert_eq!(shares.len(), 10);
    assert!(shares.windows(2).all(|w| w[0] >= w[1]), "{shares:?}");
    let first = busiest[0].1 as f64 / DRAWS as f64;
    assert!((shares[0] - first).abs() < 0.01, "{} vs {first}", shares[0]);
}

#[test]
fn uniform_traffic_shows_small_counts_and_memory_stays_bounded() {
    let sketch = Sketch::new(1);
    for key in 0..100_000 {
        record(&sketch, 5, key);
    }
    let reading = sketch.read(5);
    assert_eq!(reading.total, 100_000.0);
    assert!(reading.buckets.len() <= SHARDS * SLOTS);
    // Inherited counts are not shown: every distinct key was seen once.
    assert!(reading.buckets.iter().all(|b| b.count == 1.0), "{:?}", reading.buckets.first());
    // A busy key arriving after the churn still climbs to the top.
    for _ in 0..2_000 {
        record(&sketch, 5, 1_000_000);
        record(&sketch, 5, 200_000 + rand::random_range(0..1_000_000));
    }
    let reading = sketch.read(5);
    assert_eq!(reading.buckets[0].identity.key, "k1000000");
    assert!(reading.buckets[0].count >= 1_500.0, "{}", reading.buckets[0].count);
}

#[test]
fn counts_slide_out_of_the_window() {
    let sketch = Sketch::new(0);
    for _ in 0..600 {
        record(&sketch, 10, 1);
    }
    // Young: the counts cover the sketch's age.
    let young = sketch.read(30);
    assert_eq!(young.since_seconds, 30);
    assert_eq!(count_of(&young, 1), Some(600.0));
    // Half-way through the next window, half the previous one counts.
    let next = sketch.read(WINDOW_SECONDS + WINDOW_SECONDS / 2);
    assert_eq!(next.since_seconds, WINDOW_SECONDS);
    assert_eq!(count_of(&next, 1), Some(300.0));
    assert_eq!(next.total, 300.0);
    // Two windows on, nothing is left, and another bucket takes over.
    assert!(sketch.read(2 * WINDOW_SECONDS).buckets.is_empty());
    record(&sketch, 2 * WINDOW_SECONDS, 2);
    let later = sketch.read(2 * WINDOW_SECONDS);
    assert_eq!(later.buckets.len(), 1);
    assert_eq!(count_of(&later, 2), Some(1.0));
    assert_eq!(later.total, 1.0);
}

#[test]
fn identities_are_filled_once_per_slot_and_reused() {
    let sketch = Sketch::new(0);
    let mut fills = 0;
    for _ in 0..100 {
        sketch.record(1, hash(9), |identity| {
            fills += 1;
            identity.key.clear();
            identity.key.push_str("k9");
        });
    }
    assert_eq!(fills, 1, "a bucket in the table is only counted");
    assert_eq!(sketch.read(1).buckets[0].count, 100.0);
}

#[test]
fn a_batch_counts_as_its_records_in_order_would() {
    // Requests of 16 descriptors over 3,000 keys (slots change hands) across two epochs.
    let mut rng = StdRng::seed_from_u64(11);
    let (one_by_one, batched) = (Sketch::new(0), Sketch::new(0));
    for request in 0..2_000u64 {
        let now = request / 20;
        let keys: Vec<usize> = (0..16).map(|_| rng.random_range(0..3_000)).collect();
        for &key in &keys {
            record(&one_by_one, now, key);
        }
        let buckets: Vec<(u64, usize)> = keys.iter().map(|&key| (hash(key), key)).collect();
        batched.record_all(now, &buckets, |key, identity| identity.key = format!("k{key}"));
    }
    for now in [99, 100, 130] {
        assert_eq!(one_by_one.read(now), batched.read(now));
    }
}
