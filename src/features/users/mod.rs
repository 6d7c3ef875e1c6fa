//! Users: rows in SQL, created the first time a valid token names them, and read through
//! two caches: this instance's memory, and the users' names in Redis.
//!
//! Why names in Redis: a leaderboard page shows twenty users, and on a board of a million
//! members (random pages, or many instances) the memory of one instance mostly missed, so
//! each page asked SQL. Redis holds the names of every user once, for every instance; a page
//! asks for them in one pipeline. They are a cache of SQL, filled when a user is first
//! written and when SQL is read for one that Redis lacked: a lost Redis refills itself as
//! users are read, and `engage rebuild` has nothing to restore.

mod profiles;
mod subjects;

pub use profiles::{ProfileChange, MAX_BIO_CHARS, MAX_NAME_CHARS};

use std::{
    collections::HashMap,
    hash::BuildHasher,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use async_graphql::dataloader::Loader;
use sqlx::Row;
use tokio::sync::{mpsc, Notify};

use crate::infra::{
    auth::Claims,
    cache::{IdHasher, RecentSet, TtlCache},
    error::{AppError, AppResult},
    redis::Keys,
    Infra,
};

#[derive(Debug, Clone)]
pub struct UserRecord {
    pub id: i64,
    pub name: String,
    pub avatar_url: Option<String>,
    /// The user's own words on their profile.
    pub bio: Option<String>,
}

impl UserRecord {
    /// The user as the names in Redis hold them ([`Keys::user_names`]): `[name, avatar
    /// url, bio]`. A card of another shape (written before profiles had a bio) reads as a
    /// miss, and SQL answers and writes it again.
    pub fn card(&self) -> String {
        serde_json::to_string(&(&self.name, &self.avatar_url, &self.bio))
            .expect("strings serialise")
    }

    fn from_card(id: i64, card: &str) -> Option<Self> {
        let (name, avatar_url, bio) = serde_json::from_str(card).ok()?;
        Some(Self {
            id,
            name,
            avatar_url,
            bio,
        })
    }

    /// What is shown of a user without a row (awarded points by another service before
    /// ever signing in here, or deleted).
    pub(crate) fn placeholder(id: i64) -> Self {
        Self {
            id,
            name: format!("user{id}"),
            avatar_url: None,
            bio: None,
        }
    }
}

/// The columns of a user's record.
const USER_SELECT: &str = "SELECT id, name, avatar_url, bio FROM users";

impl UserRecord {
    fn from_row(row: &sqlx::any::AnyRow) -> Result<Self, sqlx::Error> {
        Ok(Self {
            id: row.try_get("id")?,
            name: row.try_get("name")?,
            avatar_url: row.try_get("avatar_url")?,
            bio: row.try_get("bio")?,
        })
    }
}

/// Remembers which users this instance has already written, so that first sight costs one
/// write per user per instance rather than one per request. First sights are written in
/// batches (one multi-row `INSERT … ON CONFLICT DO NOTHING` per batch): a burst of new users,
/// as a flash sale brings, costs a few transactions instead of one each.
///
/// A request does not wait for its user's row. Likes, sign-ins and orders live in Redis and
/// nothing in SQL refers to the row; waiting put every new user's request behind whatever
/// archive transaction held SQLite's one write lock, and those waits were the p99 of the like
/// routes (90–400 ms, against 20 ms once every voter had been seen). A user queued for
/// writing counts as existing for [`UserDirectory::find_many`] (a follow of someone seen a
/// moment ago finds them), and a write that fails forgets the user, so that their next
/// request queues them again.
pub struct UserDirectory {
    infra: Infra,
    known: Arc<Mutex<Known>>,
    /// Users read lately. Every leaderboard page shows twenty names, which change only by
    /// hand in SQL: asking SQL each time was a query per page on the hot path.
    records: TtlCache<i64, UserRecord, IdHasher>,
    registrar: mpsc::Sender<FirstSight>,
    /// Told when a full batch is queued, so that the writer stops gathering.
    batch_queued: Arc<Notify>,
    /// Queries of `users` made for lookups (for tests: what the caches spared).
    sql_reads: AtomicU64,
    /// Identity providers' subjects mapped to user ids lately (`subjects.rs`); a mapping
    /// never changes, so only memory bounds this.
    subjects: TtlCache<(String, String), i64>,
}

/// The users this instance has written lately, and those queued for writing with their
/// names.
struct Known {
    written: RecentSet<i64, IdHasher>,
    queued: HashMap<i64, String, IdHasher>,
}

struct FirstSight {
    user_id: i64,
    name: String,
    now_ms: i64,
}

/// How long a request waits for room in a full first-sight queue (a burst of new users)
/// before it goes on without its user queued; a later request queues them.
const FIRST_SIGHT_WAIT: Duration = Duration::from_millis(500);

/// Most users written by one statement.
const BATCH: usize = 300;

/// First sights queued before a request waits for room (about 100 bytes each): every active
/// user is a first sight to a new instance, and 40,000 of them at 10,000 likes a second no
/// longer wait for room (1,200 made them wait; BENCHMARKS.md).
const QUEUED_KEPT: usize = 32 * BATCH;

/// The users remembered as written (about 10 MiB at most); one forgotten costs an idempotent
/// insert when next seen. Users who come back within half of this are never forgotten: a
/// day's sign-ins of a quarter of a million new users leave the active ones known.
const WRITTEN_KEPT: usize = 500_000;

/// How long a user read from SQL is shown without asking again (a name edited in SQL shows
/// within this), and how many are kept (about 100 bytes each).
const RECORD_TTL: Duration = Duration::from_secs(300);
const RECORDS_KEPT: usize = 100_000;

/// How long, and how many, subjects' user ids are remembered.
const SUBJECT_TTL: Duration = Duration::from_secs(3600);
const SUBJECTS_KEPT: usize = 100_000;

/// Hashes the names in Redis are spread over (by user id), so that a cluster spreads them
/// and no hash grows without bound on one node.
const NAME_BUCKETS: i64 = 1024;

impl Keys {
    /// The names of one bucket of users, `{users:<id mod 1024>}:names`: field the user id,
    /// value `[name, avatar url]` as JSON.
    pub fn user_names(&self, user_id: i64) -> String {
        self.tagged(("users:", user_id.rem_euclid(NAME_BUCKETS)), "names")
    }
}

impl UserDirectory {
    /// Must be called within the runtime: it starts the batch writer.
    pub(crate) fn new(infra: Infra) -> Self {
        let (registrar, queue) = mpsc::channel(QUEUED_KEPT);
        let known = Arc::new(Mutex::new(Known {
            written: RecentSet::new(WRITTEN_KEPT),
            queued: HashMap::default(),
        }));
        let batch_queued = Arc::new(Notify::new());
        // An instance task: shutdown waits for its last batch before it closes the pool.
        infra.instance.spawn(
            "first-sights",
            write_first_sights(infra.clone(), queue, batch_queued.clone(), known.clone()),
        );
        Self {
            infra,
            known,
            records: TtlCache::new(RECORD_TTL, RECORDS_KEPT),
            registrar,
            batch_queued,
            sql_reads: AtomicU64::new(0),
            subjects: TtlCache::new(SUBJECT_TTL, SUBJECTS_KEPT),
        }
    }

    /// Queues the user named by a verified token for writing if this instance has not
    /// written or queued them yet.
    pub async fn ensure(&self, user_id: i64, claims: &Claims, now_ms: i64) {
        let name = {
            let mut known = self.known.lock().expect("poisoned");
            if known.written.contains(&user_id) || known.queued.contains_key(&user_id) {
                return;
            }
            // The token's name, already cleaned of control characters (`auth::claims`).
            let name = claims
                .name
                .clone()
                .unwrap_or_else(|| format!("user{user_id}"));
            known.queued.insert(user_id, name.clone());
            name
        };
        let sight = FirstSight {
            user_id,
            name,
            now_ms,
        };
        let queued = match self.registrar.try_send(sight) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(sight)) => {
                tokio::time::timeout(FIRST_SIGHT_WAIT, self.registrar.send(sight))
                    .await
                    .is_ok_and(|sent| sent.is_ok())
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        };
        if !queued {
            self.known.lock().expect("poisoned").queued.remove(&user_id);
        } else if self.registrar.max_capacity() - self.registrar.capacity() >= BATCH {
            self.batch_queued.notify_one();
        }
    }

    pub(crate) async fn find(&self, user_id: i64) -> Result<Option<UserRecord>, AppError> {
        Ok(self
            .find_many::<IdHasher>(&[user_id])
            .await?
            .remove(&user_id))
    }

    /// The users of `ids` that exist (or are queued for writing): from this instance's
    /// memory, then Redis's names (one pipeline), then SQL (one query), each filling the
    /// caches before it. In a map of the caller's hasher: the batch loader's trait asks for
    /// std's, a page of the leaderboard takes [`IdHasher`].
    pub async fn find_many<S: BuildHasher + Default>(
        &self,
        ids: &[i64],
    ) -> Result<HashMap<i64, UserRecord, S>, AppError> {
        let mut found = HashMap::with_capacity_and_hasher(ids.len(), S::default());
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
        unknown.sort_unstable();
        unknown.dedup();
        for user in self.cached_names(&unknown).await {
            self.records.insert(user.id, Arc::new(user.clone()));
            found.insert(user.id, user);
        }
        unknown.retain(|id| !found.contains_key(id));
        if unknown.is_empty() {
            return Ok(found);
        }
        // Users queued for writing are shown as they will be written. Read before SQL: the
        // writer forgets a user only once their row is committed, so a user neither queued
        // now nor found by the query below has no row.
        let queued: Vec<UserRecord> = {
            let known = self.known.lock().expect("poisoned");
            unknown
                .iter()
                .filter_map(|id| {
                    known.queued.get(id).map(|name| UserRecord {
                        id: *id,
                        name: name.clone(),
                        avatar_url: None,
                        bio: None,
                    })
                })
                .collect()
        };
        self.sql_reads.fetch_add(1, Ordering::Relaxed);
        let users = self
            .infra
            .db
            .find_by_ids(USER_SELECT, &unknown, UserRecord::from_row)
            .await?;
        // A user without a row yet is not remembered: the row is read once it exists.
        remember_names(&self.infra, &users).await;
        for user in users {
            self.records.insert(user.id, Arc::new(user.clone()));
            found.insert(user.id, user);
        }
        for user in queued {
            found.entry(user.id).or_insert(user);
        }
        Ok(found)
    }

    /// How many lookups SQL answered (each one query).
    pub fn sql_reads(&self) -> u64 {
        self.sql_reads.load(Ordering::Relaxed)
    }

    /// How many first sights wait to be written (for tests: the writer's Redis and SQL work
    /// is done once none do).
    pub fn first_sights_queued(&self) -> usize {
        self.known.lock().expect("poisoned").queued.len()
    }

    /// The users of `ids` whose names Redis holds. Redis unavailable is a miss: SQL answers.
    async fn cached_names(&self, ids: &[i64]) -> Vec<UserRecord> {
        let keys = &self.infra.keys;
        let mut pipe = redis::pipe();
        for id in ids {
            pipe.hget(keys.user_names(*id), id);
        }
        let read: AppResult<Vec<Option<String>>> = async {
            let mut conn = self.infra.redis.get().await?;
            Ok(pipe.query_async(&mut *conn).await?)
        }
        .await;
        let cards = match read {
            Ok(cards) => cards,
            Err(error) => {
                tracing::debug!(%error, "user names not read from Redis; SQL answers");
                return Vec::new();
            }
        };
        ids.iter()
            .zip(cards)
            .filter_map(|(id, card)| UserRecord::from_card(*id, &card?))
            .collect()
    }
}

/// Writes users' names to Redis (best effort: a name that did not make it is read from SQL
/// and written again later).
async fn remember_names(infra: &Infra, users: &[UserRecord]) {
    if users.is_empty() {
        return;
    }
    let mut pipe = redis::pipe();
    for user in users {
        pipe.hset(infra.keys.user_names(user.id), user.id, user.card())
            .ignore();
    }
    let written: AppResult<()> = async {
        let mut conn = infra.redis.get().await?;
        Ok(pipe.query_async(&mut *conn).await?)
    }
    .await;
    if let Err(error) = written {
        tracing::debug!(%error, "user names not written to Redis");
    }
}

/// Writes queued first sights in batches until shutdown, and then what is queued by then.
async fn write_first_sights(
    infra: Infra,
    mut queue: mpsc::Receiver<FirstSight>,
    batch_queued: Arc<Notify>,
    known: Arc<Mutex<Known>>,
) {
    let shutdown = infra.instance.shutdown.clone();
    loop {
        let first = tokio::select! {
            first = queue.recv() => first,
            () = shutdown.cancelled() => queue.try_recv().ok(),
        };
        let Some(first) = first else { return };
        let mut batch = vec![first];
        take_queued(&mut queue, &mut batch);
        // A trickle of new users gathers for as long as the archives' batches do: a
        // transaction each cost SQLite more than the rest of the like that brought the user
        // (BENCHMARKS.md). No request waits for the row, unless the queue is full: a burst
        // that fills a batch is written at once, and so is everything queued when the
        // instance shuts down.
        if batch.len() < BATCH && !shutdown.is_cancelled() {
            tokio::select! {
                () = tokio::time::sleep(infra.instance.consumers.archive_linger) => {}
                () = batch_queued.notified() => {}
                () = shutdown.cancelled() => {}
            }
            take_queued(&mut queue, &mut batch);
        }
        write_batch(&infra, batch, &known).await;
    }
}

/// Writes one batch of first sights to SQL, and the names it wrote to Redis. A batch that
/// fails is written again one user at a time, so that a row SQL refuses (a name it cannot
/// store) costs its own user alone, not every user who came with it; one at a time stops at
/// the first outage (the rest would fail alike). A user whose write failed is forgotten, to
/// be queued again on their next request.
async fn write_batch(infra: &Infra, mut batch: Vec<FirstSight>, known: &Mutex<Known>) {
    batch.sort_by_key(|sight| sight.user_id);
    let mut written = Vec::with_capacity(batch.len());
    match insert_first_sights(infra, &batch).await {
        Ok(()) => {
            written.extend(batch.iter().map(|sight| sight.user_id));
        }
        Err(error) if batch.len() == 1 => {
            tracing::warn!(user = batch[0].user_id, %error, "first sight not written: queued again on the user's next request");
        }
        Err(error) => {
            tracing::warn!(%error, users = batch.len(), "a batch of first sights was not written: writing its users one at a time");
            for sight in &batch {
                match insert_first_sights(infra, std::slice::from_ref(sight)).await {
                    Ok(()) => {
                        written.push(sight.user_id);
                    }
                    Err(error) => {
                        tracing::warn!(user = sight.user_id, %error, "first sight not written: queued again on the user's next request");
                        if matches!(AppError::from(error), AppError::Unavailable(_)) {
                            break;
                        }
                    }
                }
            }
        }
    }
    let mut known = known.lock().expect("poisoned");
    for sight in &batch {
        known.queued.remove(&sight.user_id);
    }
    for user_id in written {
        known.written.insert(user_id);
    }
}

/// Inserts first sights, a statement per run, and remembers the names of the users each run
/// wrote.
async fn insert_first_sights(infra: &Infra, sights: &[FirstSight]) -> Result<(), sqlx::Error> {
    // RETURNING names the rows a statement wrote: a row that existed keeps its name, which
    // SQL, not this token, knows.
    for run in crate::infra::db::runs(sights) {
        let sql = format!(
            "INSERT INTO users (id, name, created_at_ms) VALUES {} ON CONFLICT (id) DO NOTHING \
             RETURNING id, name",
            crate::infra::db::values_placeholders(infra.db.backend, run.len(), 3)
        );
        let mut query = sqlx::query(&sql);
        for sight in run {
            query = query
                .bind(sight.user_id)
                .bind(&sight.name)
                .bind(sight.now_ms);
        }
        // On the archives' writer: a SQLite connection drops its page cache whenever another
        // has written, so a batch written on the pool made the next archive batch read its
        // index pages again (see `Db::archive`).
        let rows = query.fetch_all(&infra.db.archive).await?;
        let written: Vec<UserRecord> = rows
            .iter()
            .filter_map(|row| {
                Some(UserRecord {
                    id: row.try_get("id").ok()?,
                    name: row.try_get("name").ok()?,
                    avatar_url: None,
                    bio: None,
                })
            })
            .collect();
        remember_names(infra, &written).await;
    }
    Ok(())
}

/// Moves queued first sights into `batch` until it is full or the queue is empty.
fn take_queued(queue: &mut mpsc::Receiver<FirstSight>, batch: &mut Vec<FirstSight>) {
    while batch.len() < BATCH {
        match queue.try_recv() {
            Ok(next) => batch.push(next),
            Err(_) => break,
        }
    }
}

/// Batches the users of one GraphQL response into one SQL query.
pub(crate) struct UserLoader(pub Arc<UserDirectory>);

impl Loader<i64> for UserLoader {
    type Value = UserRecord;
    type Error = Arc<AppError>;

    async fn load(&self, keys: &[i64]) -> Result<HashMap<i64, UserRecord>, Self::Error> {
        self.0.find_many(keys).await.map_err(Arc::new)
    }
}
