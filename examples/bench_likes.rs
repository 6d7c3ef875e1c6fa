//! Load test for `likeRemark`: N requests over C concurrent connections against a running
//! server, reporting throughput and latency percentiles.
//!
//! ```sh
//! ENGAGE_RATE_LIMIT_PER_IP=0 ENGAGE_RATE_LIMIT_PER_USER=0 cargo run --release &
//! cargo run --release --example bench_likes -- --requests 50000 --connections 64
//! ```
//! Tokens are minted with `ENGAGE_JWT_SECRET` (or the development secret), as the server's.

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use clap::Parser;
use engage::auth::Role;
use serde_json::{json, Value};

#[path = "support/mod.rs"]
mod support;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value = "http://127.0.0.1:8000/graphql")]
    url: String,
    #[arg(long, default_value_t = 50_000)]
    requests: usize,
    #[arg(long, default_value_t = 64)]
    connections: usize,
    /// Remarks the likes spread over.
    #[arg(long, default_value_t = 100)]
    remarks: usize,
    /// Distinct voters.
    #[arg(long, default_value_t = 20_000)]
    voters: i64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let tokens = support::tokens();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.connections)
        .build()?;
    let url = args.url.clone();
    let call = move |token: String, query: &'static str, variables: Value| {
        let client = client.clone();
        let url = url.clone();
        async move { support::data(&client, &url, &token, query, variables).await }
    };

    let admin = tokens.mint(1, Role::Admin, 3600, None);
    let item = call(
        admin,
        "mutation { createItem(input: { name: \"bench\" }) { id } }",
        json!({}),
    )
    .await?;
    let item = item["createItem"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let mut remarks = Vec::new();
    let run = chrono::Utc::now().timestamp() % 1_000_000;
    for author in 0..args.remarks as i64 {
        let author_id = 1_000_000_000 + run * 1000 + author;
        let data = call(
            tokens.mint(author_id, Role::User, 3600, None),
            "mutation($i: CreateRemarkInput!) { createRemark(input: $i) { id } }",
            json!({ "i": { "itemId": item, "score": 5, "content": "bench" } }),
        )
        .await?;
        remarks.push(
            data["createRemark"]["id"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        );
    }
    let voter_tokens: Arc<Vec<String>> = Arc::new(
        (1..=args.voters)
            .map(|v| tokens.mint(2_000_000_000 + v, Role::User, 3600, None))
            .collect(),
    );
    let remarks = Arc::new(remarks);

    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let workers: Vec<_> = (0..args.connections)
        .map(|_| {
            let (next, voter_tokens, remarks) =
                (next.clone(), voter_tokens.clone(), remarks.clone());
            let call = call.clone();
            let total = args.requests;
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut failures = 0usize;
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= total {
                        break;
                    }
                    let token = voter_tokens[n * 7919 % voter_tokens.len()].clone();
                    let remark = remarks[n % remarks.len()].clone();
                    let at = Instant::now();
                    let result = call(
                        token,
                        "mutation($id: ID!) { likeRemark(remarkId: $id) { likeCount changed } }",
                        json!({ "id": remark }),
                    )
                    .await;
                    latencies.push(at.elapsed());
                    if result.is_err() {
                        failures += 1;
                    }
                }
                (latencies, failures)
            })
        })
        .collect();
    let mut latencies: Vec<Duration> = Vec::new();
    let mut failures = 0;
    for worker in workers {
        let (l, f) = worker.await?;
        latencies.extend(l);
        failures += f;
    }
    let elapsed = started.elapsed();
    latencies.sort();
    println!(
        "likeRemark: {} requests, {} connections, {:.2}s, {:.0} req/s, p50 {:.2} ms, p99 {:.2} ms, failures {}",
        latencies.len(),
        args.connections,
        elapsed.as_secs_f64(),
        latencies.len() as f64 / elapsed.as_secs_f64(),
        support::percentile_ms(&latencies, 0.50),
        support::percentile_ms(&latencies, 0.99),
        failures
    );
    Ok(())
}
