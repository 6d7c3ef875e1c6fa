//! GraphQL types of users.

use async_graphql::{ComplexObject, Context, SimpleObject, ID};

use super::ContextExt;
use crate::{error::AppResult, ids, users::UserRecord};

#[derive(SimpleObject, Clone)]
#[graphql(complex)]
pub struct User {
    pub id: ID,
    pub name: String,
    pub avatar_url: Option<String>,
}

impl From<UserRecord> for User {
    fn from(user: UserRecord) -> Self {
        Self {
            id: ID(user.id.to_string()),
            name: user.name,
            avatar_url: user.avatar_url,
        }
    }
}

#[ComplexObject]
impl User {
    /// How many users follow this one.
    async fn followers(&self, ctx: &Context<'_>) -> AppResult<i64> {
        Ok(
            crate::feed::counts(ctx.state(), ids::parse(&self.id, "id")?)
                .await?
                .0,
        )
    }

    /// How many users this one follows.
    async fn following(&self, ctx: &Context<'_>) -> AppResult<i64> {
        Ok(
            crate::feed::counts(ctx.state(), ids::parse(&self.id, "id")?)
                .await?
                .1,
        )
    }
}
