//! What an earlier version left in Redis for the queue, moved to this version's layout when
//! the worker starts, before its first promotion: the pool hash per topic, whose jobs go to a
//! hash per job (`lua/jobs_lift.lua`). Idempotent, and safe with other instances of this
//! version doing the same: each job moves in one script call.
//!
//! Instances of the earlier version must be stopped first: one that still schedules into a
//! pool, or reads a job from it, misses the jobs moved out.

use crate::{
    features::jobs::Jobs,
    infra::{
        error::AppResult,
        redis::scripts::{JobsLift, JobsLiftArgs, Replies},
    },
};

/// Pool fields read per HSCAN step, and so at most jobs per script call.
const LIFT_BATCH: usize = 500;

impl Replies for JobsLift {
    type Reply = i64;
}

impl Jobs {
    /// Moves the jobs of every known topic's pool into hashes per job. `Ok` once no pool is
    /// left.
    pub async fn lift_pools(&self) -> AppResult<()> {
        let topics = self.topics_in_redis_sets().await?;
        for topic in &topics {
            let moved = self.lift_pool(topic).await?;
            if moved > 0 {
                tracing::info!(
                    topic,
                    jobs = moved,
                    "jobs moved from their topic's pool hash"
                );
            }
        }
        Ok(())
    }

    /// Moves one topic's pool: pass after pass over its fields, until it is gone. A pass that
    /// finds no job's JSON leaves fields of no job, which are dropped.
    async fn lift_pool(&self, topic: &str) -> AppResult<i64> {
        let keys = &self.infra.keys;
        let pool = keys.jobs_legacy_pool(topic);
        let lift = JobsLift {
            pool: pool.clone(),
            jobs: keys.jobs_of(topic),
            counts: keys.jobs_counts(topic),
        };
        let mut moved = 0;
        loop {
            let mut cursor = 0u64;
            let mut moved_in_pass = 0;
            loop {
                let (next, fields): (u64, Vec<String>) = {
                    let mut conn = self.infra.redis.get().await?;
                    redis::cmd("HSCAN")
                        .arg(&pool)
                        .arg(cursor)
                        .arg("COUNT")
                        .arg(LIFT_BATCH)
                        .query_async(&mut *conn)
                        .await?
                };
                // Field, value, field, value…: a job's JSON is the field named by its id alone.
                let ids: Vec<&str> = fields
                    .iter()
                    .step_by(2)
                    .map(String::as_str)
                    .filter(|field| !field.contains('/'))
                    .collect();
                for ids in ids.chunks(LIFT_BATCH) {
                    moved_in_pass += self
                        .infra
                        .scripts()
                        .call(&lift, &JobsLiftArgs { ids: ids.to_vec() })
                        .await?;
                }
                cursor = next;
                if cursor == 0 {
                    break;
                }
            }
            moved += moved_in_pass;
            if moved_in_pass == 0 {
                let mut conn = self.infra.redis.get().await?;
                let _: i64 = redis::cmd("DEL").arg(&pool).query_async(&mut *conn).await?;
                return Ok(moved);
            }
        }
    }
}
