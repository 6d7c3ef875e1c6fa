//! Daily sign-in and streaks: a bitmap per user per month (bit `day - 1`) of the days
//! that count (signed, repaired, or kept by a freeze), with a bitmap each of the repaired
//! and the frozen days; streaks that go on across month boundaries; repairs of the last
//! days (`ENGAGE_REPAIR_WINDOW_DAYS`), freezes earned by the streak and used by the first
//! sign-in after a gap; SIGN_IN points with each milestone's bonus paid once per streak;
//! all in one Lua script per action, which share `lua/include/signin_streak.lua`.
//!
//! Days are the user's own (`zones`): what the scripts are given as today is the user's
//! date, which is also the day of the points' daily totals, while the season stays in
//! `ENGAGE_TIMEZONE`.

mod freezes;
pub mod recovery;
pub mod settings;
pub(crate) mod zones;

use std::sync::Arc;

use chrono::{Datelike, NaiveDate};
use chrono_tz::Tz;
use redis::FromRedisValue;
use sqlx::Row;

use crate::{
    features::points::{Points, PointsType, DAILY_TTL_SECONDS},
    infra::{
        clock::{date_of_day_number, day_number, Month},
        error::{AppError, AppResult, ErrorCode},
        redis::{
            durability::DurableWrite,
            scripts::{
                Replies, Reply, SigninRepair, SigninRepairArgs, SigninSign, SigninSignArgs,
                SigninStatus, SigninStatusArgs,
            },
            status::Status,
            Keys,
        },
        Infra,
    },
};

pub(crate) use crate::features::zones::UserZone;

/// Sign-in's keys, in the hash tag of the user's points bucket: a sign-in awards points in
/// the same script.
impl Keys {
    pub fn sign_bitmap(&self, user_id: i64, month: Month) -> String {
        self.of_points_user(user_id, ("sign:", user_id, ':', month.id()))
    }

    /// The days of a month that a repair (or a make-up) counted.
    pub(crate) fn sign_made_up(&self, user_id: i64, month: Month) -> String {
        self.of_points_user(user_id, ("made:", user_id, ':', month.id()))
    }

    /// The days of a month that a freeze kept.
    pub(crate) fn sign_frozen(&self, user_id: i64, month: Month) -> String {
        self.of_points_user(user_id, ("frozen:", user_id, ':', month.id()))
    }

    pub fn sign_streak(&self, user_id: i64) -> String {
        self.of_points_user(user_id, ("streak:", user_id))
    }

    pub(crate) fn sign_make_ups(&self, user_id: i64, month: Month) -> String {
        self.of_points_user(user_id, ("makeups:", user_id, ':', month.id()))
    }
}

/// What sign-in works with: a sign-in awards points.
#[derive(Clone)]
pub struct SignIn {
    pub infra: Infra,
    pub points: Points,
    pub settings: SignInSettings,
    /// What the scripts are told of the milestones, made once from the settings and the
    /// points rules (a sign-in made it anew: 2 % of its instructions).
    milestones: Arc<MilestoneArgs>,
}

pub use settings::SignInSettings;

/// Bitmaps are kept for a little over a year (calendars of past months).
pub(crate) const BITMAP_TTL_SECONDS: u64 = 400 * 24 * 3600;
/// A month's make-up counter outlives the month a little.
pub(crate) const MAKE_UP_COUNTER_TTL_SECONDS: u64 = 40 * 24 * 3600;
/// Months back from this one whose bitmaps Redis keeps (the bitmap TTL in whole months).
pub(crate) const KEPT_MONTHS: u32 = (BITMAP_TTL_SECONDS / (31 * 24 * 3600)) as u32;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SignInOutcome {
    pub(crate) date: NaiveDate,
    pub(crate) streak: i64,
    pub(crate) points_awarded: i64,
    pub(crate) already_signed: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Calendar {
    pub(crate) user_id: i64,
    pub(crate) month: Month,
    /// Day 1 first; up to today for this month, the whole month for past ones.
    pub(crate) days: Vec<bool>,
    /// Left this month; 0 for a past month, whose days can no longer be made up.
    pub(crate) make_ups_left: u32,
    /// Today's sign-in, read with any month (the same script reads both).
    pub(crate) today: Today,
}

/// Today's sign-in and the streak it is part of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Today {
    pub(crate) date: NaiveDate,
    pub(crate) signed: bool,
    /// The current streak (ending today, or yesterday while today is unsigned).
    pub(crate) streak: i64,
}

impl Calendar {
    pub(crate) fn signed_days(&self) -> usize {
        self.days.iter().filter(|d| **d).count()
    }

    /// Whether the month shown is the one today is in.
    pub(crate) fn is_current(&self) -> bool {
        Month::of(self.today.date) == self.month
    }
}

/// What a day of a calendar was for the user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DayState {
    Signed,
    MadeUp,
    Frozen,
    Missed,
    /// After today, and today while it is not signed yet (it may still be).
    Future,
    BeforeJoining,
}

/// A month of a user's days, and nothing of today.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MonthDays {
    pub(crate) month: Month,
    pub(crate) days: Vec<DayState>,
}

impl MonthDays {
    /// Days signed, at the time or by a repair.
    pub(crate) fn signed_days(&self) -> usize {
        self.days
            .iter()
            .filter(|d| matches!(d, DayState::Signed | DayState::MadeUp))
            .count()
    }
}

/// A user's streak as of the user's today.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StreakStatus {
    pub(crate) current: i64,
    pub(crate) longest: i64,
    pub(crate) freezes_held: i64,
    pub(crate) freezes_max: i64,
    pub(crate) signed_today: bool,
    pub(crate) today: NaiveDate,
    pub(crate) time_zone: Tz,
    pub(crate) next_milestone: i64,
    pub(crate) make_ups_left: i64,
    pub(crate) make_up_window_days: i64,
    /// Repairs and make-ups made this month.
    pub(crate) repairs_used: i64,
}

impl StreakStatus {
    /// No sign-in yet today and no freeze left.
    pub(crate) fn at_risk(&self) -> bool {
        !self.signed_today && self.freezes_held == 0
    }
}

/// Days since 1970-01-01 (the scripts know a streak by the epoch day it began).
pub(crate) fn epoch_day(date: NaiveDate) -> i64 {
    (date - NaiveDate::default()).num_days()
}

/// What a sign-in and a repair pass alike, read anew for each call (the clock moves while
/// a rebuild holds points back): the user's day (also the day of the points' daily totals)
/// and keys of its month, and the award's season.
struct Signing {
    today: NaiveDate,
    month: Month,
    season: Month,
    season_seconds: i64,
    now_ms: i64,
}

/// A sign-in's or a repair's call, run again while a rebuild holds points back: the keys and
/// arguments both scripts take (their headers name them alike), listed once here, with those
/// of `$script` and `$args` of its own. `$signing`, read anew for each call, names the call's
/// [`Signing`] in the expressions given.
macro_rules! signing_call {
    ($sign_in:expr, $user_id:expr, $zone:expr, |$signing:ident, $keys:ident, $user:ident, $month:ident, $today:ident|
     $script:ident { $($key:ident: $key_value:expr),* $(,)? },
     $args:ident { $($arg:ident $(: $arg_value:expr)?),* $(,)? } $(,)?) => {{
        let (sign_in, user_id): (&SignIn, i64) = ($sign_in, $user_id);
        let milestones = &sign_in.milestones;
        sign_in
            .infra
            .durable_scripts(DurableWrite::Points)
            .run_while_held(|| {
                let $signing = sign_in.signing($zone);
                let ($keys, $user, $month, $today) =
                    (&sign_in.infra.keys, user_id, $signing.month, $signing.today);
                (
                    $script {
                        this_month: $keys.sign_bitmap($user, $month),
                        previous_month: $keys.sign_bitmap($user, $month.previous()),
                        month_before: $keys.sign_bitmap($user, $month.previous().previous()),
                        streak: $keys.sign_streak($user),
                        daily: $keys.points_today($user, $today),
                        board: $keys.season_board_of($signing.season, $user),
                        events: $keys.points_stream_of($user),
                        hold: $keys.points_hold_of($user),
                        changes: $keys.board_changes_of($signing.season, $user),
                        balances: $keys.points_balances_of($user),
                        removed: $keys.season_removed_of($signing.season, $user),
                        $($key: $key_value),*
                    },
                    $args {
                        $user,
                        month: $month.id(),
                        day: $today.day(),
                        epoch_day: epoch_day($today),
                        now_ms: $signing.now_ms,
                        season_seconds: $signing.season_seconds,
                        season: $signing.season.id(),
                        channel: $keys.board_channel_of($signing.season, $user),
                        daily_ttl_seconds: DAILY_TTL_SECONDS,
                        bitmap_ttl_seconds: BITMAP_TTL_SECONDS,
                        base_points: sign_in.points.rules.rule(PointsType::SignIn).points,
                        milestones: milestones.list.as_str(),
                        every: milestones.every,
                        every_points: milestones.every_points,
                        freezes_max: sign_in.settings.freezes_max,
                        publish: $keys.publish_command(),
                        award_day: day_number($today),
                        $($arg $(: $arg_value)?),*
                    },
                )
            })
            .await
    }};
}

/// The milestones' bonuses as the scripts read them: `"7:10,14:20,30:40,…"`, and past the
/// list the last one's multiples with their bonus. A milestone pays the bonus that the
/// points rules give the longest streak length up to it (`SIGN_IN.bonus`).
struct MilestoneArgs {
    list: String,
    every: i64,
    every_points: i64,
}

/// What a sign-in or a repair answers: `{ status, streak, points_awarded, n }` (the days
/// frozen, or the repairs left).
pub(crate) struct SignReply {
    status: Status,
    streak: i64,
    awarded: i64,
}

impl FromRedisValue for SignReply {
    fn from_redis_value(value: redis::Value) -> Result<Self, redis::ParsingError> {
        let mut values = Vec::<redis::Value>::from_redis_value(value)?.into_iter();
        let mut next = || values.next().unwrap_or(redis::Value::Nil);
        Ok(Self {
            status: Status::from_redis_value(next())?,
            streak: i64::from_redis_value(next())?,
            awarded: i64::from_redis_value(next())?,
        })
    }
}

impl Reply for SignReply {
    fn status(&self) -> Status {
        self.status
    }

    /// Every answer but HELD recorded the sign-in's event, or wrote nothing.
    fn wrote(&self) -> bool {
        self.status != Status::Held
    }
}

impl Replies for SigninSign {
    type Reply = SignReply;
}

impl Replies for SigninRepair {
    type Reply = SignReply;
}

/// `{ signed today, current, longest, freezes, joined, repairs used }`.
impl Replies for SigninStatus {
    type Reply = Vec<i64>;
}

impl SignIn {
    pub fn new(infra: Infra, points: Points, settings: SignInSettings) -> Self {
        let milestones = Arc::new(Self::milestone_args(&points, &settings));
        Self {
            infra,
            points,
            settings,
            milestones,
        }
    }

    fn signing(&self, zone: &UserZone) -> Signing {
        let (season, season_seconds) = self.points.season_now();
        let now = self.infra.clock.now();
        let today = zone.today_at(now);
        Signing {
            today,
            month: Month::of(today),
            season,
            season_seconds,
            now_ms: now.timestamp_millis(),
        }
    }

    fn milestone_args(points: &Points, settings: &SignInSettings) -> MilestoneArgs {
        let bonuses = &points.rules.sign_in_bonuses;
        let bonus_at = |days: u32| {
            bonuses
                .iter()
                .filter(|(at, _)| *at <= days)
                .max_by_key(|(at, _)| *at)
                .map_or(0, |(_, points)| *points)
        };
        let milestones = &settings.streak_milestones.0;
        let every = milestones.last().copied().unwrap_or(365);
        MilestoneArgs {
            list: milestones
                .iter()
                .map(|days| format!("{days}:{}", bonus_at(*days)))
                .collect::<Vec<_>>()
                .join(","),
            every: i64::from(every),
            every_points: bonus_at(every),
        }
    }

    /// The user's day now.
    pub(crate) async fn today_of(&self, user_id: i64, claim: Option<Tz>) -> AppResult<NaiveDate> {
        Ok(self
            .zone_of(user_id, claim)
            .await?
            .today_at(self.infra.clock.now()))
    }

    /// Signs the user in for the user's today; a repeat awards nothing. A gap before today
    /// that the freezes held reach across is covered (see `lua/signin_sign.lua`).
    ///
    /// The first sign-in records the user's zone (see [`SignIn::settled_zone`] for what it
    /// records) in the script that signs the day, and the archive writes it to SQL from the
    /// award's event. When another request recorded a zone meanwhile, the script signs
    /// nothing (`MOVED`), and the day is signed again in the zone now recorded.
    pub(crate) async fn sign_in(
        &self,
        user_id: i64,
        claim: Option<Tz>,
    ) -> AppResult<SignInOutcome> {
        for _ in 0..3 {
            let zone = self.zone_of(user_id, claim).await?;
            let first = match zone.recorded {
                true => None,
                false => Some(
                    self.first_record(user_id, zone.zone, self.infra.clock.now())
                        .await?,
                ),
            };
            let zone = first.unwrap_or(zone);
            let mut signed = None;
            let reply = signing_call!(
                self,
                user_id,
                &zone,
                |signing, keys, user, month, today| SigninSign {
                    frozen_this: keys.sign_frozen(user, month),
                    frozen_previous: keys.sign_frozen(user, month.previous()),
                    zone: keys.sign_zone(user),
                },
                SigninSignArgs {
                    idempotency: {
                        signed = Some(today);
                        format!("signin:{user}:{today}")
                    },
                    day_number: day_number(today),
                    zone: first.map_or("", |first| first.zone.name()),
                    zone_previous: first
                        .and_then(|first| first.previous)
                        .map_or("", |previous| previous.name()),
                    zone_from: first.and_then(|first| first.from_day).map_or(0, day_number),
                    zone_changed_ms: first.map_or(0, |first| first.changed_ms),
                },
            )?;
            if reply.status == Status::Moved {
                continue;
            }
            return Ok(SignInOutcome {
                date: signed.unwrap_or_else(|| self.infra.clock.today()),
                streak: reply.streak,
                points_awarded: reply.awarded,
                already_signed: reply.status == Status::Already,
            });
        }
        Err(AppError::Unavailable(
            "the user's time zone kept changing during the sign-in; try again".into(),
        ))
    }

    /// Repairs a missed day among the last `ENGAGE_REPAIR_WINDOW_DAYS`, across month and
    /// year ends, at most `ENGAGE_REPAIRS_PER_MONTH` times a month.
    pub(crate) async fn repair(
        &self,
        user_id: i64,
        claim: Option<Tz>,
        date: NaiveDate,
    ) -> AppResult<SignInOutcome> {
        let zone = self.settled_zone(user_id, claim).await?;
        let today = zone.today_at(self.infra.clock.now());
        let window = i64::from(self.settings.repair_window_days);
        let back = (today - date).num_days();
        if !(1..=window).contains(&back) {
            return Err(AppError::bad_input(format!(
                "only a missed day of the last {window} days can be repaired ({} to {})",
                today - chrono::Days::new(window as u64),
                today.pred_opt().unwrap_or(today)
            )));
        }
        self.repair_call(user_id, &zone, date, self.settings.repairs_per_month, false)
            .await
    }

    /// Signs in a missed day of this month before today (deprecated for `repair`), at
    /// most `ENGAGE_MAKEUP_PER_MONTH` times a month, in the same allowance as repairs, for
    /// the base point only, as before repairs (even a day before the first sign-in).
    pub(crate) async fn make_up(
        &self,
        user_id: i64,
        claim: Option<Tz>,
        date: NaiveDate,
    ) -> AppResult<SignInOutcome> {
        let zone = self.settled_zone(user_id, claim).await?;
        let today = zone.today_at(self.infra.clock.now());
        let month = Month::of(today);
        if Month::of(date) != month || date >= today {
            return Err(AppError::bad_input(format!(
                "only a missed day of this month before today can be made up ({} to {})",
                month.first_day(),
                today.pred_opt().unwrap_or(today)
            )));
        }
        self.repair_call(user_id, &zone, date, self.settings.make_ups_per_month, true)
            .await
    }

    async fn repair_call(
        &self,
        user_id: i64,
        zone: &UserZone,
        date: NaiveDate,
        allowed: u32,
        make_up: bool,
    ) -> AppResult<SignInOutcome> {
        let reply = signing_call!(
            self,
            user_id,
            zone,
            |signing, keys, user, month, today| SigninRepair {
                made_this: keys.sign_made_up(user, month),
                made_previous: keys.sign_made_up(user, month.previous()),
                make_ups: keys.sign_make_ups(user, month),
            },
            SigninRepairArgs {
                offset: (date - today).num_days(),
                allowed,
                counter_ttl_seconds: MAKE_UP_COUNTER_TTL_SECONDS,
                idempotency: format!("makeup:{user}:{date}"),
                day_number: day_number(date),
                make_up: u8::from(make_up),
            },
        )?;
        match reply.status {
            Status::Ok => Ok(SignInOutcome {
                date,
                streak: reply.streak,
                points_awarded: reply.awarded,
                already_signed: false,
            }),
            Status::Already => Ok(SignInOutcome {
                date,
                streak: reply.streak,
                points_awarded: 0,
                already_signed: true,
            }),
            Status::NotYet => Err(AppError::bad_input(
                "a day before the first sign-in cannot be repaired",
            )),
            // Its own code, not the script's generic refusal: a client offers the next month
            // here, where it would show an input error for BAD_USER_INPUT.
            Status::OverLimit => Err(AppError::client(
                ErrorCode::MakeupLimit,
                format!("no repairs left this month (at most {allowed})"),
            )),
            refused => Err(refused.refusal("repair refused")),
        }
    }

    /// The user's streak as of the user's today: one script call (after the zone's read).
    pub(crate) async fn status(&self, user_id: i64, claim: Option<Tz>) -> AppResult<StreakStatus> {
        let zone = self.zone_of(user_id, claim).await?;
        let today = zone.today_at(self.infra.clock.now());
        let month = Month::of(today);
        let keys = &self.infra.keys;
        let reply = self
            .infra
            .scripts()
            .call(
                &SigninStatus {
                    this_month: keys.sign_bitmap(user_id, month),
                    previous_month: keys.sign_bitmap(user_id, month.previous()),
                    month_before: keys.sign_bitmap(user_id, month.previous().previous()),
                    streak: keys.sign_streak(user_id),
                    make_ups: keys.sign_make_ups(user_id, month),
                },
                &SigninStatusArgs {
                    month: month.id(),
                    day: today.day(),
                    epoch_day: epoch_day(today),
                },
            )
            .await?;
        let value = |i: usize| reply.get(i).copied().unwrap_or(0);
        let current = value(1);
        Ok(StreakStatus {
            current,
            longest: value(2),
            freezes_held: value(3),
            freezes_max: i64::from(self.settings.freezes_max),
            signed_today: value(0) == 1,
            today,
            time_zone: zone.zone,
            next_milestone: self.settings.streak_milestones.next_after(current),
            make_ups_left: (i64::from(self.settings.repairs_per_month) - value(5)).max(0),
            make_up_window_days: i64::from(self.settings.repair_window_days),
            repairs_used: value(5),
        })
    }

    /// Months of a user's days (none after this month): the months Redis keeps in one
    /// round trip, older ones from `sign_ins`.
    async fn months(
        &self,
        user_id: i64,
        today: NaiveDate,
        months: &[Month],
    ) -> AppResult<Vec<MonthDays>> {
        let current = Month::of(today);
        let mut oldest_kept = current;
        for _ in 0..KEPT_MONTHS {
            oldest_kept = oldest_kept.previous();
        }
        let kept: Vec<Month> = months
            .iter()
            .copied()
            .filter(|m| *m >= oldest_kept && *m <= current)
            .collect();
        let keys = &self.infra.keys;
        let mut pipe = redis::pipe();
        pipe.cmd("HGET")
            .arg(keys.sign_streak(user_id))
            .arg("joined");
        for &month in &kept {
            for key in [
                keys.sign_bitmap(user_id, month),
                keys.sign_made_up(user_id, month),
                keys.sign_frozen(user_id, month),
            ] {
                pipe.cmd("BITFIELD").arg(key).arg("GET").arg("u31").arg(0);
            }
        }
        let mut conn = self.infra.redis.get().await?;
        let values: Vec<redis::Value> = pipe.query_async(&mut *conn).await?;
        drop(conn);
        let mut values = values.into_iter();
        let joined = Option::<i64>::from_redis_value(values.next().unwrap_or(redis::Value::Nil))
            .ok()
            .flatten()
            .and_then(date_of_day_number);
        let mut bits: std::collections::BTreeMap<Month, [u64; 3]> = Default::default();
        for &month in &kept {
            let mut three = [0; 3];
            for slot in &mut three {
                *slot = values
                    .next()
                    .and_then(|v| Vec::<u64>::from_redis_value(v).ok())
                    .and_then(|v| v.first().copied())
                    .unwrap_or(0);
            }
            bits.insert(month, three);
        }
        let older: Vec<Month> = months
            .iter()
            .copied()
            .filter(|m| *m < oldest_kept)
            .collect();
        if let (Some(first), Some(last)) = (older.iter().min(), older.iter().max()) {
            let rows = sqlx::query(
                "SELECT day, made_up, frozen FROM sign_ins WHERE user_id = $1 AND day >= $2 \
                 AND day < $3",
            )
            .bind(user_id)
            .bind(day_number(first.first_day()))
            .bind(day_number(last.next().first_day()))
            .fetch_all(&self.infra.db.pool)
            .await?;
            for row in &rows {
                let Some(date) = date_of_day_number(row.try_get("day")?) else {
                    continue;
                };
                let bit = 1u64 << (31 - date.day());
                let entry = bits.entry(Month::of(date)).or_default();
                entry[0] |= bit;
                if row.try_get::<i64, _>("made_up")? == 1 {
                    entry[1] |= bit;
                }
                if row.try_get::<i64, _>("frozen")? == 1 {
                    entry[2] |= bit;
                }
            }
        }
        // Without a record of the first day (users who signed before it was kept), the
        // earliest day seen stands for it.
        let joined = joined.or_else(|| {
            bits.iter()
                .find(|(_, three)| three[0] != 0)
                .map(|(month, three)| {
                    let first = three[0].leading_zeros() - 33;
                    month.first_day() + chrono::Days::new(u64::from(first))
                })
        });
        Ok(months
            .iter()
            .map(|&month| {
                let three = bits.get(&month).copied().unwrap_or_default();
                MonthDays {
                    month,
                    days: (1..=month.days())
                        .map(|day| {
                            let date = month.first_day() + chrono::Days::new(u64::from(day - 1));
                            let bit = |i: usize| three[i] >> (31 - day) & 1 == 1;
                            day_state(date, today, joined, bit(0), bit(1), bit(2))
                        })
                        .collect(),
                }
            })
            .collect())
    }

    /// A month of the user's days (default: the user's this month); a month after this one
    /// is an input error.
    pub(crate) async fn month(
        &self,
        user_id: i64,
        claim: Option<Tz>,
        month: Option<Month>,
    ) -> AppResult<MonthDays> {
        let today = self.today_of(user_id, claim).await?;
        let current = Month::of(today);
        let shown = month.unwrap_or(current);
        if shown > current {
            return Err(AppError::bad_input("that month has not begun"));
        }
        let mut months = self.months(user_id, today, &[shown]).await?;
        months
            .pop()
            .ok_or_else(|| AppError::internal(anyhow::anyhow!("a month without its days")))
    }

    /// The twelve months of a year (months after this one all FUTURE); a year after this
    /// one is an input error.
    pub(crate) async fn year(
        &self,
        user_id: i64,
        claim: Option<Tz>,
        year: i32,
    ) -> AppResult<Vec<MonthDays>> {
        let today = self.today_of(user_id, claim).await?;
        if year > today.year() || year < 1970 {
            return Err(AppError::bad_input(format!(
                "year must be between 1970 and {}",
                today.year()
            )));
        }
        let months: Vec<Month> = (1..=12).map(|month| Month { year, month }).collect();
        self.months(user_id, today, &months).await
    }

    /// A month's sign-ins for `signCalendar` (deprecated): default this month; months
    /// after this one are an input error.
    pub(crate) async fn calendar(
        &self,
        user_id: i64,
        claim: Option<Tz>,
        month: Option<Month>,
    ) -> AppResult<Calendar> {
        let status = self.status(user_id, claim).await?;
        let current = Month::of(status.today);
        let shown = month.unwrap_or(current);
        if shown > current {
            return Err(AppError::bad_input("that month has not begun"));
        }
        let days = self.months(user_id, status.today, &[shown]).await?;
        let shown_days = if shown == current {
            status.today.day() as usize
        } else {
            shown.days() as usize
        };
        let days = days
            .first()
            .map(|m| {
                m.days
                    .iter()
                    .take(shown_days)
                    .map(|d| matches!(d, DayState::Signed | DayState::MadeUp | DayState::Frozen))
                    .collect()
            })
            .unwrap_or_default();
        let make_ups_left = if shown == current {
            (i64::from(self.settings.make_ups_per_month) - status.repairs_used).max(0) as u32
        } else {
            0
        };
        Ok(Calendar {
            user_id,
            month: shown,
            days,
            make_ups_left,
            today: Today {
                date: status.today,
                signed: status.signed_today,
                streak: status.current,
            },
        })
    }

    /// The calendar of the month of a day just signed (or made up), as it is now.
    pub(crate) async fn calendar_of_day(
        &self,
        user_id: i64,
        claim: Option<Tz>,
        day: NaiveDate,
    ) -> AppResult<Calendar> {
        self.calendar(user_id, claim, Some(Month::of(day))).await
    }

    /// The days of a month a user signed by a make-up, from `sign_ins`.
    pub(crate) async fn made_up_days(&self, user_id: i64, month: Month) -> AppResult<Vec<u32>> {
        let rows = sqlx::query(
            "SELECT day FROM sign_ins WHERE user_id = $1 AND made_up = 1 AND day >= $2 AND day < $3 \
             ORDER BY day",
        )
        .bind(user_id)
        .bind(day_number(month.first_day()))
        .bind(day_number(month.next().first_day()))
        .fetch_all(&self.infra.db.pool)
        .await?;
        let mut days = Vec::with_capacity(rows.len());
        for row in &rows {
            days.push((row.try_get::<i64, _>("day")? % 100) as u32);
        }
        Ok(days)
    }
}

/// What a day was, from its bits (counted, made up, frozen).
fn day_state(
    date: NaiveDate,
    today: NaiveDate,
    joined: Option<NaiveDate>,
    counted: bool,
    made_up: bool,
    frozen: bool,
) -> DayState {
    if date > today {
        DayState::Future
    } else if counted && frozen {
        DayState::Frozen
    } else if counted && made_up {
        DayState::MadeUp
    } else if counted {
        DayState::Signed
    } else if joined.is_none_or(|joined| date < joined) {
        DayState::BeforeJoining
    } else if date == today {
        DayState::Future
    } else {
        DayState::Missed
    }
}
