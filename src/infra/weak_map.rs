//! A map of values that live only as long as someone else holds them: the registries that
//! let many holders share one value (the channels an instance follows, the renderings of
//! equal subscription templates) without keeping it alive after the last holder left.

use std::{
    borrow::Borrow,
    collections::HashMap,
    hash::Hash,
    sync::{Arc, Weak},
};

/// Weak references by key. Entries whose value is gone are swept out when the map has
/// doubled since the last sweep, so that sweeping costs a constant per insertion and the map
/// stays within twice the values held.
pub(crate) struct WeakMap<K, V: ?Sized> {
    entries: HashMap<K, Weak<V>>,
    sweep_at: usize,
}

impl<K, V: ?Sized> Default for WeakMap<K, V> {
    fn default() -> Self {
        Self {
            entries: HashMap::new(),
            sweep_at: 0,
        }
    }
}

impl<K: Eq + Hash, V: ?Sized> WeakMap<K, V> {
    /// The value under `key`, if someone still holds it.
    pub(crate) fn get<Q>(&self, key: &Q) -> Option<Arc<V>>
    where
        K: Borrow<Q>,
        Q: Eq + Hash + ?Sized,
    {
        self.entries.get(key).and_then(Weak::upgrade)
    }

    /// Puts `value` under `key` (without holding it).
    pub(crate) fn insert(&mut self, key: K, value: &Arc<V>) {
        if self.entries.len() >= self.sweep_at {
            self.entries.retain(|_, value| value.strong_count() > 0);
            self.sweep_at = (self.entries.len() * 2).max(64);
        }
        self.entries.insert(key, Arc::downgrade(value));
    }

    /// The value under `key` if someone still holds it, else `make()`'s, put there.
    pub(crate) fn get_or_insert_with(&mut self, key: K, make: impl FnOnce() -> Arc<V>) -> Arc<V> {
        if let Some(value) = self.get(&key) {
            return value;
        }
        let value = make();
        self.insert(key, &value);
        value
    }

    /// How many values someone still holds.
    pub(crate) fn held(&self) -> usize {
        self.entries
            .values()
            .filter(|value| value.strong_count() > 0)
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_is_found_while_held_and_the_map_stays_within_twice_the_values_held() {
        let mut map: WeakMap<u32, str> = WeakMap::default();
        let kept: Arc<str> = "kept".into();
        map.insert(0, &kept);
        for key in 1..10_000 {
            let passing: Arc<str> = "passing".into();
            map.insert(key, &passing);
            assert_eq!(map.get(&key).as_deref(), Some("passing"));
        }
        assert_eq!(map.get(&0).as_deref(), Some("kept"));
        assert_eq!(map.get(&1), None);
        assert_eq!(map.held(), 1);
        assert!(map.entries.len() <= 64, "{} entries", map.entries.len());
    }
}
