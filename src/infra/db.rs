//! The SQL archive: one sqlx `AnyPool` over SQLite (embedded default) or PostgreSQL
//! (production), chosen by the scheme of `DATABASE_URL`.
//!
//! Why `Any` rather than a pool per backend: the queries of this service are plain SQL that
//! both engines accept (`$1` placeholders, `ON CONFLICT`, `RETURNING`), so one code path
//! serves both. Where the engines differ (partitioning, types) the difference lives in a
//! migration's dialect override (`migrations/sqlite/`, `migrations/postgres/`, next to the
//! shared `migrations/NNNN_name.sql`), or behind [`Db::backend`].
//! The price is that `Any` only carries integers, floats, text and blobs: times are stored as
//! epoch milliseconds (`BIGINT`).

use std::{str::FromStr, time::Duration};

use anyhow::Context;
use futures::future::BoxFuture;
use sqlx::{
    any::{AnyArguments, AnyConnectOptions, AnyPoolOptions, AnyRow},
    error::BoxDynError,
    migrate::{Migration, MigrationSource, MigrationType, Migrator},
    query::Query,
    sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous},
    Any, AnyConnection, AnyPool, ConnectOptions, Executor,
};

use super::{
    error::AppResult,
    page::{split_page, KeyRange, PageArgs},
};

// `MIGRATIONS`: every migration with its SQL for each backend (written by build.rs).
include!(concat!(env!("OUT_DIR"), "/migrations.rs"));

/// The migrations of one backend up to a version, as sqlx's migrator reads them.
#[derive(Debug)]
struct Dialect(Backend, i64);

impl MigrationSource<'static> for Dialect {
    fn resolve(self) -> BoxFuture<'static, Result<Vec<Migration>, BoxDynError>> {
        let migrations = MIGRATIONS
            .iter()
            .filter(|&&(version, ..)| version <= self.1)
            .map(|&(version, description, sqlite, postgres)| {
                let sql = match self.0 {
                    Backend::Sqlite => sqlite,
                    Backend::Postgres => postgres,
                };
                Migration::new(
                    version,
                    description.into(),
                    MigrationType::Simple,
                    sql.into(),
                    false,
                )
            })
            .collect();
        Box::pin(async move { Ok(migrations) })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    /// The backend a connection (or a transaction, through `&**tx`) speaks.
    pub(crate) fn of(conn: &AnyConnection) -> Self {
        if conn.backend_name() == "SQLite" {
            Self::Sqlite
        } else {
            Self::Postgres
        }
    }

    /// Its name in OpenTelemetry's `db.system.name`.
    pub(crate) fn system_name(self) -> &'static str {
        match self {
            Self::Sqlite => "sqlite",
            Self::Postgres => "postgresql",
        }
    }

    /// The placeholder of the `n`th parameter (from 1) of a statement whose parameters are
    /// all bound in order: `$n`, or on SQLite an anonymous `?` (see [`values_placeholders`]).
    pub(crate) fn param(self, n: usize) -> String {
        let mut param = String::new();
        self.push_param(&mut param, n);
        param
    }

    /// Writes [`Backend::param`] at the end of `sql`.
    fn push_param(self, sql: &mut String, n: usize) {
        match self {
            Self::Sqlite => sql.push('?'),
            Self::Postgres => {
                use std::fmt::Write as _;
                let _ = write!(sql, "${n}");
            }
        }
    }

    /// Writes `count` parameters numbered from `from`, separated by commas, at the end of
    /// `sql`: one string for a batch's thousands, not one each.
    fn push_params(self, sql: &mut String, from: usize, count: usize) {
        for n in from..from + count {
            if n > from {
                sql.push_str(", ");
            }
            self.push_param(sql, n);
        }
    }

    /// What ends a `SELECT` that takes the rows it reads for the transaction: ` FOR UPDATE`
    /// on PostgreSQL; nothing on SQLite, which has no row locks: there a transaction that has
    /// written holds the database's one write lock, which serves.
    pub(crate) fn lock_rows(self) -> &'static str {
        match self {
            Self::Sqlite => "",
            Self::Postgres => " FOR UPDATE",
        }
    }

    /// `INSERT INTO {into} VALUES {values}` that skips each row a unique key already holds:
    /// how the archives write a batch that may come again after a crash.
    ///
    /// On SQLite this is `INSERT OR IGNORE`, not `ON CONFLICT DO NOTHING`, which covers the
    /// unique keys alone: the NOT NULL constraints could still abort a multi-row statement
    /// halfway, so SQLite keeps a statement journal for it, a copy of every page the
    /// statement changes, and an archive batch changes hundreds. With every constraint set to
    /// skip the row, nothing can abort and no journal is kept. The rows the archives write
    /// come from typed events, so a NULL it would skip cannot occur.
    pub(crate) fn insert_new_rows(self, into: &str, values: &str) -> String {
        match self {
            Self::Sqlite => format!("INSERT OR IGNORE INTO {into} VALUES {values}"),
            Self::Postgres => format!("INSERT INTO {into} VALUES {values} ON CONFLICT DO NOTHING"),
        }
    }
}

#[derive(Clone)]
pub struct Db {
    pub pool: AnyPool,
    /// Where the background writers (the stream consumers, the first sights of users) write
    /// their batches: on SQLite one connection of its own (see [`Db::connect`]), on
    /// PostgreSQL the same pool.
    pub(crate) archive: AnyPool,
    pub backend: Backend,
}

impl Db {
    /// Opens the database named by `url`, creating a SQLite file and its folder if needed.
    pub async fn connect(url: &str) -> anyhow::Result<Self> {
        sqlx::any::install_default_drivers();
        let backend = if url.starts_with("sqlite:") {
            Backend::Sqlite
        } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            Backend::Postgres
        } else {
            anyhow::bail!("DATABASE_URL must start with sqlite: or postgres: (got {url})");
        };

        super::telemetry::set_sql_system(backend.system_name());
        let options = AnyPoolOptions::new().acquire_timeout(Duration::from_secs(5));
        // sqlx logs a slow statement with its whole text at WARN; an archive batch is one
        // statement with hundreds of rows of placeholders, so under load that would flood the
        // log. Slow statements go to DEBUG; the request and consumer metrics show slowness.
        let connect_options = AnyConnectOptions::from_str(url)
            .with_context(|| format!("cannot parse DATABASE_URL {}", redact(url)))?
            .log_slow_statements(log::LevelFilter::Debug, Duration::from_secs(1));
        let context = || format!("cannot open the database at {}", redact(url));
        let (pool, archive) = match backend {
            Backend::Sqlite => {
                super::sqlite_memory::configure();
                prepare_sqlite_file(url).await?;
                // SQLite allows one writer at a time; a small pool avoids lock contention,
                // and WAL lets readers go on while the writer writes.
                let pool = sqlite_pool(options.clone().max_connections(8), connect_options.clone())
                    .await
                    .with_context(context)?;
                // The archives' writer: every batch of every stream consumer (and of the
                // first sights of users) on the same connection. A connection drops its whole
                // page cache whenever another has written since its last transaction, so with
                // the consumers taking turns on the shared pool every batch began by reading
                // its index pages again (from the WAL, through pread). Writes are serialised
                // by SQLite anyway.
                let archive = sqlite_pool(options.max_connections(1), connect_options)
                    .await
                    .with_context(context)?;
                (pool, archive)
            }
            Backend::Postgres => {
                let pool = options
                    .max_connections(16)
                    .connect_with(connect_options)
                    .await
                    .with_context(context)?;
                (pool.clone(), pool)
            }
        };
        Ok(Self {
            pool,
            archive,
            backend,
        })
    }

    /// Applies the migrations of this backend that have not run yet.
    pub(crate) async fn migrate(&self) -> anyhow::Result<()> {
        self.migrate_through(i64::MAX).await
    }

    /// Applies the migrations up to `version` that have not run yet.
    async fn migrate_through(&self, version: i64) -> anyhow::Result<()> {
        Migrator::new(Dialect(self.backend, version))
            .await
            .context("reading the migrations")?
            .run(&self.pool)
            .await
            .context("applying migrations")?;
        Ok(())
    }

    /// Whether the database answers now (readiness).
    pub(crate) async fn is_ready(&self) -> bool {
        sqlx::query("SELECT 1").execute(&self.pool).await.is_ok()
    }

    /// Pool usage, for `/metrics`.
    pub(crate) fn pool_state(&self) -> (u32, u32) {
        (self.pool.size(), self.pool.num_idle() as u32)
    }

    /// The rows of `select` (a statement without its WHERE, e.g. `SELECT id, name FROM
    /// items`) whose `id` is among `ids`, decoded by `decode`, in no particular order (none
    /// for no ids). A query per 64 ids (see [`in_lists`]).
    pub(crate) async fn find_by_ids<T>(
        &self,
        select: &str,
        ids: &[i64],
        decode: impl Fn(&AnyRow) -> Result<T, sqlx::Error>,
    ) -> AppResult<Vec<T>> {
        let mut found = Vec::with_capacity(ids.len());
        for list in in_lists(ids) {
            let sql = format!(
                "{select} WHERE id IN ({})",
                params(self.backend, 1, list.len())
            );
            let mut query = sqlx::query(&sql);
            for id in list {
                query = query.bind(*id);
            }
            found.extend(decode_all(&query.fetch_all(&self.pool).await?, &decode)?);
        }
        Ok(found)
    }

    /// One page of a list read newest first by an integer key. `query` ends in
    /// [`KeyRange::sql_tail`] with every earlier parameter bound: the page binds the last
    /// three, the bounds of the range (none: from the newest, or to the oldest) and one row
    /// more than it returns, which tells whether another page follows in the direction read
    /// (older rows forward, newer ones backward). The rows come back newest first.
    pub(crate) async fn keyset_page<'q, T>(
        &self,
        query: Query<'q, Any, AnyArguments<'q>>,
        page: PageArgs<KeyRange>,
        decode: impl Fn(&AnyRow) -> Result<T, sqlx::Error>,
    ) -> AppResult<(Vec<T>, bool)> {
        let range = page.after;
        let rows = query
            .bind(range.after.unwrap_or(i64::MAX))
            .bind(range.before.unwrap_or(i64::MIN))
            .bind(page.first as i64 + 1)
            .fetch_all(&self.pool)
            .await?;
        let (mut rows, more) = split_page(decode_all(&rows, &decode)?, page.first);
        if range.backward {
            rows.reverse();
        }
        Ok((rows, more))
    }
}

fn decode_all<T>(
    rows: &[AnyRow],
    decode: &impl Fn(&AnyRow) -> Result<T, sqlx::Error>,
) -> AppResult<Vec<T>> {
    rows.iter()
        .map(decode)
        .collect::<Result<_, _>>()
        .map_err(Into::into)
}

/// Ids inlined into `IN (…)`. They are integers, so inlining is safe, and one statement
/// serves any number of them (no placeholder-count limit per backend).
pub fn id_list(ids: &[i64]) -> String {
    ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
}

/// `$from, $from+1, …`: `count` parameters for an `IN (…)` list, numbered from `from` (on
/// SQLite anonymous, as [`values_placeholders`] explains).
pub fn params(backend: Backend, from: usize, count: usize) -> String {
    let mut sql = String::with_capacity(count * 4);
    backend.push_params(&mut sql, from, count);
    sql
}

/// `($1, $2, $3), ($4, $5, $6), …`: the VALUES of `rows` rows of `columns` columns. A batch
/// written by one multi-row statement costs one round trip to the database instead of one
/// per row (the archives write hundreds of rows per transaction). Both backends accept far
/// more parameters than a batch binds (PostgreSQL 65,535, SQLite 32,766).
///
/// On SQLite the placeholders are anonymous (`(?, ?, ?), …`, bound in order). sqlx asks
/// SQLite for the name of every parameter it binds, and SQLite finds a name by walking the
/// list of all of them: n named parameters cost n²/2 steps, and the 1,600 of a 200-row vote
/// batch took an eighth of the server's CPU under a like load. Anonymous ones have no name.
pub fn values_placeholders(backend: Backend, rows: usize, columns: usize) -> String {
    let mut sql = String::with_capacity(rows * (columns * 4 + 4));
    for row in 0..rows {
        if row > 0 {
            sql.push_str(", ");
        }
        sql.push('(');
        backend.push_params(&mut sql, row * columns + 1, columns);
        sql.push(')');
    }
    sql
}

/// `SELECT $1 AS a, $2 AS b UNION ALL SELECT $3, $4 …`: `rows` rows of parameters as a
/// table whose columns are `names`, for an `UPDATE … FROM (…) AS v` that sets each row from
/// its own values. SQLite compounds at most 500 SELECTs, so a caller writes [`runs`].
pub fn rows_table(backend: Backend, rows: usize, names: &[&str]) -> String {
    let mut sql = String::with_capacity(rows * (names.len() * 4 + 18));
    for row in 0..rows {
        sql.push_str(if row == 0 {
            "SELECT "
        } else {
            " UNION ALL SELECT "
        });
        for (column, name) in names.iter().enumerate() {
            if column > 0 {
                sql.push_str(", ");
            }
            backend.push_param(&mut sql, row * names.len() + column + 1);
            if row == 0 {
                sql.push_str(" AS ");
                sql.push_str(name);
            }
        }
    }
    sql
}

/// `SELECT value->>0 AS a, value->>1 AS b FROM json_each(?)`: the rows of one parameter, a
/// JSON array of arrays ([`json_rows`]), as a table whose columns are `columns` (a name and
/// the SQL type PostgreSQL casts it to), for a statement that reads, writes or joins a batch.
/// Its text is the same whatever the number of rows, so it is prepared once per connection
/// however the batches fall. [`runs`] and [`in_lists`] have a text per size: on the archives'
/// one connection each is prepared once, but a writer on the shared pool, whose transactions
/// land on any of its connections, prepared one of its seven texts per statement on nearly
/// every batch (sqlx keeps at most 100 statements per connection). On PostgreSQL:
/// `SELECT (value->>0)::BIGINT AS a, … FROM jsonb_array_elements($n::jsonb) AS e (value)`.
pub fn json_table(backend: Backend, param: usize, columns: &[(&str, &str)]) -> String {
    use std::fmt::Write as _;
    let mut sql = String::from("SELECT ");
    for (index, (name, sql_type)) in columns.iter().enumerate() {
        if index > 0 {
            sql.push_str(", ");
        }
        let _ = match backend {
            Backend::Sqlite => write!(sql, "value->>{index} AS {name}"),
            Backend::Postgres => write!(sql, "(value->>{index})::{sql_type} AS {name}"),
        };
    }
    let _ = match backend {
        Backend::Sqlite => write!(sql, " FROM json_each(?)"),
        Backend::Postgres => write!(
            sql,
            " FROM jsonb_array_elements(${param}::jsonb) AS e (value)"
        ),
    };
    sql
}

/// `SELECT value FROM json_each(?)`: the items of one parameter, a JSON array of numbers or
/// of text, as a table of one column, `value`, each item read as it is (the columns of a
/// [`json_table`] are read by parsing each row's array again, which a long batch pays for).
/// On PostgreSQL: `SELECT value::BIGINT AS value FROM jsonb_array_elements_text($n::jsonb)`.
pub fn json_list(backend: Backend, param: usize, sql_type: &str) -> String {
    match backend {
        Backend::Sqlite => "SELECT value FROM json_each(?)".to_string(),
        Backend::Postgres => format!(
            "SELECT value::{sql_type} AS value \
             FROM jsonb_array_elements_text(${param}::jsonb) AS e (value)"
        ),
    }
}

/// `SELECT key, value FROM json_each(?)`: the members of one parameter, a JSON object of
/// text keys (`{"a": 1, …}`), as a table of two columns read as they are, `key` and
/// `value`. On PostgreSQL: `SELECT key, value::BIGINT AS value FROM jsonb_each_text($n::jsonb)`.
pub fn json_map(backend: Backend, param: usize, value_type: &str) -> String {
    match backend {
        Backend::Sqlite => "SELECT key, value FROM json_each(?)".to_string(),
        Backend::Postgres => format!(
            "SELECT key, value::{value_type} AS value \
             FROM jsonb_each_text(${param}::jsonb) AS e (key, value)"
        ),
    }
}

/// Runs `sql`, whose one parameter is `rows` as JSON ([`json_rows`]): the rows it changed.
pub(crate) async fn execute_json<T: serde::Serialize + ?Sized>(
    conn: &mut AnyConnection,
    sql: &str,
    rows: &T,
) -> Result<u64, sqlx::Error> {
    let done = sqlx::query(sql).bind(json_rows(rows)).execute(conn).await?;
    Ok(done.rows_affected())
}

/// The parameter of a [`json_table`] (`rows`, each a tuple of numbers, options and text: a
/// JSON array of arrays), of a [`json_list`] (numbers or text: a JSON array) or of a
/// [`json_map`] (a map of text to numbers: a JSON object).
pub fn json_rows<T: serde::Serialize + ?Sized>(rows: &T) -> String {
    serde_json::to_string(rows).expect("numbers, options and text serialise")
}

/// The most rows one batch statement writes: see [`runs`].
const LARGEST_RUN: usize = 64;

/// Splits a batch into runs of 64, 32, 16, 8, 4, 2 or 1 items, longest first, each written by
/// one statement. A statement's text is then one of seven whatever the batch's size, so each
/// is prepared once per connection and then found in sqlx's statement cache. A statement per
/// batch size had a new text for almost every batch: SQLite compiles a multi-row statement
/// row by row, so preparing one cost about as much as running it.
pub fn runs<T>(items: &[T]) -> impl Iterator<Item = &[T]> {
    let mut rest = items;
    std::iter::from_fn(move || {
        let len = rest.len().min(LARGEST_RUN);
        if len == 0 {
            return None;
        }
        let (run, tail) = rest.split_at(1 << len.ilog2());
        rest = tail;
        Some(run)
    })
}

/// Writes `rows` into `into` (`table (column, …)`) with [`Backend::insert_new_rows`], a
/// statement per [run](runs), `bind` binding a row's `columns` values in order.
pub(crate) async fn insert_new_rows<T>(
    conn: &mut AnyConnection,
    into: &str,
    columns: usize,
    rows: &[T],
    bind: impl for<'q> Fn(Query<'q, Any, AnyArguments<'q>>, &'q T) -> Query<'q, Any, AnyArguments<'q>>,
) -> Result<(), sqlx::Error> {
    let backend = Backend::of(conn);
    for run in runs(rows) {
        let sql = backend.insert_new_rows(into, &values_placeholders(backend, run.len(), columns));
        let mut insert = sqlx::query(&sql);
        for row in run {
            insert = bind(insert, row);
        }
        insert.execute(&mut *conn).await?;
    }
    Ok(())
}

/// Splits `items` into `IN (…)` lists of at most 64, each padded to a power of two by
/// repeating its last item, which changes no list's meaning: a query per 64 items, whose text
/// is one of seven, as with [`runs`], without a query per run.
pub fn in_lists<T>(items: &[T]) -> impl Iterator<Item = Vec<&T>> {
    items.chunks(LARGEST_RUN).map(|chunk| {
        let padded = chunk.len().next_power_of_two();
        let last = chunk.last().expect("chunks are never empty");
        chunk
            .iter()
            .chain(std::iter::repeat_n(last, padded - chunk.len()))
            .collect()
    })
}

/// A pool of SQLite connections, each set up for the archives' load.
async fn sqlite_pool(
    options: AnyPoolOptions,
    connect_options: AnyConnectOptions,
) -> Result<AnyPool, sqlx::Error> {
    options
        .after_connect(|conn, _| {
            Box::pin(async move {
                conn.execute("PRAGMA busy_timeout = 10000").await?;
                conn.execute("PRAGMA synchronous = NORMAL").await?;
                conn.execute("PRAGMA foreign_keys = ON").await?;
                // Each connection's page cache is dropped whenever another one has written,
                // so with the archives writing all the time every transaction began by
                // reading its pages again through read(2). Mapped, the file's pages are
                // shared by the connections and read without a system call.
                conn.execute("PRAGMA mmap_size = 1073741824").await?;
                // A multi-row insert keeps a statement journal (to undo the statement alone
                // if a row fails); past 64 KiB SQLite spills it to a temporary file, which an
                // archive batch always did.
                conn.execute("PRAGMA temp_store = MEMORY").await?;
                // An archive's transaction dirties more pages than the default 2 MiB page
                // cache holds; past it SQLite spills pages to the log in the middle of the
                // transaction and writes them again at its end. The cache grows only as
                // pages are used.
                conn.execute("PRAGMA cache_size = -16384").await?;
                // A checkpoint copies the log's pages into the file and syncs both; the
                // archives rewrite the same index pages batch after batch, so a longer log
                // copies each of them once for many transactions: 128 MiB (the default is
                // 4) took a new like's CPU down by about 8 % from 32 MiB (BENCHMARKS.md). The
                // log takes that much disk, and a start after a crash replays it.
                conn.execute("PRAGMA wal_autocheckpoint = 32768").await?;
                Ok(())
            })
        })
        .connect_with(connect_options)
        .await
}

/// Creates the SQLite file (and its folder) and switches it to WAL; the journal mode is
/// stored in the file, so every later connection uses it.
async fn prepare_sqlite_file(url: &str) -> anyhow::Result<()> {
    let options = SqliteConnectOptions::from_str(url)?;
    let path = options.get_filename().to_path_buf();
    if path.as_os_str() == ":memory:" {
        return Ok(());
    }
    if let Some(folder) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(folder)
            .with_context(|| format!("creating the folder {}", folder.display()))?;
    }
    let conn = options
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .connect()
        .await
        .with_context(|| format!("creating {}", path.display()))?;
    sqlx::Connection::close(conn).await?;
    Ok(())
}

/// The URL without its password, for messages.
fn redact(url: &str) -> String {
    match url.split_once('@') {
        Some((credentials, rest)) => match credentials.rsplit_once(':') {
            Some((user, _)) if user.contains("//") => format!("{user}:***@{rest}"),
            _ => url.to_string(),
        },
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use sqlx::Row;

    use super::{
        in_lists, json_list, json_map, json_rows, json_table, params, rows_table, runs,
        values_placeholders, Backend, Db,
    };

    #[test]
    fn placeholders_are_numbered_in_order_on_postgres_and_anonymous_on_sqlite() {
        assert_eq!(
            values_placeholders(Backend::Postgres, 2, 3),
            "($1, $2, $3), ($4, $5, $6)"
        );
        assert_eq!(values_placeholders(Backend::Sqlite, 2, 2), "(?, ?), (?, ?)");
        assert_eq!(values_placeholders(Backend::Sqlite, 0, 2), "");
        assert_eq!(params(Backend::Postgres, 3, 3), "$3, $4, $5");
        assert_eq!(params(Backend::Sqlite, 3, 2), "?, ?");
        assert_eq!(Backend::Postgres.param(12), "$12");
        assert_eq!(
            rows_table(Backend::Postgres, 2, &["id", "n"]),
            "SELECT $1 AS id, $2 AS n UNION ALL SELECT $3, $4"
        );
        assert_eq!(rows_table(Backend::Sqlite, 1, &["id"]), "SELECT ? AS id");
    }

    #[test]
    fn a_json_table_has_one_text_whatever_its_rows_and_casts_on_postgres() {
        let columns = [("u", "BIGINT"), ("text", "TEXT")];
        assert_eq!(
            json_table(Backend::Sqlite, 1, &columns),
            "SELECT value->>0 AS u, value->>1 AS text FROM json_each(?)"
        );
        assert_eq!(
            json_table(Backend::Postgres, 2, &columns),
            "SELECT (value->>0)::BIGINT AS u, (value->>1)::TEXT AS text \
             FROM jsonb_array_elements($2::jsonb) AS e (value)"
        );
        let rows = [(1_i64, Some("a \"quoted\" ]")), (2, None)];
        assert_eq!(json_rows(&rows), r#"[[1,"a \"quoted\" ]"],[2,null]]"#);
        assert_eq!(
            json_list(Backend::Postgres, 1, "BIGINT"),
            "SELECT value::BIGINT AS value FROM jsonb_array_elements_text($1::jsonb) AS e (value)"
        );
        assert_eq!(
            json_map(Backend::Sqlite, 1, "BIGINT"),
            "SELECT key, value FROM json_each(?)"
        );
    }

    #[test]
    fn a_batch_is_written_in_runs_of_a_few_sizes_longest_first() {
        let lengths = |n: usize| -> Vec<usize> {
            let items: Vec<usize> = (0..n).collect();
            let runs: Vec<&[usize]> = runs(&items).collect();
            assert_eq!(runs.concat(), items, "every item once, in order");
            runs.iter().map(|run| run.len()).collect()
        };
        assert_eq!(lengths(0), Vec::<usize>::new());
        assert_eq!(lengths(1), [1]);
        assert_eq!(lengths(7), [4, 2, 1]);
        assert_eq!(lengths(64), [64]);
        assert_eq!(
            lengths(830),
            [64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 32, 16, 8, 4, 2]
        );
    }

    #[test]
    fn an_in_list_is_padded_with_its_last_item_to_a_power_of_two() {
        let items: Vec<i64> = (1..=70).collect();
        let lists: Vec<Vec<&i64>> = in_lists(&items).collect();
        assert_eq!(lists.len(), 2);
        assert_eq!(lists[0].len(), 64);
        assert_eq!(lists[1], [&65, &66, &67, &68, &69, &70, &70, &70]);
        assert_eq!(in_lists(&[5]).collect::<Vec<_>>(), [vec![&5]]);
        assert_eq!(in_lists::<i64>(&[]).count(), 0);
    }

    /// Archives the votes of `voters` on one remark as the vote archive does: voter `n`'s
    /// vote is the stream entry `n-0`, the remark's `n`th like.
    async fn archive_votes(db: &Db, voters: &[i64]) {
        for &voter in voters {
            sqlx::query(
                "INSERT OR IGNORE INTO vote_log (event_id, remark_id, voter_id, voting, \
                 like_count, voted_at_ms, vote_date, event_order) \
                 VALUES ($1, 7, $2, 1, $2, 1, 20261129, $3)",
            )
            .bind(format!("v/{voter}-0"))
            .bind(voter)
            .bind(voter * 1_000_000)
            .execute(&db.pool)
            .await
            .expect("a vote archived");
        }
    }

    /// A json table's rows come back as they were bound: integers beyond 2^53, text with
    /// quotes, brackets and non-ASCII letters, and nulls.
    #[tokio::test]
    async fn a_json_table_reads_back_its_rows_on_sqlite() {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let db = Db::connect(&format!("sqlite://{}", dir.path().join("e.db").display()))
            .await
            .expect("SQLite opens");
        let rows = [
            (i64::MAX, Some("Mei \"🙂\" ],[ 美")),
            (-(1_i64 << 60) - 1, None),
        ];
        let sql = format!(
            "SELECT v.id, v.name FROM ({}) AS v",
            json_table(Backend::Sqlite, 1, &[("id", "BIGINT"), ("name", "TEXT")])
        );
        let read: Vec<(i64, Option<String>)> = sqlx::query(&sql)
            .bind(json_rows(&rows))
            .fetch_all(&db.pool)
            .await
            .expect("the rows read")
            .iter()
            .map(|row| (row.get("id"), row.get("name")))
            .collect();
        let bound: Vec<(i64, Option<String>)> = rows
            .iter()
            .map(|(id, name)| (*id, name.map(str::to_string)))
            .collect();
        assert_eq!(read, bound);

        // A list's items and a map's members, read as they are.
        let sql = format!(
            "SELECT v.value FROM ({}) AS v",
            json_list(Backend::Sqlite, 1, "")
        );
        let ids: Vec<i64> = sqlx::query(&sql)
            .bind(json_rows(&[i64::MIN, 7]))
            .fetch_all(&db.pool)
            .await
            .expect("the list reads")
            .iter()
            .map(|row| row.get("value"))
            .collect();
        assert_eq!(ids, [i64::MIN, 7]);
        let sql = format!(
            "SELECT v.key, v.value FROM ({}) AS v ORDER BY v.value",
            json_map(Backend::Sqlite, 1, "")
        );
        let map = std::collections::BTreeMap::from([("stream/1-0 \"]", 2_i64), ("美", 1)]);
        let members: Vec<(String, i64)> = sqlx::query(&sql)
            .bind(json_rows(&map))
            .fetch_all(&db.pool)
            .await
            .expect("the map reads")
            .iter()
            .map(|row| (row.get("key"), row.get("value")))
            .collect();
        assert_eq!(
            members,
            [("美".to_string(), 1), ("stream/1-0 \"]".to_string(), 2)]
        );
    }

    /// The votes archived before the log was keyed by (remark, voter, order) stay, and a
    /// replayed vote is still one row.
    #[tokio::test]
    async fn the_vote_log_keeps_its_votes_when_it_is_keyed_by_remark_voter_and_order() {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let db = Db::connect(&format!("sqlite://{}", dir.path().join("e.db").display()))
            .await
            .expect("SQLite opens");
        db.migrate_through(20)
            .await
            .expect("the earlier migrations");
        archive_votes(&db, &[1, 2]).await;
        db.migrate().await.expect("the later migrations");

        // The same vote again (a batch handled twice) inserts nothing; another one does.
        archive_votes(&db, &[2, 3]).await;
        let rows = sqlx::query("SELECT voter_id, like_count FROM vote_log ORDER BY event_order")
            .fetch_all(&db.pool)
            .await
            .expect("the log reads");
        let votes: Vec<(i64, i64)> = rows
            .iter()
            .map(|row| (row.get("voter_id"), row.get("like_count")))
            .collect();
        assert_eq!(votes, [(1, 1), (2, 2), (3, 3)]);
    }
}
