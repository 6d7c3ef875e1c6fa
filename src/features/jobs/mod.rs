//! The delay queue: jobs wait in a delay zset, are promoted to their topic's waiting zset by
//! one atomic script, are taken with a visibility deadline (a worker that dies gives its job
//! back), retry on a ladder, and end in `dead_job` when their
//! attempts are used up. Delivery is at-least-once; handlers are idempotent.
//!
//! Keys of a topic share the hash tag `{jobs:<topic>}`: a hash per job (its JSON under `job`,
//! beside its attempts, error, lease, status, history and the rest: [`Keys::job`]), delay
//! zset, waiting zset, in-flight zset, finished zset. Every script touches one topic, so one
//! slot.
//!
//! SQL holds every job still to run ([`pending`]), so that a Redis that lost its data can be
//! told what it lacks and be given it back ([`recovery`]).
//!
//! - [`worker`]: the tick that promotes and runs jobs in every instance;
//! - [`topics`]: the index of topics with work due, which the tick walks;
//! - [`handlers`]: in-process handlers per topic, and HTTP callbacks behind an allow-list;
//! - [`gauges`]: the jobs per topic and state at `/metrics`;
//! - [`control`]: a topic's counts, pause and limits;
//! - [`manage`]: bulk add, promote, change of delay, clean, requeue of a topic's dead jobs;
//! - [`repeat`]: repeating jobs, every N seconds or on a cron pattern in a time zone;
//! - [`upgrade`]: an earlier version's keys, moved to this one's when the worker starts.

pub mod control;
pub(crate) mod gauges;
pub mod handlers;
mod manage;
mod pending;
mod ready;
pub mod recovery;
pub mod repeat;
pub mod settings;
pub mod signing;
mod topics;
mod upgrade;
pub(crate) mod worker;

use std::time::Duration;

use redis::Value as RedisValue;
use serde::{Deserialize, Serialize};
use sqlx::Row;

use std::sync::Arc;

use crate::infra::page::PageArgs;
use crate::infra::{
    error::{AppError, AppResult, ErrorCode},
    metrics::BoundedLabel,
    redis::status::Status,
    redis::{
        scripts::{JobsCancel, JobsCancelArgs, JobsSchedule, JobsScheduleArgs, Replies},
        KeyPart, Keys,
    },
    Infra,
};

/// What the delay queue works with: the handlers of its topics, and its pace.
#[derive(Clone)]
pub struct Jobs {
    pub(crate) infra: Infra,
    pub registry: Arc<JobRegistry>,
    pub settings: Arc<JobsSettings>,
    /// The `topic` label of the delay queue's metrics ([`Jobs::topic_label`]).
    pub(crate) topic_labels: Arc<BoundedLabel>,
}

pub use settings::JobsSettings;

pub use handlers::{Backoff, BackoffKind, JobError, JobHandler, JobRegistry, TopicPolicy};
pub use manage::MAX_BATCH;
pub use repeat::{Repeat, RepeatRule};

/// Topics an instance names in its metrics; any further topic is counted as `other`.
/// Topics are whatever an admin schedules under, so their number has no bound of its own.
pub(crate) const TOPIC_LABELS: usize = 50;

impl Jobs {
    /// The `topic` label of a metric about `topic`.
    fn topic_label(&self, topic: &str) -> String {
        self.topic_labels.of(topic)
    }

    /// Registers the in-process handler of `topic` (see [`JobRegistry::register`]); the
    /// topic's counters are exported from now on, at 0 until they count.
    pub(crate) fn register(
        &self,
        topic: &str,
        handler: Arc<dyn JobHandler>,
        policy: Option<TopicPolicy>,
    ) {
        self.registry.register(topic, handler, policy);
        crate::infra::metrics::topic_counted(self.topic_label(topic));
    }
}

/// The default retry ladder, seconds before each retry: 15 s, 3 min, 10 min, 30 min, 30 min,
/// 1 h, 2 h, 6 h, 15 h.
pub(crate) const DEFAULT_LADDER: [u64; 9] = [15, 180, 600, 1800, 1800, 3600, 7200, 21_600, 54_000];
pub(crate) const MAX_BODY_BYTES: usize = 64 * 1024;
pub(crate) const MAX_DELAY_SECONDS: i64 = 365 * 24 * 3600;
/// Finished (done or cancelled) jobs remembered per topic for `job`/`jobs`.
pub(crate) const FINISHED_KEPT: usize = 1000;
/// `jobs` pages through the first 100,000 jobs of a topic in one state (an admin view; the
/// dead ones come from SQL by OFFSET, which grows with the position).
pub(crate) const MAX_LIST_OFFSET: usize = 100_000;

impl Keys {
    fn jobs_tag(topic: &str) -> impl KeyPart + '_ {
        ("jobs:", topic)
    }

    /// A job's hash (`lua/include/jobs_fields.lua`).
    pub fn job(&self, topic: &str, id: &str) -> String {
        self.tagged(Self::jobs_tag(topic), ("job:", id))
    }

    /// What a job's hash is named with its id appended: the scripts that touch many jobs of
    /// a topic join the two.
    pub(crate) fn jobs_of(&self, topic: &str) -> String {
        self.job(topic, "")
    }

    /// The one hash per topic in which an earlier version kept every job's fields, which the
    /// worker moves into hashes per job when it starts (`lua/jobs_lift.lua`).
    pub fn jobs_legacy_pool(&self, topic: &str) -> String {
        self.tagged(Self::jobs_tag(topic), "pool")
    }

    pub fn jobs_delayed(&self, topic: &str) -> String {
        self.tagged(Self::jobs_tag(topic), "delayed")
    }

    /// The ready list of an earlier version, which promotion moves into the waiting zset.
    pub fn jobs_ready(&self, topic: &str) -> String {
        self.tagged(Self::jobs_tag(topic), "ready")
    }

    /// Due jobs waiting for a worker, by priority and due time (`lua/jobs_promote.lua`).
    pub fn jobs_waiting(&self, topic: &str) -> String {
        self.tagged(Self::jobs_tag(topic), "waiting")
    }

    pub fn jobs_running(&self, topic: &str) -> String {
        self.tagged(Self::jobs_tag(topic), "running")
    }

    pub fn jobs_finished(&self, topic: &str) -> String {
        self.tagged(Self::jobs_tag(topic), "finished")
    }
}

/// What the pool stores of a job.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct JobSpec {
    pub(crate) body: String,
    pub run_at_ms: i64,
    pub(crate) max_attempts: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) callback_url: Option<String>,
    pub(crate) created_at_ms: i64,
    /// This scheduling's number (an id from [`crate::infra::ids`]), the key of its SQL row; 0 for a
    /// job scheduled before SQL recorded pending jobs.
    #[serde(default)]
    pub(crate) seq: i64,
    /// 0 to 1000: among due jobs, a higher one is taken first.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) priority: u32,
    /// The job's own backoff; `None`: its topic's ladder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) backoff: Option<Backoff>,
    /// Finished jobs its topic keeps once it is done (BullMQ's `removeOnComplete`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) remove_on_complete: Option<u32>,
    /// Dead jobs its topic keeps once it died (BullMQ's `removeOnFail`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) remove_on_fail: Option<u32>,
    /// Its series, when it repeats.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) repeat: Option<Repeat>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// The highest priority.
pub const MAX_PRIORITY: u32 = 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, async_graphql::Enum)]
pub enum JobStatus {
    Delayed,
    Ready,
    Running,
    Done,
    Dead,
    Cancelled,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobView {
    pub id: String,
    pub(crate) topic: String,
    pub(crate) body: String,
    pub run_at_ms: i64,
    pub attempts: u32,
    pub max_attempts: u32,
    pub status: JobStatus,
    pub last_error: Option<String>,
    pub(crate) callback_url: Option<String>,
    pub priority: u32,
    /// Its series, when it repeats.
    pub repeat: Option<Repeat>,
    pub details: JobDetails,
}

/// What a job's runs left: progress, result, times, history.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobDetails {
    /// JSON text, as its last `reportJobProgress` gave it.
    pub progress: Option<String>,
    /// JSON text: what its callback answered when it was done.
    pub result: Option<String>,
    /// Runs that ended: done, and for a repeating job also those that died.
    pub runs: u32,
    pub created_at_ms: i64,
    pub started_at_ms: Option<i64>,
    pub finished_at_ms: Option<i64>,
    /// Its newest events (at most 20), oldest first.
    pub history: Vec<JobEvent>,
}

/// One change of a job's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobEvent {
    pub at_ms: i64,
    pub status: JobStatus,
    pub attempt: u32,
    pub error: Option<String>,
}

/// Events a job's history keeps (`HISTORY_KEPT` in `lua/include/jobs_fields.lua`).
pub const HISTORY_KEPT: usize = 20;

/// A job's history: the stored one, `[[at, state, attempt, error], …]` (what does not read
/// is left out), then the running delivery's event, `running`. The scripts store that one
/// only when the delivery ends (`ran_event` in `lua/include/jobs_fields.lua`: a take writes
/// no history), so it is read from the job's start and attempts here. An event that repeats
/// the one before it is an earlier version's: its take stored the running event too.
fn history_of(text: Option<&str>, running: Option<JobEvent>) -> Vec<JobEvent> {
    let mut events = text.map_or_else(Vec::new, stored_history);
    events.extend(running);
    events.dedup();
    let past = events.len().saturating_sub(HISTORY_KEPT);
    events.drain(..past);
    events
}

fn stored_history(text: &str) -> Vec<JobEvent> {
    let events: Vec<(f64, String, f64, String)> = serde_json::from_str(text).unwrap_or_default();
    events
        .into_iter()
        .filter_map(|(at, state, attempt, error)| {
            let status = match state.as_str() {
                "DELAYED" => JobStatus::Delayed,
                "READY" => JobStatus::Ready,
                "RUNNING" => JobStatus::Running,
                "DONE" => JobStatus::Done,
                "DEAD" => JobStatus::Dead,
                "CANCELLED" => JobStatus::Cancelled,
                _ => return None,
            };
            Some(JobEvent {
                at_ms: at as i64,
                status,
                attempt: attempt.max(0.0) as u32,
                error: (!error.is_empty()).then_some(error),
            })
        })
        .collect()
}

/// A job to add.
pub struct NewJob {
    pub id: String,
    pub topic: String,
    pub body: String,
    pub delay: Duration,
    pub max_attempts: Option<u32>,
    pub callback_url: Option<String>,
    /// 0 to [`MAX_PRIORITY`].
    pub priority: u32,
    /// `None`: the topic's ladder.
    pub backoff: Option<Backoff>,
    /// Done jobs the topic keeps once this one is done; `None`: 1,000.
    pub remove_on_complete: Option<u32>,
    /// Dead jobs the topic keeps once this one died; `None`: all.
    pub remove_on_fail: Option<u32>,
    /// Runs it again and again; its first run is the schedule's first time at or after
    /// `delay` from now.
    pub repeat: Option<RepeatRule>,
}

/// Ids and topics: 1 to `max` of A-Z a-z 0-9 _ - . : (never `}`, which would end a key's
/// hash tag, nor `/`, which joined a job's fields in an earlier version's pool).
fn is_name(value: &str, max: usize) -> bool {
    !value.is_empty()
        && value.len() <= max
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.:".contains(&b))
}

fn check_name(what: &str, value: &str, max: usize) -> AppResult<()> {
    if is_name(value, max) {
        Ok(())
    } else {
        Err(AppError::bad_input(format!(
            "{what} must be 1 to {max} of A-Z a-z 0-9 _ - . :"
        )))
    }
}

const MAX_ID_BYTES: usize = 128;

/// Whether a string could be a job's id. Nothing else is looked up in a pool, where
/// `<id>/…` are a job's own fields: any other string names no job.
fn is_job_id(id: &str) -> bool {
    is_name(id, MAX_ID_BYTES)
}

/// Whether a topic and an id could name a job: a global id holding other strings names
/// none, where `find` would refuse the topic.
pub(crate) fn could_name_a_job(topic: &str, id: &str) -> bool {
    check_topic(topic).is_ok() && is_job_id(id)
}

fn check_topic(topic: &str) -> AppResult<()> {
    check_name("topic", topic, 64)
}

impl NewJob {
    /// A job of `topic` due after `delay`, with its topic's attempts and backoff, no
    /// callback (a registered handler runs it), priority 0, the default retention and no
    /// repeat: the fields callers change are set after.
    pub fn new(
        id: impl Into<String>,
        topic: impl Into<String>,
        body: String,
        delay: Duration,
    ) -> Self {
        Self {
            id: id.into(),
            topic: topic.into(),
            body,
            delay,
            max_attempts: None,
            callback_url: None,
            priority: 0,
            backoff: None,
            remove_on_complete: None,
            remove_on_fail: None,
            repeat: None,
        }
    }

    fn validate(&self, ctx: &Jobs) -> AppResult<u32> {
        check_name("id", &self.id, MAX_ID_BYTES)?;
        check_topic(&self.topic)?;
        if self.body.len() > MAX_BODY_BYTES
            || serde_json::from_str::<serde_json::Value>(&self.body).is_err()
        {
            return Err(AppError::bad_input(format!(
                "body must be JSON text of at most {MAX_BODY_BYTES} bytes"
            )));
        }
        if let Some(url) = &self.callback_url {
            handlers::check_callback_syntax(url)?;
        }
        let max_attempts = self
            .max_attempts
            .unwrap_or_else(|| ctx.registry.policy(&self.topic).default_attempts());
        if let Some(backoff) = &self.backoff {
            backoff.check()?;
        }
        if self.priority > MAX_PRIORITY {
            return Err(AppError::bad_input(format!(
                "priority must be between 0 and {MAX_PRIORITY}"
            )));
        }
        if !(1..=25).contains(&max_attempts) {
            return Err(AppError::bad_input("maxAttempts must be between 1 and 25"));
        }
        // Here too, not only when scheduled: bad input is refused before the topic's route
        // is (`NO_JOB_HANDLER`, `CALLBACK_HOST_NOT_ALLOWED`).
        if let Some(rule) = &self.repeat {
            let from = ctx.infra.clock.now_ms() + self.delay.as_millis() as i64;
            rule.clone().check(ctx.infra.clock.zone(), from)?;
        }
        Ok(max_attempts)
    }
}

fn only_answer(mut answers: Vec<AppResult<JobView>>) -> AppResult<JobView> {
    answers
        .pop()
        .unwrap_or_else(|| Err(AppError::internal(anyhow::anyhow!("no answer for a job"))))
}

/// Fills the answers of the placed records (at their `positions`) and returns them all.
fn answer(
    topics: &BoundedLabel,
    mut answers: Vec<Option<AppResult<JobView>>>,
    records: Vec<pending::Record>,
    placed: Vec<Placed>,
    positions: Vec<usize>,
) -> Vec<AppResult<JobView>> {
    for ((record, placed), position) in records.into_iter().zip(placed).zip(positions) {
        answers[position] = Some(match placed {
            Placed::Added => {
                metrics::counter!("engage_jobs_scheduled_total", "topic" => topics.of(&record.topic))
                    .increment(1);
                Ok(JobView {
                    id: record.id,
                    topic: record.topic,
                    body: record.spec.body,
                    run_at_ms: record.spec.run_at_ms,
                    attempts: 0,
                    max_attempts: record.spec.max_attempts,
                    status: JobStatus::Delayed,
                    last_error: None,
                    callback_url: record.spec.callback_url,
                    priority: record.spec.priority,
                    repeat: record.spec.repeat,
                    details: JobDetails {
                        created_at_ms: record.spec.created_at_ms,
                        history: vec![JobEvent {
                            at_ms: record.spec.created_at_ms,
                            status: JobStatus::Delayed,
                            attempt: 0,
                            error: None,
                        }],
                        ..JobDetails::default()
                    },
                })
            }
            Placed::Pending(_) => Err(AppError::client(
                ErrorCode::JobExists,
                format!("topic {} has a job {}", record.topic, record.id),
            )),
        });
    }
    answers.into_iter().flatten().collect()
}

/// How the schedule script answered for one job.
enum Placed {
    Added,
    /// A pending job has the id; what it holds, if it reads as a job.
    Pending(Option<Box<JobSpec>>),
}

fn dead_view(row: &sqlx::any::AnyRow) -> AppResult<JobView> {
    let died_at: i64 = row.try_get("died_at_ms")?;
    let attempts = row.try_get::<i64, _>("attempts")? as u32;
    let error: String = row.try_get("last_error")?;
    Ok(JobView {
        id: row.try_get("job_id")?,
        topic: row.try_get("topic")?,
        body: row.try_get("body")?,
        run_at_ms: row.try_get("died_at_ms")?,
        attempts: row.try_get::<i64, _>("attempts")? as u32,
        max_attempts: row.try_get::<i64, _>("max_attempts")? as u32,
        status: JobStatus::Dead,
        last_error: Some(row.try_get("last_error")?),
        callback_url: row.try_get("callback_url")?,
        priority: row.try_get::<i64, _>("priority")?.clamp(0, 1000) as u32,
        repeat: None,
        details: JobDetails {
            // Rows of jobs that died before the column was added have none.
            created_at_ms: row.try_get::<Option<i64>, _>("created_at_ms")?.unwrap_or(0),
            finished_at_ms: Some(died_at),
            history: vec![JobEvent {
                at_ms: died_at,
                status: JobStatus::Dead,
                attempt: attempts,
                error: Some(error),
            }],
            ..JobDetails::default()
        },
    })
}

impl Jobs {
    /// Adds a job; `JOB_EXISTS` if the topic has a pending job with this id (an id whose job
    /// ended, done or cancelled, may be used again).
    pub async fn schedule(&self, job: NewJob) -> AppResult<JobView> {
        let mut sql = self.infra.db.pool.acquire().await?;
        only_answer(self.schedule_jobs(Some(&mut sql), vec![job]).await?)
    }

    /// [`Jobs::schedule`] for a job from the API: refused unless something can deliver it
    /// (`NO_JOB_HANDLER`, `CALLBACK_HOST_NOT_ALLOWED`, see [`JobRegistry::check_route`]).
    pub(crate) async fn submit(&self, job: NewJob) -> AppResult<JobView> {
        job.validate(self)?;
        self.registry
            .check_route(&job.topic, job.callback_url.as_deref())?;
        self.schedule(job).await
    }

    /// [`Jobs::schedule`] without the SQL row, for a job that belongs to something not in SQL yet,
    /// whose archiving schedules the job again with its row ([`Jobs::schedule_in`] then finds the
    /// job pending and records it): until then the job is as durable as what it belongs to, and
    /// the request that made it pays no SQL write. A seckill schedules its order's expiry so;
    /// the order consumer records it with the order.
    pub(crate) async fn schedule_ahead_of_record(&self, job: NewJob) -> AppResult<JobView> {
        only_answer(self.schedule_jobs(None, vec![job]).await?)
    }

    /// Adds jobs of any topics, their SQL rows written through `sql` (a caller's transaction,
    /// or a pooled connection): one answer per job, in order, each its view or why not
    /// (`JOB_EXISTS`, `BAD_USER_INPUT`). A batch costs a few statements and one script call per
    /// topic, whatever its size.
    ///
    /// The rows are written before Redis is: a job Redis accepted is in SQL (unless the caller's
    /// transaction then rolls back, and then the caller failed too). When SQL is down, nothing
    /// is scheduled and the caller hears UNAVAILABLE: an acknowledged job survives the loss of
    /// Redis. (Scheduling into Redis alone and recording later would keep scheduling up during
    /// an SQL outage, but a Redis lost meanwhile would take acknowledged jobs with it.) When
    /// Redis fails after SQL, the rows stay: the caller heard UNAVAILABLE (the job may or may
    /// not be scheduled), `engage verify` names them and a rebuild schedules them.
    pub(crate) async fn schedule_in(
        &self,
        sql: &mut sqlx::AnyConnection,
        jobs: Vec<NewJob>,
    ) -> AppResult<Vec<AppResult<JobView>>> {
        self.schedule_jobs(Some(sql), jobs).await
    }

    /// [`Jobs::schedule_in`], or without SQL rows when `sql` is `None`.
    async fn schedule_jobs(
        &self,
        sql: Option<&mut sqlx::AnyConnection>,
        jobs: Vec<NewJob>,
    ) -> AppResult<Vec<AppResult<JobView>>> {
        let now = self.infra.clock.now_ms();
        let mut answers: Vec<Option<AppResult<JobView>>> = Vec::with_capacity(jobs.len());
        let mut records = Vec::with_capacity(jobs.len());
        let mut positions = Vec::with_capacity(jobs.len());
        for job in jobs {
            let from = now + job.delay.as_millis() as i64;
            let checked = job.validate(self).and_then(|max_attempts| {
                let repeat = job
                    .repeat
                    .clone()
                    .map(|rule| rule.check(self.infra.clock.zone(), from))
                    .transpose()?;
                Ok((max_attempts, repeat))
            });
            let (max_attempts, repeat) = match checked {
                Ok(checked) => checked,
                Err(error) => {
                    answers.push(Some(Err(error)));
                    continue;
                }
            };
            let run_at_ms = repeat.as_ref().map_or(from, |(_, first)| *first);
            positions.push(answers.len());
            answers.push(None);
            records.push(pending::Record {
                spec: JobSpec {
                    body: job.body,
                    run_at_ms,
                    max_attempts,
                    callback_url: job.callback_url,
                    created_at_ms: now,
                    seq: self.infra.ids.next_id().await?,
                    priority: job.priority,
                    backoff: job.backoff,
                    remove_on_complete: job.remove_on_complete,
                    remove_on_fail: job.remove_on_fail,
                    repeat: repeat.map(|(repeat, _)| repeat),
                },
                topic: job.topic,
                id: job.id,
                attempts: 0,
                runs: 0,
            });
        }
        let Some(sql) = sql else {
            let placed = self.place(&records).await?;
            return Ok(answer(
                &self.topic_labels,
                answers,
                records,
                placed,
                positions,
            ));
        };
        let written = pending::insert_new(sql, &records).await?;
        let placed = self.place(&records).await?;

        // Make each row describe the job Redis holds.
        let mut rewrite = Vec::new();
        let mut refused = Vec::new();
        for (record, placed) in records.iter().zip(&placed) {
            let ours = written.contains(&record.spec.seq);
            match placed {
                // A row was in the way: one of a job that ended without its row being removed,
                // or of a scheduling whose Redis write failed.
                Placed::Added if !ours => rewrite.push(record.clone()),
                // Our row stands for a job Redis refused: it must describe the pending one.
                Placed::Pending(theirs) if ours => match theirs.as_ref().filter(|t| t.seq > 0) {
                    Some(spec) => rewrite.push(pending::Record {
                        spec: (**spec).clone(),
                        attempts: 0,
                        runs: 0,
                        ..record.clone()
                    }),
                    // A job scheduled before SQL recorded jobs has no row to keep.
                    None => refused.push(record.spec.seq),
                },
                Placed::Added | Placed::Pending(_) => {}
            }
        }
        pending::put(sql, &rewrite).await?;
        pending::forget(sql, &refused).await?;
        Ok(answer(
            &self.topic_labels,
            answers,
            records,
            placed,
            positions,
        ))
    }

    /// Puts jobs into their topics' keys (one script call per topic; an id that is pending is
    /// refused), then moves each topic's visit to its earliest new job. Answers per record.
    async fn place(&self, records: &[pending::Record]) -> AppResult<Vec<Placed>> {
        if records.is_empty() {
            return Ok(Vec::new());
        }
        let keys = &self.infra.keys;
        let mut by_topic: Vec<(&str, Vec<usize>)> = Vec::new();
        for (index, record) in records.iter().enumerate() {
            match by_topic
                .iter_mut()
                .find(|(topic, _)| *topic == record.topic)
            {
                Some((_, indices)) => indices.push(index),
                None => by_topic.push((&record.topic, vec![index])),
            }
        }
        let mut placed: Vec<Option<Placed>> = records.iter().map(|_| None).collect();
        let mut due = Vec::new();
        for (topic, indices) in &by_topic {
            let mut jobs = Vec::with_capacity(indices.len());
            for &index in indices {
                let record = &records[index];
                let json = serde_json::to_string(&record.spec).map_err(AppError::internal)?;
                jobs.push((
                    &record.id,
                    json,
                    record.spec.run_at_ms,
                    record.attempts,
                    record.spec.priority,
                    record.runs,
                ));
            }
            let schedule = JobsSchedule {
                jobs: keys.jobs_of(topic),
                delayed: keys.jobs_delayed(topic),
                finished: keys.jobs_finished(topic),
                counts: keys.jobs_counts(topic),
            };
            let replies = self
                .infra
                .scripts()
                .call(
                    &schedule,
                    &JobsScheduleArgs {
                        now_ms: self.infra.clock.now_ms(),
                        channel: keys.jobs_live(topic),
                        publish: keys.publish_command(),
                        jobs,
                    },
                )
                .await?;
            let mut earliest = None;
            for (&index, (status, pending)) in indices.iter().zip(replies) {
                placed[index] = Some(if status == Status::Ok {
                    let run_at = records[index].spec.run_at_ms;
                    earliest = Some(earliest.map_or(run_at, |at: i64| at.min(run_at)));
                    Placed::Added
                } else {
                    Placed::Pending(serde_json::from_str(&pending).ok().map(Box::new))
                });
            }
            if let Some(at) = earliest {
                due.push((topic.to_string(), at));
            }
        }
        self.index(&due).await?;
        placed
            .into_iter()
            .map(|p| {
                p.ok_or_else(|| {
                    AppError::internal(anyhow::anyhow!("schedule script answered short"))
                })
            })
            .collect()
    }

    /// Cancels a pending job wherever it is. `false` when there is no pending job by that id.
    pub async fn cancel(&self, topic: &str, id: &str) -> AppResult<bool> {
        let mut sql = self.infra.db.pool.acquire().await?;
        self.cancel_in(&mut sql, topic, id).await
    }

    /// [`Jobs::cancel`], then the job as it is after it (`None`: no job by that id).
    pub(crate) async fn cancel_and_find(
        &self,
        topic: &str,
        id: &str,
    ) -> AppResult<(bool, Option<JobView>)> {
        let cancelled = self.cancel(topic, id).await?;
        Ok((cancelled, self.find(topic, id).await?))
    }

    /// [`Jobs::cancel`], removing the job's SQL row through `sql` (a caller's transaction).
    pub(crate) async fn cancel_in(
        &self,
        sql: &mut sqlx::AnyConnection,
        topic: &str,
        id: &str,
    ) -> AppResult<bool> {
        check_topic(topic)?;
        if !is_job_id(id) {
            return Ok(false);
        }
        let keys = &self.infra.keys;
        let job = JobsCancel {
            delayed: keys.jobs_delayed(topic),
            waiting: keys.jobs_waiting(topic),
            running: keys.jobs_running(topic),
            job: keys.job(topic, id),
            finished: keys.jobs_finished(topic),
            legacy: keys.jobs_ready(topic),
        };
        let args = JobsCancelArgs {
            id,
            now_ms: self.infra.clock.now_ms(),
            channel: keys.jobs_live(topic),
            publish: keys.publish_command(),
        };
        let (cancelled, json, pending) = self.infra.scripts().call(&job, &args).await?;
        if cancelled != 1 {
            return Ok(false);
        }
        if pending == 0 {
            // The topic's last pending job: its visit comes now, which drops it from the
            // index (and the gauges), rather than at the cancelled job's due time.
            let now = self.infra.clock.now_ms();
            if let Err(error) = self.index(&[(topic.to_string(), now)]).await {
                tracing::warn!(%error, topic, "an emptied topic not indexed: it stays until its next visit");
            }
        }
        // Redis cancelled it; a row left behind (SQL failed here) is one that a rebuild finds
        // cancelled in the pool and removes.
        if let Ok(spec) = serde_json::from_str::<JobSpec>(&json) {
            pending::forget(sql, &[spec.seq]).await?;
        }
        Ok(true)
    }

    /// Where a job is and what it holds; `None` for an unknown job.
    pub async fn find(&self, topic: &str, id: &str) -> AppResult<Option<JobView>> {
        check_topic(topic)?;
        if !is_job_id(id) {
            return Ok(None);
        }
        Ok(self
            .describe(topic, &[id.to_string()])
            .await?
            .pop()
            .flatten()
            .or(self.dead(topic, id).await?))
    }

    /// Details of jobs of one topic, in one pipeline.
    async fn describe(&self, topic: &str, ids: &[String]) -> AppResult<Vec<Option<JobView>>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let keys = &self.infra.keys;
        let mut pipe = redis::pipe();
        for id in ids {
            let job = keys.job(topic, id);
            pipe.cmd("HMGET")
                .arg(&job)
                .arg(&["job", "attempts", "error", "status"]);
            pipe.cmd("HMGET").arg(&job).arg(&[
                "progress", "result", "runs", "started", "finished", "history",
            ]);
            pipe.cmd("ZSCORE").arg(keys.jobs_delayed(topic)).arg(id);
            pipe.cmd("ZSCORE").arg(keys.jobs_running(topic)).arg(id);
        }
        let mut conn = self.infra.redis.get().await?;
        let replies: Vec<RedisValue> = pipe.query_async(&mut *conn).await?;
        let mut replies = replies.into_iter();
        let mut views = Vec::with_capacity(ids.len());
        for id in ids {
            let parse = |v: Option<RedisValue>| v.unwrap_or(RedisValue::Nil);
            let (json, attempts, error, status): (
                Option<String>,
                Option<u32>,
                Option<String>,
                Option<String>,
            ) = redis::FromRedisValue::from_redis_value(parse(replies.next()))
                .map_err(|e| AppError::internal(anyhow::anyhow!("{e}")))?;
            #[allow(clippy::type_complexity)]
            let (progress, result, runs, started, finished, history): (
                Option<String>,
                Option<String>,
                Option<u32>,
                Option<i64>,
                Option<i64>,
                Option<String>,
            ) = redis::FromRedisValue::from_redis_value(parse(replies.next()))
                .map_err(|e| AppError::internal(anyhow::anyhow!("{e}")))?;
            let delayed: Option<f64> =
                redis::FromRedisValue::from_redis_value(parse(replies.next())).unwrap_or(None);
            let running: Option<f64> =
                redis::FromRedisValue::from_redis_value(parse(replies.next())).unwrap_or(None);
            let Some(json) = json else {
                views.push(None);
                continue;
            };
            let spec: JobSpec = serde_json::from_str(&json).map_err(AppError::internal)?;
            let status = match (status.as_deref(), running, delayed) {
                (Some("DONE"), _, _) => JobStatus::Done,
                (Some("CANCELLED"), _, _) => JobStatus::Cancelled,
                (_, Some(_), _) => JobStatus::Running,
                (_, _, Some(_)) => JobStatus::Delayed,
                _ => JobStatus::Ready,
            };
            views.push(Some(JobView {
                id: id.clone(),
                topic: topic.to_string(),
                body: spec.body,
                run_at_ms: delayed.map_or(spec.run_at_ms, |at| at as i64),
                attempts: attempts.unwrap_or(0),
                max_attempts: spec.max_attempts,
                status,
                last_error: error,
                callback_url: spec.callback_url,
                priority: spec.priority,
                repeat: spec.repeat,
                details: JobDetails {
                    progress,
                    result,
                    runs: runs.unwrap_or(0),
                    created_at_ms: spec.created_at_ms,
                    started_at_ms: started,
                    finished_at_ms: finished,
                    history: history_of(
                        history.as_deref(),
                        (status == JobStatus::Running).then(|| JobEvent {
                            at_ms: started.unwrap_or_default(),
                            status: JobStatus::Running,
                            attempt: attempts.unwrap_or(0),
                            error: None,
                        }),
                    ),
                },
            }));
        }
        Ok(views)
    }

    /// The newest unrequeued death of a job, if any.
    async fn dead(&self, topic: &str, id: &str) -> AppResult<Option<JobView>> {
        let row = sqlx::query(
            "SELECT job_id, topic, body, callback_url, attempts, max_attempts, last_error, died_at_ms, priority, created_at_ms FROM dead_job \
             WHERE topic = $1 AND job_id = $2 AND requeued_at_ms IS NULL ORDER BY died_at_ms DESC LIMIT 1",
        )
        .bind(topic)
        .bind(id)
        .fetch_optional(&self.infra.db.pool)
        .await?;
        row.map(|row| dead_view(&row)).transpose()
    }

    /// A page of a topic's jobs in one state (`offset` based: an admin view).
    pub(crate) async fn list(
        &self,
        topic: &str,
        status: JobStatus,
        page: PageArgs<usize>,
    ) -> AppResult<(Vec<JobView>, bool)> {
        let PageArgs {
            first,
            after: offset,
        } = page;
        check_topic(topic)?;
        let keys = &self.infra.keys;
        let (start, stop) = (offset as i64, (offset + first) as i64); // one extra: is there more?
        let ids: Vec<String> = {
            let mut conn = self.infra.redis.get().await?;
            match status {
                JobStatus::Delayed => {
                    redis::cmd("ZRANGE")
                        .arg(keys.jobs_delayed(topic))
                        .arg(start)
                        .arg(stop)
                        .query_async(&mut *conn)
                        .await?
                }
                JobStatus::Ready => {
                    redis::cmd("ZRANGE")
                        .arg(keys.jobs_waiting(topic))
                        .arg(start)
                        .arg(stop)
                        .query_async(&mut *conn)
                        .await?
                }
                JobStatus::Running => {
                    redis::cmd("ZRANGE")
                        .arg(keys.jobs_running(topic))
                        .arg(start)
                        .arg(stop)
                        .query_async(&mut *conn)
                        .await?
                }
                JobStatus::Done | JobStatus::Cancelled => {
                    redis::cmd("ZREVRANGE")
                        .arg(keys.jobs_finished(topic))
                        .arg(0)
                        .arg(FINISHED_KEPT)
                        .query_async(&mut *conn)
                        .await?
                }
                JobStatus::Dead => return self.list_dead(topic, first, offset).await,
            }
        };
        let mut views: Vec<JobView> = self
            .describe(topic, &ids)
            .await?
            .into_iter()
            .flatten()
            .filter(|v| v.status == status)
            .collect();
        if matches!(status, JobStatus::Done | JobStatus::Cancelled) {
            views = views.into_iter().skip(offset).collect();
        }
        Ok(crate::infra::page::split_page(views, first))
    }

    async fn list_dead(
        &self,
        topic: &str,
        first: usize,
        offset: usize,
    ) -> AppResult<(Vec<JobView>, bool)> {
        let rows = sqlx::query(
            "SELECT job_id, topic, body, callback_url, attempts, max_attempts, last_error, died_at_ms, priority, created_at_ms FROM dead_job \
             WHERE topic = $1 AND requeued_at_ms IS NULL ORDER BY died_at_ms DESC LIMIT $2 OFFSET $3",
        )
        .bind(topic)
        .bind(first as i64 + 1)
        .bind(offset as i64)
        .fetch_all(&self.infra.db.pool)
        .await?;
        let views = rows.iter().map(dead_view).collect::<AppResult<Vec<_>>>()?;
        Ok(crate::infra::page::split_page(views, first))
    }

    /// Puts a dead job back in the queue (due now, attempts from zero).
    pub(crate) async fn requeue_dead(&self, topic: &str, id: &str) -> AppResult<JobView> {
        let dead = self
            .dead(topic, id)
            .await?
            .ok_or_else(|| AppError::not_found(format!("no dead job {id} in topic {topic}")))?;
        let view = self
            .schedule(NewJob {
                max_attempts: Some(dead.max_attempts),
                callback_url: dead.callback_url.clone(),
                priority: dead.priority,
                ..NewJob::new(&dead.id, &dead.topic, dead.body.clone(), Duration::ZERO)
            })
            .await?;
        let requeued = sqlx::query("UPDATE dead_job SET requeued_at_ms = $1 WHERE topic = $2 AND job_id = $3 AND requeued_at_ms IS NULL")
            .bind(self.infra.clock.now_ms())
            .bind(topic)
            .bind(id)
            .execute(&self.infra.db.pool)
            .await?
            .rows_affected();
        if requeued > 0 {
            self.count_dead(topic, "add", -(requeued as i64)).await?;
        }
        Ok(view)
    }
}

/// Two per job, in order: OK and '', or TAKEN and the JSON of the job pending by that id.
impl Replies for JobsSchedule {
    type Reply = Vec<(Status, String)>;
}

/// 1, the JSON of the job cancelled and whether its topic has a job pending still (0 none,
/// 1 some); or 0, '' and 1 when no such job was pending.
impl Replies for JobsCancel {
    type Reply = (i64, String, i64);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(at_ms: i64, status: JobStatus, attempt: u32) -> JobEvent {
        JobEvent {
            at_ms,
            status,
            attempt,
            error: None,
        }
    }

    #[test]
    fn a_running_delivery_ends_the_history_which_keeps_its_newest_events() {
        let stored: Vec<String> = (1..=HISTORY_KEPT)
            .map(|n| format!(r#"[{n},"DELAYED",{n},"failed"]"#))
            .collect();
        let stored = format!("{}[{}]", " ".repeat(HISTORY_KEPT), stored.join(","));
        let running = event(99, JobStatus::Running, 21);
        let history = history_of(Some(&stored), Some(running.clone()));
        assert_eq!(history.len(), HISTORY_KEPT);
        assert_eq!(history[0].at_ms, 2, "the oldest goes");
        assert_eq!(history[HISTORY_KEPT - 1], running);
        assert_eq!(history_of(None, None), []);
    }

    #[test]
    fn a_delivery_stored_when_it_began_is_read_once() {
        let stored = r#"  [[1,"DELAYED",0,""],[5,"RUNNING",1,""]]"#;
        let running = event(5, JobStatus::Running, 1);
        assert_eq!(
            history_of(Some(stored), Some(running.clone())),
            [event(1, JobStatus::Delayed, 0), running]
        );
    }
}
