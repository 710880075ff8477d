//! The wait before reconnecting after a broken stream, as the peer computes it
//! (jpillora/backoff v1.0.0 `ForAttempt`): `initial × factor^attempt`, with jitter a uniform
//! draw between `initial` and that, clamped to `[initial, max]`. With the peer's defaults
//! (factor 0.5) every wait is exactly `initial`, 10 s.

use std::time::Duration;

use rand::Rng;

use super::settings::BackoffSettings;

/// The attempt counter; `reset` after a stream that delivered a response.
#[derive(Debug)]
pub struct Backoff {
    settings: BackoffSettings,
    attempt: i32,
}

impl Backoff {
    pub fn new(settings: BackoffSettings) -> Backoff {
        Backoff { settings, attempt: 0 }
    }

    /// The next wait.
    pub fn next(&mut self) -> Duration {
        let wait = self.at(self.attempt, rand::rng().random::<f64>());
        self.attempt = self.attempt.saturating_add(1);
        wait
    }

    /// Back to the first wait (the peer never resets; with its defaults that changes nothing).
    pub fn reset(&mut self) {
        self.attempt = 0;
    }

    /// The wait of `attempt` for the draw `random` in [0, 1).
    fn at(&self, attempt: i32, random: f64) -> Duration {
        let (min, max) = (self.settings.initial.as_secs_f64(), self.settings.max.as_secs_f64());
        if min >= max {
            return self.settings.max;
        }
        let mut wait = min * self.settings.factor.powi(attempt);
        if self.settings.jitter {
            wait = random * (wait - min) + min;
        }
        if !wait.is_finite() {
            return self.settings.max;
        }
        Duration::from_secs_f64(wait.clamp(min, max))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peer_defaults_wait_ten_seconds_every_time() {
        let backoff = Backoff::new(BackoffSettings::default());
        for attempt in [0, 1, 5, 100] {
            for random in [0.0, 0.5, 0.999] {
                assert_eq!(backoff.at(attempt, random), Duration::from_secs(10));
            }
        }
    }

    #[test]
    fn a_factor_above_one_grows_with_jitter_up_to_max() {
        let settings = BackoffSettings { factor: 2.0, ..BackoffSettings::default() };
        let backoff = Backoff::new(settings);
        assert_eq!(backoff.at(1, 0.0), Duration::from_secs(10));
        assert_eq!(backoff.at(1, 0.5), Duration::from_secs(15));
        assert_eq!(backoff.at(2, 0.75), Duration::from_millis(32_500));
        assert_eq!(backoff.at(10, 0.9), Duration::from_secs(60));
        assert_eq!(backoff.at(i32::MAX, 0.0), Duration::from_secs(60));
    }
}
