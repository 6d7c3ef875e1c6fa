//! `remarks`, `recommendedRemarks`, `createRemark`, `likeRemark`, `unlikeRemark`,
//! `likeCountChanged`.

use async_graphql::{Context, Object, Subscription};
use futures::{Stream, StreamExt};

use crate::{
    api::schema::id::Id64,
    api::{
        http::ws::SubscriptionSlot,
        schema::{
            page::{decode_cursor, encode_cursor, PageInfo},
            page_size,
            remarks::{
                page_nodes, CreateRemarkInput, LikeCount, LikeResult, Remark, RemarkConnection,
                RemarkEdge,
            },
            ContextExt,
        },
    },
    features::remarks::{self, likes::Vote, recommended, NewRemark, Remarks},
    infra::{
        auth::{self, RoleGuard},
        error::{AppError, AppResult},
    },
};

#[derive(Default)]
pub struct RemarkQuery;

#[Object]
impl RemarkQuery {
    /// An item's remarks, newest first.
    #[graphql(complexity = "first.unwrap_or(20).clamp(1, 100) as usize * child_complexity")]
    async fn remarks(
        &self,
        ctx: &Context<'_>,
        item_id: Id64,
        #[graphql(default = 20)] first: Option<i32>,
        after: Option<String>,
    ) -> AppResult<RemarkConnection> {
        let first = first.unwrap_or(20);
        let item_id = item_id.0;
        let first = page_size(first)?;
        let after = decode_cursor(after.as_deref())?;
        let page = remarks::page(ctx.feature::<Remarks>(), item_id, first, after).await?;
        let nodes = page_nodes(ctx, ctx.look_ahead().field("edges").field("node"), &page).await?;
        Ok(RemarkConnection {
            edges: nodes
                .into_iter()
                .map(|node| RemarkEdge {
                    cursor: encode_cursor(node.record.id),
                    node,
                })
                .collect(),
            page_info: PageInfo {
                has_next_page: page.more,
                end_cursor: page.remarks.last().map(|r| encode_cursor(r.id)),
            },
        })
    }

    /// An item's most liked remarks (refreshed in the background, at most 50).
    #[graphql(complexity = "first.unwrap_or(20).clamp(1, 100) as usize * child_complexity")]
    async fn recommended_remarks(
        &self,
        ctx: &Context<'_>,
        item_id: Id64,
        #[graphql(default = 10)] first: Option<i32>,
    ) -> AppResult<Vec<Remark>> {
        let first = first.unwrap_or(10);
        let item_id = item_id.0;
        if !(1..=recommended::LIST_LENGTH as i32).contains(&first) {
            return Err(AppError::bad_input(format!(
                "first must be between 1 and {}",
                recommended::LIST_LENGTH
            )));
        }
        let remarks = ctx.feature::<Remarks>();
        let ids = recommended::read(remarks, item_id, first as usize).await?;
        let mut found = remarks::find_many(remarks, &ids).await?;
        Ok(ids
            .iter()
            .filter_map(|id| found.remove(id))
            .map(Remark::from)
            .collect())
    }
}

#[derive(Default)]
pub struct RemarkMutation;

#[Object]
impl RemarkMutation {
    /// One remark per user per item (`CONFLICT` on a second).
    #[graphql(guard = "RoleGuard::signed_in()")]
    async fn create_remark(
        &self,
        ctx: &Context<'_>,
        input: CreateRemarkInput,
    ) -> AppResult<Remark> {
        let viewer = auth::require_viewer(ctx)?;
        let item_id = input.item_id.0;
        let remark = NewRemark::new(
            item_id,
            input.score,
            &input.content,
            input.images.unwrap_or_default(),
        )?;
        Ok(
            remarks::create(ctx.feature::<Remarks>(), viewer.user_id, remark)
                .await?
                .into(),
        )
    }

    #[graphql(guard = "RoleGuard::signed_in()")]
    async fn like_remark(&self, ctx: &Context<'_>, remark_id: Id64) -> AppResult<LikeResult> {
        vote(ctx, remark_id, Vote::Like).await
    }

    #[graphql(guard = "RoleGuard::signed_in()")]
    async fn unlike_remark(&self, ctx: &Context<'_>, remark_id: Id64) -> AppResult<LikeResult> {
        vote(ctx, remark_id, Vote::Unlike).await
    }
}

async fn vote(ctx: &Context<'_>, remark_id: Id64, vote: Vote) -> AppResult<LikeResult> {
    let viewer = auth::require_viewer(ctx)?;
    let remark_id = remark_id.0;
    Ok(
        remarks::likes::vote(ctx.feature::<Remarks>(), viewer.user_id, remark_id, vote)
            .await?
            .into(),
    )
}

#[derive(Default)]
pub struct RemarkSubscription;

#[Subscription]
impl RemarkSubscription {
    /// The current like counts of the remarks (1 to 100, each existing), then each change
    /// (bursts coalesced to the latest count per remark within 100 ms).
    async fn like_count_changed(
        &self,
        ctx: &Context<'_>,
        remark_ids: Vec<Id64>,
    ) -> Result<impl Stream<Item = LikeCount>, AppError> {
        let ids = remark_ids
            .iter()
            .map(|id| Ok::<_, AppError>(id.0))
            .collect::<AppResult<Vec<_>>>()?;
        let slot = SubscriptionSlot::acquire(ctx)?;
        let changes = remarks::live::like_count_changes(ctx.feature::<Remarks>(), ids).await?;
        Ok(changes.map(move |change| {
            let _held = &slot;
            LikeCount::from(change)
        }))
    }
}
