//! GraphQL types of the delay queue.

use std::time::Duration;

use async_graphql::{InputObject, Object, SimpleObject, ID};

use super::{
    id::{kind::JobKey, JobNodeId, TopicNodeId},
    page::text_cost,
    scalars::{DateTime, Json},
};
use crate::{
    features::jobs::{
        self,
        control::{JobCounts as Counts, TopicView},
        Backoff, BackoffKind, JobStatus, JobView, NewJob, RepeatRule, MAX_DELAY_SECONDS,
        MAX_PRIORITY,
    },
    infra::{
        auth::RoleGuard,
        error::{AppError, AppResult},
    },
};

/// A job's body may be as long as a job may carry.
const BODY_COST: usize = text_cost(jobs::MAX_BODY_BYTES);

/// Who may use the queue: every field of it, and `node` given a job's or a topic's id. A
/// service schedules and watches its own work; a user may not.
pub(crate) fn readers() -> RoleGuard {
    RoleGuard::service_or_admin()
}

/// A topic of the delay queue: its jobs per state, and what holds them back.
pub(crate) struct Topic(pub TopicView);

#[Object]
impl Topic {
    /// The global id (of the topic's name).
    pub(crate) async fn id(&self) -> TopicNodeId {
        TopicNodeId::new(self.0.name.clone())
    }

    async fn name(&self) -> &str {
        &self.0.name
    }

    /// Whether `pauseTopic` paused it: no job is handed out, running ones finish.
    async fn paused(&self) -> bool {
        self.0.paused
    }

    /// Most jobs started per second, across all instances; null: no limit.
    async fn per_second(&self) -> Option<i64> {
        self.0.per_second
    }

    /// Most jobs running at once, across all instances; null: no limit.
    async fn concurrency(&self) -> Option<i64> {
        self.0.concurrency
    }

    /// Jobs per state, exact.
    async fn counts(&self) -> JobCounts {
        JobCounts(self.0.counts)
    }
}

/// A topic's jobs per state.
pub(crate) struct JobCounts(Counts);

#[Object]
impl JobCounts {
    /// Waiting for their due time.
    async fn delayed(&self) -> i64 {
        self.0.delayed
    }

    /// Due, waiting for a worker (0 while the topic is paused: see `paused`).
    async fn ready(&self) -> i64 {
        self.0.ready
    }

    /// Handed to a worker, not finished yet.
    async fn running(&self) -> i64 {
        self.0.running
    }

    /// Completed since Redis last started empty.
    async fn done(&self) -> i64 {
        self.0.done
    }

    /// Out of attempts, not requeued.
    async fn dead(&self) -> i64 {
        self.0.dead
    }

    /// Due, waiting for the topic to be resumed.
    async fn paused(&self) -> i64 {
        self.0.paused
    }
}

pub(crate) struct Job(pub JobView);

#[Object]
impl Job {
    /// The global id (of the topic and the job id together).
    pub(crate) async fn id(&self) -> JobNodeId {
        JobNodeId::new(JobKey {
            topic: self.0.topic.clone(),
            id: self.0.id.clone(),
        })
    }

    /// The id given at scheduling, unique among the topic's pending jobs: what `job`,
    /// `cancelJob` and `requeueDeadJob` take with the topic.
    async fn job_id(&self) -> ID {
        ID(self.0.id.clone())
    }

    async fn topic(&self) -> &str {
        &self.0.topic
    }

    /// The body as JSON text.
    #[graphql(complexity = "BODY_COST", deprecation = "Use `data`, the body parsed.")]
    async fn body(&self) -> &str {
        &self.0.body
    }

    /// The body, parsed.
    #[graphql(complexity = "BODY_COST")]
    async fn data(&self) -> AppResult<Json> {
        // Every body was checked to be JSON when it was scheduled.
        Json::from_text(&self.0.body).map_err(|error| {
            AppError::internal(anyhow::anyhow!(
                "job {} has a body that is not JSON: {error}",
                self.0.id
            ))
        })
    }

    /// When it is (or was) due; for a dead job, when it died.
    async fn run_at(&self) -> DateTime {
        DateTime::from_ms(self.0.run_at_ms)
    }

    /// Deliveries so far.
    async fn attempts(&self) -> i64 {
        i64::from(self.0.attempts)
    }

    async fn max_attempts(&self) -> i64 {
        i64::from(self.0.max_attempts)
    }

    async fn status(&self) -> JobStatus {
        self.0.status
    }

    async fn last_error(&self) -> Option<&str> {
        self.0.last_error.as_deref()
    }

    /// 0 to 1000; among due jobs, higher runs first.
    async fn priority(&self) -> i64 {
        i64::from(self.0.priority)
    }

    /// What its handler last reported with `reportJobProgress`.
    #[graphql(complexity = "BODY_COST")]
    async fn progress(&self) -> Option<Json> {
        self.0
            .details
            .progress
            .as_deref()
            .and_then(|t| Json::from_text(t).ok())
    }

    /// What its callback answered (JSON) when it was done.
    #[graphql(complexity = "BODY_COST")]
    async fn result(&self) -> Option<Json> {
        self.0
            .details
            .result
            .as_deref()
            .and_then(|t| Json::from_text(t).ok())
    }

    /// Runs that ended: times it was done, and for a repeating job also its runs that died
    /// (each in `deadJobs`; the series goes on).
    async fn runs(&self) -> i64 {
        i64::from(self.0.details.runs)
    }

    /// Its series, when it repeats; null for a job that runs once.
    async fn repeat(&self) -> Option<Repeat> {
        self.0.repeat.clone().map(Repeat)
    }

    /// When it is due next: its due time while delayed (for a repeating job, its next run),
    /// else null.
    async fn next_run_at(&self) -> Option<DateTime> {
        (self.0.status == JobStatus::Delayed).then(|| DateTime::from_ms(self.0.run_at_ms))
    }

    /// When it was scheduled (for a dead job that died before its record kept this: when it
    /// died).
    async fn created_at(&self) -> DateTime {
        match self.0.details.created_at_ms {
            0 => DateTime::from_ms(self.0.run_at_ms),
            at => DateTime::from_ms(at),
        }
    }

    /// When its latest delivery started.
    async fn started_at(&self) -> Option<DateTime> {
        self.0.details.started_at_ms.map(DateTime::from_ms)
    }

    /// When it ended: done, cancelled or dead.
    async fn finished_at(&self) -> Option<DateTime> {
        self.0.details.finished_at_ms.map(DateTime::from_ms)
    }

    /// Its newest events, oldest first: at most `first` (default and at most 20; the job
    /// keeps its 20 newest).
    async fn history(
        &self,
        #[graphql(default_with = "jobs::HISTORY_KEPT as i32")] first: i32,
    ) -> AppResult<Vec<JobEvent>> {
        let kept = jobs::HISTORY_KEPT;
        if !usize::try_from(first).is_ok_and(|first| first <= kept) {
            return Err(AppError::bad_input(format!(
                "first must be between 0 and {kept}"
            )));
        }
        let events = &self.0.details.history;
        let skip = events.len().saturating_sub(first as usize);
        Ok(events[skip..].iter().cloned().map(JobEvent).collect())
    }

    async fn callback_url(&self) -> Option<&str> {
        self.0.callback_url.as_deref()
    }
}

#[derive(InputObject)]
pub(crate) struct ScheduleJobInput {
    /// Unique among the topic's pending jobs: 1 to 128 of A-Z a-z 0-9 _ - . :
    pub(crate) id: ID,
    /// 1 to 64 of A-Z a-z 0-9 _ - . :
    pub(crate) topic: String,
    /// The body as JSON text; give this or `data`, not both.
    pub(crate) body: Option<String>,
    /// The body as a JSON value; give this or `body`, not both. At most 64 KiB either way,
    /// as JSON text.
    pub(crate) data: Option<Json>,
    /// 0 to 31,536,000.
    pub(crate) delay_seconds: i32,
    /// POSTed the body when due; its host must be on ENGAGE_CALLBACK_HOSTS.
    pub(crate) callback_url: Option<String>,
    /// 1 to 25; default: the topic's (one per step of its retry ladder, plus one, unless
    /// the topic says otherwise).
    pub(crate) max_attempts: Option<i32>,
    /// 0 to 1000: among due jobs of the topic, a higher priority runs first, then the
    /// earlier due time (BullMQ's lower number wins; here the higher).
    #[graphql(default = 0)]
    pub(crate) priority: i32,
    /// How long to wait before each retry; default: the topic's ladder.
    pub(crate) backoff: Option<BackoffInput>,
    /// Once this job is done, the topic keeps only this many done or cancelled jobs, the
    /// newest (0: this one is forgotten at once); default 1,000.
    pub(crate) remove_on_complete: Option<i32>,
    /// Once this job died, the topic keeps only this many dead jobs, the newest; default:
    /// all, until `cleanJobs`.
    pub(crate) remove_on_fail: Option<i32>,
    /// Runs the job again and again, under the same id: its first run is the schedule's
    /// first time at or after `delaySeconds` from now, each next run is scheduled when the
    /// one before it ended (done, or dead after its attempts), so runs never overlap.
    pub(crate) repeat: Option<RepeatInput>,
}

/// When a job runs again: give exactly one of `everySeconds` and `cron`.
#[derive(InputObject)]
pub(crate) struct RepeatInput {
    /// 1 to 31,536,000: runs this far apart, counted from the first run. A run that ends
    /// late (slow, or the queue was down) is followed by the next time on that grid: one
    /// catch-up run, never a burst.
    pub(crate) every_seconds: Option<i32>,
    /// A cron pattern: 5 fields (minute hour day-of-month month day-of-week), or 6 with
    /// seconds first, read in `timeZone`. Across daylight-saving changes a fixed time of day
    /// that is skipped runs just after the gap and one that is repeated runs once; a pattern
    /// with a wildcard or step in its time fields runs once per real interval.
    pub(crate) cron: Option<String>,
    /// An IANA time zone (`Europe/Berlin`); default: the service's ENGAGE_TIMEZONE.
    pub(crate) time_zone: Option<String>,
    /// Most runs (1 or more); the series ends after the last.
    pub(crate) limit: Option<i32>,
    /// No run after this instant.
    pub(crate) ends_at: Option<DateTime>,
}

impl RepeatInput {
    fn rule(self) -> RepeatRule {
        RepeatRule {
            every_seconds: self.every_seconds.map(i64::from),
            cron: self.cron,
            time_zone: self.time_zone,
            limit: self.limit.map(i64::from),
            ends_at_ms: self.ends_at.map(|at| at.0.timestamp_millis()),
        }
    }
}

/// A repeating job's series.
pub(crate) struct Repeat(jobs::Repeat);

#[Object]
impl Repeat {
    async fn every_seconds(&self) -> Option<i64> {
        self.0.every_seconds.map(|n| n as i64)
    }

    async fn cron(&self) -> Option<&str> {
        self.0.cron.as_deref()
    }

    /// The IANA zone its cron times are read in.
    async fn time_zone(&self) -> &str {
        &self.0.time_zone
    }

    /// Most runs; null: no limit.
    async fn limit(&self) -> Option<i64> {
        self.0.limit.map(i64::from)
    }

    /// No run after this; null: none.
    async fn ends_at(&self) -> Option<DateTime> {
        self.0.ends_at_ms.map(DateTime::from_ms)
    }
}

/// A count that may not be negative.
fn seconds_or(what: &'static str) -> impl Fn(i32) -> AppResult<u32> {
    move |n| u32::try_from(n).map_err(|_| AppError::bad_input(format!("{what} must be 0 or more")))
}

/// One change of a job's state.
pub(crate) struct JobEvent(pub(crate) jobs::JobEvent);

#[Object]
impl JobEvent {
    async fn at(&self) -> DateTime {
        DateTime::from_ms(self.0.at_ms)
    }

    /// The state the job entered (DELAYED again for a retry, with its error).
    async fn state(&self) -> JobStatus {
        self.0.status
    }

    /// Deliveries so far when it happened.
    async fn attempt(&self) -> i64 {
        i64::from(self.0.attempt)
    }

    async fn error(&self) -> Option<&str> {
        self.0.error.as_deref()
    }
}

/// How long a job waits before each retry.
#[derive(InputObject)]
pub(crate) struct BackoffInput {
    pub(crate) kind: BackoffKind,
    /// FIXED: the wait; EXPONENTIAL: the first wait, doubled at each retry (1 or more);
    /// LADDER: the shortest step (0 or more).
    pub(crate) delay_seconds: i32,
    /// The longest wait (EXPONENTIAL and LADDER); default: no bound but a year's.
    pub(crate) max_delay_seconds: Option<i32>,
}

/// What `cancelPendingJob` answers.
#[derive(SimpleObject)]
pub(crate) struct CancelJobPayload {
    /// Whether this call cancelled the job (false: no pending job by that id).
    pub(crate) cancelled: bool,
    /// The job after the call (`CANCELLED` when this call cancelled it); null when there is
    /// no job by that id.
    pub(crate) job: Option<Job>,
}

impl ScheduleJobInput {
    /// The job to add, its numbers checked for range.
    pub(crate) fn into_job(self) -> AppResult<NewJob> {
        if !(0..=MAX_DELAY_SECONDS).contains(&i64::from(self.delay_seconds)) {
            return Err(AppError::bad_input(format!(
                "delaySeconds must be between 0 and {MAX_DELAY_SECONDS}"
            )));
        }
        let max_attempts = self
            .max_attempts
            .map(|n| {
                u32::try_from(n)
                    .map_err(|_| AppError::bad_input("maxAttempts must be between 1 and 25"))
            })
            .transpose()?;
        let priority = u32::try_from(self.priority).map_err(|_| {
            AppError::bad_input(format!("priority must be between 0 and {MAX_PRIORITY}"))
        })?;
        let body = self.body_text()?;
        let seconds = |n: i32| {
            u32::try_from(n).map_err(|_| AppError::bad_input("backoff delays must not be negative"))
        };
        let backoff = match &self.backoff {
            Some(input) => Some(Backoff {
                kind: input.kind,
                delay_seconds: seconds(input.delay_seconds)?,
                max_delay_seconds: input.max_delay_seconds.map(seconds).transpose()?,
            }),
            None => None,
        };
        Ok(NewJob {
            id: self.id.to_string(),
            topic: self.topic,
            body,
            delay: Duration::from_secs(self.delay_seconds as u64),
            max_attempts,
            callback_url: self.callback_url,
            priority,
            backoff,
            remove_on_complete: self
                .remove_on_complete
                .map(seconds_or("removeOnComplete"))
                .transpose()?,
            remove_on_fail: self
                .remove_on_fail
                .map(seconds_or("removeOnFail"))
                .transpose()?,
            repeat: self.repeat.map(RepeatInput::rule),
        })
    }

    /// The body as JSON text, from whichever of `body` and `data` was given (the feature
    /// checks that it is JSON and measures it).
    pub(crate) fn body_text(&self) -> AppResult<String> {
        match (&self.body, &self.data) {
            (Some(body), None) => Ok(body.clone()),
            (None, Some(data)) => Ok(data.to_text()),
            _ => Err(AppError::bad_input("give exactly one of body and data")),
        }
    }
}
