//! GraphQL types of sign-in.

use async_graphql::{ComplexObject, Context, SimpleObject};

use crate::{
    api::schema::{scalars::Date, ContextExt},
    features::signin::{Calendar, SignIn, SignInOutcome},
    infra::{clock::Month, error::AppResult},
};

/// What a sign-in or a make-up answers, with the calendar it changed.
#[derive(SimpleObject)]
#[graphql(complex)]
pub(crate) struct SignInResult {
    #[graphql(skip)]
    pub(crate) user_id: i64,
    /// The day signed, in the service's time zone.
    pub(crate) date: Date,
    #[graphql(deprecation = "Use `calendar { today { streak } }`.")]
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
    /// The calendar of the signed day's month after this call.
    async fn calendar(&self, ctx: &Context<'_>) -> AppResult<SignCalendar> {
        Ok(ctx
            .feature::<SignIn>()
            .calendar_of_day(self.user_id, self.date.0)
            .await?
            .into())
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

/// Today's sign-in, in the service's time zone.
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
