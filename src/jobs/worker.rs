//! The delay queue's tick, run by every instance: promote due jobs of every topic (one atomic
//! script per topic: no lock, no double move), then take ready jobs while this instance has
//! capacity and run each in its own task. A tick every `ENGAGE_JOBS_TICK_MS` (100 ms) keeps
//! due times well within a second.

use std::{sync::Arc, time::Duration};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

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

pub async fn run(state: AppState) {
    let tick = Duration::from_millis(state.config.jobs_tick_ms.max(10));
    let capacity = state.config.jobs_concurrency.max(1);
    let permits = Arc::new(Semaphore::new(capacity));
    let mut every = tokio::time::interval(tick);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            () = state.shutdown.cancelled() => break,
            _ = every.tick() => {}
        }
        if let Err(error) = tick_once(&state, &permits).await {
            tracing::warn!(%error, "delay queue tick failed");
        }
    }
    // Let running jobs finish (the app bounds this wait by its grace period).
    let _ = permits.acquire_many(capacity as u32).await;
}

async fn topics(state: &AppState) -> AppResult<Vec<String>> {
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

async fn tick_once(state: &AppState, permits: &Arc<Semaphore>) -> AppResult<()> {
    let topics = topics(state).await?;
    for topic in &topics {
        promote(state, topic).await?;
    }
    for topic in &topics {
        while let Ok(permit) = permits.clone().try_acquire_owned() {
            match take(state, topic).await? {
                Some((delivery, lease)) => {
                    let state = state.clone();
                    tokio::spawn(async move { deliver(state, delivery, lease, permit).await });
                }
                None => break,
            }
        }
    }
    Ok(())
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
        for run_at in &moved[2..] {
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

async fn take(state: &AppState, topic: &str) -> AppResult<Option<(Delivery, String)>> {
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
        .invoke_async(&mut *conn)
        .await?;
    let mut taken = taken.into_iter();
    let (Some(id), Some(json), Some(attempt)) = (taken.next(), taken.next(), taken.next()) else {
        return Ok(None);
    };
    let attempt = attempt.parse().unwrap_or(1);
    let spec: JobSpec = serde_json::from_str(&json).map_err(crate::error::AppError::internal)?;
    Ok(Some((
        Delivery {
            id,
            topic: topic.to_string(),
            spec,
            attempt,
        },
        lease,
    )))
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
