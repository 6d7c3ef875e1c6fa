//! "Recommended remarks": an item's most liked remarks, cached as a Redis LIST.
//!
//! Readers only ever read the list. In the same round trip they try `SET proxy NX EX 5`:
//! the one reader that wins starts a refresh in the background (the SQL query, then one Lua
//! script that replaces the list and extends the proxy key to the refresh interval). Nobody
//! waits for a refresh, nobody sees a half-built list, and only one refresh runs per
//! interval across all instances. A refresh that fails simply lets the 5-second proxy key
//! expire, and the next reader tries again.
//!
//! Cold start: a reader that finds no list does not answer `[]`. The one that won the proxy
//! key refreshes while it waits; the others, for the moment that takes, read the same SQL
//! query the refresh runs. (An item whose last refresh found no remarks has no list either,
//! so its readers ask SQL until the next refresh: one indexed query of an item without
//! remarks, and a remark written meanwhile shows at once.)
//!
//! Order: the list holds the most liked remarks as of the last refresh; readers rank its
//! candidates by their live counts (one Redis round trip for the whole list), and the page
//! shows those very counts, so "most liked" reads in the order of the counts it shows.

use std::sync::atomic::Ordering;

use sqlx::Row;

use crate::{
    features::remarks::{likes::LikeInfo, Remarks},
    infra::{
        error::AppResult,
        redis::scripts::{RemarksReplaceRecommended, RemarksReplaceRecommendedArgs, Replies},
    },
};

/// Remarks kept per list; `recommendedRemarks(first)` serves at most this many.
pub(crate) const LIST_LENGTH: usize = 50;
/// How long a refresher holds the proxy key before the refresh must have finished.
const REFRESH_LEASE_SECONDS: u64 = 5;

impl Remarks {
    /// The most liked remarks of an item, most liked first by their live counts (ties: the
    /// older first), with the like info they were ranked by.
    pub(crate) async fn recommended(
        &self,
        viewer: Option<i64>,
        item_id: i64,
        first: usize,
    ) -> AppResult<Vec<(i64, LikeInfo)>> {
        let mut ids = self.recommended_candidates(item_id).await?;
        let infos = self.like_infos(viewer, &ids).await?;
        let count = |id: &i64| infos.get(id).map_or(0, |info| info.count);
        ids.sort_by_key(|id| (std::cmp::Reverse(count(id)), *id));
        ids.truncate(first.min(LIST_LENGTH));
        Ok(ids
            .into_iter()
            .map(|id| (id, infos.get(&id).copied().unwrap_or_default()))
            .collect())
    }

    /// The ids of the item's list, refreshed as the module says; never empty while the item
    /// has listed remarks.
    async fn recommended_candidates(&self, item_id: i64) -> AppResult<Vec<i64>> {
        let mut conn = self.infra.redis.get().await?;
        let (ids, won): (Vec<i64>, Option<String>) = redis::pipe()
            .cmd("LRANGE")
            .arg(self.infra.keys.recommended_list(item_id))
            .arg(0)
            .arg(LIST_LENGTH as i64 - 1)
            .cmd("SET")
            .arg(self.infra.keys.recommended_proxy(item_id))
            .arg(1)
            .arg("NX")
            .arg("EX")
            .arg(REFRESH_LEASE_SECONDS)
            .query_async(&mut *conn)
            .await?;
        drop(conn);
        match (ids.is_empty(), won.is_some()) {
            // Cold, and this reader refreshes: it waits for the list it writes.
            (true, true) => self.refresh_recommended(item_id).await,
            // Cold, and another reader refreshes: SQL answers meanwhile.
            (true, false) => self.most_liked_in_sql(item_id).await,
            (false, true) => {
                let refresher = self.clone();
                self.infra.instance.tasks.spawn(async move {
                    if let Err(error) = refresher.refresh_recommended(item_id).await {
                        tracing::warn!(item_id, %error, "recommended remarks refresh failed; retried on a later read");
                    }
                });
                Ok(ids)
            }
            (false, false) => Ok(ids),
        }
    }

    /// The item's most liked listed remarks as SQL's rolled-up counts rank them.
    async fn most_liked_in_sql(&self, item_id: i64) -> AppResult<Vec<i64>> {
        let rows = sqlx::query(
            "SELECT id FROM remarks WHERE item_id = $1 AND deleted_at_ms IS NULL AND hidden_at_ms IS NULL \
             ORDER BY like_count DESC, id LIMIT $2",
        )
        .bind(item_id)
        .bind(LIST_LENGTH as i64)
        .fetch_all(&self.infra.db.pool)
        .await?;
        Ok(rows
            .iter()
            .map(|row| row.try_get::<i64, _>("id"))
            .collect::<Result<Vec<_>, _>>()?)
    }

    /// Replaces the item's list with SQL's most liked; the ids written.
    async fn refresh_recommended(&self, item_id: i64) -> AppResult<Vec<i64>> {
        self.caches
            .recommended_refreshes
            .fetch_add(1, Ordering::Relaxed);
        let ids = self.most_liked_in_sql(item_id).await?;
        let recommended = RemarksReplaceRecommended {
            list: self.infra.keys.recommended_list(item_id),
            proxy: self.infra.keys.recommended_proxy(item_id),
        };
        let args = RemarksReplaceRecommendedArgs {
            refresh_seconds: self.settings.recommended_refresh(),
            remarks: ids.clone(),
        };
        let _length = self.infra.scripts().call(&recommended, &args).await?;
        Ok(ids)
    }
}

/// The new length of the list.
impl Replies for RemarksReplaceRecommended {
    type Reply = i64;
}
