//! Published counters watched once per instance: for each channel one [`counter_changes`]
//! stream (current value first, then coalesced changes, re-read after a lag or a reconnect),
//! whose every value is handed to all the channel's [`CounterWatcher`]s in turn, by the
//! one task that follows the channel.
//!
//! Per-subscriber streams made every change wake each subscriber's task and run its own
//! coalescing, on the way to the same bytes. Here a change costs one wake per channel,
//! and the watchers (WebSocket subscribers, see `api::live`) write it out
//! without waiting: a watcher whose socket cannot take it keeps the latest value per id and
//! sends it once the socket drained, so a slow client holds one value per watched counter,
//! never a queue.

use std::{
    collections::{HashMap, HashSet},
    future::Future,
    sync::{Arc, Mutex},
};

use futures::StreamExt;
use tokio_util::task::AbortOnDropHandle;

use super::counter_changes;
use crate::infra::{error::AppResult, weak_map::WeakMap, Infra};

/// Who is handed a channel's values.
pub(crate) trait CounterWatcher: Send + Sync + 'static {
    /// Counter `id`'s value, in the order they came; must not wait.
    fn deliver(&self, id: i64, value: i64);
}

/// The channels this instance follows for one kind of counter, by counter id.
#[derive(Default)]
pub struct SharedCounters {
    /// Each channel lives as long as a watch holds it.
    channels: tokio::sync::Mutex<WeakMap<i64, Channel>>,
}

struct Channel {
    state: Mutex<ChannelState>,
    /// The task following the channel; it ends with the last watch. Set once the channel is
    /// in its `Arc` (not by `Arc::new_cyclic`): the task upgrades its weak reference on its
    /// first value, which may come before a cyclic construction had returned.
    task: std::sync::OnceLock<AbortOnDropHandle<()>>,
}

#[derive(Default)]
struct ChannelState {
    /// The latest value, once read.
    last: Option<i64>,
    watchers: Vec<(u64, Arc<dyn CounterWatcher>)>,
    next_key: u64,
}

impl Channel {
    fn publish(&self, id: i64, value: i64) {
        let mut state = self.state.lock().expect("poisoned");
        state.last = Some(value);
        for (_, watcher) in &state.watchers {
            watcher.deliver(id, value);
        }
    }

    /// Adds a watcher, handing it the latest value at once (under the same lock as the
    /// changes, so that it cannot be handed an older value after a newer one).
    fn add(&self, id: i64, watcher: Arc<dyn CounterWatcher>) -> u64 {
        let mut state = self.state.lock().expect("poisoned");
        if let Some(value) = state.last {
            watcher.deliver(id, value);
        }
        state.next_key += 1;
        let key = state.next_key;
        state.watchers.push((key, watcher));
        key
    }

    fn remove(&self, key: u64) {
        let removed = {
            let mut state = self.state.lock().expect("poisoned");
            let at = state.watchers.iter().position(|(k, _)| *k == key);
            at.map(|at| state.watchers.swap_remove(at))
        };
        drop(removed); // outside the lock: a watcher may own what locks it again
    }
}

/// A watcher's places in the channels it watches; dropping it leaves them, and a channel
/// left by its last watcher is no longer followed.
pub(crate) struct Watch {
    places: Vec<(Arc<Channel>, u64)>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        for (channel, key) in &self.places {
            channel.remove(*key);
        }
    }
}

impl SharedCounters {
    /// Hands `watcher` the current value of each counter, then every change. `channel` names
    /// a counter's channel and `read` reads current values (both used for counters not
    /// followed yet); a failed first read is the error.
    pub(crate) async fn watch<R, Fut>(
        &self,
        infra: &Infra,
        ids: &[i64],
        channel: impl Fn(i64) -> String,
        read: R,
        watcher: Arc<dyn CounterWatcher>,
    ) -> AppResult<Watch>
    where
        R: Fn(Vec<i64>) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = AppResult<HashMap<i64, i64>>> + Send + 'static,
    {
        let mut places = Vec::with_capacity(ids.len());
        for &id in ids {
            let followed = self.follow(infra, id, &channel, read.clone()).await?;
            let key = followed.add(id, watcher.clone());
            places.push((followed, key));
        }
        Ok(Watch { places })
    }

    /// The channel of counter `id`, followed from now on if it was not.
    async fn follow<R, Fut>(
        &self,
        infra: &Infra,
        id: i64,
        channel: &impl Fn(i64) -> String,
        read: R,
    ) -> AppResult<Arc<Channel>>
    where
        R: Fn(Vec<i64>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = AppResult<HashMap<i64, i64>>> + Send + 'static,
    {
        // Held while a channel is set up (a SUBSCRIBE and a read), so that two watchers
        // of a new counter cannot follow it twice.
        let mut channels = self.channels.lock().await;
        if let Some(followed) = channels.get(&id) {
            return Ok(followed);
        }
        let name = channel(id);
        let changes = counter_changes(infra, vec![id], move |_| name.clone(), read).await?;
        let followed = Arc::new(Channel {
            state: Mutex::default(),
            task: std::sync::OnceLock::new(),
        });
        let weak = Arc::downgrade(&followed);
        let task = tokio::spawn(async move {
            let mut changes = std::pin::pin!(changes);
            while let Some((id, value)) = changes.next().await {
                let Some(followed) = weak.upgrade() else {
                    return;
                };
                followed.publish(id, value);
            }
        });
        let _ = followed.task.set(AbortOnDropHandle::new(task));
        channels.insert(id, &followed);
        Ok(followed)
    }

    /// Which of these counters are followed now.
    pub(crate) async fn followed_among(&self, ids: &[i64]) -> HashSet<i64> {
        let channels = self.channels.lock().await;
        ids.iter()
            .copied()
            .filter(|id| channels.get(id).is_some())
            .collect()
    }

    /// Channels followed now (tests).
    pub async fn followed(&self) -> usize {
        self.channels.lock().await.held()
    }
}
