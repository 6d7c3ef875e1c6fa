//! Writing notifications to SQL, each once by its source, then to Redis.
//!
//! One transaction per batch of notices, in a few statements for the whole batch rather
//! than per user or per notice (a batch of likes names a hundred authors, a busy author's
//! likes come in hundreds):
//! - every notice first claims its source in `notification_sources`; a replay finds its
//!   source claimed and writes nothing;
//! - the users' state rows are taken with their locks, in user order (so that two batches
//!   never wait for each other in a circle), and held to the commit, so a mark as read and
//!   another consumer's notice for the same user wait for it and the unread count moves by
//!   exactly what each of them changed;
//! - the like groups the batch's likes may join are read at once;
//! - each user's notices are applied in order in memory, as one by one they would have
//!   been;
//! - and each notification they touched, each source and each state is written once, a
//!   statement per run of each kind of write ([`db::runs`]).
//!
//! After the commit, every notification the batch touched (a replayed notice's too: its
//! first handling may have committed and then failed to reach Redis) is written to Redis as
//! SQL holds it now ([`super::hot`]).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use sqlx::{Any, Row, Transaction};

use super::{text, NotificationKind, Notifications, LIKE_GROUP_MS};
use crate::infra::{
    cache::IdHasher,
    db::{self, Backend},
    error::{AppError, AppResult},
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
    user_id: i64,
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
                .find_many::<IdHasher>(&actors)
                .await?
                .into_iter()
                .map(|(id, user)| (id, user.name))
                .collect()
        };
        let mut touched: BTreeMap<i64, BTreeSet<i64>> = BTreeMap::new();
        // On the archives' writer, as every consumer's batch: written on the pool, each
        // batch of notices made the vote archive's next batch read its index pages again,
        // and its own connection read them afresh too (see `Db::archive`).
        let mut tx = self.infra.db.archive.begin().await?;
        let claimed = claim_sources(&mut tx, &notices, self.infra.clock.now_ms()).await?;
        let (fresh, replayed): (Vec<&Notice>, Vec<&Notice>) = notices
            .iter()
            .partition(|notice| claimed.contains(&notice.source));
        for (user_id, id) in replayed_notifications(&mut tx, &replayed).await? {
            touched.entry(user_id).or_default().insert(id);
        }
        if !fresh.is_empty() {
            for (user_id, ids) in self.apply(&mut tx, &fresh, &names).await? {
                touched.entry(user_id).or_default().extend(ids);
            }
        }
        tx.commit().await?;
        let touched: Vec<(i64, Vec<i64>)> = touched
            .into_iter()
            .map(|(user_id, ids)| (user_id, ids.into_iter().filter(|id| *id != 0).collect()))
            .collect();
        self.push_many(&touched).await
    }

    /// Applies the claimed notices (sorted by user) as one by one they would have been, and
    /// writes what they changed: the ids of each user's notifications written.
    async fn apply(
        &self,
        tx: &mut Transaction<'static, Any>,
        fresh: &[&Notice],
        names: &HashMap<i64, String>,
    ) -> AppResult<Vec<(i64, Vec<i64>)>> {
        let mut users: Vec<i64> = fresh.iter().map(|notice| notice.user_id).collect();
        users.dedup();
        let mut states = lock_states(tx, &users).await?;
        let mut groups = like_groups(tx, fresh).await?;
        let mut written = Vec::new();
        let mut changed = Vec::with_capacity(users.len());
        let mut ids = Vec::with_capacity(users.len());
        for mine in fresh.chunk_by(|a, b| a.user_id == b.user_id) {
            let user_id = mine[0].user_id;
            let state = states.remove(&user_id).ok_or_else(|| {
                AppError::internal(anyhow::anyhow!("no notification state for user {user_id}"))
            })?;
            let mut theirs = groups.remove(&user_id).unwrap_or_default();
            let unread = self.apply_user(&state, mine, &mut theirs).await?;
            theirs.retain(|notification| !notification.sources.is_empty());
            ids.push((user_id, theirs.iter().map(|n| n.id).collect()));
            changed.push((user_id, state.last_seq + mine.len() as i64, unread));
            written.extend(theirs);
        }
        write(tx, &written, names).await?;
        write_states(tx, &changed).await?;
        Ok(ids)
    }

    /// Applies one user's new notices in order to `written` (the like groups they may join,
    /// then what they begin): the user's unread count after them.
    async fn apply_user(
        &self,
        state: &State,
        notices: &[&Notice],
        written: &mut Vec<Written>,
    ) -> AppResult<i64> {
        let mut unread = state.unread;
        for (place, notice) in (1..).zip(notices) {
            let seq = state.last_seq + place;
            let joined = match (notice.kind, notice.remark_id) {
                (NotificationKind::LikeReceived, Some(remark)) => {
                    joined_group(written, remark, notice.at_ms)
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
                        user_id: notice.user_id,
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
        Ok(unread)
    }
}

/// Claims the notices' sources, all in one statement: the sources claimed now (the others
/// were claimed by an earlier handling).
async fn claim_sources(
    tx: &mut Transaction<'static, Any>,
    notices: &[Notice],
    now_ms: i64,
) -> AppResult<HashSet<String>> {
    // `WHERE true`: SQLite reads `ON CONFLICT` after a bare `SELECT … FROM` as a join's.
    let backend = Backend::of(tx);
    let sql = format!(
        "INSERT INTO notification_sources (source_key, created_at_ms, notification_id) \
         SELECT v.value, {}, 0 FROM ({}) AS v WHERE true \
         ON CONFLICT DO NOTHING RETURNING source_key",
        backend.param(1),
        db::json_list(backend, 2, "TEXT")
    );
    let sources: Vec<&str> = notices.iter().map(|n| n.source.as_str()).collect();
    let mut claimed = HashSet::new();
    for row in sqlx::query(&sql)
        .bind(now_ms)
        .bind(db::json_rows(&sources))
        .fetch_all(&mut **tx)
        .await?
    {
        claimed.insert(row.try_get::<String, _>("source_key")?);
    }
    Ok(claimed)
}

/// The notifications replayed notices made when first handled: `(user, id)`.
async fn replayed_notifications(
    tx: &mut Transaction<'static, Any>,
    replayed: &[&Notice],
) -> AppResult<Vec<(i64, i64)>> {
    if replayed.is_empty() {
        return Ok(Vec::new());
    }
    let users: HashMap<&str, i64> = replayed
        .iter()
        .map(|notice| (notice.source.as_str(), notice.user_id))
        .collect();
    let sql = format!(
        "SELECT source_key, notification_id FROM notification_sources \
         WHERE source_key IN (SELECT v.value FROM ({}) AS v)",
        db::json_list(Backend::of(tx), 1, "TEXT")
    );
    let sources: Vec<&str> = replayed.iter().map(|n| n.source.as_str()).collect();
    let mut found = Vec::new();
    for row in sqlx::query(&sql)
        .bind(db::json_rows(&sources))
        .fetch_all(&mut **tx)
        .await?
    {
        let source: String = row.try_get("source_key")?;
        let user_id = users.get(source.as_str()).copied().unwrap_or_default();
        found.push((user_id, row.try_get("notification_id")?));
    }
    Ok(found)
}

/// Makes the users' state rows that are missing and takes them with their locks, in user
/// order (`users` is sorted), so that two batches never wait for each other in a circle.
/// On SQLite the transaction holds the database's one write lock already (the sources were
/// claimed first); on PostgreSQL `FOR UPDATE` locks the rows as they come, in order.
async fn lock_states(
    tx: &mut Transaction<'static, Any>,
    users: &[i64],
) -> AppResult<HashMap<i64, State>> {
    let backend = Backend::of(tx);
    let users_table = db::json_list(backend, 1, "BIGINT");
    let users_param = db::json_rows(users);
    sqlx::query(&format!(
        "INSERT INTO notification_states (user_id, last_seq, read_seq, unread, version) \
         SELECT v.value, 0, 0, 0, 0 FROM ({users_table}) AS v WHERE true \
         ON CONFLICT DO NOTHING"
    ))
    .bind(&users_param)
    .execute(&mut **tx)
    .await?;
    let select = format!(
        "SELECT user_id, last_seq, read_seq, unread FROM notification_states \
         WHERE user_id IN (SELECT v.value FROM ({users_table}) AS v) ORDER BY user_id{}",
        backend.lock_rows()
    );
    let mut states = HashMap::with_capacity(users.len());
    for row in sqlx::query(&select)
        .bind(&users_param)
        .fetch_all(&mut **tx)
        .await?
    {
        states.insert(
            row.try_get("user_id")?,
            State {
                last_seq: row.try_get("last_seq")?,
                read_seq: row.try_get("read_seq")?,
                unread: row.try_get("unread")?,
            },
        );
    }
    Ok(states)
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

/// Every like group that a like of these notices may join, by user: each remark's groups
/// begun within the hour before its earliest like to the hour after its latest. Read under the users'
/// locks, so another batch's changes are committed or wait for this one.
async fn like_groups(
    tx: &mut Transaction<'static, Any>,
    notices: &[&Notice],
) -> AppResult<HashMap<i64, Vec<Written>>> {
    // (user, remark) -> (earliest, latest) like.
    let mut spans: BTreeMap<(i64, i64), (i64, i64)> = BTreeMap::new();
    for notice in notices {
        if let (NotificationKind::LikeReceived, Some(remark)) = (notice.kind, notice.remark_id) {
            let span = spans
                .entry((notice.user_id, remark))
                .or_insert((notice.at_ms, notice.at_ms));
            span.0 = span.0.min(notice.at_ms);
            span.1 = span.1.max(notice.at_ms);
        }
    }
    let spans: Vec<(i64, i64, i64, i64)> = spans
        .into_iter()
        .map(|((user_id, remark), (earliest, latest))| {
            (
                user_id,
                remark,
                earliest - LIKE_GROUP_MS,
                latest + LIKE_GROUP_MS,
            )
        })
        .collect();
    let backend = Backend::of(tx);
    let sql = format!(
        "SELECT n.id, n.user_id, n.seq, n.actor_id, n.remark_id, n.others, \
         n.created_at_ms, n.updated_at_ms FROM notifications AS n JOIN ({}) AS v \
         ON n.user_id = v.u AND n.remark_id = v.r \
         WHERE n.created_at_ms > v.lo AND n.created_at_ms <= v.hi AND n.kind = {}",
        db::json_table(
            backend,
            1,
            &[
                ("u", "BIGINT"),
                ("r", "BIGINT"),
                ("lo", "BIGINT"),
                ("hi", "BIGINT")
            ]
        ),
        backend.param(2)
    );
    let mut groups: HashMap<i64, Vec<Written>> = HashMap::new();
    if spans.is_empty() {
        return Ok(groups);
    }
    for row in sqlx::query(&sql)
        .bind(db::json_rows(&spans))
        .bind(NotificationKind::LikeReceived.as_str())
        .fetch_all(&mut **tx)
        .await?
    {
        let user_id: i64 = row.try_get("user_id")?;
        groups.entry(user_id).or_default().push(Written {
            id: row.try_get("id")?,
            user_id,
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
    Ok(groups)
}

/// The like group of `remark` a like at `at_ms` joins, among those read and those this
/// batch began: the latest begun within the hour before it; failing that, the first begun
/// within the hour after it. Likes reach their stream in the order their requests got
/// there, not always in the order of their times, so a like may come after a later one
/// that began a group: it belongs to that group, not to a second one of the same moment.
fn joined_group(written: &[Written], remark: i64, at_ms: i64) -> Option<usize> {
    let groups = || {
        written.iter().enumerate().filter(|(_, w)| {
            w.kind == NotificationKind::LikeReceived && w.remark_id == Some(remark)
        })
    };
    groups()
        .filter(|(_, w)| w.created_at_ms > at_ms - LIKE_GROUP_MS && w.created_at_ms <= at_ms)
        .max_by_key(|(_, w)| w.created_at_ms)
        .or_else(|| {
            groups()
                .filter(|(_, w)| w.created_at_ms > at_ms && w.created_at_ms < at_ms + LIKE_GROUP_MS)
                .min_by_key(|(_, w)| w.created_at_ms)
        })
        .map(|(index, _)| index)
}

/// The text of a notification as the batch leaves it.
fn text_of(notification: &Written, names: &HashMap<i64, String>) -> String {
    let actor = notification
        .actor_id
        .and_then(|actor| names.get(&actor))
        .map_or(text::SOMEONE, String::as_str);
    match (notification.kind, &notification.text) {
        (NotificationKind::LikeReceived, _) => text::like(actor, notification.others),
        (_, Some(text)) => text.clone(),
        _ => text::new_follower(actor),
    }
}

/// Writes the notifications as the batch left them, a statement for each kind of write:
/// the new ones inserted, the groups joined updated, and every source pointed at its
/// notification.
async fn write(
    tx: &mut Transaction<'static, Any>,
    written: &[Written],
    names: &HashMap<i64, String>,
) -> AppResult<()> {
    let backend = Backend::of(tx);
    let (new, joined): (Vec<&Written>, Vec<&Written>) = written.iter().partition(|w| w.new);
    if !new.is_empty() {
        let sql = format!(
            "INSERT INTO notifications (id, user_id, seq, kind, actor_id, remark_id, \
             order_id, board_key, others, text, created_at_ms, updated_at_ms) \
             SELECT v.id, v.u, v.seq, v.kind, v.actor, v.remark, v.o, v.board, v.others, \
             v.text, v.created, v.at FROM ({}) AS v",
            db::json_table(
                backend,
                1,
                &[
                    ("id", "BIGINT"),
                    ("u", "BIGINT"),
                    ("seq", "BIGINT"),
                    ("kind", "TEXT"),
                    ("actor", "BIGINT"),
                    ("remark", "BIGINT"),
                    ("o", "BIGINT"),
                    ("board", "TEXT"),
                    ("others", "BIGINT"),
                    ("text", "TEXT"),
                    ("created", "BIGINT"),
                    ("at", "BIGINT"),
                ]
            )
        );
        let rows: Vec<_> = new
            .iter()
            .map(|n| {
                (
                    n.id,
                    n.user_id,
                    n.seq,
                    n.kind.as_str(),
                    n.actor_id,
                    n.remark_id,
                    n.order_id,
                    n.board_key.as_deref(),
                    n.others,
                    text_of(n, names),
                    n.created_at_ms,
                    n.updated_at_ms,
                )
            })
            .collect();
        db::execute_json(tx, &sql, &rows).await?;
    }
    if !joined.is_empty() {
        let sql = format!(
            "UPDATE notifications SET seq = v.seq, actor_id = v.actor, others = v.others, \
             text = v.text, updated_at_ms = v.at FROM ({}) AS v WHERE notifications.id = v.id",
            db::json_table(
                backend,
                1,
                &[
                    ("id", "BIGINT"),
                    ("seq", "BIGINT"),
                    ("actor", "BIGINT"),
                    ("others", "BIGINT"),
                    ("text", "TEXT"),
                    ("at", "BIGINT"),
                ]
            )
        );
        let rows: Vec<_> = joined
            .iter()
            .map(|n| {
                (
                    n.id,
                    n.seq,
                    n.actor_id,
                    n.others,
                    text_of(n, names),
                    n.updated_at_ms,
                )
            })
            .collect();
        db::execute_json(tx, &sql, &rows).await?;
    }
    // Each source once (the claim made them unique): a map of source to notification.
    let sources: HashMap<&str, i64> = written
        .iter()
        .flat_map(|w| w.sources.iter().map(|source| (source.as_str(), w.id)))
        .collect();
    if !sources.is_empty() {
        let sql = format!(
            "UPDATE notification_sources SET notification_id = v.value FROM ({}) AS v \
             WHERE notification_sources.source_key = v.key",
            db::json_map(backend, 1, "BIGINT")
        );
        db::execute_json(tx, &sql, &sources).await?;
    }
    Ok(())
}

/// Writes each user's new last place and unread count, `(user, last_seq, unread)`, and
/// moves the user's version on.
async fn write_states(
    tx: &mut Transaction<'static, Any>,
    states: &[(i64, i64, i64)],
) -> AppResult<()> {
    let sql = format!(
        "UPDATE notification_states SET last_seq = v.last, unread = v.unread, \
         version = notification_states.version + 1 FROM ({}) AS v \
         WHERE notification_states.user_id = v.u",
        db::json_table(
            Backend::of(tx),
            1,
            &[("u", "BIGINT"), ("last", "BIGINT"), ("unread", "BIGINT")]
        )
    );
    db::execute_json(tx, &sql, states).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{joined_group, NotificationKind, Written, LIKE_GROUP_MS};

    fn group(remark: i64, created_at_ms: i64) -> Written {
        Written {
            id: created_at_ms,
            user_id: 1,
            new: false,
            seq: 1,
            kind: NotificationKind::LikeReceived,
            actor_id: Some(2),
            remark_id: Some(remark),
            order_id: None,
            board_key: None,
            others: 0,
            text: None,
            created_at_ms,
            updated_at_ms: created_at_ms,
            sources: Vec::new(),
        }
    }

    #[test]
    fn a_like_joins_the_latest_group_of_the_hour_before_it_else_the_first_just_after() {
        let hour = LIKE_GROUP_MS;
        let groups = [group(7, 1_000), group(7, 1_000 + hour / 2), group(8, 5_000)];
        // The latest begun within the hour before, not an older one, nor another remark's.
        assert_eq!(joined_group(&groups, 7, 1_000 + hour - 1), Some(1));
        assert_eq!(joined_group(&groups, 7, 1_000), Some(0));
        // A like that reached its stream after a later one joins the group that one began.
        assert_eq!(joined_group(&groups, 7, 999), Some(0));
        assert_eq!(joined_group(&groups, 8, 4_990), Some(2));
        // An hour or more from every group: a group of its own.
        assert_eq!(joined_group(&groups, 7, 1_000 - hour), None);
        assert_eq!(joined_group(&groups, 7, 1_000 + hour / 2 + hour), None);
        assert_eq!(joined_group(&groups, 9, 1_000), None);
    }
}
