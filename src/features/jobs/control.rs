//! A topic as a queue: its counts per state, pause and limits.
//!
//! Counts are read, never counted by a scan: delayed, ready and running are the sizes of the
//! topic's delay zset, ready list and in-flight zset, and `done` and `dead` are counters the
//! finish script moves with the job (`{jobs:<topic>}:counts`). `done` counts completions
//! since Redis last started empty; `dead` is the record's (`dead_job` not requeued), set again
//! by a rebuild.
//!
//! Pause and limits are kept in SQL (`job_topic`) and written to `{jobs:<topic>}:settings`,
//! in the topic's hash tag, where the take script reads them: every instance's take is
//! bounded by the same counts in the same atomic call, and a topic held back answers its
//! take with nothing, so the taker goes on to the next topic. A paused topic keeps promoting
//! (its due jobs become ready, counted as `paused`) and its running jobs finish.

use std::collections::BTreeSet;

use sqlx::Row;

use super::{check_topic, Jobs};
use crate::infra::{
    error::{AppError, AppResult},
    redis::{
        scripts::{JobsDeadCount, JobsDeadCountArgs, JobsTopicSet, JobsTopicSetArgs, Replies},
        Keys,
    },
};

/// Jobs of a topic per state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JobCounts {
    pub delayed: i64,
    pub ready: i64,
    pub running: i64,
    pub done: i64,
    pub dead: i64,
    /// Ready jobs of a paused topic (then `ready` is 0).
    pub paused: i64,
}

/// A topic with its settings and counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicView {
    pub name: String,
    pub paused: bool,
    pub per_second: Option<i64>,
    pub concurrency: Option<i64>,
    pub counts: JobCounts,
}

/// What a topic's settings say, as SQL and Redis hold them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TopicSettings {
    pub(crate) paused: bool,
    pub(crate) per_second: Option<i64>,
    pub(crate) concurrency: Option<i64>,
}

/// The most a limit may be.
const MAX_LIMIT: i32 = 1_000_000;

impl Keys {
    /// A topic's settings: `paused`, `per_second`, `concurrency`.
    pub(crate) fn jobs_settings(&self, topic: &str) -> String {
        self.tagged(Self::jobs_tag(topic), "settings")
    }

    /// A topic's counters: `done`, `dead`, and the rate window (`second`, `started`).
    pub(crate) fn jobs_counts(&self, topic: &str) -> String {
        self.tagged(Self::jobs_tag(topic), "counts")
    }

    /// Every topic that had a job.
    pub(crate) fn jobs_known_topics(&self) -> String {
        self.tagged("jobs", "known")
    }
}

fn limit(what: &str, value: Option<i32>) -> AppResult<Option<i64>> {
    match value {
        Some(n) if !(1..=MAX_LIMIT).contains(&n) => Err(AppError::bad_input(format!(
            "{what} must be between 1 and {MAX_LIMIT}, or null for no limit"
        ))),
        other => Ok(other.map(i64::from)),
    }
}

impl Jobs {
    /// Every topic: those that had a job, those with settings and those with a handler here.
    pub async fn topics(&self) -> AppResult<Vec<TopicView>> {
        let mut names: BTreeSet<String> = self.registry.topics().into_iter().collect();
        let rows = sqlx::query("SELECT topic FROM job_topic")
            .fetch_all(&self.infra.db.pool)
            .await?;
        for row in rows {
            names.insert(row.try_get("topic")?);
        }
        names.extend(self.topics_in_redis_sets().await?);
        let mut views = Vec::with_capacity(names.len());
        for name in names {
            views.push(self.topic_now(&name).await?);
        }
        Ok(views)
    }

    /// The topics Redis lists: those that had a job, and those with work due.
    pub(crate) async fn topics_in_redis_sets(&self) -> AppResult<BTreeSet<String>> {
        let keys = &self.infra.keys;
        let mut conn = self.infra.redis.get().await?;
        let known: Vec<String> = redis::cmd("SMEMBERS")
            .arg(keys.jobs_known_topics())
            .query_async(&mut *conn)
            .await?;
        let due: Vec<String> = redis::cmd("ZRANGE")
            .arg(keys.jobs_due_topics())
            .arg(0)
            .arg(-1)
            .query_async(&mut *conn)
            .await?;
        Ok(known.into_iter().chain(due).collect())
    }

    /// A topic; `None` when it never had a job, settings or a handler.
    pub async fn topic(&self, name: &str) -> AppResult<Option<TopicView>> {
        check_topic(name)?;
        let view = self.topic_now(name).await?;
        if view.counts != JobCounts::default()
            || view.paused
            || view.per_second.is_some()
            || view.concurrency.is_some()
            || self.registry.topics().iter().any(|t| t == name)
        {
            return Ok(Some(view));
        }
        let mut conn = self.infra.redis.get().await?;
        let known: bool = redis::cmd("SISMEMBER")
            .arg(self.infra.keys.jobs_known_topics())
            .arg(name)
            .query_async(&mut *conn)
            .await?;
        Ok(known.then_some(view))
    }

    /// A topic's settings and counts, in one round trip.
    async fn topic_now(&self, name: &str) -> AppResult<TopicView> {
        let keys = &self.infra.keys;
        let mut pipe = redis::pipe();
        pipe.cmd("HMGET")
            .arg(keys.jobs_settings(name))
            .arg("paused")
            .arg("per_second")
            .arg("concurrency");
        pipe.cmd("HMGET")
            .arg(keys.jobs_counts(name))
            .arg("done")
            .arg("dead");
        pipe.cmd("ZCARD").arg(keys.jobs_delayed(name));
        pipe.cmd("ZCARD").arg(keys.jobs_waiting(name));
        pipe.cmd("ZCARD").arg(keys.jobs_running(name));
        let mut conn = self.infra.redis.get().await?;
        #[allow(clippy::type_complexity)]
        let ((paused, per_second, concurrency), (done, dead), delayed, ready, running): (
            (Option<String>, Option<i64>, Option<i64>),
            (Option<i64>, Option<i64>),
            i64,
            i64,
            i64,
        ) = pipe.query_async(&mut *conn).await?;
        let paused = paused.as_deref() == Some("1");
        Ok(TopicView {
            name: name.to_string(),
            paused,
            per_second,
            concurrency,
            counts: JobCounts {
                delayed,
                ready: if paused { 0 } else { ready },
                running,
                done: done.unwrap_or(0),
                dead: dead.unwrap_or(0).max(0),
                paused: if paused { ready } else { 0 },
            },
        })
    }

    /// Pauses or resumes a topic: SQL's row first, then Redis's settings.
    pub async fn pause(&self, topic: &str, paused: bool) -> AppResult<TopicView> {
        check_topic(topic)?;
        sqlx::query(
            "INSERT INTO job_topic (topic, paused, updated_at_ms) VALUES ($1, $2, $3) \
             ON CONFLICT (topic) DO UPDATE SET paused = excluded.paused, \
             updated_at_ms = excluded.updated_at_ms",
        )
        .bind(topic)
        .bind(i64::from(paused))
        .bind(self.infra.clock.now_ms())
        .execute(&self.infra.db.pool)
        .await?;
        let flag = if paused { "1" } else { "0" };
        self.write_settings(topic, flag, "-", "-").await?;
        self.topic_now(topic).await
    }

    /// Sets a topic's limits (`None`: no limit): SQL's row first, then Redis's settings.
    pub async fn set_limits(
        &self,
        topic: &str,
        per_second: Option<i32>,
        concurrency: Option<i32>,
    ) -> AppResult<TopicView> {
        check_topic(topic)?;
        let per_second = limit("perSecond", per_second)?;
        let concurrency = limit("concurrency", concurrency)?;
        sqlx::query(
            "INSERT INTO job_topic (topic, paused, per_second, concurrency, updated_at_ms) \
             VALUES ($1, 0, $2, $3, $4) ON CONFLICT (topic) DO UPDATE SET \
             per_second = excluded.per_second, concurrency = excluded.concurrency, \
             updated_at_ms = excluded.updated_at_ms",
        )
        .bind(topic)
        .bind(per_second)
        .bind(concurrency)
        .bind(self.infra.clock.now_ms())
        .execute(&self.infra.db.pool)
        .await?;
        let text = |n: Option<i64>| n.map(|n| n.to_string()).unwrap_or_default();
        self.write_settings(topic, "-", &text(per_second), &text(concurrency))
            .await?;
        self.topic_now(topic).await
    }

    /// Writes settings into Redis; `-` leaves a setting as it is, '' removes a limit.
    async fn write_settings(
        &self,
        topic: &str,
        paused: &str,
        per_second: &str,
        concurrency: &str,
    ) -> AppResult<()> {
        let set = JobsTopicSet {
            settings: self.infra.keys.jobs_settings(topic),
        };
        let args = JobsTopicSetArgs {
            paused,
            per_second,
            concurrency,
        };
        let _one = self.infra.scripts().call(&set, &args).await?;
        Ok(())
    }

    /// Every topic's settings as SQL records them.
    pub(crate) async fn recorded_settings(&self) -> AppResult<Vec<(String, TopicSettings)>> {
        let rows = sqlx::query(
            "SELECT topic, paused, per_second, concurrency FROM job_topic ORDER BY topic",
        )
        .fetch_all(&self.infra.db.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok((
                    row.try_get("topic")?,
                    TopicSettings {
                        paused: row.try_get::<i64, _>("paused")? != 0,
                        per_second: row.try_get("per_second")?,
                        concurrency: row.try_get("concurrency")?,
                    },
                ))
            })
            .collect()
    }

    /// A topic's counts.
    pub(crate) async fn topic_now_counts(&self, topic: &str) -> AppResult<JobCounts> {
        Ok(self.topic_now(topic).await?.counts)
    }

    /// A topic's settings as Redis holds them.
    pub(crate) async fn live_settings(&self, topic: &str) -> AppResult<TopicSettings> {
        let view = self.topic_now(topic).await?;
        Ok(TopicSettings {
            paused: view.paused,
            per_second: view.per_second,
            concurrency: view.concurrency,
        })
    }

    /// Gives Redis the settings SQL records (a rebuild).
    pub(crate) async fn restore_settings(
        &self,
        topic: &str,
        settings: &TopicSettings,
    ) -> AppResult<()> {
        let text = |n: Option<i64>| n.map(|n| n.to_string()).unwrap_or_default();
        let flag = if settings.paused { "1" } else { "0" };
        self.write_settings(
            topic,
            flag,
            &text(settings.per_second),
            &text(settings.concurrency),
        )
        .await
    }

    /// Dead jobs not requeued, per topic, as SQL records them.
    pub(crate) async fn recorded_dead_counts(&self) -> AppResult<Vec<(String, i64)>> {
        let rows = sqlx::query(
            "SELECT topic, COUNT(*) AS n FROM dead_job WHERE requeued_at_ms IS NULL \
             GROUP BY topic ORDER BY topic",
        )
        .fetch_all(&self.infra.db.pool)
        .await?;
        rows.iter()
            .map(|row| Ok((row.try_get("topic")?, row.try_get("n")?)))
            .collect()
    }

    /// Moves (`add`) or sets (`set`) a topic's count of dead jobs.
    pub(crate) async fn count_dead(&self, topic: &str, mode: &str, n: i64) -> AppResult<i64> {
        let count = JobsDeadCount {
            counts: self.infra.keys.jobs_counts(topic),
        };
        self.infra
            .scripts()
            .call(&count, &JobsDeadCountArgs { mode, n })
            .await
    }
}

/// 1.
impl Replies for JobsTopicSet {
    type Reply = i64;
}

/// The count after the call.
impl Replies for JobsDeadCount {
    type Reply = i64;
}

impl Keys {
    /// A topic's live channel: each change of one of its jobs publishes the job's id.
    pub(crate) fn jobs_live(&self, topic: &str) -> String {
        self.tagged(Self::jobs_tag(topic), "live")
    }
}

impl Jobs {
    /// Each change of a topic's jobs (of the job `id` only, when given), as the job is once
    /// it changed: every script that moves a job publishes its id on the topic's channel
    /// while anyone listens there (the scripts that move many jobs at once ask first).
    /// Subscribes before returning (confirmed by Redis), so no change after this call is
    /// missed; changes in quick succession may be seen as their latest state. After a lag or
    /// a reconnect, the watched job is read again (a whole topic's are not).
    pub(crate) async fn changes(
        &self,
        topic: &str,
        id: Option<String>,
    ) -> AppResult<impl futures::Stream<Item = super::JobView>> {
        check_topic(topic)?;
        let subscription = self
            .infra
            .live
            .subscribe(self.infra.keys.jobs_live(topic))
            .await;
        let state = (self.clone(), topic.to_string(), id, subscription);
        Ok(futures::stream::unfold(
            state,
            |(jobs, topic, id, mut subscription)| async move {
                loop {
                    let changed = match subscription.recv().await? {
                        crate::infra::live::LiveMessage::Payload(changed) => changed.to_string(),
                        crate::infra::live::LiveMessage::Resync => match &id {
                            Some(id) => id.clone(),
                            None => continue,
                        },
                    };
                    if id.as_ref().is_some_and(|id| *id != changed) {
                        continue;
                    }
                    match jobs.find(&topic, &changed).await {
                        Ok(Some(view)) => return Some((view, (jobs, topic, id, subscription))),
                        Ok(None) => continue,
                        Err(error) => {
                            tracing::warn!(%error, topic, job = changed, "jobChanged: job not read");
                            continue;
                        }
                    }
                }
            },
        ))
    }
}
