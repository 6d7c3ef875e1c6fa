//! Daily sign-in: a bitmap per user per month (bit `day - 1`), streaks that go on
//! across month boundaries, make-up sign-ins for missed days of this month, and SIGN_IN
//! points with the streak bonus, all in one Lua script per action.

pub mod recovery;
pub mod settings;

use chrono::{Datelike, NaiveDate};
use sqlx::Row;

use crate::{
    features::points::{self, Points, PointsType, DAILY_TTL_SECONDS},
    infra::{
        clock::{day_number, Month},
        error::{AppError, AppResult, ErrorCode},
        redis::{
            durability::DurableWrite,
            scripts::{SIGNIN_CALENDAR, SIGNIN_MAKE_UP, SIGNIN_SIGN},
            status::Status,
            Keys,
        },
        Infra,
    },
};

/// Sign-in's keys, in the hash tag of the user's points bucket: a sign-in awards points in
/// the same script.
impl Keys {
    pub fn sign_bitmap(&self, user_id: i64, month: Month) -> String {
        self.of_points_user(user_id, &format!("sign:{user_id}:{}", month.id()))
    }

    pub fn sign_streak(&self, user_id: i64) -> String {
        self.of_points_user(user_id, &format!("streak:{user_id}"))
    }

    pub fn sign_make_ups(&self, user_id: i64, month: Month) -> String {
        self.of_points_user(user_id, &format!("makeups:{user_id}:{}", month.id()))
    }
}

/// What sign-in works with: a sign-in awards points.
#[derive(Clone)]
pub struct SignIn {
    pub infra: Infra,
    pub points: Points,
    pub settings: SignInSettings,
}

pub use settings::SignInSettings;

/// Bitmaps are kept for a little over a year (calendars of past months).
pub const BITMAP_TTL_SECONDS: u64 = 400 * 24 * 3600;
/// A month's make-up counter outlives the month a little.
pub const MAKE_UP_COUNTER_TTL_SECONDS: u64 = 40 * 24 * 3600;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignInOutcome {
    pub date: NaiveDate,
    pub streak: i64,
    pub points_awarded: i64,
    pub already_signed: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Calendar {
    pub user_id: i64,
    pub month: Month,
    /// Day 1 first; up to today for this month, the whole month for past ones.
    pub days: Vec<bool>,
    /// Left this month; 0 for a past month, whose days can no longer be made up.
    pub make_ups_left: u32,
    /// Today's sign-in, read with any month (the same script reads both).
    pub today: Today,
}

/// Today's sign-in and the streak it is part of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Today {
    pub date: NaiveDate,
    pub signed: bool,
    /// The current streak (ending today, or yesterday while today is unsigned).
    pub streak: i64,
}

impl Calendar {
    pub fn signed_days(&self) -> usize {
        self.days.iter().filter(|d| **d).count()
    }

    /// Whether the month shown is the one today is in.
    pub fn is_current(&self) -> bool {
        Month::of(self.today.date) == self.month
    }
}

impl SignIn {
    /// Signs the user in for today (in `ENGAGE_TIMEZONE`); a repeat awards nothing.
    pub async fn sign_in(&self, user_id: i64) -> AppResult<SignInOutcome> {
        let today = self.infra.clock.today();
        let month = Month::of(today);
        let rules = &self.points.rules;
        let keys = &self.infra.keys;
        let (already, streak, awarded): (i64, i64, i64) = points::unless_held(
            || async move {
                let (season, season_seconds) = self.points.season_now();
                let mut conn = self
                    .infra
                    .durability
                    .connection(DurableWrite::Points, &self.infra.redis)
                    .await?;
                let reply: (i64, i64, i64) = SIGNIN_SIGN
                    .call(
                        [
                            keys.sign_bitmap(user_id, month),
                            keys.sign_bitmap(user_id, month.previous()),
                            keys.sign_streak(user_id),
                            keys.points_today(user_id, today),
                            keys.season_board_of(season, user_id),
                            keys.points_stream_of(user_id),
                            keys.points_hold_of(user_id),
                            keys.board_changes_of(season, user_id),
                        ],
                        (
                            user_id,
                            today.day(),
                            month.previous().days(),
                            month.previous().id(),
                            month.previous().previous().id(),
                            self.infra.clock.now_ms(),
                            season_seconds,
                            season.id(),
                            keys.board_channel_of(season, user_id),
                            DAILY_TTL_SECONDS,
                            BITMAP_TTL_SECONDS,
                            rules.rule(PointsType::SignIn).points,
                            rules.bonuses_arg(),
                            format!("signin:{user_id}:{today}"),
                            day_number(today),
                            keys.publish_command(),
                        ),
                    )
                    .invoke_async(&mut *conn)
                    .await?;
                drop(conn);
                self.points
                    .confirm_unless_held(reply.0, &keys.season_board_of(season, user_id))
                    .await?;
                Ok(reply)
            },
            |(already, _, _)| *already,
        )
        .await?;
        Ok(SignInOutcome {
            date: today,
            streak,
            points_awarded: awarded,
            already_signed: Status::of(SIGNIN_SIGN.name, already)? == Status::Already,
        })
    }

    /// Signs in a missed day of this month before today, at most `ENGAGE_MAKEUP_PER_MONTH`
    /// times a month, for the base point only.
    pub async fn make_up(&self, user_id: i64, date: NaiveDate) -> AppResult<SignInOutcome> {
        let today = self.infra.clock.today();
        let month = Month::of(today);
        if Month::of(date) != month || date >= today {
            return Err(AppError::bad_input(format!(
                "only a missed day of this month before today can be made up ({} to {})",
                month.first_day(),
                today.pred_opt().unwrap_or(today)
            )));
        }
        let keys = &self.infra.keys;
        let (status, streak, awarded, _left): (i64, i64, i64, i64) = points::unless_held(
            || async move {
                let (season, season_seconds) = self.points.season_now();
                let mut conn = self
                    .infra
                    .durability
                    .connection(DurableWrite::Points, &self.infra.redis)
                    .await?;
                let reply: (i64, i64, i64, i64) = SIGNIN_MAKE_UP
                    .call(
                        [
                            keys.sign_bitmap(user_id, month),
                            keys.sign_bitmap(user_id, month.previous()),
                            keys.sign_streak(user_id),
                            keys.points_today(user_id, today),
                            keys.season_board_of(season, user_id),
                            keys.points_stream_of(user_id),
                            keys.sign_make_ups(user_id, month),
                            keys.points_hold_of(user_id),
                            keys.board_changes_of(season, user_id),
                        ],
                        (
                            user_id,
                            date.day(),
                            today.day(),
                            month.previous().days(),
                            month.previous().id(),
                            month.previous().previous().id(),
                            self.settings.make_ups_per_month,
                            self.infra.clock.now_ms(),
                            season_seconds,
                            season.id(),
                            keys.board_channel_of(season, user_id),
                            DAILY_TTL_SECONDS,
                            MAKE_UP_COUNTER_TTL_SECONDS,
                            self.points.rules.rule(PointsType::SignIn).points,
                            format!("makeup:{user_id}:{date}"),
                            day_number(date),
                            keys.publish_command(),
                        ),
                    )
                    .invoke_async(&mut *conn)
                    .await?;
                drop(conn);
                self.points
                    .confirm_unless_held(reply.0, &keys.season_board_of(season, user_id))
                    .await?;
                Ok(reply)
            },
            |(status, _, _, _)| *status,
        )
        .await?;
        match Status::of(SIGNIN_MAKE_UP.name, status)? {
            Status::Ok => Ok(SignInOutcome {
                date,
                streak,
                points_awarded: awarded,
                already_signed: false,
            }),
            Status::Already => Ok(SignInOutcome {
                date,
                streak,
                points_awarded: 0,
                already_signed: true,
            }),
            // Its own code, not the script's generic refusal: a client offers the next month
            // here, where it would show an input error for BAD_USER_INPUT.
            Status::OverLimit => Err(AppError::client(
                ErrorCode::MakeupLimit,
                format!(
                    "no make-up sign-ins left this month (at most {})",
                    self.settings.make_ups_per_month
                ),
            )),
            refused => Err(refused.refusal("make-up sign-in refused")),
        }
    }

    /// A month's sign-ins (default: this month); months after this one are an input error.
    pub async fn calendar(&self, user_id: i64, month: Option<Month>) -> AppResult<Calendar> {
        let today = self.infra.clock.today();
        let current = Month::of(today);
        let shown = month.unwrap_or(current);
        if shown > current {
            return Err(AppError::bad_input("that month has not begun"));
        }
        let days = if shown == current {
            today.day()
        } else {
            shown.days()
        };
        let keys = &self.infra.keys;
        let mut conn = self.infra.redis.get().await?;
        let (bits, streak, make_ups_used, signed_today): (u64, i64, u32, i64) = SIGNIN_CALENDAR
            .call(
                [
                    keys.sign_bitmap(user_id, shown),
                    keys.sign_bitmap(user_id, current),
                    keys.sign_bitmap(user_id, current.previous()),
                    keys.sign_streak(user_id),
                    keys.sign_make_ups(user_id, shown),
                ],
                (
                    days,
                    today.day(),
                    current.previous().days(),
                    current.previous().id(),
                    current.previous().previous().id(),
                ),
            )
            .invoke_async(&mut *conn)
            .await?;
        let days = (0..days)
            .map(|day| bits >> (days - 1 - day) & 1 == 1)
            .collect();
        let make_ups_left = if shown == current {
            self.settings
                .make_ups_per_month
                .saturating_sub(make_ups_used)
        } else {
            0
        };
        Ok(Calendar {
            user_id,
            month: shown,
            days,
            make_ups_left,
            today: Today {
                date: today,
                signed: signed_today == 1,
                streak,
            },
        })
    }

    /// The calendar of the month of a day just signed (or made up), as it is now: one read
    /// of the calendar script. Rejected: have the sign-in scripts answer the month's bits and
    /// make-ups too, which would widen both scripts' keys and replies for a field that most
    /// clients of a sign-in never ask for.
    pub async fn calendar_of_day(&self, user_id: i64, day: NaiveDate) -> AppResult<Calendar> {
        self.calendar(user_id, Some(Month::of(day))).await
    }

    /// The days of a month a user signed by a make-up, from `sign_ins`.
    pub async fn made_up_days(&self, user_id: i64, month: Month) -> AppResult<Vec<u32>> {
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
