//! Small in-process caches. [`TtlCache`]: entries that live for a fixed time, for reads that
//! many requests repeat and that may be a moment old (the first page of an item's remarks),
//! and for work that gives the same result every time (parsing a GraphQL document).
//! [`RecentSet`]: the keys met lately, for work done once per key (writing a user's row).
//!
//! A mutex around two maps rather than a concurrent cache crate: entries are few and short-
//! lived, lookups hold the lock for a hash probe or two and an `Arc` clone, and the whole
//! thing stays readable in one screen.
//!
//! Their maps hash with std's SipHash unless told otherwise: it keeps a client who picks
//! the keys (documents, tokens) from making every key collide. Keys engage gives out itself
//! (user ids) hash with [`IdHasher`].

use std::{
    borrow::Borrow,
    collections::HashMap,
    hash::{BuildHasher, Hash, RandomState},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

/// The hasher of maps keyed by ids engage gives out, which no client chooses: foldhash,
/// still seeded at random per map, and a fraction of SipHash's work on an integer. A
/// leaderboard page looks up each of its twenty users three or four times; its hashing went
/// from 45,500 to 29,700 instructions (BENCHMARKS.md, "What each change bought").
pub(crate) type IdHasher = foldhash::fast::RandomState;

/// Entries that expire `ttl` after they were stored, at most `capacity` of them (see
/// [`Generations`]): a burst of new keys pushes out the entries not read longest.
pub(crate) struct TtlCache<K, V, S = RandomState> {
    ttl: Duration,
    entries: Mutex<Entries<K, V, S>>,
}

struct Entries<K, V, S> {
    kept: Generations<K, (Instant, Arc<V>), S>,
    /// When expired entries were last dropped. They are dropped once a `ttl`: a burst of
    /// keys that never comes back (a load of many users, then quiet) would otherwise hold
    /// its memory until newer keys pushed it out.
    swept_at: Instant,
}

impl<K: Eq + Hash, V, S: BuildHasher + Default> TtlCache<K, V, S> {
    pub(crate) fn new(ttl: Duration, capacity: usize) -> Self {
        Self {
            ttl,
            entries: Mutex::new(Entries {
                kept: Generations::new(capacity),
                swept_at: Instant::now(),
            }),
        }
    }

    pub(crate) fn get<Q>(&self, key: &Q) -> Option<Arc<V>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut entries = self.entries.lock().expect("poisoned");
        let (stored_at, value) = entries.kept.get(key)?;
        (stored_at.elapsed() < self.ttl).then(|| value.clone())
    }

    pub(crate) fn insert(&self, key: K, value: Arc<V>) {
        if self.ttl.is_zero() {
            return;
        }
        let mut entries = self.entries.lock().expect("poisoned");
        let now = Instant::now();
        if now - entries.swept_at >= self.ttl {
            entries.swept_at = now;
            entries
                .kept
                .retain(|_, (stored_at, _)| now - *stored_at < self.ttl);
        }
        entries.kept.insert(key, (now, value));
    }

    /// Forgets the entries `stale` picks (a write made them wrong).
    pub(crate) fn forget(&self, stale: impl Fn(&K) -> bool) {
        self.entries
            .lock()
            .expect("poisoned")
            .kept
            .retain(|key, _| !stale(key));
    }
}

/// The keys inserted or found lately, at most `capacity` of them (see [`Generations`]): a
/// burst of new keys forgets the keys not met longest first.
pub(crate) struct RecentSet<K, S = RandomState> {
    kept: Generations<K, (), S>,
}

impl<K: Eq + Hash, S: BuildHasher + Default> RecentSet<K, S> {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            kept: Generations::new(capacity),
        }
    }

    /// Whether `key` is remembered; it counts as met now.
    pub(crate) fn contains(&mut self, key: &K) -> bool {
        self.kept.get(key).is_some()
    }

    pub(crate) fn insert(&mut self, key: K) {
        self.kept.insert(key, ());
    }
}

/// A map of at most `capacity` entries in two generations of half of it: once the newer one
/// is full, it becomes the older one and the older one is dropped, and an entry found in
/// the older one moves to the newer one. So an entry found again within half the capacity
/// of other keys is never dropped.
///
/// Rejected: clearing one map when it fills. Every entry was dropped at once, and for the
/// users' first sights that meant every active user written again together: the request
/// threads waited for room in the full queue of writes (the like route's p99 went from 25
/// to 145–216 ms right after 100,000 new users had signed in).
struct Generations<K, V, S> {
    newer: HashMap<K, V, S>,
    older: HashMap<K, V, S>,
    generation: usize,
}

impl<K: Eq + Hash, V, S: BuildHasher + Default> Generations<K, V, S> {
    fn new(capacity: usize) -> Self {
        Self {
            newer: HashMap::default(),
            older: HashMap::default(),
            generation: (capacity / 2).max(1),
        }
    }

    fn get<Q>(&mut self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if !self.newer.contains_key(key) {
            let (key, value) = self.older.remove_entry(key)?;
            self.insert(key, value);
        }
        self.newer.get(key)
    }

    fn insert(&mut self, key: K, value: V) {
        if self.newer.len() >= self.generation && !self.newer.contains_key(&key) {
            self.older = std::mem::take(&mut self.newer);
        }
        self.older.remove(&key);
        self.newer.insert(key, value);
    }

    fn retain(&mut self, mut keep: impl FnMut(&K, &mut V) -> bool) {
        self.newer.retain(&mut keep);
        self.older.retain(keep);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.newer.len() + self.older.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recent_set_forgets_the_keys_not_met_longest_first() {
        let mut set: RecentSet<_> = RecentSet::new(6);
        for key in 0..4 {
            set.insert(key); // 0, 1 and 2 fill the newer half; 3 starts the next one
        }
        assert!(set.contains(&0), "met again: moved to the newer half");
        set.insert(4);
        set.insert(5); // the newer half (3, 0, 4) becomes the older one: 1 and 2 go
        assert!(
            !set.contains(&1) && !set.contains(&2),
            "not met since: forgotten"
        );
        for key in [0, 3, 4, 5] {
            assert!(set.contains(&key));
        }
        assert!(set.kept.len() <= 6);
    }

    #[test]
    fn a_recent_set_keeps_what_is_met_through_a_burst_of_new_keys() {
        let mut set: RecentSet<_> = RecentSet::new(1000);
        set.insert(-1);
        for key in 0..10_000 {
            set.insert(key);
            assert!(
                set.contains(&-1),
                "met after every new key: never forgotten"
            );
            assert!(set.kept.len() <= 1000);
        }
        assert!(!set.contains(&0), "met once, 10,000 keys ago");
    }

    #[test]
    fn entries_expire_and_can_be_forgotten() {
        let cache: TtlCache<_, _> = TtlCache::new(Duration::from_millis(50), 10);
        cache.insert(1, Arc::new("one"));
        cache.insert(2, Arc::new("two"));
        assert_eq!(cache.get(&1).as_deref(), Some(&"one"));
        cache.forget(|key| *key == 1);
        assert_eq!(cache.get(&1), None);
        assert_eq!(cache.get(&2).as_deref(), Some(&"two"));
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(cache.get(&2), None);
    }

    #[test]
    fn expired_entries_are_dropped_once_a_ttl_even_when_the_cache_is_not_full() {
        let cache: TtlCache<_, _> = TtlCache::new(Duration::from_millis(50), 1000);
        for key in 0..10 {
            cache.insert(key, Arc::new(key));
        }
        std::thread::sleep(Duration::from_millis(60));
        cache.insert(10, Arc::new(10));
        assert_eq!(cache.entries.lock().unwrap().kept.len(), 1);
    }

    #[test]
    fn a_full_cache_keeps_what_is_read_through_a_burst_of_new_keys() {
        let cache: TtlCache<_, _> = TtlCache::new(Duration::from_secs(60), 1000);
        cache.insert(-1, Arc::new(-1));
        for key in 0..10_000 {
            cache.insert(key, Arc::new(key));
            assert_eq!(
                cache.get(&-1).as_deref(),
                Some(&-1),
                "read after every new key"
            );
            assert!(cache.entries.lock().unwrap().kept.len() <= 1000);
        }
        assert_eq!(cache.get(&0), None, "read once, 10,000 keys ago");
        assert_eq!(cache.get(&9_999).as_deref(), Some(&9_999));
    }

    #[test]
    fn a_full_cache_does_not_grow() {
        let cache: TtlCache<_, _> = TtlCache::new(Duration::from_secs(60), 3);
        for key in 0..10 {
            cache.insert(key, Arc::new(key));
        }
        assert!(cache.entries.lock().unwrap().kept.len() <= 3);
        assert_eq!(cache.get(&9).as_deref(), Some(&9));
    }
}
