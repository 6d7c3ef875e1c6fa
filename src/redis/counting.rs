//! A pool connection that counts its round trips.
//!
//! Every command or pipeline sent through the pool is one round trip; the count feeds
//! `engage_redis_round_trips_total` and lets tests prove claims such as "a page of remarks
//! costs one Redis round trip" against the real server.

use std::sync::{
    atomic::{AtomicU64, Ordering},
    Arc,
};

use bb8_redis::RedisConnectionManager;
use redis::{aio::ConnectionLike, aio::MultiplexedConnection, Cmd, Pipeline, RedisFuture, Value};

pub struct CountingManager {
    inner: RedisConnectionManager,
    round_trips: Arc<AtomicU64>,
}

impl CountingManager {
    pub fn new(inner: RedisConnectionManager, round_trips: Arc<AtomicU64>) -> Self {
        Self { inner, round_trips }
    }
}

impl bb8::ManageConnection for CountingManager {
    type Connection = CountedConnection;
    type Error = redis::RedisError;

    async fn connect(&self) -> Result<CountedConnection, redis::RedisError> {
        let inner = self.inner.connect().await?;
        Ok(CountedConnection {
            inner,
            round_trips: self.round_trips.clone(),
        })
    }

    async fn is_valid(&self, conn: &mut CountedConnection) -> Result<(), redis::RedisError> {
        self.inner.is_valid(&mut conn.inner).await
    }

    fn has_broken(&self, conn: &mut CountedConnection) -> bool {
        self.inner.has_broken(&mut conn.inner)
    }
}

pub struct CountedConnection {
    inner: MultiplexedConnection,
    round_trips: Arc<AtomicU64>,
}

impl ConnectionLike for CountedConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        self.inner.req_packed_command(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        self.inner.req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }
}
