//! GraphQL types of users.

use async_graphql::{dataloader::DataLoader, Context, Object};

use super::ContextExt;
use crate::{
    api::schema::{id::UserId, points::PointsBalance},
    features::{
        feed::Feed,
        points::Points,
        users::{UserLoader, UserRecord},
    },
    infra::{
        auth::{self, Role},
        error::{AppError, AppResult},
    },
};

#[derive(Clone)]
pub(crate) struct User(pub UserRecord);

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
        let claim = crate::infra::auth::viewer(ctx)
            .filter(|viewer| viewer.user_id == self.0.id)
            .and_then(|viewer| viewer.zone);
        Ok(ctx
            .feature::<crate::features::signin::SignIn>()
            .zone_of(self.0.id, claim)
            .await?
            .zone
            .name()
            .to_string())
    }

    /// How many users follow this one.
    async fn followers(&self, ctx: &Context<'_>) -> AppResult<i64> {
        ctx.feature::<Feed>().follower_count(self.0.id).await
    }

    /// How many users this one follows.
    async fn following(&self, ctx: &Context<'_>) -> AppResult<i64> {
        ctx.feature::<Feed>().following_count(self.0.id).await
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
            ctx.feature::<Points>().balance(self.0.id).await?,
        ))
    }
}

/// A user by id through the request's batch loader (a placeholder if the row is gone).
pub(crate) async fn load_user(ctx: &Context<'_>, user_id: i64) -> AppResult<User> {
    let loader = ctx.data_unchecked::<DataLoader<UserLoader>>();
    let user = loader.load_one(user_id).await.map_err(|e| (*e).clone())?;
    Ok(User(
        user.unwrap_or_else(|| UserRecord::placeholder(user_id)),
    ))
}
