//! Load test for `signIn` and for `leaderboard` on a board of a million members.
//!
//! ```sh
//! ENGAGE_RATE_LIMIT_PER_IP=0 ENGAGE_RATE_LIMIT_PER_USER=0 ENGAGE_REDIS_PREFIX=bench: cargo run --release &
//! cargo run --release --example bench_points -- --prefix bench: --sign-ins 20000 --members 1000000
//! ```
//! Sign-ins come from distinct users (one each, as on a real morning). The board is then
//! filled to `--members` directly in Redis (scores encoded as the award script does) and
//! `leaderboard` is queried at random offsets with a signed-in viewer, so each query also
//! finds the viewer's own rank.

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use clap::Parser;
use engage::auth::Role;
use rand::Rng;
use serde_json::{json, Value};

#[path = "support/mod.rs"]
mod support;
use support::data as post;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value = "http://127.0.0.1:8000/graphql")]
    url: String,
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    redis: String,
    /// The server's ENGAGE_REDIS_PREFIX.
    #[arg(long, default_value = "engage:")]
    prefix: String,
    #[arg(long, default_value_t = 20_000)]
    sign_ins: usize,
    #[arg(long, default_value_t = 64)]
    connections: usize,
    #[arg(long, default_value_t = 1_000_000)]
    members: usize,
    #[arg(long, default_value_t = 2_000)]
    queries: usize,
}

/// Runs `total` calls of `call(n)` over `connections` workers; returns sorted latencies.
async fn load<F, Fut>(total: usize, connections: usize, call: F) -> (Vec<Duration>, Duration, usize)
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = anyhow::Result<Value>> + Send,
{
    let call = Arc::new(call);
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let workers: Vec<_> = (0..connections)
        .map(|_| {
            let (call, next) = (call.clone(), next.clone());
            tokio::spawn(async move {
                let (mut latencies, mut failures) = (Vec::new(), 0);
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= total {
                        return (latencies, failures);
                    }
                    let at = Instant::now();
                    if call(n).await.is_err() {
                        failures += 1;
                    }
                    latencies.push(at.elapsed());
                }
            })
        })
        .collect();
    let (mut latencies, mut failures) = (Vec::new(), 0);
    for worker in workers {
        let (l, f) = worker.await.expect("worker");
        latencies.extend(l);
        failures += f;
    }
    latencies.sort();
    (latencies, started.elapsed(), failures)
}

fn report(
    what: &str,
    connections: usize,
    (latencies, elapsed, failures): (Vec<Duration>, Duration, usize),
) {
    let at = |p: f64| support::percentile_ms(&latencies, p);
    println!(
        "{what}: {} requests, {connections} connections, {:.0} req/s, p50 {:.2} ms, p99 {:.2} ms, failures {failures}",
        latencies.len(),
        latencies.len() as f64 / elapsed.as_secs_f64(),
        at(0.5),
        at(0.99)
    );
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let tokens = support::tokens();
    let client = reqwest::Client::new();
    let base = 3_000_000_000 + (chrono::Utc::now().timestamp() % 100_000) * 100_000;

    let sign_in_tokens: Arc<Vec<String>> = Arc::new(
        (0..args.sign_ins as i64)
            .map(|i| tokens.mint(base + i, Role::User, 3600, None))
            .collect(),
    );
    let (c, url, t) = (client.clone(), args.url.clone(), sign_in_tokens.clone());
    let result = load(args.sign_ins, args.connections, move |n| {
        let (c, url, t) = (c.clone(), url.clone(), t.clone());
        async move {
            post(
                &c,
                &url,
                &t[n],
                "mutation { signIn { streak pointsAwarded } }",
                json!({}),
            )
            .await
        }
    })
    .await;
    report("signIn", args.connections, result);

    // The current season, as the server sees it.
    let viewer = tokens.mint(base, Role::User, 3600, None);
    let season = post(
        &client,
        &args.url,
        &viewer,
        "{ leaderboard(first: 1) { season { id } } }",
        json!({}),
    )
    .await?;
    let season = season["leaderboard"]["season"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let board = format!("{}{{points}}:board:{season}", args.prefix);
    let redis = redis::Client::open(args.redis.as_str())?;
    let mut conn = redis.get_multiplexed_async_connection().await?;
    let have: usize = redis::cmd("ZCARD")
        .arg(&board)
        .query_async(&mut conn)
        .await?;
    let filling = Instant::now();
    let mut rng = rand::rng();
    for chunk_start in (have..args.members).step_by(10_000) {
        let mut pipe = redis::pipe();
        for member in chunk_start..(chunk_start + 10_000).min(args.members) {
            let points: u64 = rng.random_range(1..5_000);
            let tie: u64 = rng.random_range(0..2_678_400);
            let score = points as f64 * 4_194_304.0 + (4_194_303 - tie) as f64;
            pipe.cmd("ZADD")
                .arg(&board)
                .arg(score)
                .arg(4_000_000_000_i64 + member as i64)
                .ignore();
        }
        let () = pipe.query_async(&mut conn).await?;
    }
    let members: usize = redis::cmd("ZCARD")
        .arg(&board)
        .query_async(&mut conn)
        .await?;
    println!(
        "board {board}: {members} members (filled in {:.1}s)",
        filling.elapsed().as_secs_f64()
    );

    let query = "query($o: Int!) { leaderboard(first: 20, offset: $o) { total me { rank points } entries { rank points user { id } } } }";
    for connections in [1, 16] {
        let (c, url, viewer) = (client.clone(), args.url.clone(), viewer.clone());
        let result = load(args.queries, connections, move |_| {
            let (c, url, viewer) = (c.clone(), url.clone(), viewer.clone());
            let offset = rand::rng().random_range(0..members.saturating_sub(20).max(1));
            async move { post(&c, &url, &viewer, query, json!({ "o": offset })).await }
        })
        .await;
        report(
            &format!("leaderboard ({members} members, random offset, with me)"),
            connections,
            result,
        );
    }
    Ok(())
}
