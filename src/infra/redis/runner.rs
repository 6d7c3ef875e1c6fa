//! [`Scripts`]: the one way a feature calls a script of `lua/` ([`super::scripts`]): a
//! connection, EVALSHA (the script loaded again and called again on NOSCRIPT, after a
//! restart, a failover or SCRIPT FLUSH), the wait for replicas
//! ([`super::durability`]), and, for [`Scripts::run`], the calls again while a rebuild holds
//! writes back (`HELD`) or after the caller restored what Redis lacked (`MISSING`,
//! `ASK_ARCHIVE`): once, for every script.

use std::{
    future::Future,
    time::{Duration, Instant},
};

use super::{
    durability::{Durability, DurableWrite},
    scripts::{forgotten, in_script, invocation, invoke, load, Replies, Reply, ScriptArgs},
    status::Status,
    RedisPool,
};
use crate::infra::error::{AppError, AppResult};

/// How long a write waits for a rebuild to lift its hold before it answers UNAVAILABLE (the
/// hold lasts the seconds a rebuild needs to catch up; only points are held so far).
const HOLD_WAIT: Duration = Duration::from_secs(10);

/// How often a script answering `MISSING` or `ASK_ARCHIVE` is called again after its
/// caller acted (a vote: rebuild the counter, then ask the archive, then vote).
const RECOVERIES: usize = 3;

/// Runs scripts through the request pool, and for a durable kind of write, on the
/// connection of durable writes, waiting for replicas once a call wrote.
#[derive(Clone, Copy)]
pub(crate) struct Scripts<'a> {
    redis: &'a RedisPool,
    durable: Option<(&'a Durability, DurableWrite)>,
}

impl<'a> Scripts<'a> {
    /// Calls whose writes need no replica (or that only read).
    pub(crate) fn on(redis: &'a RedisPool) -> Self {
        Self {
            redis,
            durable: None,
        }
    }

    /// Calls that write `kind`, which may wait for replicas (`ENGAGE_REDIS_WAIT_WRITES`).
    pub(crate) fn durable(
        redis: &'a RedisPool,
        durability: &'a Durability,
        kind: DurableWrite,
    ) -> Self {
        Self {
            redis,
            durable: Some((durability, kind)),
        }
    }

    /// One call: connect, run, and wait for replicas when the reply says it wrote.
    pub(crate) async fn call<S: Replies>(
        &self,
        keys: &S,
        args: &impl ScriptArgs<S>,
    ) -> AppResult<S::Reply> {
        let reply = match self.durable {
            Some((durability, kind)) => {
                let mut conn = durability.connection(kind, self.redis).await?;
                invoke(&mut *conn, keys, args).await?
            }
            None => invoke(&mut *self.redis.get().await?, keys, args).await?,
        };
        if let Some((durability, kind)) = self.durable.filter(|_| reply.wrote()) {
            durability
                .confirm(kind, self.redis, keys.slot_key())
                .await?;
        }
        Ok(reply)
    }

    /// Many calls of one script in one round trip (a pipeline), their replies in order.
    /// A pipeline's calls are all this one script, so on NOSCRIPT (a restart) none of them
    /// ran: it is loaded and the pipeline sent again.
    pub(crate) async fn call_many<S: Replies, A: ScriptArgs<S>>(
        &self,
        calls: &[(S, A)],
    ) -> AppResult<Vec<S::Reply>> {
        if calls.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for (keys, args) in calls {
            pipe.add_command(invocation(keys, args));
        }
        let mut conn = match self.durable {
            Some((durability, kind)) => durability.connection(kind, self.redis).await?,
            None => self.redis.get().await?,
        };
        let replies: Vec<S::Reply> = match pipe.query_async(&mut *conn).await {
            Err(error) if forgotten(&error) => {
                load(S::lua(), &mut *conn).await?;
                pipe.query_async(&mut *conn).await
            }
            replies => replies,
        }
        .map_err(|error| in_script(S::lua(), error))?;
        drop(conn);
        if let Some((durability, kind)) = self.durable {
            for ((keys, _), _) in calls.iter().zip(&replies).filter(|(_, r)| r.wrote()) {
                durability
                    .confirm(kind, self.redis, keys.slot_key())
                    .await?;
            }
        }
        Ok(replies)
    }

    /// Calls the script that `build` makes (anew each time: the clock moves), again shortly
    /// while a rebuild holds writes back (`HELD`), and again after `recover` acted on a
    /// `MISSING` (restore from SQL what Redis lacks) or an `ASK_ARCHIVE` (ask SQL). Any other
    /// status is the reply's, for the caller to read.
    pub(crate) async fn run<S, A, R>(
        &self,
        mut build: impl FnMut() -> (S, A),
        mut recover: impl FnMut(Status) -> R,
    ) -> AppResult<S::Reply>
    where
        S: Replies,
        A: ScriptArgs<S>,
        R: Future<Output = AppResult<()>>,
    {
        let started = Instant::now();
        let mut recoveries = 0;
        loop {
            let (keys, args) = build();
            let reply = self.call(&keys, &args).await?;
            match reply.status() {
                Status::Held if started.elapsed() > HOLD_WAIT => {
                    return Err(AppError::Unavailable(
                        "points are being rebuilt from SQL".into(),
                    ))
                }
                Status::Held => tokio::time::sleep(Duration::from_millis(20)).await,
                status @ (Status::Missing | Status::AskArchive) if recoveries < RECOVERIES => {
                    recoveries += 1;
                    recover(status).await?;
                }
                Status::Missing | Status::AskArchive => {
                    return Err(AppError::internal(anyhow::anyhow!(
                        "lua/{}.lua did not settle after {RECOVERIES} recoveries",
                        S::lua().name
                    )))
                }
                _ => return Ok(reply),
            }
        }
    }

    /// [`Scripts::run`] for a script that never answers `MISSING` nor `ASK_ARCHIVE`.
    pub(crate) async fn run_while_held<S, A>(
        &self,
        build: impl FnMut() -> (S, A),
    ) -> AppResult<S::Reply>
    where
        S: Replies,
        A: ScriptArgs<S>,
    {
        self.run(build, |status| async move {
            Err(AppError::internal(anyhow::anyhow!(
                "lua/{}.lua answered {status:?}, which it never does",
                S::lua().name
            )))
        })
        .await
    }
}
