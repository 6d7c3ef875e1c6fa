//! `remarks`, `myLikes`, `recommendedRemarks`, `createRemark`, `editRemark`,
//! `deleteRemark`, `hideRemark`, `likeRemark`, `unlikeRemark`, `likeCountChanged`.

use async_graphql::{Context, Object, Subscription};
use futures::{Stream, StreamExt};

use crate::{
    api::schema::id::{ItemId, RemarkId},
    api::{
        live::{Direct, SubscriptionSlot},
        schema::{
            connection::{Connection, Edge},
            page::{Limit, PageArgs, PAGE},
            remarks::{page_nodes, CreateRemarkInput, LikeCount, LikeResult, Remark},
            ContextExt,
        },
    },
    features::{
        feed::Feed,
        remarks::{likes::Vote, my_likes::LikeCursor, recommended, NewRemark, Remarks},
    },
    infra::{
        auth::{self, RoleGuard},
        error::{AppError, AppResult},
    },
};

/// An item's recommended remarks: 10 unless asked, at most the list's length.
const RECOMMENDED: Limit = Limit::new(10, recommended::LIST_LENGTH as i32);

#[derive(Default)]
pub(crate) struct RemarkQuery;

#[Object]
impl RemarkQuery {
    /// An item's remarks, newest first: `first` (1 to 100; 20 when neither is given) after
    /// `after`, or `last` (1 to 100) before `before`, not both.
    #[graphql(complexity = "PAGE.cost_either(first, last, child_complexity)")]
    async fn remarks(
        &self,
        ctx: &Context<'_>,
        item_id: ItemId,
        first: Option<i32>,
        after: Option<String>,
        last: Option<i32>,
        before: Option<String>,
    ) -> AppResult<Connection<Remark>> {
        let args = PageArgs::keyset(first, after.as_deref(), last, before.as_deref())?;
        let page = ctx.feature::<Remarks>().page(item_id.0, args).await?;
        let nodes = page_nodes(ctx, ctx.look_ahead().field("edges").field("node"), &page).await?;
        Ok(Connection::keyset(
            nodes,
            |node| node.record.id,
            &args,
            page.more,
        ))
    }

    /// The remarks the viewer likes, newest like first: `first` (1 to 100, 20 unless given)
    /// after `after`. Read from the vote archive: a like shows once archived (within a
    /// second), and stays however long ago it was made.
    #[graphql(
        guard = "RoleGuard::signed_in()",
        complexity = "PAGE.cost(first, child_complexity)"
    )]
    async fn my_likes(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
    ) -> AppResult<Connection<Remark>> {
        let viewer = auth::require_viewer(ctx)?;
        let first = PAGE.first(first)?;
        let after_given = after.is_some();
        let after = after.as_deref().map(LikeCursor::decode).transpose()?;
        let remarks = ctx.feature::<Remarks>();
        let (likes, more) = remarks.liked_by(viewer.user_id, first, after).await?;
        let ids: Vec<i64> = likes.iter().map(|like| like.remark_id).collect();
        let mut found = remarks.find_many(&ids).await?;
        let edges = likes
            .iter()
            .filter_map(|like| {
                found.remove(&like.remark_id).map(|record| Edge {
                    cursor: like.encode(),
                    node: Remark::from(record),
                })
            })
            .collect();
        Ok(Connection::new(edges, more, after_given))
    }

    /// An item's most liked remarks (refreshed in the background, at most 50).
    #[graphql(complexity = "RECOMMENDED.cost(first, child_complexity)")]
    async fn recommended_remarks(
        &self,
        ctx: &Context<'_>,
        item_id: ItemId,
        #[graphql(default_with = "RECOMMENDED.default_first()")] first: Option<i32>,
    ) -> AppResult<Vec<Remark>> {
        let first = RECOMMENDED.first(first)?;
        let remarks = ctx.feature::<Remarks>();
        let viewer = auth::viewer(ctx).map(|v| v.user_id);
        let ranked = remarks.recommended(viewer, item_id.0, first).await?;
        let ids: Vec<i64> = ranked.iter().map(|(id, _)| *id).collect();
        let mut found = remarks.find_many(&ids).await?;
        // Each remark shows the count it was ranked by.
        Ok(ranked
            .into_iter()
            .filter_map(|(id, like)| found.remove(&id).map(|record| (record, like)))
            .filter(|(record, _)| record.shown_to(None))
            .map(|(record, like)| Remark {
                record,
                author: None,
                like: Some(like),
            })
            .collect())
    }
}

#[derive(Default)]
pub(crate) struct RemarkMutation;

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
        Ok(ctx
            .feature::<Remarks>()
            .create(viewer.user_id, remark)
            .await?
            .into())
    }

    /// Changes the viewer's remark (its content and, when given, its score); its likes
    /// stay. Another's remark is `FORBIDDEN`; a deleted one `NOT_FOUND`.
    #[graphql(guard = "RoleGuard::signed_in()")]
    async fn edit_remark(
        &self,
        ctx: &Context<'_>,
        id: RemarkId,
        content: String,
        score: Option<i32>,
    ) -> AppResult<Remark> {
        let viewer = auth::require_viewer(ctx)?;
        Ok(ctx
            .feature::<Remarks>()
            .edit(viewer, id.0, &content, score)
            .await?
            .into())
    }

    /// Deletes a remark (its author or an admin): gone from every list, feed and
    /// recommendation, its likes with it (the vote archive stays); later likes are
    /// `NOT_FOUND`.
    #[graphql(guard = "RoleGuard::signed_in()")]
    async fn delete_remark(&self, ctx: &Context<'_>, id: RemarkId) -> AppResult<bool> {
        let viewer = auth::require_viewer(ctx)?;
        let removed = ctx.feature::<Remarks>().delete(viewer, id.0).await?;
        forget_in_feeds(ctx, removed.author_id, removed.id).await;
        Ok(true)
    }

    /// Hides (folds) a remark (an admin), with the reason (1 to 200 characters): gone from
    /// lists, feeds and recommendations, still shown to its author and admins; later likes
    /// are `NOT_FOUND`.
    #[graphql(guard = "RoleGuard::admin()")]
    async fn hide_remark(
        &self,
        ctx: &Context<'_>,
        id: RemarkId,
        reason: String,
    ) -> AppResult<Remark> {
        let hidden = ctx.feature::<Remarks>().hide(id.0, &reason).await?;
        forget_in_feeds(ctx, hidden.author_id, hidden.id).await;
        Ok(hidden.into())
    }

    #[graphql(guard = "RoleGuard::signed_in()")]
    async fn like_remark(&self, ctx: &Context<'_>, remark_id: RemarkId) -> AppResult<LikeResult> {
        vote(ctx, remark_id, Vote::Like).await
    }

    #[graphql(guard = "RoleGuard::signed_in()")]
    async fn unlike_remark(&self, ctx: &Context<'_>, remark_id: RemarkId) -> AppResult<LikeResult> {
        vote(ctx, remark_id, Vote::Unlike).await
    }
}

/// Takes a withdrawn remark out of feeds (best effort: a feed page drops it anyway).
async fn forget_in_feeds(ctx: &Context<'_>, author: i64, remark: i64) {
    if let Err(error) = ctx.feature::<Feed>().forget_remark(author, remark).await {
        tracing::warn!(remark, %error, "remark left in feeds; feed pages drop it");
    }
}

async fn vote(ctx: &Context<'_>, remark_id: RemarkId, vote: Vote) -> AppResult<LikeResult> {
    let viewer = auth::require_viewer(ctx)?;
    let remark_id = remark_id.0;
    Ok(ctx
        .feature::<Remarks>()
        .vote(viewer.user_id, remark_id, vote)
        .await?
        .into())
}

#[derive(Default)]
pub(crate) struct RemarkSubscription;

#[Subscription]
impl RemarkSubscription {
    /// The current like counts of the remarks (1 to 100, each existing), then each change
    /// (bursts coalesced to the latest count per remark within 100 ms).
    async fn like_count_changed(
        &self,
        ctx: &Context<'_>,
        remark_ids: Vec<RemarkId>,
    ) -> Result<impl Stream<Item = LikeCount>, AppError> {
        let ids = remark_ids
            .iter()
            .map(|id| Ok::<_, AppError>(id.0))
            .collect::<AppResult<Vec<_>>>()?;
        let slot = SubscriptionSlot::acquire(ctx)?;
        let remarks = ctx.feature::<Remarks>();
        // On a WebSocket, a plain selection's updates are written to the socket by the
        // instance's one follower of each count, without executing the selection: at
        // thousands of subscribers that was most of a delivery's cost.
        if let Some(direct) = Direct::of(ctx, LikeCount::template) {
            let watch = remarks.watch_like_counts(ids, direct.watcher()).await?;
            return Ok(direct.hold((watch, slot)).left_stream());
        }
        let changes = remarks.like_count_changes(ids).await?;
        Ok(slot.hold(changes).map(LikeCount::from).right_stream())
    }
}
