//! `seasons`, `leaderboard`, `leaderboardAroundMe`, `leaderboardChanged`, `myRankChanged`.

use async_graphql::{Context, Object, Subscription, ID};
use futures::{Stream, StreamExt};

use crate::{
    api::{
        http::ws::SubscriptionSlot,
        schema::{
            leaderboard::{entries, Leaderboard, LeaderboardSnapshot, RankEntry, Season},
            page_size, ContextExt,
        },
    },
    features::leaderboard::{self, live, parse_season, season_info, Leaderboards},
    infra::{
        auth::{self, RoleGuard},
        error::{AppError, AppResult},
    },
};

#[derive(Default)]
pub struct LeaderboardQuery;

#[Object]
impl LeaderboardQuery {
    /// The current season, the previous one and every archived one, newest first.
    async fn seasons(&self, ctx: &Context<'_>) -> AppResult<Vec<Season>> {
        Ok(leaderboard::seasons(ctx.feature::<Leaderboards>())
            .await?
            .into_iter()
            .map(Season)
            .collect())
    }

    /// A page of a season's board (default: the current season), ranks `offset + 1` on.
    #[graphql(complexity = "first.unwrap_or(20).clamp(1, 100) as usize * child_complexity")]
    async fn leaderboard(
        &self,
        ctx: &Context<'_>,
        season_id: Option<ID>,
        #[graphql(default = 20)] first: Option<i32>,
        #[graphql(default = 0)] offset: Option<i32>,
    ) -> AppResult<Leaderboard> {
        let first = first.unwrap_or(20);
        let offset = offset.unwrap_or(0);
        let boards = ctx.feature::<Leaderboards>();
        let season = parse_season(boards, season_id.as_ref().map(|id| id.as_str()))?;
        let first = page_size(first)?;
        if !(0..=1_000_000_000).contains(&offset) {
            return Err(AppError::bad_input(format!(
                "offset must be between 0 and 1000000000, got {offset}"
            )));
        }
        let viewer = auth::viewer(ctx).map(|v| v.user_id);
        let board = leaderboard::board(boards, season, viewer, first, offset as usize).await?;
        Ok(Leaderboard {
            season: Season(season_info(boards, board.season)),
            me: board.me.map(RankEntry),
            entries: entries(board.entries),
            total: board.total,
        })
    }

    /// The viewer's neighbours: up to `radius` entries above and below, the viewer included.
    #[graphql(guard = "RoleGuard::signed_in()")]
    async fn leaderboard_around_me(
        &self,
        ctx: &Context<'_>,
        season_id: Option<ID>,
        #[graphql(default = 5)] radius: Option<i32>,
    ) -> AppResult<Vec<RankEntry>> {
        let radius = radius.unwrap_or(5);
        let viewer = auth::require_viewer(ctx)?;
        if !(0..=50).contains(&radius) {
            return Err(AppError::bad_input("radius must be between 0 and 50"));
        }
        let boards = ctx.feature::<Leaderboards>();
        let season = parse_season(boards, season_id.as_ref().map(|id| id.as_str()))?;
        Ok(entries(
            leaderboard::around(boards, season, viewer.user_id, radius as usize).await?,
        ))
    }
}

#[derive(Default)]
pub struct LeaderboardSubscription;

#[Subscription]
impl LeaderboardSubscription {
    /// The season's top `top` now, then a new snapshot whenever it changes (a few per
    /// second at most).
    async fn leaderboard_changed(
        &self,
        ctx: &Context<'_>,
        season_id: Option<ID>,
        #[graphql(default = 10)] top: Option<i32>,
    ) -> Result<impl Stream<Item = LeaderboardSnapshot>, AppError> {
        let top = page_size(top.unwrap_or(10))?;
        let boards = ctx.feature::<Leaderboards>().clone();
        let season = season_id
            .map(|id| parse_season(&boards, Some(id.as_str())))
            .transpose()?;
        let slot = SubscriptionSlot::acquire(ctx)?;
        let snapshots = live::board_changes(&boards, season, top).await?;
        Ok(snapshots.map(move |(season, top)| {
            let _held = &slot;
            LeaderboardSnapshot {
                season: Season(season_info(&boards, season)),
                entries: entries(top),
            }
        }))
    }

    /// The viewer's rank in the current season now (once ranked), then each change.
    async fn my_rank_changed(
        &self,
        ctx: &Context<'_>,
    ) -> Result<impl Stream<Item = RankEntry>, AppError> {
        let viewer = auth::require_viewer(ctx)?;
        let slot = SubscriptionSlot::acquire(ctx)?;
        let changes =
            live::my_current_rank_changes(ctx.feature::<Leaderboards>(), viewer.user_id).await?;
        Ok(changes.map(move |entry| {
            let _held = &slot;
            RankEntry(entry)
        }))
    }
}
