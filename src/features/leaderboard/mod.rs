//! Seasonal leaderboards: a season is a calendar month in
//! `ENGAGE_TIMEZONE`; its live board is a Redis zset per points bucket written by the points
//! scripts, read as one board ([`parts`]); after it ends, [`rollover`] copies it to SQL, from
//! where past seasons are served.
//!
//! Score encoding ([`score_of`], [`points_of`]; in Lua `lua/include/leaderboard_score.lua`):
//! `score = points * 2^22 + (2^22 - 1 - seconds since the season began)`. A month has fewer
//! than 2^22 (4,194,304) seconds, so the low part orders equal points by who reached them
//! first (to the second; within one second, by user id as Redis orders equal scores).
//! Scores stay exact in a double up to 2^31 points per season.

pub(crate) mod live;
pub(crate) mod parts;
pub(crate) mod ranks;
pub(crate) mod removals;
pub(crate) mod rewards;
pub mod rollover;
pub mod settings;

use chrono::{DateTime, Utc};
use sqlx::Row;

use std::{sync::Arc, time::Duration};

use crate::infra::{
    clock::Month,
    error::{AppError, AppResult},
    Infra,
};

/// What the season leaderboards work with: the top-N readers this instance shares among
/// its subscribers, and how often it looks for a season to archive.
#[derive(Clone)]
pub struct Leaderboards {
    pub infra: Infra,
    pub boards: Arc<live::SharedBoards>,
    /// From [`LeaderboardSettings::rollover_check`].
    pub rollover_check: Duration,
    /// Through which a finished season's rewards are paid.
    pub(crate) points: crate::features::points::Points,
    /// What a finished season pays its top ranks (`ENGAGE_SEASON_REWARDS`).
    pub(crate) season_rewards: Arc<Vec<rewards::Reward>>,
}

/// The key of the season board among boards: its rewards are recorded and paid under it.
pub(crate) const SEASON_BOARD: &str = "season";

pub use settings::LeaderboardSettings;

/// The unit of points in a board score (2^22): the Lua side's `lua/include/leaderboard_score.lua`
/// writes scores with the same encoding.
pub const SCORE_TIME_UNIT: f64 = 4_194_304.0;

/// The points a board score stands for.
pub fn points_of(score: f64) -> i64 {
    (score / SCORE_TIME_UNIT).floor() as i64
}

/// The board score of `points` reached `season_seconds` after the season began.
pub fn score_of(points: i64, season_seconds: i64) -> i64 {
    let unit = SCORE_TIME_UNIT as i64;
    points * unit + (unit - 1 - season_seconds)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SeasonInfo {
    pub(crate) month: Month,
    pub(crate) begins: DateTime<Utc>,
    pub(crate) ends: DateTime<Utc>,
    pub(crate) current: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RankEntry {
    pub(crate) rank: i64,
    pub(crate) points: i64,
    pub(crate) user_id: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Board {
    pub(crate) season: Month,
    pub(crate) me: Option<RankEntry>,
    pub(crate) entries: Vec<RankEntry>,
    pub(crate) total: i64,
}

fn from_value<T: redis::FromRedisValue>(value: Option<redis::Value>) -> AppResult<T> {
    T::from_redis_value(value.unwrap_or(redis::Value::Nil))
        .map_err(|e| AppError::internal(anyhow::anyhow!("{e}")))
}

fn entry_of(row: &sqlx::any::AnyRow) -> Result<RankEntry, sqlx::Error> {
    Ok(RankEntry {
        rank: row.try_get("rank")?,
        points: row.try_get("points")?,
        user_id: row.try_get("user_id")?,
    })
}

impl Leaderboards {
    pub(crate) fn season_info(&self, month: Month) -> SeasonInfo {
        SeasonInfo {
            month,
            begins: self.infra.clock.month_begins(month),
            ends: self.infra.clock.month_begins(month.next()),
            current: month == self.infra.clock.current_month(),
        }
    }

    /// A season argument, a month up to now, or the current season.
    pub(crate) fn season_or_current(&self, month: Option<Month>) -> AppResult<Month> {
        match month {
            None => Ok(self.infra.clock.current_month()),
            Some(month) => self
                .season(month)
                .map(|season| season.month)
                .ok_or_else(|| {
                    AppError::bad_input(format!(
                        "seasonId must be a season up to now, got {}",
                        month.id()
                    ))
                }),
        }
    }

    /// A season that has begun: every month up to now has a board, empty or not.
    pub(crate) fn season(&self, month: Month) -> Option<SeasonInfo> {
        (month <= self.infra.clock.current_month()).then(|| self.season_info(month))
    }

    /// The current season, the previous one, and every season archived, newest first.
    pub(crate) async fn seasons(&self) -> AppResult<Vec<SeasonInfo>> {
        let current = self.infra.clock.current_month();
        let mut months = vec![current, current.previous()];
        let rows = sqlx::query("SELECT season FROM season_archives")
            .fetch_all(&self.infra.db.pool)
            .await?;
        for row in rows {
            if let Some(month) = Month::parse_id(&row.try_get::<i64, _>("season")?.to_string()) {
                months.push(month);
            }
        }
        months.sort_by(|a, b| b.cmp(a));
        months.dedup();
        Ok(months.into_iter().map(|m| self.season_info(m)).collect())
    }

    /// Whether a season's board is read from SQL: from its verified copy on, since its
    /// Redis board is unlinked before the rollover is marked done.
    async fn archived(&self, season: Month) -> AppResult<bool> {
        if season == self.infra.clock.current_month() {
            return Ok(false);
        }
        let row = sqlx::query("SELECT status FROM season_archives WHERE season = $1")
            .bind(i64::from(season.id()))
            .fetch_optional(&self.infra.db.pool)
            .await?;
        Ok(match row {
            Some(row) => rollover::copied(&row.try_get::<String, _>("status")?),
            None => false,
        })
    }

    /// A page of a season's board (ranks `offset + 1 ..`), its size, and the viewer's entry.
    pub(crate) async fn board(
        &self,
        season: Month,
        viewer: Option<i64>,
        first: usize,
        offset: usize,
    ) -> AppResult<Board> {
        if self.archived(season).await? {
            return self.archived_board(season, viewer, first, offset).await;
        }
        let keys = &self.infra.keys;
        let parts = keys.season_board_parts(season);
        // One round trip for the common page: the parts' sizes, their tops (when the page is
        // near the top) and the viewer's entry in their own part.
        let shallow = parts.len() == 1 || offset + first <= parts::SHALLOW;
        let mut pipe = redis::pipe();
        for part in &parts {
            pipe.cmd("ZCARD").arg(part);
        }
        if shallow {
            // One part is the board: read the page itself. Several: each part's top.
            let from = if parts.len() == 1 { offset } else { 0 };
            for part in &parts {
                pipe.cmd("ZREVRANGE")
                    .arg(part)
                    .arg(from)
                    .arg(offset + first - 1)
                    .arg("WITHSCORES");
            }
        }
        if let Some(user) = viewer {
            let own = keys.season_board_of(season, user);
            pipe.cmd("ZREVRANK")
                .arg(&own)
                .arg(user)
                .cmd("ZSCORE")
                .arg(&own)
                .arg(user);
        }
        let mut conn = self.infra.redis.get().await?;
        let replies: Vec<redis::Value> = pipe.query_async(&mut *conn).await?;
        drop(conn);
        let mut replies = replies.into_iter();
        let mut total = 0;
        for _ in &parts {
            total += from_value::<i64>(replies.next())?;
        }
        let page = if shallow {
            let mut tops = Vec::with_capacity(parts.len());
            for _ in &parts {
                tops.push(from_value::<Vec<parts::Member>>(replies.next())?);
            }
            let skip = if parts.len() == 1 { 0 } else { offset };
            parts::merge(tops, skip, first)
        } else {
            parts::deep_page(&self.infra, &parts, offset, first).await?
        };
        let me = match viewer {
            Some(user_id) => {
                let rank: Option<i64> = from_value(replies.next())?;
                let score: Option<f64> = from_value(replies.next())?;
                match rank.zip(score) {
                    Some((rank, score)) => {
                        let own = keys.season_board_of(season, user_id);
                        let elsewhere = parts::ahead_elsewhere(
                            &self.infra,
                            &parts,
                            &[(&own, (user_id, score))],
                        )
                        .await?;
                        Some(RankEntry {
                            rank: rank + elsewhere[0] + 1,
                            points: points_of(score),
                            user_id,
                        })
                    }
                    None => None,
                }
            }
            None => None,
        };
        let entries = page
            .into_iter()
            .enumerate()
            .map(|(i, (user_id, score))| RankEntry {
                rank: (offset + i + 1) as i64,
                points: points_of(score),
                user_id,
            })
            .collect();
        Ok(Board {
            season,
            me,
            entries,
            total,
        })
    }

    async fn archived_board(
        &self,
        season: Month,
        viewer: Option<i64>,
        first: usize,
        offset: usize,
    ) -> AppResult<Board> {
        let season_id = i64::from(season.id());
        let rows = sqlx::query(
            "SELECT rank, points, user_id FROM season_ranks WHERE season = $1 AND rank > $2 ORDER BY rank LIMIT $3",
        )
        .bind(season_id)
        .bind(offset as i64)
        .bind(first as i64)
        .fetch_all(&self.infra.db.pool)
        .await?;
        let entries = rows.iter().map(entry_of).collect::<Result<Vec<_>, _>>()?;
        let total: i64 = sqlx::query("SELECT COUNT(*) AS n FROM season_ranks WHERE season = $1")
            .bind(season_id)
            .fetch_one(&self.infra.db.pool)
            .await?
            .try_get("n")?;
        let me = match viewer {
            Some(user) => self.archived_entry(season, user).await?,
            None => None,
        };
        Ok(Board {
            season,
            me,
            entries,
            total,
        })
    }

    /// A user's entry in an archived season (`None`: unranked).
    async fn archived_entry(&self, season: Month, user: i64) -> AppResult<Option<RankEntry>> {
        let row = sqlx::query(
            "SELECT rank, points, user_id FROM season_ranks WHERE season = $1 AND user_id = $2",
        )
        .bind(i64::from(season.id()))
        .bind(user)
        .fetch_optional(&self.infra.db.pool)
        .await?;
        Ok(row.map(|row| entry_of(&row)).transpose()?)
    }

    /// The entries just above and below the viewer (empty when the viewer is unranked).
    pub(crate) async fn around(
        &self,
        season: Month,
        user_id: i64,
        radius: usize,
    ) -> AppResult<Vec<RankEntry>> {
        let me = self.board(season, Some(user_id), 1, 0).await?.me;
        let Some(me) = me else { return Ok(Vec::new()) };
        let offset = (me.rank - 1 - radius as i64).max(0) as usize;
        let first = (me.rank as usize - offset) + radius;
        Ok(self.board(season, None, first, offset).await?.entries)
    }

    /// Removes a user from an archived season (a cheater) and moves those below up by one;
    /// the winners follow. Whether the user was ranked. A live season's removal is
    /// `removals`'.
    pub(crate) async fn remove_archived(&self, season: Month, user: i64) -> AppResult<bool> {
        if !self.archived(season).await? {
            return Err(AppError::bad_input(format!(
                "season {} is live: its board is its points, changed through them",
                season.dashed()
            )));
        }
        let id = i64::from(season.id());
        let mut tx = self.infra.db.pool.begin().await?;
        let row = sqlx::query("SELECT rank FROM season_ranks WHERE season = $1 AND user_id = $2")
            .bind(id)
            .bind(user)
            .fetch_optional(&mut *tx)
            .await?;
        let Some(row) = row else { return Ok(false) };
        let rank: i64 = row.try_get("rank")?;
        // In two steps: ranks are unique at every row, and PostgreSQL checks row by row.
        for sql in [
            "DELETE FROM season_ranks WHERE season = $1 AND rank = $2",
            "UPDATE season_ranks SET rank = 1 - rank WHERE season = $1 AND rank > $2",
            "UPDATE season_ranks SET rank = -rank WHERE season = $1 AND rank < 0 AND $2 > 0",
            "DELETE FROM season_winners WHERE season = $1 AND $2 > 0",
            "INSERT INTO season_winners (season, rank, user_id, points) SELECT season, rank, \
             user_id, points FROM season_ranks WHERE season = $1 AND rank <= 3 AND $2 > 0",
        ] {
            sqlx::query(sql)
                .bind(id)
                .bind(rank)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(true)
    }

    /// The top three of a finished season, recorded by its rollover.
    pub(crate) async fn winners(&self, season: Month) -> AppResult<Vec<RankEntry>> {
        let rows = sqlx::query(
            "SELECT rank, points, user_id FROM season_winners WHERE season = $1 ORDER BY rank",
        )
        .bind(i64::from(season.id()))
        .fetch_all(&self.infra.db.pool)
        .await?;
        rows.iter()
            .map(entry_of)
            .collect::<Result<_, _>>()
            .map_err(Into::into)
    }
}
