//! GraphQL types of users: a user, and the change of a profile. The fields of a user are
//! in `profiles.rs`: they name the connection type, which names `User` (kept apart, the
//! modules import each other in one direction only).

use async_graphql::{dataloader::DataLoader, Context, InputObject, MaybeUndefined};

use crate::{
    features::users::{UserLoader, UserRecord},
    infra::error::AppResult,
};

#[derive(Clone)]
pub(crate) struct User(pub UserRecord);

/// A user by id through the request's batch loader (a placeholder if the row is gone).
pub(crate) async fn load_user(ctx: &Context<'_>, user_id: i64) -> AppResult<User> {
    let loader = ctx.data_unchecked::<DataLoader<UserLoader>>();
    let user = loader.load_one(user_id).await.map_err(|e| (*e).clone())?;
    Ok(User(
        user.unwrap_or_else(|| UserRecord::placeholder(user_id)),
    ))
}

/// A change of the viewer's profile: a field left out stays as it is; `avatarUrl` or
/// `bio` null (or empty) clears it.
#[derive(InputObject)]
pub(crate) struct UpdateProfileInput {
    /// 1 to 50 characters, no control characters.
    pub(crate) name: Option<String>,
    /// An https URL of at most 500 characters.
    pub(crate) avatar_url: MaybeUndefined<String>,
    /// At most 300 characters.
    pub(crate) bio: MaybeUndefined<String>,
}
