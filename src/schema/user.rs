//! GraphQL types of users.

use async_graphql::{SimpleObject, ID};

use crate::users::UserRecord;

#[derive(SimpleObject, Clone)]
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
