//! Users: rows in SQL, created the first time a valid token names them.

use std::{collections::HashMap, collections::HashSet, sync::Mutex, time::Duration};

use async_graphql::dataloader::Loader;
use sqlx::Row;
use tokio::sync::{mpsc, oneshot};

use crate::infra::{auth::Claims, cache::TtlCache, db::Db, error::AppError};

#[derive(Debug, Clone)]
pub struct UserRecord {
    pub id: i64,
    pub name: String,
    pub avatar_url: Option<String>,
}

/// Remembers which users this instance has already written, so that first sight costs one
/// write per user per instance rather than one per request. First sights are written in
/// batches (one multi-row `INSERT … ON CONFLICT DO NOTHING` per batch): a burst of new users,
/// as a flash sale brings, costs a few transactions instead of one each.
pub struct UserDirectory {
    db: Db,
    seen: Mutex<HashSet<i64>>,
    /// Users read lately. Every leaderboard page shows twenty names, which change only by
    /// hand in SQL: asking SQL each time was a query per page on the hot path.
    records: TtlCache<i64, UserRecord>,
    registrar: mpsc::Sender<FirstSight>,
}

struct FirstSight {
    user_id: i64,
    name: String,
    now_ms: i64,
    written: oneshot::Sender<Result<(), AppError>>,
}

/// How long a request waits for its user's first-sight write (see [`UserDirectory::ensure`]).
const FIRST_SIGHT_WAIT: Duration = Duration::from_millis(500);

/// Most users written by one statement.
const BATCH: usize = 300;

/// Past this many remembered ids the memory is cleared; the cost is one idempotent insert
/// per user afterwards.
const SEEN_CAPACITY: usize = 100_000;

/// How long a user read from SQL is shown without asking again (a name edited in SQL shows
/// within this), and how many are kept (about 100 bytes each).
const RECORD_TTL: Duration = Duration::from_secs(300);
const RECORDS_KEPT: usize = 100_000;

impl UserDirectory {
    /// Must be called within the runtime: it starts the batch writer.
    pub fn new(db: Db) -> Self {
        let (registrar, queue) = mpsc::channel(4 * BATCH);
        tokio::spawn(write_first_sights(db.clone(), queue));
        Self {
            db,
            seen: Mutex::new(HashSet::new()),
            records: TtlCache::new(RECORD_TTL, RECORDS_KEPT),
            registrar,
        }
    }

    /// Creates the user named by a verified token if it does not exist yet.
    pub async fn ensure(&self, user_id: i64, claims: &Claims, now_ms: i64) -> Result<(), AppError> {
        if self.seen.lock().expect("poisoned").contains(&user_id) {
            return Ok(());
        }
        let name = claims
            .name
            .as_deref()
            .map(|n| n.trim().chars().take(64).collect::<String>())
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| format!("user{user_id}"));
        let (written, result) = oneshot::channel();
        let sight = FirstSight {
            user_id,
            name,
            now_ms,
            written,
        };
        // The request does not wait on SQL for long: likes, sign-ins and flash-sale orders
        // live in Redis and do not need the row. When SQL is slow or down (or the writer is
        // backed up) the request goes on, the user stays unremembered, and a later request
        // writes the row. Failing here would turn an SQL outage into an outage of every
        // Redis path for every user this instance has not met yet.
        let stopped = || AppError::Unavailable("user writer stopped".into());
        let written = async {
            // Waiting for room in the queue (a burst of new users) counts against the same
            // bound, so that a burst slows first sights down instead of dropping them.
            self.registrar.send(sight).await.map_err(|_| stopped())?;
            result.await.map_err(|_| stopped())?
        };
        match tokio::time::timeout(FIRST_SIGHT_WAIT, written).await {
            Ok(Ok(())) => {}
            Ok(Err(AppError::Unavailable(error))) => {
                tracing::debug!(user_id, error, "first sight not written: SQL unavailable");
                return Ok(());
            }
            Ok(Err(error)) => return Err(error),
            Err(_) => return Ok(()), // written when the writer gets to it, or on a later request
        }
        let mut seen = self.seen.lock().expect("poisoned");
        if seen.len() >= SEEN_CAPACITY {
            seen.clear();
        }
        seen.insert(user_id);
        Ok(())
    }

    pub async fn find(&self, user_id: i64) -> Result<Option<UserRecord>, AppError> {
        Ok(self.find_many(&[user_id]).await?.remove(&user_id))
    }

    pub async fn find_many(&self, ids: &[i64]) -> Result<HashMap<i64, UserRecord>, AppError> {
        let mut found = HashMap::with_capacity(ids.len());
        let mut unknown = Vec::new();
        for &id in ids {
            match self.records.get(&id) {
                Some(user) => {
                    found.insert(id, UserRecord::clone(&user));
                }
                None => unknown.push(id),
            }
        }
        if unknown.is_empty() {
            return Ok(found);
        }
        let users = self
            .db
            .find_by_ids("SELECT id, name, avatar_url FROM users", &unknown, |row| {
                Ok(UserRecord {
                    id: row.try_get("id")?,
                    name: row.try_get("name")?,
                    avatar_url: row.try_get("avatar_url")?,
                })
            })
            .await?;
        // A user without a row yet (first sight not written) is not remembered: the row is
        // read once it exists.
        for user in users {
            self.records
                .insert(user.id, std::sync::Arc::new(user.clone()));
            found.insert(user.id, user);
        }
        Ok(found)
    }
}

/// Writes queued first sights in batches until every sender is gone.
async fn write_first_sights(db: Db, mut queue: mpsc::Receiver<FirstSight>) {
    while let Some(first) = queue.recv().await {
        let mut batch = vec![first];
        while batch.len() < BATCH {
            match queue.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        batch.sort_by_key(|sight| sight.user_id);
        let sql = format!(
            "INSERT INTO users (id, name, created_at_ms) VALUES {} ON CONFLICT (id) DO NOTHING",
            crate::infra::db::values_placeholders(db.backend, batch.len(), 3)
        );
        let mut query = sqlx::query(&sql);
        for sight in &batch {
            query = query
                .bind(sight.user_id)
                .bind(&sight.name)
                .bind(sight.now_ms);
        }
        let result = query
            .execute(&db.pool)
            .await
            .map(|_| ())
            .map_err(AppError::from);
        for sight in batch {
            let _ = sight.written.send(result.clone());
        }
    }
}

/// Batches the users of one GraphQL response into one SQL query.
pub struct UserLoader(pub std::sync::Arc<UserDirectory>);

impl Loader<i64> for UserLoader {
    type Value = UserRecord;
    type Error = std::sync::Arc<AppError>;

    async fn load(&self, keys: &[i64]) -> Result<HashMap<i64, UserRecord>, Self::Error> {
        self.0.find_many(keys).await.map_err(std::sync::Arc::new)
    }
}
