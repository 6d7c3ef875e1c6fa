//! The delay queue's workers, run by every instance: a tick that promotes due jobs of every
//! topic with work due ([`super::topics`]; one atomic script per topic: no lock, no double
//! move) every `ENGAGE_JOBS_TICK_MS` (100 ms, so due times hold well within a second), and a
//! taker that hands ready jobs to handler tasks, in batches, whenever this instance has
//! capacity.
//!
//! A delivery holds a lease: the job is invisible until its visibility deadline, which the
//! deliverer moves forward every third of the visibility timeout while the handler runs (as
//! [`crate::infra::lock`] renews its lease), so a handler may run longer than the timeout and still
//! be the only one. When the deadline passes anyway, the process is gone (or cut off from
//! Redis): the delivery stalled, and promotion hands the job out again. A job that stalls
//! more often than its topic allows is buried instead of being run again, so a job that
//! crashes its process cannot loop for ever.

use std::{sync::Arc, time::Duration};

use std::sync::Mutex;

use redis::{RedisWrite, ToRedisArgs};
use tokio::sync::{mpsc, oneshot, Notify, OwnedSemaphorePermit, Semaphore};

use super::{
    handlers::{Delivery, JobError},
    pending,
    ready::{Left, ReadyTopics},
    JobSpec,
};
use crate::{
    features::jobs::Jobs,
    infra::{
        clock::Clock,
        error::{AppError, AppResult},
        redis::scripts::{
            JobsExtend, JobsExtendArgs, JobsFinish, JobsFinishArgs, JobsPromote, JobsPromoteArgs,
            JobsTake, JobsTakeArgs, Replies,
        },
    },
};

/// Most jobs one promotion moves per topic per tick.
const PROMOTE_BATCH: usize = 5000;
/// Most topics one tick walks (the earliest due first; the others stay due for the next).
const TOPICS_PER_TICK: usize = 1000;
/// Most topics promoted, or taken from, by one round trip (a pipeline of their scripts):
/// one round trip per topic was what bounded a thousand topics with a few jobs each.
const TOPICS_PER_TRIP: usize = 100;
/// Most jobs one take hands out.
const TAKE_BATCH: usize = 100;
/// Fewest jobs a take asks of a topic while this instance has as many slots free: a take's
/// own calls cost as much as several jobs', so free slots shared one per topic over many
/// topics cost about a take per job.
const TAKE_SHARE_LEAST: usize = 8;
/// How soon a topic with jobs waiting is promoted again, ms. The instance that promoted them
/// takes them until none is left ([`ReadyTopics`]); the visit is for the other instances,
/// and for this one after a restart.
const WAITING_REVISIT_MS: i64 = 1000;

pub async fn run(ctx: Jobs) {
    let capacity = ctx.settings.concurrency();
    let permits = Arc::new(Semaphore::new(capacity));
    let ready_topics = Mutex::new(ReadyTopics::default());
    // Wakes an idle taker: a promotion, or a held topic's delivery ended here.
    let wake = Notify::new();
    let (finisher, outcomes) = Finisher::new(ctx.infra.clock.clone());
    tokio::join!(
        ctx.promote_loop(&ready_topics, &wake),
        async {
            ctx.take_loop(&ready_topics, &wake, &permits, &finisher)
                .await;
            // Deliveries still running hold clones; the finisher ends after the last.
            drop(finisher);
        },
        ctx.finish_loop(outcomes, &ready_topics, &wake),
    );
    // Let running jobs finish (the app bounds this wait by its grace period).
    let _ = permits.acquire_many(capacity as u32).await;
}

/// What a promotion left in a topic.
struct Promotion {
    /// Jobs ready to take.
    ready: i64,
    /// When the topic needs promoting again; `None` when it has no pending job.
    next_visit: Option<i64>,
}

/// A job handed out by a take, with the lease of this delivery.
enum Taken {
    Run {
        delivery: Delivery,
        lease: String,
    },
    /// Goes to `dead_job` without running: its stored JSON does not read as a job (it is
    /// kept as it is, the text in its body, instead of failing the jobs taken with it), or
    /// it stalled more often than its topic allows.
    Bury {
        delivery: Delivery,
        lease: String,
        error: String,
    },
}

/// Runs one delivery and records its outcome. Only this delivery's lease may finish it:
/// if the job was cancelled or handed to another worker meanwhile, the outcome is dropped.
async fn deliver(
    ctx: Jobs,
    finisher: Finisher,
    delivery: Delivery,
    lease: String,
    permit: OwnedSemaphorePermit,
) {
    let policy = ctx.registry.policy(&delivery.topic);
    let run = tokio::time::timeout(policy.timeout, ctx.registry.run(&delivery));
    let outcome = match ctx
        .holding_lease(&delivery, &lease, policy.visibility, run)
        .await
    {
        Ok(outcome) => outcome,
        Err(_) => Err(JobError::Retry(format!(
            "handler ran longer than {:?}",
            policy.timeout
        ))),
    };
    // The permit bounds running handlers; recording the outcome is not the handler's work,
    // and holding the permit through that round trip would halve a burst's throughput.
    drop(permit);
    let topic = delivery.topic.clone();
    let recorded = match &outcome {
        Ok(result) => finisher
            .finish(&delivery, &lease, Outcome::Done { result: result.as_deref() })
            .await
            .map(|applied| {
                if applied {
                    metrics::counter!("engage_jobs_succeeded_total", "topic" => ctx.topic_label(&topic))
                        .increment(1);
                }
            }),
        Err(JobError::Retry(error) | JobError::RetryAfter(error, _))
            if delivery.attempt < delivery.spec.max_attempts =>
        {
            let asked = match &outcome {
                Err(JobError::RetryAfter(_, after)) => Some(*after),
                _ => None,
            };
            let delay =
                policy.delay_after(delivery.attempt, delivery.spec.backoff.as_ref(), asked);
            let retry_at = ctx.infra.clock.now_ms() + delay.as_millis() as i64;
            finisher
                .finish(&delivery, &lease, Outcome::Retry { retry_at, error })
                .await
                .map(|applied| {
                    if applied {
                        metrics::counter!("engage_jobs_retried_total", "topic" => ctx.topic_label(&topic))
                            .increment(1);
                    }
                })
        }
        Err(
            JobError::Retry(error)
            | JobError::Permanent(error)
            | JobError::RetryAfter(error, _),
        ) => {
            ctx.bury(&finisher, &delivery, &lease, error).await
        }
    };
    if let Err(error) = recorded {
        // The lease runs out and the job is delivered again (a stall): nothing is lost.
        tracing::warn!(topic, job = delivery.id, %error, "could not record a job's outcome");
    }
}

/// How a delivery ended.
enum Outcome<'a> {
    Done { result: Option<&'a str> },
    Retry { retry_at: i64, error: &'a str },
    Dead { error: &'a str },
}

/// A delivery's end, queued for the finish loop.
struct Finish {
    topic: String,
    job_id: String,
    /// The job's SQL row.
    seq: i64,
    attempt: u32,
    lease: String,
    outcome: &'static str,
    retry_at: i64,
    error: String,
    /// The job's result (JSON), '' none.
    result: String,
    /// Finished jobs the topic keeps after this one ('' its default).
    keep: String,
    /// A repeating job's next run (epoch ms) once this one ended, '' none.
    next_run: String,
    /// Most runs of its series, '' no limit.
    limit: String,
    applied: oneshot::Sender<AppResult<bool>>,
}

/// A delivery's end as `lua/jobs_finish.lua` reads it (its header says why): the job, the
/// lease and the outcome, then only the values that outcome has.
impl ToRedisArgs for Finish {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
        out.write_arg(self.job_id.as_bytes());
        out.write_arg(self.lease.as_bytes());
        let repeat = [self.next_run.as_bytes(), self.limit.as_bytes()];
        match self.outcome {
            "retry" => {
                out.write_arg(b"retry");
                out.write_arg(self.retry_at.to_string().as_bytes());
                out.write_arg(self.error.as_bytes());
            }
            "dead" => {
                out.write_arg(b"dead");
                out.write_arg(self.error.as_bytes());
                repeat.iter().for_each(|value| out.write_arg(value));
            }
            _ if [&self.result, &self.keep, &self.next_run, &self.limit]
                .iter()
                .all(|value| value.is_empty()) =>
            {
                out.write_arg(b"done");
            }
            _ if self.result.is_empty() && self.keep.is_empty() => {
                out.write_arg(b"next");
                repeat.iter().for_each(|value| out.write_arg(value));
            }
            _ => {
                out.write_arg(b"done+");
                out.write_arg(self.result.as_bytes());
                out.write_arg(self.keep.as_bytes());
                repeat.iter().for_each(|value| out.write_arg(value));
            }
        }
    }
}

/// Hands the ends of deliveries to [`Jobs::finish_loop`], which records them many at a time: one
/// script call per topic for all that queued meanwhile, every topic in one pipeline. One
/// round trip per delivery was what bounded a burst of due jobs. SQL's record follows in two
/// statements per batch, after the deliveries heard back ([`Ended`]).
#[derive(Clone)]
struct Finisher(mpsc::Sender<Finish>, Clock);

/// Most delivery ends recorded by one round trip.
const FINISH_BATCH: usize = 500;
/// Batches of ends recorded at once.
const FINISHES_IN_FLIGHT: usize = 2;

impl Finisher {
    fn new(clock: Clock) -> (Self, mpsc::Receiver<Finish>) {
        let (sender, receiver) = mpsc::channel(FINISH_BATCH * 4);
        (Self(sender, clock), receiver)
    }

    /// Whether the outcome was applied (false: the lease is no longer this delivery's). A
    /// repeating job's run that ended (done or dead) takes its next run along, computed now,
    /// for the script that ends this one to schedule.
    async fn finish(
        &self,
        delivery: &Delivery,
        lease: &str,
        outcome: Outcome<'_>,
    ) -> AppResult<bool> {
        let (outcome, retry_at, error, result) = match outcome {
            Outcome::Done { result } => ("done", 0, "", result.unwrap_or_default()),
            Outcome::Retry { retry_at, error } => ("retry", retry_at, error, ""),
            Outcome::Dead { error } => ("dead", 0, error, ""),
        };
        let repeat = delivery.spec.repeat.as_ref().filter(|_| outcome != "retry");
        let next_run = repeat
            .and_then(|repeat| repeat.next_run(self.1.now_ms()))
            .map(|at| at.to_string())
            .unwrap_or_default();
        let limit = repeat
            .and_then(|repeat| repeat.limit)
            .map(|n| n.to_string())
            .unwrap_or_default();
        let (applied, reply) = oneshot::channel();
        let stopped = || AppError::Unavailable("the delay queue is stopping".into());
        self.0
            .send(Finish {
                topic: delivery.topic.clone(),
                job_id: delivery.id.clone(),
                seq: delivery.spec.seq,
                attempt: delivery.attempt,
                lease: lease.to_string(),
                outcome,
                retry_at,
                error: error.to_string(),
                result: result.to_string(),
                keep: delivery
                    .spec
                    .remove_on_complete
                    .map(|n| n.to_string())
                    .unwrap_or_default(),
                next_run,
                limit,
                applied,
            })
            .await
            .map_err(|_| stopped())?;
        reply.await.map_err(|_| stopped())?
    }
}

/// What the applied ends of a batch change outside the topics' keys.
#[derive(Default)]
struct Ended {
    /// SQL rows of jobs that are done or dead.
    forgotten: Vec<i64>,
    retries: Vec<pending::Retry>,
    /// Next runs of repeating jobs.
    next_runs: Vec<pending::NextRun>,
    /// Each topic's next visit: its earliest retry or next run, or now for a topic left
    /// with no pending job.
    visits: Vec<(String, i64)>,
}

impl Ended {
    /// An applied end; `again`: the script scheduled the next run of its series.
    fn add(&mut self, topic: &str, end: &Finish, again: bool) {
        let due = if again {
            let run_at_ms = end.next_run.parse().unwrap_or(0);
            self.next_runs.push(pending::NextRun {
                seq: end.seq,
                run_at_ms,
            });
            run_at_ms
        } else if end.outcome == "retry" {
            self.retries.push(pending::Retry {
                seq: end.seq,
                run_at_ms: end.retry_at,
                attempts: end.attempt,
            });
            end.retry_at
        } else {
            self.forgotten.push(end.seq);
            return;
        };
        self.visit(topic, due);
    }

    /// Moves `topic`'s visit to `at` if that is earlier than the one gathered so far.
    fn visit(&mut self, topic: &str, at: i64) {
        match self.visits.iter_mut().find(|(t, _)| t == topic) {
            Some((_, visit)) => *visit = (*visit).min(at),
            None => self.visits.push((topic.to_string(), at)),
        }
    }

    /// After the deliveries heard back: their ends are applied in Redis already, and
    /// nothing here may hold them up.
    async fn record(self, ctx: &Jobs) {
        // A retry may be due before the topic's next visit (which was at most the job's
        // visibility deadline): the topic's visit moves to the earliest retry.
        if let Err(error) = ctx.index(&self.visits).await {
            tracing::warn!(%error, "topics of ended jobs not indexed: a retry may wait for its topic's next visit");
        }
        if self.forgotten.is_empty() && self.retries.is_empty() && self.next_runs.is_empty() {
            return;
        }
        let recorded: AppResult<()> = async {
            let mut sql = ctx.infra.db.pool.acquire().await?;
            pending::forget(&mut sql, &self.forgotten).await?;
            pending::record_retries(&mut sql, &self.retries).await?;
            pending::record_next_runs(&mut sql, &self.next_runs).await
        }
        .await;
        if let Err(error) = recorded {
            // Rows left behind are of jobs Redis no longer holds as pending: verify names
            // them, and a rebuild removes those the pool remembers as done (a dead one, or
            // one forgotten meanwhile, would run again: delivery is at least once).
            tracing::warn!(%error, jobs = self.forgotten.len() + self.retries.len(), "ends of jobs not recorded in SQL");
        }
    }
}

impl Jobs {
    /// Every tick: promote due jobs of the topics due by now, move each topic to its next
    /// visit, and hand the topics with ready jobs to the taker.
    async fn promote_loop(&self, ready_topics: &Mutex<ReadyTopics>, wake: &Notify) {
        let mut every = tokio::time::interval(self.settings.tick());
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut adopted = false;
        let mut lifted = false;
        loop {
            tokio::select! {
                () = self.infra.instance.shutdown.cancelled() => return,
                _ = every.tick() => {}
            }
            if !adopted {
                match self.adopt_topic_set().await {
                    Ok(()) => adopted = true,
                    Err(error) => tracing::warn!(%error, "delay queue topics not adopted yet"),
                }
            }
            // Nothing is promoted, so nothing taken, while jobs are in an earlier version's
            // pool, where this version's scripts would not find them.
            if !lifted {
                match self.lift_pools().await {
                    Ok(()) => lifted = true,
                    Err(error) => {
                        tracing::warn!(%error, "jobs not yet moved from their topics' pools");
                        continue;
                    }
                }
            }
            ready_topics.lock().expect("poisoned").tick();
            let pass = async {
                let now = self.infra.clock.now_ms();
                let due = self.due(now, TOPICS_PER_TICK).await?;
                let mut visited = Vec::with_capacity(due.len());
                for visits in due.chunks(TOPICS_PER_TRIP) {
                    let topics: Vec<&str> =
                        visits.iter().map(|visit| visit.topic.as_str()).collect();
                    let promotions = self.promote(&topics, now).await?;
                    // A trip's topics are taken from while the next trip promotes: over a
                    // thousand topics, waiting for the whole walk kept every take back by
                    // the walk's second of promotions.
                    let ready = topics
                        .iter()
                        .zip(&promotions)
                        .filter(|(_, left)| left.ready > 0);
                    ready_topics
                        .lock()
                        .expect("poisoned")
                        .promoted(ready.map(|(topic, _)| topic.to_string()));
                    wake.notify_one();
                    let next_visits = promotions.iter().map(|left| left.next_visit);
                    visited.extend(visits.iter().zip(next_visits));
                }
                self.reindex(&visited).await
            };
            if let Err(error) = pass.await {
                tracing::warn!(%error, "delay queue promotion failed");
            }
        }
    }

    /// Takes ready jobs as long as this instance has free capacity and the lists have jobs; a
    /// finished job frees capacity at once, so a backlog drains at the handlers' pace, not the
    /// tick's.
    async fn take_loop(
        &self,
        ready_topics: &Mutex<ReadyTopics>,
        wake: &Notify,
        permits: &Arc<Semaphore>,
        finisher: &Finisher,
    ) {
        loop {
            let current = ready_topics.lock().expect("poisoned").takeable();
            let mut took_any = false;
            let mut next = 0;
            while next < current.len() {
                let permit = tokio::select! {
                    () = self.infra.instance.shutdown.cancelled() => return,
                    permit = permits.clone().acquire_owned() => permit.expect("never closed"),
                };
                // The free slots, shared by the topics left (up to a round trip's), but at
                // least TAKE_SHARE_LEAST asked of each: no more than the slots in all.
                let free = 1 + permits.available_permits();
                let remaining = (current.len() - next).min(TOPICS_PER_TRIP);
                let each = (free / remaining)
                    .max(free.min(TAKE_SHARE_LEAST))
                    .min(TAKE_BATCH);
                let topics = &current[next..next + (free / each).clamp(1, remaining)];
                next += topics.len();
                let taken = match self.take(topics, each).await {
                    Ok(taken) => taken,
                    Err(error) => {
                        tracing::warn!(%error, topics = topics.len(), "taking jobs failed");
                        Vec::new()
                    }
                };
                {
                    let mut ready = ready_topics.lock().expect("poisoned");
                    for (topic, (left, _)) in topics.iter().zip(&taken) {
                        ready.took(topic, *left);
                    }
                }
                let mut permit = Some(permit);
                for taken in taken.into_iter().flat_map(|(_, taken)| taken) {
                    took_any = true;
                    let permit = match permit.take() {
                        Some(first) => first,
                        None => permits.clone().try_acquire_owned().expect("counted above"),
                    };
                    let (ctx, finisher) = (self.clone(), finisher.clone());
                    tokio::spawn(async move {
                        match taken {
                            Taken::Run { delivery, lease } => {
                                deliver(ctx, finisher, delivery, lease, permit).await
                            }
                            Taken::Bury {
                                delivery,
                                lease,
                                error,
                            } => {
                                drop(permit);
                                let buried = ctx.bury(&finisher, &delivery, &lease, &error).await;
                                if let Err(error) = buried {
                                    tracing::warn!(job = delivery.id, %error, "could not bury a job");
                                }
                            }
                        }
                    });
                }
            }
            if !took_any {
                tokio::select! {
                    () = self.infra.instance.shutdown.cancelled() => return,
                    () = wake.notified() => {}
                    () = tokio::time::sleep(self.settings.tick()) => {}
                }
            }
        }
    }

    /// Promotes each topic's due jobs, all in one round trip; their promotions in order.
    async fn promote(&self, topics: &[&str], now: i64) -> AppResult<Vec<Promotion>> {
        let keys = &self.infra.keys;
        let calls: Vec<_> = topics
            .iter()
            .map(|topic| {
                let promotion = JobsPromote {
                    delayed: keys.jobs_delayed(topic),
                    waiting: keys.jobs_waiting(topic),
                    legacy: keys.jobs_ready(topic),
                    running: keys.jobs_running(topic),
                    jobs: keys.jobs_of(topic),
                    counts: keys.jobs_counts(topic),
                };
                let args = JobsPromoteArgs {
                    now_ms: now,
                    limit: PROMOTE_BATCH,
                    channel: keys.jobs_live(topic),
                    publish: keys.publish_command(),
                    revisit_ms: WAITING_REVISIT_MS,
                };
                (promotion, args)
            })
            .collect();
        let replies = self.infra.scripts().call_many(&calls).await?;
        Ok(topics
            .iter()
            .zip(replies)
            .map(|(topic, moved)| self.promoted(topic, now, &moved))
            .collect())
    }

    /// What one topic's promotion answered, counted in the metrics.
    fn promoted(&self, topic: &str, now: i64, moved: &[i64]) -> Promotion {
        let reply = |index: usize| moved.get(index).copied().unwrap_or(0);
        let (promoted, reclaimed) = (reply(0), reply(1));
        if promoted > 0 {
            metrics::counter!("engage_jobs_promoted_total", "topic" => self.topic_label(topic))
                .increment(promoted as u64);
            let lag = metrics::histogram!("engage_jobs_promotion_lag_seconds", "topic" => self.topic_label(topic));
            for run_at in moved.iter().skip(4) {
                lag.record((now - run_at).max(0) as f64 / 1000.0);
            }
        }
        if reclaimed > 0 {
            tracing::info!(topic, reclaimed, "jobs of a silent worker are ready again");
            metrics::counter!("engage_jobs_reclaimed_total", "topic" => self.topic_label(topic))
                .increment(reclaimed as u64);
        }
        Promotion {
            ready: reply(2),
            next_visit: moved.get(3).copied().filter(|at| *at >= 0),
        }
    }

    /// Takes up to `each` ready jobs of every topic, all in one round trip; for each topic,
    /// what it has left and its jobs.
    async fn take(&self, topics: &[String], each: usize) -> AppResult<Vec<(Left, Vec<Taken>)>> {
        let keys = &self.infra.keys;
        let now = self.infra.clock.now_ms();
        let leases: Vec<String> = topics
            .iter()
            .map(|_| uuid::Uuid::new_v4().simple().to_string())
            .collect();
        let calls: Vec<_> = topics
            .iter()
            .zip(&leases)
            .map(|(topic, lease)| {
                let take = JobsTake {
                    waiting: keys.jobs_waiting(topic),
                    running: keys.jobs_running(topic),
                    jobs: keys.jobs_of(topic),
                    settings: keys.jobs_settings(topic),
                    counts: keys.jobs_counts(topic),
                };
                let args = JobsTakeArgs {
                    deadline_ms: now + self.registry.policy(topic).visibility.as_millis() as i64,
                    lease_prefix: lease.as_str(),
                    most: each,
                    now_ms: now,
                    channel: keys.jobs_live(topic),
                    publish: keys.publish_command(),
                };
                (take, args)
            })
            .collect();
        let replies = self.infra.scripts().call_many(&calls).await?;
        Ok(topics
            .iter()
            .zip(replies)
            .map(|(topic, taken)| {
                let left = taken.first().map_or(Left::More, |left| Left::of(left));
                (left, self.taken(topic, taken.get(1..).unwrap_or_default()))
            })
            .collect())
    }

    /// The jobs one topic's take handed out (five values each), to run or to bury.
    fn taken(&self, topic: &str, taken: &[String]) -> Vec<Taken> {
        let policy = self.registry.policy(topic);
        taken
            .chunks_exact(5)
            .map(|job| {
                let attempt = job[2].parse().unwrap_or(1);
                let delivery = |spec| Delivery {
                    id: job[0].clone(),
                    topic: topic.to_string(),
                    spec,
                    attempt,
                    lease: String::new(),
                };
                let lease = job[3].clone();
                let delivery = |spec| Delivery {
                    lease: lease.clone(),
                    ..delivery(spec)
                };
                let stalls: u32 = job[4].parse().unwrap_or(0);
                match serde_json::from_str::<JobSpec>(&job[1]) {
                    Ok(spec) if stalls > policy.max_stalls => Taken::Bury {
                        delivery: delivery(spec),
                        lease,
                        error: format!(
                            "stalled {stalls} times: each time its lease ran out before the \
                             handler reported back (the process running it died, or lost Redis)"
                        ),
                    },
                    Ok(spec) => Taken::Run {
                        delivery: delivery(spec),
                        lease,
                    },
                    Err(error) => Taken::Bury {
                        delivery: delivery(JobSpec {
                            body: job[1].clone(),
                            run_at_ms: self.infra.clock.now_ms(),
                            max_attempts: attempt,
                            callback_url: None,
                            created_at_ms: 0,
                            seq: 0,
                            priority: 0,
                            backoff: None,
                            remove_on_complete: None,
                            remove_on_fail: None,
                            repeat: None,
                        }),
                        lease,
                        error: format!("the stored job does not read as a job: {error}"),
                    },
                }
            })
            .collect()
    }

    /// Runs `work` while moving the delivery's visibility deadline forward every third of the
    /// visibility timeout. A lease found lost (the job was cancelled, or reclaimed after this
    /// process could not extend it in time) is left alone: the outcome will not be applied. A
    /// failed extension is tried again at the next third; one that never succeeds lets the job
    /// be delivered again, which is what the lease is for.
    async fn holding_lease<T>(
        &self,
        delivery: &Delivery,
        lease: &str,
        visibility: Duration,
        work: impl std::future::Future<Output = T>,
    ) -> T {
        tokio::pin!(work);
        let mut every = tokio::time::interval((visibility / 3).max(Duration::from_millis(10)));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        every.tick().await;
        let mut held = true;
        loop {
            tokio::select! {
                outcome = &mut work => return outcome,
                _ = every.tick(), if held => {
                    match self.extend(delivery, lease, visibility).await {
                        Ok(still_held) => held = still_held,
                        Err(error) => tracing::warn!(
                            topic = delivery.topic,
                            job = delivery.id,
                            %error,
                            "could not extend a job's lease"
                        ),
                    }
                }
            }
        }
    }

    /// Whether the lease was this delivery's and now runs a whole visibility timeout from now.
    async fn extend(
        &self,
        delivery: &Delivery,
        lease: &str,
        visibility: Duration,
    ) -> AppResult<bool> {
        let keys = &self.infra.keys;
        let running = JobsExtend {
            running: keys.jobs_running(&delivery.topic),
            job: keys.job(&delivery.topic, &delivery.id),
        };
        let args = JobsExtendArgs {
            deadline_ms: self.infra.clock.now_ms() + visibility.as_millis() as i64,
            id: &delivery.id,
            lease,
        };
        let extended = self.infra.scripts().call(&running, &args).await?;
        Ok(extended == 1)
    }

    async fn finish_loop(
        &self,
        mut queue: mpsc::Receiver<Finish>,
        ready_topics: &Mutex<ReadyTopics>,
        wake: &Notify,
    ) {
        // Two batches in flight: while Redis runs one, the other's replies are handed out and
        // its SQL record written. With one, Redis idled a fifth of a burst over 1,000 topics.
        let mut in_flight = futures::stream::FuturesUnordered::new();
        let mut batch = Vec::with_capacity(FINISH_BATCH);
        loop {
            let room = in_flight.len() < FINISHES_IN_FLIGHT;
            tokio::select! {
                received = queue.recv_many(&mut batch, FINISH_BATCH), if room => {
                    if received == 0 {
                        break;
                    }
                    in_flight.push(self.finish_batch(std::mem::take(&mut batch), ready_topics, wake));
                }
                Some(()) = futures::StreamExt::next(&mut in_flight), if !in_flight.is_empty() => {}
            }
        }
        while futures::StreamExt::next(&mut in_flight).await.is_some() {}
    }

    /// Records one batch of ends: in Redis, then in SQL.
    async fn finish_batch(
        &self,
        batch: Vec<Finish>,
        ready_topics: &Mutex<ReadyTopics>,
        wake: &Notify,
    ) {
        let mut by_topic: Vec<(String, Vec<Finish>)> = Vec::new();
        for end in batch {
            match by_topic.iter_mut().find(|(topic, _)| *topic == end.topic) {
                Some((_, ends)) => ends.push(end),
                None => by_topic.push((end.topic.clone(), vec![end])),
            }
        }
        let keys = &self.infra.keys;
        let now = self.infra.clock.now_ms();
        let calls: Vec<_> = by_topic
            .iter()
            .map(|(topic, ends)| {
                let finish = JobsFinish {
                    running: keys.jobs_running(topic),
                    delayed: keys.jobs_delayed(topic),
                    jobs: keys.jobs_of(topic),
                    finished: keys.jobs_finished(topic),
                    counts: keys.jobs_counts(topic),
                    waiting: keys.jobs_waiting(topic),
                };
                let args = JobsFinishArgs {
                    now_ms: now,
                    keep: super::FINISHED_KEPT,
                    channel: keys.jobs_live(topic),
                    publish: keys.publish_command(),
                    deliveries: ends,
                };
                (finish, args)
            })
            .collect();
        let applied = self.infra.scripts().call_many(&calls).await;
        if applied.is_ok() {
            let mut ready = ready_topics.lock().expect("poisoned");
            let mut freed = false;
            for (topic, _) in &by_topic {
                freed |= ready.ended(topic);
            }
            if freed {
                wake.notify_one();
            }
        }
        let mut ended = Ended::default();
        for (index, (topic, ends)) in by_topic.into_iter().enumerate() {
            // A topic left with no job delayed, waiting or running is visited now (its
            // visit was at most the last job's visibility deadline): the promotion drops
            // it from the index, and from the gauges with it.
            if let Ok(replies) = &applied {
                if replies[index].first() == Some(&0) {
                    ended.visit(&topic, now);
                }
            }
            for (position, end) in ends.into_iter().enumerate() {
                let reply = match &applied {
                    Ok(replies) => Ok(replies[index].get(position + 1).copied().unwrap_or(0)),
                    Err(error) => Err(error.clone()),
                };
                if let Ok(reply @ 1..) = reply {
                    ended.add(&topic, &end, reply == 2);
                }
                let result = reply.map(|reply| reply > 0);
                let _ = end.applied.send(result);
            }
        }
        ended.record(self).await;
    }

    /// Stores an exhausted job in `dead_job` first, then removes it from Redis; if the job was
    /// cancelled or reclaimed meanwhile, the row is taken back.
    async fn bury(
        &self,
        finisher: &Finisher,
        delivery: &Delivery,
        lease: &str,
        error: &str,
    ) -> AppResult<()> {
        let died_at = self.infra.clock.now_ms();
        sqlx::query(
            "INSERT INTO dead_job (topic, job_id, body, callback_url, attempts, max_attempts, last_error, died_at_ms, priority, created_at_ms) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT DO NOTHING",
        )
        .bind(&delivery.topic)
        .bind(&delivery.id)
        .bind(&delivery.spec.body)
        .bind(&delivery.spec.callback_url)
        .bind(i64::from(delivery.attempt))
        .bind(i64::from(delivery.spec.max_attempts))
        .bind(error)
        .bind(died_at)
        .bind(i64::from(delivery.spec.priority))
        // The job's own creation, not its death: 0 (a job whose JSON did not read) is none.
        .bind(Some(delivery.spec.created_at_ms).filter(|at| *at > 0))
        .execute(&self.infra.db.pool)
        .await?;
        if finisher
            .finish(delivery, lease, Outcome::Dead { error })
            .await?
        {
            metrics::counter!("engage_jobs_dead_total", "topic" => self.topic_label(&delivery.topic))
                .increment(1);
            if let Some(keep) = delivery.spec.remove_on_fail {
                self.keep_dead(&delivery.topic, keep).await?;
            }
            tracing::warn!(
                topic = delivery.topic,
                job = delivery.id,
                error,
                "job moved to dead_job"
            );
        } else {
            sqlx::query(
                "DELETE FROM dead_job WHERE topic = $1 AND job_id = $2 AND died_at_ms = $3",
            )
            .bind(&delivery.topic)
            .bind(&delivery.id)
            .bind(died_at)
            .execute(&self.infra.db.pool)
            .await?;
        }
        Ok(())
    }
}

/// `{ promoted, reclaimed, jobs waiting, next visit, run-at of each promoted job… }`.
impl Replies for JobsPromote {
    type Reply = Vec<i64>;
}

/// What the topic has left ([`Left`]), then five per job taken: id, JSON, attempts, lease,
/// stalls.
impl Replies for JobsTake {
    type Reply = Vec<String>;
}

/// 1 extended, 0 the lease is no longer this delivery's.
impl Replies for JobsExtend {
    type Reply = i64;
}

/// Whether the topic has a job pending still (0 none, 1 some), then one per delivery: 1
/// applied, 2 applied with the next run of its series scheduled, 0 the lease is no longer this
/// delivery's.
impl Replies for JobsFinish {
    type Reply = Vec<i64>;
}
