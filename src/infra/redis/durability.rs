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
//! WAIT holds up the commands queued behind it on its connection for the time replicas take
//! to acknowledge (one round trip to them), and up to the timeout when they do not. So the
//! writes that wait have connections of their own (`RedisPool::get_durable`), and their WAITs
//! are shared: one WAIT covers every write its connection sent before it, so the requests
//! that need one while a WAIT is under way join the next, and a master has at most one WAIT
//! in flight however many requests wait on it (a group commit). Without that, a thousand
//! orders would queue a thousand WAITs, and a master whose replica is slow or gone would
//! hold each for the whole timeout in turn. BENCHMARKS.md has what it costs.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::sync::watch;

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
    /// The shared WAITs, by master (`""` for the one node).
    rounds: Arc<Mutex<HashMap<String, Rounds>>>,
}

/// The WAITs of one master: requests join round `next`, which is sent once the one in
/// flight (if any) is answered.
#[derive(Debug)]
struct Rounds {
    next: u64,
    joined: bool,
    /// A task is sending rounds.
    running: bool,
    /// A key of the master's, to route the WAIT by.
    key: String,
    /// The last round answered: its number and how many replicas acknowledged (or why not).
    done: watch::Sender<(u64, Result<i64, AppError>)>,
}

impl Durability {
    pub(crate) fn new(replicas: u32, timeout: Duration, writes: Vec<DurableWrite>) -> Self {
        Self {
            replicas,
            timeout,
            writes,
            rounds: Arc::default(),
        }
    }

    /// No write waits (the default).
    pub fn none() -> Self {
        Self::new(0, Duration::ZERO, Vec::new())
    }

    /// Whether writes of `kind` wait for replicas.
    pub(crate) fn waits_for(&self, kind: DurableWrite) -> bool {
        self.replicas > 0 && self.writes.contains(&kind)
    }

    /// The connection to write `kind` on: the one kept for writes that wait, when they do
    /// (see [`RedisPool`]).
    pub(crate) async fn connection<'a>(
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
    pub(crate) async fn confirm(
        &self,
        kind: DurableWrite,
        redis: &RedisPool,
        key: &str,
    ) -> AppResult<()> {
        if !self.waits_for(kind) {
            return Ok(());
        }
        let acknowledged = self.shared_wait(redis, key).await?;
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

    /// Joins the next WAIT on `key`'s master, starting the rounds there if none run, and
    /// answers how many replicas it found.
    async fn shared_wait(&self, redis: &RedisPool, key: &str) -> AppResult<i64> {
        let conn = redis.get_durable().await?.clone();
        let group = match conn.as_cluster() {
            Some(cluster) => cluster.master_of_key(key).unwrap_or_default(),
            None => String::new(),
        };
        let (round, mut done, start) = {
            let mut rounds = self.rounds.lock().expect("poisoned");
            let rounds = rounds.entry(group.clone()).or_insert_with(|| Rounds {
                next: 1,
                joined: false,
                running: false,
                key: String::new(),
                done: watch::channel((0, Ok(0))).0,
            });
            rounds.joined = true;
            rounds.key = key.to_owned();
            let start = !rounds.running;
            rounds.running = true;
            (rounds.next, rounds.done.subscribe(), start)
        };
        if start {
            tokio::spawn(self.clone().send_rounds(conn, group));
        }
        let answered = done
            .wait_for(|(answered, _)| *answered >= round)
            .await
            .map_err(|_| AppError::Unavailable("the WAIT for replicas was dropped".into()))?;
        answered.1.clone()
    }

    /// Sends one WAIT per round while requests join, then stops.
    async fn send_rounds(self, mut conn: super::counting::CountedConnection, group: String) {
        let mut wait = redis::cmd("WAIT");
        wait.arg(self.replicas)
            .arg(self.timeout.as_millis().max(1) as u64);
        loop {
            let (round, key) = {
                let mut rounds = self.rounds.lock().expect("poisoned");
                let rounds = rounds.get_mut(&group).expect("a group is never removed");
                if !rounds.joined {
                    rounds.running = false;
                    return;
                }
                rounds.joined = false;
                rounds.next += 1;
                (rounds.next - 1, rounds.key.clone())
            };
            metrics::counter!("engage_redis_wait_rounds_total").increment(1);
            let acknowledged: Result<i64, AppError> = match conn.as_cluster() {
                // WAIT names no key: it goes to the master of the writes' slot.
                Some(cluster) => match cluster.query_at_key(&key, &wait).await {
                    Ok(reply) => redis::FromRedisValue::from_redis_value(reply)
                        .map_err(|e| AppError::internal(anyhow::anyhow!("WAIT answered {e}"))),
                    Err(error) => Err(error.into()),
                },
                None => wait.query_async(&mut conn).await.map_err(AppError::from),
            };
            let rounds = self.rounds.lock().expect("poisoned");
            let rounds = rounds.get(&group).expect("a group is never removed");
            let _previous = rounds.done.send_replace((round, acknowledged));
        }
    }
}
