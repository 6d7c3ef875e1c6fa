//! The fields of a `User`: a user's public profile.
//!
//! A `User` shows only what a user shows everyone: their name, avatar and bio, their
//! counts, their follow lists, their remarks and the time zone their days follow. Nothing
//! private (their token's role, their orders or sign-ins) is a field of it; those are the
//! viewer's own queries. The one exception, `pointsBalance`, answers only the user themself
//! or an admin.

use async_graphql::{dataloader::DataLoader, Context, Object};

use super::{
    connection::{Connection, Edge},
    page::{text_cost, PageArgs, PAGE},
    remarks::Remark,
    users::User,
    ContextExt,
};
use crate::{
    api::schema::id::UserId,
    api::schema::points::PointsBalance,
    features::{
        feed::{
            follows::{FollowCursor, FollowList},
            Feed,
        },
        remarks::Remarks,
        users::{UserLoader, UserRecord, MAX_BIO_CHARS},
    },
    features::{points::Points, signin::SignIn},
    infra::{
        auth::{self, Role},
        error::{AppError, AppResult},
    },
};

// A field that awaits a feature's work awaits it boxed. async-graphql resolves each field of
// a `User` in a future as large as the largest field's, and moves one such future to the
// heap for every field a query asks: `timeZone` inline made `id` and `name` cost 2 KiB
// each, and a leaderboard page asks for them forty times.
#[Object]
impl User {
    pub(crate) async fn id(&self) -> UserId {
        UserId::new(self.0.id)
    }

    async fn name(&self) -> &str {
        &self.0.name
    }

    async fn avatar_url(&self) -> Option<&str> {
        self.0.avatar_url.as_deref()
    }

    /// The user's IANA time zone, which the user's days and streak follow.
    async fn time_zone(&self, ctx: &Context<'_>) -> AppResult<String> {
        let claim = auth::viewer(ctx)
            .filter(|viewer| viewer.user_id == self.0.id)
            .and_then(|viewer| viewer.zone);
        let zone = Box::pin(ctx.feature::<SignIn>().zone_of(self.0.id, claim)).await?;
        Ok(zone.zone.name().to_string())
    }

    /// The user's points balance: the viewer's own, or any with an admin token
    /// (`FORBIDDEN` otherwise).
    async fn points_balance(&self, ctx: &Context<'_>) -> AppResult<PointsBalance> {
        let viewer = auth::require_viewer(ctx)?;
        if viewer.user_id != self.0.id && viewer.role != Role::Admin {
            return Err(AppError::forbidden(
                "a points balance is its user's own, or an admin's to see",
            ));
        }
        Ok(PointsBalance(
            Box::pin(ctx.feature::<Points>().balance(self.0.id)).await?,
        ))
    }

    /// What the user says of themselves (at most 300 characters).
    #[graphql(complexity = "BIO_COST")]
    async fn bio(&self) -> Option<&str> {
        self.0.bio.as_deref()
    }

    /// How many users follow this one.
    async fn follower_count(&self, ctx: &Context<'_>) -> AppResult<i64> {
        Box::pin(ctx.feature::<Feed>().follower_count(self.0.id)).await
    }

    /// How many users this one follows.
    async fn following_count(&self, ctx: &Context<'_>) -> AppResult<i64> {
        ctx.feature::<Feed>().following_count_exact(self.0.id).await
    }

    /// How many remarks this user has written.
    async fn remark_count(&self, ctx: &Context<'_>) -> AppResult<i64> {
        ctx.feature::<Remarks>().count_by_author(self.0.id).await
    }

    /// Whether the signed-in viewer follows this user (false when anonymous).
    async fn is_followed_by_me(&self, ctx: &Context<'_>) -> AppResult<bool> {
        match auth::viewer(ctx) {
            Some(viewer) if viewer.user_id != self.0.id => {
                ctx.feature::<Feed>()
                    .follows(viewer.user_id, self.0.id)
                    .await
            }
            _ => Ok(false),
        }
    }

    /// The users who follow this one, newest follow first: `first` (1 to 100, 20 unless
    /// given) after `after`.
    #[graphql(complexity = "PAGE.cost(first, child_complexity)")]
    async fn followers(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
    ) -> AppResult<Connection<User>> {
        Box::pin(follow_list(
            ctx,
            self.0.id,
            FollowList::Followers,
            first,
            after,
        ))
        .await
    }

    /// The users this one follows, newest follow first: `first` (1 to 100, 20 unless given)
    /// after `after`.
    #[graphql(complexity = "PAGE.cost(first, child_complexity)")]
    async fn following(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
    ) -> AppResult<Connection<User>> {
        Box::pin(follow_list(
            ctx,
            self.0.id,
            FollowList::Following,
            first,
            after,
        ))
        .await
    }

    /// This user's remarks, newest first: `first` (1 to 100, 20 unless given) after `after`.
    #[graphql(complexity = "PAGE.cost(first, child_complexity)")]
    async fn remarks(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
    ) -> AppResult<Connection<Remark>> {
        let args = PageArgs::keyset(first, after.as_deref(), None, None)?;
        // Hidden remarks are shown to their author and admins.
        let with_hidden = auth::viewer(ctx)
            .is_some_and(|v| v.user_id == self.0.id || v.role == auth::Role::Admin);
        let (remarks, more) = Box::pin(ctx.feature::<Remarks>().by_author(
            self.0.id,
            with_hidden,
            args,
        ))
        .await?;
        let nodes = remarks.into_iter().map(|record| Remark {
            record,
            author: Some(self.0.clone()),
            like: None,
        });
        Ok(Connection::keyset(
            nodes,
            |node| node.record.id,
            &args,
            more,
        ))
    }
}

/// A bio's text: its characters, at up to 4 bytes each.
const BIO_COST: usize = text_cost(MAX_BIO_CHARS * 4);

/// A page of a user's followers or followees, their records through the request's loader.
async fn follow_list(
    ctx: &Context<'_>,
    user_id: i64,
    list: FollowList,
    first: Option<i32>,
    after: Option<String>,
) -> AppResult<Connection<User>> {
    let first = PAGE.first(first)?;
    let after_given = after.is_some();
    let after = after.as_deref().map(FollowCursor::decode).transpose()?;
    let (cursors, more) = ctx
        .feature::<Feed>()
        .follow_page(user_id, list, first, after)
        .await?;
    let loader = ctx.data_unchecked::<DataLoader<UserLoader>>();
    let users = loader
        .load_many(cursors.iter().map(|c| c.user_id))
        .await
        .map_err(|e| (*e).clone())?;
    let edges = cursors
        .iter()
        .map(|cursor| Edge {
            cursor: cursor.encode(),
            node: User(
                users
                    .get(&cursor.user_id)
                    .cloned()
                    .unwrap_or_else(|| UserRecord::placeholder(cursor.user_id)),
            ),
        })
        .collect();
    Ok(Connection::new(edges, more, after_given))
}
