//! GraphQL types of remarks and likes.

use async_graphql::{
    dataloader::DataLoader, ComplexObject, Context, InputObject, Object, SimpleObject,
};

use super::{
    page::{text_cost, Limit},
    scalars::DateTime,
    users::{load_user, User},
    ContextExt,
};
use crate::{
    api::{
        live::{Fields, Template},
        schema::id::{ItemId, RemarkId},
    },
    features::{
        remarks::{
            self,
            likes::{self, LikeInfo, LikeInfoKey, LikeInfoLoader, VoteOutcome},
            live::CountChange,
            RemarkPage, RemarkRecord, Remarks,
        },
        users::{UserLoader, UserRecord},
    },
    infra::{
        auth,
        error::{AppError, AppResult},
    },
};

/// A remark, with what its page already read: the author's record and the like info
/// (when the query asked for them); otherwise fields load them through the batch loaders.
pub(crate) struct Remark {
    pub(crate) record: RemarkRecord,
    pub(crate) author: Option<UserRecord>,
    pub(crate) like: Option<LikeInfo>,
}

impl From<RemarkRecord> for Remark {
    fn from(record: RemarkRecord) -> Self {
        Self {
            record,
            author: None,
            like: None,
        }
    }
}

#[Object]
impl Remark {
    pub(crate) async fn id(&self) -> RemarkId {
        RemarkId::new(self.record.id)
    }

    async fn item_id(&self) -> ItemId {
        ItemId::new(self.record.item_id)
    }

    async fn author(&self, ctx: &Context<'_>) -> AppResult<User> {
        match &self.author {
            Some(author) => Ok(User(author.clone())),
            None => load_user(ctx, self.record.author_id).await,
        }
    }

    /// 1 to 5.
    async fn score(&self) -> i32 {
        self.record.score
    }

    #[graphql(complexity = "CONTENT_COST")]
    async fn content(&self) -> &str {
        &self.record.content
    }

    /// Image URLs.
    #[graphql(complexity = "IMAGES_COST")]
    async fn images(&self) -> &[String] {
        &self.record.images
    }

    async fn created_at(&self) -> DateTime {
        DateTime::from_ms(self.record.created_at_ms)
    }

    /// When its author last edited it; null if never.
    async fn edited_at(&self) -> Option<DateTime> {
        self.record.edited_at_ms.map(DateTime::from_ms)
    }

    /// Live count from Redis; all remarks of a response are read in one round trip.
    async fn like_count(&self, ctx: &Context<'_>) -> AppResult<i64> {
        Ok(self.like_info(ctx).await?.count)
    }

    /// False for anonymous viewers.
    async fn liked_by_me(&self, ctx: &Context<'_>) -> AppResult<bool> {
        Ok(auth::viewer(ctx).is_some() && self.like_info(ctx).await?.liked_by_viewer)
    }

    /// The earliest users who like this remark (at most 20).
    #[graphql(complexity = "LIKERS.cost(first, child_complexity)")]
    async fn likers(
        &self,
        ctx: &Context<'_>,
        #[graphql(default_with = "LIKERS.default_first()")] first: Option<i32>,
    ) -> AppResult<Vec<User>> {
        let first = LIKERS.first(first)?;
        // Boxed, as the costlier fields of a `User` are (`profiles.rs`): inline, this
        // field's work made every field of a remark twice as large to resolve.
        let ids = Box::pin(
            ctx.feature::<Remarks>()
                .earliest_likers(self.record.id, first),
        )
        .await?;
        let loader = ctx.data_unchecked::<DataLoader<UserLoader>>();
        let users = Box::pin(loader.load_many(ids.iter().copied()))
            .await
            .map_err(|e| (*e).clone())?;
        Ok(ids
            .iter()
            .filter_map(|id| users.get(id).cloned().map(User))
            .collect())
    }
}

impl Remark {
    async fn like_info(&self, ctx: &Context<'_>) -> AppResult<LikeInfo> {
        if let Some(like) = self.like {
            return Ok(like);
        }
        let key = LikeInfoKey {
            remark_id: self.record.id,
            viewer: auth::viewer(ctx).map(|v| v.user_id),
        };
        let loader = ctx.data_unchecked::<DataLoader<LikeInfoLoader>>();
        Ok(loader
            .load_one(key)
            .await
            .map_err(|e| (*e).clone())?
            .unwrap_or_default())
    }
}

/// The remarks of a page as GraphQL nodes. When the selection under `nodes` reads like
/// counts, the page's like info is read here in one Redis round trip and handed to each
/// remark, rather than through one batch-loader call per field (which costs allocations and
/// channel hops per remark); what the look-ahead misses still loads through the loader.
pub(crate) async fn page_nodes(
    ctx: &Context<'_>,
    nodes: async_graphql::Lookahead<'_>,
    page: &RemarkPage,
) -> AppResult<Vec<Remark>> {
    let like_ids: Vec<i64> =
        if nodes.field("likeCount").exists() || nodes.field("likedByMe").exists() {
            page.remarks.iter().map(|r| r.id).collect()
        } else {
            Vec::new()
        };
    let viewer = auth::viewer(ctx).map(|v| v.user_id);
    let likes = ctx
        .feature::<Remarks>()
        .like_infos(viewer, &like_ids)
        .await?;
    Ok(page
        .remarks
        .iter()
        .map(|record| Remark {
            record: record.clone(),
            author: page.authors.get(&record.author_id).cloned(),
            like: Some(likes.get(&record.id).copied().unwrap_or_default())
                .filter(|_| !like_ids.is_empty()),
        })
        .collect())
}

/// A remark's text: its characters, at up to 4 bytes each.
const CONTENT_COST: usize = text_cost(remarks::MAX_CONTENT_CHARS * 4);

/// A remark's images: URLs of at most so many bytes.
const IMAGES_COST: usize = text_cost(remarks::MAX_IMAGES * remarks::MAX_IMAGE_URL_CHARS);

/// A remark's likers: 5 unless asked, at most the earliest kept.
const LIKERS: Limit = Limit::new(5, likes::LIKERS_KEPT as i32);

#[derive(InputObject)]
pub(crate) struct CreateRemarkInput {
    pub(crate) item_id: ItemId,
    /// 1 to 5.
    pub(crate) score: i32,
    /// 1 to 2000 characters.
    pub(crate) content: String,
    /// Up to 9 http(s) image URLs.
    pub(crate) images: Option<Vec<String>>,
}

/// What a like or an unlike answers: the remark as it is after the vote, so that a client's
/// cache of the remark (its `likeCount`, its `likedByMe`) is right without a second query.
#[derive(SimpleObject)]
#[graphql(complex)]
pub(crate) struct LikeResult {
    #[graphql(deprecation = "Use `remark { id }`.")]
    pub(crate) remark_id: RemarkId,
    #[graphql(deprecation = "Use `remark { likeCount }`.")]
    pub(crate) like_count: i64,
    /// Whether the viewer likes the remark now.
    #[graphql(deprecation = "Use `remark { likedByMe }`.")]
    pub(crate) liked: bool,
    /// Whether this call changed anything (false for a repeated like or unlike).
    pub(crate) changed: bool,
}

impl From<VoteOutcome> for LikeResult {
    fn from(outcome: VoteOutcome) -> Self {
        Self {
            remark_id: RemarkId::new(outcome.remark_id),
            like_count: outcome.like_count,
            liked: outcome.liked,
            changed: outcome.changed,
        }
    }
}

#[ComplexObject]
impl LikeResult {
    /// The remark after this call, with its new `likeCount` and `likedByMe`.
    async fn remark(&self, ctx: &Context<'_>) -> AppResult<Remark> {
        let record = ctx
            .feature::<Remarks>()
            .find(self.remark_id.0)
            .await?
            .ok_or_else(|| AppError::not_found(format!("no remark {}", self.remark_id.0)))?;
        // The count and the relation the vote's script answered: the remark's like fields
        // resolve from them, with no second Redis read that a later vote could already
        // have moved past.
        Ok(Remark {
            record,
            author: None,
            like: Some(LikeInfo {
                count: self.like_count,
                liked_by_viewer: self.liked,
            }),
        })
    }
}

#[derive(SimpleObject)]
pub(crate) struct LikeCount {
    pub(crate) remark_id: RemarkId,
    pub(crate) like_count: i64,
}

/// `LikeCount`'s fields, for updates rendered without executing their selection (see
/// [`Template`]); the names are the schema's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LikeCountField {
    RemarkId,
    LikeCount,
}

impl LikeCount {
    /// The template of the `LikeCount` selection being resolved, if it is plain fields.
    pub(crate) fn template(ctx: &Context<'_>) -> Option<Template<LikeCountField>> {
        Template::of(ctx, "LikeCount", |name| match name {
            "remarkId" => Some(LikeCountField::RemarkId),
            "likeCount" => Some(LikeCountField::LikeCount),
            _ => None,
        })
    }
}

/// A change of remark `id`'s count to `value`, as async-graphql would have written each
/// field (an `ID` is a string, and a remark's is its global id).
impl Fields for LikeCountField {
    fn write(self, id: i64, value: i64, out: &mut String) {
        use std::fmt::Write;
        let _ = match self {
            LikeCountField::RemarkId => write!(out, "\"{}\"", RemarkId::new(id).encode()),
            LikeCountField::LikeCount => write!(out, "{value}"),
        };
    }
}

impl From<CountChange> for LikeCount {
    fn from(change: CountChange) -> Self {
        Self {
            remark_id: RemarkId::new(change.remark_id),
            like_count: change.like_count,
        }
    }
}
