//! A user's profile: what they say of themselves (name, avatar, bio), changed by
//! `updateProfile` and read fresh by `user(id)`.
//!
//! SQL is the record; Redis's names (`Keys::user_names`) are rewritten at each change, so
//! every instance's `user(id)` shows the change at once (it reads Redis, then SQL, never
//! only this instance's memory). Other fields show a user through each instance's memory
//! and see a change within `RECORD_TTL`: a remark's author on a page, a leaderboard's
//! names. Rejected: telling every instance to forget (pub/sub), for fields whose staleness
//! is a few minutes of an old avatar.

use std::sync::Arc;

use super::{remember_names, UserDirectory, UserRecord, USER_SELECT};
use crate::infra::error::{AppError, AppResult};

pub const MAX_NAME_CHARS: usize = 50;
pub const MAX_BIO_CHARS: usize = 300;
const MAX_AVATAR_URL_CHARS: usize = 500;

/// A validated change of a profile: `None` leaves a field as it is; `Some(None)` clears an
/// avatar or a bio (a name cannot be cleared).
#[derive(Debug, Clone, Default)]
pub struct ProfileChange {
    name: Option<String>,
    avatar_url: Option<Option<String>>,
    bio: Option<Option<String>>,
}

impl ProfileChange {
    /// Checks each field given: a name of 1 to 50 characters without control characters,
    /// an https avatar URL of at most 500 characters without spaces, a bio of at most 300
    /// characters without NUL. Text is trimmed; an empty bio or avatar clears it.
    pub fn new(
        name: Option<&str>,
        avatar_url: Option<Option<&str>>,
        bio: Option<Option<&str>>,
    ) -> AppResult<Self> {
        let name = name
            .map(|name| {
                let name = name.trim();
                if name.is_empty()
                    || name.chars().count() > MAX_NAME_CHARS
                    || name.chars().any(char::is_control)
                {
                    return Err(AppError::bad_input(format!(
                        "name must have 1 to {MAX_NAME_CHARS} characters, none of them control characters"
                    )));
                }
                Ok(name.to_string())
            })
            .transpose()?;
        let avatar_url = avatar_url
            .map(|url| {
                let url = url.map(str::trim).filter(|url| !url.is_empty());
                if let Some(url) = url {
                    if !url.starts_with("https://")
                        || url.len() <= "https://".len()
                        || url.chars().count() > MAX_AVATAR_URL_CHARS
                        || url.chars().any(|c| c.is_whitespace() || c.is_control())
                    {
                        return Err(AppError::bad_input(format!(
                            "avatarUrl must be an https URL of at most {MAX_AVATAR_URL_CHARS} characters"
                        )));
                    }
                }
                Ok(url.map(str::to_string))
            })
            .transpose()?;
        let bio = bio
            .map(|bio| {
                let bio = bio.map(str::trim).filter(|bio| !bio.is_empty());
                if let Some(bio) = bio {
                    if bio.chars().count() > MAX_BIO_CHARS || bio.contains('\0') {
                        return Err(AppError::bad_input(format!(
                            "bio must have at most {MAX_BIO_CHARS} characters, none of them NUL"
                        )));
                    }
                }
                Ok(bio.map(str::to_string))
            })
            .transpose()?;
        Ok(Self {
            name,
            avatar_url,
            bio,
        })
    }
}

impl UserDirectory {
    /// Changes the user's profile in SQL (writing their row first if their first sight is
    /// still queued), then Redis's names and this instance's memory; the profile as it is now.
    pub async fn update_profile(
        &self,
        user_id: i64,
        change: &ProfileChange,
        now_ms: i64,
    ) -> AppResult<UserRecord> {
        let default_name = self
            .known
            .lock()
            .expect("poisoned")
            .queued
            .get(&user_id)
            .cloned()
            .unwrap_or_else(|| format!("user{user_id}"));
        let db = &self.infra.db;
        let mut tx = db.pool.begin().await?;
        sqlx::query(
            "INSERT INTO users (id, name, created_at_ms) VALUES ($1, $2, $3) \
             ON CONFLICT (id) DO NOTHING",
        )
        .bind(user_id)
        .bind(&default_name)
        .bind(now_ms)
        .execute(&mut *tx)
        .await?;
        let mut sets = Vec::new();
        if change.name.is_some() {
            sets.push("name");
        }
        if change.avatar_url.is_some() {
            sets.push("avatar_url");
        }
        if change.bio.is_some() {
            sets.push("bio");
        }
        if !sets.is_empty() {
            let assignments: Vec<String> = sets
                .iter()
                .enumerate()
                .map(|(i, column)| format!("{column} = ${}", i + 2))
                .collect();
            let sql = format!("UPDATE users SET {} WHERE id = $1", assignments.join(", "));
            let mut query = sqlx::query(&sql).bind(user_id);
            if let Some(name) = &change.name {
                query = query.bind(name.clone());
            }
            if let Some(url) = &change.avatar_url {
                query = query.bind(url.clone());
            }
            if let Some(bio) = &change.bio {
                query = query.bind(bio.clone());
            }
            query.execute(&mut *tx).await?;
        }
        let row = sqlx::query(&format!("{USER_SELECT} WHERE id = $1"))
            .bind(user_id)
            .fetch_one(&mut *tx)
            .await?;
        let user = UserRecord::from_row(&row)?;
        tx.commit().await?;
        remember_names(&self.infra, std::slice::from_ref(&user)).await;
        self.records.insert(user_id, Arc::new(user.clone()));
        Ok(user)
    }

    /// A user as every instance sees them now: Redis's names, then SQL (not this instance's
    /// memory, which another instance's `updateProfile` does not reach).
    pub async fn profile(&self, user_id: i64) -> AppResult<Option<UserRecord>> {
        if let Some(user) = self.cached_names(&[user_id]).await.pop() {
            self.records.insert(user_id, Arc::new(user.clone()));
            return Ok(Some(user));
        }
        self.records.forget(|id| *id == user_id);
        self.find(user_id).await
    }
}
