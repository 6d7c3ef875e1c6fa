//! A profile's follower and following lists, and the counts shown beside them.
//!
//! The lists are read from `follows` in SQL, the record of every follow, newest first by
//! (follow time, user id) with the indexes of migration 0016. A follow or an unfollow is
//! acknowledged once SQL holds it, so a page read after it shows it, on any instance, and
//! a page is one index range: follows and unfollows landing between two pages move no row
//! of a later page into an earlier one (the cursor is the last row's key), so paging never
//! repeats a user; a user followed again after an unfollow comes back at the top.
//! Rejected: a sorted set per user in Redis, which would be a second copy of `follows` to
//! keep in step (and to rebuild) for a list that is read a page at a time.
//!
//! Counts: `followerCount` is Redis's follower count, exact per change (see [`super::changes`]),
//! because a big author's followers are too many to count per read; `followingCount` and
//! `isFollowedByMe` read SQL's primary key, exact whatever the interleaving of a follow and
//! an unfollow, which Redis's following set may trail for a moment.

use sqlx::Row;

use super::Feed;
use crate::infra::{
    error::{AppError, AppResult},
    page::split_page,
};

/// Which side of a user's follows a list shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FollowList {
    /// Who follows the user.
    Followers,
    /// Whom the user follows.
    Following,
}

/// A row's place in a follow list: when the follow was made, and the other user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowCursor {
    pub followed_at_ms: i64,
    pub user_id: i64,
}

impl FollowCursor {
    pub fn encode(&self) -> String {
        format!("f{}.{}", self.followed_at_ms, self.user_id)
    }

    pub fn decode(text: &str) -> AppResult<Self> {
        let bad = || AppError::bad_input("not a cursor of a follow list");
        let (at, user) = text
            .strip_prefix('f')
            .and_then(|rest| rest.split_once('.'))
            .ok_or_else(bad)?;
        Ok(Self {
            followed_at_ms: at.parse().map_err(|_| bad())?,
            user_id: user.parse().map_err(|_| bad())?,
        })
    }
}

impl Feed {
    /// A page of `user_id`'s followers or followees, newest follow first, after `after`:
    /// the users with their cursors, and whether more follow.
    pub async fn follow_page(
        &self,
        user_id: i64,
        list: FollowList,
        first: usize,
        after: Option<FollowCursor>,
    ) -> AppResult<(Vec<FollowCursor>, bool)> {
        let (mine, theirs) = match list {
            FollowList::Followers => ("followee_id", "follower_id"),
            FollowList::Following => ("follower_id", "followee_id"),
        };
        let after = after.unwrap_or(FollowCursor {
            followed_at_ms: i64::MAX,
            user_id: i64::MAX,
        });
        let sql = format!(
            "SELECT {theirs} AS user_id, created_at_ms FROM follows WHERE {mine} = $1 \
             AND (created_at_ms < $2 OR (created_at_ms = $2 AND {theirs} < $3)) \
             ORDER BY created_at_ms DESC, {theirs} DESC LIMIT $4"
        );
        let rows = sqlx::query(&sql)
            .bind(user_id)
            .bind(after.followed_at_ms)
            .bind(after.user_id)
            .bind(first as i64 + 1)
            .fetch_all(&self.infra.db.pool)
            .await?;
        let cursors = rows
            .iter()
            .map(|row| {
                Ok(FollowCursor {
                    followed_at_ms: row.try_get("created_at_ms")?,
                    user_id: row.try_get("user_id")?,
                })
            })
            .collect::<Result<Vec<_>, sqlx::Error>>()?;
        Ok(split_page(cursors, first))
    }

    /// How many users `user_id` follows, in SQL.
    pub async fn following_count_exact(&self, user_id: i64) -> AppResult<i64> {
        let row = sqlx::query("SELECT COUNT(*) AS n FROM follows WHERE follower_id = $1")
            .bind(user_id)
            .fetch_one(&self.infra.db.pool)
            .await?;
        Ok(row.try_get("n")?)
    }

    /// Whether `follower` follows `followee`, in SQL.
    pub async fn follows(&self, follower: i64, followee: i64) -> AppResult<bool> {
        let row = sqlx::query(
            "SELECT COUNT(*) AS n FROM follows WHERE follower_id = $1 AND followee_id = $2",
        )
        .bind(follower)
        .bind(followee)
        .fetch_one(&self.infra.db.pool)
        .await?;
        Ok(row.try_get::<i64, _>("n")? > 0)
    }
}
