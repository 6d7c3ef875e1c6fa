//! What one Redis node does a second of each hot-path script, driven straight by
//! `redis-benchmark` (64 connections, no pipelining) with the server's keys and arguments:
//! a like (a new voter each time), a sign-in (a new user each time, with its award, board
//! update and event) and a flash-sale order (a new buyer each time). On a cluster node the
//! keys are those of a slot the node owns, so the figure is one master's.
//!
//! ```sh
//! cargo run --release --example bench_scripts -- --port 6379
//! deploy/redis-cluster/start && cargo run --release --example bench_scripts -- --port 7001 --cluster
//! ```

use std::process::Command;

use chrono::Datelike;
use clap::Parser;
use engage::{
    features::points::{PointsRules, PointsType, DAILY_TTL_SECONDS},
    infra::{
        clock::{day_number, Month},
        redis::{
            scripts::{self, REMARKS_LIKE, SIGNIN_SIGN, VOUCHERS_SECKILL},
            Keys,
        },
    },
};

#[path = "support/mod.rs"]
mod support;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value_t = 6379)]
    port: u16,
    /// The node is a Redis Cluster master: keys go to a slot it owns, and the cluster
    /// defaults (16 shards and buckets) apply.
    #[arg(long)]
    cluster: bool,
    /// Calls of each script.
    #[arg(long, default_value_t = 200_000)]
    requests: u64,
    #[arg(long, default_value_t = 64)]
    clients: u32,
}

/// A placeholder redis-benchmark replaces with a fresh random number in each call.
const RANDOM: &str = "__rand_int__";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut conn = redis::Client::open(format!("redis://127.0.0.1:{}", args.port))?
        .get_multiplexed_async_connection_with_config(&support::patient_redis())
        .await?;
    // On one node every key is the node's.
    let owned = if args.cluster {
        Some(owned_slots(&mut conn).await?)
    } else {
        None
    };
    let prefix = format!("bscripts-{}:", uuid::Uuid::new_v4().simple());
    let (shards, buckets) = if args.cluster { (16, 16) } else { (4, 1) };
    let keys = Keys::new(prefix.clone())
        .on_cluster(args.cluster)
        .with_points_buckets(buckets);
    for script in [&*REMARKS_LIKE, &*SIGNIN_SIGN, &*VOUCHERS_SECKILL] {
        scripts::load(script, &mut conn).await?;
    }
    let now = chrono::Utc::now();
    let publish = keys.publish_command().to_string();

    // A like: a remark of a slot the node owns, with its info hash in place.
    let mut remark = 1;
    while !owns(&mut conn, &owned, &keys.remark_info(remark, shards)).await? {
        remark += 1;
    }
    let () = redis::cmd("HSET")
        .arg(keys.remark_info(remark, shards))
        .arg("likes")
        .arg(0)
        .arg("author")
        .arg(1)
        .query_async(&mut conn)
        .await?;
    let like = vec![
        "EVALSHA".to_string(),
        REMARKS_LIKE.hash().into(),
        "4".into(),
        keys.remark_info(remark, shards),
        keys.like_relation(remark, 0, shards)
            .replace(":voter:0", &format!(":voter:{RANDOM}")),
        keys.remark_likers(remark, shards),
        keys.vote_stream_of(remark, shards),
        RANDOM.into(),
        remark.to_string(),
        now.timestamp_millis().to_string(),
        (10 * 24 * 3600).to_string(),
        "young".into(),
        keys.like_count_channel(remark, shards),
        engage::features::remarks::likes::LIKERS_KEPT.to_string(),
        publish.clone(),
    ];

    // A sign-in: the keys of a user of a bucket the node owns, with the user's id made
    // random (the hash tag, the bucket's, stays).
    let today = now.date_naive();
    let month = Month::of(today);
    let mut user = 1_000_000;
    while !owns(&mut conn, &owned, &keys.points_today(user, today)).await? {
        user += 1;
    }
    let any_user = |key: String| key.replace(&format!(":{user}"), &format!(":{RANDOM}"));
    let rules = PointsRules::load(None)?;
    let season_seconds = (now.timestamp() - i64::from(today.day0()) * 86_400).rem_euclid(2_678_400);
    let sign_in = vec![
        "EVALSHA".to_string(),
        SIGNIN_SIGN.hash().into(),
        "7".into(),
        any_user(keys.sign_bitmap(user, month)),
        any_user(keys.sign_bitmap(user, month.previous())),
        any_user(keys.sign_streak(user)),
        any_user(keys.points_today(user, today)),
        keys.season_board_of(month, user),
        keys.points_stream_of(user),
        keys.points_hold_of(user),
        RANDOM.into(),
        today.day().to_string(),
        month.previous().days().to_string(),
        month.previous().id().to_string(),
        month.previous().previous().id().to_string(),
        now.timestamp_millis().to_string(),
        season_seconds.to_string(),
        month.id().to_string(),
        keys.board_channel_of(month, user),
        DAILY_TTL_SECONDS.to_string(),
        (400 * 24 * 3600).to_string(),
        rules.rule(PointsType::SignIn).points.to_string(),
        rules.bonuses_arg(),
        format!("signin:{RANDOM}:{today}"),
        day_number(today).to_string(),
        publish.clone(),
    ];

    // An order: a voucher of a slot the node owns, open, with stock for every call.
    let mut voucher = 1;
    while !owns(&mut conn, &owned, &keys.voucher(voucher, shards)).await? {
        voucher += 1;
    }
    let () = redis::cmd("HSET")
        .arg(keys.voucher(voucher, shards))
        .arg("stock")
        .arg(1_000_000_000)
        .arg("begins")
        .arg(0)
        .arg("ends")
        .arg(i64::MAX / 2)
        .arg("pay_within")
        .arg(3600)
        .query_async(&mut conn)
        .await?;
    let order = vec![
        "EVALSHA".to_string(),
        VOUCHERS_SECKILL.hash().into(),
        "4".into(),
        keys.voucher(voucher, shards),
        keys.voucher_buyers(voucher, shards),
        keys.order(voucher, 0, shards)
            .replace(":order:0", &format!(":order:{RANDOM}")),
        keys.order_stream_of(voucher, shards),
        voucher.to_string(),
        RANDOM.into(),
        RANDOM.into(),
        now.timestamp_millis().to_string(),
        keys.voucher_stock_channel(voucher, shards),
        publish,
    ];

    let node = if args.cluster {
        "cluster master"
    } else {
        "one node"
    };
    println!("| script | Redis | calls/s | events |\n|---|---|---|---|");
    if std::env::var_os("BENCH_SCRIPTS_SHOW").is_some() {
        println!("{}", like.join(" "));
    }
    // Where each call names the stream its events go to.
    for (name, call, stream_key) in [
        ("like", &like, 6),
        ("sign-in", &sign_in, 8),
        ("order", &order, 6),
    ] {
        let output = Command::new("redis-benchmark")
            .args([
                "-p",
                &args.port.to_string(),
                "-c",
                &args.clients.to_string(),
            ])
            .args(["-n", &args.requests.to_string(), "-r", "1000000000", "-q"])
            .args(call)
            .output()?;
        let text = String::from_utf8_lossy(&output.stdout);
        let rate = text
            .rsplit(':')
            .next()
            .and_then(|tail| tail.split_whitespace().next())
            .unwrap_or("?");
        anyhow::ensure!(
            output.status.success() && !text.contains("ERR"),
            "{name}: {text}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        // Each call must have done its work: one event per call in the script's stream.
        let stream = &call[stream_key];
        let events: u64 = redis::cmd("XLEN")
            .arg(stream)
            .query_async(&mut conn)
            .await?;
        println!(
            "| {name} | {node} :{} | {rate} | {events} events of {} calls",
            args.port, args.requests
        );
    }
    support::unlink_prefix(&mut conn, &prefix).await
}

/// Whether the node owns the slot of `key` (`None`: a node outside a cluster owns all).
async fn owns(
    conn: &mut redis::aio::MultiplexedConnection,
    owned: &Option<Vec<(u16, u16)>>,
    key: &str,
) -> anyhow::Result<bool> {
    let Some(owned) = owned else { return Ok(true) };
    let slot: u16 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query_async(conn)
        .await?;
    Ok(owned.iter().any(|(from, to)| (*from..=*to).contains(&slot)))
}

/// The slot ranges of the node (the `myself` line of CLUSTER NODES).
async fn owned_slots(
    conn: &mut redis::aio::MultiplexedConnection,
) -> anyhow::Result<Vec<(u16, u16)>> {
    let listing: String = redis::cmd("CLUSTER").arg("NODES").query_async(conn).await?;
    let myself = listing
        .lines()
        .find(|line| line.contains("myself"))
        .ok_or_else(|| anyhow::anyhow!("no myself line"))?;
    anyhow::ensure!(myself.contains("master"), "the node is not a master");
    Ok(myself
        .split_whitespace()
        .skip(8)
        .filter_map(|range| match range.split_once('-') {
            Some((from, to)) => Some((from.parse().ok()?, to.parse().ok()?)),
            None => range.parse().ok().map(|slot| (slot, slot)),
        })
        .collect())
}
