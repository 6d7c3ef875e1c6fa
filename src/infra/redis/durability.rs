//! Writes acknowledged only once replicas hold them (`ENGAGE_REDIS_WAIT_REPLICAS`).
//!
//! Redis replicates asynchronously: a master that fails right after answering may take its
//! last writes with it when a replica is promoted. For the writes named in
//! `ENGAGE_REDIS_WAIT_WRITES` (orders by default), the request sends `WAIT N timeout` to the
//! master that took the write, on the same connection, before it answers: WAIT returns once
//! N replicas acknowledged every write that connection sent before it. (So WAIT needs the
//! shared or cluster mode, where every request of an instance writes to a node through one
//! connection; with `pool` it would ask about another connection's writes, and the
//! configuration is refused.) Should that connection be replaced between the write and its
//! WAIT (a reconnection to a master that is still up), WAIT would not cover the write: the
//! one window left, and the write is still on a live master. When fewer did within
//! the timeout the request answers `UNAVAILABLE`: the write is on the master but not yet
//! safe from its failure, and a retry finds it (an order answers "you already have one").
//!
//! WAIT holds up the commands queued behind it on that node's connection for the time
//! replicas take to acknowledge (one round trip to them); BENCHMARKS.md has what it costs.

use std::time::Duration;

use super::{RedisConn, RedisPool};
use crate::infra::error::{AppError, AppResult};

/// The kinds of writes that may wait for replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DurableWrite {
    /// Flash-sale orders and their settlement.
    Orders,
    /// Likes and unlikes.
    Likes,
    /// Points awards, sign-ins and make-ups.
    Points,
}

#[derive(Debug, Clone)]
pub struct Durability {
    replicas: u32,
    timeout: Duration,
    writes: Vec<DurableWrite>,
}

impl Durability {
    pub fn new(replicas: u32, timeout: Duration, writes: Vec<DurableWrite>) -> Self {
        Self {
            replicas,
            timeout,
            writes,
        }
    }

    /// No write waits (the default).
    pub fn none() -> Self {
        Self::new(0, Duration::ZERO, Vec::new())
    }

    /// Whether writes of `kind` wait for replicas.
    pub fn waits_for(&self, kind: DurableWrite) -> bool {
        self.replicas > 0 && self.writes.contains(&kind)
    }

    /// The connection to write `kind` on: the one kept for writes that wait, when they do
    /// (see [`RedisPool`]).
    pub async fn connection<'a>(
        &self,
        kind: DurableWrite,
        redis: &'a RedisPool,
    ) -> AppResult<RedisConn<'a>> {
        Ok(if self.waits_for(kind) {
            redis.get_durable().await?
        } else {
            redis.get().await?
        })
    }

    /// After a write of `kind` in `key`'s slot was acknowledged: waits until the configured
    /// number of replicas have it, or answers UNAVAILABLE.
    pub async fn confirm(&self, kind: DurableWrite, redis: &RedisPool, key: &str) -> AppResult<()> {
        if !self.waits_for(kind) {
            return Ok(());
        }
        let mut conn = redis.get_durable().await?;
        let mut wait = redis::cmd("WAIT");
        wait.arg(self.replicas)
            .arg(self.timeout.as_millis().max(1) as u64);
        let acknowledged: i64 = match conn.as_cluster().cloned() {
            // WAIT names no key: it goes to the master of the write's slot.
            Some(cluster) => {
                let reply = cluster.query_at_key(key, &wait).await?;
                redis::FromRedisValue::from_redis_value(reply)
                    .map_err(|e| AppError::internal(anyhow::anyhow!("WAIT answered {e}")))?
            }
            None => wait.query_async(&mut *conn).await?,
        };
        metrics::counter!("engage_redis_waits_total").increment(1);
        if acknowledged < i64::from(self.replicas) {
            metrics::counter!("engage_redis_waits_short_total").increment(1);
            return Err(AppError::Unavailable(format!(
                "{acknowledged} of {} replicas acknowledged a {kind:?} write within {:?}",
                self.replicas, self.timeout
            )));
        }
        Ok(())
    }
}
