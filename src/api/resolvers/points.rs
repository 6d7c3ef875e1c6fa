//! `pointsToday`, `pointsHistory`, `awardPoints`.

use async_graphql::{Context, Object};

use crate::{
    api::schema::id::Id64,
    api::schema::{
        page::{decode_cursor, encode_cursor, PageInfo},
        page_size,
        points::{
            AwardResult, PointsByType, PointsEntry, PointsRecordConnection, PointsRecordEdge,
        },
        ContextExt,
    },
    features::points::{self, Points, PointsType},
    infra::{
        auth::{self, RoleGuard},
        error::AppResult,
    },
};

#[derive(Default)]
pub struct PointsQuery;

#[Object]
impl PointsQuery {
    /// The viewer's points today, per type, with each type's daily cap.
    #[graphql(guard = "RoleGuard::signed_in()")]
    async fn points_today(&self, ctx: &Context<'_>) -> AppResult<Vec<PointsByType>> {
        let viewer = auth::require_viewer(ctx)?;
        Ok(points::today(ctx.feature::<Points>(), viewer.user_id)
            .await?
            .into_iter()
            .map(Into::into)
            .collect())
    }

    /// The viewer's archived awards, newest first.
    #[graphql(
        guard = "RoleGuard::signed_in()",
        complexity = "first.unwrap_or(20).clamp(1, 100) as usize * child_complexity"
    )]
    async fn points_history(
        &self,
        ctx: &Context<'_>,
        #[graphql(default = 20)] first: Option<i32>,
        after: Option<String>,
    ) -> AppResult<PointsRecordConnection> {
        let first = first.unwrap_or(20);
        let viewer = auth::require_viewer(ctx)?;
        let first = page_size(first)?;
        let before = decode_cursor(after.as_deref())?;
        let (records, more) =
            points::history(ctx.feature::<Points>(), viewer.user_id, first, before).await?;
        let end_cursor = records.last().map(|r| encode_cursor(r.order));
        Ok(PointsRecordConnection {
            edges: records
                .into_iter()
                .map(|r| PointsRecordEdge {
                    cursor: encode_cursor(r.order),
                    node: PointsEntry(r),
                })
                .collect(),
            page_info: PageInfo {
                has_next_page: more,
                end_cursor,
            },
        })
    }
}

#[derive(Default)]
pub struct PointsMutation;

#[Object]
impl PointsMutation {
    /// Awards points for another service (service or admin token), once per idempotency
    /// key, within the type's daily cap.
    #[graphql(guard = "RoleGuard::service_or_admin()")]
    async fn award_points(
        &self,
        ctx: &Context<'_>,
        user_id: Id64,
        #[graphql(name = "type")] kind: PointsType,
        points: i32,
        idempotency_key: String,
    ) -> AppResult<AwardResult> {
        let user_id = user_id.0;
        Ok(points::award(
            ctx.feature::<Points>(),
            user_id,
            kind,
            i64::from(points),
            &points::service_key(&idempotency_key)?,
        )
        .await?
        .into())
    }
}
