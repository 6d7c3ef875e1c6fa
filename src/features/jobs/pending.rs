//! The SQL record of pending jobs (`pending_job`, migration 0009): what `engage rebuild`
//! schedules again when Redis lost its data. Redis decides (an id is taken, a lease is
//! held); SQL follows it, so that every job pending in Redis has its row:
//! - a scheduling writes the row first and Redis second ([`super::Jobs::schedule_in`]);
//! - an ending (done, dead, cancelled) removes the row after Redis applied it, by the job's
//!   `seq`, so an ending never removes the row of a newer job with the same id;
//! - a retry writes its due time and attempts; single deliveries are not written (one
//!   statement per delivery would put SQL on the hot path), so a rebuilt job may run again;
//! - a repeating job's next run writes its due time and counts the run that ended.
//!
//! Statements take many rows at once (the order consumer schedules a batch of expiries in
//! one), through the caller's connection: a transaction of its own, or a pooled one.

use std::collections::HashSet;

use sqlx::{AnyConnection, AnyPool, Row};

use super::JobSpec;
use crate::infra::{
    db::{self, values_placeholders, Backend},
    error::AppResult,
};

/// A job as its row holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) topic: String,
    pub(crate) id: String,
    pub(crate) spec: JobSpec,
    /// Deliveries so far (0 for a new job; the attempts of its last retry otherwise).
    pub(crate) attempts: u32,
    /// Runs of its series that ended (0 for a job that does not repeat).
    pub(crate) runs: u32,
}

const COLUMNS: &str =
    "topic, job_id, seq, body, callback_url, run_at_ms, attempts, max_attempts, created_at_ms, \
     priority, options, runs";

/// `INSERT INTO pending_job (…) VALUES (…), … ` with the records bound.
fn insert<'q>(
    sql: &'q str,
    records: &'q [Record],
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
    let mut query = sqlx::query(sql);
    for record in records {
        query = query
            .bind(&record.topic)
            .bind(&record.id)
            .bind(record.spec.seq)
            .bind(&record.spec.body)
            .bind(&record.spec.callback_url)
            .bind(record.spec.run_at_ms)
            .bind(i64::from(record.attempts))
            .bind(i64::from(record.spec.max_attempts))
            .bind(record.spec.created_at_ms)
            .bind(i64::from(record.spec.priority))
            .bind(Options::of(&record.spec).text())
            .bind(i64::from(record.runs));
    }
    query
}

/// Writes the rows of new jobs whose (topic, id) has none; the seqs of those written.
pub(crate) async fn insert_new(
    sql: &mut AnyConnection,
    records: &[Record],
) -> AppResult<HashSet<i64>> {
    let mut written = HashSet::new();
    for chunk in db::runs(records) {
        let statement = format!(
            "INSERT INTO pending_job ({COLUMNS}) VALUES {} \
             ON CONFLICT (topic, job_id) DO NOTHING RETURNING seq",
            values_placeholders(Backend::of(sql), chunk.len(), 12)
        );
        for row in insert(&statement, chunk).fetch_all(&mut *sql).await? {
            written.insert(row.try_get("seq")?);
        }
    }
    Ok(written)
}

/// Makes the rows of these jobs say what the records say, whatever they said before.
pub(crate) async fn put(sql: &mut AnyConnection, records: &[Record]) -> AppResult<()> {
    // One row per (topic, id) and statement: PostgreSQL refuses to update a row twice in one.
    let mut seen = HashSet::new();
    let mut last_first: Vec<Record> = records
        .iter()
        .rev()
        .filter(|r| seen.insert((r.topic.clone(), r.id.clone())))
        .cloned()
        .collect();
    last_first.reverse();
    for chunk in db::runs(&last_first) {
        let statement = format!(
            "INSERT INTO pending_job ({COLUMNS}) VALUES {} ON CONFLICT (topic, job_id) DO UPDATE \
             SET seq = excluded.seq, body = excluded.body, callback_url = excluded.callback_url, \
             run_at_ms = excluded.run_at_ms, attempts = excluded.attempts, \
             max_attempts = excluded.max_attempts, created_at_ms = excluded.created_at_ms, \
             priority = excluded.priority, options = excluded.options, runs = excluded.runs",
            values_placeholders(Backend::of(sql), chunk.len(), 12)
        );
        insert(&statement, chunk).execute(&mut *sql).await?;
    }
    Ok(())
}

/// Removes the rows of jobs that ended, by seq (0, a job from before this record, has none).
pub(crate) async fn forget(sql: &mut AnyConnection, seqs: &[i64]) -> AppResult<()> {
    let seqs: Vec<i64> = seqs.iter().copied().filter(|seq| *seq > 0).collect();
    for run in db::runs(&seqs) {
        let statement = format!(
            "DELETE FROM pending_job WHERE seq IN ({})",
            db::params(Backend::of(sql), 1, run.len())
        );
        let mut delete = sqlx::query(&statement);
        for seq in run {
            delete = delete.bind(*seq);
        }
        delete.execute(&mut *sql).await?;
    }
    Ok(())
}

/// A retry of a job: when it is due again, and the attempts it used.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Retry {
    pub(crate) seq: i64,
    pub(crate) run_at_ms: i64,
    pub(crate) attempts: u32,
}

/// Writes the due time and attempts of retried jobs, a statement per run.
pub(crate) async fn record_retries(sql: &mut AnyConnection, retries: &[Retry]) -> AppResult<()> {
    let retries: Vec<&Retry> = retries.iter().filter(|r| r.seq > 0).collect();
    for run in db::runs(&retries) {
        let statement = format!(
            "UPDATE pending_job SET run_at_ms = v.run_at_ms, attempts = v.attempts \
             FROM ({}) AS v WHERE pending_job.seq = v.seq",
            db::rows_table(
                Backend::of(sql),
                run.len(),
                &["seq", "run_at_ms", "attempts"]
            )
        );
        let mut update = sqlx::query(&statement);
        for retry in run {
            update = update
                .bind(retry.seq)
                .bind(retry.run_at_ms)
                .bind(i64::from(retry.attempts));
        }
        update.execute(&mut *sql).await?;
    }
    Ok(())
}
/// A repeating job whose run ended and whose next run is due at `run_at_ms`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NextRun {
    pub(crate) seq: i64,
    pub(crate) run_at_ms: i64,
}

/// Writes the next runs of repeating jobs, counting the runs that ended, a statement per run.
pub(crate) async fn record_next_runs(sql: &mut AnyConnection, next: &[NextRun]) -> AppResult<()> {
    let next: Vec<&NextRun> = next.iter().filter(|r| r.seq > 0).collect();
    for run in db::runs(&next) {
        let statement = format!(
            "UPDATE pending_job SET run_at_ms = v.run_at_ms, attempts = 0, runs = runs + 1 \
             FROM ({}) AS v WHERE pending_job.seq = v.seq",
            db::rows_table(Backend::of(sql), run.len(), &["seq", "run_at_ms"])
        );
        let mut update = sqlx::query(&statement);
        for next in run {
            update = update.bind(next.seq).bind(next.run_at_ms);
        }
        update.execute(&mut *sql).await?;
    }
    Ok(())
}

/// Moves the due time of one job's row.
pub(crate) async fn reschedule(sql: &mut AnyConnection, seq: i64, run_at_ms: i64) -> AppResult<()> {
    sqlx::query("UPDATE pending_job SET run_at_ms = $1 WHERE seq = $2")
        .bind(run_at_ms)
        .bind(seq)
        .execute(&mut *sql)
        .await?;
    Ok(())
}

/// What the `options` column holds of a job.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct Options {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    backoff: Option<super::Backoff>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    remove_on_complete: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    remove_on_fail: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    repeat: Option<super::Repeat>,
}

impl Options {
    fn of(spec: &JobSpec) -> Self {
        Self {
            backoff: spec.backoff,
            remove_on_complete: spec.remove_on_complete,
            remove_on_fail: spec.remove_on_fail,
            repeat: spec.repeat.clone(),
        }
    }

    /// NULL when the job has none.
    fn text(&self) -> Option<String> {
        let none = self.backoff.is_none()
            && self.remove_on_complete.is_none()
            && self.remove_on_fail.is_none()
            && self.repeat.is_none();
        (!none).then(|| serde_json::to_string(self).unwrap_or_default())
    }
}

fn record_of(row: &sqlx::any::AnyRow) -> AppResult<Record> {
    let options: Options = row
        .try_get::<Option<String>, _>("options")?
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or_default();
    Ok(Record {
        topic: row.try_get("topic")?,
        id: row.try_get("job_id")?,
        attempts: row
            .try_get::<i64, _>("attempts")?
            .clamp(0, i64::from(u32::MAX)) as u32,
        runs: row.try_get::<i64, _>("runs")?.clamp(0, i64::from(u32::MAX)) as u32,
        spec: JobSpec {
            body: row.try_get("body")?,
            run_at_ms: row.try_get("run_at_ms")?,
            max_attempts: row.try_get::<i64, _>("max_attempts")?.clamp(1, 25) as u32,
            callback_url: row.try_get("callback_url")?,
            created_at_ms: row.try_get("created_at_ms")?,
            seq: row.try_get("seq")?,
            priority: row.try_get::<i64, _>("priority")?.clamp(0, 1000) as u32,
            backoff: options.backoff,
            remove_on_complete: options.remove_on_complete,
            remove_on_fail: options.remove_on_fail,
            repeat: options.repeat,
        },
    })
}

/// Rows after `seq`, in seq order: a rebuild's chunk.
pub(crate) async fn after(pool: &AnyPool, seq: i64, limit: usize) -> AppResult<Vec<Record>> {
    let rows = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM pending_job WHERE seq > $1 ORDER BY seq LIMIT $2"
    ))
    .bind(seq)
    .bind(limit as i64)
    .fetch_all(pool)
    .await?;
    rows.iter().map(record_of).collect()
}

/// How many rows come after `seq`.
pub(crate) async fn count_after(pool: &AnyPool, seq: i64) -> AppResult<u64> {
    let count: i64 = sqlx::query("SELECT COUNT(*) AS n FROM pending_job WHERE seq > $1")
        .bind(seq)
        .fetch_one(pool)
        .await?
        .try_get("n")?;
    Ok(count.max(0) as u64)
}

/// Every topic with a pending job.
pub(crate) async fn topics(pool: &AnyPool) -> AppResult<Vec<String>> {
    let rows = sqlx::query("SELECT DISTINCT topic FROM pending_job ORDER BY topic")
        .fetch_all(pool)
        .await?;
    rows.iter().map(|row| Ok(row.try_get("topic")?)).collect()
}

/// The ids of a topic's pending jobs, each with the runs its series ended (0 for a job that
/// does not repeat).
pub(crate) async fn ids_of(pool: &AnyPool, topic: &str) -> AppResult<Vec<(String, i64)>> {
    let rows = sqlx::query("SELECT job_id, runs FROM pending_job WHERE topic = $1 ORDER BY job_id")
        .bind(topic)
        .fetch_all(pool)
        .await?;
    rows.iter()
        .map(|row| Ok((row.try_get("job_id")?, row.try_get("runs")?)))
        .collect()
}
