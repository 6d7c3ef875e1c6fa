//! GraphQL types of boards: the board, its records, a page of it, and what `createBoard`
//! takes.

use std::sync::Arc;

use async_graphql::{Context, InputObject, Object, SimpleObject};

use super::{
    id::{BoardId, VoucherId},
    scalars::{DateTime, Json},
    users::{load_user, User},
    vouchers::Voucher,
    ContextExt,
};
use crate::{
    features::{
        boards::{
            close::Granted, BoardDef, BoardOperator, BoardRecord as Record, BoardReset,
            BoardReward as Reward, Boards, SortOrder,
        },
        vouchers::Vouchers,
    },
    infra::error::AppResult,
};

pub(crate) struct Board(pub Arc<BoardDef>);

#[Object]
impl Board {
    pub(crate) async fn id(&self) -> BoardId {
        BoardId::new(self.0.key.clone())
    }

    async fn key(&self) -> &str {
        &self.0.key
    }

    async fn title(&self) -> &str {
        &self.0.title
    }

    async fn reset(&self) -> BoardReset {
        self.0.reset
    }

    async fn operator(&self) -> BoardOperator {
        self.0.operator
    }

    async fn order(&self) -> SortOrder {
        self.0.order
    }

    /// Only a service (or an admin) submits scores to an authoritative board; users submit
    /// their own to one that is not.
    async fn authoritative(&self) -> bool {
        self.0.authoritative
    }

    /// current period: 2026-11-23, 2026-W48, 2026-11, or all
    async fn period(&self, ctx: &Context<'_>) -> AppResult<String> {
        ctx.feature::<Boards>().current_period(&self.0).await
    }

    async fn starts_at(&self) -> Option<DateTime> {
        self.0.starts_at_ms.map(DateTime::from_ms)
    }

    async fn ends_at(&self) -> Option<DateTime> {
        self.0.ends_at_ms.map(DateTime::from_ms)
    }

    async fn join_required(&self) -> bool {
        self.0.join_required
    }

    async fn max_entries(&self) -> Option<i64> {
        self.0.max_entries
    }

    async fn rewards(&self) -> Vec<BoardReward> {
        self.0.rewards.iter().cloned().map(BoardReward).collect()
    }
}

pub(crate) struct BoardReward(pub Reward);

#[Object]
impl BoardReward {
    async fn from_rank(&self) -> i64 {
        self.0.from_rank
    }

    async fn to_rank(&self) -> i64 {
        self.0.to_rank
    }

    async fn points(&self) -> i64 {
        self.0.points
    }

    async fn voucher_id(&self) -> Option<VoucherId> {
        self.0.voucher_id.map(VoucherId::new)
    }
}

pub(crate) struct BoardRecord(pub Record);

#[Object]
impl BoardRecord {
    /// 1 = first.
    async fn rank(&self) -> i64 {
        self.0.rank
    }

    async fn score(&self) -> i64 {
        self.0.score
    }

    async fn subscore(&self) -> i64 {
        self.0.subscore
    }

    async fn metadata(&self) -> Option<Json> {
        self.0
            .metadata
            .as_deref()
            .and_then(|text| Json::from_text(text).ok())
    }

    async fn user(&self, ctx: &Context<'_>) -> AppResult<User> {
        load_user(ctx, self.0.user_id).await
    }

    async fn updated_at(&self) -> DateTime {
        DateTime::from_ms(self.0.updated_at_ms)
    }
}

/// A reward a board paid the viewer for a rank of a closed period: points (also in
/// `pointsHistory`) and a voucher, granted without an order.
pub(crate) struct BoardRewardGrant(pub Granted);

#[Object]
impl BoardRewardGrant {
    /// The board's key.
    async fn board_key(&self) -> &str {
        &self.0.board
    }

    async fn period(&self) -> &str {
        &self.0.period
    }

    async fn rank(&self) -> i64 {
        self.0.rank
    }

    async fn points(&self) -> i64 {
        self.0.points
    }

    /// The voucher granted (null: none, or one deleted since).
    async fn voucher(&self, ctx: &Context<'_>) -> AppResult<Option<Voucher>> {
        match self.0.voucher_id {
            Some(id) => Ok(ctx.feature::<Vouchers>().find(id).await?.map(Voucher)),
            None => Ok(None),
        }
    }

    async fn paid_at(&self) -> DateTime {
        DateTime::from_ms(self.0.paid_at_ms)
    }
}

#[derive(SimpleObject)]
pub(crate) struct BoardPage {
    pub(crate) board: Board,
    pub(crate) period: String,
    /// Records on this period (among friends with `friendsOnly`).
    pub(crate) total: i64,
    /// The viewer's record, even when it is not on this page; null without one.
    pub(crate) me: Option<BoardRecord>,
    pub(crate) records: Vec<BoardRecord>,
}

#[derive(InputObject)]
pub(crate) struct BoardRewardInput {
    pub(crate) from_rank: i32,
    pub(crate) to_rank: i32,
    pub(crate) points: i32,
    pub(crate) voucher_id: Option<VoucherId>,
}

#[derive(InputObject)]
pub(crate) struct CreateBoardInput {
    /// 1 to 64 of a-z 0-9 _ -.
    pub(crate) key: String,
    pub(crate) title: String,
    pub(crate) reset: BoardReset,
    #[graphql(default_with = "Some(BoardOperator::Increment)")]
    pub(crate) operator: Option<BoardOperator>,
    #[graphql(default_with = "Some(SortOrder::Desc)")]
    pub(crate) order: Option<SortOrder>,
    #[graphql(default_with = "Some(true)")]
    pub(crate) authoritative: Option<bool>,
    pub(crate) starts_at: Option<DateTime>,
    pub(crate) ends_at: Option<DateTime>,
    #[graphql(default_with = "Some(false)")]
    pub(crate) join_required: Option<bool>,
    pub(crate) max_entries: Option<i32>,
    #[graphql(default_with = "Some(Vec::new())")]
    pub(crate) rewards: Option<Vec<BoardRewardInput>>,
}
