//! Points: awards within daily caps, enforced atomically in Lua, idempotent on a
//! key, added to the season's leaderboard and to the user's balance, and archived to
//! `points_record`; spends and revokes against the balance (`balance`).
//!
//! A daily cap counts the user's day, in the user's zone (`features::zones`), with the
//! effective day sign-in counts while a zone change takes effect: each date is the user's
//! "today" for one stretch of time, so a change never opens a date's cap twice. The day is
//! computed here and given to the script, which keys the day's totals by it: the cap stays
//! one atomic script. A user with no zone recorded counts `ENGAGE_TIMEZONE`'s days.
//!
//! Points keys go by user bucket (`ENGAGE_POINTS_BUCKETS`): a user's sign-in bitmaps, daily
//! totals and award markers, the balances of the bucket's users, and the part of each
//! season board that holds the user, carry the hash tag `{points:<bucket>}`. An award
//! touches the daily total, the marker, the balance and the board in one script, which can
//! only be atomic within one Redis Cluster slot; buckets let the slots of different users
//! live on different nodes. A board is read by merging its parts (`leaderboard::parts`).

pub(crate) mod archive;
pub(crate) mod balance;
pub mod events;
pub mod recovery;
pub mod rules;
pub mod settings;

use std::collections::HashMap;

use chrono::{DateTime, NaiveDate, Utc};
use sha2::{Digest, Sha256};
use sqlx::Row;

use crate::infra::redis::durability::DurableWrite;

pub use rules::{PointsRules, PointsType};
pub use settings::PointsSettings;

use std::sync::Arc;

use crate::features::zones::{UserZone, Zones};
use crate::infra::page::{KeyRange, PageArgs};
use crate::infra::{
    clock::{day_number, Month},
    error::{AppError, AppResult},
    redis::status::Status,
    redis::{
        scripts::{PointsAward, PointsAwardArgs, Replies, Reply},
        KeyPart, Keys,
    },
    Infra,
};

/// What points work with: the rules and caps of each kind of award (loaded at start from
/// `ENGAGE_POINTS_RULES`).
#[derive(Clone)]
pub struct Points {
    pub infra: Infra,
    pub rules: Arc<PointsRules>,
    /// The users' zones, which say the day of a daily cap (and of a sign-in).
    pub(crate) zones: Zones,
}

/// Daily totals outlive their day a little, for readers near midnight.
pub const DAILY_TTL_SECONDS: u64 = 2 * 24 * 3600;
/// An idempotency key is remembered for a week.
pub(crate) const IDEMPOTENCY_TTL_SECONDS: u64 = 7 * 24 * 3600;
pub(crate) const MAX_AWARD: i64 = 10_000;
pub(crate) const MAX_KEY_CHARS: usize = 128;

/// The hash tag of the points keys. With more than one bucket each bucket has its own,
/// `{points:<bucket>}`; with one, all share `{points}`.
pub(crate) const TAG: &str = "points";

/// A user's points keys (daily totals, award markers, sign-ins) and their part of each
/// season board share the hash tag of the user's bucket, so an award or a sign-in stays one
/// single-slot script. Each bucket has its own stream, rebuild hold and board channel in
/// the same slot, for the same reason.
impl Keys {
    /// The bucket of a user's points keys.
    pub(crate) fn points_bucket(&self, user_id: i64) -> u32 {
        user_id.rem_euclid(i64::from(self.points_buckets())) as u32
    }

    fn in_points_bucket(&self, bucket: u32, rest: impl KeyPart) -> String {
        if self.points_buckets() == 1 {
            self.tagged(TAG, rest)
        } else {
            self.tagged((TAG, ':', bucket), rest)
        }
    }

    /// A key in the bucket of a user's points keys; `rest` is written straight into it (a
    /// sign-in builds eleven of these keys).
    pub(crate) fn of_points_user(&self, user_id: i64, rest: impl KeyPart) -> String {
        self.in_points_bucket(self.points_bucket(user_id), rest)
    }

    /// One key per bucket, in bucket order.
    fn per_points_bucket(&self, rest: impl KeyPart) -> Vec<String> {
        (0..self.points_buckets())
            .map(|bucket| self.in_points_bucket(bucket, &rest))
            .collect()
    }

    pub fn points_today(&self, user_id: i64, date: chrono::NaiveDate) -> String {
        // The day as `YYYYMMDD` from its number: chrono's `format` parses its pattern anew on
        // every call.
        self.of_points_user(user_id, ("daily:", user_id, ':', day_number(date)))
    }

    /// The marker of an idempotency key (hashed: keys are the caller's free text).
    pub fn points_award_marker(&self, user_id: i64, idempotency_key: &str) -> String {
        let digest = hex::encode(&Sha256::digest(idempotency_key.as_bytes())[..16]);
        self.of_points_user(user_id, ("award:", user_id, ':', digest))
    }

    /// The part of a season's board that holds a user.
    pub fn season_board_of(&self, season: Month, user_id: i64) -> String {
        self.of_points_user(user_id, ("board:", season.id()))
    }

    /// The users removed from the part of a season's board that holds a user
    /// (`lua/leaderboard_remove.lua`): awards to them leave the board alone.
    pub fn season_removed_of(&self, season: Month, user_id: i64) -> String {
        self.of_points_user(user_id, ("board:", season.id(), ":removed"))
    }

    /// The removed users of every part of a season's board, in bucket order.
    pub(crate) fn season_removed_parts(&self, season: Month) -> Vec<String> {
        self.per_points_bucket(("board:", season.id(), ":removed"))
    }

    /// The change counter of the part of a season's board that holds a user: every award
    /// to the part increments it and publishes it with the change (`lua/include/points_award.lua`),
    /// so that a reader of the part knows which changes a read of it reflects.
    pub fn board_changes_of(&self, season: Month, user_id: i64) -> String {
        self.of_points_user(user_id, ("board:", season.id(), ":changes"))
    }

    /// The change counters of every part of a season's board, in bucket order.
    pub(crate) fn board_changes(&self, season: Month) -> Vec<String> {
        self.per_points_bucket(("board:", season.id(), ":changes"))
    }

    /// Every part of a season's board, in bucket order.
    pub fn season_board_parts(&self, season: Month) -> Vec<String> {
        self.per_points_bucket(("board:", season.id()))
    }

    /// Set while a rebuild holds back the points writes of a user's bucket (see `recovery`).
    pub fn points_hold_of(&self, user_id: i64) -> String {
        self.of_points_user(user_id, "rebuilding")
    }

    /// The rebuild holds of every bucket.
    pub(crate) fn points_holds(&self) -> Vec<String> {
        self.per_points_bucket("rebuilding")
    }

    /// The stream of the awards to a user's bucket.
    pub fn points_stream_of(&self, user_id: i64) -> String {
        self.of_points_user(user_id, "events")
    }

    /// The award streams of every bucket (the archive reads them all).
    pub fn points_streams(&self) -> Vec<String> {
        self.per_points_bucket("events")
    }

    /// Where other services XADD awards `{user, type, points, key}`: one stream, whatever
    /// the buckets (its consumer sends each award to its user's bucket).
    pub fn points_intake_stream(&self) -> String {
        self.tagged(TAG, "intake")
    }

    /// An award's `points_record.event_id`: its stream entry id, which is unique only within
    /// its stream, so with several buckets qualified by the bucket (`<bucket>/<entry id>`).
    pub(crate) fn points_event_id(&self, user_id: i64, entry_id: &str) -> String {
        if self.points_buckets() == 1 {
            entry_id.to_string()
        } else {
            format!("{}/{entry_id}", self.points_bucket(user_id))
        }
    }

    /// The live channel of the changes to the part of a season's board that holds a user.
    pub fn board_channel_of(&self, season: Month, user_id: i64) -> String {
        self.of_points_user(user_id, ("live:board:", season.id()))
    }

    /// The live channels of every part of a season's board.
    pub fn board_channels(&self, season: Month) -> Vec<String> {
        self.per_points_bucket(("live:board:", season.id()))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AwardOutcome {
    pub(crate) awarded: i64,
    pub(crate) capped: bool,
    pub(crate) duplicate: bool,
}

/// The idempotency key of an award for another service (`awardPoints`, the intake stream,
/// which share it). Service keys live in their own namespace, so that none can collide
/// with the keys of internal awards (`like:…`, `signin:…`, `makeup:…`).
pub(crate) fn service_key(key: &str) -> AppResult<String> {
    let key = key.trim();
    if key.is_empty() || key.chars().count() > MAX_KEY_CHARS {
        return Err(AppError::bad_input(format!(
            "idempotencyKey must have 1 to {MAX_KEY_CHARS} characters"
        )));
    }
    Ok(format!("service:{key}"))
}

/// An award pays between 1 and [`MAX_AWARD`] points.
pub(super) fn check_amount(points: i64) -> AppResult<()> {
    if (1..=MAX_AWARD).contains(&points) {
        Ok(())
    } else {
        Err(AppError::bad_input(format!(
            "points must be between 1 and {MAX_AWARD}"
        )))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TodayByType {
    pub(crate) kind: PointsType,
    pub(crate) points: i64,
    pub(crate) cap: Option<i64>,
}

/// A row of a user's points history: an award, a spend or a revoke.
#[derive(Debug, Clone)]
pub(crate) struct PointsRecord {
    pub(crate) order: i64,
    /// The award's type (a revoke's: the revoked award's); `None` for a spend.
    pub(crate) kind: Option<PointsType>,
    /// Negative for a spend or a revoke.
    pub(crate) points: i64,
    pub(crate) season: u32,
    pub(crate) awarded_at_ms: i64,
    pub(crate) idempotency_key: String,
    pub(crate) reason: Option<String>,
}

impl PointsRecord {
    /// Where the points came from or went: the key's namespace (`signin`, `service`,
    /// `spend`, `revoke`, `reward`, …).
    pub(crate) fn source(&self) -> Option<&str> {
        balance::source_of(&self.idempotency_key)
    }
}

impl Points {
    /// The season an award made now belongs to, and the seconds since it began (the board's
    /// tie-breaker).
    pub(crate) fn season_now(&self) -> (Month, i64) {
        let now = self.infra.clock.now();
        let season = Month::of(self.infra.clock.date_of(now));
        let seconds = (now - self.infra.clock.month_begins(season))
            .num_seconds()
            .max(0);
        (season, seconds)
    }

    /// Awards points once per `(user, idempotency key)`, within the type's daily cap. The Redis
    /// marker answers repeats for a week; after that `points_record` (unique on the pair) does.
    pub(crate) async fn award(
        &self,
        user_id: i64,
        kind: PointsType,
        points: i64,
        key: &str,
    ) -> AppResult<AwardOutcome> {
        if let Some(awarded) = self
            .archived_awards(&[(user_id, key)])
            .await
            .into_values()
            .next()
        {
            return Ok(AwardOutcome {
                awarded,
                capped: awarded < points,
                duplicate: true,
            });
        }
        check_amount(points)?;
        self.award_unarchived(&[(user_id, kind, points, key)])
            .await?
            .pop()
            .ok_or_else(|| AppError::internal(anyhow::anyhow!("an award without its outcome")))
    }

    /// Awards of one bucket whose keys SQL has not archived, in one script call and in their
    /// order: one award for [`Points::award`], a batch for the consumers that pay for other
    /// features' events (one call per award made each like cost a second script round
    /// trip). Amounts must have been checked ([`check_amount`]).
    pub(super) async fn award_unarchived(
        &self,
        awards: &[(i64, PointsType, i64, &str)],
    ) -> AppResult<Vec<AwardOutcome>> {
        let Some(&(first, ..)) = awards.first() else {
            return Ok(Vec::new());
        };
        debug_assert!(awards.iter().all(|&(user, ..)| {
            self.infra.keys.points_bucket(user) == self.infra.keys.points_bucket(first)
        }));
        let keys = &self.infra.keys;
        let users: Vec<i64> = awards.iter().map(|&(user, ..)| user).collect();
        let zones = self.zones.zones_of(&users, None).await?;
        let reply = self
            .infra
            .durable_scripts(DurableWrite::Points)
            .run_while_held(|| {
                let (season, season_seconds) = self.season_now();
                let now = self.infra.clock.now();
                // Each award counts toward its user's cap of the user's day (`zones`).
                let days: Vec<NaiveDate> = awards
                    .iter()
                    .map(|&(user_id, ..)| self.user_day(zones.get(&user_id), now))
                    .collect();
                let award = PointsAward {
                    board: keys.season_board_of(season, first),
                    events: keys.points_stream_of(first),
                    hold: keys.points_hold_of(first),
                    changes: keys.board_changes_of(season, first),
                    balances: keys.points_balances_of(first),
                    removed: keys.season_removed_of(season, first),
                    awards: awards
                        .iter()
                        .zip(&days)
                        .flat_map(|(&(user_id, _, _, key), &day)| {
                            [
                                keys.points_today(user_id, day),
                                keys.points_award_marker(user_id, key),
                            ]
                        })
                        .collect(),
                };
                let requests: Vec<_> = awards
                    .iter()
                    .zip(&days)
                    .map(|(&(user_id, kind, points, key), &day)| {
                        let cap = self.rules.rule(kind).daily_cap.unwrap_or(-1);
                        (user_id, kind.as_str(), points, cap, day_number(day), key)
                    })
                    .collect();
                let args = PointsAwardArgs {
                    now_ms: now.timestamp_millis(),
                    season_seconds,
                    season: season.id(),
                    channel: keys.board_channel_of(season, first),
                    marker_ttl_seconds: IDEMPOTENCY_TTL_SECONDS,
                    daily_ttl_seconds: DAILY_TTL_SECONDS,
                    publish: keys.publish_command(),
                    awards: requests,
                };
                (award, args)
            })
            .await?;
        let paid = reply.paid;
        if paid.len() != 2 * awards.len() {
            return Err(AppError::internal(anyhow::anyhow!(
                "points_award answered {} values for {} awards",
                paid.len(),
                awards.len()
            )));
        }
        Ok(awards
            .iter()
            .zip(paid.chunks(2))
            .map(|(&(_, _, points, _), pair)| AwardOutcome {
                awarded: pair[0],
                capped: pair[0] < points,
                duplicate: pair[1] == 1,
            })
            .collect())
    }

    /// What the awards of these (user, key) pairs paid, for those SQL has archived: one
    /// query per hundred pairs, so that a consumer's batch asks SQL once rather than once per
    /// award. While SQL cannot be read the Redis markers alone decide (they cover a week):
    /// awards keep working through an outage.
    pub(super) async fn archived_awards(
        &self,
        pairs: &[(i64, &str)],
    ) -> HashMap<(i64, String), i64> {
        const PAIRS_PER_QUERY: usize = 100;
        let backend = self.infra.db.backend;
        let mut archived = HashMap::new();
        for chunk in pairs.chunks(PAIRS_PER_QUERY) {
            let matches: Vec<String> = (0..chunk.len())
                .map(|i| {
                    format!(
                        "(user_id = {} AND idempotency_key = {})",
                        backend.param(2 * i + 1),
                        backend.param(2 * i + 2)
                    )
                })
                .collect();
            let sql = format!(
                "SELECT user_id, idempotency_key, points FROM points_record WHERE {}",
                matches.join(" OR ")
            );
            let mut query = sqlx::query(&sql);
            for (user_id, key) in chunk {
                query = query.bind(*user_id).bind(*key);
            }
            match query.fetch_all(&self.infra.db.pool).await {
                Ok(rows) => {
                    for row in rows {
                        if let (Ok(user), Ok(key), Ok(points)) = (
                            row.try_get("user_id"),
                            row.try_get("idempotency_key"),
                            row.try_get("points"),
                        ) {
                            archived.insert((user, key), points);
                        }
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, "archived awards not read; the Redis markers decide");
                }
            }
        }
        archived
    }

    /// The user's day at an instant, whose totals the daily caps count: the user's zone's
    /// (the same effective day as the user's sign-ins, `signin::zones`), else
    /// `ENGAGE_TIMEZONE`'s.
    pub(crate) fn user_day(&self, zone: Option<&UserZone>, at: DateTime<Utc>) -> NaiveDate {
        zone.map_or_else(|| self.infra.clock.date_of(at), |zone| zone.today_at(at))
    }

    /// The key of the user's totals of the user's today.
    async fn todays_key(&self, user_id: i64) -> AppResult<String> {
        let zone = self.zones.zone_of(user_id, None).await?;
        let day = self.user_day(Some(&zone), self.infra.clock.now());
        Ok(self.infra.keys.points_today(user_id, day))
    }

    /// Today's points of a user per type, with each type's cap.
    pub(crate) async fn today(&self, user_id: i64) -> AppResult<Vec<TodayByType>> {
        let key = self.todays_key(user_id).await?;
        let mut conn = self.infra.redis.get().await?;
        let totals: HashMap<String, i64> = redis::cmd("HGETALL")
            .arg(key)
            .query_async(&mut *conn)
            .await?;
        Ok(PointsType::ALL
            .into_iter()
            .map(|kind| self.today_by_type(kind, totals.get(kind.as_str()).copied()))
            .collect())
    }

    /// Today's points of a user of one type, with its cap.
    pub(crate) async fn today_of(&self, user_id: i64, kind: PointsType) -> AppResult<TodayByType> {
        let key = self.todays_key(user_id).await?;
        let mut conn = self.infra.redis.get().await?;
        let total: Option<i64> = redis::cmd("HGET")
            .arg(key)
            .arg(kind.as_str())
            .query_async(&mut *conn)
            .await?;
        Ok(self.today_by_type(kind, total))
    }

    fn today_by_type(&self, kind: PointsType, total: Option<i64>) -> TodayByType {
        TodayByType {
            kind,
            points: total.unwrap_or(0),
            cap: self.rules.rule(kind).daily_cap,
        }
    }

    /// A page of a user's archived awards, spends and revokes (those that moved points),
    /// newest first, within `page.after` (a range of event orders).
    pub(crate) async fn history(
        &self,
        user_id: i64,
        page: PageArgs<KeyRange>,
    ) -> AppResult<(Vec<PointsRecord>, bool)> {
        let sql = format!(
            "SELECT event_order, kind, points, season, awarded_at_ms, idempotency_key, reason \
             FROM points_record WHERE user_id = $1 AND points <> 0 AND {}",
            page.after.sql_tail("event_order", 2)
        );
        let query = sqlx::query(&sql).bind(user_id);
        self.infra
            .db
            .keyset_page(query, page, |row| {
                let kind: String = row.try_get("kind")?;
                let kind = match kind.as_str() {
                    events::SPEND => None,
                    other => Some(PointsType::parse(other).ok_or_else(|| {
                        sqlx::Error::Decode(format!("unknown points type {kind}").into())
                    })?),
                };
                Ok(PointsRecord {
                    order: row.try_get("event_order")?,
                    kind,
                    points: row.try_get("points")?,
                    season: row.try_get::<i64, _>("season")? as u32,
                    awarded_at_ms: row.try_get("awarded_at_ms")?,
                    idempotency_key: row.try_get("idempotency_key")?,
                    reason: row.try_get("reason")?,
                })
            })
            .await
    }
}

/// What an award answers: `{ OK, awarded_1, duplicate_1, awarded_2, … }`, or `{ HELD }`
/// while a rebuild holds awards back.
pub(crate) struct AwardReply {
    status: Status,
    paid: Vec<i64>,
}

impl redis::FromRedisValue for AwardReply {
    fn from_redis_value(value: redis::Value) -> Result<Self, redis::ParsingError> {
        let mut values = Vec::<redis::Value>::from_redis_value(value)?.into_iter();
        Ok(Self {
            status: Status::from_redis_value(values.next().unwrap_or(redis::Value::Nil))?,
            paid: values
                .map(i64::from_redis_value)
                .collect::<Result<_, _>>()?,
        })
    }
}

impl Reply for AwardReply {
    fn status(&self) -> Status {
        self.status
    }

    /// Every answer but HELD recorded its awards' events.
    fn wrote(&self) -> bool {
        self.status != Status::Held
    }
}

impl Replies for PointsAward {
    type Reply = AwardReply;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_bucket_keeps_the_plain_tag_and_several_spread_users() {
        let season = Month::parse_id("202611").unwrap();
        let one = Keys::new("e:");
        assert_eq!(one.season_board_of(season, 7), "e:{points}:board:202611");
        assert_eq!(one.points_event_id(7, "1-0"), "1-0");
        let four = Keys::new("e:").with_points_buckets(4);
        assert_eq!(four.season_board_of(season, 7), "e:{points:3}:board:202611");
        assert_eq!(
            four.points_today(7, season.first_day()),
            "e:{points:3}:daily:7:20261101"
        );
        assert_eq!(four.season_board_parts(season).len(), 4);
        assert_ne!(
            four.points_event_id(7, "1-0"),
            four.points_event_id(8, "1-0")
        );
    }
}
