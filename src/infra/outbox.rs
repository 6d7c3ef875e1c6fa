//! Writes acknowledged in SQL whose Redis side is still to be made: one outbox table per
//! kind of write, and the retrier that empties it.
//!
//! A write whose record is SQL and whose reads go to Redis (a remark's announcement, a
//! follow's count, an item's place on the map, a voucher's stock) writes, in its own
//! transaction, a row saying what Redis is still to be told. The request then tells Redis and
//! forgets the row ([`deliver_or_leave`]); when Redis refuses, the row stays, the request is
//! acknowledged all the same (SQL holds the write), and the kind's retrier (every instance
//! runs one per kind, [`spawn_retrier`]) tells Redis once it answers. The alternative,
//! answering an error once SQL has committed, invites a retry that doubles the write (a
//! second item, a second voucher) or skips its Redis side (a follow then found to exist).
//!
//! Delivery is at least once: a reply lost after Redis took the write, a row whose delete
//! failed, a request and a retrier on the same row. So each kind's [`Outbox::deliver`] is
//! idempotent: it writes what SQL holds now (a place, a stock, a following set), or, where
//! the Redis side is a delta (a follower count), it counts each change once by its id.

use std::time::Duration;

use sqlx::any::AnyRow;

use super::{error::AppResult, Infra};

/// How often a retrier looks for rows left behind.
const RETRY_EVERY: Duration = Duration::from_secs(1);
/// How old a row must be before the retrier takes it: younger ones are their requests' own
/// to deliver, which they do at once.
const LEFT_FOR_THE_REQUEST_MS: i64 = 5_000;
/// Rows per round.
const PER_ROUND: i64 = 500;

/// A kind of write with an outbox: a table holding an `i64` id column, a `created_at_ms`
/// column and what the kind needs, and how its rows are delivered to Redis.
#[async_trait::async_trait]
pub trait Outbox: Clone + Send + Sync + 'static {
    /// One row: what Redis is still to be told.
    type Entry: Send + Sync;
    /// What is delivered, for the retrier's task name and logs (`remark announcements`).
    const NAME: &'static str;
    /// The table, its id column, and the columns an entry is read from.
    const TABLE: &'static str;
    const ID: &'static str;
    const COLUMNS: &'static str;

    fn infra(&self) -> &Infra;
    fn entry_of(row: &AnyRow) -> Result<Self::Entry, sqlx::Error>;
    fn id_of(entry: &Self::Entry) -> i64;

    /// Tells Redis what the entries say. Idempotent: an entry may be delivered twice, and
    /// two deliveries of it may run at once.
    async fn deliver(&self, entries: &[Self::Entry]) -> AppResult<()>;

    /// Called once the delivered entries' rows are forgotten (nothing, unless the kind
    /// keeps something in Redis until then).
    async fn forgotten(&self, _entries: &[Self::Entry]) {}
}

/// Tells Redis, then forgets the entries' rows.
pub async fn deliver<O: Outbox>(outbox: &O, entries: &[O::Entry]) -> AppResult<()> {
    if entries.is_empty() {
        return Ok(());
    }
    outbox.deliver(entries).await?;
    // Exactly these ids: a range would take the rows of writes committed meanwhile, still
    // undelivered.
    let ids: Vec<i64> = entries.iter().map(|e| O::id_of(e)).collect();
    let db = &outbox.infra().db;
    for list in crate::infra::db::in_lists(&ids) {
        let sql = format!(
            "DELETE FROM {} WHERE {} IN ({})",
            O::TABLE,
            O::ID,
            crate::infra::db::params(db.backend, 1, list.len())
        );
        let mut delete = sqlx::query(&sql);
        for id in list {
            delete = delete.bind(*id);
        }
        delete.execute(&db.pool).await?;
    }
    outbox.forgotten(entries).await;
    Ok(())
}

/// What a request does once its transaction committed: delivers, or leaves the rows to the
/// retrier when Redis (or SQL) refuses. The write stands either way, so this never fails.
pub(crate) async fn deliver_or_leave<O: Outbox>(outbox: &O, entries: &[O::Entry]) {
    if let Err(error) = deliver(outbox, entries).await {
        tracing::warn!(kind = O::NAME, %error, "not delivered to Redis yet; the retrier will");
    }
}

/// The rows of `filter` (an SQL condition on the table, its `$n` taken from `binds`),
/// oldest first, at most `PER_ROUND`.
pub(crate) async fn pending<O: Outbox>(
    outbox: &O,
    filter: &str,
    binds: &[i64],
) -> AppResult<Vec<O::Entry>> {
    let sql = format!(
        "SELECT {} FROM {} WHERE {filter} ORDER BY {} LIMIT {PER_ROUND}",
        O::COLUMNS,
        O::TABLE,
        O::ID
    );
    let mut query = sqlx::query(&sql);
    for bind in binds {
        query = query.bind(*bind);
    }
    let rows = query.fetch_all(&outbox.infra().db.pool).await?;
    Ok(rows.iter().map(O::entry_of).collect::<Result<_, _>>()?)
}

/// Rows stored at least `LEFT_FOR_THE_REQUEST_MS` ago.
async fn left<O: Outbox>(outbox: &O) -> AppResult<Vec<O::Entry>> {
    let before = outbox.infra().clock.now_ms() - LEFT_FOR_THE_REQUEST_MS;
    pending(outbox, "created_at_ms <= $1", &[before]).await
}

/// Delivers every row stored until now, whatever its age: what a rebuild does first where
/// delivery adds to what Redis holds (otherwise a change already in the SQL it rebuilds
/// from would be added again). Rows stored meanwhile are their requests' to deliver, so a
/// steady stream of writes does not keep it going. Returns the rows delivered.
pub(crate) async fn drain<O: Outbox>(outbox: &O) -> AppResult<u64> {
    let until = outbox.infra().clock.now_ms();
    let mut delivered = 0;
    loop {
        let rows = pending(outbox, "created_at_ms <= $1", &[until]).await?;
        if rows.is_empty() {
            return Ok(delivered);
        }
        deliver(outbox, &rows).await?;
        delivered += rows.len() as u64;
    }
}

/// Delivers what requests could not, until the instance shuts down.
pub(crate) fn spawn_retrier<O: Outbox>(outbox: O) {
    let instance = outbox.infra().instance.clone();
    let shutdown = instance.shutdown.clone();
    instance.spawn(O::NAME, async move {
        loop {
            tokio::select! {
                () = tokio::time::sleep(RETRY_EVERY) => {}
                () = shutdown.cancelled() => return,
            }
            let round: AppResult<usize> = async {
                let rows = left(&outbox).await?;
                deliver(&outbox, &rows).await?;
                Ok(rows.len())
            }
            .await;
            match round {
                Ok(0) => {}
                Ok(delivered) => {
                    tracing::info!(kind = O::NAME, delivered, "delivered after their requests")
                }
                Err(error) => {
                    tracing::warn!(kind = O::NAME, %error, "left undelivered; tried again shortly")
                }
            }
        }
    });
}
