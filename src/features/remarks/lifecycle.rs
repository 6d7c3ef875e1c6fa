//! A remark's lifecycle after it is written: edited by its author (its likes stay), deleted
//! by its author or an admin, hidden (folded) by an admin.
//!
//! SQL is the record: a deleted remark keeps its row, marked, because the vote archive
//! refers to it and is kept; a hidden one is marked with its reason. Redis follows in one
//! script (`lua/remarks_withdraw.lua`): a deleted remark's counter, earliest likers and
//! relation keys go, and a tombstone takes the counter's place; a hidden remark's counter
//! stays (its author and admins still see its likes) with a mark. Both make the like
//! scripts answer `NOT_FOUND` from then on, atomically with every vote; a like that finds
//! no counter at all rebuilds it from SQL, which answers `NOT_FOUND` for a marked remark.
//! Public lists read SQL's marks ([`super::LISTED`]); the feed's entries are removed by
//! the feed (`Feed::forget_remark`), and a feed page drops any it still finds.
//!
//! A deleted remark still holds its author's place on the item (one remark per user per
//! item): a second review of the same item stays `CONFLICT`. Rejected: freeing the place,
//! which would let a user delete and write again to shed a hidden remark's fold.

use sqlx::Row;

use super::{NewRemark, RemarkRecord, Remarks, COLUMNS};
use crate::features::items::count_rating;
use crate::infra::{
    auth::{Role, Viewer},
    error::{AppError, AppResult},
    redis::scripts::{RemarksWithdraw, RemarksWithdrawArgs, Replies},
};

/// Longest reason for hiding a remark.
pub const MAX_HIDE_REASON_CHARS: usize = 200;

/// Relation keys removed per script call.
const RELATIONS_PER_CALL: usize = 500;

/// Times a change is tried again when another change of the same remark landed between
/// its read and its write.
const ATTEMPTS: usize = 5;

/// The condition that a remark's row is still as `remark` was read (its score, not deleted,
/// hidden or not): a change written under it moves the rating summary by what it read.
/// `score_param` is the placeholder number the caller binds the score read to.
/// Rejected: `SELECT … FOR UPDATE`, which SQLite lacks.
fn as_read(remark: &RemarkRecord, score_param: usize) -> String {
    let hidden = if remark.hidden {
        "hidden_at_ms IS NOT NULL"
    } else {
        "hidden_at_ms IS NULL"
    };
    format!("score = ${score_param} AND deleted_at_ms IS NULL AND {hidden}")
}

fn changed_meanwhile() -> AppError {
    AppError::conflict("the remark kept changing meanwhile; try again")
}

/// What happened to a remark withdrawn from likes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Withdrawal {
    Deleted,
    Hidden,
}

impl Withdrawal {
    fn as_arg(self) -> &'static str {
        match self {
            Withdrawal::Deleted => "deleted",
            Withdrawal::Hidden => "hidden",
        }
    }
}

impl Replies for RemarksWithdraw {
    type Reply = i64;
}

impl Remarks {
    /// A remark as SQL holds it, deleted or not.
    async fn stored(&self, id: i64) -> AppResult<RemarkRecord> {
        sqlx::query(&format!("SELECT {COLUMNS} FROM remarks WHERE id = $1"))
            .bind(id)
            .fetch_optional(&self.infra.db.pool)
            .await?
            .map(|row| RemarkRecord::from_row(&row))
            .transpose()?
            .ok_or_else(|| AppError::not_found(format!("no remark {id}")))
    }

    /// The remark if `viewer` may see it, else `NOT_FOUND` (the same answer as for a remark
    /// that never was).
    async fn shown(&self, viewer: &Viewer, id: i64) -> AppResult<RemarkRecord> {
        let remark = self.stored(id).await?;
        if remark.shown_to(Some(viewer)) {
            Ok(remark)
        } else {
            Err(AppError::not_found(format!("no remark {id}")))
        }
    }

    /// Changes a remark's content and, when given, its score; only its author may. Likes,
    /// relations and the vote archive are untouched; the item's rating summary moves with
    /// the score in the same transaction.
    pub(crate) async fn edit(
        &self,
        viewer: &Viewer,
        id: i64,
        content: &str,
        score: Option<i32>,
    ) -> AppResult<RemarkRecord> {
        for _ in 0..ATTEMPTS {
            let remark = self.shown(viewer, id).await?;
            if remark.author_id != viewer.user_id {
                return Err(AppError::forbidden("only its author may edit a remark"));
            }
            let checked = NewRemark::new(
                remark.item_id,
                score.unwrap_or(remark.score),
                content,
                Vec::new(),
            )?;
            let mut tx = self.infra.db.pool.begin().await?;
            let updated = sqlx::query(&format!(
                "UPDATE remarks SET content = $1, score = $2, edited_at_ms = $3 \
                 WHERE id = $4 AND {}",
                as_read(&remark, 5)
            ))
            .bind(&checked.content)
            .bind(checked.score)
            .bind(self.infra.clock.now_ms())
            .bind(id)
            .bind(remark.score)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if updated == 0 {
                continue;
            }
            if !remark.hidden && remark.score != checked.score {
                count_rating(&mut tx, remark.item_id, remark.score, -1).await?;
                count_rating(&mut tx, remark.item_id, checked.score, 1).await?;
            }
            tx.commit().await?;
            self.caches
                .pages
                .forget(|page| page.item_id == remark.item_id);
            return self.stored(id).await;
        }
        Err(changed_meanwhile())
    }

    /// Deletes a remark (its author or an admin): SQL marks it (and its rating leaves the
    /// item's summary), then Redis withdraws it. Answers the remark as it was.
    pub(crate) async fn delete(&self, viewer: &Viewer, id: i64) -> AppResult<RemarkRecord> {
        for _ in 0..ATTEMPTS {
            let remark = self.shown(viewer, id).await?;
            if remark.author_id != viewer.user_id && viewer.role != Role::Admin {
                return Err(AppError::forbidden(
                    "only its author or an admin may delete a remark",
                ));
            }
            if self.mark_withdrawn(&remark, None).await? {
                return Ok(remark);
            }
        }
        Err(changed_meanwhile())
    }

    /// Hides (folds) a remark with a reason (an admin): SQL marks it (and its rating leaves
    /// the item's summary), then Redis. Hiding a hidden remark changes its reason.
    pub(crate) async fn hide(&self, id: i64, reason: &str) -> AppResult<RemarkRecord> {
        let reason = reason.trim();
        if reason.is_empty() || reason.chars().count() > MAX_HIDE_REASON_CHARS {
            return Err(AppError::bad_input(format!(
                "reason must have 1 to {MAX_HIDE_REASON_CHARS} characters"
            )));
        }
        for _ in 0..ATTEMPTS {
            let remark = self.stored(id).await?;
            if remark.deleted {
                return Err(AppError::not_found(format!("no remark {id}")));
            }
            if self.mark_withdrawn(&remark, Some(reason)).await? {
                return self.stored(id).await;
            }
        }
        Err(changed_meanwhile())
    }

    /// Marks `remark` hidden with `hidden_reason`, or deleted without one, in SQL, moving
    /// its rating out of the item's summary in the same transaction, then withdraws it in
    /// Redis. False, with nothing written, when the row changed since `remark` was read.
    async fn mark_withdrawn(
        &self,
        remark: &RemarkRecord,
        hidden_reason: Option<&str>,
    ) -> AppResult<bool> {
        let (how, set, id_param) = match hidden_reason {
            None => (Withdrawal::Deleted, "deleted_at_ms = $1", 2),
            Some(_) => (
                Withdrawal::Hidden,
                "hidden_at_ms = COALESCE(hidden_at_ms, $1), hidden_reason = $2",
                3,
            ),
        };
        let sql = format!(
            "UPDATE remarks SET {set} WHERE id = ${id_param} AND {}",
            as_read(remark, id_param + 1)
        );
        let mut update = sqlx::query(&sql).bind(self.infra.clock.now_ms());
        if let Some(reason) = hidden_reason {
            update = update.bind(reason);
        }
        let mut tx = self.infra.db.pool.begin().await?;
        let updated = update
            .bind(remark.id)
            .bind(remark.score)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if updated == 0 {
            return Ok(false);
        }
        if !remark.hidden {
            count_rating(&mut tx, remark.item_id, remark.score, -1).await?;
        }
        tx.commit().await?;
        self.caches
            .pages
            .forget(|page| page.item_id == remark.item_id);
        self.withdraw_or_leave(remark.id, how).await;
        Ok(true)
    }

    /// Withdraws a remark in Redis; a failure is left to the next like (which rebuilds from
    /// SQL and refuses) and to `engage rebuild`.
    async fn withdraw_or_leave(&self, id: i64, how: Withdrawal) {
        if let Err(error) = self.withdraw(id, how).await {
            tracing::warn!(remark = id, %error, "remark not withdrawn from Redis; likes rebuild it from SQL");
        }
    }

    /// Redis's side of a deleted or hidden remark (idempotent): for a deleted one, the
    /// relation keys of every voter the archive or the earliest likers name.
    pub(crate) async fn withdraw(&self, id: i64, how: Withdrawal) -> AppResult<()> {
        let (keys, shards) = (&self.infra.keys, self.settings.shards());
        let mut voters: Vec<i64> = Vec::new();
        if how == Withdrawal::Deleted {
            let rows = sqlx::query("SELECT DISTINCT voter_id FROM vote_log WHERE remark_id = $1")
                .bind(id)
                .fetch_all(&self.infra.db.pool)
                .await?;
            for row in &rows {
                voters.push(row.try_get("voter_id")?);
            }
            let mut conn = self.infra.redis.get().await?;
            let likers: Vec<i64> = redis::cmd("ZRANGE")
                .arg(keys.remark_likers(id, shards))
                .arg(0)
                .arg(-1)
                .query_async(&mut *conn)
                .await?;
            voters.extend(likers);
            voters.sort_unstable();
            voters.dedup();
        }
        let mut chunks: Vec<&[i64]> = voters.chunks(RELATIONS_PER_CALL).collect();
        if chunks.is_empty() {
            chunks.push(&[]);
        }
        for chunk in chunks {
            let script = RemarksWithdraw {
                info: keys.remark_info(id, shards),
                likers: keys.remark_likers(id, shards),
                relations: chunk
                    .iter()
                    .map(|voter| keys.like_relation(id, *voter, shards))
                    .collect(),
            };
            let args = RemarksWithdrawArgs {
                state: how.as_arg(),
                tombstone_ttl_seconds: self.settings.relation_ttl_seconds(),
            };
            self.infra.scripts().call(&script, &args).await?;
        }
        Ok(())
    }
}
