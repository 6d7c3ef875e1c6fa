//! `boards`, `board`, `boardAroundMe`, `createBoard`, `submitScore`, `joinBoard`,
//! `removeBoardRecord`, `closeBoardPeriod`, `boardChanged`, `myBoardRankChanged`.

use async_graphql::{Context, Object, Subscription};
use futures::{Stream, StreamExt};

use crate::{
    api::live::SubscriptionSlot,
    api::schema::{
        boards::{Board, BoardPage, BoardRecord, BoardRewardGrant, CreateBoardInput},
        connection::Connection,
        id::UserId,
        page::{list_cost, Limit, PageArgs, PAGE},
        scalars::Json,
        ContextExt,
    },
    features::{
        boards::{
            close::MAX_GRANTS,
            writes::{Caller, Submission},
            BoardOperator, BoardReward, Boards, NewBoard, SortOrder,
        },
        vouchers::Vouchers,
    },
    infra::{
        auth::{self, Role, RoleGuard},
        error::{AppError, AppResult},
    },
};

/// The most boards `boards` pages through.
const MAX_BOARDS_OFFSET: usize = 100_000;
/// The most records above and below the viewer `boardAroundMe` answers.
const MAX_RADIUS: i32 = 50;

#[derive(Default)]
pub(crate) struct BoardQuery;

#[Object]
impl BoardQuery {
    /// Every board, in the order they were created.
    #[graphql(complexity = "PAGE.cost(first, child_complexity)")]
    async fn boards(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
    ) -> AppResult<Connection<Board>> {
        let args = PageArgs::offset(first, after.as_deref(), MAX_BOARDS_OFFSET)?;
        let offset = args.after;
        let (defs, more) = ctx.feature::<Boards>().list(offset, args.first).await?;
        let end = offset + defs.len();
        Ok(Connection::offset(
            defs.into_iter()
                .enumerate()
                .map(|(i, def)| (offset + i, Board(def))),
            offset,
            end,
            more,
        ))
    }

    /// A page of a board's period (default: the current one), ranks `offset + 1` on; among
    /// the viewer and whom they follow with `friendsOnly`.
    #[graphql(complexity = "PAGE.cost(first, child_complexity)")]
    async fn board(
        &self,
        ctx: &Context<'_>,
        key: String,
        period: Option<String>,
        #[graphql(default = 20)] first: Option<i32>,
        #[graphql(default = 0)] offset: Option<i32>,
        #[graphql(default_with = "Some(false)")] friends_only: Option<bool>,
    ) -> AppResult<BoardPage> {
        let first = PAGE.first(first)?;
        let offset = offset.unwrap_or(0);
        if !(0..=1_000_000_000).contains(&offset) {
            return Err(AppError::bad_input(format!(
                "offset must be between 0 and 1000000000, got {offset}"
            )));
        }
        let boards = ctx.feature::<Boards>();
        let viewer = auth::viewer(ctx).map(|v| v.user_id);
        let page = boards
            .page(
                &key,
                period.as_deref(),
                viewer,
                first,
                offset as usize,
                friends_only.unwrap_or(false),
            )
            .await?;
        Ok(BoardPage {
            board: Board(boards.get(&key).await?),
            period: page.period,
            total: page.total,
            me: page.me.map(BoardRecord),
            records: page.records.into_iter().map(BoardRecord).collect(),
        })
    }

    /// The rewards boards paid the viewer (at most 100), newest first.
    #[graphql(
        guard = "RoleGuard::signed_in()",
        complexity = "list_cost(MAX_GRANTS as usize, child_complexity)"
    )]
    async fn my_board_rewards(&self, ctx: &Context<'_>) -> AppResult<Vec<BoardRewardGrant>> {
        let viewer = auth::require_viewer(ctx)?;
        Ok(ctx
            .feature::<Boards>()
            .rewards_of(viewer.user_id)
            .await?
            .into_iter()
            .map(BoardRewardGrant)
            .collect())
    }

    /// The viewer's neighbours on a board's current period: up to `radius` records above and
    /// below, the viewer's included.
    #[graphql(
        guard = "RoleGuard::signed_in()",
        complexity = "list_cost(2 * radius.unwrap_or(5).clamp(0, MAX_RADIUS) as usize + 1, \
                      child_complexity)"
    )]
    async fn board_around_me(
        &self,
        ctx: &Context<'_>,
        key: String,
        #[graphql(default = 5)] radius: Option<i32>,
        #[graphql(default_with = "Some(false)")] friends_only: Option<bool>,
    ) -> AppResult<Vec<BoardRecord>> {
        let viewer = auth::require_viewer(ctx)?;
        let radius = radius.unwrap_or(5);
        if !(0..=MAX_RADIUS).contains(&radius) {
            return Err(AppError::bad_input(format!(
                "radius must be between 0 and {MAX_RADIUS}"
            )));
        }
        Ok(ctx
            .feature::<Boards>()
            .around(
                &key,
                viewer.user_id,
                radius as usize,
                friends_only.unwrap_or(false),
            )
            .await?
            .into_iter()
            .map(BoardRecord)
            .collect())
    }
}

#[derive(Default)]
pub(crate) struct BoardMutation;

#[Object]
impl BoardMutation {
    /// Creates a board (admin).
    #[graphql(guard = "RoleGuard::admin()")]
    async fn create_board(&self, ctx: &Context<'_>, input: CreateBoardInput) -> AppResult<Board> {
        for reward in input.rewards.iter().flatten() {
            if let Some(id) = &reward.voucher_id {
                if ctx.feature::<Vouchers>().find(id.0).await?.is_none() {
                    return Err(AppError::not_found(format!(
                        "no voucher {} for a reward",
                        id.encode()
                    )));
                }
            }
        }
        let new = NewBoard {
            key: input.key,
            title: input.title,
            reset: input.reset,
            operator: input.operator.unwrap_or(BoardOperator::Increment),
            order: input.order.unwrap_or(SortOrder::Desc),
            authoritative: input.authoritative.unwrap_or(true),
            starts_at: input.starts_at.map(|at| at.0),
            ends_at: input.ends_at.map(|at| at.0),
            join_required: input.join_required.unwrap_or(false),
            max_entries: input.max_entries.map(i64::from),
            rewards: input
                .rewards
                .unwrap_or_default()
                .into_iter()
                .map(|reward| BoardReward {
                    from_rank: i64::from(reward.from_rank),
                    to_rank: i64::from(reward.to_rank),
                    points: i64::from(reward.points),
                    voucher_id: reward.voucher_id.map(|id| id.0),
                })
                .collect(),
        };
        Ok(Board(ctx.feature::<Boards>().create(new).await?))
    }

    /// Submits a score, once per idempotency key: a service or an admin for any user on any
    /// board; a user only for themself (`userId` left out or their own) on a board that is
    /// not authoritative.
    #[graphql(guard = "RoleGuard::signed_in()")]
    #[allow(clippy::too_many_arguments)]
    async fn submit_score(
        &self,
        ctx: &Context<'_>,
        board_key: String,
        user_id: Option<UserId>,
        score: i32,
        #[graphql(default = 0)] subscore: Option<i32>,
        metadata: Option<Json>,
        idempotency_key: String,
    ) -> AppResult<BoardRecord> {
        let viewer = auth::require_viewer(ctx)?;
        let caller = match viewer.role {
            Role::Service | Role::Admin => Caller::Privileged,
            Role::User => Caller::User(viewer.user_id),
        };
        let user_id = match (user_id, caller) {
            (Some(id), _) => id.0,
            (None, Caller::User(me)) => me,
            (None, Caller::Privileged) => {
                return Err(AppError::bad_input("userId names whose score this is"))
            }
        };
        let record = ctx
            .feature::<Boards>()
            .submit(
                caller,
                &board_key,
                Submission {
                    user_id,
                    score: i64::from(score),
                    subscore: i64::from(subscore.unwrap_or(0)),
                    metadata: metadata.map(|json| json.to_text()),
                    idempotency_key,
                },
            )
            .await?;
        Ok(BoardRecord(record))
    }

    /// Joins the viewer to a board that requires joining, within its `maxEntries`.
    #[graphql(guard = "RoleGuard::signed_in()")]
    async fn join_board(&self, ctx: &Context<'_>, key: String) -> AppResult<Board> {
        let viewer = auth::require_viewer(ctx)?;
        let boards = ctx.feature::<Boards>();
        boards.join(&key, viewer.user_id).await?;
        Ok(Board(boards.get(&key).await?))
    }

    /// Ends the board's current period now, archives it and pays its rewards, each once
    /// (admin); the next period of the same reset window is named `<period>.<n>`.
    #[graphql(guard = "RoleGuard::admin()")]
    async fn close_board_period(&self, ctx: &Context<'_>, key: String) -> AppResult<Board> {
        Ok(Board(ctx.feature::<Boards>().close_now(&key).await?))
    }

    /// Removes a user's record from a period (the current one without `period`), live and
    /// archived, re-ranking those below (admin); whether there was one. From the live
    /// `season` board the user stays off for the rest of the season (their points stay).
    #[graphql(guard = "RoleGuard::admin()")]
    async fn remove_board_record(
        &self,
        ctx: &Context<'_>,
        board_key: String,
        user_id: UserId,
        period: Option<String>,
    ) -> AppResult<bool> {
        if let Some(period) = &period {
            crate::features::boards::reads::check_period(period)?;
        }
        ctx.feature::<Boards>()
            .remove(&board_key, user_id.0, period.as_deref())
            .await
    }
}

/// A watched top: 10 unless asked, at most a page.
const TOP: Limit = Limit::new(10, 100);

#[derive(Default)]
pub(crate) struct BoardSubscription;

#[Subscription]
impl BoardSubscription {
    /// The current period's top `top` now, then a new snapshot whenever it changes, at most
    /// one a second (`me` is null: each viewer's own record is `myBoardRankChanged`).
    #[graphql(complexity = "TOP.cost(top, child_complexity)")]
    async fn board_changed(
        &self,
        ctx: &Context<'_>,
        key: String,
        #[graphql(default_with = "TOP.default_first()")] top: Option<i32>,
    ) -> Result<impl Stream<Item = BoardPage>, AppError> {
        let top = TOP.first(top)?;
        let boards = ctx.feature::<Boards>();
        let def = boards.get(&key).await?;
        let slot = SubscriptionSlot::acquire(ctx)?;
        let snapshots = boards.top_changes(&key, top).await?;
        Ok(slot.hold(snapshots).map(move |top| BoardPage {
            board: Board(def.clone()),
            period: top.period,
            total: top.total,
            me: None,
            records: top.records.into_iter().map(BoardRecord).collect(),
        }))
    }

    /// The viewer's record on the current period now (null without one), then each time
    /// its rank moves.
    async fn my_board_rank_changed(
        &self,
        ctx: &Context<'_>,
        key: String,
    ) -> Result<impl Stream<Item = Option<BoardRecord>>, AppError> {
        let viewer = auth::require_viewer(ctx)?;
        let slot = SubscriptionSlot::acquire(ctx)?;
        let changes = ctx
            .feature::<Boards>()
            .my_rank_changes(&key, viewer.user_id)
            .await?;
        Ok(slot.hold(changes).map(|record| record.map(BoardRecord)))
    }
}
