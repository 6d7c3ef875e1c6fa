//! Writing notifications to SQL, each once by its source, then to Redis.
//!
//! One transaction per batch of notices, in a few statements per user rather than per
//! notice (a busy author's likes come in hundreds):
//! - every notice first claims its source in `notification_sources`, all in one statement;
//!   a replay finds its source claimed and writes nothing;
//! - then user by user, in user order (so that two batches take their users' locks in the
//!   same order): the user's state row is taken by an UPDATE, which holds that row's lock
//!   to the commit, so a mark as read and another consumer's notice for the same user wait
//!   for it and the unread count moves by exactly what each of them changed; the like
//!   groups the user's likes may join are read once; the notices are applied in order in
//!   memory, as one by one they would have been; and each notification they touched is
//!   written once.
//!
//! After the commit, every notification the batch touched (a replayed notice's too: its
//! first handling may have committed and then failed to reach Redis) is written to Redis as
//! SQL holds it now ([`super::hot`]).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use sqlx::{Any, Row, Transaction};

use super::{text, NotificationKind, Notifications, LIKE_GROUP_MS};
use crate::infra::{
    db::{self, values_placeholders, Backend},
    error::AppResult,
};

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

/// A user's state row as the batch found it.
struct State {
    /// The place of the user's last notice before this batch.
    last_seq: i64,
    read_seq: i64,
    unread: i64,
}

/// A notification as the batch leaves it, written once at the end.
struct Written {
    id: i64,
    /// A notification of this batch (INSERT) or one it joined (UPDATE).
    new: bool,
    seq: i64,
    kind: NotificationKind,
    actor_id: Option<i64>,
    remark_id: Option<i64>,
    order_id: Option<i64>,
    board_key: Option<String>,
    /// Likes of the group besides the latest liker's.
    others: i64,
    text: Option<String>,
    created_at_ms: i64,
    updated_at_ms: i64,
    /// The sources that made or joined it.
    sources: Vec<String>,
}

impl Notifications {
    /// Records `notices`, each once, and writes the notifications they touched to Redis.
    pub(crate) async fn record(&self, mut notices: Vec<Notice>) -> AppResult<()> {
        if notices.is_empty() {
            return Ok(());
        }
        // One notice per source (as the claim counts it), and stable: a user's notices keep
        // their order.
        let mut seen = HashSet::new();
        notices.retain(|notice| seen.insert(notice.source.clone()));
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
        let claimed = claim_sources(&mut tx, &notices, self.infra.clock.now_ms()).await?;
        let replayed: Vec<&Notice> = notices
            .iter()
            .filter(|notice| !claimed.contains(&notice.source))
            .collect();
        for (user_id, id) in replayed_notifications(&mut tx, &replayed).await? {
            touched.entry(user_id).or_default().insert(id);
        }
        let mut start = 0;
        while start < notices.len() {
            let user_id = notices[start].user_id;
            let end = start
                + notices[start..]
                    .iter()
                    .take_while(|notice| notice.user_id == user_id)
                    .count();
            let mine: Vec<&Notice> = notices[start..end]
                .iter()
                .filter(|notice| claimed.contains(&notice.source))
                .collect();
            start = end;
            if mine.is_empty() {
                continue;
            }
            for id in self.record_user(&mut tx, user_id, &mine, &names).await? {
                touched.entry(user_id).or_default().insert(id);
            }
        }
        tx.commit().await?;
        for (user_id, ids) in touched {
            let ids: Vec<i64> = ids.into_iter().filter(|id| *id != 0).collect();
            self.push(user_id, &ids).await?;
        }
        Ok(())
    }

    /// Applies one user's new notices in order: the ids of the notifications written.
    async fn record_user(
        &self,
        tx: &mut Transaction<'static, Any>,
        user_id: i64,
        notices: &[&Notice],
        names: &HashMap<i64, String>,
    ) -> AppResult<Vec<i64>> {
        let state = take_state(tx, user_id, notices.len() as i64).await?;
        let mut written: Vec<Written> = like_groups(tx, user_id, notices).await?;
        let mut unread = state.unread;
        for (place, notice) in (1..).zip(notices) {
            let seq = state.last_seq + place;
            let joined = match (notice.kind, notice.remark_id) {
                (NotificationKind::LikeReceived, Some(remark)) => {
                    joined_group(&written, remark, notice.at_ms)
                }
                _ => None,
            };
            match joined {
                Some(index) => {
                    let group = &mut written[index];
                    // A group read before is unread again; an unread one stays counted once.
                    unread += i64::from(group.seq <= state.read_seq);
                    if group.actor_id != notice.actor_id {
                        group.others += 1;
                    }
                    group.actor_id = notice.actor_id;
                    group.seq = seq;
                    group.updated_at_ms = group.updated_at_ms.max(notice.at_ms);
                    group.sources.push(notice.source.clone());
                }
                None => {
                    unread += 1;
                    written.push(Written {
                        id: self.infra.ids.next_id().await?,
                        new: true,
                        seq,
                        kind: notice.kind,
                        actor_id: notice.actor_id,
                        remark_id: notice.remark_id,
                        order_id: notice.order_id,
                        board_key: notice.board_key.clone(),
                        others: 0,
                        text: notice.text.clone(),
                        created_at_ms: notice.at_ms,
                        updated_at_ms: notice.at_ms,
                        sources: vec![notice.source.clone()],
                    });
                }
            }
        }
        let mut ids = Vec::new();
        for notification in written.iter().filter(|w| !w.sources.is_empty()) {
            write(tx, user_id, notification, names).await?;
            ids.push(notification.id);
        }
        sqlx::query("UPDATE notification_states SET unread = $1 WHERE user_id = $2")
            .bind(unread)
            .bind(user_id)
            .execute(&mut **tx)
            .await?;
        Ok(ids)
    }
}

/// Claims the notices' sources, all in one statement: the sources claimed now (the others
/// were claimed by an earlier handling).
async fn claim_sources(
    tx: &mut Transaction<'static, Any>,
    notices: &[Notice],
    now_ms: i64,
) -> AppResult<HashSet<String>> {
    let backend = Backend::of(tx);
    let mut claimed = HashSet::new();
    for part in db::runs(notices) {
        let sql = format!(
            "INSERT INTO notification_sources (source_key, created_at_ms, notification_id) \
             VALUES {} ON CONFLICT DO NOTHING RETURNING source_key",
            values_placeholders(backend, part.len(), 2).replace(')', ", 0)")
        );
        let mut insert = sqlx::query(&sql);
        for notice in part {
            insert = insert.bind(&notice.source).bind(now_ms);
        }
        for row in insert.fetch_all(&mut **tx).await? {
            claimed.insert(row.try_get::<String, _>("source_key")?);
        }
    }
    Ok(claimed)
}

/// The notifications replayed notices made when first handled: `(user, id)`.
async fn replayed_notifications(
    tx: &mut Transaction<'static, Any>,
    replayed: &[&Notice],
) -> AppResult<Vec<(i64, i64)>> {
    let backend = Backend::of(tx);
    let users: HashMap<&str, i64> = replayed
        .iter()
        .map(|notice| (notice.source.as_str(), notice.user_id))
        .collect();
    let mut found = Vec::new();
    for part in db::in_lists(replayed) {
        let sql = format!(
            "SELECT source_key, notification_id FROM notification_sources \
             WHERE source_key IN ({})",
            db::params(backend, 1, part.len())
        );
        let mut select = sqlx::query(&sql);
        for notice in part {
            select = select.bind(&notice.source);
        }
        for row in select.fetch_all(&mut **tx).await? {
            let source: String = row.try_get("source_key")?;
            let user_id = users.get(source.as_str()).copied().unwrap_or_default();
            found.push((user_id, row.try_get("notification_id")?));
        }
    }
    Ok(found)
}

/// Takes the user's state row (made on first use) with its lock, and `places` places after
/// its last.
async fn take_state(
    tx: &mut Transaction<'static, Any>,
    user_id: i64,
    places: i64,
) -> AppResult<State> {
    ensure_state(tx, user_id).await?;
    let row = sqlx::query(
        "UPDATE notification_states SET last_seq = last_seq + $1, version = version + 1 \
         WHERE user_id = $2 RETURNING last_seq, read_seq, unread",
    )
    .bind(places)
    .bind(user_id)
    .fetch_one(&mut **tx)
    .await?;
    Ok(State {
        last_seq: row.try_get::<i64, _>("last_seq")? - places,
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

/// Every like group of the user that a like of these notices may join: each of the
/// remarks' groups begun within the hour before the earliest like, up to the latest. Read
/// under the user's lock, so another batch's changes are committed or wait for this one.
async fn like_groups(
    tx: &mut Transaction<'static, Any>,
    user_id: i64,
    notices: &[&Notice],
) -> AppResult<Vec<Written>> {
    let likes: Vec<&&Notice> = notices
        .iter()
        .filter(|n| n.kind == NotificationKind::LikeReceived && n.remark_id.is_some())
        .collect();
    let (Some(earliest), Some(latest)) = (
        likes.iter().map(|n| n.at_ms).min(),
        likes.iter().map(|n| n.at_ms).max(),
    ) else {
        return Ok(Vec::new());
    };
    let remarks: BTreeSet<i64> = likes.iter().filter_map(|n| n.remark_id).collect();
    let remarks: Vec<i64> = remarks.into_iter().collect();
    let backend = Backend::of(tx);
    let mut groups = Vec::new();
    for part in db::in_lists(&remarks) {
        let sql = format!(
            "SELECT id, seq, actor_id, remark_id, others, text, created_at_ms, updated_at_ms \
             FROM notifications WHERE user_id = {} AND kind = {} AND created_at_ms > {} \
             AND created_at_ms <= {} AND remark_id IN ({})",
            backend.param(1),
            backend.param(2),
            backend.param(3),
            backend.param(4),
            db::params(backend, 5, part.len())
        );
        let mut select = sqlx::query(&sql)
            .bind(user_id)
            .bind(NotificationKind::LikeReceived.as_str())
            .bind(earliest - LIKE_GROUP_MS)
            .bind(latest);
        for remark in part {
            select = select.bind(*remark);
        }
        for row in select.fetch_all(&mut **tx).await? {
            groups.push(Written {
                id: row.try_get("id")?,
                new: false,
                seq: row.try_get("seq")?,
                kind: NotificationKind::LikeReceived,
                actor_id: Some(row.try_get::<Option<i64>, _>("actor_id")?.unwrap_or(0)),
                remark_id: row.try_get("remark_id")?,
                order_id: None,
                board_key: None,
                others: row.try_get("others")?,
                text: None,
                created_at_ms: row.try_get("created_at_ms")?,
                updated_at_ms: row.try_get("updated_at_ms")?,
                sources: Vec::new(),
            });
        }
    }
    Ok(groups)
}

/// The like group of `remark` a like at `at_ms` joins: the latest begun within the hour
/// before it, among those read and those this batch began.
fn joined_group(written: &[Written], remark: i64, at_ms: i64) -> Option<usize> {
    written
        .iter()
        .enumerate()
        .filter(|(_, w)| {
            w.kind == NotificationKind::LikeReceived
                && w.remark_id == Some(remark)
                && w.created_at_ms > at_ms - LIKE_GROUP_MS
                && w.created_at_ms <= at_ms
        })
        .max_by_key(|(_, w)| w.created_at_ms)
        .map(|(index, _)| index)
}

/// Writes a notification as the batch left it, and points its sources at it.
async fn write(
    tx: &mut Transaction<'static, Any>,
    user_id: i64,
    notification: &Written,
    names: &HashMap<i64, String>,
) -> AppResult<()> {
    let actor = notification
        .actor_id
        .and_then(|actor| names.get(&actor))
        .map_or(text::SOMEONE, String::as_str);
    let text = match (notification.kind, &notification.text) {
        (NotificationKind::LikeReceived, _) => text::like(actor, notification.others),
        (_, Some(text)) => text.clone(),
        _ => text::new_follower(actor),
    };
    if notification.new {
        sqlx::query(
            "INSERT INTO notifications (id, user_id, seq, kind, actor_id, remark_id, \
             order_id, board_key, others, text, created_at_ms, updated_at_ms) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
        )
        .bind(notification.id)
        .bind(user_id)
        .bind(notification.seq)
        .bind(notification.kind.as_str())
        .bind(notification.actor_id)
        .bind(notification.remark_id)
        .bind(notification.order_id)
        .bind(notification.board_key.as_deref())
        .bind(notification.others)
        .bind(text)
        .bind(notification.created_at_ms)
        .bind(notification.updated_at_ms)
        .execute(&mut **tx)
        .await?;
    } else {
        sqlx::query(
            "UPDATE notifications SET seq = $1, actor_id = $2, others = $3, text = $4, \
             updated_at_ms = $5 WHERE id = $6",
        )
        .bind(notification.seq)
        .bind(notification.actor_id)
        .bind(notification.others)
        .bind(text)
        .bind(notification.updated_at_ms)
        .bind(notification.id)
        .execute(&mut **tx)
        .await?;
    }
    let backend = Backend::of(tx);
    for part in db::in_lists(&notification.sources) {
        let sql = format!(
            "UPDATE notification_sources SET notification_id = {} WHERE source_key IN ({})",
            backend.param(1),
            db::params(backend, 2, part.len())
        );
        let mut update = sqlx::query(&sql).bind(notification.id);
        for source in part {
            update = update.bind(source);
        }
        update.execute(&mut **tx).await?;
    }
    Ok(())
}
