//! Archive consumers: how fast vote events go from the Redis streams into SQL.
//!
//! In process, against the real Redis and the database of `--database-url`:
//! 1. **drain**: a backlog of N likes is made with the like script (no consumer running),
//!    then the vote-archive consumer starts and the time until every entry is acknowledged
//!    (which happens only after its SQL commit) gives events/s;
//! 2. **steady**: likes at a fixed rate with the consumer running; the lag (age of the
//!    oldest entry not yet acknowledged) is sampled every 100 ms.
//!
//! Finally `vote_log` must hold exactly one row per like.
//!
//! ```sh
//! cargo run --release --example bench_archive -- --database-url sqlite:///tmp/a.db \
//!     --events 100000 --rate 5000 --seconds 20
//! ```

use std::{
    sync::{
        atomic::{AtomicI64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use clap::Parser;
use engage::{
    app::{cli::Cli, AppState, Services},
    features::{
        items::NewItem,
        remarks::{self, likes::Vote, NewRemark},
    },
};
use futures::{stream, StreamExt};
use serde_json::json;

#[path = "support/mod.rs"]
mod support;

#[derive(Parser)]
struct Args {
    #[arg(long)]
    database_url: String,
    /// Likes in the backlog of the drain phase.
    #[arg(long, default_value_t = 100_000)]
    events: i64,
    /// Likes per second in the steady phase.
    #[arg(long, default_value_t = 5_000)]
    rate: u64,
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    #[arg(long, default_value_t = 100)]
    remarks: i64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut config = Cli::try_parse_from(["engage"])?.config;
    config.database_url = args.database_url.clone();
    config.redis_prefix = format!("bench-archive-{}:", std::process::id());
    let state = Services::start(config).await?;
    let backend = if args.database_url.starts_with("postgres") {
        "PostgreSQL"
    } else {
        "SQLite"
    };

    let item = state
        .features
        .items
        .create(1, NewItem::new("bench", None, None)?)
        .await?;
    let mut remark_ids = Vec::new();
    for author in 0..args.remarks {
        let remark = NewRemark::new(item.id, 5, "bench", Vec::new())?;
        remark_ids.push(
            state
                .features
                .remarks
                .create(10_000_000 + author, remark)
                .await?
                .id,
        );
    }
    let remark_ids = Arc::new(remark_ids);
    let next_voter = Arc::new(AtomicI64::new(100_000_000));

    // Drain: the backlog first, then the consumer.
    let making = Instant::now();
    like_many(&state, &remark_ids, &next_voter, args.events, 64).await?;
    let made_in = making.elapsed();
    let draining = Instant::now();
    state.features.remarks.spawn_archive();
    while unacknowledged(&state).await?.0 > 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let drained_in = draining.elapsed();

    // Steady: a fixed rate, in ticks of 10 ms.
    let per_tick = (args.rate / 100).max(1) as i64;
    let ticks = args.seconds * 100;
    let sampler = {
        let state = state.clone();
        tokio::spawn(async move {
            let mut lags = Vec::new();
            loop {
                let (_, lag_ms) = unacknowledged(&state).await?;
                lags.push(lag_ms);
                tokio::time::sleep(Duration::from_millis(100)).await;
                if state.infra.instance.shutdown.is_cancelled() {
                    return anyhow::Ok(lags);
                }
            }
        })
    };
    let mut ticker = tokio::time::interval(Duration::from_millis(10));
    let steady = Instant::now();
    for _ in 0..ticks {
        ticker.tick().await;
        let (state, remark_ids, next_voter) =
            (state.clone(), remark_ids.clone(), next_voter.clone());
        tokio::spawn(
            async move { like_many(&state, &remark_ids, &next_voter, per_tick, 16).await },
        );
    }
    let steady_in = steady.elapsed();
    while unacknowledged(&state).await?.0 > 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    state.infra.instance.shutdown.cancel();
    let mut lags = sampler.await??;
    lags.sort_unstable();
    let total = args.events + per_tick * ticks as i64;
    let rows: i64 = sqlx::query_scalar(&format!(
        "SELECT COUNT(*) FROM vote_log WHERE remark_id IN ({})",
        engage::infra::db::id_list(&remark_ids)
    ))
    .fetch_one(&state.infra.db.pool)
    .await?;
    println!(
        "RESULT {}",
        json!({
            "scenario": format!("archive into {backend}"),
            "backlog": args.events,
            "backlog_made_per_s": (args.events as f64 / made_in.as_secs_f64()).round(),
            "drain_per_s": (args.events as f64 / drained_in.as_secs_f64()).round(),
            "steady_rate": (per_tick as f64 * ticks as f64 / steady_in.as_secs_f64()).round(),
            "lag_p50_ms": lags.get(lags.len() / 2).copied().unwrap_or(0),
            "lag_max_ms": lags.last().copied().unwrap_or(0),
            "likes": total,
            "vote_log_rows": rows,
        })
    );
    support::stop_and_unlink_keys(&state).await
}

/// `count` likes by fresh voters over the remarks, `concurrency` at a time.
async fn like_many(
    state: &AppState,
    remark_ids: &[i64],
    next_voter: &AtomicI64,
    count: i64,
    concurrency: usize,
) -> anyhow::Result<()> {
    let results: Vec<_> = stream::iter(0..count)
        .map(|n| {
            let voter = next_voter.fetch_add(1, Ordering::Relaxed);
            let remark = remark_ids[(n as usize) % remark_ids.len()];
            async move { state.features.remarks.vote(voter, remark, Vote::Like).await }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    for result in results {
        result?;
    }
    Ok(())
}

/// Entries of the vote streams not yet acknowledged by the archive group, and the age of
/// the oldest of them in milliseconds.
async fn unacknowledged(state: &AppState) -> anyhow::Result<(u64, i64)> {
    let mut conn = state.infra.redis.get().await?;
    let now_ms = chrono::Utc::now().timestamp_millis();
    let (mut count, mut oldest_ms) = (0u64, now_ms);
    for shard in 0..state.features.remarks.settings.shards() {
        let stream = state.infra.keys.vote_stream(shard);
        let groups: Vec<redis::Value> = redis::cmd("XINFO")
            .arg("GROUPS")
            .arg(&stream)
            .query_async(&mut *conn)
            .await
            .unwrap_or_default();
        let group = groups.iter().find_map(|g| {
            let map: std::collections::HashMap<String, redis::Value> =
                redis::from_redis_value(g.clone()).ok()?;
            let name: String = redis::from_redis_value(map.get("name")?.clone()).ok()?;
            (name == remarks::archive::GROUP).then_some(map)
        });
        let Some(group) = group else {
            // No group yet: every entry of the stream is waiting.
            let length: u64 = redis::cmd("XLEN")
                .arg(&stream)
                .query_async(&mut *conn)
                .await?;
            let first: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
                .arg(&stream)
                .arg("-")
                .arg("+")
                .arg("COUNT")
                .arg(1)
                .query_async(&mut *conn)
                .await?;
            count += length;
            if let Some((id, _)) = first.first() {
                oldest_ms = oldest_ms.min(id_ms(id));
            }
            continue;
        };
        let pending: u64 = redis::from_redis_value(group["pending"].clone())?;
        let lag: u64 = redis::from_redis_value(group["lag"].clone()).unwrap_or(0);
        let delivered: String = redis::from_redis_value(group["last-delivered-id"].clone())?;
        count += pending + lag;
        if pending > 0 {
            let summary: (u64, Option<String>, Option<String>, redis::Value) =
                redis::cmd("XPENDING")
                    .arg(&stream)
                    .arg(remarks::archive::GROUP)
                    .query_async(&mut *conn)
                    .await?;
            if let Some(id) = summary.1 {
                oldest_ms = oldest_ms.min(id_ms(&id));
            }
        } else if lag > 0 {
            let next: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
                .arg(&stream)
                .arg(format!("({delivered}"))
                .arg("+")
                .arg("COUNT")
                .arg(1)
                .query_async(&mut *conn)
                .await?;
            if let Some((id, _)) = next.first() {
                oldest_ms = oldest_ms.min(id_ms(id));
            }
        }
    }
    Ok((count, if count == 0 { 0 } else { now_ms - oldest_ms }))
}

fn id_ms(id: &str) -> i64 {
    id.split('-')
        .next()
        .and_then(|ms| ms.parse().ok())
        .unwrap_or(0)
}
