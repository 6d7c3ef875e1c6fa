//! `pointsToday`, `pointsHistory`, `awardPoints`, `spendPoints`, `revokeAward`.

use async_graphql::{Context, Object};

use crate::{
    api::schema::id::UserId,
    api::schema::{
        connection::Connection,
        page::{list_cost, PageArgs, PAGE},
        points::{AwardResult, PointsBalance, PointsByType, PointsEntry},
        ContextExt,
    },
    features::points::{self, Points, PointsType},
    infra::{
        auth::{self, RoleGuard},
        error::AppResult,
    },
};

#[derive(Default)]
pub(crate) struct PointsQuery;

#[Object]
impl PointsQuery {
    /// The viewer's points today, per type, with each type's daily cap.
    #[graphql(
        guard = "RoleGuard::signed_in()",
        complexity = "list_cost(PointsType::ALL.len(), child_complexity)"
    )]
    async fn points_today(&self, ctx: &Context<'_>) -> AppResult<Vec<PointsByType>> {
        let viewer = auth::require_viewer(ctx)?;
        Ok(ctx
            .feature::<Points>()
            .today(viewer.user_id)
            .await?
            .into_iter()
            .map(Into::into)
            .collect())
    }

    /// The viewer's archived awards, spends and revokes, newest first: `first` (1 to 100;
    /// 20 when neither is given) after `after`, or `last` (1 to 100) before `before`, not
    /// both.
    #[graphql(
        guard = "RoleGuard::signed_in()",
        complexity = "PAGE.cost_either(first, last, child_complexity)"
    )]
    async fn points_history(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
        last: Option<i32>,
        before: Option<String>,
    ) -> AppResult<Connection<PointsEntry>> {
        let viewer = auth::require_viewer(ctx)?;
        let args = PageArgs::keyset(first, after.as_deref(), last, before.as_deref())?;
        let (records, more) = ctx
            .feature::<Points>()
            .history(viewer.user_id, args)
            .await?;
        let nodes = records.into_iter().map(PointsEntry);
        Ok(Connection::keyset(
            nodes,
            |entry| entry.0.order,
            &args,
            more,
        ))
    }
}

#[derive(Default)]
pub(crate) struct PointsMutation;

#[Object]
impl PointsMutation {
    /// Awards points for another service (service or admin token), once per idempotency
    /// key, within the type's daily cap.
    #[graphql(guard = "RoleGuard::service_or_admin()")]
    async fn award_points(
        &self,
        ctx: &Context<'_>,
        user_id: UserId,
        #[graphql(name = "type")] kind: PointsType,
        points: i32,
        idempotency_key: String,
    ) -> AppResult<AwardResult> {
        let user_id = user_id.0;
        let outcome = ctx
            .feature::<Points>()
            .award(
                user_id,
                kind,
                i64::from(points),
                &points::service_key(&idempotency_key)?,
            )
            .await?;
        Ok(AwardResult::new(user_id, kind, outcome))
    }

    /// Spends the viewer's points, once per idempotency key (a repeat spends nothing and
    /// answers the balance), atomically against the balance: `INSUFFICIENT_POINTS` when it
    /// is short, and nothing is spent. `amount` more than 0; `reason` 1 to 200 characters;
    /// `idempotencyKey` 1 to 128.
    #[graphql(guard = "RoleGuard::signed_in()")]
    async fn spend_points(
        &self,
        ctx: &Context<'_>,
        amount: i32,
        reason: String,
        idempotency_key: String,
    ) -> AppResult<PointsBalance> {
        let viewer = auth::require_viewer(ctx)?;
        let spent = ctx
            .feature::<Points>()
            .spend(
                viewer.user_id,
                i64::from(amount),
                &reason,
                &points::balance::spend_key(&idempotency_key)?,
            )
            .await?;
        Ok(PointsBalance(spent.balance))
    }

    /// Revokes (admin) the award a user was given under `idempotencyKey` (the key as
    /// `awardPoints` was given it, or an internal award's): its points come off the user's
    /// balance, which may go below zero by that much, and off its season's board. Once: a
    /// repeat changes nothing. `NOT_FOUND` for a key the user has no award under.
    #[graphql(guard = "RoleGuard::admin()")]
    async fn revoke_award(
        &self,
        ctx: &Context<'_>,
        user_id: UserId,
        idempotency_key: String,
        reason: String,
    ) -> AppResult<PointsBalance> {
        Ok(PointsBalance(
            ctx.feature::<Points>()
                .revoke(user_id.0, &idempotency_key, &reason)
                .await?,
        ))
    }
}
