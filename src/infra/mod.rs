//! What every feature is built on, and that knows no feature: the Redis connection and key
//! builder, SQL, the clock, IDs, errors, configuration, tokens, the stream worker, the live
//! hub, the lock, the recovery toolkit, the outbox of writes whose Redis side is still to
//! come, the strength of secrets, SQLite's memory, and logs and traces.

pub mod auth;
pub(crate) mod backoff;
pub(crate) mod cache;
pub mod clock;
pub mod config;
pub mod db;
pub mod error;
pub mod ids;
pub(crate) mod live;
pub mod lock;
pub mod metrics;
pub mod outbox;
pub(crate) mod page;
pub mod recovery;
pub mod redis;
pub(crate) mod secrets;
pub(crate) mod sqlite_memory;
pub mod streams;
pub mod telemetry;
pub(crate) mod weak_map;

use std::{
    future::Future,
    sync::{atomic::AtomicU64, Arc},
    time::Duration,
};

use tokio_util::{sync::CancellationToken, task::TaskTracker};

use self::{clock::Clock, db::Db, ids::IdGenerator, live::LiveHub, redis::Keys, redis::RedisPool};

/// The handles every feature is built from. Each is a pool or a shared pointer, so a
/// feature's context holds its own clone; none of them knows a feature.
#[derive(Clone)]
pub struct Infra {
    pub redis: RedisPool,
    /// Round trips made through `redis` (metrics, and tests that count them).
    pub redis_round_trips: Arc<AtomicU64>,
    /// Commands sent in those round trips (a script call is one).
    pub redis_commands: Arc<AtomicU64>,
    pub db: Db,
    pub keys: Keys,
    pub clock: Clock,
    pub ids: Arc<IdGenerator>,
    /// The one pub/sub connection of this instance, fanned out to subscriptions.
    pub live: Arc<LiveHub>,
    /// Which writes wait for replicas before they are acknowledged.
    pub durability: Arc<redis::durability::Durability>,
    pub instance: Instance,
}

impl Infra {
    /// Runs scripts whose writes need no replica (or that only read).
    pub(crate) fn scripts(&self) -> redis::runner::Scripts<'_> {
        redis::runner::Scripts::on(&self.redis)
    }

    /// Runs scripts that write `kind`, which may wait for replicas.
    pub(crate) fn durable_scripts(
        &self,
        kind: redis::durability::DurableWrite,
    ) -> redis::runner::Scripts<'_> {
        redis::runner::Scripts::durable(&self.redis, &self.durability, kind)
    }
}

/// This instance among the others: its name, its background tasks and the signal that
/// stops them (mini-redis's shutdown: one token every task listens to, and a tracker to
/// wait for them once told).
#[derive(Clone)]
pub struct Instance {
    /// Names this instance as a stream consumer and lock owner.
    pub id: Arc<str>,
    /// Where dedicated connections (the live hub, blocking stream reads) connect.
    pub redis: redis::RedisTarget,
    /// How stream consumers wait: take-over of a dead consumer's entries, and back-off.
    pub(crate) consumers: ConsumerTimings,
    /// Cancelled when the instance begins to shut down.
    pub shutdown: CancellationToken,
    /// Cancelled when the instance is told to stop (SIGTERM), before `shutdown`: from then
    /// on it reports itself not ready and asks keep-alive clients to reconnect elsewhere,
    /// while requests, WebSockets and background tasks go on until the drain window ends.
    /// A child of `shutdown`, so a shutdown that skips the window is draining too.
    pub(crate) draining: CancellationToken,
    /// Background tasks, awaited on shutdown.
    pub tasks: TaskTracker,
    /// Gauges read from Redis when `/metrics` is scraped (consumer lag, queue depths), and
    /// their last reading.
    pub(crate) scraped: metrics::Scraped,
    /// The WebSockets and subscriptions open on this instance, for `/metrics`.
    pub(crate) open: metrics::Open,
}

/// The configured times of every stream consumer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ConsumerTimings {
    /// Pending entries idle this long belong to a dead consumer and are taken over.
    pub(crate) claim_idle: Duration,
    /// The longest back-off while SQL fails.
    pub(crate) max_backoff: Duration,
    /// How long the archives (the consumers that write SQL) let a short batch gather.
    pub(crate) archive_linger: Duration,
}

impl Instance {
    /// Runs a background task until shutdown; `task` must return soon after
    /// [`Instance::shutdown`] is cancelled.
    pub(crate) fn spawn(
        &self,
        name: &'static str,
        task: impl Future<Output = ()> + Send + 'static,
    ) {
        self.tasks.spawn(async move {
            task.await;
            tracing::debug!(task = name, "background task stopped");
        });
    }
}
