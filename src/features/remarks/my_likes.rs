//! `myLikes`: the remarks a user likes now, newest like first.
//!
//! Read from the vote archive (`vote_log`, each voter's latest vote per remark), which keeps
//! every like for ever, so the list outlives the relation keys' TTL in Redis. Rejected: a
//! sorted set of likes per user in Redis, which would hold every like ever made in memory.
//!
//! The archive trails Redis by the archive's batching (`ENGAGE_ARCHIVE_LINGER_MS`, a few
//! hundred ms): a like shows here once archived. An unlike the archive has not taken yet
//! is seen in Redis's relation key ("0") and its remark left out at once. Deleted and hidden
//! remarks are left out.

use sqlx::Row;

use super::{likes::CURRENT_LIKE, Remarks};
use crate::infra::{
    error::{AppError, AppResult},
    page::split_page,
};

/// A like's place in `myLikes`: the vote's order in the archive, then the remark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LikeCursor {
    pub event_order: i64,
    pub remark_id: i64,
}

impl LikeCursor {
    pub fn encode(&self) -> String {
        format!("l{}.{}", self.event_order, self.remark_id)
    }

    pub fn decode(text: &str) -> AppResult<Self> {
        let bad = || AppError::bad_input("not a cursor of myLikes");
        let (order, remark) = text
            .strip_prefix('l')
            .and_then(|rest| rest.split_once('.'))
            .ok_or_else(bad)?;
        Ok(Self {
            event_order: order.parse().map_err(|_| bad())?,
            remark_id: remark.parse().map_err(|_| bad())?,
        })
    }
}

impl Remarks {
    /// A page of the remarks `voter` likes, newest like first, after `after`.
    pub(crate) async fn liked_by(
        &self,
        voter: i64,
        first: usize,
        after: Option<LikeCursor>,
    ) -> AppResult<(Vec<LikeCursor>, bool)> {
        let after = after.unwrap_or(LikeCursor {
            event_order: i64::MAX,
            remark_id: i64::MAX,
        });
        let sql = format!(
            "SELECT v.remark_id, v.event_order FROM vote_log v \
             JOIN remarks r ON r.id = v.remark_id \
             WHERE v.voter_id = $1 AND r.deleted_at_ms IS NULL AND r.hidden_at_ms IS NULL \
             AND (v.event_order < $2 OR (v.event_order = $2 AND v.remark_id < $3)) \
             AND {CURRENT_LIKE} \
             ORDER BY v.event_order DESC, v.remark_id DESC LIMIT $4"
        );
        let rows = sqlx::query(&sql)
            .bind(voter)
            .bind(after.event_order)
            .bind(after.remark_id)
            .bind(first as i64 + 1)
            .fetch_all(&self.infra.db.pool)
            .await?;
        let likes = rows
            .iter()
            .map(|row| {
                Ok(LikeCursor {
                    event_order: row.try_get("event_order")?,
                    remark_id: row.try_get("remark_id")?,
                })
            })
            .collect::<Result<Vec<_>, sqlx::Error>>()?;
        let (likes, more) = split_page(likes, first);
        if likes.is_empty() {
            return Ok((likes, more));
        }
        // An unlike the archive does not hold yet: Redis's relation says "0".
        let (keys, shards) = (&self.infra.keys, self.settings.shards());
        let relations: Vec<Option<String>> = {
            let mut pipe = redis::pipe();
            for like in &likes {
                pipe.cmd("GET")
                    .arg(keys.like_relation(like.remark_id, voter, shards));
            }
            let mut conn = self.infra.redis.get().await?;
            pipe.query_async(&mut *conn).await?
        };
        let likes = likes
            .into_iter()
            .zip(relations)
            .filter(|(_, relation)| relation.as_deref() != Some("0"))
            .map(|(like, _)| like)
            .collect();
        Ok((likes, more))
    }
}
