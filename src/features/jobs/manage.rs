//! What an admin or a service does to jobs already scheduled, BullMQ's `promote`,
//! `changeDelay`, `clean` and `retryJobs`, and its bulk add: one script call per topic (one
//! hash tag), whatever the batch's size.

use sqlx::Row;

use super::{check_topic, is_job_id, pending, JobSpec, JobStatus, JobView, Jobs, NewJob};
use crate::infra::{
    error::{AppError, AppResult, ErrorCode},
    redis::scripts::{
        JobsClean, JobsCleanArgs, JobsProgress, JobsProgressArgs, JobsReschedule,
        JobsRescheduleArgs, Replies,
    },
};

/// Most jobs `scheduleJobs` takes at once.
pub const MAX_BATCH: usize = 1000;
/// Most jobs one `cleanJobs` or `requeueDeadJobs` call handles.
pub const MAX_CLEAN: usize = 10_000;

impl Jobs {
    /// Adds many jobs at once, each checked as [`Jobs::submit`] checks one: a batch with one
    /// refused job is refused whole, naming it. A job whose id is pending is not added again
    /// and answers the pending job, as BullMQ's add of an existing job id does.
    pub(crate) async fn submit_many(&self, jobs: Vec<NewJob>) -> AppResult<Vec<JobView>> {
        if jobs.len() > MAX_BATCH {
            return Err(AppError::bad_input(format!(
                "scheduleJobs takes at most {MAX_BATCH} jobs, got {}",
                jobs.len()
            )));
        }
        for (index, job) in jobs.iter().enumerate() {
            let checked = job.validate(self).and_then(|_| {
                self.registry
                    .check_route(&job.topic, job.callback_url.as_deref())
            });
            if let Err(AppError::Client { code, message }) = checked {
                return Err(AppError::client(
                    code,
                    format!("inputs[{index}]: {message}"),
                ));
            }
            checked?;
        }
        let places: Vec<(String, String)> = jobs
            .iter()
            .map(|j| (j.topic.clone(), j.id.clone()))
            .collect();
        let mut sql = self.infra.db.pool.acquire().await?;
        let answers = self.schedule_in(&mut sql, jobs).await?;
        let mut views = Vec::with_capacity(answers.len());
        for ((topic, id), answer) in places.into_iter().zip(answers) {
            match answer {
                Ok(view) => views.push(view),
                Err(error) if error.code() == ErrorCode::JobExists => {
                    views.push(self.find(&topic, &id).await?.ok_or_else(|| {
                        AppError::conflict(format!("job {id} of topic {topic} changed meanwhile"))
                    })?)
                }
                Err(error) => return Err(error),
            }
        }
        Ok(views)
    }

    /// Moves a delayed job's due time to `delay_seconds` from now (0: due now, BullMQ's
    /// `promote`). `NOT_FOUND` for no such job, `CONFLICT` for one that is not delayed.
    pub(crate) async fn reschedule(
        &self,
        topic: &str,
        id: &str,
        delay_seconds: i64,
    ) -> AppResult<JobView> {
        check_topic(topic)?;
        if !(0..=super::MAX_DELAY_SECONDS).contains(&delay_seconds) {
            return Err(AppError::bad_input(format!(
                "delaySeconds must be between 0 and {}",
                super::MAX_DELAY_SECONDS
            )));
        }
        let not_found = || AppError::not_found(format!("no job {id} in topic {topic}"));
        if !is_job_id(id) {
            return Err(not_found());
        }
        let run_at = self.infra.clock.now_ms() + delay_seconds * 1000;
        let keys = &self.infra.keys;
        let script = JobsReschedule {
            delayed: keys.jobs_delayed(topic),
            job: keys.job(topic, id),
        };
        let (moved, json) = self
            .infra
            .scripts()
            .call(
                &script,
                &JobsRescheduleArgs {
                    id,
                    run_at_ms: run_at,
                    channel: keys.jobs_live(topic),
                    publish: keys.publish_command(),
                },
            )
            .await?;
        if moved != 1 {
            let job = self.find(topic, id).await?.ok_or_else(not_found)?;
            return Err(AppError::conflict(format!(
                "job {id} of topic {topic} is {:?}, not delayed",
                job.status
            )));
        }
        if let Ok(spec) = serde_json::from_str::<JobSpec>(&json) {
            let mut sql = self.infra.db.pool.acquire().await?;
            pending::reschedule(&mut sql, spec.seq, run_at).await?;
        }
        self.index(&[(topic.to_string(), run_at)]).await?;
        self.find(topic, id).await?.ok_or_else(not_found)
    }

    /// Forgets a topic's jobs in a finished state (DONE, CANCELLED, DEAD) that ended more
    /// than `older_than_seconds` ago, at most [`MAX_CLEAN`]; how many.
    pub(crate) async fn clean(
        &self,
        topic: &str,
        state: JobStatus,
        older_than_seconds: i64,
    ) -> AppResult<i64> {
        check_topic(topic)?;
        if older_than_seconds < 0 {
            return Err(AppError::bad_input("olderThanSeconds must be 0 or more"));
        }
        let before = self.infra.clock.now_ms() - older_than_seconds * 1000;
        let status = match state {
            JobStatus::Done => "DONE",
            JobStatus::Cancelled => "CANCELLED",
            JobStatus::Dead => {
                let removed = sqlx::query(
                    "DELETE FROM dead_job WHERE topic = $1 AND requeued_at_ms IS NULL \
                     AND died_at_ms < $2",
                )
                .bind(topic)
                .bind(before)
                .execute(&self.infra.db.pool)
                .await?
                .rows_affected() as i64;
                if removed > 0 {
                    self.count_dead(topic, "add", -removed).await?;
                }
                return Ok(removed);
            }
            _ => {
                return Err(AppError::bad_input(
                    "cleanJobs cleans DONE, CANCELLED or DEAD jobs; cancel pending ones",
                ))
            }
        };
        let keys = &self.infra.keys;
        let script = JobsClean {
            finished: keys.jobs_finished(topic),
            jobs: keys.jobs_of(topic),
        };
        let args = JobsCleanArgs {
            status,
            before_ms: before,
            limit: MAX_CLEAN,
        };
        self.infra.scripts().call(&script, &args).await
    }

    /// Puts every dead job of a topic back in the queue (at most [`MAX_CLEAN`]); how many.
    pub(crate) async fn requeue_all_dead(&self, topic: &str) -> AppResult<i64> {
        check_topic(topic)?;
        let rows = sqlx::query(
            "SELECT DISTINCT job_id FROM dead_job WHERE topic = $1 AND requeued_at_ms IS NULL \
             ORDER BY job_id LIMIT $2",
        )
        .bind(topic)
        .bind(MAX_CLEAN as i64)
        .fetch_all(&self.infra.db.pool)
        .await?;
        let mut requeued = 0;
        for row in rows {
            let id: String = row.try_get("job_id")?;
            match self.requeue_dead(topic, &id).await {
                Ok(_) => requeued += 1,
                // Pending again already (requeued by another call): not this call's.
                Err(error) if error.code() == ErrorCode::JobExists => {}
                Err(error) => return Err(error),
            }
        }
        Ok(requeued)
    }
}

/// 1 and the job's JSON, or 0 and '' when it was not delayed.
impl Replies for JobsReschedule {
    type Reply = (i64, String);
}

/// How many were forgotten.
impl Replies for JobsClean {
    type Reply = i64;
}

impl Jobs {
    /// Records a running job's progress (JSON text), for the delivery holding `lease` only:
    /// `CONFLICT` otherwise (the lease ran out, or the job ended or was cancelled).
    pub(crate) async fn report_progress(
        &self,
        topic: &str,
        id: &str,
        lease: &str,
        progress: String,
    ) -> AppResult<JobView> {
        check_topic(topic)?;
        if progress.len() > super::MAX_BODY_BYTES {
            return Err(AppError::bad_input(format!(
                "progress must be at most {} bytes of JSON",
                super::MAX_BODY_BYTES
            )));
        }
        let not_found = || AppError::not_found(format!("no job {id} in topic {topic}"));
        if !is_job_id(id) {
            return Err(not_found());
        }
        let script = JobsProgress {
            job: self.infra.keys.job(topic, id),
        };
        let args = JobsProgressArgs {
            id,
            lease,
            progress: &progress,
            channel: self.infra.keys.jobs_live(topic),
            publish: self.infra.keys.publish_command(),
        };
        if self.infra.scripts().call(&script, &args).await? != 1 {
            self.find(topic, id).await?.ok_or_else(not_found)?;
            return Err(AppError::conflict(format!(
                "job {id} of topic {topic} is not running under this lease"
            )));
        }
        self.find(topic, id).await?.ok_or_else(not_found)
    }

    /// Keeps the newest `keep` dead jobs of a topic (a job's `removeOnFail`).
    pub(crate) async fn keep_dead(&self, topic: &str, keep: u32) -> AppResult<()> {
        let removed = sqlx::query(
            "DELETE FROM dead_job WHERE topic = $1 AND requeued_at_ms IS NULL \
             AND died_at_ms < COALESCE((SELECT died_at_ms FROM dead_job WHERE topic = $1 \
             AND requeued_at_ms IS NULL ORDER BY died_at_ms DESC LIMIT 1 OFFSET $2), -1) + 1",
        )
        .bind(topic)
        .bind(i64::from(keep))
        .execute(&self.infra.db.pool)
        .await?
        .rows_affected() as i64;
        if removed > 0 {
            self.count_dead(topic, "add", -removed).await?;
        }
        Ok(())
    }
}

/// 1 recorded, 0 the lease is not the delivery's.
impl Replies for JobsProgress {
    type Reply = i64;
}
