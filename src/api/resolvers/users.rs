//! `viewer`.

use std::sync::Arc;

use async_graphql::{Context, Object};

use crate::{
    api::schema::{users::User, ContextExt},
    features::users::UserDirectory,
    infra::{auth, error::AppResult},
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
}
