//! `feed`, `follow`, `unfollow`.

use async_graphql::{Context, Object};

use crate::{
    api::schema::id::Id64,
    api::schema::{
        connection::{Connection, Edge},
        page::{PageArgs, PAGE},
        remarks::Remark,
        ContextExt,
    },
    features::{
        feed::{Feed, FeedCursor},
        remarks::Remarks,
    },
    infra::{
        auth::{self, RoleGuard},
        error::AppResult,
    },
};

#[derive(Default)]
pub struct FeedQuery;

#[Object]
impl FeedQuery {
    /// Remarks of the users the viewer follows, newest first. Forward only (`first`,
    /// `after`); `pageInfo.hasPreviousPage` is true when `after` is given.
    #[graphql(
        guard = "RoleGuard::signed_in()",
        complexity = "PAGE.cost(first, child_complexity)"
    )]
    async fn feed(
        &self,
        ctx: &Context<'_>,
        #[graphql(default_with = "PAGE.default_first()")] first: Option<i32>,
        after: Option<String>,
    ) -> AppResult<Connection<Remark>> {
        let viewer = auth::require_viewer(ctx)?;
        let has_previous_page = after.is_some();
        let args = PageArgs::decoded(first, after.as_deref(), |after| {
            after.map(FeedCursor::decode).transpose()
        })?;
        let (entries, more) = ctx.feature::<Feed>().page(viewer.user_id, args).await?;
        let ids: Vec<i64> = entries.iter().map(|(id, _)| *id).collect();
        let mut found = ctx.feature::<Remarks>().find_many(&ids).await?;
        let edges = entries
            .into_iter()
            .filter_map(|(id, cursor)| {
                found.remove(&id).map(|r| Edge {
                    cursor: cursor.encode(),
                    node: r.into(),
                })
            })
            .collect();
        Ok(Connection::new(edges, more, has_previous_page))
    }
}

#[derive(Default)]
pub struct FeedMutation;

#[Object]
impl FeedMutation {
    /// Follows a user; true when this call started the follow (false: already following).
    #[graphql(guard = "RoleGuard::signed_in()")]
    async fn follow(&self, ctx: &Context<'_>, user_id: Id64) -> AppResult<bool> {
        let viewer = auth::require_viewer(ctx)?;
        ctx.feature::<Feed>()
            .follow(viewer.user_id, user_id.0)
            .await
    }

    /// Stops following a user; true when this call ended a follow (false: not following).
    #[graphql(guard = "RoleGuard::signed_in()")]
    async fn unfollow(&self, ctx: &Context<'_>, user_id: Id64) -> AppResult<bool> {
        let viewer = auth::require_viewer(ctx)?;
        ctx.feature::<Feed>()
            .unfollow(viewer.user_id, user_id.0)
            .await
    }
}
