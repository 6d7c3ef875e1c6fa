//! Daily sign-in: a bitmap per user per month (bit `day - 1`), streaks that go on
//! across month boundaries, make-up sign-ins for missed days of this month, and SIGN_IN
//! points with the streak bonus, all in one Lua script per action.

pub mod recovery;
pub mod settings;

use chrono::{Datelike, NaiveDate};
use redis::FromRedisValue;
use sqlx::Row;

use crate::{
    features::points::{Points, PointsType, DAILY_TTL_SECONDS},
    infra::{
        clock::{day_number, Month},
        error::{AppError, AppResult, ErrorCode},
        redis::{
            durability::DurableWrite,
            scripts::{
                Replies, Reply, SigninCalendar, SigninCalendarArgs, SigninMakeUp, SigninMakeUpArgs,
                SigninSign, SigninSignArgs,
            },
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

    pub(crate) fn sign_make_ups(&self, user_id: i64, month: Month) -> String {
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
pub(crate) const BITMAP_TTL_SECONDS: u64 = 400 * 24 * 3600;
/// A month's make-up counter outlives the month a little.
pub(crate) const MAKE_UP_COUNTER_TTL_SECONDS: u64 = 40 * 24 * 3600;

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

/// What a sign-in and a make-up pass alike, read anew for each call (the clock moves while
/// a rebuild holds points back): the user's keys of this month and the award's season.
struct Signing {
    user_id: i64,
    today: NaiveDate,
    month: Month,
    season: Month,
    season_seconds: i64,
    now_ms: i64,
}

/// A sign-in's or a make-up's call, run again while a rebuild holds points back: the keys
/// and arguments both scripts take (their headers name them alike), listed once here, with
/// those of `$keys` and `$args` of its own.
macro_rules! signing_call {
    ($sign_in:expr, $user:expr, $today:expr, $keys:ident { $($key:ident: $key_value:expr),* $(,)? },
     $args:ident { $($arg:ident: $arg_value:expr),* $(,)? } $(,)?) => {{
        let sign_in: &SignIn = $sign_in;
        sign_in
            .infra
            .durable_scripts(DurableWrite::Points)
            .run_while_held(|| {
                let signing = sign_in.signing($user, $today);
                let (keys, user, month, today) =
                    (&sign_in.infra.keys, signing.user_id, signing.month, signing.today);
                (
                    $keys {
                        this_month: keys.sign_bitmap(user, month),
                        previous_month: keys.sign_bitmap(user, month.previous()),
                        streak: keys.sign_streak(user),
                        daily: keys.points_today(user, today),
                        board: keys.season_board_of(signing.season, user),
                        events: keys.points_stream_of(user),
                        hold: keys.points_hold_of(user),
                        changes: keys.board_changes_of(signing.season, user),
                        balances: keys.points_balances_of(user),
                        $($key: $key_value),*
                    },
                    $args {
                        user,
                        previous_month_days: month.previous().days(),
                        previous_month: month.previous().id(),
                        month_before: month.previous().previous().id(),
                        now_ms: signing.now_ms,
                        season_seconds: signing.season_seconds,
                        season: signing.season.id(),
                        channel: keys.board_channel_of(signing.season, user),
                        daily_ttl_seconds: DAILY_TTL_SECONDS,
                        base_points: sign_in.points.rules.rule(PointsType::SignIn).points,
                        publish: keys.publish_command(),
                        $($arg: $arg_value),*
                    },
                )
            })
    }};
}

/// What a sign-in or a make-up answers: `{ status, streak, points_awarded }` (a make-up's
/// make-ups left follow, unread: the calendar tells them).
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

    /// Every answer but HELD recorded the sign-in's event.
    fn wrote(&self) -> bool {
        self.status != Status::Held
    }
}

impl Replies for SigninSign {
    type Reply = SignReply;
}

impl Replies for SigninMakeUp {
    type Reply = SignReply;
}

impl SignIn {
    fn signing(&self, user_id: i64, today: NaiveDate) -> Signing {
        let (season, season_seconds) = self.points.season_now();
        Signing {
            user_id,
            today,
            month: Month::of(today),
            season,
            season_seconds,
            now_ms: self.infra.clock.now_ms(),
        }
    }

    /// Signs the user in for today (in `ENGAGE_TIMEZONE`); a repeat awards nothing.
    pub(crate) async fn sign_in(&self, user_id: i64) -> AppResult<SignInOutcome> {
        let today = self.infra.clock.today();
        let reply = signing_call!(
            self,
            user_id,
            today,
            SigninSign {},
            SigninSignArgs {
                day: today.day(),
                bitmap_ttl_seconds: BITMAP_TTL_SECONDS,
                bonuses: self.points.rules.bonuses_arg(),
                idempotency: format!("signin:{user_id}:{today}"),
                day_number: day_number(today),
            },
        )
        .await?;
        Ok(SignInOutcome {
            date: today,
            streak: reply.streak,
            points_awarded: reply.awarded,
            already_signed: reply.status == Status::Already,
        })
    }

    /// Signs in a missed day of this month before today, at most `ENGAGE_MAKEUP_PER_MONTH`
    /// times a month, for the base point only.
    pub(crate) async fn make_up(&self, user_id: i64, date: NaiveDate) -> AppResult<SignInOutcome> {
        let today = self.infra.clock.today();
        let month = Month::of(today);
        if Month::of(date) != month || date >= today {
            return Err(AppError::bad_input(format!(
                "only a missed day of this month before today can be made up ({} to {})",
                month.first_day(),
                today.pred_opt().unwrap_or(today)
            )));
        }
        let reply = signing_call!(
            self,
            user_id,
            today,
            SigninMakeUp {
                make_ups: self.infra.keys.sign_make_ups(user_id, month),
            },
            SigninMakeUpArgs {
                day: date.day(),
                today: today.day(),
                make_ups_allowed: self.settings.make_ups_per_month,
                counter_ttl_seconds: MAKE_UP_COUNTER_TTL_SECONDS,
                idempotency: format!("makeup:{user_id}:{date}"),
                day_number: day_number(date),
            },
        )
        .await?;
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
    pub(crate) async fn calendar(&self, user_id: i64, month: Option<Month>) -> AppResult<Calendar> {
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
        let calendar = SigninCalendar {
            shown: keys.sign_bitmap(user_id, shown),
            this_month: keys.sign_bitmap(user_id, current),
            previous_month: keys.sign_bitmap(user_id, current.previous()),
            streak: keys.sign_streak(user_id),
            make_ups: keys.sign_make_ups(user_id, shown),
        };
        let args = SigninCalendarArgs {
            days,
            today: today.day(),
            previous_month_days: current.previous().days(),
            previous_month: current.previous().id(),
            month_before: current.previous().previous().id(),
        };
        let (bits, streak, make_ups_used, signed_today) =
            self.infra.scripts().call(&calendar, &args).await?;
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
    pub(crate) async fn calendar_of_day(
        &self,
        user_id: i64,
        day: NaiveDate,
    ) -> AppResult<Calendar> {
        self.calendar(user_id, Some(Month::of(day))).await
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

/// `{ bits of the shown days (day 1 most significant), streak, make-ups used, signed today }`.
impl Replies for SigninCalendar {
    type Reply = (u64, i64, u32, i64);
}
