//! GraphQL types of seasons and leaderboards.

use async_graphql::{Context, Object, SimpleObject, ID};

use super::{
    users::{load_user, User},
    ContextExt,
};
use crate::{
    features::leaderboard::{Leaderboards, RankEntry as Entry, SeasonInfo},
    infra::error::AppResult,
};

pub struct RankEntry(pub Entry);

#[Object]
impl RankEntry {
    /// 1 = first.
    async fn rank(&self) -> i64 {
        self.0.rank
    }

    async fn points(&self) -> i64 {
        self.0.points
    }

    async fn user(&self, ctx: &Context<'_>) -> AppResult<User> {
        load_user(ctx, self.0.user_id).await
    }
}

pub fn entries(entries: Vec<Entry>) -> Vec<RankEntry> {
    entries.into_iter().map(RankEntry).collect()
}

pub struct Season(pub SeasonInfo);

#[Object]
impl Season {
    /// `YYYYMM`.
    async fn id(&self) -> ID {
        ID(self.0.month.id().to_string())
    }

    /// e.g. "November 2026".
    async fn name(&self) -> String {
        self.0.month.name()
    }

    async fn begins_at(&self, ctx: &Context<'_>) -> String {
        ctx.clock().format(self.0.begins)
    }

    /// Exclusive: the instant the next season begins.
    async fn ends_at(&self, ctx: &Context<'_>) -> String {
        ctx.clock().format(self.0.ends)
    }

    async fn current(&self) -> bool {
        self.0.current
    }

    /// The top three, once the season has been archived.
    async fn winners(&self, ctx: &Context<'_>) -> AppResult<Vec<RankEntry>> {
        Ok(entries(
            ctx.feature::<Leaderboards>().winners(self.0.month).await?,
        ))
    }
}

#[derive(SimpleObject)]
pub struct Leaderboard {
    pub season: Season,
    /// The viewer's entry, even when it is not on this page; null if unranked.
    pub me: Option<RankEntry>,
    pub entries: Vec<RankEntry>,
    /// Members of the board.
    pub total: i64,
}

#[derive(SimpleObject)]
pub struct LeaderboardSnapshot {
    pub season: Season,
    pub entries: Vec<RankEntry>,
}
