//! Closing a period: its live board copied to SQL, its rewards paid exactly once, and only
//! then its Redis board unlinked. The season board's rollover, for any board.
//!
//! - **When**: `closeBoardPeriod` ends the current period now (the next submissions go to
//!   the next period, `<name>.<n>`); a period whose reset passed, or a tournament past its
//!   end, is closed by every instance's check ([`Boards::close_due`]). A submission records
//!   its period as open with the time it is due to close (`board_open_periods`, indexed by
//!   that time), so that a check reads only the periods due, not every record's period: its
//!   cost follows what is due, not how many records the boards hold. (Rejected: a next-close
//!   time per board, which a board's several open periods, early closures among them, do
//!   not fit in one value.)
//! - **From a stable snapshot**: each part is copied (`COPY`) when the copy starts, and the
//!   chunks are read from the snapshot in board order, never from the live parts. Once the
//!   copy is verified by count, the live parts are compared with the snapshot: a late write
//!   (a submission that named the period just before it closed) takes a fresh snapshot.
//! - **One instance, fenced**: the work runs under the lock `board:<key>:<period>`; its
//!   fencing number is written with every step's progress (`board_periods.fence`), and a
//!   holder whose number is older cannot write progress.
//! - **Resumable**: each chunk and its progress commit together; rows go in with
//!   `ON CONFLICT DO NOTHING`. A restart goes on from the last commit.
//! - **Rewards exactly once**: the rewarded ranks are written to `board_rewards` in one
//!   transaction, then each is paid through the points award with the idempotency key
//!   `reward:<board>:<period>:<rank>` (Redis's marker and `points_record`'s unique key make a
//!   second payment of a rank a duplicate, whichever instance or restart makes it), then
//!   marked paid. A crash between the award and the mark pays nothing twice: the award of the
//!   next run answers the first one.

use std::{sync::Arc, time::Duration};

use sqlx::Row;

use super::{user_of_member, BoardDef, Boards, SEASON_KEY};
use crate::{
    features::leaderboard::rewards,
    infra::{
        error::{AppError, AppResult},
        lock::{self, Held},
    },
};

/// A period's archive goes through the season rollover's states, after one of its own: the
/// period closed, its copy not begun.
pub(crate) const CLOSING: &str = "closing";
pub(crate) use crate::features::leaderboard::rollover::{copied, COPYING, DONE, VERIFIED};

/// Records copied per transaction.
pub(crate) const CHUNK: usize = 1000;
/// How long the lock of a period's archive lasts without renewal.
const LEASE: Duration = Duration::from_secs(30);
/// Fresh snapshots taken for late writes before a run gives up (the next check goes on).
const MAX_RECOPIES: u32 = 3;

/// How an archive run is driven (tests): an interruption, as a crash would.
#[derive(Debug, Default, Clone, Copy)]
pub struct CloseOptions {
    /// Stop after this many chunks.
    pub stop_after_chunks: Option<usize>,
    /// Stop after this many rewards paid (their awards made, not yet marked paid).
    pub stop_after_payments: Option<usize>,
}

/// A part's member with its score.
type Member = (String, f64);

#[derive(Debug, Clone, Copy)]
struct Progress {
    total: i64,
    copied: i64,
}

/// The plain window name of a period (`2026-11-23.2` → `2026-11-23`).
fn base_of(period: &str) -> &str {
    period.split_once('.').map_or(period, |(base, _)| base)
}

fn order_key(entry: &Member) -> (std::cmp::Reverse<i64>, std::cmp::Reverse<String>) {
    (
        std::cmp::Reverse(entry.1 as i64),
        std::cmp::Reverse(entry.0.clone()),
    )
}

/// The subscore a member carries (see `member_of`).
fn subscore_of(member: &str, direction: i64) -> i64 {
    member
        .get(..10)
        .and_then(|text| text.parse::<i64>().ok())
        .map_or(0, |key| (key - 2_147_483_648) * direction)
}

impl Boards {
    /// `closeBoardPeriod`: ends the current period now, archives it and pays its rewards
    /// (another instance may be doing it: then it finishes there).
    pub(crate) async fn close_now(&self, key: &str) -> AppResult<Arc<BoardDef>> {
        let def = self.get(key).await?;
        if def.key == SEASON_KEY {
            return Err(AppError::bad_input(
                "the season board closes at the end of its month",
            ));
        }
        let period = self.current_period(&def).await?;
        let ended = def
            .ends_at_ms
            .is_some_and(|ends| self.infra.clock.now_ms() >= ends);
        self.mark_closed(&def, &period, !ended).await?;
        self.archive(&def, &period, CloseOptions::default()).await?;
        Ok(def)
    }

    /// Records a period as closed: from now on submissions go to the next one.
    async fn mark_closed(&self, def: &BoardDef, period: &str, early: bool) -> AppResult<()> {
        let now = self.infra.clock.now_ms();
        let base = if early {
            self.window_of(def.reset, self.infra.clock.now())
        } else {
            base_of(period).to_string()
        };
        // Both at once: a period is open or closed, never neither (then no check would find
        // it) nor both for long (a submission that named it just before may open it again,
        // and the next check closes it again: the insert changes nothing the second time).
        let mut tx = self.infra.db.pool.begin().await?;
        sqlx::query(
            "INSERT INTO board_periods (board_key, period, base, early, closed_at_ms, total, copied, \
             status, fence, updated_at_ms) VALUES ($1, $2, $3, $4, $5, 0, 0, $6, 0, $5) \
             ON CONFLICT (board_key, period) DO NOTHING",
        )
        .bind(&def.key)
        .bind(period)
        .bind(base)
        .bind(i64::from(early))
        .bind(now)
        .bind(CLOSING)
        .execute(&mut *tx)
        .await?;
        sqlx::query("DELETE FROM board_open_periods WHERE board_key = $1 AND period = $2")
            .bind(&def.key)
            .bind(period)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Closes what is due on every board: periods past their reset, tournaments past their
    /// end (those whose closing time passed, read by its index), and archives left
    /// unfinished (read by their status's index).
    pub async fn close_due(&self) -> AppResult<()> {
        let now = self.infra.clock.now();
        let due = sqlx::query(
            "SELECT board_key, period FROM board_open_periods WHERE closes_at_ms <= $1 \
             ORDER BY closes_at_ms LIMIT 1000",
        )
        .bind(now.timestamp_millis())
        .fetch_all(&self.infra.db.pool)
        .await?;
        for row in due {
            let (key, period): (String, String) =
                (row.try_get("board_key")?, row.try_get("period")?);
            let Some(def) = self.find(&key).await? else {
                continue;
            };
            let ended = def
                .ends_at_ms
                .is_some_and(|ends| now.timestamp_millis() >= ends);
            if ended || period != self.current_period(&def).await? {
                self.mark_closed(&def, &period, false).await?;
            } else {
                // Not over yet (a time recorded before it was known): wait for its own.
                sqlx::query(
                    "UPDATE board_open_periods SET closes_at_ms = $1 WHERE board_key = $2 \
                     AND period = $3",
                )
                .bind(self.closes_at_ms(&def, now))
                .bind(&key)
                .bind(&period)
                .execute(&self.infra.db.pool)
                .await?;
            }
        }
        let unfinished =
            sqlx::query("SELECT board_key, period FROM board_periods WHERE status IN ($1, $2, $3)")
                .bind(CLOSING)
                .bind(COPYING)
                .bind(VERIFIED)
                .fetch_all(&self.infra.db.pool)
                .await?;
        for row in unfinished {
            let (key, period): (String, String) =
                (row.try_get("board_key")?, row.try_get("period")?);
            let Some(def) = self.find(&key).await? else {
                continue;
            };
            // One period that fails does not hold back the others.
            if let Err(error) = self.archive(&def, &period, CloseOptions::default()).await {
                tracing::warn!(board = key, period, %error, "board period not archived");
            }
        }
        Ok(())
    }

    /// Archives a closed period and pays its rewards, under its lock; `false` when another
    /// holder runs it, or the run stopped as `options` asked.
    pub async fn archive_period(
        &self,
        key: &str,
        period: &str,
        options: CloseOptions,
    ) -> AppResult<bool> {
        let def = self.get(key).await?;
        self.archive(&def, period, options).await
    }

    async fn archive(
        &self,
        def: &BoardDef,
        period: &str,
        options: CloseOptions,
    ) -> AppResult<bool> {
        let name = format!("board:{}:{period}", def.key);
        lock::with_lock(&self.infra, &name, LEASE, |held| {
            self.archive_held(def, period, held, options)
        })
        .await?
        .unwrap_or(Ok(false))
    }

    async fn archive_held(
        &self,
        def: &BoardDef,
        period: &str,
        held: Held,
        options: CloseOptions,
    ) -> AppResult<bool> {
        let fence = held.fence;
        let row = sqlx::query(
            "SELECT status, total, copied FROM board_periods WHERE board_key = $1 AND period = $2",
        )
        .bind(&def.key)
        .bind(period)
        .fetch_optional(&self.infra.db.pool)
        .await?
        .ok_or_else(|| AppError::not_found(format!("period {period} is not closed")))?;
        let status: String = row.try_get("status")?;
        if status == DONE {
            return Ok(true);
        }
        let mut progress = Progress {
            total: row.try_get("total")?,
            copied: row.try_get("copied")?,
        };
        if status == CLOSING
            || (status == COPYING && self.snapshot_size(def, period).await? != progress.total)
        {
            progress = self.restart_copy(def, period, fence).await?;
        }
        if status == CLOSING || status == COPYING {
            let mut recopies = 0;
            let mut chunks = 0;
            loop {
                while progress.copied < progress.total {
                    if held.lost.is_cancelled() {
                        return Err(AppError::Unavailable("the archive's lock was lost".into()));
                    }
                    if options.stop_after_chunks.is_some_and(|stop| chunks >= stop) {
                        return Ok(false);
                    }
                    progress = self.copy_chunk(def, period, fence, progress).await?;
                    chunks += 1;
                }
                if self.unchanged_since_snapshot(def, period).await? {
                    break;
                }
                if recopies == MAX_RECOPIES {
                    return Err(AppError::Unavailable(format!(
                        "board {} period {period} keeps changing after it closed",
                        def.key
                    )));
                }
                recopies += 1;
                progress = self.restart_copy(def, period, fence).await?;
            }
            self.verify_copy(def, period, fence, progress.total).await?;
        }
        if !rewards::pay(&self.points, &def.key, period, options.stop_after_payments).await? {
            return Ok(false);
        }
        self.unlink(def, period, fence).await?;
        Ok(true)
    }

    /// Writes a step's progress, for the newest lock holder only.
    async fn advance(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        def: &BoardDef,
        period: &str,
        fence: i64,
        (set, value, status): (&str, i64, &str),
    ) -> AppResult<()> {
        let sql = format!(
            "UPDATE board_periods SET {set}, status = $2, fence = $3, updated_at_ms = $4 \
             WHERE board_key = $5 AND period = $6 AND fence <= $3"
        );
        let updated = sqlx::query(&sql)
            .bind(value)
            .bind(status)
            .bind(fence)
            .bind(self.infra.clock.now_ms())
            .bind(&def.key)
            .bind(period)
            .execute(&mut **tx)
            .await?;
        if updated.rows_affected() == 0 {
            return Err(AppError::conflict("a newer archive holds this period"));
        }
        Ok(())
    }

    fn snapshots(&self, def: &BoardDef, period: &str) -> Vec<String> {
        (0..self.infra.keys.points_buckets())
            .map(|bucket| self.infra.keys.board_snapshot(&def.key, period, bucket))
            .collect()
    }

    async fn sizes(&self, keys: &[String]) -> AppResult<i64> {
        let mut pipe = redis::pipe();
        for key in keys {
            pipe.cmd("ZCARD").arg(key);
        }
        let mut conn = self.infra.redis.get().await?;
        let sizes: Vec<i64> = pipe.query_async(&mut *conn).await?;
        Ok(sizes.iter().sum())
    }

    async fn snapshot_size(&self, def: &BoardDef, period: &str) -> AppResult<i64> {
        self.sizes(&self.snapshots(def, period)).await
    }

    /// Takes a fresh snapshot and forgets what was copied.
    async fn restart_copy(&self, def: &BoardDef, period: &str, fence: i64) -> AppResult<Progress> {
        let mut pipe = redis::pipe();
        for (part, snapshot) in self
            .infra
            .keys
            .board_parts(&def.key, period)
            .into_iter()
            .zip(self.snapshots(def, period))
        {
            // COPY leaves the destination alone when the part is empty: unlink it first.
            pipe.cmd("UNLINK").arg(&snapshot).ignore();
            pipe.cmd("COPY")
                .arg(part)
                .arg(snapshot)
                .arg("REPLACE")
                .ignore();
        }
        crate::infra::recovery::write(&self.infra, &pipe).await?;
        let total = self.snapshot_size(def, period).await?;
        let mut tx = self.infra.db.pool.begin().await?;
        sqlx::query("DELETE FROM board_ranks WHERE board_key = $1 AND period = $2")
            .bind(&def.key)
            .bind(period)
            .execute(&mut *tx)
            .await?;
        self.advance(
            &mut tx,
            def,
            period,
            fence,
            ("total = $1, copied = 0", total, COPYING),
        )
        .await?;
        tx.commit().await?;
        Ok(Progress { total, copied: 0 })
    }

    /// The next `count` members of the snapshot after `cursor`, in board order.
    async fn after(
        &self,
        def: &BoardDef,
        period: &str,
        cursor: Option<Member>,
        count: usize,
    ) -> AppResult<Vec<Member>> {
        let snapshots = self.snapshots(def, period);
        let mut pipe = redis::pipe();
        for part in &snapshots {
            match &cursor {
                None => {
                    pipe.cmd("ZREVRANGE")
                        .arg(part)
                        .arg(0)
                        .arg(count - 1)
                        .arg("WITHSCORES");
                }
                Some((_, score)) => {
                    let score = *score as i64;
                    pipe.cmd("ZREVRANGEBYSCORE")
                        .arg(part)
                        .arg(format!("({score}"))
                        .arg("-inf")
                        .arg("WITHSCORES")
                        .arg("LIMIT")
                        .arg(0)
                        .arg(count);
                    pipe.cmd("ZRANGEBYSCORE")
                        .arg(part)
                        .arg(score)
                        .arg(score)
                        .arg("WITHSCORES");
                }
            }
        }
        let mut conn = self.infra.redis.get().await?;
        let lists: Vec<Vec<Member>> = pipe.query_async(&mut *conn).await?;
        drop(conn);
        let mut all: Vec<Member> = Vec::new();
        for (i, list) in lists.into_iter().enumerate() {
            match &cursor {
                // Every other list holds the cursor's equals: those after it in board order.
                Some((member, _)) if i % 2 == 1 => {
                    all.extend(list.into_iter().filter(|(other, _)| other < member))
                }
                _ => all.extend(list),
            }
        }
        all.sort_by_cached_key(order_key);
        all.truncate(count);
        Ok(all)
    }

    /// Copies the next chunk and advances the progress in one transaction.
    async fn copy_chunk(
        &self,
        def: &BoardDef,
        period: &str,
        fence: i64,
        progress: Progress,
    ) -> AppResult<Progress> {
        let cursor = if progress.copied == 0 {
            None
        } else {
            let row = sqlx::query(
                "SELECT member, score FROM board_ranks WHERE board_key = $1 AND period = $2 AND rank = $3",
            )
            .bind(&def.key)
            .bind(period)
            .bind(progress.copied)
            .fetch_one(&self.infra.db.pool)
            .await?;
            let score: i64 = row.try_get("score")?;
            Some((
                row.try_get::<String, _>("member")?,
                (score * def.order.direction()) as f64,
            ))
        };
        let page = self.after(def, period, cursor, CHUNK).await?;
        if page.is_empty() {
            return Err(AppError::internal(anyhow::anyhow!(
                "board {} period {period} has {} records, expected {}",
                def.key,
                progress.copied,
                progress.total
            )));
        }
        let direction = def.order.direction();
        let mut tx = self.infra.db.pool.begin().await?;
        for (i, (member, score)) in page.iter().enumerate() {
            let user = user_of_member(member).ok_or_else(|| {
                AppError::internal(anyhow::anyhow!("a board member without its user: {member}"))
            })?;
            sqlx::query(
                "INSERT INTO board_ranks (board_key, period, rank, user_id, score, subscore, member) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING",
            )
            .bind(&def.key)
            .bind(period)
            .bind(progress.copied + i as i64 + 1)
            .bind(user)
            .bind(*score as i64 * direction)
            .bind(subscore_of(member, direction))
            .bind(member)
            .execute(&mut *tx)
            .await?;
        }
        let copied = progress.copied + page.len() as i64;
        self.advance(
            &mut tx,
            def,
            period,
            fence,
            ("copied = $1", copied, COPYING),
        )
        .await?;
        tx.commit().await?;
        Ok(Progress { copied, ..progress })
    }

    /// Whether every live part still equals its snapshot.
    async fn unchanged_since_snapshot(&self, def: &BoardDef, period: &str) -> AppResult<bool> {
        let parts = self.infra.keys.board_parts(&def.key, period);
        for (live, snapshot) in parts.iter().zip(self.snapshots(def, period)) {
            if !self
                .infra
                .redis
                .same_sorted_sets(live, &snapshot, CHUNK)
                .await?
            {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Checks the copy by count, then records the rewarded ranks with the verification.
    async fn verify_copy(
        &self,
        def: &BoardDef,
        period: &str,
        fence: i64,
        total: i64,
    ) -> AppResult<()> {
        let copied: i64 = sqlx::query(
            "SELECT COUNT(*) AS n FROM board_ranks WHERE board_key = $1 AND period = $2",
        )
        .bind(&def.key)
        .bind(period)
        .fetch_one(&self.infra.db.pool)
        .await?
        .try_get("n")?;
        let mut tx = self.infra.db.pool.begin().await?;
        if copied != total {
            self.advance(&mut tx, def, period, fence, ("copied = $1", 0, COPYING))
                .await?;
            tx.commit().await?;
            return Err(AppError::internal(anyhow::anyhow!(
                "board {} period {period}: {copied} rows copied of {total}",
                def.key
            )));
        }
        let deepest = rewards::deepest(&def.rewards);
        let ranked: Vec<(i64, i64)> = sqlx::query(
            "SELECT rank, user_id FROM board_ranks WHERE board_key = $1 AND period = $2 AND rank <= $3",
        )
        .bind(&def.key)
        .bind(period)
        .bind(deepest)
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .map(|row| Ok((row.try_get("rank")?, row.try_get("user_id")?)))
        .collect::<Result<_, sqlx::Error>>()?;
        rewards::record(&mut tx, &def.key, period, &def.rewards, &ranked).await?;
        self.advance(
            &mut tx,
            def,
            period,
            fence,
            ("copied = $1", total, VERIFIED),
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Removes the period's Redis board once SQL holds it, then marks it done.
    async fn unlink(&self, def: &BoardDef, period: &str, fence: i64) -> AppResult<()> {
        let keys = &self.infra.keys;
        let users: Vec<i64> =
            sqlx::query("SELECT user_id FROM board_ranks WHERE board_key = $1 AND period = $2")
                .bind(&def.key)
                .bind(period)
                .fetch_all(&self.infra.db.pool)
                .await?
                .iter()
                .map(|row| row.try_get("user_id"))
                .collect::<Result<_, _>>()?;
        for chunk in users.chunks(CHUNK) {
            let mut pipe = redis::pipe();
            for &user in chunk {
                pipe.cmd("UNLINK")
                    .arg(keys.board_record(&def.key, period, user))
                    .ignore();
            }
            crate::infra::recovery::write(&self.infra, &pipe).await?;
        }
        let mut pipe = redis::pipe();
        for bucket in 0..keys.points_buckets() {
            pipe.cmd("UNLINK")
                .arg(keys.board_part(&def.key, period, bucket))
                .ignore();
            pipe.cmd("UNLINK")
                .arg(keys.board_snapshot(&def.key, period, bucket))
                .ignore();
            pipe.cmd("UNLINK")
                .arg(keys.board_part_changes(&def.key, period, bucket))
                .ignore();
        }
        crate::infra::recovery::write(&self.infra, &pipe).await?;
        let mut tx = self.infra.db.pool.begin().await?;
        self.advance(
            &mut tx,
            def,
            period,
            fence,
            ("copied = copied + $1", 0, DONE),
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }
}

/// A reward paid to a user: for which board, period and rank, and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Granted {
    pub(crate) board: String,
    pub(crate) period: String,
    pub(crate) rank: i64,
    pub(crate) points: i64,
    pub(crate) voucher_id: Option<i64>,
    pub(crate) paid_at_ms: i64,
}

/// The most rewards `myBoardRewards` answers.
pub(crate) const MAX_GRANTS: i64 = 100;

impl Boards {
    /// The rewards paid to a user, newest first: points (also in `pointsHistory`) and
    /// vouchers, granted without an order.
    pub(crate) async fn rewards_of(&self, user: i64) -> AppResult<Vec<Granted>> {
        let rows = sqlx::query(
            "SELECT board_key, period, rank, points, voucher_id, paid_at_ms FROM board_rewards \
             WHERE user_id = $1 AND paid_at_ms IS NOT NULL ORDER BY paid_at_ms DESC, rank LIMIT $2",
        )
        .bind(user)
        .bind(MAX_GRANTS)
        .fetch_all(&self.infra.db.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(Granted {
                    board: row.try_get("board_key")?,
                    period: row.try_get("period")?,
                    rank: row.try_get("rank")?,
                    points: row.try_get("points")?,
                    voucher_id: row.try_get("voucher_id")?,
                    paid_at_ms: row.try_get("paid_at_ms")?,
                })
            })
            .collect()
    }
}

/// Closes what is due ([`Boards::close_due`]) every `ENGAGE_ROLLOVER_CHECK_SECONDS`, in every
/// instance (each period's lock picks one).
pub(crate) async fn run_periodically(boards: Boards) {
    let mut every = tokio::time::interval(boards.close_check);
    loop {
        tokio::select! {
            () = boards.infra.instance.shutdown.cancelled() => return,
            _ = every.tick() => {}
        }
        if let Err(error) = boards.close_due().await {
            tracing::warn!(%error, "board close check failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_suffixed_period_belongs_to_its_window() {
        assert_eq!(base_of("2026-11-23.2"), "2026-11-23");
        assert_eq!(base_of("2026-W48"), "2026-W48");
        assert_eq!(subscore_of(&super::super::member_of(1, -7, 5, 3), 1), -7);
        assert_eq!(subscore_of(&super::super::member_of(-1, 9, 5, 3), -1), 9);
    }
}
