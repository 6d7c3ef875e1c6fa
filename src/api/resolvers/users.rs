//! `viewer`, `user`, `updateProfile`.

use std::sync::Arc;

use async_graphql::{Context, MaybeUndefined, Object};

use crate::{
    api::schema::{
        id::UserId,
        users::{UpdateProfileInput, User},
        ContextExt,
    },
    features::users::{ProfileChange, UserDirectory},
    infra::{
        auth::{self, RoleGuard},
        error::AppResult,
    },
};

#[derive(Default)]
pub(crate) struct UserQuery;

#[Object]
impl UserQuery {
    /// The signed-in user; null without a token.
    async fn viewer(&self, ctx: &Context<'_>) -> AppResult<Option<User>> {
        let Some(viewer) = auth::viewer(ctx) else {
            return Ok(None);
        };
        Ok(ctx
            .feature::<Arc<UserDirectory>>()
            .find(viewer.user_id)
            .await?
            .map(User))
    }

    /// A user's public profile; null when there is no such user.
    async fn user(&self, ctx: &Context<'_>, id: UserId) -> AppResult<Option<User>> {
        Ok(ctx
            .feature::<Arc<UserDirectory>>()
            .profile(id.0)
            .await?
            .map(User))
    }
}

/// A field of an input as a change: left out, null, or a value.
fn given(field: &MaybeUndefined<String>) -> Option<Option<&str>> {
    match field {
        MaybeUndefined::Undefined => None,
        MaybeUndefined::Null => Some(None),
        MaybeUndefined::Value(text) => Some(Some(text.as_str())),
    }
}

#[derive(Default)]
pub(crate) struct UserMutation;

#[Object]
impl UserMutation {
    /// Changes the viewer's name, avatar or bio; answers the profile as it is now.
    #[graphql(guard = "RoleGuard::signed_in()")]
    async fn update_profile(
        &self,
        ctx: &Context<'_>,
        input: UpdateProfileInput,
    ) -> AppResult<User> {
        let viewer = auth::require_viewer(ctx)?;
        let change = ProfileChange::new(
            input.name.as_deref(),
            given(&input.avatar_url),
            given(&input.bio),
        )?;
        let users = ctx.feature::<Arc<UserDirectory>>();
        let now_ms = ctx.clock().now_ms();
        Ok(User(
            users
                .update_profile(viewer.user_id, &change, now_ms)
                .await?,
        ))
    }
}
