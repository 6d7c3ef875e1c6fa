//! Reading a user's notifications (Redis first, SQL past the hot window or when Redis holds
//! nothing), the unread count, and marking read.

use sqlx::Row;

use super::{record_of, store::ensure_state, NotificationRecord, Notifications, COLUMNS};
use crate::infra::error::{AppError, AppResult};

/// A page of a user's notifications, newest first, and whether older ones follow.
#[derive(Debug, Clone)]
pub struct NotificationPage {
    pub records: Vec<NotificationRecord>,
    pub more: bool,
}

impl Notifications {
    /// Up to `first` of the user's notifications placed below `after` (a place), newest
    /// first; with `unread_only`, the unread ones alone (the newest, above the watermark).
    pub async fn page(
        &self,
        user_id: i64,
        first: usize,
        after: Option<i64>,
        unread_only: bool,
    ) -> AppResult<NotificationPage> {
        if let Some((state, mut records, full)) = self.hot_range(user_id, after, first + 1).await? {
            let read_seq = state.read_seq;
            let mut cut_at_read = false;
            if unread_only {
                let before = records.len();
                records.retain(|record| record.seq > read_seq);
                cut_at_read = records.len() < before;
            }
            // Complete when the page is full, when the hot list holds all the user has, or
            // when the unread ones ended within it.
            if records.len() > first || !full || cut_at_read {
                return Ok(page_of(records, first, read_seq));
            }
        }
        self.sql_page(user_id, first, after, unread_only).await
    }

    async fn sql_page(
        &self,
        user_id: i64,
        first: usize,
        after: Option<i64>,
        unread_only: bool,
    ) -> AppResult<NotificationPage> {
        let state = self.sql_state(user_id).await?;
        let floor = if unread_only { state.read_seq } else { 0 };
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM notifications WHERE user_id = $1 AND seq < $2 AND seq > $3 \
             ORDER BY seq DESC LIMIT $4"
        ))
        .bind(user_id)
        .bind(after.unwrap_or(i64::MAX))
        .bind(floor)
        .bind(first as i64 + 1)
        .fetch_all(&self.infra.db.pool)
        .await?;
        let records = rows.iter().map(record_of).collect::<Result<Vec<_>, _>>()?;
        Ok(page_of(records, first, state.read_seq))
    }

    /// The user's unread count: Redis's, or SQL's when Redis holds nothing for the user.
    pub async fn unread_count(&self, user_id: i64) -> AppResult<i64> {
        match self.hot_state(user_id).await? {
            Some(state) => Ok(state.unread),
            None => Ok(self.sql_state(user_id).await?.unread),
        }
    }

    /// A notification by id, as its user sees it (SQL).
    pub async fn find(&self, id: i64) -> AppResult<Option<NotificationRecord>> {
        let row = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM notifications WHERE id = $1"
        ))
        .bind(id)
        .fetch_optional(&self.infra.db.pool)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let mut record = record_of(&row)?;
        let state = self.sql_state(record.user_id).await?;
        record.read = record.seq <= state.read_seq;
        Ok(Some(record))
    }

    /// Marks the user's notification `up_to` and every older one read: how many were unread.
    /// Under the user's state lock, so marks and new notifications never miscount; a mark
    /// repeated, or covered by a later one, marks none.
    pub async fn mark_read(&self, user_id: i64, up_to: i64) -> AppResult<i64> {
        let mut tx = self.infra.db.pool.begin().await?;
        ensure_state(&mut tx, user_id).await?;
        let state = sqlx::query(
            "UPDATE notification_states SET version = version + 1 WHERE user_id = $1 \
             RETURNING read_seq, unread",
        )
        .bind(user_id)
        .fetch_one(&mut *tx)
        .await?;
        let (read_seq, unread): (i64, i64) = (state.try_get("read_seq")?, state.try_get("unread")?);
        // Its place now, under the lock: a like group that grew since the client saw it
        // has moved up, and marking it marks what lies below it now.
        let target = sqlx::query("SELECT seq FROM notifications WHERE id = $1 AND user_id = $2")
            .bind(up_to)
            .bind(user_id)
            .fetch_optional(&mut *tx)
            .await?
            .ok_or_else(|| AppError::not_found(format!("no notification {up_to}")))?;
        let seq: i64 = target.try_get("seq")?;
        let marked = if seq > read_seq {
            let row = sqlx::query(
                "SELECT COUNT(*) AS n FROM notifications WHERE user_id = $1 AND seq > $2 \
                 AND seq <= $3",
            )
            .bind(user_id)
            .bind(read_seq)
            .bind(seq)
            .fetch_one(&mut *tx)
            .await?;
            let marked: i64 = row.try_get("n")?;
            sqlx::query(
                "UPDATE notification_states SET read_seq = $1, unread = $2 WHERE user_id = $3",
            )
            .bind(seq)
            .bind((unread - marked).max(0))
            .bind(user_id)
            .execute(&mut *tx)
            .await?;
            marked
        } else {
            0
        };
        tx.commit().await?;
        // The state alone: whether a notification is read follows from the watermark. SQL
        // holds the mark: should Redis refuse it now, the user's next change writes it.
        if let Err(error) = self.push(user_id, &[]).await {
            tracing::warn!(user = user_id, %error, "notifications read, Redis not told yet");
        }
        Ok(marked)
    }
}

fn page_of(mut records: Vec<NotificationRecord>, first: usize, read_seq: i64) -> NotificationPage {
    let more = records.len() > first;
    records.truncate(first);
    for record in &mut records {
        record.read = record.seq <= read_seq;
    }
    NotificationPage { records, more }
}
