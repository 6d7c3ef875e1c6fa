//! The live-event hub: one Redis pub/sub connection per instance, fanned out in process.
//! On a Redis Cluster the channels are sharded (SSUBSCRIBE): the hub's cluster connection
//! subscribes each on the master of its slot, and follows failovers and slot moves (the
//! `redis` crate resubscribes after it reconnects or learns a new owner).
//!
//! GraphQL subscribers ask the hub for a channel; the first local subscriber of a channel
//! makes the hub SUBSCRIBE on its one connection, the last one leaving makes it UNSUBSCRIBE.
//! Each channel is a bounded `broadcast`: a subscriber that falls behind is not buffered for
//! without limit but told it lagged ([`LiveMessage::Resync`]), and re-reads the current state.
//! The same happens after the connection to Redis was lost and restored, since messages
//! published meanwhile are gone (pub/sub keeps nothing).
//!
//! Rejected alternative: a Redis connection per GraphQL subscriber, which ties Redis's
//! connection count to the number of open browsers.
//!
//! The subscriptions bound what they ask the hub to hold: see [`crate::features::remarks::live`] for
//! the channels one connection may hold. A counter many subscribers watch can be followed once
//! for all of them ([`SharedCounters`]), so that a change wakes one task, not one per subscriber.

use std::{
    collections::{HashMap, HashSet, VecDeque},
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::{
    stream::{select_all, BoxStream, SelectAll},
    Stream, StreamExt,
};
use redis::{aio::PubSubSink, cluster_async::ClusterConnection, PushInfo, PushKind};
use tokio::sync::broadcast;
use tokio_util::sync::WaitForCancellationFutureOwned;

mod shared;

pub(crate) use shared::{CounterWatcher, SharedCounters, Watch};

use crate::infra::{
    error::AppResult,
    redis::{cluster_builder, RedisTarget},
    Infra,
};

/// Messages a channel keeps for slow subscribers before they are told they lagged.
const CHANNEL_CAPACITY: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LiveMessage {
    /// A published payload.
    Payload(Arc<str>),
    /// Messages may have been missed: re-read the current state.
    Resync,
}

struct Topic {
    sender: broadcast::Sender<LiveMessage>,
    subscribers: usize,
}

pub struct LiveHub {
    target: RedisTarget,
    topics: Mutex<HashMap<String, Topic>>,
    /// The sink of the current connection; `None` while reconnecting.
    sink: Mutex<Option<Sink>>,
    /// Serialises SUBSCRIBE/UNSUBSCRIBE so that a late unsubscribe cannot undo a subscribe.
    changes: tokio::sync::Mutex<()>,
    /// Told when the cluster connection stopped answering: the runner connects afresh.
    stuck: tokio::sync::Notify,
    /// Whether a repair after a lost node connection is under way (one at a time).
    repairing: std::sync::atomic::AtomicBool,
}

impl LiveHub {
    pub(crate) fn new(target: RedisTarget) -> Arc<Self> {
        Arc::new(Self {
            target,
            topics: Mutex::new(HashMap::new()),
            sink: Mutex::new(None),
            changes: tokio::sync::Mutex::new(()),
            stuck: tokio::sync::Notify::new(),
            repairing: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Subscribes to a channel. Returns once Redis confirmed the subscription (or at once
    /// when this instance already listens to it), so that a state read after this call
    /// cannot miss a change published after the read.
    pub(crate) async fn subscribe(self: &Arc<Self>, channel: String) -> LiveSubscription {
        let (receiver, first) = {
            let mut topics = self.topics.lock().expect("poisoned");
            let topic = topics.entry(channel.clone()).or_insert_with(|| Topic {
                sender: broadcast::channel(CHANNEL_CAPACITY).0,
                subscribers: 0,
            });
            topic.subscribers += 1;
            (topic.sender.subscribe(), topic.subscribers == 1)
        };
        if first {
            let _serial = self.changes.lock().await;
            let sink = self.sink.lock().expect("poisoned").clone();
            if let Some(mut sink) = sink {
                if let Err(error) = sink.subscribe(std::slice::from_ref(&channel)).await {
                    // The runner resubscribes every channel when it reconnects.
                    tracing::warn!(%error, channel, "live hub: subscribe failed");
                    if error.is_timeout() {
                        self.stuck.notify_one();
                    }
                }
            }
        }
        LiveSubscription {
            hub: self.clone(),
            channel,
            receiver,
        }
    }

    fn release(self: &Arc<Self>, channel: &str) {
        let last = {
            let mut topics = self.topics.lock().expect("poisoned");
            match topics.get_mut(channel) {
                Some(topic) => {
                    topic.subscribers -= 1;
                    topic.subscribers == 0
                }
                None => false,
            }
        };
        if !last {
            return;
        }
        self.topics.lock().expect("poisoned").remove(channel);
        let hub = self.clone();
        let channel = channel.to_string();
        tokio::spawn(async move {
            let _serial = hub.changes.lock().await;
            if hub.topics.lock().expect("poisoned").contains_key(&channel) {
                return; // someone subscribed again meanwhile
            }
            let sink = hub.sink.lock().expect("poisoned").clone();
            if let Some(mut sink) = sink {
                let _ = sink.unsubscribe(&channel).await;
            }
        });
    }

    fn dispatch(&self, channel: &str, message: LiveMessage) {
        if let Some(topic) = self.topics.lock().expect("poisoned").get(channel) {
            let _ = topic.sender.send(message);
        }
    }

    fn broadcast_resync(&self) {
        for topic in self.topics.lock().expect("poisoned").values() {
            let _ = topic.sender.send(LiveMessage::Resync);
        }
    }

    /// Every channel some local subscriber wants.
    fn wanted_channels(&self) -> Vec<String> {
        self.topics
            .lock()
            .expect("poisoned")
            .keys()
            .cloned()
            .collect()
    }

    /// Local subscribers of a channel (tests and metrics).
    pub fn local_subscribers(&self, channel: &str) -> usize {
        self.topics
            .lock()
            .expect("poisoned")
            .get(channel)
            .map_or(0, |t| t.subscribers)
    }
}

pub(crate) struct LiveSubscription {
    hub: Arc<LiveHub>,
    channel: String,
    receiver: broadcast::Receiver<LiveMessage>,
}

impl LiveSubscription {
    /// The next message; `None` when the hub is gone.
    pub(crate) async fn recv(&mut self) -> Option<LiveMessage> {
        match self.receiver.recv().await {
            Ok(message) => Some(message),
            Err(broadcast::error::RecvError::Lagged(_)) => Some(LiveMessage::Resync),
            Err(broadcast::error::RecvError::Closed) => None,
        }
    }
}

impl Drop for LiveSubscription {
    fn drop(&mut self) {
        self.hub.release(&self.channel);
    }
}

/// The longest pause between reconnection attempts. Short on purpose: one attempt a second
/// costs Redis nothing, and subscribers resume within about a second of Redis coming back
/// (a doubling back-off up to 10 s, as before, left them waiting up to 15 s after an outage).
const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(1);

/// Changes of published counters arriving within this window of the previous update are
/// sent as one update (the first change after a quiet window is sent at once).
pub(crate) const COALESCE: Duration = Duration::from_millis(100);

/// The current value of a shared reader's channel, then each new one, holding `guard` (the
/// reader, which stops once its last stream is dropped) while the stream lasts.
pub(crate) fn watched<T, G>(
    mut receiver: tokio::sync::watch::Receiver<T>,
    guard: G,
) -> impl Stream<Item = T>
where
    T: Clone + Send + Sync + 'static,
    G: Send + 'static,
{
    let first = receiver.borrow_and_update().clone();
    let changes = futures::stream::unfold((receiver, guard), |(mut receiver, guard)| async {
        receiver.changed().await.ok()?;
        let value = receiver.borrow_and_update().clone();
        Some((value, (receiver, guard)))
    });
    futures::stream::once(async { first }).chain(changes)
}

/// Counters that scripts PUBLISH on a channel per id (like counts, voucher stock): the
/// current values first, then every change, coalesced to the latest value per id within
/// [`COALESCE`]. Subscribes before reading (confirmed by Redis), so no change slips between
/// the read and the subscription; after a lag or a reconnect the values are read again.
///
/// The returned stream does its work when polled: no task, channel or timer stands between
/// a published change and the subscriber (a change after a quiet window is yielded as soon
/// as it arrives; at 10,000 subscribers those hops were most of the cost of a delivery). A
/// subscriber that stops reading is not buffered for: its channels lag, and once it reads
/// again it is sent the values read afresh.
pub(crate) async fn counter_changes<R, Fut>(
    infra: &Infra,
    ids: Vec<i64>,
    channel: impl Fn(i64) -> String,
    read: R,
) -> AppResult<impl Stream<Item = (i64, i64)>>
where
    R: Fn(Vec<i64>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = AppResult<HashMap<i64, i64>>> + Send,
{
    let mut subscriptions = Vec::with_capacity(ids.len());
    for &id in &ids {
        subscriptions.push((id, infra.live.subscribe(channel(id)).await));
    }
    let initial = read(ids.clone()).await?;
    let streams = subscriptions.into_iter().map(|(id, subscription)| {
        futures::stream::unfold(subscription, move |mut subscription| async move {
            subscription
                .recv()
                .await
                .map(|message| ((id, message), subscription))
        })
        .boxed()
    });
    let now = tokio::time::Instant::now();
    let counters = Counters {
        read,
        shutdown: Box::pin(infra.instance.shutdown.clone().cancelled_owned()),
        messages: select_all(streams),
        ready: ids
            .iter()
            .map(|id| (*id, initial.get(id).copied().unwrap_or(0)))
            .collect(),
        pending: HashMap::new(),
        last_flush: now.checked_sub(COALESCE).unwrap_or(now),
        stale: HashSet::new(),
        reread_at: now,
    };
    Ok(futures::stream::unfold(
        counters,
        |mut counters| async move { counters.next().await.map(|change| (change, counters)) },
    ))
}

/// The state of one [`counter_changes`] stream.
struct Counters<R> {
    read: R,
    shutdown: Pin<Box<WaitForCancellationFutureOwned>>,
    messages: SelectAll<BoxStream<'static, (i64, LiveMessage)>>,
    /// Changes released to the subscriber, yielded one by one.
    ready: VecDeque<(i64, i64)>,
    /// Changes held back until the coalescing window ends, latest value per id.
    pending: HashMap<i64, i64>,
    last_flush: tokio::time::Instant,
    /// Ids whose values may have been missed, to be read again together at `reread_at`.
    stale: HashSet<i64>,
    reread_at: tokio::time::Instant,
}

/// How long the ids told to resync at once gather before one read covers them all.
const REREAD_GATHER: Duration = Duration::from_millis(10);
/// How long a re-read may take, and how soon one that failed is tried again: a read of a
/// slot that has no master yet (a failover) must not hold up the other ids' changes.
const REREAD_TIMEOUT: Duration = Duration::from_secs(1);
const REREAD_RETRY: Duration = Duration::from_millis(250);

impl<R, Fut> Counters<R>
where
    R: Fn(Vec<i64>) -> Fut,
    Fut: Future<Output = AppResult<HashMap<i64, i64>>>,
{
    /// The next change to send; `None` at shutdown or when the hub is gone.
    async fn next(&mut self) -> Option<(i64, i64)> {
        loop {
            if let Some(change) = self.ready.pop_front() {
                return Some(change);
            }
            // Leading edge: a change after a quiet window goes out at once; changes that
            // follow within the window wait for its end and go out together.
            let window_end = self.last_flush + COALESCE;
            let flush = async {
                if self.pending.is_empty() {
                    std::future::pending::<()>().await;
                }
                tokio::time::sleep_until(window_end).await;
            };
            let reread_at = self.reread_at;
            let reread = async {
                if self.stale.is_empty() {
                    std::future::pending::<()>().await;
                }
                tokio::time::sleep_until(reread_at).await;
            };
            tokio::select! {
                () = &mut self.shutdown => return None,
                () = flush => self.flush(),
                () = reread => self.reread().await,
                message = self.messages.next() => {
                    let (id, message) = message?;
                    match message {
                        LiveMessage::Payload(value) => {
                            if let Ok(value) = value.parse() {
                                self.pending.insert(id, value);
                            }
                        }
                        LiveMessage::Resync => {
                            if self.stale.is_empty() {
                                self.reread_at = tokio::time::Instant::now() + REREAD_GATHER;
                            }
                            self.stale.insert(id);
                        }
                    }
                    if tokio::time::Instant::now() >= window_end {
                        self.flush();
                    }
                }
            }
        }
    }

    fn flush(&mut self) {
        self.ready.extend(self.pending.drain());
        self.last_flush = tokio::time::Instant::now();
    }

    /// Reads the stale ids' values in one read; on failure they stay stale, to be read
    /// again shortly (a later change would not say what was missed before it).
    async fn reread(&mut self) {
        let ids: Vec<i64> = self.stale.iter().copied().collect();
        match tokio::time::timeout(REREAD_TIMEOUT, (self.read)(ids)).await {
            Ok(Ok(values)) => {
                self.stale.clear();
                self.pending.extend(values);
                if tokio::time::Instant::now() >= self.last_flush + COALESCE {
                    self.flush();
                }
            }
            _ => self.reread_at = tokio::time::Instant::now() + REREAD_RETRY,
        }
    }
}

/// Where the hub sends SUBSCRIBE and UNSUBSCRIBE: its pub/sub connection to the one node, or
/// its cluster connection (sharded channels, each to its slot's master).
#[derive(Clone)]
enum Sink {
    Node(PubSubSink),
    Cluster(ClusterConnection),
}

impl Sink {
    async fn subscribe(&mut self, channels: &[String]) -> redis::RedisResult<()> {
        match self {
            Self::Node(sink) => sink.subscribe(channels).await,
            Self::Cluster(conn) => {
                // One at a time: channels of different slots cannot share a command.
                for channel in channels {
                    within_time(conn.ssubscribe(channel)).await?;
                }
                Ok(())
            }
        }
    }

    async fn unsubscribe(&mut self, channel: &str) -> redis::RedisResult<()> {
        match self {
            Self::Node(sink) => sink.unsubscribe(channel).await,
            Self::Cluster(conn) => within_time(conn.sunsubscribe(channel)).await,
        }
    }
}

/// How long a cluster (un)subscription may take. The `redis` crate's cluster connection can
/// wedge during a slot refresh (see `infra::redis::cluster`); a subscription that does not
/// answer in time fails, and the hub connects afresh.
const SUBSCRIBE_TIMEOUT: Duration = Duration::from_secs(3);

async fn within_time(
    change: impl Future<Output = redis::RedisResult<()>>,
) -> redis::RedisResult<()> {
    match tokio::time::timeout(SUBSCRIBE_TIMEOUT, change).await {
        Ok(done) => done,
        Err(_) => Err(redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "the cluster did not confirm a subscription",
        ))),
    }
}

/// Keeps the hub's connection up until shutdown: connects, subscribes every wanted channel,
/// dispatches messages, and after a loss reconnects with back-off and tells every
/// subscriber to resync.
pub(crate) async fn run(infra: Infra) {
    if infra.live.target.is_cluster() {
        return run_on_cluster(infra).await;
    }
    let hub = infra.live.clone();
    let mut delay = Duration::from_millis(100);
    loop {
        let connected = async {
            let client = hub.target.client()?;
            let (sink, stream) = client.get_async_pubsub().await?.split();
            hub.install(Sink::Node(sink)).await?;
            redis::RedisResult::Ok(stream)
        };
        let stream = tokio::select! {
            () = infra.instance.shutdown.cancelled() => return,
            connected = connected => connected,
        };
        match stream {
            Ok(mut stream) => {
                delay = Duration::from_millis(100);
                hub.broadcast_resync();
                loop {
                    let message = tokio::select! {
                        () = infra.instance.shutdown.cancelled() => return,
                        message = stream.next() => message,
                    };
                    let Some(message) = message else { break };
                    let payload: String = message.get_payload().unwrap_or_default();
                    hub.dispatch(
                        message.get_channel_name(),
                        LiveMessage::Payload(payload.into()),
                    );
                }
                tracing::warn!("live hub: Redis pub/sub connection lost, reconnecting");
            }
            Err(error) => tracing::warn!(%error, "live hub: cannot connect to Redis"),
        }
        *hub.sink.lock().expect("poisoned") = None;
        hub.broadcast_resync();
        if !pause(&infra, &mut delay).await {
            return;
        }
    }
}

impl LiveHub {
    /// Subscribes every wanted channel on a new connection's sink, then makes it the sink
    /// that later subscriptions use (serialised with them).
    async fn install(&self, mut sink: Sink) -> redis::RedisResult<()> {
        let channels = self.wanted_channels();
        let _serial = self.changes.lock().await;
        if !channels.is_empty() {
            sink.subscribe(&channels).await?;
        }
        *self.sink.lock().expect("poisoned") = Some(sink);
        Ok(())
    }
}

/// Waits before the next connection attempt, doubling `delay` up to the longest pause;
/// false at shutdown.
async fn pause(infra: &Infra, delay: &mut Duration) -> bool {
    tokio::select! {
        () = infra.instance.shutdown.cancelled() => return false,
        () = tokio::time::sleep(crate::infra::backoff::jittered(*delay)) => {}
    }
    *delay = (*delay * 2).min(MAX_RECONNECT_DELAY);
    true
}

/// The hub on a cluster. Its connection reconnects by itself and resubscribes what it had
/// subscribed; the hub only dispatches, and tells subscribers to resync whenever messages
/// may have been missed: a node's connection was lost, or a node dropped a channel because
/// its slot moved (the hub then subscribes it again, at the slot's new master).
async fn run_on_cluster(infra: Infra) {
    let hub = infra.live.clone();
    let mut delay = Duration::from_millis(100);
    loop {
        let (pushes, mut received) = tokio::sync::mpsc::unbounded_channel::<PushInfo>();
        let connected = async {
            let client = cluster_builder(&hub.target)
                .use_protocol(redis::ProtocolVersion::RESP3)
                .push_sender(pushes)
                .build()?;
            hub.install(Sink::Cluster(client.get_async_connection().await?))
                .await
        };
        let connected = tokio::select! {
            () = infra.instance.shutdown.cancelled() => return,
            connected = connected => connected,
        };
        if let Err(error) = connected {
            tracing::warn!(%error, "live hub: cannot connect to the Redis Cluster");
            *hub.sink.lock().expect("poisoned") = None;
            if !pause(&infra, &mut delay).await {
                return;
            }
            continue;
        }
        delay = Duration::from_millis(100);
        hub.broadcast_resync();
        loop {
            let push = tokio::select! {
                () = infra.instance.shutdown.cancelled() => return,
                () = hub.stuck.notified() => {
                    tracing::warn!("live hub: the cluster connection stopped answering, reconnecting");
                    break;
                }
                push = received.recv() => push,
            };
            let Some(push) = push else { break };
            hub.on_cluster_push(push);
        }
        *hub.sink.lock().expect("poisoned") = None;
    }
}

/// How often a repair tries to subscribe again, and for how long before the hub connects
/// afresh: the connection may go on routing a moved slot's channels to the node that is
/// gone (requests saw the new master while the hub's subscriptions failed for seconds),
/// and a new connection starts from the cluster's current map.
const REPAIR_EVERY: Duration = Duration::from_millis(250);
const REPAIR_FOR: Duration = Duration::from_secs(1);

impl LiveHub {
    /// After a node's connection was lost: subscribes every channel again where its slot
    /// lives now, tried every [`REPAIR_EVERY`] until all succeed, then has every subscriber
    /// re-read what it may have missed meanwhile; past [`REPAIR_FOR`] (a failed master's
    /// slots have no master until a replica is promoted) the hub connects afresh, and goes
    /// on trying that way. Subscribing a channel the connection already has
    /// changes nothing, so the channels of the other nodes are simply subscribed again; the
    /// connection's own resubscription is not relied on.
    fn repair(self: &Arc<Self>) {
        use std::sync::atomic::Ordering;
        if self.repairing.swap(true, Ordering::SeqCst) {
            return;
        }
        let hub = self.clone();
        tokio::spawn(async move {
            let started = tokio::time::Instant::now();
            loop {
                tokio::time::sleep(REPAIR_EVERY).await;
                let Some(mut sink) = hub.sink.lock().expect("poisoned").clone() else {
                    break; // connecting afresh, which subscribes everything itself
                };
                let subscribed = {
                    let _serial = hub.changes.lock().await;
                    sink.subscribe(&hub.wanted_channels()).await
                };
                match subscribed {
                    Ok(()) => {
                        hub.broadcast_resync();
                        break;
                    }
                    Err(error) if error.is_timeout() || started.elapsed() > REPAIR_FOR => {
                        tracing::warn!(%error, "live hub: cannot subscribe again, reconnecting");
                        hub.stuck.notify_one();
                        break;
                    }
                    Err(_) => {}
                }
            }
            hub.repairing.store(false, Ordering::SeqCst);
        });
    }

    fn on_cluster_push(self: &Arc<Self>, push: PushInfo) {
        let channel = |value: Option<&redis::Value>| {
            value.and_then(|v| redis::FromRedisValue::from_redis_value_ref(v).ok())
        };
        match push.kind {
            PushKind::SMessage | PushKind::Message => {
                let (Some(name), Some(payload)) =
                    (channel(push.data.first()), channel(push.data.get(1)))
                else {
                    return;
                };
                let name: String = name;
                let payload: String = payload;
                self.dispatch(&name, LiveMessage::Payload(payload.into()));
            }
            PushKind::Disconnection => {
                tracing::warn!("live hub: a cluster node's connection was lost, resubscribing");
                self.broadcast_resync();
                self.repair();
            }
            PushKind::SUnsubscribe => {
                let Some(name) = channel(push.data.first()) else {
                    return;
                };
                let name: String = name;
                if !self.topics.lock().expect("poisoned").contains_key(&name) {
                    return; // our own unsubscribe
                }
                // The slot moved (or its node was failed over): subscribe again where it
                // lives now, and have its subscribers re-read what they may have missed.
                self.dispatch(&name, LiveMessage::Resync);
                let hub = self.clone();
                tokio::spawn(async move {
                    let _serial = hub.changes.lock().await;
                    let sink = hub.sink.lock().expect("poisoned").clone();
                    if let Some(mut sink) = sink {
                        if hub.topics.lock().expect("poisoned").contains_key(&name) {
                            if let Err(error) = sink.subscribe(std::slice::from_ref(&name)).await {
                                tracing::warn!(%error, channel = name, "live hub: resubscribe failed");
                                if error.is_timeout() {
                                    hub.stuck.notify_one();
                                }
                            }
                        }
                    }
                    hub.dispatch(&name, LiveMessage::Resync);
                });
            }
            _ => {}
        }
    }
}
