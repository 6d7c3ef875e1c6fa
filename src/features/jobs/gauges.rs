//! The delay queue's jobs per topic and state, read when `/metrics` is scraped:
//! `engage_jobs_delayed`, `engage_jobs_ready` and `engage_jobs_running`, each `{topic}`.
//!
//! The topics counted are those of the index of topics with work ([`super::topics`]), which
//! holds every topic with a pending job and drops a topic once its last job ended: a scrape
//! costs two round trips (the index, then one pipeline of three counts per topic), whatever
//! the number of jobs. Topics are labelled as the delay queue's counters are
//! ([`Jobs::topic_label`]): beyond the first few an instance met, they add up under
//! `other`.

use std::sync::Arc;

use crate::{
    features::jobs::Jobs,
    infra::{
        error::AppResult,
        metrics::{BoundedLabel, Reading, ScrapedGauges},
        Infra,
    },
};

/// Most topics one scrape counts, the earliest due first (as many as one promotion tick
/// walks).
const TOPICS_PER_SCRAPE: usize = 1000;

/// The gauges' source. It holds the topic labels, not the [`Jobs`] context: the instance
/// keeps its sources, and a context would keep the instance alive through its `Infra`.
pub(crate) struct QueueDepths {
    topics: Arc<BoundedLabel>,
}

impl Jobs {
    /// The source of the delay queue's gauges, to add to the instance's.
    pub(crate) fn queue_depths(&self) -> QueueDepths {
        QueueDepths {
            topics: self.topic_labels.clone(),
        }
    }
}

#[async_trait::async_trait]
impl ScrapedGauges for QueueDepths {
    async fn read(&self, infra: &Infra) -> AppResult<Vec<Reading>> {
        let keys = &infra.keys;
        let mut conn = infra.redis.get().await?;
        let topics: Vec<String> = redis::cmd("ZRANGE")
            .arg(keys.jobs_due_topics())
            .arg(0)
            .arg(TOPICS_PER_SCRAPE - 1)
            .query_async(&mut *conn)
            .await?;
        if topics.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for topic in &topics {
            pipe.cmd("ZCARD").arg(keys.jobs_delayed(topic));
            pipe.cmd("ZCARD").arg(keys.jobs_waiting(topic));
            pipe.cmd("ZCARD").arg(keys.jobs_running(topic));
        }
        let counts: Vec<u64> = pipe.query_async(&mut *conn).await?;

        // (label, [delayed, ready, running]), topics under one label added up.
        let mut by_label: Vec<(String, [u64; 3])> = Vec::new();
        for (topic, counts) in topics.iter().zip(counts.chunks_exact(3)) {
            let label = self.topics.of(topic);
            let index = match by_label.iter().position(|(named, _)| *named == label) {
                Some(index) => index,
                None => {
                    by_label.push((label, [0; 3]));
                    by_label.len() - 1
                }
            };
            for (sum, count) in by_label[index].1.iter_mut().zip(counts) {
                *sum += count;
            }
        }
        let states = [
            "engage_jobs_delayed",
            "engage_jobs_ready",
            "engage_jobs_running",
        ];
        Ok(by_label
            .into_iter()
            .flat_map(|(label, counts)| {
                states
                    .into_iter()
                    .zip(counts)
                    .map(move |(name, count)| Reading {
                        name,
                        labels: vec![("topic", label.clone())],
                        value: count as f64,
                    })
            })
            .collect())
    }
}
