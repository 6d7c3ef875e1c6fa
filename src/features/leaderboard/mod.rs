//! Seasonal leaderboards (seed 003, seed 004): a season is a calendar month in
//! `ENGAGE_TIMEZONE`; its live board is a Redis zset per points bucket written by the points
//! scripts, read as one board ([`parts`]); after it ends, [`rollover`] copies it to SQL, from
//! where past seasons are served.
//!
//! Score encoding ([`score_of`], [`points_of`]; in Lua `lua/include/leaderboard_score.lua`):
//! `score = points * 2^22 + (2^22 - 1 - seconds since the season began)`. A month has fewer
//! than 2^22 (4,194,304) seconds, so the low part orders equal points by who reached them
//! first (to the second; within one second, by user id as Redis orders equal scores).
//! Scores stay exact in a double up to 2^31 points per season.

pub mod live;
pub mod parts;
pub mod rollover;

use chrono::{DateTime, Utc};
use sqlx::Row;

use std::{collections::HashMap, sync::Arc, time::Duration};

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
    pub rollover_check: Duration,
}

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
pub struct SeasonInfo {
    pub month: Month,
    pub begins: DateTime<Utc>,
    pub ends: DateTime<Utc>,
    pub current: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RankEntry {
    pub rank: i64,
    pub points: i64,
    pub user_id: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Board {
    pub season: Month,
    pub me: Option<RankEntry>,
    pub entries: Vec<RankEntry>,
    pub total: i64,
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
    pub fn season_info(&self, month: Month) -> SeasonInfo {
        SeasonInfo {
            month,
            begins: self.infra.clock.month_begins(month),
            ends: self.infra.clock.month_begins(month.next()),
            current: month == self.infra.clock.current_month(),
        }
    }

    /// A season id argument (`YYYYMM`), or the current season.
    pub fn parse_season(&self, id: Option<&str>) -> AppResult<Month> {
        match id {
            None => Ok(self.infra.clock.current_month()),
            Some(id) => Month::parse_id(id.trim())
                .filter(|m| *m <= self.infra.clock.current_month())
                .ok_or_else(|| {
                    AppError::bad_input(format!(
                        "seasonId must be a YYYYMM month up to now, got {id:?}"
                    ))
                }),
        }
    }

    /// The current season, the previous one, and every season archived, newest first.
    pub async fn seasons(&self) -> AppResult<Vec<SeasonInfo>> {
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

    /// Whether a season's board now lives in SQL (its rollover finished).
    async fn archived(&self, season: Month) -> AppResult<bool> {
        if season == self.infra.clock.current_month() {
            return Ok(false);
        }
        let row = sqlx::query("SELECT status FROM season_archives WHERE season = $1")
            .bind(i64::from(season.id()))
            .fetch_optional(&self.infra.db.pool)
            .await?;
        Ok(match row {
            Some(row) => row.try_get::<String, _>("status")? == rollover::DONE,
            None => false,
        })
    }

    /// A page of a season's board (ranks `offset + 1 ..`), its size, and the viewer's entry.
    pub async fn board(
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

    /// The entries of distinct `users` in a season's board (`None`: unranked), in their
    /// order, read together: the scores (a `ZMSCORE` per part) and ranks in their own parts
    /// first, then the ranks elsewhere ([`parts::ahead_elsewhere`]), in pipelines of at
    /// most [`parts::PIPELINE_COMMANDS`] commands. `myRankChanged` reads every viewer of a
    /// board so after each change: a few round trips, however many viewers.
    pub async fn entries_of(
        &self,
        season: Month,
        users: &[i64],
    ) -> AppResult<Vec<Option<RankEntry>>> {
        if self.archived(season).await? {
            let mut entries = Vec::with_capacity(users.len());
            for &user in users {
                entries.push(self.archived_entry(season, user).await?);
            }
            return Ok(entries);
        }
        let keys = &self.infra.keys;
        let parts = keys.season_board_parts(season);
        // (own part, user, rank within it, score) of each ranked user.
        let mut ranked: Vec<(String, i64, i64, f64)> = Vec::new();
        // Each round trip: a ZMSCORE per part for the scores, a ZREVRANK per user.
        for chunk in users.chunks(parts::PIPELINE_COMMANDS.saturating_sub(parts.len()).max(1)) {
            let mut by_part: Vec<(String, Vec<i64>)> = Vec::new();
            let mut part_at: HashMap<String, usize> = HashMap::new();
            for &user in chunk {
                let own = keys.season_board_of(season, user);
                let at = *part_at.entry(own.clone()).or_insert_with(|| {
                    by_part.push((own, Vec::new()));
                    by_part.len() - 1
                });
                by_part[at].1.push(user);
            }
            let mut pipe = redis::pipe();
            for (part, members) in &by_part {
                pipe.cmd("ZMSCORE").arg(part).arg(members);
            }
            for (part, members) in &by_part {
                for user in members {
                    pipe.cmd("ZREVRANK").arg(part).arg(user);
                }
            }
            let replies: Vec<redis::Value> = {
                let mut conn = self.infra.redis.get().await?;
                pipe.query_async(&mut *conn).await?
            };
            let mut replies = replies.into_iter();
            let mut scores = Vec::with_capacity(chunk.len());
            for (_, members) in &by_part {
                let part_scores: Vec<Option<f64>> = from_value(replies.next())?;
                if part_scores.len() != members.len() {
                    return Err(AppError::internal(anyhow::anyhow!(
                        "ZMSCORE answered {} scores for {} members",
                        part_scores.len(),
                        members.len()
                    )));
                }
                scores.extend(part_scores);
            }
            let mut scores = scores.into_iter();
            for (part, members) in &by_part {
                for &user in members {
                    let rank: Option<i64> = from_value(replies.next())?;
                    if let (Some(rank), Some(Some(score))) = (rank, scores.next()) {
                        ranked.push((part.clone(), user, rank, score));
                    }
                }
            }
        }
        let members: Vec<(&str, parts::Member)> = ranked
            .iter()
            .map(|(own, user, _, score)| (own.as_str(), (*user, *score)))
            .collect();
        let elsewhere = parts::ahead_elsewhere(&self.infra, &parts, &members).await?;
        let index: HashMap<i64, usize> = users
            .iter()
            .enumerate()
            .map(|(index, user)| (*user, index))
            .collect();
        let mut entries = vec![None; users.len()];
        for ((_, user_id, rank, score), elsewhere) in ranked.iter().zip(elsewhere) {
            entries[index[user_id]] = Some(RankEntry {
                rank: rank + elsewhere + 1,
                points: points_of(*score),
                user_id: *user_id,
            });
        }
        Ok(entries)
    }

    /// The entries just above and below the viewer (empty when the viewer is unranked).
    pub async fn around(
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

    /// The top three of a finished season, recorded by its rollover.
    pub async fn winners(&self, season: Month) -> AppResult<Vec<RankEntry>> {
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
