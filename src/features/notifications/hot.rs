//! The Redis side: each user's newest [`HOT_WINDOW`] notifications, read watermark and
//! unread count, written from SQL by `lua/notifications_store.lua` and read first.
//!
//! Every write sends what SQL holds after a commit, tagged with the user's version (the
//! state) and each notification's place: the script keeps what is newer, so writes from
//! several instances may arrive in any order, and a write that failed is made good by any
//! later one (the count, the watermark) or by the notification's next change. A user Redis
//! does not hold (new, or lost) is written whole from SQL ([`Notifications::rebuild_user`]):
//! a hot list is complete or absent, never a fragment read as the whole.

use sqlx::Row;

use super::{record_of, NotificationRecord, Notifications, COLUMNS, HOT_WINDOW};
use crate::infra::{
    db,
    error::{AppError, AppResult},
    redis::{
        scripts::{NotificationsStore, NotificationsStoreArgs, Replies},
        status::Status,
    },
};

impl Replies for NotificationsStore {
    type Reply = Status;
}

/// A user's state row in SQL.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SqlState {
    pub(crate) version: i64,
    pub(crate) read_seq: i64,
    pub(crate) unread: i64,
}

/// What Redis holds of a user's state: `None` when it holds nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HotState {
    pub(crate) read_seq: i64,
    pub(crate) unread: i64,
}

impl Notifications {
    /// The user's state row (all zero for a user never notified).
    pub(crate) async fn sql_state(&self, user_id: i64) -> AppResult<SqlState> {
        let row = sqlx::query(
            "SELECT version, read_seq, unread FROM notification_states WHERE user_id = $1",
        )
        .bind(user_id)
        .fetch_optional(&self.infra.db.pool)
        .await?;
        Ok(match row {
            Some(row) => SqlState {
                version: row.try_get("version")?,
                read_seq: row.try_get("read_seq")?,
                unread: row.try_get("unread")?,
            },
            None => SqlState::default(),
        })
    }

    /// Writes the user's state and the notifications `ids` to Redis as SQL holds them; a user
    /// Redis does not hold is written whole.
    pub(crate) async fn push(&self, user_id: i64, ids: &[i64]) -> AppResult<()> {
        let state = self.sql_state(user_id).await?;
        let records = self.rows(user_id, ids).await?;
        if self.store(user_id, state, &records, false).await? != Status::Missing {
            return Ok(());
        }
        self.rebuild_user(user_id).await?;
        // A rebuild announces nothing (after a loss it would repeat a whole window): the
        // notifications of this write are announced here.
        let keys = &self.infra.keys;
        let mut pipe = redis::pipe();
        for record in records.iter().filter(|r| r.seq > state.read_seq) {
            let json = serde_json::to_string(record).map_err(AppError::internal)?;
            pipe.cmd(keys.publish_command())
                .arg(keys.notifications_channel(user_id))
                .arg(format!("n {json}"))
                .ignore();
        }
        let mut conn = self.infra.redis.get().await?;
        let () = pipe.query_async(&mut *conn).await?;
        Ok(())
    }

    /// Replaces what Redis holds of the user with SQL's newest [`HOT_WINDOW`] and state.
    pub(crate) async fn rebuild_user(&self, user_id: i64) -> AppResult<()> {
        let state = self.sql_state(user_id).await?;
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM notifications WHERE user_id = $1 ORDER BY seq DESC LIMIT $2"
        ))
        .bind(user_id)
        .bind(HOT_WINDOW as i64)
        .fetch_all(&self.infra.db.pool)
        .await?;
        let records = rows.iter().map(record_of).collect::<Result<Vec<_>, _>>()?;
        self.store(user_id, state, &records, true).await?;
        Ok(())
    }

    async fn store(
        &self,
        user_id: i64,
        state: SqlState,
        records: &[NotificationRecord],
        replace: bool,
    ) -> AppResult<Status> {
        let keys = &self.infra.keys;
        let mut items = Vec::with_capacity(records.len() * 3);
        for record in records {
            items.push(record.id.to_string());
            items.push(record.seq.to_string());
            items.push(serde_json::to_string(record).map_err(AppError::internal)?);
        }
        self.infra
            .scripts()
            .call(
                &NotificationsStore {
                    hot: keys.notifications_hot(user_id),
                    items: keys.notifications_items(user_id),
                    state: keys.notifications_state(user_id),
                },
                &NotificationsStoreArgs {
                    version: state.version,
                    read_seq: state.read_seq,
                    unread: state.unread,
                    replace: i64::from(replace),
                    keep: HOT_WINDOW as i64,
                    publish: keys.publish_command(),
                    channel: keys.notifications_channel(user_id),
                    items,
                },
            )
            .await
    }

    /// The user's notifications `ids` as SQL holds them.
    async fn rows(&self, user_id: i64, ids: &[i64]) -> AppResult<Vec<NotificationRecord>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let backend = self.infra.db.backend;
        let mut records = Vec::with_capacity(ids.len());
        for list in db::in_lists(ids) {
            let sql = format!(
                "SELECT {COLUMNS} FROM notifications WHERE user_id = {} AND id IN ({})",
                backend.param(1),
                db::params(backend, 2, list.len())
            );
            let mut query = sqlx::query(&sql).bind(user_id);
            for id in list {
                query = query.bind(*id);
            }
            for row in query.fetch_all(&self.infra.db.pool).await? {
                records.push(record_of(&row)?);
            }
        }
        Ok(records)
    }

    /// What Redis holds of the user's state.
    pub(crate) async fn hot_state(&self, user_id: i64) -> AppResult<Option<HotState>> {
        let mut conn = self.infra.redis.get().await?;
        let (read_seq, unread): (Option<i64>, Option<i64>) = redis::cmd("HMGET")
            .arg(self.infra.keys.notifications_state(user_id))
            .arg("read_seq")
            .arg("unread")
            .query_async(&mut *conn)
            .await?;
        Ok(read_seq
            .zip(unread)
            .map(|(read_seq, unread)| HotState { read_seq, unread }))
    }

    /// Up to `limit` held notifications placed below `before`, newest first, with the
    /// state and whether the hot list is full (it may then lack older ones). `None` when
    /// Redis holds nothing for the user, or lost a notification between two reads.
    pub(crate) async fn hot_range(
        &self,
        user_id: i64,
        before: Option<i64>,
        limit: usize,
    ) -> AppResult<Option<(HotState, Vec<NotificationRecord>, bool)>> {
        let keys = &self.infra.keys;
        let max = before.map_or_else(|| "+inf".to_string(), |seq| format!("({seq}"));
        let mut conn = self.infra.redis.get().await?;
        let ((read_seq, unread), ids, held): ((Option<i64>, Option<i64>), Vec<i64>, usize) =
            redis::pipe()
                .atomic()
                .cmd("HMGET")
                .arg(keys.notifications_state(user_id))
                .arg("read_seq")
                .arg("unread")
                .cmd("ZREVRANGEBYSCORE")
                .arg(keys.notifications_hot(user_id))
                .arg(max)
                .arg("-inf")
                .arg("LIMIT")
                .arg(0)
                .arg(limit)
                .cmd("ZCARD")
                .arg(keys.notifications_hot(user_id))
                .query_async(&mut *conn)
                .await?;
        let Some(state) = read_seq
            .zip(unread)
            .map(|(read_seq, unread)| HotState { read_seq, unread })
        else {
            return Ok(None);
        };
        if ids.is_empty() {
            return Ok(Some((state, Vec::new(), held >= HOT_WINDOW)));
        }
        let texts: Vec<Option<String>> = redis::cmd("HMGET")
            .arg(keys.notifications_items(user_id))
            .arg(&ids)
            .query_async(&mut *conn)
            .await?;
        let mut records = Vec::with_capacity(texts.len());
        for text in texts {
            let Some(record) = text.and_then(|t| serde_json::from_str(&t).ok()) else {
                return Ok(None);
            };
            records.push(record);
        }
        Ok(Some((state, records, held >= HOT_WINDOW)))
    }
}
