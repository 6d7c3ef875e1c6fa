//! GraphQL types of sign-in.

use async_graphql::{ComplexObject, Context, Enum, SimpleObject};

use crate::{
    api::schema::{scalars::Date, ContextExt},
    features::signin::{self, Calendar, MonthDays, SignIn, SignInOutcome},
    infra::{auth, clock::Month, error::AppResult},
};

/// What a day of a calendar was for the user, in the user's time zone.
#[derive(Enum, Copy, Clone, Eq, PartialEq)]
pub(crate) enum DayState {
    /// Signed on the day.
    Signed,
    /// Repaired later (`repairDay`, or the deprecated `makeUpSignIn`).
    MadeUp,
    /// Missed, and kept by a streak freeze.
    Frozen,
    Missed,
    /// After today; also today while it is not signed yet.
    Future,
    /// Before the user's first sign-in.
    BeforeJoining,
}

impl From<signin::DayState> for DayState {
    fn from(state: signin::DayState) -> Self {
        match state {
            signin::DayState::Signed => Self::Signed,
            signin::DayState::MadeUp => Self::MadeUp,
            signin::DayState::Frozen => Self::Frozen,
            signin::DayState::Missed => Self::Missed,
            signin::DayState::Future => Self::Future,
            signin::DayState::BeforeJoining => Self::BeforeJoining,
        }
    }
}

/// A month of the viewer's days; it says nothing of today (see `streak`).
#[derive(SimpleObject)]
pub(crate) struct MonthCalendar {
    /// `YYYY-MM`.
    pub(crate) month: String,
    /// One per day of the month, day 1 first.
    pub(crate) days: Vec<DayState>,
    /// Days signed, on the day or by a repair.
    pub(crate) signed_days: i64,
}

impl From<MonthDays> for MonthCalendar {
    fn from(month: MonthDays) -> Self {
        Self {
            month: month.month.dashed(),
            signed_days: month.signed_days() as i64,
            days: month.days.into_iter().map(DayState::from).collect(),
        }
    }
}

/// The viewer's streak as of the viewer's today.
#[derive(SimpleObject)]
pub(crate) struct StreakStatus {
    /// Days in a row ending today, or yesterday while today is unsigned, or before a gap
    /// that the freezes held will cover at the next sign-in.
    pub(crate) current: i64,
    /// The longest streak ever.
    pub(crate) longest: i64,
    pub(crate) freezes_held: i64,
    pub(crate) freezes_max: i64,
    pub(crate) signed_today: bool,
    /// No sign-in yet today and no freeze left.
    pub(crate) at_risk: bool,
    /// The viewer's today, in the viewer's time zone.
    pub(crate) today: Date,
    pub(crate) time_zone: String,
    /// The next streak length that pays a bonus.
    pub(crate) next_milestone: Option<i64>,
    /// Repairs left this month.
    pub(crate) make_ups_left: i64,
    /// Days back (yesterday is 1) that `repairDay` reaches.
    pub(crate) make_up_window_days: i64,
}

impl From<signin::StreakStatus> for StreakStatus {
    fn from(status: signin::StreakStatus) -> Self {
        Self {
            current: status.current,
            longest: status.longest,
            freezes_held: status.freezes_held,
            freezes_max: status.freezes_max,
            signed_today: status.signed_today,
            at_risk: status.at_risk(),
            today: Date(status.today),
            time_zone: status.time_zone.name().to_string(),
            next_milestone: Some(status.next_milestone),
            make_ups_left: status.make_ups_left,
            make_up_window_days: status.make_up_window_days,
        }
    }
}

/// What a sign-in or a make-up answers, with the calendar it changed.
#[derive(SimpleObject)]
#[graphql(complex)]
pub(crate) struct SignInResult {
    #[graphql(skip)]
    pub(crate) user_id: i64,
    /// The day signed, in the viewer's time zone.
    pub(crate) date: Date,
    #[graphql(deprecation = "Use `streak { current }`.")]
    pub(crate) streak: i64,
    pub(crate) points_awarded: i64,
    pub(crate) already_signed: bool,
}

impl SignInResult {
    pub(crate) fn new(user_id: i64, outcome: SignInOutcome) -> Self {
        Self {
            user_id,
            date: Date(outcome.date),
            streak: outcome.streak,
            points_awarded: outcome.points_awarded,
            already_signed: outcome.already_signed,
        }
    }
}

#[ComplexObject]
impl SignInResult {
    /// The signed day's month after this call, as `calendar(month:)` reads it (a client's
    /// cache keys it by `month`).
    async fn month(&self, ctx: &Context<'_>) -> AppResult<MonthCalendar> {
        let claim = auth::viewer(ctx).and_then(|viewer| viewer.zone);
        // Boxed, as the costlier fields of a `User` are (`profiles.rs`): inline, these
        // three made each of a sign-in's plain fields 2 KiB to resolve.
        let month = Some(Month::of(self.date.0));
        Ok(
            Box::pin(ctx.feature::<SignIn>().month(self.user_id, claim, month))
                .await?
                .into(),
        )
    }

    /// The viewer's streak after this call, as `streak` reads it.
    async fn status(&self, ctx: &Context<'_>) -> AppResult<StreakStatus> {
        let claim = auth::viewer(ctx).and_then(|viewer| viewer.zone);
        Ok(
            Box::pin(ctx.feature::<SignIn>().status(self.user_id, claim))
                .await?
                .into(),
        )
    }

    /// The calendar of the signed day's month after this call.
    async fn calendar(&self, ctx: &Context<'_>) -> AppResult<SignCalendar> {
        let claim = auth::viewer(ctx).and_then(|viewer| viewer.zone);
        let calendar = ctx
            .feature::<SignIn>()
            .calendar_of_day(self.user_id, claim, self.date.0);
        Ok(Box::pin(calendar).await?.into())
    }
}

/// A month of the viewer's sign-ins; `today` only when the month is the current one.
#[derive(SimpleObject)]
#[graphql(complex)]
pub(crate) struct SignCalendar {
    #[graphql(skip)]
    pub(crate) user_id: i64,
    #[graphql(skip)]
    pub(crate) shown: Month,
    /// `YYYY-MM`.
    pub(crate) month: String,
    /// One per day from day 1: up to today for this month, the whole month for past ones.
    pub(crate) days: Vec<bool>,
    #[graphql(deprecation = "Use `today.signed`; `today` is null for a past month.")]
    pub(crate) signed_today: bool,
    /// The current streak (ending today, or yesterday while today is unsigned), whatever
    /// the month.
    #[graphql(deprecation = "Use `today.streak`; `today` is null for a past month.")]
    pub(crate) streak: i64,
    pub(crate) signed_days: i64,
    /// Make-up sign-ins left this month; always 0 for a past month, whose days can no
    /// longer be made up.
    pub(crate) make_ups_left: i64,
    /// Today's sign-in; null unless `month` is the current month.
    pub(crate) today: Option<SignToday>,
}

/// Today's sign-in, in the viewer's time zone.
#[derive(SimpleObject)]
pub(crate) struct SignToday {
    pub(crate) date: Date,
    pub(crate) signed: bool,
    /// The current streak: ending today, or yesterday while today is unsigned.
    pub(crate) streak: i64,
}

impl From<Calendar> for SignCalendar {
    fn from(calendar: Calendar) -> Self {
        let today = calendar.is_current().then_some(SignToday {
            date: Date(calendar.today.date),
            signed: calendar.today.signed,
            streak: calendar.today.streak,
        });
        Self {
            user_id: calendar.user_id,
            shown: calendar.month,
            month: calendar.month.dashed(),
            signed_days: calendar.signed_days() as i64,
            days: calendar.days,
            signed_today: calendar.today.signed,
            streak: calendar.today.streak,
            make_ups_left: i64::from(calendar.make_ups_left),
            today,
        }
    }
}

#[ComplexObject]
impl SignCalendar {
    /// The days (of `days`, 1 = the 1st) signed by a make-up, as archived: a make-up shows
    /// here a moment after it was made.
    async fn made_up_days(&self, ctx: &Context<'_>) -> AppResult<Vec<u32>> {
        ctx.feature::<SignIn>()
            .made_up_days(self.user_id, self.shown)
            .await
    }
}
