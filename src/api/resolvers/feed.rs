//! `feed`, `followUser`, `unfollowUser` (and `follow`, `unfollow`, which they succeed).

use async_graphql::{Context, Object};

use crate::{
    api::schema::id::UserId,
    api::schema::{
        connection::{Connection, Edge},
        feed::FollowPayload,
        page::{cursor_sides, PageArgs, PAGE},
        remarks::Remark,
        ContextExt,
    },
    features::{
        feed::{Feed, FeedCursor, FeedRange},
        remarks::Remarks,
    },
    infra::{
        auth::{self, RoleGuard},
        error::AppResult,
    },
};

#[derive(Default)]
pub(crate) struct FeedQuery;

#[Object]
impl FeedQuery {
    /// Remarks of the users the viewer follows, newest first: `first` (1 to 100; 20 when
    /// neither is given) after `after`, or `last` (1 to 100) before `before`, not both.
    #[graphql(
        guard = "RoleGuard::signed_in()",
        complexity = "PAGE.cost_either(first, last, child_complexity)"
    )]
    async fn feed(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
        last: Option<i32>,
        before: Option<String>,
    ) -> AppResult<Connection<Remark>> {
        let viewer = auth::require_viewer(ctx)?;
        let (rows, backward) = PAGE.first_or_last(first, last)?;
        let decode = |cursor: Option<String>| cursor.as_deref().map(FeedCursor::decode).transpose();
        let range = FeedRange {
            after: decode(after)?,
            before: decode(before)?,
            backward,
        };
        let (after_given, before_given) = (range.after.is_some(), range.before.is_some());
        let args = PageArgs {
            first: rows,
            after: range,
        };
        let (entries, more) = ctx.feature::<Feed>().page(viewer.user_id, args).await?;
        let (has_next_page, has_previous_page) =
            cursor_sides(backward, after_given, before_given, more);
        let ids: Vec<i64> = entries.iter().map(|(id, _)| *id).collect();
        let mut found = ctx.feature::<Remarks>().find_many(&ids).await?;
        let edges = entries
            .into_iter()
            .filter_map(|(id, cursor)| {
                found
                    .remove(&id)
                    .filter(|r| r.shown_to(None))
                    .map(|r| Edge {
                        cursor: cursor.encode(),
                        node: r.into(),
                    })
            })
            .collect();
        Ok(Connection::new(edges, has_next_page, has_previous_page))
    }
}

#[derive(Default)]
pub(crate) struct FeedMutation;

#[Object]
impl FeedMutation {
    /// Follows a user; true when this call started the follow (false: already following).
    #[graphql(
        guard = "RoleGuard::signed_in()",
        deprecation = "Use `followUser`, which answers both users with their new counts."
    )]
    async fn follow(&self, ctx: &Context<'_>, user_id: UserId) -> AppResult<bool> {
        Ok(change_follow(ctx, user_id, Follow::Start).await?.changed)
    }

    /// Stops following a user; true when this call ended a follow (false: not following).
    #[graphql(
        guard = "RoleGuard::signed_in()",
        deprecation = "Use `unfollowUser`, which answers both users with their new counts."
    )]
    async fn unfollow(&self, ctx: &Context<'_>, user_id: UserId) -> AppResult<bool> {
        Ok(change_follow(ctx, user_id, Follow::Stop).await?.changed)
    }

    /// Follows a user: `changed` false when already following.
    #[graphql(guard = "RoleGuard::signed_in()")]
    async fn follow_user(&self, ctx: &Context<'_>, user_id: UserId) -> AppResult<FollowPayload> {
        change_follow(ctx, user_id, Follow::Start).await
    }

    /// Stops following a user: `changed` false when not following.
    #[graphql(guard = "RoleGuard::signed_in()")]
    async fn unfollow_user(&self, ctx: &Context<'_>, user_id: UserId) -> AppResult<FollowPayload> {
        change_follow(ctx, user_id, Follow::Stop).await
    }
}

enum Follow {
    Start,
    Stop,
}

/// The one path of `follow`, `unfollow` and their successors.
async fn change_follow(
    ctx: &Context<'_>,
    user_id: UserId,
    change: Follow,
) -> AppResult<FollowPayload> {
    let viewer = auth::require_viewer(ctx)?;
    let feed = ctx.feature::<Feed>();
    let changed = match change {
        Follow::Start => feed.follow(viewer.user_id, user_id.0).await?,
        Follow::Stop => feed.unfollow(viewer.user_id, user_id.0).await?,
    };
    Ok(FollowPayload {
        followee: user_id.0,
        follower: viewer.user_id,
        changed,
    })
}
