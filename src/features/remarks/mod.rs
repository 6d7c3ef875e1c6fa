//! Remarks (reviews of items) and their likes.
//!
//! - [`likes`]: like/unlike through one Lua script each, the merged like info of a page in
//!   one Redis round trip, the earliest likers;
//! - [`archive`]: the vote stream's consumer that writes `vote_log` and rolls counts up;
//! - [`recommended`]: the cached most-liked list behind a proxy key;
//! - [`live`]: the `likeCountChanged` stream;
//! - [`announcements`]: a new remark's announcement to the feed and to points, which lands
//!   even when Redis refused it at the time.
//!
//! Static remark content lives in SQL; counts and relations live in Redis.

pub(crate) mod announcements;
pub mod archive;
mod authors;
pub mod events;
pub(crate) mod lifecycle;
pub mod likes;
pub mod live;
pub mod my_likes;
pub mod recommended;
pub mod recovery;
pub mod settings;

use std::{
    collections::{HashMap, HashSet},
    sync::{atomic::AtomicU64, Arc},
    time::Duration,
};

use sqlx::{any::AnyRow, Row};

use crate::infra::page::{KeyRange, PageArgs};
use crate::{
    features::{
        items::{count_rating, Items},
        remarks::events::RemarkCreated,
        users::UserRecord,
    },
    infra::{
        auth::{Role, Viewer},
        cache::TtlCache,
        error::{AppError, AppResult, ResultExt},
        live::SharedCounters,
        outbox,
        redis::{KeyPart, Keys},
        Infra,
    },
};

/// What remarks and their likes work with: a remark is about an item. (Its points and its
/// place in followers' feeds follow from its announcement: [`RemarkCreated`].)
#[derive(Clone)]
pub struct Remarks {
    pub(crate) infra: Infra,
    pub settings: Arc<RemarkSettings>,
    pub items: Items,
    /// What this instance keeps in memory, shared by its requests.
    pub caches: Arc<RemarkCaches>,
    /// The like counts this instance follows for direct `likeCountChanged` subscribers.
    pub like_counts: Arc<SharedCounters>,
}

pub use settings::RemarkSettings;

pub const MAX_CONTENT_CHARS: usize = 2000;
pub const MAX_IMAGES: usize = 9;
pub const MAX_IMAGE_URL_CHARS: usize = 500;

/// What one instance keeps of remarks in memory, and counts of its work that tests read.
pub struct RemarkCaches {
    /// Pages of remarks with their authors, shared by the requests of this instance.
    pub(crate) pages: TtlCache<PageKey, RemarkPage>,
    /// Pages read from SQL by this instance (tests count them).
    pub page_reads: AtomicU64,
    /// Refreshes of recommended lists started by this instance (tests count them).
    pub recommended_refreshes: AtomicU64,
}

impl RemarkCaches {
    /// Pages cached for `page_ttl` (nothing cached at zero).
    pub fn new(page_ttl: Duration) -> Self {
        Self {
            pages: TtlCache::new(page_ttl, 10_000),
            page_reads: AtomicU64::default(),
            recommended_refreshes: AtomicU64::default(),
        }
    }
}

/// The keys of one remark share the hash tag of its shard, with the shard's vote stream,
/// so that the like scripts touch a single Redis Cluster slot.
impl Keys {
    /// New remarks, in order, for the feed to fan out. (Named in the feed's hash tag, as
    /// it always was: a rename would strand the entries of a running stream.)
    pub fn remark_stream(&self) -> String {
        self.tagged("feed", "remarks")
    }

    /// The likes shard of a remark's keys (the `likes:<shard>` hash tag).
    fn likes_shard(remark_id: i64, shards: u32) -> i64 {
        remark_id.rem_euclid(i64::from(shards))
    }

    /// A key of a remark's, in its likes shard.
    fn in_likes_shard(&self, remark_id: i64, shards: u32, rest: impl KeyPart) -> String {
        self.tagged(("likes:", Self::likes_shard(remark_id, shards)), rest)
    }

    pub fn remark_info(&self, remark_id: i64, shards: u32) -> String {
        self.in_likes_shard(remark_id, shards, ("remark:", remark_id))
    }

    pub fn like_relation(&self, remark_id: i64, voter_id: i64, shards: u32) -> String {
        self.in_likes_shard(
            remark_id,
            shards,
            ("remark:", remark_id, ":voter:", voter_id),
        )
    }

    pub fn remark_likers(&self, remark_id: i64, shards: u32) -> String {
        self.in_likes_shard(remark_id, shards, ("remark:", remark_id, ":likers"))
    }

    pub fn vote_stream(&self, shard: u32) -> String {
        self.tagged(("likes:", shard), "events")
    }

    pub fn vote_stream_of(&self, remark_id: i64, shards: u32) -> String {
        self.vote_stream(Self::likes_shard(remark_id, shards) as u32)
    }

    /// The live channel of a remark's like count, in the slot of its keys.
    pub fn like_count_channel(&self, remark_id: i64, shards: u32) -> String {
        self.in_likes_shard(remark_id, shards, ("live:likes:", remark_id))
    }

    pub(crate) fn recommended_list(&self, item_id: i64) -> String {
        self.tagged(("rec:", item_id), "list")
    }

    pub fn recommended_proxy(&self, item_id: i64) -> String {
        self.tagged(("rec:", item_id), "proxy")
    }
}

#[derive(Debug, Clone)]
pub struct RemarkRecord {
    pub id: i64,
    pub(crate) item_id: i64,
    pub(crate) author_id: i64,
    pub(crate) score: i32,
    pub(crate) content: String,
    pub(crate) images: Vec<String>,
    pub(crate) created_at_ms: i64,
    pub(crate) edited_at_ms: Option<i64>,
    /// Deleted by its author or an admin: shown to no one.
    pub(crate) deleted: bool,
    /// Hidden (folded) by an admin: shown to its author and admins only.
    pub(crate) hidden: bool,
}

impl RemarkRecord {
    fn from_row(row: &AnyRow) -> Result<Self, sqlx::Error> {
        let images: String = row.try_get("images")?;
        Ok(Self {
            id: row.try_get("id")?,
            item_id: row.try_get("item_id")?,
            author_id: row.try_get("author_id")?,
            score: row.try_get::<i32, _>("score")?,
            content: row.try_get("content")?,
            images: serde_json::from_str(&images).unwrap_or_default(),
            created_at_ms: row.try_get("created_at_ms")?,
            edited_at_ms: row.try_get("edited_at_ms")?,
            deleted: row.try_get::<Option<i64>, _>("deleted_at_ms")?.is_some(),
            hidden: row.try_get::<Option<i64>, _>("hidden_at_ms")?.is_some(),
        })
    }

    /// Whether `viewer` may see this remark: not deleted, and not hidden unless they wrote
    /// it or are an admin.
    pub(crate) fn shown_to(&self, viewer: Option<&Viewer>) -> bool {
        !self.deleted
            && (!self.hidden
                || viewer.is_some_and(|v| v.user_id == self.author_id || v.role == Role::Admin))
    }
}

const COLUMNS: &str = "id, item_id, author_id, score, content, images, created_at_ms, \
    edited_at_ms, deleted_at_ms, hidden_at_ms";

/// The condition of a remark shown in public lists (an item's remarks, recommendations,
/// feeds, remark counts): neither deleted nor hidden.
pub(crate) const LISTED: &str = "deleted_at_ms IS NULL AND hidden_at_ms IS NULL";

/// A validated remark, ready to store.
pub struct NewRemark {
    pub(crate) item_id: i64,
    pub(crate) score: i32,
    pub(crate) content: String,
    pub(crate) images: Vec<String>,
}

impl NewRemark {
    pub fn new(item_id: i64, score: i32, content: &str, images: Vec<String>) -> AppResult<Self> {
        if !(1..=5).contains(&score) {
            return Err(AppError::bad_input("score must be between 1 and 5"));
        }
        let content = content.trim();
        if content.is_empty() || content.chars().count() > MAX_CONTENT_CHARS {
            return Err(AppError::bad_input(format!(
                "content must have 1 to {MAX_CONTENT_CHARS} characters"
            )));
        }
        // PostgreSQL text cannot hold NUL; refused here rather than failing in the INSERT.
        if content.contains('\0') {
            return Err(AppError::bad_input(
                "content must not contain NUL characters",
            ));
        }
        if images.len() > MAX_IMAGES {
            return Err(AppError::bad_input(format!("at most {MAX_IMAGES} images")));
        }
        for image in &images {
            let is_web = image.starts_with("https://") || image.starts_with("http://");
            if !is_web
                || image.len() > MAX_IMAGE_URL_CHARS
                || image.chars().any(char::is_whitespace)
            {
                return Err(AppError::bad_input(format!(
                    "images must be http(s) URLs of at most {MAX_IMAGE_URL_CHARS} characters"
                )));
            }
        }
        Ok(Self {
            item_id,
            score,
            content: content.to_string(),
            images,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct PageKey {
    item_id: i64,
    first: usize,
    range: KeyRange,
}

/// A page of an item's remarks, newest first, with the authors' user records.
pub(crate) struct RemarkPage {
    pub(crate) remarks: Vec<RemarkRecord>,
    pub(crate) authors: HashMap<i64, UserRecord>,
    /// Whether more remarks follow in the direction read (older ones forward, newer ones
    /// backward).
    pub(crate) more: bool,
}

impl Remarks {
    /// The vote streams, one per shard: the archive and the points for likes read them.
    pub fn vote_streams(&self) -> Vec<String> {
        (0..self.settings.shards())
            .map(|shard| self.infra.keys.vote_stream(shard))
            .collect()
    }

    /// Stores a remark (one per user per item), prepares its like counter in Redis and
    /// announces it; an announcement Redis refuses is made later by the announcer.
    pub async fn create(&self, author_id: i64, remark: NewRemark) -> AppResult<RemarkRecord> {
        if self.items.find(remark.item_id).await?.is_none() {
            return Err(AppError::not_found(format!("no item {}", remark.item_id)));
        }
        let id = self.infra.ids.next_id().await?;
        let now_ms = self.infra.clock.now_ms();
        let images = serde_json::to_string(&remark.images).map_err(AppError::internal)?;
        let created = RemarkCreated {
            remark_id: id,
            author_id,
            created_at_ms: now_ms,
        };
        // The remark and its announcement to come, together (`announcements`).
        let mut tx = self.infra.db.pool.begin().await?;
        sqlx::query(
            "INSERT INTO remarks (id, item_id, author_id, score, content, images, created_at_ms) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(id)
        .bind(remark.item_id)
        .bind(author_id)
        .bind(remark.score)
        .bind(&remark.content)
        .bind(images)
        .bind(now_ms)
        .execute(&mut *tx)
        .await
        .on_unique_violation(|| AppError::conflict("you already reviewed this item"))?;
        count_rating(&mut tx, remark.item_id, remark.score, 1).await?;
        sqlx::query(
            "INSERT INTO remark_announcements (remark_id, author_id, created_at_ms) \
             VALUES ($1, $2, $3)",
        )
        .bind(id)
        .bind(author_id)
        .bind(now_ms)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        self.caches
            .pages
            .forget(|page| page.item_id == remark.item_id);

        // If this fails the info is rebuilt from SQL on the first like, so the remark stands.
        if let Err(error) = self.prepare_counter(id, author_id).await {
            tracing::warn!(remark = id, %error, "like counter not prepared; it will be rebuilt");
        }
        outbox::deliver_or_leave(&self.announcements(), std::slice::from_ref(&created)).await;
        Ok(RemarkRecord {
            id,
            item_id: remark.item_id,
            author_id,
            score: remark.score,
            content: remark.content,
            images: remark.images,
            created_at_ms: now_ms,
            edited_at_ms: None,
            deleted: false,
            hidden: false,
        })
    }

    pub(crate) async fn find(&self, id: i64) -> AppResult<Option<RemarkRecord>> {
        Ok(self.find_many(&[id]).await?.remove(&id))
    }

    pub(crate) async fn find_many(&self, ids: &[i64]) -> AppResult<HashMap<i64, RemarkRecord>> {
        let select = format!("SELECT {COLUMNS} FROM remarks");
        let remarks = self
            .infra
            .db
            .find_by_ids(&select, ids, RemarkRecord::from_row)
            .await?;
        Ok(remarks.into_iter().map(|r| (r.id, r)).collect())
    }

    /// Which of these remarks exist: one SQL query.
    pub(crate) async fn existing(&self, ids: &[i64]) -> AppResult<HashSet<i64>> {
        let found = self
            .infra
            .db
            .find_by_ids("SELECT id FROM remarks", ids, |row| {
                row.try_get::<i64, _>("id")
            })
            .await?;
        Ok(found.into_iter().collect())
    }

    /// A page within a range of remark ids: one SQL query (remarks joined with their
    /// authors), and none while the instance's page cache holds it. Pages are keyset pages, so a
    /// new remark (the newest id) changes only the pages open at the newest end (the first
    /// page, and `last` pages with no `after`): this instance forgets its cached pages of the
    /// item at once, other instances within `ENGAGE_REMARK_PAGE_CACHE_MS`.
    pub(crate) async fn page(
        &self,
        item_id: i64,
        page: PageArgs<KeyRange>,
    ) -> AppResult<Arc<RemarkPage>> {
        let key = PageKey {
            item_id,
            first: page.first,
            range: page.after,
        };
        if let Some(page) = self.caches.pages.get(&key) {
            return Ok(page);
        }
        self.caches
            .page_reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let columns = COLUMNS
            .split(", ")
            .map(|column| format!("r.{column}"))
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!(
            "SELECT {columns}, u.name AS author_name, u.avatar_url AS author_avatar_url, u.bio AS author_bio \
             FROM remarks r LEFT JOIN users u ON u.id = r.author_id \
             WHERE r.item_id = $1 AND r.deleted_at_ms IS NULL AND r.hidden_at_ms IS NULL \
             AND {}",
            page.after.sql_tail("r.id", 2)
        );
        let query = sqlx::query(&sql).bind(item_id);
        let (rows, more) = self
            .infra
            .db
            .keyset_page(query, page, |row| {
                let remark = RemarkRecord::from_row(row)?;
                let author = row
                    .try_get::<Option<String>, _>("author_name")?
                    .map(|name| {
                        Ok::<_, sqlx::Error>(UserRecord {
                            id: remark.author_id,
                            name,
                            avatar_url: row.try_get("author_avatar_url")?,
                            bio: row.try_get("author_bio")?,
                        })
                    })
                    .transpose()?;
                Ok((remark, author))
            })
            .await?;
        let mut authors = HashMap::new();
        let remarks = rows
            .into_iter()
            .map(|(remark, author)| {
                if let Some(author) = author {
                    authors.insert(author.id, author);
                }
                remark
            })
            .collect();
        let page = Arc::new(RemarkPage {
            remarks,
            authors,
            more,
        });
        self.caches.pages.insert(key, page.clone());
        Ok(page)
    }
}
