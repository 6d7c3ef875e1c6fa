//! Season rollover: after a season ends, its Redis board is copied to SQL in
//! chunks, verified by count, its top three recorded as winners, and only then unlinked.
//!
//! - **From a stable snapshot**: the copy reads a copy of each part of the board taken when
//!   it starts (`COPY`, atomic per part), never the live board, whose ranks shift under a
//!   late write (an award that computed its season just before midnight and ran just after).
//!   When the copy is verified, the live board is compared with the snapshot: if a late
//!   write changed it, a new snapshot is taken and copied instead, and only an unchanged
//!   board is unlinked. The parts are read as one board, in rank order ([`super::parts`]).
//!
//! - **One instance**: the work runs under the lock `rollover:<season>`; its fencing number is
//!   stored with the progress, and a holder whose number is older cannot write progress.
//! - **Resumable and idempotent**: progress (`season_archives.copied`, `status`) is written in
//!   the same transaction as each chunk, and rows are inserted with `ON CONFLICT DO NOTHING`,
//!   so a restart continues where the last commit left off and a repeat changes nothing.
//! - **Ordered steps, each retried on its own**: start → copy → verify (+ winners, and the
//!   rewards owed, `ENGAGE_SEASON_REWARDS`) → pay (`super::rewards`, each rank once) → unlink.
//!   A failing step is retried with back-off without redoing the steps before it.

use std::time::Duration;

use sqlx::Row;

use super::{parts, points_of, removals, rewards, SEASON_BOARD};
use crate::{
    features::leaderboard::Leaderboards,
    infra::{
        backoff::Backoff,
        clock::Month,
        db::Backend,
        error::{AppError, AppResult},
        lock::{self, Held},
    },
};

pub(crate) const COPYING: &str = "copying";
pub(crate) const VERIFIED: &str = "verified";
pub(crate) const DONE: &str = "done";

/// Whether SQL holds a season's (or a board period's) whole board: its copy verified, its
/// rewards recorded.
pub(crate) fn copied(status: &str) -> bool {
    status == VERIFIED || status == DONE
}

pub(crate) const CHUNK: usize = 1000;
const STEP_ATTEMPTS: u32 = 5;
/// Fresh snapshots taken for late writes before a run gives up (and the next check
/// tries again).
const MAX_RECOPIES: u32 = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    pub total: i64,
    pub copied: i64,
    pub done: bool,
}

/// How an archive run is driven: progress reports and (tests) an interruption.
#[derive(Default)]
pub struct Options<'a> {
    pub on_progress: Option<&'a (dyn Fn(Progress) + Send + Sync)>,
    /// Stop after this many chunks, as a crash would.
    pub stop_after_chunks: Option<usize>,
    /// Stop after this many rewards paid (their awards made, not yet marked paid).
    pub stop_after_payments: Option<usize>,
}

async fn retried<T, F, Fut>(step: &str, mut attempt: F) -> AppResult<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = AppResult<T>>,
{
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
    let mut tries = 0;
    loop {
        match attempt().await {
            Ok(value) => return Ok(value),
            Err(error) if tries + 1 < STEP_ATTEMPTS && error.is_hidden() => {
                tries += 1;
                tracing::warn!(step, %error, "rollover step failed, retrying");
                tokio::time::sleep(backoff.next_delay()).await;
            }
            Err(error) => return Err(error),
        }
    }
}

/// A change of an archive's progress.
enum Change {
    Copied(i64),
    Status(&'static str),
    /// A fresh start from a snapshot of this many members.
    Started(i64),
}

/// Writes progress only for the newest lock holder (fencing).
async fn advance(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    season: Month,
    fence: i64,
    change: Change,
    now_ms: i64,
) -> AppResult<()> {
    const SET_COPIED: &str =
        "UPDATE season_archives SET copied = $1, fence = $2, updated_at_ms = $3 \
                              WHERE season = $4 AND fence <= $2";
    const SET_STATUS: &str =
        "UPDATE season_archives SET status = $1, fence = $2, updated_at_ms = $3 \
                              WHERE season = $4 AND fence <= $2";
    const START: &str =
        "UPDATE season_archives SET total = $1, copied = 0, status = 'copying', fence = $2, \
         updated_at_ms = $3 WHERE season = $4 AND fence <= $2";
    let query = match change {
        Change::Copied(copied) => sqlx::query(SET_COPIED).bind(copied),
        Change::Status(status) => sqlx::query(SET_STATUS).bind(status),
        Change::Started(total) => sqlx::query(START).bind(total),
    };
    let updated = query
        .bind(fence)
        .bind(now_ms)
        .bind(i64::from(season.id()))
        .execute(&mut **tx)
        .await?;
    if updated.rows_affected() == 0 {
        return Err(AppError::conflict("a newer rollover holds this season"));
    }
    Ok(())
}

/// The snapshot of a part of a board, in the part's slot.
fn snapshot_of(part: &str) -> String {
    format!("{part}:snapshot")
}

/// Archives finished seasons that still have a board in Redis or an unfinished archive,
/// every `ENGAGE_ROLLOVER_CHECK_SECONDS`, in every instance (the lock picks one).
pub(crate) async fn run_periodically(ctx: Leaderboards) {
    let mut every = tokio::time::interval(ctx.rollover_check);
    loop {
        tokio::select! {
            () = ctx.infra.instance.shutdown.cancelled() => return,
            _ = every.tick() => {}
        }
        if let Err(error) = ctx.archive_finished().await {
            tracing::warn!(%error, "season rollover check failed");
        }
    }
}

impl Leaderboards {
    /// The parts of the board a rollover copies from: the live parts as they were when the
    /// copy started, each in its part's slot.
    fn snapshot_parts(&self, season: Month) -> Vec<String> {
        self.infra
            .keys
            .season_board_parts(season)
            .iter()
            .map(|part| snapshot_of(part))
            .collect()
    }

    /// Archives a finished season. `Ok(None)` when another instance is archiving it now.
    pub async fn archive_season(
        &self,
        season: Month,
        options: Options<'_>,
    ) -> AppResult<Option<Progress>> {
        if season >= self.infra.clock.current_month() {
            return Err(AppError::bad_input(format!(
                "season {} has not ended",
                season.id()
            )));
        }
        let name = format!("rollover:{}", season.id());
        lock::with_lock(&self.infra, &name, Duration::from_secs(30), |held| {
            self.roll_over(season, held, options)
        })
        .await?
        .transpose()
    }

    async fn roll_over(
        &self,
        season: Month,
        held: Held,
        options: Options<'_>,
    ) -> AppResult<Progress> {
        let mut progress = retried("start", || self.start_copy(season, held.fence)).await?;
        let mut chunks = 0;
        let mut recopies = 0;
        while !progress.done {
            while progress.copied < progress.total {
                if options.stop_after_chunks == Some(chunks) {
                    return Ok(progress);
                }
                if held.lost.is_cancelled() {
                    return Err(AppError::Unavailable("rollover lock lost".into()));
                }
                progress =
                    retried("copy", || self.copy_chunk(season, held.fence, progress)).await?;
                chunks += 1;
                if let Some(report) = options.on_progress {
                    report(progress);
                }
            }
            let verified = retried("verify", || {
                self.verify_copy(season, held.fence, progress.total)
            })
            .await?;
            match verified {
                Some(fresh) if recopies < MAX_RECOPIES => {
                    recopies += 1;
                    tracing::info!(
                        season = season.id(),
                        "late writes: copying a fresh snapshot"
                    );
                    progress = fresh;
                }
                Some(_) => {
                    return Err(AppError::Unavailable(format!(
                        "season {} keeps changing after its end",
                        season.id()
                    )))
                }
                None => {
                    let period = season.dashed();
                    retried("pay", || {
                        rewards::pay(
                            &self.points,
                            SEASON_BOARD,
                            &period,
                            options.stop_after_payments,
                        )
                    })
                    .await?
                    .then_some(())
                    // Stopped as asked (tests): not a failure to retry.
                    .ok_or_else(|| AppError::conflict("stopped while paying, as asked"))?;
                    retried("unlink", || self.unlink_season(season, held.fence)).await?;
                    progress.done = true;
                }
            }
        }
        if let Some(report) = options.on_progress {
            report(progress);
        }
        Ok(progress)
    }

    /// Records the season's size (once) and prepares its storage.
    async fn start_copy(&self, season: Month, fence: i64) -> AppResult<Progress> {
        let id = i64::from(season.id());
        if self.infra.db.backend == Backend::Postgres {
            let ddl = format!(
                "CREATE TABLE IF NOT EXISTS season_ranks_{id} PARTITION OF season_ranks FOR VALUES IN ({id})"
            );
            if let Err(error) = sqlx::query(&ddl).execute(&self.infra.db.pool).await {
                tracing::debug!(%error, "season partition not created (may exist)");
            }
        }
        let row =
            sqlx::query("SELECT total, copied, status FROM season_archives WHERE season = $1")
                .bind(id)
                .fetch_optional(&self.infra.db.pool)
                .await?;
        if let Some(row) = &row {
            let status: String = row.try_get("status")?;
            if status != COPYING {
                return Ok(Progress {
                    total: row.try_get("total")?,
                    copied: row.try_get("copied")?,
                    done: status == DONE,
                });
            }
            // The snapshot is whole while its parts hold the members it was taken with.
            let total: i64 = row.try_get("total")?;
            if self
                .sizes(&self.snapshot_parts(season))
                .await?
                .iter()
                .sum::<i64>()
                == total
            {
                return Ok(Progress {
                    total: row.try_get("total")?,
                    copied: row.try_get("copied")?,
                    done: false,
                });
            }
        }
        // No copy yet, or one whose snapshot is gone: start from a fresh snapshot.
        let total = self.take_snapshot(season).await?;
        sqlx::query(
            "INSERT INTO season_archives (season, total, copied, status, fence, updated_at_ms) \
             VALUES ($1, $2, 0, $3, $4, $5) ON CONFLICT (season) DO NOTHING",
        )
        .bind(id)
        .bind(total)
        .bind(COPYING)
        .bind(fence)
        .bind(self.infra.clock.now_ms())
        .execute(&self.infra.db.pool)
        .await?;
        self.restart_copy(season, fence, total).await
    }

    /// The member counts of sorted sets (each in its own slot).
    async fn sizes(&self, keys: &[String]) -> AppResult<Vec<i64>> {
        let mut pipe = redis::pipe();
        for key in keys {
            pipe.cmd("ZCARD").arg(key);
        }
        let mut conn = self.infra.redis.get().await?;
        Ok(pipe.query_async(&mut *conn).await?)
    }

    /// Snapshots each part of the live board (`COPY`, atomic per part; the verification
    /// catches a late write between two parts); its member count.
    async fn take_snapshot(&self, season: Month) -> AppResult<i64> {
        let mut pipe = redis::pipe();
        // The users removed from the board stay off it, even where Redis missed the removal
        // (SQL recorded it, the script did not run): the live part too, so that the check
        // for late writes compares like with like.
        for user in removals::removed_users(&self.infra, season).await? {
            pipe.cmd("ZREM")
                .arg(self.infra.keys.season_board_of(season, user))
                .arg(user)
                .ignore();
        }
        for part in self.infra.keys.season_board_parts(season) {
            // COPY leaves the destination alone when the part is empty: unlink it first.
            pipe.cmd("UNLINK").arg(snapshot_of(&part)).ignore();
            pipe.cmd("COPY")
                .arg(&part)
                .arg(snapshot_of(&part))
                .arg("REPLACE")
                .ignore();
        }
        crate::infra::recovery::write(&self.infra, &pipe).await?;
        let total: i64 = self.sizes(&self.snapshot_parts(season)).await?.iter().sum();
        if total == 0 {
            // An empty board of a season with awards is a board Redis lost: archiving it would
            // record a season without winners. `engage rebuild` brings it back first.
            let awarded = sqlx::query(&format!(
                "SELECT 1 AS found FROM points_record WHERE season = $1 AND points > 0 \
                     AND {} LIMIT 1",
                removals::NOT_REMOVED
            ))
            .bind(i64::from(season.id()))
            .fetch_optional(&self.infra.db.pool)
            .await?;
            if awarded.is_some() {
                return Err(AppError::Unavailable(format!(
                    "the board of season {} is missing from Redis: run `engage rebuild`",
                    season.id()
                )));
            }
        }
        Ok(total)
    }

    /// Forgets what was copied and starts over from the snapshot of `total` members.
    async fn restart_copy(&self, season: Month, fence: i64, total: i64) -> AppResult<Progress> {
        let mut tx = self.infra.db.pool.begin().await?;
        for table in ["season_ranks", "season_winners"] {
            sqlx::query(&format!("DELETE FROM {table} WHERE season = $1"))
                .bind(i64::from(season.id()))
                .execute(&mut *tx)
                .await?;
        }
        advance(
            &mut tx,
            season,
            fence,
            Change::Started(total),
            self.infra.clock.now_ms(),
        )
        .await?;
        tx.commit().await?;
        Ok(Progress {
            total,
            copied: 0,
            done: false,
        })
    }

    /// Copies the next chunk and advances the progress in one transaction.
    async fn copy_chunk(
        &self,
        season: Month,
        fence: i64,
        progress: Progress,
    ) -> AppResult<Progress> {
        let from = progress.copied as usize;
        let cursor = self.last_copied(season, from).await?;
        let page = parts::after(&self.infra, &self.snapshot_parts(season), cursor, CHUNK).await?;
        if page.is_empty() {
            return Err(AppError::internal(anyhow::anyhow!(
                "board of {} has {} members, expected {}",
                season.id(),
                from,
                progress.total
            )));
        }
        let id = i64::from(season.id());
        let mut tx = self.infra.db.pool.begin().await?;
        for (i, (user_id, score)) in page.iter().enumerate() {
            sqlx::query(
                "INSERT INTO season_ranks (season, rank, user_id, points) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
            )
            .bind(id)
            .bind((from + i + 1) as i64)
            .bind(user_id)
            .bind(points_of(*score))
            .execute(&mut *tx)
            .await?;
        }
        let copied = (from + page.len()) as i64;
        advance(
            &mut tx,
            season,
            fence,
            Change::Copied(copied),
            self.infra.clock.now_ms(),
        )
        .await?;
        tx.commit().await?;
        Ok(Progress { copied, ..progress })
    }

    /// The member at rank `copied` of the snapshot (the cursor the copy goes on from): its
    /// user from SQL, its score from the snapshot.
    async fn last_copied(&self, season: Month, copied: usize) -> AppResult<Option<parts::Member>> {
        if copied == 0 {
            return Ok(None);
        }
        let user: i64 =
            sqlx::query("SELECT user_id FROM season_ranks WHERE season = $1 AND rank = $2")
                .bind(i64::from(season.id()))
                .bind(copied as i64)
                .fetch_one(&self.infra.db.pool)
                .await?
                .try_get("user_id")?;
        let mut conn = self.infra.redis.get().await?;
        let score: Option<f64> = redis::cmd("ZSCORE")
            .arg(snapshot_of(&self.infra.keys.season_board_of(season, user)))
            .arg(user)
            .query_async(&mut *conn)
            .await?;
        let score = score.ok_or_else(|| {
            AppError::internal(anyhow::anyhow!(
                "season {}: user {user}, copied at rank {copied}, is not in the snapshot",
                season.id()
            ))
        })?;
        Ok(Some((user, score)))
    }

    /// Checks the copy by count (recopying from the start if it is short) and the live board
    /// against the snapshot, then records the winners. `Some(progress)` when late writes
    /// changed the board: a fresh snapshot is to be copied.
    async fn verify_copy(
        &self,
        season: Month,
        fence: i64,
        total: i64,
    ) -> AppResult<Option<Progress>> {
        let id = i64::from(season.id());
        let copied: i64 = sqlx::query("SELECT COUNT(*) AS n FROM season_ranks WHERE season = $1")
            .bind(id)
            .fetch_one(&self.infra.db.pool)
            .await?
            .try_get("n")?;
        if copied != total {
            let mut tx = self.infra.db.pool.begin().await?;
            advance(
                &mut tx,
                season,
                fence,
                Change::Copied(0),
                self.infra.clock.now_ms(),
            )
            .await?;
            tx.commit().await?;
            return Err(AppError::internal(anyhow::anyhow!(
                "season {id}: {copied} rows copied of {total}"
            )));
        }
        if !self.unchanged_since_snapshot(season).await? {
            let total = self.take_snapshot(season).await?;
            return Ok(Some(self.restart_copy(season, fence, total).await?));
        }
        let mut tx = self.infra.db.pool.begin().await?;
        sqlx::query(
            "INSERT INTO season_winners (season, rank, user_id, points) \
             SELECT season, rank, user_id, points FROM season_ranks WHERE season = $1 AND rank <= 3 \
             ON CONFLICT DO NOTHING",
        )
        .bind(id)
        .execute(&mut *tx)
        .await?;
        let ranked: Vec<(i64, i64)> =
            sqlx::query("SELECT rank, user_id FROM season_ranks WHERE season = $1 AND rank <= $2")
                .bind(id)
                .bind(rewards::deepest(&self.season_rewards))
                .fetch_all(&mut *tx)
                .await?
                .iter()
                .map(|row| Ok((row.try_get("rank")?, row.try_get("user_id")?)))
                .collect::<Result<_, sqlx::Error>>()?;
        rewards::record(
            &mut tx,
            SEASON_BOARD,
            &season.dashed(),
            &self.season_rewards,
            &ranked,
        )
        .await?;
        advance(
            &mut tx,
            season,
            fence,
            Change::Status(VERIFIED),
            self.infra.clock.now_ms(),
        )
        .await?;
        tx.commit().await?;
        Ok(None)
    }

    /// Whether the live board still equals its snapshot, member by member (read in chunks).
    async fn unchanged_since_snapshot(&self, season: Month) -> AppResult<bool> {
        for live in self.infra.keys.season_board_parts(season) {
            if !self
                .infra
                .redis
                .same_sorted_sets(&live, &snapshot_of(&live), CHUNK)
                .await?
            {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Removes the Redis board once SQL holds it, then marks the season done.
    async fn unlink_season(&self, season: Month, fence: i64) -> AppResult<()> {
        let mut pipe = redis::pipe();
        let keys = &self.infra.keys;
        for ((part, changes), removed) in keys
            .season_board_parts(season)
            .into_iter()
            .zip(keys.board_changes(season))
            .zip(keys.season_removed_parts(season))
        {
            pipe.cmd("UNLINK").arg(removed).ignore();
            pipe.cmd("UNLINK").arg(snapshot_of(&part)).ignore();
            pipe.cmd("UNLINK").arg(part).ignore();
            pipe.cmd("UNLINK").arg(changes).ignore();
        }
        crate::infra::recovery::write(&self.infra, &pipe).await?;
        let mut tx = self.infra.db.pool.begin().await?;
        advance(
            &mut tx,
            season,
            fence,
            Change::Status(DONE),
            self.infra.clock.now_ms(),
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn archive_finished(&self) -> AppResult<()> {
        let current = self.infra.clock.current_month();
        let mut due = Vec::new();
        for month in [current.previous(), current.previous().previous()] {
            if self
                .sizes(&self.infra.keys.season_board_parts(month))
                .await?
                .iter()
                .any(|size| *size > 0)
            {
                due.push(month);
            }
        }
        let unfinished = sqlx::query("SELECT season FROM season_archives WHERE status <> $1")
            .bind(DONE)
            .fetch_all(&self.infra.db.pool)
            .await?;
        for row in unfinished {
            if let Some(month) = Month::parse_id(&row.try_get::<i64, _>("season")?.to_string()) {
                due.push(month);
            }
        }
        due.sort();
        due.dedup();
        // One season that fails does not hold back the others.
        for season in due.into_iter().filter(|m| *m < current) {
            match self.archive_season(season, Options::default()).await {
                Ok(Some(progress)) => tracing::info!(
                    season = season.id(),
                    total = progress.total,
                    "season archived"
                ),
                Ok(None) => {}
                Err(error) => tracing::warn!(season = season.id(), %error, "season not archived"),
            }
        }
        Ok(())
    }
}
