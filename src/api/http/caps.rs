//! Caps on what one client may hold open at once: connections per client address
//! (`ENGAGE_MAX_CONNECTIONS_PER_IP`, counted by [`super::server`]) and WebSockets per
//! signed-in user (`ENGAGE_WS_MAX_PER_USER`, counted by the WebSocket session). The rates
//! bound how fast a client asks; these bound how much it holds, so that a client at its cap
//! is refused while every other client is still served. `ENGAGE_MAX_CONNECTIONS` stays the
//! instance's own bound, below its descriptors.
//!
//! A count per key in one map behind a mutex: one update per accepted connection (per
//! request behind a trusted proxy, per `connection_init` for users), far cheaper than the
//! accept or the request itself. Keys at zero are removed, so the map holds only clients
//! that hold something.

use std::{
    collections::HashMap,
    hash::Hash,
    sync::{Arc, Mutex},
};

/// What each key holds.
type Counts<K> = Arc<Mutex<HashMap<K, usize>>>;

/// Counts of what each key holds, up to `max` each.
pub(crate) struct Caps<K> {
    /// 0: no cap (nothing is counted).
    max: usize,
    counts: Counts<K>,
    /// The `cap` label of `engage_client_cap_refusals_total`.
    label: &'static str,
}

/// One place held under a cap; dropping it frees the place.
pub(crate) struct Held<K: Hash + Eq> {
    counted: Option<(Counts<K>, K)>,
}

impl<K: Hash + Eq + Clone> Caps<K> {
    pub(crate) fn new(max: usize, label: &'static str) -> Self {
        Self {
            max,
            counts: Arc::default(),
            label,
        }
    }

    pub(crate) fn max(&self) -> usize {
        self.max
    }

    /// A place for `key`, or `None` (counted as a refusal) when it holds `max` already.
    pub(crate) fn try_hold(&self, key: K) -> Option<Held<K>> {
        if self.max == 0 {
            return Some(Held { counted: None });
        }
        {
            let mut counts = self.counts.lock().expect("poisoned");
            let count = counts.entry(key.clone()).or_insert(0);
            if *count >= self.max {
                drop(counts);
                metrics::counter!("engage_client_cap_refusals_total", "cap" => self.label)
                    .increment(1);
                return None;
            }
            *count += 1;
        }
        Some(Held {
            counted: Some((self.counts.clone(), key)),
        })
    }

    /// What `key` holds now (tests).
    #[cfg(test)]
    fn held(&self, key: &K) -> usize {
        self.counts
            .lock()
            .expect("poisoned")
            .get(key)
            .copied()
            .unwrap_or(0)
    }
}

impl<K: Hash + Eq> Drop for Held<K> {
    fn drop(&mut self) {
        let Some((counts, key)) = self.counted.take() else {
            return;
        };
        let mut counts = counts.lock().expect("poisoned");
        if let Some(count) = counts.get_mut(&key) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_holds_at_most_its_cap_and_a_dropped_place_is_free_again() {
        let caps = Caps::new(2, "test");
        let first = caps.try_hold("a").unwrap();
        let _second = caps.try_hold("a").unwrap();
        assert!(caps.try_hold("a").is_none());
        assert!(caps.try_hold("b").is_some(), "another key is not affected");
        drop(first);
        assert_eq!(caps.held(&"a"), 1);
        let _third = caps.try_hold("a").unwrap();
        assert!(
            caps.counts.lock().unwrap().get("b").is_none(),
            "freed keys go"
        );
    }

    #[test]
    fn a_cap_of_zero_counts_nothing() {
        let caps = Caps::new(0, "test");
        let held: Vec<_> = (0..100).map(|_| caps.try_hold(1).unwrap()).collect();
        assert_eq!(caps.held(&1), 0);
        drop(held);
    }
}
