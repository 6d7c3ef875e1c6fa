//! GraphQL types of seasons and leaderboards.

use std::sync::Arc;

use async_graphql::{Context, Object, SimpleObject};

use super::{
    id::SeasonId,
    page::list_cost,
    scalars::DateTime,
    users::{load_user, User},
    ContextExt,
};
use crate::{
    features::{
        leaderboard::{Leaderboards, RankEntry as Entry, SeasonInfo},
        users::{UserDirectory, UserRecord},
    },
    infra::{cache::IdHasher, error::AppResult},
};

/// The winners an archived season keeps.
const WINNERS: usize = 3;

pub(crate) struct RankEntry {
    entry: Entry,
    /// The user, when the entry was read with its page's users ([`with_users`]).
    user: Option<UserRecord>,
}

impl RankEntry {
    pub(crate) fn new(entry: Entry) -> Self {
        Self { entry, user: None }
    }
}

#[Object]
impl RankEntry {
    /// 1 = first.
    async fn rank(&self) -> i64 {
        self.entry.rank
    }

    async fn points(&self) -> i64 {
        self.entry.points
    }

    async fn user(&self, ctx: &Context<'_>) -> AppResult<User> {
        match &self.user {
            Some(user) => Ok(User(user.clone())),
            None => load_user(ctx, self.entry.user_id).await,
        }
    }
}

pub(crate) fn entries(entries: Vec<Entry>) -> Vec<RankEntry> {
    entries.into_iter().map(RankEntry::new).collect()
}

/// Entries with their users read at once when the query asks for them (`wanted`): one
/// lookup for a page, where each entry's `user` through the batch loader cost a task, a
/// 1 ms batching window and a channel per entry, and was most of a page's time. When the
/// lookup fails, each `user` field tries on its own and fails alone, as before.
pub(crate) async fn with_users(
    ctx: &Context<'_>,
    entries: Vec<Entry>,
    wanted: bool,
) -> Vec<RankEntry> {
    if !wanted {
        return self::entries(entries);
    }
    let ids: Vec<i64> = entries.iter().map(|e| e.user_id).collect();
    let found = ctx
        .feature::<Arc<UserDirectory>>()
        .find_many::<IdHasher>(&ids);
    let mut users = match found.await {
        Ok(users) => users,
        Err(_) => return self::entries(entries),
    };
    entries
        .into_iter()
        .map(|entry| {
            let user = users
                .remove(&entry.user_id)
                .unwrap_or_else(|| UserRecord::placeholder(entry.user_id));
            RankEntry {
                entry,
                user: Some(user),
            }
        })
        .collect()
}

pub(crate) struct Season(pub SeasonInfo);

#[Object]
impl Season {
    pub(crate) async fn id(&self) -> SeasonId {
        SeasonId::new(self.0.month)
    }

    /// e.g. "November 2026".
    async fn name(&self) -> String {
        self.0.month.name()
    }

    async fn begins_at(&self) -> DateTime {
        DateTime(self.0.begins)
    }

    /// Exclusive: the instant the next season begins.
    async fn ends_at(&self) -> DateTime {
        DateTime(self.0.ends)
    }

    async fn current(&self) -> bool {
        self.0.current
    }

    /// The top three, once the season has been archived.
    #[graphql(complexity = "list_cost(WINNERS, child_complexity)")]
    async fn winners(&self, ctx: &Context<'_>) -> AppResult<Vec<RankEntry>> {
        Ok(entries(
            ctx.feature::<Leaderboards>().winners(self.0.month).await?,
        ))
    }
}

#[derive(SimpleObject)]
pub(crate) struct Leaderboard {
    pub(crate) season: Season,
    /// The viewer's entry, even when it is not on this page; null if unranked.
    pub(crate) me: Option<RankEntry>,
    pub(crate) entries: Vec<RankEntry>,
    /// Members of the board.
    pub(crate) total: i64,
}

#[derive(SimpleObject)]
pub(crate) struct LeaderboardSnapshot {
    pub(crate) season: Season,
    pub(crate) entries: Vec<RankEntry>,
}
