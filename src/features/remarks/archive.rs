//! The vote archive: the consumer of the vote streams that writes `vote_log` (insert-only,
//! idempotent: a replayed vote has the same remark, voter and order, the key SQLite keeps it
//! unique by, and the same event id, PostgreSQL's) and rolls each remark's count up into
//! `remarks.like_count` in the same transaction.
//!
//! The vote event is also the seam for points: a `LIKE_RECEIVED` award is a second consumer
//! group on the same streams (each event names the author and whether the vote changed a
//! like), so archiving and awarding never wait for each other.

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex},
};

use sqlx::{Any, Transaction};

use crate::{
    features::remarks::{events::VoteEvent, Remarks},
    infra::{
        db::{self, Backend},
        streams::{self, Event, HandleError, Handler, StreamEntry, StreamHandler},
    },
};

pub const GROUP: &str = "archive";

impl Remarks {
    pub fn spawn_archive(&self) {
        let streams = self.vote_streams();
        let handler = Arc::new(VoteArchive {
            ctx: self.clone(),
            partitions: Mutex::new(HashSet::new()),
        });
        streams::spawn(
            &self.infra,
            "vote-archive",
            GROUP,
            streams,
            Handler::Archive(handler),
        );
    }
}

struct VoteArchive {
    ctx: Remarks,
    /// PostgreSQL months whose partition this instance has made sure of.
    partitions: Mutex<HashSet<i32>>,
}

struct VoteRow {
    event_id: String,
    remark_id: i64,
    voter_id: i64,
    voting: i32,
    like_count: i64,
    voted_at_ms: i64,
    vote_date: i32,
    event_order: i64,
}

impl VoteArchive {
    fn decode(&self, entry: &StreamEntry) -> Result<VoteRow, HandleError> {
        let vote = VoteEvent::from_entry(entry)?;
        let date = self.ctx.infra.clock.date_of_ms(vote.at_ms);
        Ok(VoteRow {
            // Stream ids are unique per stream; the stream (shard) makes them unique here.
            event_id: format!(
                "{}/{}",
                entry
                    .stream
                    .strip_prefix(self.ctx.infra.keys.prefix())
                    .unwrap_or(&entry.stream),
                entry.id
            ),
            remark_id: vote.remark_id,
            voter_id: vote.voter_id,
            voting: i32::from(vote.liked),
            like_count: vote.like_count,
            voted_at_ms: vote.at_ms,
            vote_date: crate::infra::clock::day_number(date) as i32,
            event_order: entry.event_order(),
        })
    }

    /// Creates the monthly partitions a batch needs (PostgreSQL). Outside the batch's
    /// transaction, so that two instances racing to create one do not fail a batch.
    ///
    /// A partition that cannot be made is the database's fault, not the votes': the batch
    /// waits (and the consumer retries with back-off) instead of being dead-lettered.
    async fn ensure_partitions(&self, rows: &[VoteRow]) -> Result<(), HandleError> {
        if self.ctx.infra.db.backend != Backend::Postgres {
            return Ok(());
        }
        let months: HashSet<i32> = rows.iter().map(|r| r.vote_date / 100).collect();
        for month in months {
            if self.partitions.lock().expect("poisoned").contains(&month) {
                continue;
            }
            let (year, mon) = (month / 100, month % 100);
            let next = if mon == 12 {
                (year + 1) * 100 + 1
            } else {
                month + 1
            };
            let ddl = format!(
                "CREATE TABLE IF NOT EXISTS vote_log_{month} PARTITION OF vote_log \
                 FOR VALUES FROM ({month}00) TO ({next}00)"
            );
            if let Err(error) = sqlx::query(&ddl).execute(&self.ctx.infra.db.pool).await {
                // Another instance may have created it a moment before: only a partition
                // that is still missing stops the batch.
                if !self.partition_exists(month).await {
                    return Err(HandleError::Unavailable(format!(
                        "the vote_log partition for {month} cannot be created: {error}"
                    )));
                }
            }
            self.partitions.lock().expect("poisoned").insert(month);
        }
        Ok(())
    }

    /// Whether `vote_log` has a partition attached for `month`.
    async fn partition_exists(&self, month: i32) -> bool {
        sqlx::query_scalar::<_, i64>(
            "SELECT COUNT(*) FROM pg_inherits \
             WHERE inhparent = 'vote_log'::regclass AND inhrelid::regclass::text = $1",
        )
        .bind(format!("vote_log_{month}"))
        .fetch_one(&self.ctx.infra.db.pool)
        .await
        .is_ok_and(|count| count > 0)
    }
}

/// PostgreSQL's "no partition of relation found for row" (`check_violation`, which is also a
/// failed CHECK constraint; `vote_log` has none).
const NO_PARTITION_FOR_ROW: &str = "23514";

#[async_trait::async_trait]
impl StreamHandler for VoteArchive {
    async fn handle(
        &self,
        tx: &mut Transaction<'static, Any>,
        entries: &[StreamEntry],
    ) -> Result<(), HandleError> {
        let rows = entries
            .iter()
            .map(|e| self.decode(e))
            .collect::<Result<Vec<_>, _>>()?;
        if rows.is_empty() {
            return Ok(());
        }
        self.ensure_partitions(&rows).await?;
        let written = db::insert_new_rows(
            tx,
            "vote_log (event_id, remark_id, voter_id, voting, like_count, voted_at_ms, \
             vote_date, event_order)",
            8,
            &rows,
            |insert, row| {
                insert
                    .bind(&row.event_id)
                    .bind(row.remark_id)
                    .bind(row.voter_id)
                    .bind(row.voting)
                    .bind(row.like_count)
                    .bind(row.voted_at_ms)
                    .bind(row.vote_date)
                    .bind(row.event_order)
            },
        )
        .await;
        if let Err(error) = written {
            return Err(match &error {
                // A month whose table exists but is not attached as a partition (made by
                // hand, or detached): forget what this instance believed, so the next try
                // creates it, and wait rather than blame the votes.
                sqlx::Error::Database(db) if db.code().as_deref() == Some(NO_PARTITION_FOR_ROW) => {
                    self.partitions.lock().expect("poisoned").clear();
                    HandleError::Unavailable(format!("a vote_log partition is missing: {error}"))
                }
                _ => error.into(),
            });
        }

        // Batches of one stream may be archived out of order by two instances; the order
        // guard keeps the newest count. One statement for every remark of a run.
        let mut newest: HashMap<i64, (i64, i64)> = HashMap::new();
        for row in &rows {
            let slot = newest
                .entry(row.remark_id)
                .or_insert((row.event_order, row.like_count));
            if row.event_order >= slot.0 {
                *slot = (row.event_order, row.like_count);
            }
        }
        let newest: Vec<(i64, (i64, i64))> = newest.into_iter().collect();
        for run in db::runs(&newest) {
            let sql = format!(
                "UPDATE remarks SET like_count = v.cnt, like_count_order = v.ord \
                 FROM ({}) AS v WHERE remarks.id = v.id AND remarks.like_count_order < v.ord",
                db::rows_table(Backend::of(tx), run.len(), &["id", "cnt", "ord"])
            );
            let mut update = sqlx::query(&sql);
            for &(remark_id, (order, count)) in run {
                update = update.bind(remark_id).bind(count).bind(order);
            }
            update.execute(&mut **tx).await?;
        }
        Ok(())
    }
}
