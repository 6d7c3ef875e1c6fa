//! Flash-sale load test: N attempts at once from N distinct users on one voucher, against a
//! running server; reports throughput, latency and how many got an order.
//!
//! ```sh
//! ENGAGE_RATE_LIMIT_PER_IP=0 ENGAGE_RATE_LIMIT_PER_USER=0 cargo run --release &
//! cargo run --release --example bench_seckill -- --attempts 10000 --stock 1000 --in-flight 64
//! cargo run --release -- verify
//! ```

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

use clap::Parser;
use engage::infra::auth::Role;
use futures::{stream, StreamExt};
use serde_json::json;

#[path = "support/mod.rs"]
mod support;
use support::post;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value = "http://127.0.0.1:8000/graphql")]
    url: String,
    #[arg(long, default_value_t = 10_000)]
    attempts: usize,
    #[arg(long, default_value_t = 1_000)]
    stock: i64,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 64)]
    in_flight: usize,
    /// The server's database: how long after the burst every order is in SQL.
    #[arg(long)]
    database_url: Option<String>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let tokens = support::tokens();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.in_flight)
        .build()?;
    let admin = tokens.mint(1, Role::Admin, 3600, None);
    let item = post(
        &client,
        &args.url,
        &admin,
        "mutation { createItem(input: { name: \"bench\" }) { id } }",
        json!({}),
    )
    .await?;
    let now = chrono::Utc::now();
    let input = json!({
        "itemId": item["data"]["createItem"]["id"], "title": "bench", "stock": args.stock,
        "beginsAt": (now - chrono::Duration::minutes(1)).to_rfc3339(),
        "endsAt": (now + chrono::Duration::hours(1)).to_rfc3339(), "payWithinSeconds": 900,
    });
    let voucher = post(
        &client,
        &args.url,
        &admin,
        "mutation($i: CreateVoucherInput!) { createVoucher(input: $i) { id } }",
        json!({ "i": input }),
    )
    .await?;
    let voucher = voucher["data"]["createVoucher"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let base = 5_000_000_000 + (now.timestamp() % 100_000) * 100_000;
    let users: Arc<Vec<String>> = Arc::new(
        (0..args.attempts as i64)
            .map(|i| tokens.mint(base + i, Role::User, 3600, None))
            .collect(),
    );

    let started = Instant::now();
    let results: Vec<(Duration, String)> = stream::iter(0..args.attempts)
        .map(|n| {
            let (client, url, users, voucher) = (
                client.clone(),
                args.url.clone(),
                users.clone(),
                voucher.clone(),
            );
            async move {
                let at = Instant::now();
                let body = post(
                    &client,
                    &url,
                    &users[n],
                    "mutation($v: ID!) { seckillVoucher(voucherId: $v) { id status } }",
                    json!({ "v": voucher }),
                )
                .await;
                let outcome = match body {
                    Ok(body) => body["errors"][0]["extensions"]["code"]
                        .as_str()
                        .unwrap_or("ORDERED")
                        .to_string(),
                    Err(_) => "TRANSPORT".to_string(),
                };
                (at.elapsed(), outcome)
            }
        })
        .buffer_unordered(args.in_flight)
        .collect()
        .await;
    let elapsed = started.elapsed();
    let mut latencies: Vec<Duration> = results.iter().map(|(l, _)| *l).collect();
    latencies.sort();
    let mut outcomes: HashMap<&str, usize> = HashMap::new();
    for (_, outcome) in &results {
        *outcomes.entry(outcome.as_str()).or_default() += 1;
    }
    let at = |p: f64| support::percentile_ms(&latencies, p);
    let ordered = outcomes.get("ORDERED").copied().unwrap_or(0);
    let in_sql_after = match &args.database_url {
        Some(url) => Some(orders_in_sql(url, &voucher, ordered).await?),
        None => None,
    };
    println!(
        "RESULT {}",
        json!({
            "scenario": "seckillVoucher",
            "attempts": results.len(),
            "in_flight": args.in_flight,
            "stock": args.stock,
            "seconds": elapsed.as_secs_f64(),
            "rps": (results.len() as f64 / elapsed.as_secs_f64()).round(),
            "p50_ms": at(0.5), "p99_ms": at(0.99), "max_ms": at(1.0),
            "outcomes": outcomes,
            "all_orders_in_sql_after_ms": in_sql_after,
        })
    );
    Ok(())
}

/// Milliseconds from now until SQL holds `expected` orders of the voucher.
async fn orders_in_sql(url: &str, voucher: &str, expected: usize) -> anyhow::Result<u128> {
    sqlx::any::install_default_drivers();
    let pool = sqlx::AnyPool::connect(url).await?;
    let voucher: i64 = support::local_id(voucher)?;
    let waiting = Instant::now();
    loop {
        let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM orders WHERE voucher_id = $1")
            .bind(voucher)
            .fetch_one(&pool)
            .await?;
        if count as usize >= expected {
            return Ok(waiting.elapsed().as_millis());
        }
        anyhow::ensure!(
            waiting.elapsed() < Duration::from_secs(60),
            "orders missing in SQL"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
