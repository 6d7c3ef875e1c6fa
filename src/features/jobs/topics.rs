//! The index of topics with work due: `{jobs}:due`, a zset of topic → the next time the topic
//! needs promoting (its earliest due time or visibility deadline, or now while it has ready
//! jobs). The promotion tick walks only the topics due by now, and a topic that has no
//! pending job left is dropped, so the index holds the topics with work, not every topic
//! ever used. An end or a cancel that leaves a topic with no pending job moves its visit to
//! now, so it is dropped at the next tick rather than at the visit its last job had set.
//! (It replaces `{jobs}:topics`, a set of every topic ever seen that every tick walked in
//! full.)
//!
//! The index lives in its own slot, apart from the topics' keys, so no script can move a job
//! and its topic's visit together. Two rules keep a job from being forgotten:
//! - a job reaches its topic's keys first, and the topic's visit is moved earlier after
//!   ([`Jobs::index`], never later), so a visit is never later than a job already added;
//! - a walk moves a topic's visit later only if nobody indexed the topic since the walk read
//!   the index: every [`Jobs::index`] gives the topic a new mark, and [`Jobs::reindex`] compares marks.
//!   A job added while the walk promoted its topic (and perhaps unseen by it) changes the
//!   mark, so the topic keeps its early visit and is walked again at the next tick.
//!
//! A failure between the two writes of a scheduling leaves the topic's visit as it was: the
//! job is found at the topic's next visit, or by `engage rebuild`, which indexes the topics
//! of every job it restores.

use crate::{
    features::jobs::Jobs,
    infra::{
        error::AppResult,
        redis::{
            scripts::{JobsIndex, JobsIndexArgs, JobsReindex, JobsReindexArgs, Replies},
            Keys,
        },
    },
};

impl Keys {
    /// Topics with pending jobs, scored by their next visit (epoch ms).
    pub(crate) fn jobs_due_topics(&self) -> String {
        self.tagged("jobs", "due")
    }

    /// Each indexed topic's mark: the number of the last [`Jobs::index`] write for it.
    fn jobs_due_marks(&self) -> String {
        self.tagged("jobs", "marks")
    }

    /// Where marks come from; they are never reused.
    fn jobs_due_mark_counter(&self) -> String {
        self.tagged("jobs", "mark")
    }

    /// The set of every topic ever seen, which the index replaced (adopted at start).
    fn jobs_all_topics(&self) -> String {
        self.tagged("jobs", "topics")
    }
}

/// A topic due for a visit, with the mark it had when the walk read it.
pub(super) struct Visit {
    pub(crate) topic: String,
    mark: String,
}

impl Jobs {
    /// Moves each topic's visit to `at` (epoch ms) if that is earlier, and marks the topic. Call
    /// it after the topic's jobs were written, never before.
    pub(super) async fn index(&self, due: &[(String, i64)]) -> AppResult<()> {
        if due.is_empty() {
            return Ok(());
        }
        let keys = &self.infra.keys;
        let index = JobsIndex {
            due: keys.jobs_due_topics(),
            marks: keys.jobs_due_marks(),
            mark: keys.jobs_due_mark_counter(),
            known: keys.jobs_known_topics(),
        };
        let _zero = self
            .infra
            .scripts()
            .call(&index, &JobsIndexArgs { topics: due })
            .await?;
        Ok(())
    }

    /// The topics due by `now`, at most `limit` of them, earliest first.
    pub(super) async fn due(&self, now: i64, limit: usize) -> AppResult<Vec<Visit>> {
        let keys = &self.infra.keys;
        let mut conn = self.infra.redis.get().await?;
        let topics: Vec<String> = redis::cmd("ZRANGEBYSCORE")
            .arg(keys.jobs_due_topics())
            .arg("-inf")
            .arg(now)
            .arg("LIMIT")
            .arg(0)
            .arg(limit)
            .query_async(&mut *conn)
            .await?;
        if topics.is_empty() {
            return Ok(Vec::new());
        }
        // Read after the topics: a mark written in between belongs to a job already in its
        // topic's keys, which the walk that follows sees.
        let marks: Vec<Option<String>> = redis::cmd("HMGET")
            .arg(keys.jobs_due_marks())
            .arg(&topics)
            .query_async(&mut *conn)
            .await?;
        Ok(topics
            .into_iter()
            .zip(marks)
            .map(|(topic, mark)| Visit {
                topic,
                mark: mark.unwrap_or_default(),
            })
            .collect())
    }

    /// After a walk: each visited topic's next visit (epoch ms), `None` when it has no pending
    /// job. A topic indexed since the walk read it keeps its visit.
    pub(super) async fn reindex(&self, visited: &[(&Visit, Option<i64>)]) -> AppResult<()> {
        if visited.is_empty() {
            return Ok(());
        }
        let keys = &self.infra.keys;
        let index = JobsReindex {
            due: keys.jobs_due_topics(),
            marks: keys.jobs_due_marks(),
        };
        let topics: Vec<_> = visited
            .iter()
            .map(|(visit, next)| (&visit.topic, &visit.mark, next.unwrap_or(-1)))
            .collect();
        let _moved = self
            .infra
            .scripts()
            .call(&index, &JobsReindexArgs { topics })
            .await?;
        Ok(())
    }

    /// Indexes the topics of the set that listed every topic (due now: the first walk finds
    /// each one's next visit, or drops it) and removes that set. Idempotent.
    pub(super) async fn adopt_topic_set(&self) -> AppResult<()> {
        let keys = &self.infra.keys;
        let topics: Vec<String> = {
            let mut conn = self.infra.redis.get().await?;
            redis::cmd("SMEMBERS")
                .arg(keys.jobs_all_topics())
                .query_async(&mut *conn)
                .await?
        };
        if topics.is_empty() {
            return Ok(());
        }
        let now = self.infra.clock.now_ms();
        let due: Vec<(String, i64)> = topics.into_iter().map(|topic| (topic, now)).collect();
        self.index(&due).await?;
        let mut conn = self.infra.redis.get().await?;
        let () = redis::cmd("DEL")
            .arg(keys.jobs_all_topics())
            .query_async(&mut *conn)
            .await?;
        tracing::info!(
            topics = due.len(),
            "delay queue topics moved to the index of due topics"
        );
        Ok(())
    }

    /// Whether each topic is in the index (`engage verify`).
    pub(super) async fn indexed(&self, topics: &[String]) -> AppResult<Vec<bool>> {
        if topics.is_empty() {
            return Ok(Vec::new());
        }
        let mut conn = self.infra.redis.get().await?;
        let scores: Vec<Option<f64>> = redis::cmd("ZMSCORE")
            .arg(self.infra.keys.jobs_due_topics())
            .arg(topics)
            .query_async(&mut *conn)
            .await?;
        Ok(scores.into_iter().map(|score| score.is_some()).collect())
    }
}

/// 0.
impl Replies for JobsIndex {
    type Reply = i64;
}

/// How many topics were moved or dropped.
impl Replies for JobsReindex {
    type Reply = i64;
}
