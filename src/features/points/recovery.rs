//! Season boards, daily totals and balances, from `points_record`; make-up counters, from
//! `sign_ins`.
//!
//! A board is the sum of a season's archived awards per user, ranked as the award script
//! ranks: `points * 2^22 + (2^22 - 1 - seconds from the season's start to the user's last
//! award)`. A rebuild must not lose an award made while it runs, so it works in two steps:
//!
//! 1. Without holding anything back, it writes each board into a side key from the awards
//!    archived up to a snapshot position of the points stream (SQL rows carry their stream
//!    position, `event_order`). This is the long part, and it resumes where it stopped.
//! 2. Then it holds points writes back (`{points:<bucket>}:rebuilding` in every bucket: the
//!    award, sign-in and make-up scripts answer HELD and the server tries again for up to
//!    10 s), waits for the archive to catch up with the streams, adds the users awarded
//!    since the snapshot, swaps the side keys in, writes today's totals and this month's
//!    make-up counters, and lets go. That takes as long as the archive needs for the last
//!    moments' awards.
//!
//! Balances go the same way: each user's balance up to the snapshot into the side key of
//! their bucket's balances first, then under the hold the users with records since, and
//! each bucket's side key swapped in. A balance is earned (the positive rows), spent (the
//! rows of kind SPEND) and revoked (the other negative rows).

use std::{collections::HashMap, time::Duration};

use sqlx::Row;

use super::{
    balance::{balance_fields, Balance},
    PointsType, DAILY_TTL_SECONDS,
};
use crate::{
    features::{
        leaderboard::{points_of, removals, rollover::DONE, score_of},
        points::Points,
        signin::MAKE_UP_COUNTER_TTL_SECONDS,
    },
    infra::{
        clock::{day_number, Month},
        db::id_list,
        error::{AppError, AppResult},
        recovery::{next_ids, within, Rebuild, Report},
        streams,
    },
};

/// Board members read and written per round trip.
const CHUNK: usize = 5000;
/// What a rebuild publishes on a board's channels once it swapped the board in.
pub(crate) const REBUILT: &str = "rebuilt";
/// How long the hold lasts at most if the rebuild dies holding it.
const HOLD_SECONDS: u64 = 60;
/// How long the rebuild waits for the archive to catch up with the stream.
const CATCH_UP: Duration = Duration::from_secs(30);

/// One board member as SQL has it.
struct Standing {
    user_id: i64,
    points: i64,
    last_award_ms: i64,
}

impl Standing {
    /// The board score the award script would have written.
    fn score(&self, ctx: &Points, season: Month) -> i64 {
        let begins = ctx.infra.clock.month_begins(season).timestamp_millis();
        let seconds = ((self.last_award_ms - begins) / 1000).max(0);
        score_of(self.points, seconds)
    }
}

fn standings_of(rows: &[sqlx::any::AnyRow]) -> AppResult<Vec<Standing>> {
    let mut standings = Vec::with_capacity(rows.len());
    for row in rows {
        standings.push(Standing {
            user_id: row.try_get("user_id")?,
            points: row.try_get("points")?,
            last_award_ms: row.try_get("last_award_ms")?,
        });
    }
    Ok(standings)
}

/// A season's standings: spends are on no board (revokes are, taking off what they revoke).
const STANDING: &str = "SELECT user_id, CAST(SUM(points) AS BIGINT) AS points, \
     MAX(CASE WHEN points > 0 THEN awarded_at_ms ELSE 0 END) AS last_award_ms \
     FROM points_record";
/// Leaves spends out of a season's standings.
const NO_SPENDS: &str = "kind <> 'SPEND'";
/// Leaves the users removed from a season's board out of its standings.
const ON_BOARD: &str = removals::NOT_REMOVED;

/// Users' balances, grouped by user.
const BALANCES: &str = "SELECT user_id, \
     CAST(SUM(CASE WHEN points > 0 THEN points ELSE 0 END) AS BIGINT) AS earned, \
     CAST(SUM(CASE WHEN kind = 'SPEND' THEN -points ELSE 0 END) AS BIGINT) AS spent, \
     CAST(SUM(CASE WHEN points < 0 AND kind <> 'SPEND' THEN -points ELSE 0 END) AS BIGINT) \
     AS revoked FROM points_record";

fn balances_of(rows: &[sqlx::any::AnyRow]) -> AppResult<Vec<(i64, Balance)>> {
    let mut balances = Vec::with_capacity(rows.len());
    for row in rows {
        balances.push((
            row.try_get("user_id")?,
            Balance {
                earned: row.try_get("earned")?,
                spent: row.try_get("spent")?,
                revoked: row.try_get("revoked")?,
            },
        ));
    }
    Ok(balances)
}

impl Points {
    /// Seasons whose board lives in Redis: those with awards that the rollover has not moved to
    /// SQL yet.
    async fn live_seasons(&self) -> AppResult<Vec<Month>> {
        let rows = sqlx::query(
            "SELECT DISTINCT season FROM points_record WHERE season NOT IN \
             (SELECT season FROM season_archives WHERE status = $1) ORDER BY season",
        )
        .bind(DONE)
        .fetch_all(&self.infra.db.pool)
        .await?;
        let mut seasons = Vec::with_capacity(rows.len());
        for row in &rows {
            let id: i64 = row.try_get("season")?;
            seasons.extend(Month::parse_id(&id.to_string()));
        }
        Ok(seasons)
    }

    /// The next chunk of a season's standings: users above `after`, awards up to `through`;
    /// with the last user the chunk covered (`None` when no user is left). The users come
    /// first, from the index alone, so that the sums read a bounded range of it.
    async fn standings(
        &self,
        season: Month,
        after: i64,
        through: i64,
    ) -> AppResult<Option<(Vec<Standing>, i64)>> {
        let season = i64::from(season.id());
        let users = next_ids(
            &self.infra,
            "points_record",
            "user_id",
            &format!("season = {season}"),
            after,
            CHUNK,
        )
        .await?;
        let Some(&last) = users.last() else {
            return Ok(None);
        };
        let rows = sqlx::query(&format!(
            "{STANDING} WHERE season = $1 AND user_id > $2 AND user_id <= $3 AND event_order <= $4 \
             AND {NO_SPENDS} AND {ON_BOARD} GROUP BY user_id HAVING SUM(points) > 0 ORDER BY user_id"
        ))
        .bind(season)
        .bind(after)
        .bind(last)
        .bind(through)
        .fetch_all(&self.infra.db.pool)
        .await?;
        Ok(Some((standings_of(&rows)?, last)))
    }

    /// Each live season's board holds every user with points, with SQL's points.
    pub(crate) async fn verify_boards(&self) -> AppResult<Report> {
        let mut report = Report::new("season boards");
        for season in self.live_seasons().await? {
            let mut after = 0;
            let mut members = 0u64;
            loop {
                let Some((chunk, last)) = self.standings(season, after, i64::MAX).await? else {
                    break;
                };
                if chunk.is_empty() {
                    after = last;
                    continue;
                }
                let mut pipe = redis::pipe();
                for standing in &chunk {
                    pipe.cmd("ZSCORE")
                        .arg(self.infra.keys.season_board_of(season, standing.user_id))
                        .arg(standing.user_id);
                }
                let mut conn = self.infra.redis.get().await?;
                let scores: Vec<Option<f64>> = pipe.query_async(&mut *conn).await?;
                drop(conn);
                for (standing, score) in chunk.iter().zip(scores) {
                    let redis = score.map(points_of);
                    report.check(redis == Some(standing.points), || {
                        format!(
                            "season {}: user {} has {} points in SQL, {redis:?} on the board",
                            season.id(),
                            standing.user_id,
                            standing.points
                        )
                    });
                }
                members += chunk.len() as u64;
                after = last;
            }
            for user in removals::removed_users(&self.infra, season).await? {
                let mut conn = self.infra.redis.get().await?;
                let held: bool = redis::cmd("SISMEMBER")
                    .arg(self.infra.keys.season_removed_of(season, user))
                    .arg(user)
                    .query_async(&mut *conn)
                    .await?;
                report.check(held, || {
                    format!(
                        "season {}: user {user} removed in SQL, not in Redis",
                        season.id()
                    )
                });
            }
            let mut pipe = redis::pipe();
            for part in self.infra.keys.season_board_parts(season) {
                pipe.cmd("ZCARD").arg(part);
            }
            let mut conn = self.infra.redis.get().await?;
            let sizes: Vec<u64> = pipe.query_async(&mut *conn).await?;
            let on_board: u64 = sizes.into_iter().sum();
            report.check(on_board == members, || {
                format!(
                    "season {}: {on_board} members on the board, {members} in SQL",
                    season.id()
                )
            });
        }
        Ok(report)
    }

    /// Each user's totals per type of the user's today (in the user's zone, as SQL records
    /// it), in SQL: the key they go in, and the totals.
    async fn todays_totals(&self) -> AppResult<HashMap<i64, (String, Vec<(String, i64)>)>> {
        let now = self.infra.clock.now();
        // Every date that is today in some zone now (UTC-12 to UTC+14); each user's own is
        // picked below.
        let earliest = (now - chrono::Duration::hours(12)).date_naive();
        let latest = (now + chrono::Duration::hours(14)).date_naive();
        // What was awarded, revoked or not: a revoke gives no allowance back.
        let rows = sqlx::query(
            "SELECT user_id, award_date, kind, CAST(SUM(points) AS BIGINT) AS points \
             FROM points_record WHERE award_date BETWEEN $1 AND $2 AND points > 0 \
             GROUP BY user_id, award_date, kind",
        )
        .bind(day_number(earliest))
        .bind(day_number(latest))
        .fetch_all(&self.infra.db.pool)
        .await?;
        let mut users: Vec<i64> = rows
            .iter()
            .map(|row| row.try_get("user_id"))
            .collect::<Result<_, _>>()?;
        users.sort_unstable();
        users.dedup();
        let zones = self
            .zones
            .recorded_zones(&within("user_id", &users))
            .await?;
        let mut totals: HashMap<i64, (String, Vec<(String, i64)>)> = HashMap::new();
        for row in &rows {
            let user: i64 = row.try_get("user_id")?;
            let today = self.user_day(zones.get(&user), now);
            if row.try_get::<i64, _>("award_date")? != day_number(today) {
                continue;
            }
            totals
                .entry(user)
                .or_insert_with(|| (self.infra.keys.points_today(user, today), Vec::new()))
                .1
                .push((row.try_get("kind")?, row.try_get("points")?));
        }
        Ok(totals)
    }

    /// Today's totals per user and type (what the daily caps count) agree with SQL.
    pub(crate) async fn verify_daily(&self) -> AppResult<Report> {
        let mut report = Report::new("daily caps");
        let totals = self.todays_totals().await?;
        for (user, (key, kinds)) in &totals {
            let mut conn = self.infra.redis.get().await?;
            let redis: HashMap<String, i64> = redis::cmd("HGETALL")
                .arg(key)
                .query_async(&mut *conn)
                .await?;
            drop(conn);
            for (kind, points) in kinds {
                let held = redis.get(kind).copied().unwrap_or(0);
                report.check(held == *points, || {
                    format!("user {user}: {kind} today {points} in SQL, {held} in Redis")
                });
            }
        }
        Ok(report)
    }

    /// The side key a part of a board is rebuilt into before it is swapped in.
    fn side_key(part: &str) -> String {
        format!("{part}:rebuild")
    }

    /// Rebuilds every live season's board, then today's totals and this month's make-up
    /// counters (see the module's comment for what is held back, and when).
    pub(crate) async fn rebuild(&self, run: &Rebuild<'_>) -> AppResult<()> {
        let seasons = self.live_seasons().await?;
        let members: i64 = if seasons.is_empty() {
            0
        } else {
            sqlx::query(&format!(
                "SELECT COUNT(DISTINCT user_id) AS n FROM points_record WHERE season IN ({})",
                id_list(
                    &seasons
                        .iter()
                        .map(|s| i64::from(s.id()))
                        .collect::<Vec<_>>()
                )
            ))
            .fetch_one(&self.infra.db.pool)
            .await?
            .try_get("n")?
        };
        let holders: i64 = sqlx::query("SELECT COUNT(DISTINCT user_id) AS n FROM points_record")
            .fetch_one(&self.infra.db.pool)
            .await?
            .try_get("n")?;
        run.expect((members.max(0) + holders.max(0)) as u64);

        // 1. Up to a snapshot, without holding anything back.
        let snapshot = match run.recall("snapshot").await? {
            Some(snapshot) => snapshot,
            None => {
                let position = streams::position_now(&self.infra).await?;
                self.catch_up(position).await?;
                let snapshot = streams::event_order(position);
                run.remember("snapshot", snapshot).await?;
                snapshot
            }
        };
        for season in &seasons {
            self.copy_board(run, *season, snapshot).await?;
        }
        self.copy_balances(run, snapshot).await?;

        // 2. The last moments, holding writes back.
        self.hold(true).await?;
        let finished = self.finish(&seasons, snapshot).await;
        self.hold(false).await?;
        finished
    }

    /// Writes a season's standings up to the snapshot into its side key, resumably.
    async fn copy_board(&self, run: &Rebuild<'_>, season: Month, snapshot: i64) -> AppResult<()> {
        let part = season.id().to_string();
        let mut after = run.recall(&part).await?.unwrap_or(0);
        loop {
            let Some((chunk, last)) = self.standings(season, after, snapshot).await? else {
                return Ok(());
            };
            if !chunk.is_empty() {
                crate::infra::recovery::write(&self.infra, &self.side_adds(season, &chunk)).await?;
            }
            run.remember(&part, last).await?;
            run.advance(chunk.len() as u64);
            after = last;
        }
    }

    /// Adds standings to the side keys of their parts of a season's board.
    fn side_adds(&self, season: Month, standings: &[Standing]) -> redis::Pipeline {
        let mut pipe = redis::pipe();
        for standing in standings {
            pipe.cmd("ZADD")
                .arg(Self::side_key(
                    &self.infra.keys.season_board_of(season, standing.user_id),
                ))
                .arg(standing.score(self, season))
                .arg(standing.user_id)
                .ignore();
        }
        pipe
    }

    /// Writes a season's removed users back from SQL, and takes any the copy before the hold
    /// found off the boards about to be swapped in (a removal made while it ran).
    async fn removed_back(&self, pipe: &mut redis::Pipeline, season: Month) -> AppResult<()> {
        let keys = &self.infra.keys;
        for part in keys.season_removed_parts(season) {
            pipe.cmd("DEL").arg(part).ignore();
        }
        for user in removals::removed_users(&self.infra, season).await? {
            pipe.cmd("SADD")
                .arg(keys.season_removed_of(season, user))
                .arg(user)
                .ignore();
            pipe.cmd("ZREM")
                .arg(Self::side_key(&keys.season_board_of(season, user)))
                .arg(user)
                .ignore();
        }
        Ok(())
    }

    /// Sets or lifts the hold on points writes, in every bucket.
    async fn hold(&self, on: bool) -> AppResult<()> {
        let mut pipe = redis::pipe();
        for key in self.infra.keys.points_holds() {
            if on {
                pipe.cmd("SET").arg(key).arg(1).arg("EX").arg(HOLD_SECONDS);
            } else {
                pipe.cmd("DEL").arg(key);
            }
            pipe.ignore();
        }
        crate::infra::recovery::write(&self.infra, &pipe).await
    }

    /// Waits until the points archive has written every award up to `position` to SQL.
    async fn catch_up(&self, position: (u64, u64)) -> AppResult<()> {
        let started = std::time::Instant::now();
        for stream in self.infra.keys.points_streams() {
            self.caught_up(&stream, position, started).await?;
        }
        Ok(())
    }

    async fn caught_up(
        &self,
        stream: &str,
        position: (u64, u64),
        started: std::time::Instant,
    ) -> AppResult<()> {
        while !streams::handled_through(&self.infra, stream, "archive", position).await? {
            if started.elapsed() > CATCH_UP {
                return Err(AppError::Unavailable(
                    "the points archive is behind the stream: start an instance (its consumers \
                     archive the awards) and rebuild again"
                        .into(),
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    /// Under the hold: catches up, adds the users awarded since the snapshot, swaps the boards
    /// in, and writes today's totals and this month's make-up counters.
    async fn finish(&self, seasons: &[Month], snapshot: i64) -> AppResult<()> {
        self.catch_up(streams::position_now(&self.infra).await?)
            .await?;
        for &season in seasons {
            let rows = sqlx::query(&format!(
                "{STANDING} WHERE season = $1 AND user_id IN (SELECT user_id FROM points_record \
                 WHERE season = $1 AND event_order > $2) AND {NO_SPENDS} AND {ON_BOARD} \
                 GROUP BY user_id HAVING SUM(points) > 0"
            ))
            .bind(i64::from(season.id()))
            .bind(snapshot)
            .fetch_all(&self.infra.db.pool)
            .await?;
            let mut adds = self.side_adds(season, &standings_of(&rows)?);
            self.removed_back(&mut adds, season).await?;
            crate::infra::recovery::write(&self.infra, &adds).await?;
            // Each part becomes its side key; a part without one has no user with points.
            // Its channel is told, so that readers of the board read it afresh: the swap is
            // no award they could apply (`features::leaderboard::ranks`).
            let mut conn = self.infra.redis.get().await?;
            let keys = &self.infra.keys;
            let channels = keys.board_channels(season);
            for (part, channel) in keys.season_board_parts(season).into_iter().zip(channels) {
                let side = Self::side_key(&part);
                let exists: bool = redis::cmd("EXISTS")
                    .arg(&side)
                    .query_async(&mut *conn)
                    .await?;
                let mut swap = redis::cmd(if exists { "RENAME" } else { "UNLINK" });
                if exists {
                    swap.arg(&side);
                }
                let _: redis::Value = swap.arg(&part).query_async(&mut *conn).await?;
                let _: redis::Value = redis::cmd(keys.publish_command())
                    .arg(channel)
                    .arg(REBUILT)
                    .query_async(&mut *conn)
                    .await?;
            }
        }
        let mut pipe = redis::pipe();
        for (key, kinds) in self.todays_totals().await?.into_values() {
            pipe.cmd("DEL").arg(&key).ignore();
            for (kind, points) in kinds {
                if PointsType::parse(&kind).is_some() {
                    pipe.cmd("HSET").arg(&key).arg(kind).arg(points).ignore();
                }
            }
            pipe.cmd("EXPIRE").arg(&key).arg(DAILY_TTL_SECONDS).ignore();
        }
        let month = self.infra.clock.current_month();
        // Repairs count in the month they were made, which may be after the repaired day's.
        let make_ups = sqlx::query(
            "SELECT user_id, COUNT(*) AS n FROM sign_ins WHERE made_up = 1 AND signed_at_ms >= $1 \
             GROUP BY user_id",
        )
        .bind(self.infra.clock.month_begins(month).timestamp_millis())
        .fetch_all(&self.infra.db.pool)
        .await?;
        for row in &make_ups {
            pipe.cmd("SET")
                .arg(
                    self.infra
                        .keys
                        .sign_make_ups(row.try_get("user_id")?, month),
                )
                .arg(row.try_get::<i64, _>("n")?)
                .arg("EX")
                .arg(MAKE_UP_COUNTER_TTL_SECONDS)
                .ignore();
        }
        crate::infra::recovery::write(&self.infra, &pipe).await?;
        self.swap_balances(snapshot).await
    }

    /// The next chunk of users with points records, above `after`; `None` when none is left.
    async fn next_holders(&self, after: i64) -> AppResult<Option<Vec<i64>>> {
        let users = next_ids(
            &self.infra,
            "points_record",
            "user_id",
            "1 = 1",
            after,
            CHUNK,
        )
        .await?;
        Ok((!users.is_empty()).then_some(users))
    }

    /// The balances of a chunk of users (ascending), from their records up to `through`.
    async fn balances(&self, users: &[i64], through: i64) -> AppResult<Vec<(i64, Balance)>> {
        let rows = sqlx::query(&format!(
            "{BALANCES} WHERE {} AND event_order <= $1 GROUP BY user_id ORDER BY user_id",
            within("user_id", users)
        ))
        .bind(through)
        .fetch_all(&self.infra.db.pool)
        .await?;
        balances_of(&rows)
    }

    /// Each user's balance agrees with SQL's.
    pub(crate) async fn verify_balances(&self) -> AppResult<Report> {
        let mut report = Report::new("points balances");
        let mut after = 0;
        while let Some(users) = self.next_holders(after).await? {
            after = *users.last().expect("not empty");
            let balances = self.balances(&users, i64::MAX).await?;
            let mut pipe = redis::pipe();
            for (user, _) in &balances {
                pipe.cmd("HMGET")
                    .arg(self.infra.keys.points_balances_of(*user))
                    .arg(&balance_fields(*user));
            }
            let mut conn = self.infra.redis.get().await?;
            let held: Vec<(Option<i64>, Option<i64>, Option<i64>)> =
                pipe.query_async(&mut *conn).await?;
            drop(conn);
            for ((user, sql), (earned, spent, revoked)) in balances.iter().zip(held) {
                let redis = Balance {
                    earned: earned.unwrap_or(0),
                    spent: spent.unwrap_or(0),
                    revoked: revoked.unwrap_or(0),
                };
                report.check(redis == *sql, || {
                    format!("user {user}: {sql:?} in SQL, {redis:?} in Redis")
                });
            }
        }
        Ok(report)
    }

    /// Writes balances into the side keys of their buckets' balances (none for a user
    /// whose records moved no points).
    fn side_balances(&self, balances: &[(i64, Balance)]) -> redis::Pipeline {
        let mut pipe = redis::pipe();
        for (user, balance) in balances {
            if *balance == Balance::default() {
                continue;
            }
            let [earned, spent, revoked] = balance_fields(*user);
            pipe.cmd("HSET")
                .arg(Self::side_key(&self.infra.keys.points_balances_of(*user)))
                .arg(earned)
                .arg(balance.earned)
                .arg(spent)
                .arg(balance.spent)
                .arg(revoked)
                .arg(balance.revoked)
                .ignore();
        }
        pipe
    }

    /// Writes every balance up to the snapshot into the side key of its bucket, resumably.
    async fn copy_balances(&self, run: &Rebuild<'_>, snapshot: i64) -> AppResult<()> {
        let mut after = run.recall("balances").await?.unwrap_or(0);
        while let Some(users) = self.next_holders(after).await? {
            let balances = self.balances(&users, snapshot).await?;
            crate::infra::recovery::write(&self.infra, &self.side_balances(&balances)).await?;
            after = *users.last().expect("not empty");
            run.remember("balances", after).await?;
            run.advance(users.len() as u64);
        }
        Ok(())
    }

    /// Under the hold, caught up: writes the balances of the users with records since the
    /// snapshot into their buckets' side keys, then swaps each bucket's side key in (a
    /// bucket without one has no user with a balance).
    async fn swap_balances(&self, snapshot: i64) -> AppResult<()> {
        let rows = sqlx::query(&format!(
            "{BALANCES} WHERE user_id IN (SELECT user_id FROM points_record \
             WHERE event_order > $1) GROUP BY user_id"
        ))
        .bind(snapshot)
        .fetch_all(&self.infra.db.pool)
        .await?;
        let since = balances_of(&rows)?;
        crate::infra::recovery::write(&self.infra, &self.side_balances(&since)).await?;
        let mut conn = self.infra.redis.get().await?;
        for live in self.infra.keys.points_balances() {
            let side = Self::side_key(&live);
            let exists: bool = redis::cmd("EXISTS")
                .arg(&side)
                .query_async(&mut *conn)
                .await?;
            let mut swap = redis::cmd(if exists { "RENAME" } else { "UNLINK" });
            if exists {
                swap.arg(&side);
            }
            let _: redis::Value = swap.arg(&live).query_async(&mut *conn).await?;
        }
        Ok(())
    }
}
