//! How long `engage rebuild` takes after Redis lost everything, at the sizes an operator
//! meets: a season board of `--members` users and the calendars of `--signed` users who
//! signed in every day of this month so far.
//!
//! In process, against the real Redis (a key prefix of its own) and the database of
//! `--database-url`: seeds SQL directly (as the archive consumers would have written it),
//! then times `verify` on the empty Redis (it must find drift), `rebuild`, and `verify`
//! again (it must be clean), and prints one Markdown row per step.
//!
//! ```sh
//! cargo run --release --example bench_rebuild -- --database-url sqlite:///tmp/r.db \
//!     --members 1000000 --signed 100000
//! ```

use std::time::Instant;

use chrono::Datelike;
use clap::Parser;
use engage::{
    app::{cli::Cli, AppState, Services},
    infra::{
        clock::{day_number, Month},
        db::values_placeholders,
    },
};

#[derive(Parser)]
struct Args {
    #[arg(long)]
    database_url: String,
    /// Users on the season board (one award each).
    #[arg(long, default_value_t = 1_000_000)]
    members: i64,
    /// Users who signed in every day of this month so far.
    #[arg(long, default_value_t = 100_000)]
    signed: i64,
}

/// Rows per INSERT statement.
const BATCH: i64 = 1000;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut config = Cli::try_parse_from(["engage"])?.config;
    config.database_url = args.database_url.clone();
    config.redis_prefix = format!("bench-rebuild-{}:", std::process::id());
    let state = Services::start(config).await?;
    let result = run(&state, &args).await;
    let mut conn = state.infra.redis.get().await?;
    let keys = keys_of(&state).await?;
    for chunk in keys.chunks(1000) {
        let _: i64 = redis::cmd("UNLINK")
            .arg(chunk)
            .query_async(&mut *conn)
            .await?;
    }
    result
}

async fn run(state: &AppState, args: &Args) -> anyhow::Result<()> {
    let seeded = Instant::now();
    let rows = seed(state, args).await?;
    if state.infra.db.backend == engage::infra::db::Backend::Postgres {
        // As autovacuum would have long done on a database in service.
        sqlx::query("ANALYZE").execute(&state.infra.db.pool).await?;
    }
    eprintln!(
        "seeded {rows} rows in {:.1} s",
        seeded.elapsed().as_secs_f64()
    );

    println!("| step | figure | time |");
    println!("|---|---|---|");
    let started = Instant::now();
    let reports = state.features.verify().await?;
    let drifted: u64 = reports.iter().map(|r| r.drifted).sum();
    anyhow::ensure!(drifted > 0, "verify found no drift on an empty Redis");
    println!(
        "| verify, Redis empty | {drifted} drifted of {} checked | {:.1} s |",
        reports.iter().map(|r| r.checked).sum::<u64>(),
        started.elapsed().as_secs_f64()
    );
    let started = Instant::now();
    let rebuilt = state.features.rebuild(&state.infra, false).await?;
    let took = started.elapsed();
    for feature in rebuilt.iter().filter(|f| f.written > 0) {
        println!(
            "| rebuild: {} | {} written | {:.1} s |",
            feature.feature,
            feature.written,
            feature.took.as_secs_f64()
        );
    }
    println!(
        "| rebuild, all | {} keys in Redis | {:.1} s |",
        keys_of(state).await?.len(),
        took.as_secs_f64()
    );
    let started = Instant::now();
    let reports = state.features.verify().await?;
    let drifted: Vec<_> = reports.iter().filter(|r| !r.is_clean()).collect();
    anyhow::ensure!(drifted.is_empty(), "drift after the rebuild: {drifted:?}");
    println!(
        "| verify, rebuilt | {} checked, clean | {:.1} s |",
        reports.iter().map(|r| r.checked).sum::<u64>(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Writes `points_record` (one award per board member) and `sign_ins` (every day of this
/// month before today, per signed user); the rows written.
async fn seed(state: &AppState, args: &Args) -> anyhow::Result<i64> {
    let today = state.infra.clock.today();
    let month = Month::of(today);
    let begins = state.infra.clock.month_begins(month).timestamp_millis();
    let mut rows = 0;
    for first in (0..args.members).step_by(BATCH as usize) {
        let users: Vec<i64> = (first..(first + BATCH).min(args.members)).collect();
        let sql = format!(
            "INSERT INTO points_record (event_id, user_id, kind, points, requested, \
             idempotency_key, season, awarded_at_ms, award_date, event_order) VALUES {}",
            values_placeholders(state.infra.db.backend, users.len(), 10)
        );
        let mut insert = sqlx::query(&sql);
        for &n in &users {
            let user = n + 1;
            let at = begins + (n % 86_400) * 1000;
            insert = insert
                .bind(format!("{at}-{n}"))
                .bind(user)
                .bind("LEARNING")
                .bind(1 + n % 500)
                .bind(1 + n % 500)
                .bind(format!("service:seed-{user}"))
                .bind(i64::from(month.id()))
                .bind(at)
                .bind(day_number(state.infra.clock.date_of(
                    chrono::DateTime::from_timestamp_millis(at).unwrap_or_default(),
                )))
                .bind(at * 1_000_000 + n % 1_000_000);
        }
        insert.execute(&state.infra.db.pool).await?;
        rows += users.len() as i64;
    }
    let days: Vec<i64> = (1..today.day())
        .filter_map(|d| today.with_day(d))
        .map(day_number)
        .collect();
    if !days.is_empty() {
        let per_batch = (BATCH / days.len() as i64).max(1);
        for first in (0..args.signed).step_by(per_batch as usize) {
            let users: Vec<i64> = (first..(first + per_batch).min(args.signed)).collect();
            let sql = format!(
                "INSERT INTO sign_ins (user_id, day, made_up, signed_at_ms) VALUES {}",
                values_placeholders(state.infra.db.backend, users.len() * days.len(), 4)
            );
            let mut insert = sqlx::query(&sql);
            for &n in &users {
                for &day in &days {
                    insert = insert.bind(n + 1).bind(day).bind(0).bind(begins);
                }
            }
            insert.execute(&state.infra.db.pool).await?;
            rows += (users.len() * days.len()) as i64;
        }
    }
    Ok(rows)
}

async fn keys_of(state: &AppState) -> anyhow::Result<Vec<String>> {
    let mut conn = state.infra.redis.get().await?;
    let mut cursor = 0u64;
    let mut keys = Vec::new();
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(state.infra.keys.all_pattern())
            .arg("COUNT")
            .arg(10_000)
            .query_async(&mut *conn)
            .await?;
        keys.extend(batch);
        if next == 0 {
            return Ok(keys);
        }
        cursor = next;
    }
}
