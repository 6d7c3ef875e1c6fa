//! "Recommended remarks": an item's most liked remarks, cached as a Redis LIST.
//!
//! Readers only ever read the list. In the same round trip they try `SET proxy NX EX 5`:
//! the one reader that wins starts a refresh in the background (the SQL query, then one Lua
//! script that replaces the list and extends the proxy key to the refresh interval). Nobody
//! waits for a refresh, nobody sees a half-built list, and only one refresh runs per
//! interval across all instances. A refresh that fails simply lets the 5-second proxy key
//! expire, and the next reader tries again. On a cold start the list is empty for the
//! moment the first refresh takes.

use std::sync::atomic::Ordering;

use sqlx::Row;

use crate::{
    features::remarks::Remarks,
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
    /// The ids of the most liked remarks of an item, most liked first.
    pub(crate) async fn recommended(&self, item_id: i64, first: usize) -> AppResult<Vec<i64>> {
        let mut conn = self.infra.redis.get().await?;
        let (ids, won): (Vec<i64>, Option<String>) = redis::pipe()
            .cmd("LRANGE")
            .arg(self.infra.keys.recommended_list(item_id))
            .arg(0)
            .arg(first.min(LIST_LENGTH) as i64 - 1)
            .cmd("SET")
            .arg(self.infra.keys.recommended_proxy(item_id))
            .arg(1)
            .arg("NX")
            .arg("EX")
            .arg(REFRESH_LEASE_SECONDS)
            .query_async(&mut *conn)
            .await?;
        if won.is_some() {
            let refresher = self.clone();
            self.infra.instance.tasks.spawn(async move {
                if let Err(error) = refresher.refresh_recommended(item_id).await {
                    tracing::warn!(item_id, %error, "recommended remarks refresh failed; retried on a later read");
                }
            });
        }
        Ok(ids)
    }

    async fn refresh_recommended(&self, item_id: i64) -> AppResult<()> {
        self.caches
            .recommended_refreshes
            .fetch_add(1, Ordering::Relaxed);
        let rows = sqlx::query(
            "SELECT id FROM remarks WHERE item_id = $1 AND deleted_at_ms IS NULL AND hidden_at_ms IS NULL \
             ORDER BY like_count DESC, id LIMIT $2",
        )
        .bind(item_id)
        .bind(LIST_LENGTH as i64)
        .fetch_all(&self.infra.db.pool)
        .await?;
        let ids = rows
            .iter()
            .map(|row| row.try_get::<i64, _>("id"))
            .collect::<Result<Vec<_>, _>>()?;
        let recommended = RemarksReplaceRecommended {
            list: self.infra.keys.recommended_list(item_id),
            proxy: self.infra.keys.recommended_proxy(item_id),
        };
        let args = RemarksReplaceRecommendedArgs {
            refresh_seconds: self.settings.recommended_refresh(),
            remarks: ids,
        };
        let _length = self.infra.scripts().call(&recommended, &args).await?;
        Ok(())
    }
}

/// The new length of the list.
impl Replies for RemarksReplaceRecommended {
    type Reply = i64;
}
