//! `engage verify` and `engage rebuild`: SQL is the system of record, and Redis can be told
//! how far it has drifted from it, or be rebuilt from it, feature by feature.
//!
//! Each feature owns its part, next to its code: `verify(ctx) -> Report` compares what
//! Redis holds with what SQL says it must hold (a key Redis lost is drift, so an empty Redis
//! is never clean), and `rebuild(ctx, run)` writes what SQL says, idempotently, in chunks. A
//! rebuild records after each chunk how far it got (in Redis, under `{recovery}`), so one
//! that was stopped goes on from there; a finished one forgets its place, and the next
//! starts over.
//!
//! Verify compares with what the archive consumers have written: run it when their streams
//! are drained, or run it twice (drift in flight disappears, lasting drift does not).

use indicatif::ProgressBar;
use sqlx::Row;

use crate::infra::{error::AppResult, Infra};

/// Drift examples kept per feature (the rest is counted).
const EXAMPLES_KEPT: usize = 10;

/// What `verify` found for one feature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub feature: &'static str,
    /// Things compared (keys, members, rows).
    pub checked: u64,
    /// Of which differ.
    pub drifted: u64,
    /// The first few differences, said in words.
    pub examples: Vec<String>,
}

impl Report {
    pub(crate) fn new(feature: &'static str) -> Self {
        Self {
            feature,
            checked: 0,
            drifted: 0,
            examples: Vec::new(),
        }
    }

    /// Counts one comparison; `describe` says what differs when it is not `consistent`.
    pub(crate) fn check(&mut self, consistent: bool, describe: impl FnOnce() -> String) {
        self.checked += 1;
        if !consistent {
            self.drifted += 1;
            if self.examples.len() < EXAMPLES_KEPT {
                self.examples.push(describe());
            }
        }
    }

    pub fn is_clean(&self) -> bool {
        self.drifted == 0
    }
}

/// One feature's rebuild: where it resumes, and its progress on the terminal.
pub struct Rebuild<'a> {
    pub(crate) infra: &'a Infra,
    feature: &'static str,
    bar: ProgressBar,
}

impl Rebuild<'_> {
    /// The cursor a stopped run of this feature reached (0 when it starts over): the last
    /// id of the last chunk it finished.
    pub(crate) async fn resume_from(&self) -> AppResult<i64> {
        Ok(self.recall("").await?.unwrap_or(0))
    }

    /// Records that everything up to `cursor` is rebuilt, and moves the bar by `done`.
    pub(crate) async fn finished_through(&self, cursor: i64, done: u64) -> AppResult<()> {
        self.remember("", cursor).await?;
        self.bar.inc(done);
        Ok(())
    }

    /// A value this feature's run remembered under `part` (a cursor of one of its parts, a
    /// snapshot position), if a stopped run left one.
    pub(crate) async fn recall(&self, part: &str) -> AppResult<Option<i64>> {
        let mut conn = self.infra.redis.get().await?;
        Ok(redis::cmd("HGET")
            .arg(self.infra.keys.recovery_cursors())
            .arg(format!("{}/{part}", self.feature))
            .query_async(&mut *conn)
            .await?)
    }

    /// Remembers `value` under `part` until the whole rebuild has finished.
    pub(crate) async fn remember(&self, part: &str, value: i64) -> AppResult<()> {
        let mut conn = self.infra.redis.get().await?;
        let () = redis::cmd("HSET")
            .arg(self.infra.keys.recovery_cursors())
            .arg(format!("{}/{part}", self.feature))
            .arg(value)
            .query_async(&mut *conn)
            .await?;
        Ok(())
    }

    /// How many things (rows, members) the rebuild will write, for the bar.
    pub(crate) fn expect(&self, total: u64) {
        self.bar.set_length(total);
    }

    /// Sets the bar's length to what `count` (a `SELECT COUNT(…) AS n …`) answers.
    pub(crate) async fn expect_count(&self, count: &str) -> AppResult<()> {
        let total: i64 = sqlx::query(count)
            .fetch_one(&self.infra.db.pool)
            .await?
            .try_get("n")?;
        self.expect(total.max(0) as u64);
        Ok(())
    }

    /// Moves the bar for work that keeps no cursor.
    pub(crate) fn advance(&self, done: u64) {
        self.bar.inc(done);
    }
}

impl<'a> Rebuild<'a> {
    /// One feature's rebuild, showing its progress on `bar`.
    pub(crate) fn new(infra: &'a Infra, feature: &'static str, bar: ProgressBar) -> Self {
        Self {
            infra,
            feature,
            bar,
        }
    }

    /// One feature's rebuild without a bar, driven on its own (tests do).
    pub fn hidden(infra: &'a Infra, feature: &'static str) -> Self {
        Self::new(infra, feature, ProgressBar::hidden())
    }

    /// Ends the bar; answers how many things the rebuild wrote.
    pub(crate) fn finish(&self) -> u64 {
        self.bar.finish();
        self.bar.position()
    }
}

impl crate::infra::redis::Keys {
    /// Where a stopped rebuild resumes: the cursor each feature reached.
    pub fn recovery_cursors(&self) -> String {
        self.tagged("recovery", "cursors")
    }
}

/// Sends a pipeline of writes whose replies nobody reads; an empty one sends nothing.
pub(crate) async fn write(infra: &Infra, pipe: &redis::Pipeline) -> AppResult<()> {
    if pipe.is_empty() {
        return Ok(());
    }
    let mut conn = infra.redis.get().await?;
    let () = pipe.query_async(&mut *conn).await?;
    Ok(())
}

/// The next `limit` distinct values of `column` in `table` above `after` (of the rows
/// `scope`, an SQL condition, selects), ascending: how features walk their users, authors
/// or followers in chunks. Read as plain ordered pages of the column's index and made
/// distinct here: PostgreSQL plans `SELECT DISTINCT … LIMIT` on a table it has not
/// analysed yet as a scan of the whole table, each time.
pub(crate) async fn next_ids(
    infra: &Infra,
    table: &str,
    column: &str,
    scope: &str,
    after: i64,
    limit: usize,
) -> AppResult<Vec<i64>> {
    // Pages start at the chunk's size (one row per id reads no more than it needs) and
    // double while ids have many rows each.
    let mut page = limit.max(1);
    let sql = format!(
        "SELECT {column} AS id FROM {table} WHERE {scope} AND {column} > $1 \
         ORDER BY {column} LIMIT $2"
    );
    let mut ids: Vec<i64> = Vec::with_capacity(limit);
    let mut cursor = after;
    loop {
        let rows = sqlx::query(&sql)
            .bind(cursor)
            .bind(page as i64)
            .fetch_all(&infra.db.pool)
            .await?;
        for row in &rows {
            let id: i64 = row.try_get("id")?;
            if ids.last() != Some(&id) {
                if ids.len() == limit {
                    return Ok(ids);
                }
                ids.push(id);
            }
        }
        if ids.len() == limit {
            return Ok(ids);
        }
        match ids.last() {
            Some(&last) if rows.len() == page => {
                cursor = last;
                page = (page * 2).min(limit.max(1) * 64);
            }
            _ => return Ok(ids),
        }
    }
}

/// `<column> BETWEEN <first> AND <last>` of an ascending chunk of ids, for the queries that
/// read a chunk's rows: a range its index reads directly, where PostgreSQL planned a long
/// `IN (…)` list on a table it had not analysed yet as a scan of the whole table. Ids
/// between the two that are not in the chunk are the caller's to skip.
pub(crate) fn within(column: &str, ids: &[i64]) -> String {
    match (ids.first(), ids.last()) {
        (Some(first), Some(last)) => format!("{column} BETWEEN {first} AND {last}"),
        _ => "FALSE".to_string(),
    }
}
