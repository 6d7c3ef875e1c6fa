//! Like counters and relations, from `remarks.like_count` (the count after the newest
//! archived vote) and `vote_log` (each voter's latest vote).
//!
//! A rebuilt counter is marked `hydrated`: from then on a relation key Redis lacks is asked
//! of the archive, so relations are not copied back one key per vote (they expire anyway,
//! see `likes`). The earliest likers refill themselves from the archive when read short.
//! Counters are written only where missing (HSETNX), as the like script's own rebuild
//! does, so a vote racing with the rebuild is never undone and nothing is held back.

use std::collections::BTreeMap;

use sqlx::Row;

use crate::{
    features::remarks::{lifecycle::Withdrawal, likes::CURRENT_LIKE, Remarks},
    infra::{
        error::AppResult,
        recovery::{within, Rebuild, Report},
    },
};

/// A remark as recovery reads it: `(id, author, like count)` and whether it is deleted or
/// hidden.
type StoredRemark = ((i64, i64, i64), Option<Withdrawal>);

/// Remarks read and written per round trip.
const CHUNK: i64 = 1000;

/// Like relations read per round trip. A thousand remarks may have millions of likers
/// between them, and one pipeline of them all outlasts the response timeout (and holds up
/// every other command on the connection meanwhile).
const RELATIONS_PER_TRIP: usize = 10_000;

impl Remarks {
    /// A chunk of remarks above `after`: `(id, author, like count)` with what happened to
    /// them (none, deleted or hidden).
    async fn remarks_with_state_after(&self, after: i64) -> AppResult<Vec<StoredRemark>> {
        let rows = sqlx::query(
            "SELECT id, author_id, like_count, deleted_at_ms, hidden_at_ms FROM remarks \
             WHERE id > $1 ORDER BY id LIMIT $2",
        )
        .bind(after)
        .bind(CHUNK)
        .fetch_all(&self.infra.db.pool)
        .await?;
        let mut remarks = Vec::with_capacity(rows.len());
        for row in &rows {
            let state = if row.try_get::<Option<i64>, _>("deleted_at_ms")?.is_some() {
                Some(Withdrawal::Deleted)
            } else if row.try_get::<Option<i64>, _>("hidden_at_ms")?.is_some() {
                Some(Withdrawal::Hidden)
            } else {
                None
            };
            remarks.push((
                (
                    row.try_get("id")?,
                    row.try_get("author_id")?,
                    row.try_get("like_count")?,
                ),
                state,
            ));
        }
        Ok(remarks)
    }

    /// Who currently likes each of `remarks`, by the archive (each voter's latest vote).
    async fn likers_of(&self, remarks: &[i64]) -> AppResult<BTreeMap<i64, Vec<i64>>> {
        let rows = sqlx::query(&format!(
            "SELECT v.remark_id, v.voter_id FROM vote_log v WHERE v.{} AND {CURRENT_LIKE}",
            within("remark_id", remarks)
        ))
        .fetch_all(&self.infra.db.pool)
        .await?;
        let mut likers: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
        for row in &rows {
            likers
                .entry(row.try_get("remark_id")?)
                .or_default()
                .push(row.try_get("voter_id")?);
        }
        Ok(likers)
    }

    /// A deleted remark has no counter in Redis (a tombstone at most), a hidden one is
    /// marked so that likes are refused.
    async fn verify_withdrawn(
        &self,
        remarks: &[StoredRemark],
        report: &mut Report,
    ) -> AppResult<()> {
        let withdrawn: Vec<(i64, Withdrawal)> = remarks
            .iter()
            .filter_map(|((id, _, _), state)| state.map(|how| (*id, how)))
            .collect();
        if withdrawn.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        for (id, _) in &withdrawn {
            pipe.cmd("HMGET")
                .arg(self.infra.keys.remark_info(*id, self.settings.shards()))
                .arg("likes")
                .arg("gone");
        }
        let mut conn = self.infra.redis.get().await?;
        let infos: Vec<(Option<i64>, Option<String>)> = pipe.query_async(&mut *conn).await?;
        drop(conn);
        for ((id, how), (likes, gone)) in withdrawn.iter().zip(infos) {
            let fine = match how {
                Withdrawal::Deleted => likes.is_none(),
                Withdrawal::Hidden => gone.as_deref() == Some("hidden"),
            };
            report.check(fine, || {
                format!("remark {id} is {how:?} in SQL; Redis holds likes {likes:?}, mark {gone:?}")
            });
        }
        Ok(())
    }

    /// Each remark's counter equals the archived count, and each current liker's relation is
    /// either in Redis as a like or left to the archive (the counter is `hydrated`).
    pub(crate) async fn verify(&self) -> AppResult<Report> {
        let mut report = Report::new("likes");
        let shards = self.settings.shards();
        let mut after = 0;
        loop {
            let all = self.remarks_with_state_after(after).await?;
            let Some(&((last, _, _), _)) = all.last() else {
                return Ok(report);
            };
            self.verify_withdrawn(&all, &mut report).await?;
            // A deleted remark has no counter to check; a hidden one keeps its own.
            let remarks: Vec<(i64, i64, i64)> = all
                .iter()
                .filter(|(_, state)| *state != Some(Withdrawal::Deleted))
                .map(|(remark, _)| *remark)
                .collect();
            let ids: Vec<i64> = remarks.iter().map(|(id, _, _)| *id).collect();
            let likers = self.likers_of(&ids).await?;
            let mut pipe = redis::pipe();
            for &id in &ids {
                pipe.cmd("HMGET")
                    .arg(self.infra.keys.remark_info(id, shards))
                    .arg("likes")
                    .arg("hydrated");
            }
            // Built a round trip at a time: the keys of a million likers are not held at once.
            let mut relations = likers.iter().flat_map(|(&remark, voters)| {
                voters
                    .iter()
                    .map(move |&voter| self.infra.keys.like_relation(remark, voter, shards))
            });
            let mut conn = self.infra.redis.get().await?;
            let infos: Vec<(Option<i64>, Option<i64>)> = pipe.query_async(&mut *conn).await?;
            let mut held: Vec<Option<String>> = Vec::new();
            loop {
                let mut trip = redis::pipe();
                for key in relations.by_ref().take(RELATIONS_PER_TRIP) {
                    trip.cmd("GET").arg(key);
                }
                if trip.is_empty() {
                    break;
                }
                let values: Vec<Option<String>> = trip.query_async(&mut *conn).await?;
                held.extend(values);
            }
            drop(conn);
            let mut hydrated = BTreeMap::new();
            for (&(id, _, count), (likes, is_hydrated)) in remarks.iter().zip(infos) {
                report.check(likes == Some(count), || {
                    format!("remark {id}: {count} likes in SQL, {likes:?} in Redis")
                });
                hydrated.insert(id, is_hydrated.is_some());
            }
            let mut held = held.into_iter();
            for (&remark, voters) in &likers {
                for &voter in voters {
                    let relation = held.next().flatten();
                    let answered = match relation.as_deref() {
                        Some(value) => value == "1",
                        None => hydrated.get(&remark).copied().unwrap_or(false),
                    };
                    report.check(answered, || {
                        format!(
                            "remark {remark}: voter {voter} likes it in SQL, Redis says {relation:?}"
                        )
                    });
                }
            }
            after = last;
        }
    }

    /// Restores each remark's counter where Redis lacks it, marked `hydrated`.
    pub(crate) async fn rebuild(&self, run: &Rebuild<'_>) -> AppResult<()> {
        run.expect_count("SELECT COUNT(*) AS n FROM remarks")
            .await?;
        let shards = self.settings.shards();
        let mut after = run.resume_from().await?;
        loop {
            let all = self.remarks_with_state_after(after).await?;
            let Some(&((last, _, _), _)) = all.last() else {
                return Ok(());
            };
            let mut pipe = redis::pipe();
            for &((id, author, count), state) in &all {
                if state == Some(Withdrawal::Deleted) {
                    continue;
                }
                let key = self.infra.keys.remark_info(id, shards);
                pipe.cmd("HSETNX")
                    .arg(&key)
                    .arg("likes")
                    .arg(count)
                    .ignore();
                pipe.cmd("HSET")
                    .arg(&key)
                    .arg("author")
                    .arg(author)
                    .arg("hydrated")
                    .arg(1)
                    .ignore();
            }
            crate::infra::recovery::write(&self.infra, &pipe).await?;
            // Deleted and hidden remarks withdrawn again: a tombstone or a mark, so that
            // likes keep answering NOT_FOUND.
            for &((id, _, _), state) in &all {
                if let Some(how) = state {
                    self.withdraw(id, how).await?;
                }
            }
            run.finished_through(last, all.len() as u64).await?;
            after = last;
        }
    }
}
