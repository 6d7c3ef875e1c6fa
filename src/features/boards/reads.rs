//! The reads of a board: a page with the viewer's record, the records around the viewer,
//! and both among friends (the viewer and whom they follow).
//!
//! - **A live period** is read from its parts: each part's top, merged in the board's order
//!   (a page ends within [`MAX_DEPTH`] ranks); a rank is the user's rank in its own part
//!   plus, in each other part, the members of a better score and those of the same score
//!   whose member text comes first; the records around one are read next to its score in
//!   each part, at any depth. One pipeline per step, sent to every node at once.
//! - **A closed period** is read from SQL (`board_ranks`) once its archive is done.
//! - **Friends** are ranked among themselves: their records, read at once, sorted.
//! - **The season board** (`season`) is read through the season's own feature: its points
//!   are the score.

use std::{cmp::Reverse, collections::HashMap};

use sqlx::Row;

use super::{user_of_member, BoardDef, BoardPage, BoardRecord, Boards, SEASON_KEY};
use crate::{
    features::leaderboard::RankEntry,
    infra::{
        clock::Month,
        error::{AppError, AppResult},
    },
};

/// The deepest rank a page of a live board reaches.
pub(crate) const MAX_DEPTH: usize = 10_000;
/// The most followed users a friends' board ranks.
const MAX_FRIENDS: i64 = 1000;

/// A record's fields as read: score, subscore, updated, member, metadata.
type Fields = (
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<String>,
    Option<String>,
);

/// A record as Redis holds it.
#[derive(Debug, Clone)]
struct Live {
    score: i64,
    subscore: i64,
    updated_at_ms: i64,
    member: String,
    metadata: Option<String>,
}

impl Live {
    fn record(&self, rank: i64, user_id: i64) -> BoardRecord {
        BoardRecord {
            rank,
            user_id,
            score: self.score,
            subscore: self.subscore,
            metadata: self.metadata.clone(),
            updated_at_ms: self.updated_at_ms,
        }
    }
}

fn decode<T: redis::FromRedisValue>(value: Option<redis::Value>) -> AppResult<T> {
    T::from_redis_value(value.unwrap_or(redis::Value::Nil))
        .map_err(|e| AppError::internal(anyhow::anyhow!("{e}")))
}

/// Board order of (part score, member): the higher score, then the greater member text.
fn order_key(entry: &(String, f64)) -> (Reverse<i64>, Reverse<String>) {
    (Reverse(entry.1 as i64), Reverse(entry.0.clone()))
}

/// A period named by a client: the characters periods are written with.
pub(crate) fn check_period(period: &str) -> AppResult<()> {
    let ok = !period.is_empty()
        && period.len() <= 32
        && period
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
    if ok {
        Ok(())
    } else {
        Err(AppError::bad_input("period is not one a board has"))
    }
}

impl Boards {
    /// The season of a period of the season board (`2026-11`), up to now.
    fn season_month(&self, period: &str) -> AppResult<Month> {
        let month = Month::parse_dashed(period).ok_or_else(|| {
            AppError::bad_input("a period of the season board is a month, 2026-11")
        })?;
        self.season.season_or_current(Some(month))
    }

    /// A season board entry as a record: its points are its score. The season board keeps
    /// no time of each change: a record's `updatedAt` is its season's start.
    fn season_record(&self, month: Month, entry: RankEntry) -> BoardRecord {
        BoardRecord {
            rank: entry.rank,
            user_id: entry.user_id,
            score: entry.points,
            subscore: 0,
            metadata: None,
            updated_at_ms: self.season.season_info(month).begins.timestamp_millis(),
        }
    }

    /// Whether a period's ranks are read from SQL: from its verified copy on, since its
    /// Redis board is unlinked before the archive is marked done (see `close`).
    pub(crate) async fn archived(&self, def: &BoardDef, period: &str) -> AppResult<bool> {
        let row =
            sqlx::query("SELECT status FROM board_periods WHERE board_key = $1 AND period = $2")
                .bind(&def.key)
                .bind(period)
                .fetch_optional(&self.infra.db.pool)
                .await?;
        Ok(match row {
            Some(row) => super::close::copied(&row.try_get::<String, _>("status")?),
            None => false,
        })
    }

    /// The records of `users` on a live period, as Redis holds them.
    async fn live_records(
        &self,
        def: &BoardDef,
        period: &str,
        users: &[i64],
    ) -> AppResult<HashMap<i64, Live>> {
        if users.is_empty() {
            return Ok(HashMap::new());
        }
        let mut pipe = redis::pipe();
        for &user in users {
            pipe.cmd("HMGET")
                .arg(self.infra.keys.board_record(&def.key, period, user))
                .arg(&["score", "subscore", "updated", "member", "metadata"]);
        }
        let mut conn = self.infra.redis.get().await?;
        let replies: Vec<Fields> = pipe.query_async(&mut *conn).await?;
        drop(conn);
        Ok(users
            .iter()
            .zip(replies)
            .filter_map(|(&user, (score, subscore, updated, member, metadata))| {
                Some((
                    user,
                    Live {
                        score: score?,
                        subscore: subscore.unwrap_or(0),
                        updated_at_ms: updated.unwrap_or(0),
                        member: member?,
                        metadata,
                    },
                ))
            })
            .collect())
    }

    /// The ranks of live records, in one pipeline: each one's rank in its own part plus
    /// those ahead of it in the others.
    async fn live_ranks(
        &self,
        def: &BoardDef,
        period: &str,
        records: &[(i64, &Live)],
    ) -> AppResult<Vec<Option<i64>>> {
        if records.is_empty() {
            return Ok(Vec::new());
        }
        let keys = &self.infra.keys;
        let parts = keys.board_parts(&def.key, period);
        let mut pipe = redis::pipe();
        for (user, live) in records {
            let own = keys.board_part_of(&def.key, period, *user);
            let zscore = live.score * def.order.direction();
            pipe.cmd("ZREVRANK").arg(&own).arg(&live.member);
            for part in parts.iter().filter(|part| **part != own) {
                pipe.cmd("ZCOUNT")
                    .arg(part)
                    .arg(format!("({zscore}"))
                    .arg("+inf");
                pipe.cmd("ZRANGEBYSCORE").arg(part).arg(zscore).arg(zscore);
            }
        }
        let mut conn = self.infra.redis.get().await?;
        let replies: Vec<redis::Value> = pipe.query_async(&mut *conn).await?;
        drop(conn);
        let mut replies = replies.into_iter();
        let mut ranks = Vec::with_capacity(records.len());
        for (_, live) in records {
            let rank = decode::<Option<i64>>(replies.next())?;
            let mut ahead = rank.unwrap_or(0);
            for _ in 1..parts.len() {
                ahead += decode::<i64>(replies.next())?;
                let equal: Vec<String> = decode(replies.next())?;
                ahead += equal.iter().filter(|other| **other > live.member).count() as i64;
            }
            ranks.push(rank.map(|_| ahead + 1));
        }
        Ok(ranks)
    }

    /// The records of `users` on a period, with their ranks, in their order.
    pub(crate) async fn records_of(
        &self,
        def: &BoardDef,
        period: &str,
        users: &[i64],
    ) -> AppResult<Vec<Option<BoardRecord>>> {
        if def.key == SEASON_KEY {
            let month = self.season_month(period)?;
            let mut records = Vec::with_capacity(users.len());
            for &user in users {
                let me = self.season.board(month, Some(user), 1, 0).await?.me;
                records.push(me.map(|entry| self.season_record(month, entry)));
            }
            return Ok(records);
        }
        if self.archived(def, period).await? {
            let mut records = Vec::with_capacity(users.len());
            for &user in users {
                records.push(
                    self.archived_rows(def, period, "AND r.user_id = $3", user, 1)
                        .await?
                        .pop(),
                );
            }
            return Ok(records);
        }
        let live = self.live_records(def, period, users).await?;
        let found: Vec<(i64, &Live)> = users
            .iter()
            .filter_map(|user| live.get(user).map(|live| (*user, live)))
            .collect();
        let ranks: HashMap<i64, i64> = found
            .iter()
            .zip(self.live_ranks(def, period, &found).await?)
            .filter_map(|((user, _), rank)| rank.map(|rank| (*user, rank)))
            .collect();
        Ok(users
            .iter()
            .map(|user| Some(live.get(user)?.record(*ranks.get(user)?, *user)))
            .collect())
    }

    /// A user's record on a period, with its rank (`None`: no record).
    pub(crate) async fn record_of(
        &self,
        def: &BoardDef,
        period: &str,
        user: i64,
    ) -> AppResult<Option<BoardRecord>> {
        Ok(self.records_of(def, period, &[user]).await?.pop().flatten())
    }

    /// Archived ranks: `filter` adds a condition on `$3` (`bound`).
    async fn archived_rows(
        &self,
        def: &BoardDef,
        period: &str,
        filter: &str,
        bound: i64,
        limit: i64,
    ) -> AppResult<Vec<BoardRecord>> {
        let rows = sqlx::query(&format!(
            "SELECT r.rank, r.user_id, r.score, r.subscore, b.metadata, b.updated_at_ms \
             FROM board_ranks r LEFT JOIN board_records b ON b.board_key = r.board_key \
             AND b.period = r.period AND b.user_id = r.user_id \
             WHERE r.board_key = $1 AND r.period = $2 {filter} ORDER BY r.rank LIMIT $4"
        ))
        .bind(&def.key)
        .bind(period)
        .bind(bound)
        .bind(limit)
        .fetch_all(&self.infra.db.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(BoardRecord {
                    rank: row.try_get("rank")?,
                    user_id: row.try_get("user_id")?,
                    score: row.try_get("score")?,
                    subscore: row.try_get("subscore")?,
                    metadata: row.try_get("metadata")?,
                    updated_at_ms: row.try_get::<Option<i64>, _>("updated_at_ms")?.unwrap_or(0),
                })
            })
            .collect()
    }

    /// Records at ranks `offset + 1 ..= offset + first` of a live period, and its size.
    async fn live_page(
        &self,
        def: &BoardDef,
        period: &str,
        offset: usize,
        first: usize,
    ) -> AppResult<(Vec<BoardRecord>, i64)> {
        let parts = self.infra.keys.board_parts(&def.key, period);
        let mut pipe = redis::pipe();
        for part in &parts {
            pipe.cmd("ZCARD").arg(part);
        }
        if first > 0 {
            for part in &parts {
                pipe.cmd("ZREVRANGE")
                    .arg(part)
                    .arg(0)
                    .arg(offset + first - 1)
                    .arg("WITHSCORES");
            }
        }
        let mut conn = self.infra.redis.get().await?;
        let replies: Vec<redis::Value> = pipe.query_async(&mut *conn).await?;
        drop(conn);
        let mut replies = replies.into_iter();
        let mut total = 0;
        for _ in &parts {
            total += decode::<i64>(replies.next())?;
        }
        let mut members: Vec<(String, f64)> = Vec::new();
        if first > 0 {
            for _ in &parts {
                members.extend(decode::<Vec<(String, f64)>>(replies.next())?);
            }
        }
        members.sort_by_cached_key(order_key);
        let page: Vec<i64> = members
            .iter()
            .skip(offset)
            .take(first)
            .filter_map(|(member, _)| user_of_member(member))
            .collect();
        let mut records = self.live_records(def, period, &page).await?;
        let page = page
            .iter()
            .enumerate()
            .filter_map(|(i, user)| {
                records
                    .remove(user)
                    .map(|live| live.record((offset + i + 1) as i64, *user))
            })
            .collect();
        Ok((page, total))
    }

    /// The viewer and whom they follow.
    async fn friends_of(&self, viewer: i64) -> AppResult<Vec<i64>> {
        let rows = sqlx::query(
            "SELECT followee_id FROM follows WHERE follower_id = $1 ORDER BY followee_id LIMIT $2",
        )
        .bind(viewer)
        .bind(MAX_FRIENDS)
        .fetch_all(&self.infra.db.pool)
        .await?;
        let mut users = vec![viewer];
        for row in rows {
            let user: i64 = row.try_get("followee_id")?;
            if user != viewer {
                users.push(user);
            }
        }
        Ok(users)
    }

    /// The records of the viewer's friends on a period, ranked among themselves.
    async fn friends_board(
        &self,
        def: &BoardDef,
        period: &str,
        viewer: i64,
    ) -> AppResult<Vec<BoardRecord>> {
        let friends = self.friends_of(viewer).await?;
        if def.key == SEASON_KEY {
            let mut all: Vec<BoardRecord> = self
                .records_of(def, period, &friends)
                .await?
                .into_iter()
                .flatten()
                .collect();
            all.sort_by_key(|record| record.rank);
            for (i, record) in all.iter_mut().enumerate() {
                record.rank = i as i64 + 1;
            }
            return Ok(all);
        }
        if self.archived(def, period).await? {
            let mut all = Vec::new();
            for user in friends {
                all.extend(
                    self.archived_rows(def, period, "AND r.user_id = $3", user, 1)
                        .await?,
                );
            }
            all.sort_by_key(|record| record.rank);
            for (i, record) in all.iter_mut().enumerate() {
                record.rank = i as i64 + 1;
            }
            return Ok(all);
        }
        let direction = def.order.direction();
        let mut live: Vec<(i64, Live)> = self
            .live_records(def, period, &friends)
            .await?
            .into_iter()
            .collect();
        live.sort_by_cached_key(|(_, live)| {
            (
                Reverse(live.score * direction),
                Reverse(live.member.clone()),
            )
        });
        Ok(live
            .iter()
            .enumerate()
            .map(|(i, (user, live))| live.record(i as i64 + 1, *user))
            .collect())
    }

    /// A page of a period of a board (the current one without `period`), with the viewer's
    /// record.
    pub(crate) async fn page(
        &self,
        key: &str,
        period: Option<&str>,
        viewer: Option<i64>,
        first: usize,
        offset: usize,
        friends_only: bool,
    ) -> AppResult<BoardPage> {
        let def = self.get(key).await?;
        let period = match period {
            Some(period) => {
                check_period(period)?;
                period.to_string()
            }
            None => self.current_period(&def).await?,
        };
        if friends_only {
            let viewer = viewer
                .ok_or_else(|| AppError::unauthenticated("sign in to see a board among friends"))?;
            let all = self.friends_board(&def, &period, viewer).await?;
            let me = all.iter().find(|record| record.user_id == viewer).cloned();
            return Ok(BoardPage {
                total: all.len() as i64,
                records: all.into_iter().skip(offset).take(first).collect(),
                me,
                period,
            });
        }
        if def.key == SEASON_KEY {
            let month = self.season_month(&period)?;
            let board = self.season.board(month, viewer, first, offset).await?;
            return Ok(BoardPage {
                period,
                total: board.total,
                me: board.me.map(|entry| self.season_record(month, entry)),
                records: board
                    .entries
                    .into_iter()
                    .map(|entry| self.season_record(month, entry))
                    .collect(),
            });
        }
        let me = match viewer {
            Some(user) => self.record_of(&def, &period, user).await?,
            None => None,
        };
        if self.archived(&def, &period).await? {
            let records = self
                .archived_rows(
                    &def,
                    &period,
                    "AND r.rank > $3",
                    offset as i64,
                    first as i64,
                )
                .await?;
            let total: i64 = sqlx::query(
                "SELECT COUNT(*) AS n FROM board_ranks WHERE board_key = $1 AND period = $2",
            )
            .bind(&def.key)
            .bind(&period)
            .fetch_one(&self.infra.db.pool)
            .await?
            .try_get("n")?;
            return Ok(BoardPage {
                period,
                total,
                me,
                records,
            });
        }
        if offset + first > MAX_DEPTH {
            return Err(AppError::bad_input(format!(
                "a page of a board ends within rank {MAX_DEPTH}"
            )));
        }
        let (records, total) = self.live_page(&def, &period, offset, first).await?;
        Ok(BoardPage {
            period,
            total,
            me,
            records,
        })
    }

    /// The records just above and below the viewer on the current period (empty when the
    /// viewer has no record), the viewer's among them.
    pub(crate) async fn around(
        &self,
        key: &str,
        viewer: i64,
        radius: usize,
        friends_only: bool,
    ) -> AppResult<Vec<BoardRecord>> {
        let def = self.get(key).await?;
        let period = self.current_period(&def).await?;
        if friends_only {
            let all = self.friends_board(&def, &period, viewer).await?;
            let Some(at) = all.iter().position(|record| record.user_id == viewer) else {
                return Ok(Vec::new());
            };
            let from = at.saturating_sub(radius);
            return Ok(all
                .into_iter()
                .skip(from)
                .take(at - from + radius + 1)
                .collect());
        }
        if def.key == SEASON_KEY {
            let month = self.season_month(&period)?;
            return Ok(self
                .season
                .around(month, viewer, radius)
                .await?
                .into_iter()
                .map(|entry| self.season_record(month, entry))
                .collect());
        }
        if self.archived(&def, &period).await? {
            let Some(me) = self.record_of(&def, &period, viewer).await? else {
                return Ok(Vec::new());
            };
            let from = (me.rank - 1 - radius as i64).max(0);
            return self
                .archived_rows(
                    &def,
                    &period,
                    "AND r.rank > $3",
                    from,
                    2 * radius as i64 + 1,
                )
                .await;
        }
        let Some(live) = self
            .live_records(&def, &period, &[viewer])
            .await?
            .remove(&viewer)
        else {
            return Ok(Vec::new());
        };
        let Some(rank) = self.live_ranks(&def, &period, &[(viewer, &live)]).await?[0] else {
            return Ok(Vec::new());
        };
        self.neighbours(&def, &period, (viewer, &live, rank), radius)
            .await
    }

    /// The `radius` records above and below a live record (and the record), read from each
    /// part next to its score at any depth: per part, the nearest scores above and below and
    /// the members of its own score, merged.
    async fn neighbours(
        &self,
        def: &BoardDef,
        period: &str,
        (user, live, rank): (i64, &Live, i64),
        radius: usize,
    ) -> AppResult<Vec<BoardRecord>> {
        let parts = self.infra.keys.board_parts(&def.key, period);
        let z = live.score * def.order.direction();
        let mut pipe = redis::pipe();
        for part in &parts {
            pipe.cmd("ZRANGEBYSCORE")
                .arg(part)
                .arg(format!("({z}"))
                .arg("+inf")
                .arg("WITHSCORES")
                .arg("LIMIT")
                .arg(0)
                .arg(radius);
            pipe.cmd("ZRANGEBYSCORE")
                .arg(part)
                .arg(z)
                .arg(z)
                .arg("WITHSCORES");
            pipe.cmd("ZREVRANGEBYSCORE")
                .arg(part)
                .arg(format!("({z}"))
                .arg("-inf")
                .arg("WITHSCORES")
                .arg("LIMIT")
                .arg(0)
                .arg(radius);
        }
        let mut conn = self.infra.redis.get().await?;
        let lists: Vec<Vec<(String, f64)>> = pipe.query_async(&mut *conn).await?;
        drop(conn);
        let (mut above, mut below) = (Vec::new(), Vec::new());
        for (i, list) in lists.into_iter().enumerate() {
            match i % 3 {
                0 => above.extend(list),
                1 => {
                    for entry in list {
                        match entry.0.cmp(&live.member) {
                            std::cmp::Ordering::Greater => above.push(entry),
                            std::cmp::Ordering::Less => below.push(entry),
                            std::cmp::Ordering::Equal => {}
                        }
                    }
                }
                _ => below.extend(list),
            }
        }
        above.sort_by_cached_key(order_key);
        below.sort_by_cached_key(order_key);
        let above: Vec<_> = above.split_off(above.len().saturating_sub(radius));
        below.truncate(radius);
        let mut users: Vec<i64> = above
            .iter()
            .filter_map(|(member, _)| user_of_member(member))
            .collect();
        let first_rank = rank - users.len() as i64;
        users.push(user);
        users.extend(
            below
                .iter()
                .filter_map(|(member, _)| user_of_member(member)),
        );
        let mut records = self.live_records(def, period, &users).await?;
        Ok(users
            .iter()
            .enumerate()
            .filter_map(|(i, user)| {
                records
                    .remove(user)
                    .map(|live| live.record(first_rank + i as i64, *user))
            })
            .collect())
    }
}
