//! Exponential back-off with jitter, shared by every loop that retries a backing service.

use std::time::Duration;

use rand::Rng;

/// `base` scaled by a random factor in [0.5, 1.5), so that instances that failed together
/// do not retry together.
pub(crate) fn jittered(base: Duration) -> Duration {
    base.mul_f64(rand::rng().random_range(0.5..1.5))
}

/// Doubling delays from `initial` up to `max`.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    initial: Duration,
    max: Duration,
    current: Duration,
}

impl Backoff {
    pub(crate) fn new(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max,
            current: initial,
        }
    }

    /// The next delay (with jitter); each call doubles the base up to the maximum.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let delay = jittered(self.current);
        self.current = (self.current * 2).min(self.max);
        delay.min(self.max)
    }

    pub(crate) fn reset(&mut self) {
        self.current = self.initial;
    }
}
