//! `streak`, `calendar`, `calendarYear`, `signIn`, `repairDay`, `setTimeZone`; the
//! deprecated `signCalendar` and `makeUpSignIn`.

use async_graphql::{Context, Object};

use crate::{
    api::schema::{
        scalars::Date,
        signin::{MonthCalendar, SignCalendar, SignInResult, StreakStatus},
        users::{load_user, User},
        ContextExt,
    },
    features::signin::SignIn,
    infra::{
        auth::{self, RoleGuard},
        clock::Month,
        error::{AppError, AppResult},
    },
};

fn parse_month(month: Option<String>) -> AppResult<Option<Month>> {
    month
        .map(|m| {
            Month::parse_dashed(m.trim())
                .ok_or_else(|| AppError::bad_input("month must be YYYY-MM"))
        })
        .transpose()
}

#[derive(Default)]
pub(crate) struct SignInQuery;

#[Object]
impl SignInQuery {
    /// The viewer's sign-ins of a month (`YYYY-MM`, default this month).
    #[graphql(
        guard = "RoleGuard::signed_in()",
        deprecation = "Use `calendar` for the month and `streak` for today."
    )]
    async fn sign_calendar(
        &self,
        ctx: &Context<'_>,
        month: Option<String>,
    ) -> AppResult<SignCalendar> {
        let viewer = auth::require_viewer(ctx)?;
        Ok(ctx
            .feature::<SignIn>()
            .calendar(viewer.user_id, viewer.zone, parse_month(month)?)
            .await?
            .into())
    }

    /// The viewer's streak as of the viewer's today.
    #[graphql(guard = "RoleGuard::signed_in()")]
    async fn streak(&self, ctx: &Context<'_>) -> AppResult<StreakStatus> {
        let viewer = auth::require_viewer(ctx)?;
        Ok(ctx
            .feature::<SignIn>()
            .status(viewer.user_id, viewer.zone)
            .await?
            .into())
    }

    /// A month of the viewer's days (`YYYY-MM`, default this month in the viewer's zone).
    #[graphql(guard = "RoleGuard::signed_in()")]
    async fn calendar(&self, ctx: &Context<'_>, month: Option<String>) -> AppResult<MonthCalendar> {
        let viewer = auth::require_viewer(ctx)?;
        Ok(ctx
            .feature::<SignIn>()
            .month(viewer.user_id, viewer.zone, parse_month(month)?)
            .await?
            .into())
    }

    /// The twelve months of a year of the viewer's days, January first.
    #[graphql(guard = "RoleGuard::signed_in()")]
    async fn calendar_year(&self, ctx: &Context<'_>, year: i32) -> AppResult<Vec<MonthCalendar>> {
        let viewer = auth::require_viewer(ctx)?;
        Ok(ctx
            .feature::<SignIn>()
            .year(viewer.user_id, viewer.zone, year)
            .await?
            .into_iter()
            .map(MonthCalendar::from)
            .collect())
    }
}

#[derive(Default)]
pub(crate) struct SignInMutation;

#[Object]
impl SignInMutation {
    /// Signs in for the viewer's today; a repeat answers `alreadySigned: true` and awards
    /// nothing.
    #[graphql(guard = "RoleGuard::signed_in()")]
    async fn sign_in(&self, ctx: &Context<'_>) -> AppResult<SignInResult> {
        let viewer = auth::require_viewer(ctx)?;
        let outcome = ctx
            .feature::<SignIn>()
            .sign_in(viewer.user_id, viewer.zone)
            .await?;
        Ok(SignInResult::new(viewer.user_id, outcome))
    }

    /// Signs in a missed day of this month before today, for the base point;
    /// MAKEUP_LIMIT once the month's make-ups are used up.
    #[graphql(
        guard = "RoleGuard::signed_in()",
        deprecation = "Use `repairDay`, which reaches across month ends."
    )]
    async fn make_up_sign_in(&self, ctx: &Context<'_>, date: Date) -> AppResult<SignInResult> {
        let viewer = auth::require_viewer(ctx)?;
        let outcome = ctx
            .feature::<SignIn>()
            .make_up(viewer.user_id, viewer.zone, date.0)
            .await?;
        Ok(SignInResult::new(viewer.user_id, outcome))
    }

    /// Repairs a missed day among the last `makeUpWindowDays`, across month and year ends;
    /// MAKEUP_LIMIT once the month's repairs are used up. The day shows MADE_UP.
    #[graphql(guard = "RoleGuard::signed_in()")]
    async fn repair_day(&self, ctx: &Context<'_>, date: Date) -> AppResult<StreakStatus> {
        let viewer = auth::require_viewer(ctx)?;
        let signin = ctx.feature::<SignIn>();
        signin.repair(viewer.user_id, viewer.zone, date.0).await?;
        Ok(signin.status(viewer.user_id, viewer.zone).await?.into())
    }

    /// Buys a streak freeze with `ENGAGE_FREEZE_COST` points of the viewer's balance, once
    /// per `idempotencyKey` (a repeat changes nothing): INSUFFICIENT_POINTS when the balance
    /// is short, CONFLICT when the viewer holds the most freezes already (nothing spent).
    #[graphql(guard = "RoleGuard::signed_in()")]
    async fn buy_streak_freeze(
        &self,
        ctx: &Context<'_>,
        idempotency_key: String,
    ) -> AppResult<StreakStatus> {
        let viewer = auth::require_viewer(ctx)?;
        let status = ctx
            .feature::<SignIn>()
            .buy_freeze(viewer.user_id, viewer.zone, &idempotency_key)
            .await?;
        Ok(status.into())
    }

    /// Sets the viewer's time zone (an IANA name; BAD_USER_INPUT otherwise), at most once a
    /// day (CONFLICT). The day running goes on; the new zone counts from the next day that
    /// has begun in neither zone.
    #[graphql(guard = "RoleGuard::signed_in()")]
    async fn set_time_zone(&self, ctx: &Context<'_>, zone: String) -> AppResult<User> {
        let viewer = auth::require_viewer(ctx)?;
        ctx.feature::<SignIn>()
            .set_time_zone(viewer.user_id, viewer.zone, &zone)
            .await?;
        load_user(ctx, viewer.user_id).await
    }
}
