//! Writing notifications to SQL, each once by its source, then to Redis.
//!
//! One transaction per batch of notices. Each notice first claims its source in
//! `notification_sources` (a replay finds it claimed and writes nothing), then takes its
//! user's state row by an UPDATE, which holds that row's lock to the commit: a mark as read
//! and another consumer's notice for the same user wait for it, so the unread count moves
//! by exactly what each of them changed. Notices are handled in user order, so two batches
//! take their users' locks in the same order.
//!
//! After the commit, every notification the batch touched (a replayed notice's too: its
//! first handling may have committed and then failed to reach Redis) is written to Redis as
//! SQL holds it now ([`super::hot`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use sqlx::{Any, Row, Transaction};

use super::{text, NotificationKind, Notifications, LIKE_GROUP_MS};
use crate::infra::error::AppResult;

/// Something to tell a user: what a consumer or a job makes of an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Notice {
    /// What it was made of, unique: a replay of the same source writes nothing.
    pub(crate) source: String,
    pub(crate) user_id: i64,
    pub(crate) kind: NotificationKind,
    pub(crate) actor_id: Option<i64>,
    pub(crate) remark_id: Option<i64>,
    pub(crate) order_id: Option<i64>,
    pub(crate) board_key: Option<String>,
    /// The text, when it does not depend on the actor's name (likes and follows do).
    pub(crate) text: Option<String>,
    pub(crate) at_ms: i64,
}

impl Notice {
    pub(crate) fn new(source: String, user_id: i64, kind: NotificationKind, at_ms: i64) -> Self {
        Self {
            source,
            user_id,
            kind,
            actor_id: None,
            remark_id: None,
            order_id: None,
            board_key: None,
            text: None,
            at_ms,
        }
    }
}

/// A user's state row as a write left it.
struct State {
    seq: i64,
    read_seq: i64,
    unread: i64,
}

impl Notifications {
    /// Records `notices`, each once, and writes the notifications they touched to Redis.
    pub(crate) async fn record(&self, mut notices: Vec<Notice>) -> AppResult<()> {
        if notices.is_empty() {
            return Ok(());
        }
        notices.sort_by_key(|notice| notice.user_id);
        // Read before the transaction: the directory answers from Redis, and a user seen
        // for the first time may not be in SQL yet.
        let actors: Vec<i64> = notices.iter().filter_map(|n| n.actor_id).collect();
        let names: HashMap<i64, String> = if actors.is_empty() {
            HashMap::new()
        } else {
            self.users
                .find_many(&actors)
                .await?
                .into_iter()
                .map(|(id, user)| (id, user.name))
                .collect()
        };
        let mut touched: BTreeMap<i64, BTreeSet<i64>> = BTreeMap::new();
        let mut tx = self.infra.db.pool.begin().await?;
        for notice in &notices {
            let id = self.record_one(&mut tx, notice, &names).await?;
            touched.entry(notice.user_id).or_default().insert(id);
        }
        tx.commit().await?;
        for (user_id, ids) in touched {
            let ids: Vec<i64> = ids.into_iter().filter(|id| *id != 0).collect();
            self.push(user_id, &ids).await?;
        }
        Ok(())
    }

    /// Writes one notice in `tx`: its notification's id (0 when a replay finds none: pruned).
    async fn record_one(
        &self,
        tx: &mut Transaction<'static, Any>,
        notice: &Notice,
        names: &HashMap<i64, String>,
    ) -> AppResult<i64> {
        let now = self.infra.clock.now_ms();
        let claimed = sqlx::query(
            "INSERT INTO notification_sources (source_key, notification_id, created_at_ms) \
             VALUES ($1, 0, $2) ON CONFLICT DO NOTHING",
        )
        .bind(&notice.source)
        .bind(now)
        .execute(&mut **tx)
        .await?
        .rows_affected();
        if claimed == 0 {
            let row = sqlx::query(
                "SELECT notification_id FROM notification_sources WHERE source_key = $1",
            )
            .bind(&notice.source)
            .fetch_one(&mut **tx)
            .await?;
            return Ok(row.try_get("notification_id")?);
        }
        let state = take_state(tx, notice.user_id).await?;
        let actor = notice
            .actor_id
            .and_then(|actor| names.get(&actor))
            .map_or(text::SOMEONE, String::as_str);
        let group = match (notice.kind, notice.remark_id) {
            (NotificationKind::LikeReceived, Some(remark)) => {
                like_group(tx, notice.user_id, remark, notice.at_ms).await?
            }
            _ => None,
        };
        let (id, unread) = match group {
            Some(group) => {
                let others = if Some(group.actor) == notice.actor_id {
                    group.others
                } else {
                    group.others + 1
                };
                sqlx::query(
                    "UPDATE notifications SET seq = $1, actor_id = $2, others = $3, text = $4, \
                     updated_at_ms = $5 WHERE id = $6",
                )
                .bind(state.seq)
                .bind(notice.actor_id)
                .bind(others)
                .bind(text::like(actor, others))
                .bind(notice.at_ms.max(group.at_ms))
                .bind(group.id)
                .execute(&mut **tx)
                .await?;
                // A group read before is unread again; an unread one stays counted once.
                let was_read = group.seq <= state.read_seq;
                (group.id, state.unread + i64::from(was_read))
            }
            None => {
                let id = self.infra.ids.next_id().await?;
                let text = notice.text.clone().unwrap_or_else(|| match notice.kind {
                    NotificationKind::LikeReceived => text::like(actor, 0),
                    _ => text::new_follower(actor),
                });
                sqlx::query(
                    "INSERT INTO notifications (id, user_id, seq, kind, actor_id, remark_id, \
                     order_id, board_key, others, text, created_at_ms, updated_at_ms) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 0, $9, $10, $10)",
                )
                .bind(id)
                .bind(notice.user_id)
                .bind(state.seq)
                .bind(notice.kind.as_str())
                .bind(notice.actor_id)
                .bind(notice.remark_id)
                .bind(notice.order_id)
                .bind(notice.board_key.as_deref())
                .bind(text)
                .bind(notice.at_ms)
                .execute(&mut **tx)
                .await?;
                (id, state.unread + 1)
            }
        };
        sqlx::query("UPDATE notification_states SET unread = $1 WHERE user_id = $2")
            .bind(unread)
            .bind(notice.user_id)
            .execute(&mut **tx)
            .await?;
        sqlx::query("UPDATE notification_sources SET notification_id = $1 WHERE source_key = $2")
            .bind(id)
            .bind(&notice.source)
            .execute(&mut **tx)
            .await?;
        Ok(id)
    }
}

/// Takes the user's state row (made on first use) with its lock, and the next place.
async fn take_state(tx: &mut Transaction<'static, Any>, user_id: i64) -> AppResult<State> {
    ensure_state(tx, user_id).await?;
    let row = sqlx::query(
        "UPDATE notification_states SET last_seq = last_seq + 1, version = version + 1 \
         WHERE user_id = $1 RETURNING last_seq, read_seq, unread",
    )
    .bind(user_id)
    .fetch_one(&mut **tx)
    .await?;
    Ok(State {
        seq: row.try_get("last_seq")?,
        read_seq: row.try_get("read_seq")?,
        unread: row.try_get("unread")?,
    })
}

/// Makes the user's state row if it is missing.
pub(super) async fn ensure_state(
    tx: &mut Transaction<'static, Any>,
    user_id: i64,
) -> AppResult<()> {
    sqlx::query(
        "INSERT INTO notification_states (user_id, last_seq, read_seq, unread, version) \
         VALUES ($1, 0, 0, 0, 0) ON CONFLICT DO NOTHING",
    )
    .bind(user_id)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// The like notification of `remark` a like at `at_ms` joins: the user's latest for it,
/// begun within the hour before.
struct LikeGroup {
    id: i64,
    seq: i64,
    actor: i64,
    others: i64,
    at_ms: i64,
}

async fn like_group(
    tx: &mut Transaction<'static, Any>,
    user_id: i64,
    remark_id: i64,
    at_ms: i64,
) -> AppResult<Option<LikeGroup>> {
    let row = sqlx::query(
        "SELECT id, seq, actor_id, others, updated_at_ms FROM notifications \
         WHERE user_id = $1 AND remark_id = $2 AND kind = $3 \
         AND created_at_ms > $4 AND created_at_ms <= $5 \
         ORDER BY created_at_ms DESC LIMIT 1",
    )
    .bind(user_id)
    .bind(remark_id)
    .bind(NotificationKind::LikeReceived.as_str())
    .bind(at_ms - LIKE_GROUP_MS)
    .bind(at_ms)
    .fetch_optional(&mut **tx)
    .await?;
    row.map(|row| {
        Ok(LikeGroup {
            id: row.try_get("id")?,
            seq: row.try_get("seq")?,
            actor: row.try_get::<Option<i64>, _>("actor_id")?.unwrap_or(0),
            others: row.try_get("others")?,
            at_ms: row.try_get("updated_at_ms")?,
        })
    })
    .transpose()
    .map_err(|e: sqlx::Error| e.into())
}
