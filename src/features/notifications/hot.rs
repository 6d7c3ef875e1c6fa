//! The Redis side: each user's newest [`HOT_WINDOW`] notifications, read watermark and
//! unread count, written from SQL by `lua/notifications_store.lua` and read first.
//!
//! Every write sends what SQL holds after a commit, tagged with the user's version (the
//! state) and each notification's place: the script keeps what is newer, so writes from
//! several instances may arrive in any order, and a write that failed is made good by any
//! later one (the count, the watermark) or by the notification's next change. A user Redis
//! does not hold (new, or lost) is written whole from SQL ([`Notifications::rebuild_user`]):
//! a hot list is complete or absent, never a fragment read as the whole.

use std::collections::HashMap;

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

/// The values of a `lua/notifications_store.lua` call.
type StoreArgs = NotificationsStoreArgs<i64, i64, i64, i64, i64, &'static str, String, Vec<String>>;

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

/// Reads a state row's version, watermark and unread count.
fn state_of(row: &sqlx::any::AnyRow) -> Result<SqlState, sqlx::Error> {
    Ok(SqlState {
        version: row.try_get("version")?,
        read_seq: row.try_get("read_seq")?,
        unread: row.try_get("unread")?,
    })
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
        row.as_ref()
            .map_or(Ok(SqlState::default()), state_of)
            .map_err(Into::into)
    }

    /// The state rows of `users` that have one.
    async fn sql_states(&self, users: &[i64]) -> AppResult<HashMap<i64, SqlState>> {
        let sql = format!(
            "SELECT user_id, version, read_seq, unread FROM notification_states \
             WHERE user_id IN (SELECT v.value FROM ({}) AS v)",
            db::json_list(self.infra.db.backend, 1, "BIGINT")
        );
        let mut states = HashMap::with_capacity(users.len());
        for row in sqlx::query(&sql)
            .bind(db::json_rows(users))
            .fetch_all(&self.infra.db.pool)
            .await?
        {
            states.insert(row.try_get("user_id")?, state_of(&row)?);
        }
        Ok(states)
    }

    /// Writes the user's state and the notifications `ids` to Redis as SQL holds them; a user
    /// Redis does not hold is written whole.
    pub(crate) async fn push(&self, user_id: i64, ids: &[i64]) -> AppResult<()> {
        self.push_many(&[(user_id, ids.to_vec())]).await
    }

    /// [`Notifications::push`] for each `(user, ids)`: SQL read once for them all, and
    /// Redis written in one round trip.
    pub(crate) async fn push_many(&self, users: &[(i64, Vec<i64>)]) -> AppResult<()> {
        if users.is_empty() {
            return Ok(());
        }
        let user_ids: Vec<i64> = users.iter().map(|(user_id, _)| *user_id).collect();
        let states = self.sql_states(&user_ids).await?;
        let ids: Vec<i64> = users
            .iter()
            .flat_map(|(_, ids)| ids.iter().copied())
            .collect();
        let mut records: HashMap<i64, Vec<NotificationRecord>> = HashMap::new();
        for record in self.rows(&ids).await? {
            records.entry(record.user_id).or_default().push(record);
        }
        let mut calls = Vec::with_capacity(users.len());
        let mut written = Vec::with_capacity(users.len());
        for &user_id in &user_ids {
            let state = states.get(&user_id).copied().unwrap_or_default();
            let records = records.remove(&user_id).unwrap_or_default();
            calls.push(self.store_call(user_id, state, &records, false)?);
            written.push((user_id, state, records));
        }
        let replies = self.infra.scripts().call_many(&calls).await?;
        for ((user_id, state, records), reply) in written.iter().zip(replies) {
            if reply == Status::Missing {
                self.rebuild_and_announce(*user_id, *state, records).await?;
            }
        }
        Ok(())
    }

    /// Writes a user Redis does not hold whole, and announces the notifications `records`
    /// of the write that found it missing.
    async fn rebuild_and_announce(
        &self,
        user_id: i64,
        state: SqlState,
        records: &[NotificationRecord],
    ) -> AppResult<()> {
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
        let (keys, args) = self.store_call(user_id, state, records, replace)?;
        self.infra.scripts().call(&keys, &args).await
    }

    /// The call of `lua/notifications_store.lua` that writes the user's `state` and
    /// `records` (all the user's hot list with `replace`).
    fn store_call(
        &self,
        user_id: i64,
        state: SqlState,
        records: &[NotificationRecord],
        replace: bool,
    ) -> AppResult<(NotificationsStore, StoreArgs)> {
        let keys = &self.infra.keys;
        let mut items = Vec::with_capacity(records.len() * 3);
        for record in records {
            items.push(record.id.to_string());
            items.push(record.seq.to_string());
            items.push(serde_json::to_string(record).map_err(AppError::internal)?);
        }
        Ok((
            NotificationsStore {
                hot: keys.notifications_hot(user_id),
                items: keys.notifications_items(user_id),
                state: keys.notifications_state(user_id),
            },
            NotificationsStoreArgs {
                version: state.version,
                read_seq: state.read_seq,
                unread: state.unread,
                replace: i64::from(replace),
                keep: HOT_WINDOW as i64,
                publish: keys.publish_command(),
                channel: keys.notifications_channel(user_id),
                items,
            },
        ))
    }

    /// The notifications `ids` as SQL holds them.
    async fn rows(&self, ids: &[i64]) -> AppResult<Vec<NotificationRecord>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT {COLUMNS} FROM notifications WHERE id IN (SELECT v.value FROM ({}) AS v)",
            db::json_list(self.infra.db.backend, 1, "BIGINT")
        );
        let mut records = Vec::with_capacity(ids.len());
        for row in sqlx::query(&sql)
            .bind(db::json_rows(ids))
            .fetch_all(&self.infra.db.pool)
            .await?
        {
            records.push(record_of(&row)?);
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
