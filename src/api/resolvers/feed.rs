//! `feed`, `follow`, `unfollow`.

use async_graphql::{Context, Object};

use crate::{
    api::schema::id::Id64,
    api::schema::{
        page::PageInfo,
        page_size,
        remarks::{RemarkConnection, RemarkEdge},
        ContextExt,
    },
    features::{
        feed::{self, Feed, FeedCursor},
        remarks::{self, Remarks},
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
    /// Remarks of the users the viewer follows, newest first.
    #[graphql(
        guard = "RoleGuard::signed_in()",
        complexity = "first.unwrap_or(20).clamp(1, 100) as usize * child_complexity"
    )]
    async fn feed(
        &self,
        ctx: &Context<'_>,
        #[graphql(default = 20)] first: Option<i32>,
        after: Option<String>,
    ) -> AppResult<RemarkConnection> {
        let viewer = auth::require_viewer(ctx)?;
        let first = page_size(first.unwrap_or(20))?;
        let after = after.as_deref().map(FeedCursor::decode).transpose()?;
        let (entries, more) =
            feed::page(ctx.feature::<Feed>(), viewer.user_id, first, after).await?;
        let ids: Vec<i64> = entries.iter().map(|(id, _)| *id).collect();
        let mut found = remarks::find_many(ctx.feature::<Remarks>(), &ids).await?;
        let edges: Vec<RemarkEdge> = entries
            .into_iter()
            .filter_map(|(id, cursor)| {
                found.remove(&id).map(|r| RemarkEdge {
                    cursor: cursor.encode(),
                    node: r.into(),
                })
            })
            .collect();
        let end_cursor = edges.last().map(|e| e.cursor.clone());
        Ok(RemarkConnection {
            edges,
            page_info: PageInfo {
                has_next_page: more,
                end_cursor,
            },
        })
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
        feed::follow(ctx.feature::<Feed>(), viewer.user_id, user_id.0).await
    }

    /// Stops following a user; true when this call ended a follow (false: not following).
    #[graphql(guard = "RoleGuard::signed_in()")]
    async fn unfollow(&self, ctx: &Context<'_>, user_id: Id64) -> AppResult<bool> {
        let viewer = auth::require_viewer(ctx)?;
        feed::unfollow(ctx.feature::<Feed>(), viewer.user_id, user_id.0).await
    }
}
