//! Fields of the delay queue, for the admin and service roles: `scheduleJob`,
//! `cancelPendingJob` (and `cancelJob`, which it succeeds), `requeueDeadJob`, `job`, `jobs`,
//! `topics`, `topic`, `pauseTopic`, `resumeTopic`, `setTopicLimits`.

use async_graphql::{Context, Object, Subscription, ID};
use futures::StreamExt;

use crate::{
    api::live::SubscriptionSlot,
    api::schema::{
        connection::Connection,
        jobs::{readers, CancelJobPayload, Job, ScheduleJobInput, Topic},
        page::{list_cost, PageArgs, PAGE},
        scalars::Json,
        ContextExt,
    },
    features::jobs::{self, JobStatus, Jobs, MAX_BATCH},
    infra::error::{AppError, AppResult},
};

#[derive(Default)]
pub(crate) struct JobQuery;

#[Object]
impl JobQuery {
    /// A job wherever it is (dead jobs included); null when unknown. `id` is the job's
    /// `jobId` (a `Job.id` is not taken here: it could be a job id too).
    #[graphql(guard = "readers()")]
    async fn job(&self, ctx: &Context<'_>, topic: String, id: ID) -> AppResult<Option<Job>> {
        Ok(ctx.feature::<Jobs>().find(&topic, &id).await?.map(Job))
    }

    /// A topic's jobs in one state, in queue order (dead jobs: newest first).
    #[graphql(guard = "readers()", complexity = "PAGE.cost(first, child_complexity)")]
    async fn jobs(
        &self,
        ctx: &Context<'_>,
        topic: String,
        status: JobStatus,
        #[graphql(default_with = "PAGE.default_first()")] first: Option<i32>,
        after: Option<String>,
    ) -> AppResult<Connection<Job>> {
        let args = PageArgs::offset(first, after.as_deref(), jobs::MAX_LIST_OFFSET)?;
        let offset = args.after;
        let (views, more) = ctx.feature::<Jobs>().list(&topic, status, args).await?;
        let end = offset + views.len();
        let nodes = views.into_iter().map(Job).enumerate();
        Ok(Connection::offset(
            nodes.map(|(i, job)| (offset + i, job)),
            offset,
            end,
            more,
        ))
    }

    /// Every topic: those that had a job, those paused or limited, those with a handler.
    #[graphql(guard = "readers()")]
    async fn topics(&self, ctx: &Context<'_>) -> AppResult<Vec<Topic>> {
        let views = ctx.feature::<Jobs>().topics().await?;
        Ok(views.into_iter().map(Topic).collect())
    }

    /// A topic by name; null when it never had a job, settings or a handler.
    #[graphql(guard = "readers()")]
    async fn topic(&self, ctx: &Context<'_>, name: String) -> AppResult<Option<Topic>> {
        Ok(ctx.feature::<Jobs>().topic(&name).await?.map(Topic))
    }
}

#[derive(Default)]
pub(crate) struct JobMutation;

#[Object]
impl JobMutation {
    /// Adds a job due in `delaySeconds`; `JOB_EXISTS` if the topic has a pending job with
    /// this id (the id of a job that is done or cancelled may be used again),
    /// `NO_JOB_HANDLER` without a `callbackUrl` on a topic that has no handler,
    /// `CALLBACK_HOST_NOT_ALLOWED` for a callback host not on `ENGAGE_CALLBACK_HOSTS`.
    #[graphql(guard = "readers()")]
    async fn schedule_job(&self, ctx: &Context<'_>, input: ScheduleJobInput) -> AppResult<Job> {
        let job = input.into_job()?;
        Ok(Job(ctx.feature::<Jobs>().submit(job).await?))
    }

    /// Cancels a pending job wherever it is; false when there is none by that id (the
    /// job's `jobId`). A job cancelled while running does not run again, and its completion
    /// changes nothing.
    #[graphql(
        guard = "readers()",
        deprecation = "Use `cancelPendingJob`, which answers the job as it is after the call."
    )]
    async fn cancel_job(&self, ctx: &Context<'_>, topic: String, id: ID) -> AppResult<bool> {
        ctx.feature::<Jobs>().cancel(&topic, &id).await
    }

    /// Cancels a pending job wherever it is, as `cancelJob` did, and answers the job as it
    /// is after the call: `cancelled` false and the job as it was when it is not pending
    /// (done, dead, already cancelled), `job` null when there is no job by that id (`id` is its `jobId`).
    #[graphql(guard = "readers()")]
    async fn cancel_pending_job(
        &self,
        ctx: &Context<'_>,
        topic: String,
        id: ID,
    ) -> AppResult<CancelJobPayload> {
        let (cancelled, job) = ctx.feature::<Jobs>().cancel_and_find(&topic, &id).await?;
        Ok(CancelJobPayload {
            cancelled,
            job: job.map(Job),
        })
    }

    /// Puts a dead job back in the queue, due now; `id` is its `jobId`.
    #[graphql(guard = "readers()")]
    async fn requeue_dead_job(&self, ctx: &Context<'_>, topic: String, id: ID) -> AppResult<Job> {
        Ok(Job(ctx.feature::<Jobs>().requeue_dead(&topic, &id).await?))
    }

    /// Adds up to 1,000 jobs at once, each as `scheduleJob` would (one refused job refuses
    /// the batch, its index in the message); a job whose id is pending is not added again
    /// and answers the pending job. One Redis round trip per topic.
    #[graphql(
        guard = "readers()",
        complexity = "list_cost(inputs.len().min(MAX_BATCH), child_complexity)"
    )]
    async fn schedule_jobs(
        &self,
        ctx: &Context<'_>,
        inputs: Vec<ScheduleJobInput>,
    ) -> AppResult<Vec<Job>> {
        if inputs.len() > MAX_BATCH {
            return Err(AppError::bad_input(format!(
                "scheduleJobs takes at most {MAX_BATCH} jobs, got {}",
                inputs.len()
            )));
        }
        let jobs = inputs
            .into_iter()
            .enumerate()
            .map(|(index, input)| {
                input.into_job().map_err(|error| match error {
                    AppError::Client { code, message } => {
                        AppError::client(code, format!("inputs[{index}]: {message}"))
                    }
                    other => other,
                })
            })
            .collect::<AppResult<Vec<_>>>()?;
        let views = ctx.feature::<Jobs>().submit_many(jobs).await?;
        Ok(views.into_iter().map(Job).collect())
    }

    /// Makes a delayed job due now (`id` is its `jobId`); `CONFLICT` when it is not delayed.
    #[graphql(guard = "readers()")]
    async fn promote_job(&self, ctx: &Context<'_>, topic: String, id: ID) -> AppResult<Job> {
        Ok(Job(ctx
            .feature::<Jobs>()
            .reschedule(&topic, &id, 0)
            .await?))
    }

    /// Makes a delayed job due `delaySeconds` from now (0 to 31,536,000); `CONFLICT` when it
    /// is not delayed.
    #[graphql(guard = "readers()")]
    async fn change_job_delay(
        &self,
        ctx: &Context<'_>,
        topic: String,
        id: ID,
        delay_seconds: i32,
    ) -> AppResult<Job> {
        let job = ctx
            .feature::<Jobs>()
            .reschedule(&topic, &id, i64::from(delay_seconds))
            .await?;
        Ok(Job(job))
    }

    /// Forgets a topic's DONE, CANCELLED or DEAD jobs that ended more than
    /// `olderThanSeconds` ago (at most 10,000 a call); how many.
    #[graphql(guard = "readers()")]
    async fn clean_jobs(
        &self,
        ctx: &Context<'_>,
        topic: String,
        state: JobStatus,
        older_than_seconds: i32,
    ) -> AppResult<i64> {
        ctx.feature::<Jobs>()
            .clean(&topic, state, i64::from(older_than_seconds))
            .await
    }

    /// Puts every dead job of a topic back in the queue, due now (at most 10,000 a call);
    /// how many.
    #[graphql(guard = "readers()")]
    async fn requeue_dead_jobs(&self, ctx: &Context<'_>, topic: String) -> AppResult<i64> {
        ctx.feature::<Jobs>().requeue_all_dead(&topic).await
    }

    /// Records a running job's progress, as its handler reports it: `leaseToken` is the
    /// delivery's (`X-Engage-Lease` of its callback), so only the delivery running the job
    /// may; `CONFLICT` for any other (a lease that ran out, a job that ended).
    #[graphql(guard = "readers()")]
    async fn report_job_progress(
        &self,
        ctx: &Context<'_>,
        topic: String,
        id: ID,
        lease_token: String,
        progress: Json,
    ) -> AppResult<Job> {
        let job = ctx
            .feature::<Jobs>()
            .report_progress(&topic, &id, &lease_token, progress.to_text())
            .await?;
        Ok(Job(job))
    }

    /// Pauses a topic: it hands out no job until resumed (its due jobs count as `paused`);
    /// jobs running finish.
    #[graphql(guard = "readers()")]
    async fn pause_topic(&self, ctx: &Context<'_>, topic: String) -> AppResult<Topic> {
        Ok(Topic(ctx.feature::<Jobs>().pause(&topic, true).await?))
    }

    /// Resumes a paused topic.
    #[graphql(guard = "readers()")]
    async fn resume_topic(&self, ctx: &Context<'_>, topic: String) -> AppResult<Topic> {
        Ok(Topic(ctx.feature::<Jobs>().pause(&topic, false).await?))
    }

    /// Sets a topic's limits across all instances: `perSecond` jobs started per second and
    /// `concurrency` jobs running at once, each 1 to 1,000,000, or null for no limit.
    #[graphql(guard = "readers()")]
    async fn set_topic_limits(
        &self,
        ctx: &Context<'_>,
        topic: String,
        per_second: Option<i32>,
        concurrency: Option<i32>,
    ) -> AppResult<Topic> {
        let view = ctx
            .feature::<Jobs>()
            .set_limits(&topic, per_second, concurrency)
            .await?;
        Ok(Topic(view))
    }
}

#[derive(Default)]
pub(crate) struct JobSubscription;

#[Subscription]
impl JobSubscription {
    /// Each change of state (and of progress) of a topic's jobs, or of the job `id` only (its
    /// `jobId`), as the job is after it: scheduled, due, taken, retried, done, dead,
    /// cancelled, promoted or delayed again. Changes in quick succession may arrive as their
    /// latest state.
    #[graphql(guard = "readers()")]
    async fn job_changed(
        &self,
        ctx: &Context<'_>,
        topic: String,
        id: Option<ID>,
    ) -> Result<impl futures::Stream<Item = Job>, AppError> {
        let slot = SubscriptionSlot::acquire(ctx)?;
        let changes = ctx
            .feature::<Jobs>()
            .changes(&topic, id.map(|id| id.to_string()))
            .await?;
        Ok(slot.hold(changes).map(Job))
    }
}
