//! Scale-out figures on a real Redis Cluster (started by `bench/cluster`), against one
//! `engage serve` in cluster mode with the cluster defaults (16 like shards, 16 sale shards,
//! 16 points buckets):
//!
//! 1. **Spread**: a mixed workload from fresh users (remarks, likes, sign-ins, awards,
//!    flash-sale orders, follows, items with a position, delayed jobs), then, per master,
//!    its share of engage's keys (SCAN of the prefix) and of the commands it served
//!    (`INFO commandstats`, before and after). Fails when a master holds less than 15 % of
//!    either.
//! 2. **A season board of 10 million members** spread over the buckets: latency of the
//!    top 20, of a viewer's own entry (`me`: a rank summed over every part) and of a deep
//!    page, through GraphQL, with requests in flight for a few seconds each.
//!
//! Prints a summary; exits non-zero when a requirement does not hold.

use std::{
    collections::BTreeMap,
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::atomic::AtomicU64,
    time::{Duration, Instant},
};

use clap::Parser;
use engage::infra::{
    auth::{Role, Tokens},
    clock::Month,
    redis::{connect, counting::Tally, Keys, RedisMode, RedisTarget},
};
use rand::Rng;
use serde_json::{json, Value};

#[path = "support/mod.rs"]
mod support;

#[derive(Parser)]
struct Args {
    /// The `engage` binary under test.
    #[arg(long, default_value = "target/release/engage")]
    engage: PathBuf,
    /// The first port of the cluster (`deploy/redis-cluster/start --port`).
    #[arg(long, default_value_t = 7201)]
    port: u16,
    /// Nodes of the cluster, from `port` on.
    #[arg(long, default_value_t = 6)]
    nodes: u16,
    /// Members of the season board.
    #[arg(long, default_value_t = 10_000_000)]
    members: i64,
    /// Seconds each board read is measured for.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 16)]
    in_flight: usize,
    /// Users of the mixed workload.
    #[arg(long, default_value_t = 2_000)]
    users: i64,
}

/// Commands of the cluster's own upkeep and of this tool's readings, not engage's.
const NOT_ENGAGE: [&str; 12] = [
    "info", "cluster", "ping", "replconf", "scan", "command", "client", "hello", "readonly",
    "config", "select", "psync",
];
const BUCKETS: u32 = 16;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let work = tempfile::tempdir()?;
    let seeds: Vec<String> = (0..args.nodes)
        .map(|i| format!("redis://127.0.0.1:{}", args.port + i))
        .collect();
    let prefix = format!("cscale-{}:", uuid::Uuid::new_v4().simple());
    let secret = format!("cluster-scale-{}", uuid::Uuid::new_v4().simple());
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let log = std::fs::File::create(work.path().join("engage.log"))?;
    let mut server: Child = Command::new(&args.engage)
        .arg("serve")
        .env("ENGAGE_REDIS_MODE", "cluster")
        .env("REDIS_URL", seeds.join(","))
        .env("ENGAGE_REDIS_PREFIX", &prefix)
        .env(
            "DATABASE_URL",
            format!("sqlite://{}/engage.db", work.path().display()),
        )
        .env("ENGAGE_JWT_SECRET", &secret)
        .env("ENGAGE_BIND", format!("127.0.0.1:{port}"))
        .env("ENGAGE_RATE_LIMIT_PER_IP", "0")
        .env("ENGAGE_RATE_LIMIT_PER_USER", "0")
        .env("ENGAGE_MAX_CONNECTIONS_PER_IP", "0")
        .env("ENGAGE_WS_MAX_PER_USER", "0")
        .env("ENGAGE_POINTS_BUCKETS", BUCKETS.to_string())
        .env("RUST_LOG", "warn,redis=error")
        .stdout(log.try_clone()?)
        .stderr(log)
        .stdin(Stdio::null())
        .spawn()?;
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(args.in_flight)
        .build()?;
    support::wait_for("the server", || async {
        http.get(format!("{base}/readyz"))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
    })
    .await?;
    let url = format!("{base}/graphql");
    let tokens = Tokens::new(&secret);
    let masters = masters(&args).await?;
    let mut failed = Vec::new();

    // 1. Spread.
    let before = commands(&masters).await?;
    let began = Instant::now();
    let requests = mixed_workload(&args, &http, &url, &tokens).await?;
    // The consumers' archives and polls of the streams are part of the load.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = commands(&masters).await?;
    let keys = keys_per_master(&masters, &prefix).await?;
    let served: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    let (all_keys, all_served) = (keys.iter().sum::<u64>(), served.iter().sum::<u64>());
    println!(
        "spread: {requests} requests in {:.1} s; {all_keys} keys, {all_served} commands",
        began.elapsed().as_secs_f64()
    );
    for ((master, keys), served) in masters.iter().zip(&keys).zip(&served) {
        let (key_share, command_share) = (
            100.0 * *keys as f64 / all_keys.max(1) as f64,
            100.0 * *served as f64 / all_served.max(1) as f64,
        );
        println!(
            "  master :{master}: {keys} keys ({key_share:.1} %), {served} commands ({command_share:.1} %)"
        );
        if key_share < 15.0 || command_share < 15.0 {
            failed.push(format!("master :{master} holds less than 15 %"));
        }
    }

    // 2. The board.
    let season = season_now(&http, &url, &tokens).await?;
    let filling = Instant::now();
    seed_board(&args, &seeds, &prefix, season).await?;
    println!(
        "board: {} members in {BUCKETS} parts written in {:.1} s",
        args.members,
        filling.elapsed().as_secs_f64()
    );
    let members = args.members;
    let top = |_: &mut rand::rngs::ThreadRng| {
        (
            None,
            "{ leaderboard(first: 20) { total entries { rank points user { id } } } }",
            json!({}),
        )
    };
    let me = move |rng: &mut rand::rngs::ThreadRng| {
        (
            Some(4_000_000_000 + rng.random_range(0..members)),
            "{ leaderboard(first: 1) { me { rank points } } }",
            json!({}),
        )
    };
    let deep = move |rng: &mut rand::rngs::ThreadRng| {
        (
            None,
            "query($o: Int) { leaderboard(first: 20, offset: $o) { entries { rank points } } }",
            json!({ "o": rng.random_range(1_000..members - 20) }),
        )
    };
    let reads: [(&str, &MakeRequest); 3] = [("top 20", &top), ("me", &me), ("a deep page", &deep)];
    for (name, request) in reads {
        let measured = measure(&args, &http, &url, &tokens, request).await?;
        println!("board, {name}: {measured}");
        if measured.errors > 0 {
            failed.push(format!("board: {name} answered errors"));
        }
    }

    let _ = server.kill();
    let _ = server.wait();
    unlink_prefix(&masters, &prefix).await?;
    if failed.is_empty() {
        println!("all requirements hold");
        Ok(())
    } else {
        for failure in &failed {
            println!("FAILED: {failure}");
        }
        std::process::exit(1)
    }
}

/// What a board read sends: the viewer (if any), the query and its variables.
type Request = (Option<i64>, &'static str, Value);
/// Makes the next request of a kind.
type MakeRequest = dyn Fn(&mut rand::rngs::ThreadRng) -> Request + Sync;

/// The masters' ports, from `CLUSTER NODES` of the first node.
async fn masters(args: &Args) -> anyhow::Result<Vec<u16>> {
    let mut conn = node(args.port).await?;
    let listing: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query_async(&mut conn)
        .await?;
    // A master with slots (a replica can read as a master for a moment after a start).
    let mut masters: Vec<u16> = listing
        .lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .filter(|fields| {
            fields.len() > 8 && fields[2].contains("master") && !fields[2].contains("fail")
        })
        .filter_map(|fields| fields[1].split(['@', ':']).nth(1)?.parse().ok())
        .collect();
    masters.sort();
    Ok(masters)
}

async fn node(port: u16) -> anyhow::Result<redis::aio::MultiplexedConnection> {
    Ok(redis::Client::open(format!("redis://127.0.0.1:{port}"))?
        .get_multiplexed_async_connection_with_config(&support::patient_redis())
        .await?)
}

/// The commands each master has served, apart from [`NOT_ENGAGE`].
async fn commands(masters: &[u16]) -> anyhow::Result<Vec<u64>> {
    let mut served = Vec::new();
    for &port in masters {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut node(port).await?)
            .await?;
        let mut calls = 0;
        for line in info.lines() {
            let Some((name, stats)) = line
                .strip_prefix("cmdstat_")
                .and_then(|l| l.split_once(':'))
            else {
                continue;
            };
            let command = name.split('|').next().unwrap_or(name);
            if NOT_ENGAGE.contains(&command) {
                continue;
            }
            calls += stats
                .split(',')
                .find_map(|field| field.strip_prefix("calls="))
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0);
        }
        served.push(calls);
    }
    Ok(served)
}

/// The keys of `prefix` on each master.
async fn keys_per_master(masters: &[u16], prefix: &str) -> anyhow::Result<Vec<u64>> {
    let mut counts = Vec::new();
    for &port in masters {
        counts.push(
            support::keys_of(&mut node(port).await?, prefix)
                .await?
                .len() as u64,
        );
    }
    Ok(counts)
}

async fn unlink_prefix(masters: &[u16], prefix: &str) -> anyhow::Result<()> {
    for &port in masters {
        support::unlink_prefix(&mut node(port).await?, prefix).await?;
    }
    Ok(())
}

/// Every feature, from `args.users` fresh users, a few at a time; the requests sent.
async fn mixed_workload(
    args: &Args,
    http: &reqwest::Client,
    url: &str,
    tokens: &Tokens,
) -> anyhow::Result<u64> {
    let admin = tokens.mint(1, Role::Admin, 7200, None);
    let service = tokens.mint(2, Role::Service, 7200, None);
    let post = |token: String, query: &'static str, variables: Value| async move {
        support::data(http, url, &token, query, variables).await
    };
    let id =
        |value: &Value, field: &str| value[field]["id"].as_str().unwrap_or_default().to_string();
    let mut items = Vec::new();
    for i in 0..20 {
        let input = json!({ "i": { "name": format!("scale {i}"), "lat": 31.2 + f64::from(i) * 0.01, "lng": 121.4 } });
        let item = post(
            admin.clone(),
            "mutation($i: CreateItemInput!) { createItem(input: $i) { id } }",
            input,
        )
        .await?;
        items.push(id(&item, "createItem"));
    }
    let now = chrono::Utc::now();
    let mut vouchers = Vec::new();
    for item in items.iter().take(16) {
        let input = json!({ "i": {
            "itemId": item, "title": "scale", "stock": 1_000_000,
            "beginsAt": (now - chrono::Duration::minutes(1)).to_rfc3339(),
            "endsAt": (now + chrono::Duration::hours(1)).to_rfc3339(),
            "payWithinSeconds": 3600,
        }});
        let voucher = post(
            admin.clone(),
            "mutation($i: CreateVoucherInput!) { createVoucher(input: $i) { id } }",
            input,
        )
        .await?;
        vouchers.push(id(&voucher, "createVoucher"));
    }
    let sent = AtomicU64::new(0);
    let users: Vec<i64> = (0..args.users).map(|n| 10_000 + n).collect();
    let remarks = std::sync::Mutex::new(Vec::<String>::new());
    futures::future::try_join_all(users.chunks(users.len().div_ceil(args.in_flight)).map(
        |chunk| {
            let (items, vouchers, remarks, sent) = (&items, &vouchers, &remarks, &sent);
            let (admin, service, post) = (admin.clone(), service.clone(), &post);
            async move {
                for &user in chunk {
                    let token = tokens.mint(user, Role::User, 7200, None);
                    let n = user as usize;
                    let remark = post(
                        token.clone(),
                        "mutation($i: CreateRemarkInput!) { createRemark(input: $i) { id } }",
                        json!({ "i": { "itemId": items[n % items.len()], "score": 4, "content": "scale" } }),
                    )
                    .await?;
                    let liked: Vec<String> = {
                        let mut remarks = remarks.lock().expect("poisoned");
                        remarks.push(id(&remark, "createRemark"));
                        remarks.iter().rev().take(5).cloned().collect()
                    };
                    for remark in liked {
                        post(
                            token.clone(),
                            "mutation($r: ID!) { likeRemark(remarkId: $r) { changed } }",
                            json!({ "r": remark }),
                        )
                        .await?;
                    }
                    post(token.clone(), "mutation { signIn { alreadySigned } }", json!({})).await?;
                    post(
                        service.clone(),
                        "mutation($u: ID!, $k: String!) { awardPoints(userId: $u, type: NOTE, points: 3, idempotencyKey: $k) { awarded } }",
                        json!({ "u": user.to_string(), "k": format!("scale-{user}") }),
                    )
                    .await?;
                    post(
                        token.clone(),
                        "mutation($v: ID!) { seckillVoucher(voucherId: $v) { id } }",
                        json!({ "v": vouchers[n % vouchers.len()] }),
                    )
                    .await?;
                    post(
                        token.clone(),
                        "mutation($u: ID!) { follow(userId: $u) }",
                        // Someone already seen: the previous user of this chunk.
                        json!({ "u": if user == chunk[0] { 1 } else { user - 1 }.to_string() }),
                    )
                    .await?;
                    post(
                        admin.clone(),
                        "mutation($i: ScheduleJobInput!) { scheduleJob(input: $i) { id } }",
                        json!({ "i": { "id": format!("job-{user}"), "topic": format!("scale-{}", n % 8), "body": "{}", "delaySeconds": 3600 } }),
                    )
                    .await?;
                    post(
                        token.clone(),
                        "{ feed(first: 10) { edges { node { id } } } nearbyItems(lat: 31.2, lng: 121.4, radiusKm: 5) { edges { node { item { id } } } } }",
                        json!({}),
                    )
                    .await?;
                    sent.fetch_add(12, std::sync::atomic::Ordering::Relaxed);
                }
                anyhow::Ok(())
            }
        },
    ))
    .await?;
    Ok(sent.into_inner())
}

/// The current season, as the server sees it.
async fn season_now(http: &reqwest::Client, url: &str, tokens: &Tokens) -> anyhow::Result<Month> {
    let token = tokens.mint(3, Role::User, 600, None);
    let data = support::data(
        http,
        url,
        &token,
        "{ leaderboard(first: 1) { season { id } } }",
        json!({}),
    )
    .await?;
    let id = data["leaderboard"]["season"]["id"]
        .as_str()
        .unwrap_or_default();
    Month::parse_id(&support::local_part(id)?)
        .ok_or_else(|| anyhow::anyhow!("the server answered season {id:?}"))
}

/// Members `4_000_000_000 + n` with random points and times, each in their bucket's part,
/// a pipeline of one ZADD of 1,000 members per part at a time.
async fn seed_board(
    args: &Args,
    seeds: &[String],
    prefix: &str,
    season: Month,
) -> anyhow::Result<()> {
    let target = RedisTarget::new(&seeds.join(","), RedisMode::Cluster, None)?;
    let redis = connect(&target, Tally::default()).await?;
    let keys = Keys::new(prefix)
        .on_cluster(true)
        .with_points_buckets(BUCKETS);
    let per_round = 1_000 * i64::from(BUCKETS);
    let rounds: Vec<i64> = (0..args.members).step_by(per_round as usize).collect();
    let redis = &redis;
    let keys = &keys;
    futures::future::try_join_all(rounds.chunks(rounds.len().div_ceil(4)).map(
        |starts| async move {
            for &start in starts {
                let mut parts: BTreeMap<String, redis::Cmd> = BTreeMap::new();
                {
                    let mut rng = rand::rng();
                    for n in start..(start + per_round).min(args.members) {
                        let user = 4_000_000_000 + n;
                        let points: i64 = rng.random_range(1..5_000);
                        let seconds: i64 = rng.random_range(0..2_678_400);
                        let score = engage::features::leaderboard::score_of(points, seconds);
                        parts
                            .entry(keys.season_board_of(season, user))
                            .or_insert_with_key(|part| {
                                let mut add = redis::cmd("ZADD");
                                add.arg(part);
                                add
                            })
                            .arg(score)
                            .arg(user);
                    }
                }
                let mut pipe = redis::pipe();
                for add in parts.into_values() {
                    pipe.add_command(add).ignore();
                }
                let mut conn = redis.get().await?;
                let () = pipe.query_async(&mut *conn).await?;
            }
            anyhow::Ok(())
        },
    ))
    .await?;
    Ok(())
}

struct Measured {
    requests: usize,
    errors: usize,
    per_second: f64,
    p50: f64,
    p99: f64,
    max: f64,
}

impl std::fmt::Display for Measured {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} requests, {:.0}/s, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms, {} errors",
            self.requests, self.per_second, self.p50, self.p99, self.max, self.errors
        )
    }
}

/// Sends `request`s with `args.in_flight` in flight for `args.seconds`.
async fn measure(
    args: &Args,
    http: &reqwest::Client,
    url: &str,
    tokens: &Tokens,
    request: &MakeRequest,
) -> anyhow::Result<Measured> {
    let anonymous = tokens.mint(5, Role::User, 600, None);
    let began = Instant::now();
    let until = began + Duration::from_secs(args.seconds);
    let results = futures::future::join_all((0..args.in_flight).map(|_| {
        let anonymous = anonymous.clone();
        async move {
            let mut latencies = Vec::new();
            let mut errors = 0;
            while Instant::now() < until {
                let (viewer, query, variables) = request(&mut rand::rng());
                let token = viewer.map_or_else(
                    || anonymous.clone(),
                    |user| tokens.mint(user, Role::User, 600, None),
                );
                let sent = Instant::now();
                let answer = support::post(http, url, &token, query, variables).await;
                latencies.push(sent.elapsed());
                if !answer.is_ok_and(|body| body.get("errors").is_none()) {
                    errors += 1;
                }
            }
            (latencies, errors)
        }
    }))
    .await;
    let elapsed = began.elapsed().as_secs_f64();
    let mut latencies: Vec<Duration> = Vec::new();
    let mut errors = 0;
    for (mut some, failed) in results {
        latencies.append(&mut some);
        errors += failed;
    }
    latencies.sort();
    Ok(Measured {
        requests: latencies.len(),
        errors,
        per_second: latencies.len() as f64 / elapsed,
        p50: support::percentile_ms(&latencies, 0.50),
        p99: support::percentile_ms(&latencies, 0.99),
        max: latencies.last().map_or(0.0, |d| d.as_secs_f64() * 1e3),
    })
}
