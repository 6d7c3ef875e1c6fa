//! `seasons`, `leaderboard`, `leaderboardAroundMe`, `leaderboardChanged`, `myRankChanged`.

use async_graphql::{Context, Object, Subscription};
use futures::{Stream, StreamExt};

use crate::{
    api::{
        live::SubscriptionSlot,
        schema::{
            id::SeasonId,
            leaderboard::{
                entries, with_users, Leaderboard, LeaderboardSnapshot, RankEntry, Season,
            },
            page::{list_cost, Limit, PAGE},
            ContextExt,
        },
    },
    features::leaderboard::Leaderboards,
    infra::{
        auth::{self, RoleGuard},
        error::{AppError, AppResult},
    },
};

#[derive(Default)]
pub(crate) struct LeaderboardQuery;

#[Object]
impl LeaderboardQuery {
    /// The current season, the previous one and every archived one, newest first.
    #[graphql(complexity = "list_cost(SEASONS_PRICED, child_complexity)")]
    async fn seasons(&self, ctx: &Context<'_>) -> AppResult<Vec<Season>> {
        Ok(ctx
            .feature::<Leaderboards>()
            .seasons()
            .await?
            .into_iter()
            .map(Season)
            .collect())
    }

    /// A page of a season's board (default: the current season), ranks `offset + 1` on.
    #[graphql(complexity = "PAGE.cost(first, child_complexity)")]
    async fn leaderboard(
        &self,
        ctx: &Context<'_>,
        season_id: Option<SeasonId>,
        #[graphql(default_with = "PAGE.default_first()")] first: Option<i32>,
        #[graphql(default = 0)] offset: Option<i32>,
    ) -> AppResult<Leaderboard> {
        let first = PAGE.first(first)?;
        let offset = offset.unwrap_or(0);
        let boards = ctx.feature::<Leaderboards>();
        let season = boards.season_or_current(season_id.map(|id| id.0))?;
        if !(0..=1_000_000_000).contains(&offset) {
            return Err(AppError::bad_input(format!(
                "offset must be between 0 and 1000000000, got {offset}"
            )));
        }
        let viewer = auth::viewer(ctx).map(|v| v.user_id);
        let board = boards.board(season, viewer, first, offset as usize).await?;
        let look = ctx.look_ahead();
        let users_wanted =
            look.field("entries").field("user").exists() || look.field("me").field("user").exists();
        let has_me = board.me.is_some();
        let mut page = with_users(
            ctx,
            board.me.into_iter().chain(board.entries).collect(),
            users_wanted,
        )
        .await;
        let me = has_me.then(|| page.remove(0));
        Ok(Leaderboard {
            season: Season(boards.season_info(board.season)),
            me,
            entries: page,
            total: board.total,
        })
    }

    /// The viewer's neighbours: up to `radius` entries above and below, the viewer included.
    #[graphql(
        guard = "RoleGuard::signed_in()",
        complexity = "list_cost(2 * radius.unwrap_or(5).clamp(0, MAX_RADIUS) as usize + 1, \
                      child_complexity)"
    )]
    async fn leaderboard_around_me(
        &self,
        ctx: &Context<'_>,
        season_id: Option<SeasonId>,
        #[graphql(default = 5)] radius: Option<i32>,
    ) -> AppResult<Vec<RankEntry>> {
        let radius = radius.unwrap_or(5);
        let viewer = auth::require_viewer(ctx)?;
        if !(0..=MAX_RADIUS).contains(&radius) {
            return Err(AppError::bad_input(format!(
                "radius must be between 0 and {MAX_RADIUS}"
            )));
        }
        let boards = ctx.feature::<Leaderboards>();
        let season = boards.season_or_current(season_id.map(|id| id.0))?;
        let around = boards
            .around(season, viewer.user_id, radius as usize)
            .await?;
        Ok(with_users(ctx, around, ctx.look_ahead().field("user").exists()).await)
    }
}

/// The most neighbours above and below the viewer `leaderboardAroundMe` returns.
const MAX_RADIUS: i32 = 50;

/// How many seasons `seasons` is priced at: the current, the previous and three years of
/// archives. The list grows by one a month, so an instance older than that answers more
/// than it was priced at (a season and its three winners are some 500 bytes).
const SEASONS_PRICED: usize = 38;

/// A watched top: 10 unless asked, at most a page.
const TOP: Limit = Limit::new(10, 100);

#[derive(Default)]
pub(crate) struct LeaderboardSubscription;

#[Subscription]
impl LeaderboardSubscription {
    /// The season's top `top` now, then a new snapshot whenever it changes (a few per
    /// second at most).
    #[graphql(complexity = "TOP.cost(top, child_complexity)")]
    async fn leaderboard_changed(
        &self,
        ctx: &Context<'_>,
        season_id: Option<SeasonId>,
        #[graphql(default_with = "TOP.default_first()")] top: Option<i32>,
    ) -> Result<impl Stream<Item = LeaderboardSnapshot>, AppError> {
        let top = TOP.first(top)?;
        let boards = ctx.feature::<Leaderboards>().clone();
        let season = season_id
            .map(|id| boards.season_or_current(Some(id.0)))
            .transpose()?;
        let slot = SubscriptionSlot::acquire(ctx)?;
        let snapshots = boards.board_changes(season, top).await?;
        Ok(slot
            .hold(snapshots)
            .map(move |(season, top)| LeaderboardSnapshot {
                season: Season(boards.season_info(season)),
                entries: entries(top),
            }))
    }

    /// The viewer's rank in the current season now (once ranked), then each change.
    async fn my_rank_changed(
        &self,
        ctx: &Context<'_>,
    ) -> Result<impl Stream<Item = RankEntry>, AppError> {
        let viewer = auth::require_viewer(ctx)?;
        let slot = SubscriptionSlot::acquire(ctx)?;
        let changes = ctx
            .feature::<Leaderboards>()
            .my_current_rank_changes(viewer.user_id)
            .await?;
        Ok(slot.hold(changes).map(RankEntry::new))
    }
}
