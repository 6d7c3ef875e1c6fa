//! A pool connection that counts its round trips and the commands they carry, and traces
//! them (a `redis` span each, [`spans`], while a trace is recorded): every command and
//! pipeline passes here.
//!
//! Every command or pipeline sent through the pool is one round trip (on a cluster, a
//! pipeline whose keys live on several nodes is one per node, sent at the same time); the
//! counts feed `engage_redis_round_trips_total` and `engage_redis_commands_total` and let
//! tests prove claims such as "a page of remarks costs one Redis round trip" or "an award
//! costs as many commands with 300 rank subscribers" against the real server. A script
//! call is one command, whatever it runs inside Redis.

use std::sync::{
    atomic::{AtomicU64, Ordering},
    Arc,
};

use bb8_redis::RedisConnectionManager;

use super::{cluster::Cluster, node::NodeConnection, spans};
use redis::{
    aio::{ConnectionLike, ConnectionManager, MultiplexedConnection},
    AsyncConnectionConfig, Cmd, Pipeline, RedisFuture, Value,
};

/// What connections count: round trips, and the commands sent in them.
#[derive(Clone, Default)]
pub struct Tally {
    pub(crate) round_trips: Arc<AtomicU64>,
    pub(crate) commands: Arc<AtomicU64>,
}

impl Tally {
    fn add(&self, commands: usize) {
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        self.commands.fetch_add(commands as u64, Ordering::Relaxed);
    }
}

pub struct CountingManager {
    client: redis::Client,
    config: AsyncConnectionConfig,
    inner: RedisConnectionManager,
    tally: Tally,
}

impl CountingManager {
    /// Connections of the pool are made by `client` with `config` (timeouts), not the
    /// crate's defaults.
    pub(crate) fn new(
        client: redis::Client,
        config: AsyncConnectionConfig,
        tally: Tally,
    ) -> redis::RedisResult<Self> {
        Ok(Self {
            inner: RedisConnectionManager::new(client.get_connection_info().clone())?,
            client,
            config,
            tally,
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
            tally: self.tally.clone(),
        })
    }

    async fn is_valid(&self, conn: &mut CountedConnection) -> Result<(), redis::RedisError> {
        match &mut conn.inner {
            Link::Pooled(inner) => self.inner.is_valid(inner).await,
            Link::Shared(_) | Link::Node(_) | Link::Cluster(_) => Ok(()),
        }
    }

    fn has_broken(&self, conn: &mut CountedConnection) -> bool {
        match &mut conn.inner {
            Link::Pooled(inner) => self.inner.has_broken(inner),
            Link::Shared(_) | Link::Node(_) | Link::Cluster(_) => false,
        }
    }
}

#[derive(Clone)]
pub struct CountedConnection {
    inner: Link,
    tally: Tally,
}

/// A connection of the pool, the one shared, reconnecting connection (engage's own over
/// TCP, the crate's over TLS or a Unix socket), or a cluster's.
#[derive(Clone)]
enum Link {
    Pooled(MultiplexedConnection),
    Shared(ConnectionManager),
    Node(NodeConnection),
    Cluster(Cluster),
}

impl CountedConnection {
    /// The connection every request shares (`ENGAGE_REDIS_MODE=shared`).
    pub(crate) fn shared(inner: ConnectionManager, tally: Tally) -> Self {
        Self {
            inner: Link::Shared(inner),
            tally,
        }
    }

    /// engage's own connection to one node over TCP: the one every request shares
    /// (`ENGAGE_REDIS_MODE=shared`), or a worker's own.
    pub(crate) fn node(inner: NodeConnection, tally: Tally) -> Self {
        Self {
            inner: Link::Node(inner),
            tally,
        }
    }

    /// A connection of its own to one node.
    pub(crate) fn own(inner: MultiplexedConnection, tally: Tally) -> Self {
        Self {
            inner: Link::Pooled(inner),
            tally,
        }
    }

    /// The connection to a cluster every request shares (`ENGAGE_REDIS_MODE=cluster`).
    pub(crate) fn cluster(inner: Cluster, tally: Tally) -> Self {
        Self {
            inner: Link::Cluster(inner),
            tally,
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
        self.tally.add(1);
        let reply = match &mut self.inner {
            Link::Pooled(conn) => conn.req_packed_command(cmd),
            Link::Shared(conn) => conn.req_packed_command(cmd),
            Link::Node(conn) => conn.req_packed_command(cmd),
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
        self.tally.add(pipeline.len());
        let replies = match &mut self.inner {
            Link::Pooled(conn) => conn.req_packed_commands(pipeline, offset, count),
            Link::Shared(conn) => conn.req_packed_commands(pipeline, offset, count),
            Link::Node(conn) => conn.req_packed_commands(pipeline, offset, count),
            Link::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
        };
        spans::traced(replies, || spans::pipeline(pipeline))
    }

    fn get_db(&self) -> i64 {
        match &self.inner {
            Link::Pooled(conn) => conn.get_db(),
            Link::Shared(conn) => conn.get_db(),
            Link::Node(conn) => conn.get_db(),
            Link::Cluster(conn) => conn.get_db(),
        }
    }
}
