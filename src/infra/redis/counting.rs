//! A pool connection that counts its round trips, and traces them (a `redis` span each,
//! [`spans`], while a trace is recorded): every command and pipeline passes here.
//!
//! Every command or pipeline sent through the pool is one round trip (on a cluster, a
//! pipeline whose keys live on several nodes is one per node, sent at the same time); the count feeds
//! `engage_redis_round_trips_total` and lets tests prove claims such as "a page of remarks
//! costs one Redis round trip" against the real server.

use std::sync::{
    atomic::{AtomicU64, Ordering},
    Arc,
};

use bb8_redis::RedisConnectionManager;

use super::{cluster::Cluster, spans};
use redis::{
    aio::{ConnectionLike, ConnectionManager, MultiplexedConnection},
    AsyncConnectionConfig, Cmd, Pipeline, RedisFuture, Value,
};

pub struct CountingManager {
    client: redis::Client,
    config: AsyncConnectionConfig,
    inner: RedisConnectionManager,
    round_trips: Arc<AtomicU64>,
}

impl CountingManager {
    /// Connections of the pool are made by `client` with `config` (timeouts), not the
    /// crate's defaults.
    pub fn new(
        client: redis::Client,
        config: AsyncConnectionConfig,
        round_trips: Arc<AtomicU64>,
    ) -> redis::RedisResult<Self> {
        Ok(Self {
            inner: RedisConnectionManager::new(client.get_connection_info().clone())?,
            client,
            config,
            round_trips,
        })
    }
}

impl bb8::ManageConnection for CountingManager {
    type Connection = CountedConnection;
    type Error = redis::RedisError;

    async fn connect(&self) -> Result<CountedConnection, redis::RedisError> {
        let inner = self
            .client
            .get_multiplexed_async_connection_with_config(&self.config)
            .await?;
        Ok(CountedConnection {
            inner: Link::Pooled(inner),
            round_trips: self.round_trips.clone(),
        })
    }

    async fn is_valid(&self, conn: &mut CountedConnection) -> Result<(), redis::RedisError> {
        match &mut conn.inner {
            Link::Pooled(inner) => self.inner.is_valid(inner).await,
            Link::Shared(_) | Link::Cluster(_) => Ok(()),
        }
    }

    fn has_broken(&self, conn: &mut CountedConnection) -> bool {
        match &mut conn.inner {
            Link::Pooled(inner) => self.inner.has_broken(inner),
            Link::Shared(_) | Link::Cluster(_) => false,
        }
    }
}

#[derive(Clone)]
pub struct CountedConnection {
    inner: Link,
    round_trips: Arc<AtomicU64>,
}

/// A connection of the pool, the one shared, reconnecting connection, or a cluster's.
#[derive(Clone)]
enum Link {
    Pooled(MultiplexedConnection),
    Shared(ConnectionManager),
    Cluster(Cluster),
}

impl CountedConnection {
    /// The connection every request shares (`ENGAGE_REDIS_MODE=shared`).
    pub fn shared(inner: ConnectionManager, round_trips: Arc<AtomicU64>) -> Self {
        Self {
            inner: Link::Shared(inner),
            round_trips,
        }
    }

    /// A connection of its own to one node.
    pub fn own(inner: MultiplexedConnection, round_trips: Arc<AtomicU64>) -> Self {
        Self {
            inner: Link::Pooled(inner),
            round_trips,
        }
    }

    /// The connection to a cluster every request shares (`ENGAGE_REDIS_MODE=cluster`).
    pub fn cluster(inner: Cluster, round_trips: Arc<AtomicU64>) -> Self {
        Self {
            inner: Link::Cluster(inner),
            round_trips,
        }
    }

    /// The cluster connection, in cluster mode.
    pub fn as_cluster(&self) -> Option<&Cluster> {
        match &self.inner {
            Link::Cluster(conn) => Some(conn),
            _ => None,
        }
    }
}

impl ConnectionLike for CountedConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        let reply = match &mut self.inner {
            Link::Pooled(conn) => conn.req_packed_command(cmd),
            Link::Shared(conn) => conn.req_packed_command(cmd),
            Link::Cluster(conn) => conn.req_packed_command(cmd),
        };
        spans::traced(reply, || spans::command(cmd))
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        let replies = match &mut self.inner {
            Link::Pooled(conn) => conn.req_packed_commands(pipeline, offset, count),
            Link::Shared(conn) => conn.req_packed_commands(pipeline, offset, count),
            Link::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
        };
        spans::traced(replies, || spans::pipeline(pipeline))
    }

    fn get_db(&self) -> i64 {
        match &self.inner {
            Link::Pooled(conn) => conn.get_db(),
            Link::Shared(conn) => conn.get_db(),
            Link::Cluster(conn) => conn.get_db(),
        }
    }
}
