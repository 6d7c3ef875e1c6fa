//! How far behind each stream consumer is, read when `/metrics` is scraped:
//! - `engage_stream_consumer_lag{consumer}`: entries of its streams not yet delivered to
//!   its group (Redis 7's `lag` of XINFO GROUPS);
//! - `engage_stream_consumer_pending{consumer}`: entries delivered and not yet
//!   acknowledged: a batch being handled, or one held up while SQL is down;
//!
//! each summed over the consumer's streams (a feature's shards). Lag that keeps growing is
//! a consumer that cannot keep up or has stopped; pending that stays high is SQL refusing
//! its batches (docs/operating.md, "What to alert on", says what to do about either).
//!
//! A group that was handed its stream's last entry has no lag, whatever Redis estimates:
//! Redis 7.0 can keep its estimate above zero for good once a stream was trimmed (the
//! reliability suite was misled by it, RELIABILITY.md). Otherwise Redis's `lag` is taken;
//! it is unknown only when entries past the group's position were deleted one by one
//! (XDEL), which engage never does, and an unknown lag adds nothing.

use redis::{
    streams::{StreamInfoGroupsReply, StreamInfoStreamReply},
    FromRedisValue, Value,
};

use crate::infra::{
    error::AppResult,
    metrics::{Reading, ScrapedGauges},
    Infra,
};

/// One consumer's streams and group: what its gauges read.
pub(super) struct Backlog {
    pub(crate) consumer: &'static str,
    pub(crate) group: &'static str,
    pub(crate) streams: Vec<String>,
}

#[async_trait::async_trait]
impl ScrapedGauges for Backlog {
    /// One pipeline: XINFO STREAM and XINFO GROUPS of each stream (on a cluster, split by
    /// slot).
    async fn read(&self, infra: &Infra) -> AppResult<Vec<Reading>> {
        let mut pipe = redis::pipe();
        for stream in &self.streams {
            pipe.cmd("XINFO").arg("STREAM").arg(stream);
            pipe.cmd("XINFO").arg("GROUPS").arg(stream);
        }
        let mut conn = infra.redis.get().await?;
        let replies: Vec<Value> = pipe.query_async(&mut *conn).await?;
        let (mut lag, mut pending) = (0, 0);
        for reply in replies.chunks_exact(2) {
            let stream = StreamInfoStreamReply::from_redis_value_ref(&reply[0])
                .map_err(redis::RedisError::from)?;
            let groups = StreamInfoGroupsReply::from_redis_value_ref(&reply[1])
                .map_err(redis::RedisError::from)?;
            let Some(group) = groups.groups.iter().find(|g| g.name == self.group) else {
                continue;
            };
            if group.last_delivered_id != stream.last_generated_id {
                lag += group.lag.unwrap_or(0);
            }
            pending += group.pending;
        }
        let reading = |name, value: usize| Reading {
            name,
            labels: vec![("consumer", self.consumer.to_string())],
            value: value as f64,
        };
        Ok(vec![
            reading("engage_stream_consumer_lag", lag),
            reading("engage_stream_consumer_pending", pending),
        ])
    }
}
