//! How far behind each stream consumer is, read when `/metrics` is scraped:
//! - `engage_stream_consumer_lag{consumer}`: entries of its streams not yet delivered to
//!   its group (Redis 7's `lag` of XINFO GROUPS);
//! - `engage_stream_consumer_pending{consumer}`: entries delivered and not yet
//!   acknowledged: a batch being handled, or one held up while SQL is down;
//!
//! each summed over the consumer's streams (a feature's shards). Lag that keeps growing is
//! a consumer that cannot keep up or has stopped; pending that stays high is SQL refusing
//! its batches (RELIABILITY.md says what to do about either).
//!
//! Redis cannot tell a group's lag when entries between its position and the stream's end
//! were deleted one by one (XDEL); engage only trims below what every group has handled,
//! so the lag is always known, and a stream whose lag is unknown adds nothing.

use redis::streams::StreamInfoGroupsReply;

use crate::infra::{
    error::AppResult,
    metrics::{Reading, ScrapedGauges},
    Infra,
};

/// One consumer's streams and group: what its gauges read.
pub(super) struct Backlog {
    pub consumer: &'static str,
    pub group: &'static str,
    pub streams: Vec<String>,
}

#[async_trait::async_trait]
impl ScrapedGauges for Backlog {
    /// One pipeline: XINFO GROUPS of each stream (on a cluster, split by slot).
    async fn read(&self, infra: &Infra) -> AppResult<Vec<Reading>> {
        let mut pipe = redis::pipe();
        for stream in &self.streams {
            pipe.cmd("XINFO").arg("GROUPS").arg(stream);
        }
        let mut conn = infra.redis.get().await?;
        let replies: Vec<StreamInfoGroupsReply> = pipe.query_async(&mut *conn).await?;
        let (mut lag, mut pending) = (0, 0);
        for group in replies
            .iter()
            .flat_map(|reply| &reply.groups)
            .filter(|group| group.name == self.group)
        {
            lag += group.lag.unwrap_or(0);
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
