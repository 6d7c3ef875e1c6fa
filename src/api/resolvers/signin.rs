//! `signCalendar`, `signIn`, `makeUpSignIn`.

use async_graphql::{Context, Object};

use crate::{
    api::schema::{
        scalars::Date,
        signin::{SignCalendar, SignInResult},
        ContextExt,
    },
    features::signin::SignIn,
    infra::{
        auth::{self, RoleGuard},
        clock::Month,
        error::{AppError, AppResult},
    },
};

#[derive(Default)]
pub(crate) struct SignInQuery;

#[Object]
impl SignInQuery {
    /// The viewer's sign-ins of a month (`YYYY-MM`, default this month).
    #[graphql(guard = "RoleGuard::signed_in()")]
    async fn sign_calendar(
        &self,
        ctx: &Context<'_>,
        month: Option<String>,
    ) -> AppResult<SignCalendar> {
        let viewer = auth::require_viewer(ctx)?;
        let month = month
            .map(|m| {
                Month::parse_dashed(m.trim())
                    .ok_or_else(|| AppError::bad_input("month must be YYYY-MM"))
            })
            .transpose()?;
        Ok(ctx
            .feature::<SignIn>()
            .calendar(viewer.user_id, month)
            .await?
            .into())
    }
}

#[derive(Default)]
pub(crate) struct SignInMutation;

#[Object]
impl SignInMutation {
    /// Signs in for today; a repeat answers `alreadySigned: true` and awards nothing.
    #[graphql(guard = "RoleGuard::signed_in()")]
    async fn sign_in(&self, ctx: &Context<'_>) -> AppResult<SignInResult> {
        let viewer = auth::require_viewer(ctx)?;
        let outcome = ctx.feature::<SignIn>().sign_in(viewer.user_id).await?;
        Ok(SignInResult::new(viewer.user_id, outcome))
    }

    /// Signs in a missed day of this month before today, for the base point;
    /// MAKEUP_LIMIT once the month's make-ups are used up.
    #[graphql(guard = "RoleGuard::signed_in()")]
    async fn make_up_sign_in(&self, ctx: &Context<'_>, date: Date) -> AppResult<SignInResult> {
        let viewer = auth::require_viewer(ctx)?;
        let outcome = ctx
            .feature::<SignIn>()
            .make_up(viewer.user_id, date.0)
            .await?;
        Ok(SignInResult::new(viewer.user_id, outcome))
    }
}
