//! The delay queue's workers, run by every instance: a tick that promotes due jobs of every
//! topic (one atomic script per topic: no lock, no double move) every `ENGAGE_JOBS_TICK_MS`
//! (100 ms, so due times hold well within a second), and a taker that hands ready jobs to
//! handler tasks, in batches, whenever this instance has capacity.

use std::{sync::Arc, time::Duration};

use std::sync::Mutex;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use super::{
    handlers::{Delivery, JobError},
    JobSpec,
};
use crate::{
    app::AppState,
    error::AppResult,
    redis::scripts::{JOBS_FINISH, JOBS_PROMOTE, JOBS_TAKE},
};

/// Most jobs one promotion moves per topic per tick.
const PROMOTE_BATCH: usize = 5000;
/// Most jobs one take hands out.
const TAKE_BATCH: usize = 100;

pub async fn run(state: AppState) {
    let capacity = state.config.jobs_concurrency.max(1);
    let permits = Arc::new(Semaphore::new(capacity));
    let topics = Mutex::new(Vec::new());
    let promoted = Notify::new();
    tokio::join!(
        promote_loop(&state, &topics, &promoted),
        take_loop(&state, &topics, &promoted, &permits)
    );
    // Let running jobs finish (the app bounds this wait by its grace period).
    let _ = permits.acquire_many(capacity as u32).await;
}

/// Every tick: refresh the topic list and promote due jobs of every topic.
async fn promote_loop(state: &AppState, topics: &Mutex<Vec<String>>, promoted: &Notify) {
    let mut every = tokio::time::interval(Duration::from_millis(state.config.jobs_tick_ms.max(10)));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            () = state.shutdown.cancelled() => return,
            _ = every.tick() => {}
        }
        let pass = async {
            let current = all_topics(state).await?;
            for topic in &current {
                promote(state, topic).await?;
            }
            *topics.lock().expect("poisoned") = current;
            AppResult::Ok(())
        };
        match pass.await {
            Ok(()) => promoted.notify_one(),
            Err(error) => tracing::warn!(%error, "delay queue promotion failed"),
        }
    }
}

/// Takes ready jobs as long as this instance has free capacity and the lists have jobs; a
/// finished job frees capacity at once, so a backlog drains at the handlers' pace, not the
/// tick's.
async fn take_loop(
    state: &AppState,
    topics: &Mutex<Vec<String>>,
    promoted: &Notify,
    permits: &Arc<Semaphore>,
) {
    loop {
        let current = topics.lock().expect("poisoned").clone();
        let mut took_any = false;
        for topic in &current {
            let permit = tokio::select! {
                () = state.shutdown.cancelled() => return,
                permit = permits.clone().acquire_owned() => permit.expect("never closed"),
            };
            let want = 1 + permits.available_permits().min(TAKE_BATCH - 1);
            let taken = match take(state, topic, want).await {
                Ok(taken) => taken,
                Err(error) => {
                    tracing::warn!(%error, topic, "taking jobs failed");
                    Vec::new()
                }
            };
            let mut permit = Some(permit);
            for (delivery, lease) in taken {
                took_any = true;
                let permit = match permit.take() {
                    Some(first) => first,
                    None => permits.clone().try_acquire_owned().expect("counted above"),
                };
                let state = state.clone();
                tokio::spawn(async move { deliver(state, delivery, lease, permit).await });
            }
        }
        if !took_any {
            tokio::select! {
                () = state.shutdown.cancelled() => return,
                () = promoted.notified() => {}
                () = tokio::time::sleep(Duration::from_millis(state.config.jobs_tick_ms.max(10))) => {}
            }
        }
    }
}

async fn all_topics(state: &AppState) -> AppResult<Vec<String>> {
    let mut conn = state.redis.get().await?;
    let mut topics: Vec<String> = redis::cmd("SMEMBERS")
        .arg(state.keys.job_topics())
        .query_async(&mut *conn)
        .await?;
    topics.extend(state.jobs.registered_topics());
    topics.sort();
    topics.dedup();
    Ok(topics)
}

async fn promote(state: &AppState, topic: &str) -> AppResult<()> {
    let keys = &state.keys;
    let now = state.clock.now_ms();
    let mut conn = state.redis.get().await?;
    let moved: Vec<i64> = JOBS_PROMOTE
        .key(keys.jobs_delayed(topic))
        .key(keys.jobs_ready(topic))
        .key(keys.jobs_running(topic))
        .key(keys.job_pool(topic))
        .arg(now)
        .arg(PROMOTE_BATCH)
        .invoke_async(&mut *conn)
        .await?;
    let (promoted, reclaimed) = (
        moved.first().copied().unwrap_or(0),
        moved.get(1).copied().unwrap_or(0),
    );
    if promoted > 0 {
        metrics::counter!("engage_jobs_promoted_total", "topic" => topic.to_string())
            .increment(promoted as u64);
        let lag =
            metrics::histogram!("engage_jobs_promotion_lag_seconds", "topic" => topic.to_string());
        for run_at in moved.iter().skip(3) {
            lag.record((now - run_at).max(0) as f64 / 1000.0);
        }
    }
    if reclaimed > 0 {
        tracing::info!(topic, reclaimed, "jobs of a silent worker are ready again");
        metrics::counter!("engage_jobs_reclaimed_total", "topic" => topic.to_string())
            .increment(reclaimed as u64);
    }
    Ok(())
}

/// Takes up to `count` ready jobs of a topic in one round trip.
async fn take(state: &AppState, topic: &str, count: usize) -> AppResult<Vec<(Delivery, String)>> {
    let keys = &state.keys;
    let lease = uuid::Uuid::new_v4().simple().to_string();
    let visibility = state.jobs.policy(topic).visibility;
    let mut conn = state.redis.get().await?;
    let taken: Vec<String> = JOBS_TAKE
        .key(keys.jobs_ready(topic))
        .key(keys.jobs_running(topic))
        .key(keys.job_pool(topic))
        .arg(state.clock.now_ms() + visibility.as_millis() as i64)
        .arg(&lease)
        .arg(count)
        .invoke_async(&mut *conn)
        .await?;
    taken
        .chunks_exact(4)
        .map(|job| {
            let spec: JobSpec =
                serde_json::from_str(&job[1]).map_err(crate::error::AppError::internal)?;
            let delivery = Delivery {
                id: job[0].clone(),
                topic: topic.to_string(),
                spec,
                attempt: job[2].parse().unwrap_or(1),
            };
            Ok((delivery, job[3].clone()))
        })
        .collect()
}

/// Runs one delivery and records its outcome. Only this delivery's lease may finish it:
/// if the job was cancelled or handed to another worker meanwhile, the outcome is dropped.
async fn deliver(
    state: AppState,
    delivery: Delivery,
    lease: String,
    _permit: OwnedSemaphorePermit,
) {
    let policy = state.jobs.policy(&delivery.topic);
    let outcome = match tokio::time::timeout(policy.visibility, state.jobs.run(&delivery)).await {
        Ok(outcome) => outcome,
        Err(_) => Err(JobError::Retry(format!(
            "handler ran longer than {:?}",
            policy.visibility
        ))),
    };
    let topic = delivery.topic.clone();
    let recorded = match &outcome {
        Ok(()) => finish(&state, &delivery, &lease, "done", 0, "")
            .await
            .map(|applied| {
                if applied {
                    metrics::counter!("engage_jobs_succeeded_total", "topic" => topic.clone())
                        .increment(1);
                }
            }),
        Err(JobError::Retry(error)) if delivery.attempt < delivery.spec.max_attempts => {
            let retry_at =
                state.clock.now_ms() + policy.retry_delay(delivery.attempt).as_millis() as i64;
            finish(&state, &delivery, &lease, "retry", retry_at, error)
                .await
                .map(|applied| {
                    if applied {
                        metrics::counter!("engage_jobs_retried_total", "topic" => topic.clone())
                            .increment(1);
                    }
                })
        }
        Err(JobError::Retry(error) | JobError::Permanent(error)) => {
            bury(&state, &delivery, &lease, error).await
        }
    };
    if let Err(error) = recorded {
        // The lease runs out and the job is delivered again: nothing is lost.
        tracing::warn!(topic, job = delivery.id, %error, "could not record a job's outcome");
    }
}

async fn finish(
    state: &AppState,
    delivery: &Delivery,
    lease: &str,
    outcome: &str,
    retry_at: i64,
    error: &str,
) -> AppResult<bool> {
    let keys = &state.keys;
    let topic = &delivery.topic;
    let mut conn = state.redis.get().await?;
    let applied: i64 = JOBS_FINISH
        .key(keys.jobs_running(topic))
        .key(keys.jobs_delayed(topic))
        .key(keys.job_pool(topic))
        .key(keys.jobs_finished(topic))
        .arg(&delivery.id)
        .arg(lease)
        .arg(outcome)
        .arg(state.clock.now_ms())
        .arg(retry_at)
        .arg(error)
        .arg(super::FINISHED_KEPT)
        .invoke_async(&mut *conn)
        .await?;
    Ok(applied == 1)
}

/// Stores an exhausted job in `dead_job` first, then removes it from Redis; if the job was
/// cancelled or reclaimed meanwhile, the row is taken back.
async fn bury(state: &AppState, delivery: &Delivery, lease: &str, error: &str) -> AppResult<()> {
    let died_at = state.clock.now_ms();
    sqlx::query(
        "INSERT INTO dead_job (topic, job_id, body, callback_url, attempts, max_attempts, last_error, died_at_ms) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING",
    )
    .bind(&delivery.topic)
    .bind(&delivery.id)
    .bind(&delivery.spec.body)
    .bind(&delivery.spec.callback_url)
    .bind(i64::from(delivery.attempt))
    .bind(i64::from(delivery.spec.max_attempts))
    .bind(error)
    .bind(died_at)
    .execute(&state.db.pool)
    .await?;
    if finish(state, delivery, lease, "dead", 0, error).await? {
        metrics::counter!("engage_jobs_dead_total", "topic" => delivery.topic.clone()).increment(1);
        tracing::warn!(
            topic = delivery.topic,
            job = delivery.id,
            error,
            "job moved to dead_job"
        );
    } else {
        sqlx::query("DELETE FROM dead_job WHERE topic = $1 AND job_id = $2 AND died_at_ms = $3")
            .bind(&delivery.topic)
            .bind(&delivery.id)
            .bind(died_at)
            .execute(&state.db.pool)
            .await?;
    }
    Ok(())
}
