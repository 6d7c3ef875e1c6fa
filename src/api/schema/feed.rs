//! GraphQL types of follows.

use async_graphql::{ComplexObject, Context, SimpleObject};

use super::users::{load_user, User};
use crate::infra::error::AppResult;

/// What a follow or an unfollow answers: both users whose counts it moved. Their
/// `followers` and `following` are read when the payload is resolved, after the change.
#[derive(SimpleObject)]
#[graphql(complex)]
pub(crate) struct FollowPayload {
    #[graphql(skip)]
    pub(crate) followee: i64,
    #[graphql(skip)]
    pub(crate) follower: i64,
    /// Whether this call changed anything (false: already following, or not following).
    pub(crate) changed: bool,
}

#[ComplexObject]
impl FollowPayload {
    /// The user followed or unfollowed, with their new `followers`.
    async fn user(&self, ctx: &Context<'_>) -> AppResult<User> {
        load_user(ctx, self.followee).await
    }

    /// The signed-in user, with their new `following`.
    async fn viewer(&self, ctx: &Context<'_>) -> AppResult<User> {
        load_user(ctx, self.follower).await
    }
}
