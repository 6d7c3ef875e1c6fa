//! `engage verify` and `engage rebuild` for the delay queue. SQL's `pending_job` is the
//! record of the jobs still to run; Redis must hold each of them pending (its JSON in the
//! pool, its id in the delay zset, the ready list or the in-flight zset) with its topic in
//! the index of due topics, and no pending job that SQL lacks; a repeating job's count of runs
//! (toward its limit) is the same in both.
//!
//! A rebuild schedules every row again at its due time, with the attempts it recorded,
//! through the script that schedules new jobs: an id that is pending in Redis is left alone,
//! so it is safe while instances serve, and a second run changes nothing. A row whose job
//! the pool remembers ending (done or cancelled under the row's own seq) was left behind by
//! an ending whose SQL write failed: it is removed, not run again.

use std::collections::{BTreeSet, HashMap, HashSet};

use super::{
    pending::{self, Record},
    JobSpec,
};
use crate::{
    features::jobs::Jobs,
    infra::{
        error::AppResult,
        recovery::{Rebuild, Report},
    },
};

/// Rows a rebuild restores per chunk (one script call per topic of the chunk).
const CHUNK: usize = 1000;
/// Ids read from one Redis key per command while verifying.
const READ_BATCH: usize = 10_000;

/// `text` matched literally by a SCAN pattern.
fn glob_escape(text: &str) -> String {
    text.chars()
        .flat_map(|c| match c {
            '*' | '?' | '[' | ']' | '\\' => vec!['\\', c],
            _ => vec![c],
        })
        .collect()
}

impl Jobs {
    /// Compares the pending jobs of SQL and Redis, topic by topic.
    pub async fn verify(&self) -> AppResult<Report> {
        let mut report = Report::new("delayed jobs");
        let mut all_topics: BTreeSet<String> = pending::topics(&self.infra.db.pool)
            .await?
            .into_iter()
            .collect();
        all_topics.extend(self.topics_in_redis().await?);
        let all_topics: Vec<String> = all_topics.into_iter().collect();
        let indexed = self.indexed(&all_topics).await?;
        for (topic, indexed) in all_topics.iter().zip(indexed) {
            let in_sql: HashMap<String, i64> = pending::ids_of(&self.infra.db.pool, topic)
                .await?
                .into_iter()
                .collect();
            let queued = self.queued_in_redis(topic).await?;
            let pooled = self.pooled(topic, &queued).await?;
            for (id, recorded) in &in_sql {
                let live = pooled.get(id);
                report.check(live == Some(recorded), || match live {
                    None => format!("job {id} of topic {topic} is pending in SQL but not in Redis"),
                    Some(live) => format!(
                        "job {id} of topic {topic} counts {live} runs in Redis but {recorded} in SQL"
                    ),
                });
            }
            for id in pooled.keys().filter(|id| !in_sql.contains_key(*id)) {
                report.check(false, || {
                    format!("job {id} of topic {topic} is pending in Redis but not in SQL")
                });
            }
            for id in queued.iter().filter(|id| !pooled.contains_key(*id)) {
                report.check(false, || {
                    format!("job {id} of topic {topic} is queued in Redis without its JSON")
                });
            }
            if !queued.is_empty() {
                report.check(indexed, || {
                    format!("topic {topic} has pending jobs but is not in the index of due topics")
                });
            }
        }
        for (topic, recorded) in self.recorded_settings().await? {
            let live = self.live_settings(&topic).await?;
            report.check(live == recorded, || {
                format!("topic {topic} has settings {live:?} in Redis but {recorded:?} in SQL")
            });
        }
        let dead: HashMap<String, i64> = self.recorded_dead_counts().await?.into_iter().collect();
        let mut counted: BTreeSet<&String> = all_topics.iter().collect();
        counted.extend(dead.keys());
        for topic in counted {
            let recorded = dead.get(topic).copied().unwrap_or(0);
            let live = self.topic_now_counts(topic).await?.dead;
            report.check(live == recorded, || {
                format!("topic {topic} counts {live} dead jobs in Redis but {recorded} in SQL")
            });
        }
        Ok(report)
    }

    /// Gives Redis each topic's settings and count of dead jobs from SQL, and lists those
    /// topics again. Idempotent.
    async fn restore_topics(&self) -> AppResult<()> {
        let now = self.infra.clock.now_ms();
        let mut named = Vec::new();
        for (topic, settings) in self.recorded_settings().await? {
            self.restore_settings(&topic, &settings).await?;
            named.push((topic, now));
        }
        let dead = self.recorded_dead_counts().await?;
        let counted: HashSet<&String> = dead.iter().map(|(topic, _)| topic).collect();
        for topic in self.topics_in_redis().await? {
            if !counted.contains(&topic) {
                self.count_dead(&topic, "set", 0).await?;
            }
        }
        for (topic, n) in dead {
            self.count_dead(&topic, "set", n).await?;
            named.push((topic, now));
        }
        // Due now: the first walk finds each one's next visit, or drops it.
        self.index(&named).await
    }

    /// Schedules every row of `pending_job` again, in seq order, resuming a stopped run.
    pub async fn rebuild(&self, run: &Rebuild<'_>) -> AppResult<()> {
        self.restore_topics().await?;
        let mut cursor = run.resume_from().await?;
        run.expect(pending::count_after(&self.infra.db.pool, cursor).await?);
        loop {
            let rows = pending::after(&self.infra.db.pool, cursor, CHUNK).await?;
            let Some(last) = rows.last().map(|row| row.spec.seq) else {
                return Ok(());
            };
            self.restore(&rows).await?;
            run.finished_through(last, rows.len() as u64).await?;
            cursor = last;
        }
    }

    /// Puts a chunk of rows back into Redis, removes the rows of jobs that ended, and moves each
    /// topic's visit to its earliest row.
    async fn restore(&self, rows: &[Record]) -> AppResult<()> {
        let remembered = self.remembered(rows).await?;
        let (ended, live): (Vec<_>, Vec<_>) = rows
            .iter()
            .zip(remembered)
            .partition(|(row, ended_seq)| *ended_seq == Some(row.spec.seq));
        let live: Vec<Record> = live.into_iter().map(|(row, _)| row.clone()).collect();
        self.place(&live).await?;
        // A topic whose jobs were pending already may have lost its place in the index.
        let mut earliest: HashMap<&str, i64> = HashMap::new();
        for row in &live {
            let at = earliest.entry(&row.topic).or_insert(row.spec.run_at_ms);
            *at = (*at).min(row.spec.run_at_ms);
        }
        let due: Vec<(String, i64)> = earliest
            .into_iter()
            .map(|(topic, at)| (topic.to_string(), at))
            .collect();
        self.index(&due).await?;
        let ended: Vec<i64> = ended.into_iter().map(|(row, _)| row.spec.seq).collect();
        if !ended.is_empty() {
            let mut sql = self.infra.db.pool.acquire().await?;
            pending::forget(&mut sql, &ended).await?;
            tracing::info!(
                jobs = ended.len(),
                "rows of jobs that had ended were removed"
            );
        }
        Ok(())
    }

    /// For each row, the seq of the job the pool remembers ending under its id (done or
    /// cancelled), if any.
    async fn remembered(&self, rows: &[Record]) -> AppResult<Vec<Option<i64>>> {
        let mut pipe = redis::pipe();
        for row in rows {
            pipe.cmd("HMGET")
                .arg(self.infra.keys.job(&row.topic, &row.id))
                .arg(&["job", "status"]);
        }
        let mut conn = self.infra.redis.get().await?;
        let replies: Vec<(Option<String>, Option<String>)> = pipe.query_async(&mut *conn).await?;
        Ok(replies
            .into_iter()
            .map(|(json, status)| match status.as_deref() {
                Some("DONE" | "CANCELLED") => json
                    .and_then(|json| serde_json::from_str::<JobSpec>(&json).ok())
                    .map(|spec| spec.seq),
                _ => None,
            })
            .collect())
    }

    /// Topics that have keys in Redis, from their key names. Jobs' hashes (`…}:job:<id>`)
    /// are not matched: a topic's other keys name it, and they are few.
    async fn topics_in_redis(&self) -> AppResult<BTreeSet<String>> {
        let start = format!("{}{{jobs:", self.infra.keys.prefix());
        let pattern = format!("{}*}}:[^j]*", glob_escape(&start));
        Ok(self
            .infra
            .redis
            .scan(&pattern)
            .await?
            .iter()
            .filter_map(|key| {
                let rest = key.strip_prefix(&start)?;
                Some(rest.split_once("}:")?.0.to_string())
            })
            .collect())
    }

    /// The ids in a topic's delay zset, ready list and in-flight zset.
    async fn queued_in_redis(&self, topic: &str) -> AppResult<HashSet<String>> {
        let keys = &self.infra.keys;
        let mut ids = HashSet::new();
        let mut conn = self.infra.redis.get().await?;
        for (command, key) in [
            ("ZRANGE", keys.jobs_delayed(topic)),
            ("ZRANGE", keys.jobs_waiting(topic)),
            ("LRANGE", keys.jobs_ready(topic)),
            ("ZRANGE", keys.jobs_running(topic)),
        ] {
            let mut start = 0;
            loop {
                let page: Vec<String> = redis::cmd(command)
                    .arg(&key)
                    .arg(start)
                    .arg(start + READ_BATCH - 1)
                    .query_async(&mut *conn)
                    .await?;
                let full = page.len() == READ_BATCH;
                ids.extend(page);
                if !full {
                    break;
                }
                start += READ_BATCH;
            }
        }
        Ok(ids)
    }

    /// Of the queued ids, those whose JSON the pool holds (as a job that has not ended), each
    /// with the runs of its series.
    async fn pooled(
        &self,
        topic: &str,
        queued: &HashSet<String>,
    ) -> AppResult<HashMap<String, i64>> {
        let queued: Vec<&String> = queued.iter().collect();
        let mut pooled = HashMap::new();
        let mut conn = self.infra.redis.get().await?;
        for chunk in queued.chunks(1000) {
            let mut pipe = redis::pipe();
            for id in chunk {
                pipe.cmd("HMGET")
                    .arg(self.infra.keys.job(topic, id))
                    .arg(&["job", "status", "runs"]);
            }
            let replies: Vec<(Option<String>, Option<String>, Option<i64>)> =
                pipe.query_async(&mut *conn).await?;
            for (id, (json, status, runs)) in chunk.iter().zip(replies) {
                if json.is_some() && !matches!(status.as_deref(), Some("DONE" | "CANCELLED")) {
                    pooled.insert((*id).clone(), runs.unwrap_or(0));
                }
            }
        }
        Ok(pooled)
    }
}

#[cfg(test)]
mod tests {
    use super::glob_escape;

    #[test]
    fn a_prefix_is_matched_literally() {
        assert_eq!(glob_escape("app:[1]*?\\"), "app:\\[1\\]\\*\\?\\\\");
        assert_eq!(glob_escape("engage:{jobs:"), "engage:{jobs:");
    }
}
