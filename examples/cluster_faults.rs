//! Failover and resharding on a real Redis Cluster (3 masters, 3 replicas, started by
//! `reliability/cluster`), under a mixed write load of likes, sign-ins and flash-sale orders
//! from fresh users against one `engage serve` in cluster mode:
//!
//! 1. **Failover**: `kill -9` of the master that holds the first order shard. Its replica is
//!    promoted; requests whose slots it held answer `UNAVAILABLE` until then (never a 5xx or
//!    `INTERNAL`), and writes resume. Afterwards every acknowledged write is looked for in
//!    SQL: with `--wait-replicas 1` no acknowledged order may be missing; without it, what
//!    was lost is counted.
//! 2. **Resharding**: `redis-cli --cluster reshard` moves slots between masters under load.
//!    No request may fail, and afterwards every acknowledged write is in SQL exactly once and
//!    every remark's count equals its likes.
//!
//! Prints a summary and exits non-zero when a requirement does not hold.

use std::{
    collections::{BTreeMap, HashSet},
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use clap::Parser;
use engage::infra::{
    auth::{Role, Tokens},
    redis::Keys,
};
use serde_json::{json, Value};
use sqlx::Row;

#[path = "support/live.rs"]
mod live;
#[path = "support/mod.rs"]
mod support;

#[derive(Parser)]
struct Args {
    /// The `engage` binary under test.
    #[arg(long, default_value = "target/release/engage")]
    engage: PathBuf,
    /// The first port of the cluster (`deploy/redis-cluster/start --port`).
    #[arg(long, default_value_t = 7101)]
    port: u16,
    /// Nodes of the cluster, from `port` on.
    #[arg(long, default_value_t = 6)]
    nodes: u16,
    /// `ENGAGE_REDIS_WAIT_REPLICAS` of the server (orders wait for that many replicas).
    #[arg(long, default_value_t = 0)]
    wait_replicas: u32,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 16)]
    in_flight: usize,
    /// Only the resharding (no failover first).
    #[arg(long)]
    reshard_only: bool,
    /// Seconds of load before and after each fault.
    #[arg(long, default_value_t = 8)]
    seconds: u64,
}

const LIKE: &str = "mutation($id: ID!) { likeRemark(remarkId: $id) { changed } }";
const SIGN_IN: &str = "mutation { signIn { alreadySigned } }";
const SECKILL: &str = "mutation($v: ID!) { seckillVoucher(voucherId: $v) { id } }";
const SHARDS: &str = "16";

#[derive(Default)]
struct Ledger {
    likes: Vec<(i64, i64)>,
    /// When each acknowledged like was answered (since the load began), by remark.
    like_times: Vec<(i64, Duration)>,
    sign_ins: Vec<i64>,
    orders: Vec<i64>,
    /// Requests without an answer: their effect is unknown.
    in_doubt: u64,
    /// Error answers by code, and 5xx statuses.
    errors: BTreeMap<String, u64>,
    status_5xx: u64,
    requests: u64,
    /// When the last request failed (since the load began).
    last_failure: Option<Duration>,
}

struct Load {
    ledger: Mutex<Ledger>,
    stop: AtomicBool,
    began: Instant,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let work = tempfile::tempdir()?;
    let seeds: Vec<String> = (0..args.nodes)
        .map(|i| format!("redis://127.0.0.1:{}", args.port + i))
        .collect();
    let prefix = format!("cfaults-{}:", uuid::Uuid::new_v4().simple());
    let secret = format!("cluster-faults-{}", uuid::Uuid::new_v4().simple());
    let database = format!("sqlite://{}/engage.db", work.path().display());
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let log = std::fs::File::create(work.path().join("engage.log"))?;
    let mut server: Child = Command::new(&args.engage)
        .arg("serve")
        .env("ENGAGE_REDIS_MODE", "cluster")
        .env("REDIS_URL", seeds.join(","))
        .env("ENGAGE_REDIS_PREFIX", &prefix)
        .env("DATABASE_URL", &database)
        .env("ENGAGE_JWT_SECRET", &secret)
        .env("ENGAGE_BIND", format!("127.0.0.1:{port}"))
        .env("ENGAGE_RATE_LIMIT_PER_IP", "0")
        .env("ENGAGE_RATE_LIMIT_PER_USER", "0")
        .env("ENGAGE_MAX_CONNECTIONS_PER_IP", "0")
        .env("ENGAGE_WS_MAX_PER_USER", "0")
        .env("ENGAGE_LIKE_SHARDS", SHARDS)
        .env("ENGAGE_SALE_SHARDS", SHARDS)
        .env("ENGAGE_REDIS_WAIT_REPLICAS", args.wait_replicas.to_string())
        .env(
            "RUST_LOG",
            std::env::var("CLUSTER_FAULTS_LOG").unwrap_or_else(|_| "warn,redis=error".into()),
        )
        .stdout(log.try_clone()?)
        .stderr(log)
        .stdin(Stdio::null())
        .spawn()?;
    let url = format!("http://127.0.0.1:{port}/graphql");
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()?;
    support::wait_for("the server", || async {
        http.get(format!("http://127.0.0.1:{port}/readyz"))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
    })
    .await?;
    let tokens = Tokens::new(&secret);
    let sql = sqlx::SqlitePool::connect(&database).await?;
    let keys = Keys::new(prefix.clone()).on_cluster(true);
    let mut failed = Vec::new();

    // 1. Failover.
    if !args.reshard_only {
        failover(
            &args,
            &http,
            &url,
            &secret,
            &tokens,
            &sql,
            &keys,
            &mut failed,
        )
        .await?;
    }

    // 2. Resharding, on fresh remarks and a fresh voucher.
    let (item, remarks, voucher) = fixtures(&http, &url, &tokens).await?;
    let load = start_load(&args, &http, &url, &secret, &remarks, &voucher);
    let watcher = live::LiveWatcher::start(&ws_url(&url), &remarks, load.0.began).await?;
    tokio::time::sleep(Duration::from_secs(args.seconds)).await;
    let (from, to, slots, via) = reshard_plan(&args)?;
    let moving = Instant::now();
    let moved_at = load.0.began.elapsed();
    let status = Command::new("redis-cli")
        .args(["--cluster", "reshard", &format!("127.0.0.1:{via}")])
        .args(["--cluster-from", &from, "--cluster-to", &to])
        .args(["--cluster-slots", &slots.to_string(), "--cluster-yes"])
        .stdout(Stdio::null())
        .status()?;
    println!(
        "resharding: {slots} slots moved in {:.1} s ({status})",
        moving.elapsed().as_secs_f64()
    );
    tokio::time::sleep(Duration::from_secs(args.seconds)).await;
    let ended = load.0.began.elapsed();
    let ledger = stop_load(&load).await;
    let lost = settle_and_count_lost(&sql, &ledger).await?;
    let drifted = counts_drift(&http, &url, &tokens, &sql, &item, &remarks).await?;
    let live = live_after_fault(
        &http, &url, &tokens, &item, &remarks, &watcher, &ledger, moved_at, ended,
    )
    .await?;
    println!("resharding: {live}");
    if !live.held() {
        failed
            .push("resharding: live updates did not resume within 2 s, or a last count was wrong");
    }
    println!(
        "resharding: {} requests; errors {:?}; 5xx {}; in doubt {}; acknowledged likes {}, \
         sign-ins {}, orders {}; lost {}/{}/{}; remarks whose count is not their likes: {drifted}",
        ledger.requests,
        ledger.errors,
        ledger.status_5xx,
        ledger.in_doubt,
        ledger.likes.len(),
        ledger.sign_ins.len(),
        ledger.orders.len(),
        lost.likes,
        lost.sign_ins,
        lost.orders
    );
    if !status.success() {
        failed.push("resharding: redis-cli --cluster reshard failed");
    }
    if ledger.status_5xx > 0 || !ledger.errors.is_empty() || ledger.in_doubt > 0 {
        failed.push("resharding: a request failed");
    }
    if lost.likes + lost.sign_ins + lost.orders > 0 || drifted > 0 {
        failed.push("resharding: an event was lost or a count drifted");
    }

    let _ = server.kill();
    let _ = server.wait();
    if failed.is_empty() {
        println!("cluster faults: every requirement held");
        Ok(())
    } else {
        // The server's log and database stay for a look.
        println!("server log and database kept in {}", work.keep().display());
        anyhow::bail!("{}", failed.join("; "))
    }
}

/// `kill -9` of the master holding the first order shard, under load.
#[allow(clippy::too_many_arguments)]
async fn failover(
    args: &Args,
    http: &reqwest::Client,
    url: &str,
    secret: &str,
    tokens: &Tokens,
    sql: &sqlx::SqlitePool,
    keys: &Keys,
    failed: &mut Vec<&'static str>,
) -> anyhow::Result<()> {
    let (item, remarks, voucher) = fixtures(http, url, tokens).await?;
    let load = start_load(args, http, url, secret, &remarks, &voucher);
    let watcher = live::LiveWatcher::start(&ws_url(url), &remarks, load.0.began).await?;
    tokio::time::sleep(Duration::from_secs(args.seconds)).await;
    let order_stream = keys.order_stream(0);
    let victim = master_of(args, &order_stream)?;
    let killed_at = load.0.began.elapsed();
    kill_9(victim)?;
    println!(
        "failover: kill -9 of the master on port {victim} (holds {order_stream}) after {:.1} s",
        killed_at.as_secs_f64()
    );
    tokio::time::sleep(Duration::from_secs(args.seconds * 2)).await;
    let ended = load.0.began.elapsed();
    let ledger = stop_load(&load).await;
    let live = live_after_fault(
        http, url, tokens, &item, &remarks, &watcher, &ledger, killed_at, ended,
    )
    .await?;
    println!("failover: {live}");
    if !live.held() {
        failed.push("failover: live updates did not resume within 2 s, or a last count was wrong");
    }
    let resumed = ledger
        .last_failure
        .map_or(Duration::ZERO, |last| last.saturating_sub(killed_at));
    let lost = settle_and_count_lost(sql, &ledger).await?;
    println!(
        "failover: {} requests; errors {:?}; 5xx {}; in doubt {}; writes failing for {:.1} s after the kill",
        ledger.requests,
        ledger.errors,
        ledger.status_5xx,
        ledger.in_doubt,
        resumed.as_secs_f64()
    );
    println!(
        "failover: acknowledged likes {} (lost {}), sign-ins {} (lost {}), orders {} (lost {}); \
         ENGAGE_REDIS_WAIT_REPLICAS={}",
        ledger.likes.len(),
        lost.likes,
        ledger.sign_ins.len(),
        lost.sign_ins,
        ledger.orders.len(),
        lost.orders,
        args.wait_replicas
    );
    if ledger.status_5xx > 0 || ledger.errors.keys().any(|code| code != "UNAVAILABLE") {
        failed.push("failover: an answer other than UNAVAILABLE failed");
    }
    if resumed > Duration::from_secs(10) {
        failed.push("failover: writes did not resume within 10 s");
    }
    if args.wait_replicas > 0 && lost.orders > 0 {
        failed.push("failover: an acknowledged order was lost despite WAIT");
    }
    // As an operator (or an orchestrator) would: the killed node comes back and rejoins as
    // a replica, so the next phase's shards all have one again (with WAIT, a master without
    // a replica can acknowledge no order).
    rejoin(args, victim).await?;
    println!("failover: the killed node is back as a synced replica");

    Ok(())
}

/// Twenty remarks to like and a voucher with more stock than attempts.
async fn fixtures(
    http: &reqwest::Client,
    url: &str,
    tokens: &Tokens,
) -> anyhow::Result<(String, Vec<i64>, String)> {
    let admin = tokens.mint(1, Role::Admin, 7200, None);
    let post = |token: String, query: &'static str, variables: Value| async move {
        support::data(http, url, &token, query, variables).await
    };
    let item = post(
        admin.clone(),
        "mutation { createItem(input: { name: \"cluster faults\" }) { id } }",
        json!({}),
    )
    .await?["createItem"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let mut remarks = Vec::new();
    for author in 0..20 {
        let input = json!({ "input": { "itemId": item, "score": 5, "content": "failover" } });
        let id = post(
            tokens.mint(100 + author, Role::User, 7200, None),
            "mutation($input: CreateRemarkInput!) { createRemark(input: $input) { id } }",
            input,
        )
        .await?["createRemark"]["id"]
            .as_str()
            .map(support::local_id)
            .unwrap_or_else(|| Err(anyhow::anyhow!("no remark id")))?;
        remarks.push(id);
    }
    let now = chrono::Utc::now();
    let input = json!({ "i": {
        "itemId": item, "title": "failover", "stock": 1_000_000,
        "beginsAt": (now - chrono::Duration::minutes(1)).to_rfc3339(),
        "endsAt": (now + chrono::Duration::hours(1)).to_rfc3339(),
        "payWithinSeconds": 3600,
    }});
    let voucher = post(
        admin,
        "mutation($i: CreateVoucherInput!) { createVoucher(input: $i) { id } }",
        input,
    )
    .await?["createVoucher"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    Ok((item, remarks, voucher))
}

/// Workers sending likes, sign-ins and seckill attempts of fresh users until stopped.
fn start_load(
    args: &Args,
    http: &reqwest::Client,
    url: &str,
    secret: &str,
    remarks: &[i64],
    voucher: &str,
) -> Arc<(Load, Mutex<Vec<tokio::task::JoinHandle<()>>>)> {
    static NEXT_USER: AtomicU64 = AtomicU64::new(1_000_000);
    let load = Arc::new((
        Load {
            ledger: Mutex::new(Ledger::default()),
            stop: AtomicBool::new(false),
            began: Instant::now(),
        },
        Mutex::new(Vec::new()),
    ));
    for worker in 0..args.in_flight {
        let (load_, http, url) = (load.clone(), http.clone(), url.to_string());
        let (tokens, remarks, voucher) =
            (Tokens::new(secret), remarks.to_vec(), voucher.to_string());
        let task = tokio::spawn(async move {
            let load = &load_.0;
            let mut turn = worker;
            while !load.stop.load(Ordering::Relaxed) {
                turn += 1;
                let user = NEXT_USER.fetch_add(1, Ordering::Relaxed) as i64;
                let token = tokens.mint(user, Role::User, 7200, None);
                let remark = remarks[user as usize % remarks.len()];
                let (query, variables) = match turn % 3 {
                    0 => (LIKE, json!({ "id": support::global_id("Remark", remark) })),
                    1 => (SIGN_IN, json!({})),
                    _ => (SECKILL, json!({ "v": voucher })),
                };
                let answer = http
                    .post(&url)
                    .bearer_auth(&token)
                    .json(&json!({ "query": query, "variables": variables }))
                    .send()
                    .await;
                let body = match answer {
                    Ok(response) => {
                        let server_error = response.status().is_server_error();
                        let body: Value = response.json().await.unwrap_or(Value::Null);
                        {
                            let mut ledger = load.ledger.lock().expect("poisoned");
                            ledger.requests += 1;
                            if server_error {
                                ledger.status_5xx += 1;
                            }
                        }
                        body
                    }
                    Err(_) => {
                        {
                            let mut ledger = load.ledger.lock().expect("poisoned");
                            ledger.requests += 1;
                            ledger.in_doubt += 1;
                            ledger.last_failure = Some(load.began.elapsed());
                        }
                        continue;
                    }
                };
                if let Some(code) = body["errors"][0]["extensions"]["code"].as_str() {
                    {
                        let mut ledger = load.ledger.lock().expect("poisoned");
                        *ledger.errors.entry(code.to_string()).or_default() += 1;
                        ledger.last_failure = Some(load.began.elapsed());
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
                let mut ledger = load.ledger.lock().expect("poisoned");
                let data = &body["data"];
                match turn % 3 {
                    0 if data["likeRemark"]["changed"] == true => {
                        ledger.likes.push((remark, user));
                        ledger.like_times.push((remark, load.began.elapsed()));
                    }
                    1 if data["signIn"]["alreadySigned"] == false => ledger.sign_ins.push(user),
                    2 => match data["seckillVoucher"]["id"]
                        .as_str()
                        .and_then(|id| support::local_id(id).ok())
                    {
                        Some(id) => ledger.orders.push(id),
                        None => *ledger.errors.entry("UNEXPECTED".into()).or_default() += 1,
                    },
                    _ => *ledger.errors.entry("UNEXPECTED".into()).or_default() += 1,
                }
            }
        });
        load.1.lock().expect("poisoned").push(task);
    }
    load
}

async fn stop_load(load: &Arc<(Load, Mutex<Vec<tokio::task::JoinHandle<()>>>)>) -> Ledger {
    load.0.stop.store(true, Ordering::Relaxed);
    let tasks: Vec<_> = load.1.lock().expect("poisoned").drain(..).collect();
    for task in tasks {
        let _ = task.await;
    }
    std::mem::take(&mut *load.0.ledger.lock().expect("poisoned"))
}

#[derive(Default)]
struct Lost {
    likes: usize,
    sign_ins: usize,
    orders: usize,
}

/// Waits for the archives to bring what they can into SQL (until nothing more arrives for
/// five seconds, or everything acknowledged is there), then counts what never arrived.
async fn settle_and_count_lost(sql: &sqlx::SqlitePool, ledger: &Ledger) -> anyhow::Result<Lost> {
    let mut last = (usize::MAX, Instant::now());
    loop {
        let lost = lost(sql, ledger).await?;
        let missing = lost.likes + lost.sign_ins + lost.orders;
        if missing == 0 || last.1.elapsed() > Duration::from_secs(5) {
            return Ok(lost);
        }
        if missing != last.0 {
            last = (missing, Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn lost(sql: &sqlx::SqlitePool, ledger: &Ledger) -> anyhow::Result<Lost> {
    let likes: HashSet<(i64, i64)> =
        sqlx::query("SELECT remark_id, voter_id FROM vote_log WHERE voting = 1")
            .fetch_all(sql)
            .await?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
    let sign_ins: HashSet<i64> = sqlx::query("SELECT user_id FROM sign_ins")
        .fetch_all(sql)
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let orders: HashSet<i64> = sqlx::query("SELECT id FROM orders")
        .fetch_all(sql)
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    Ok(Lost {
        likes: ledger.likes.iter().filter(|l| !likes.contains(l)).count(),
        sign_ins: ledger
            .sign_ins
            .iter()
            .filter(|u| !sign_ins.contains(u))
            .count(),
        orders: ledger.orders.iter().filter(|o| !orders.contains(o)).count(),
    })
}

/// Remarks whose count (as the API answers it) is not the number of their likes in SQL.
/// Each remark's count as the API answers it.
async fn api_counts(
    http: &reqwest::Client,
    url: &str,
    tokens: &Tokens,
    item: &str,
) -> anyhow::Result<std::collections::HashMap<i64, i64>> {
    let token = tokens.mint(1, Role::User, 7200, None);
    let body: Value = http
        .post(url)
        .bearer_auth(&token)
        .json(&json!({
            "query": "query($item: ID!) { remarks(itemId: $item, first: 50) { edges { node { id likeCount } } } }",
            "variables": { "item": item } }))
        .send()
        .await?
        .json()
        .await?;
    Ok(body["data"]["remarks"]["edges"]
        .as_array()
        .map(|edges| {
            edges
                .iter()
                .filter_map(|edge| {
                    let node = &edge["node"];
                    Some((
                        support::local_id(node["id"].as_str()?).ok()?,
                        node["likeCount"].as_i64()?,
                    ))
                })
                .collect()
        })
        .unwrap_or_default())
}

fn ws_url(url: &str) -> String {
    url.replacen("http", "ws", 1)
}

/// How a live dashboard fared through a fault.
struct LiveReport {
    /// The longest a remark's updates stopped for beyond its likes stopping (the time the
    /// hub took to follow the slot to its new master).
    resubscribed_within: Duration,
    longest_silence: Duration,
    longest_write_gap: Duration,
    /// Remarks whose last pushed count is the count the API answers at the end.
    last_counts_right: usize,
    remarks: usize,
}

impl LiveReport {
    fn held(&self) -> bool {
        self.resubscribed_within <= Duration::from_secs(2) && self.last_counts_right == self.remarks
    }
}

impl std::fmt::Display for LiveReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "live updates: longest silence {:.2} s where likes paused {:.2} s at most;              resumed within {:.2} s of the likes; last count right for {} of {} remarks",
            self.longest_silence.as_secs_f64(),
            self.longest_write_gap.as_secs_f64(),
            self.resubscribed_within.as_secs_f64(),
            self.last_counts_right,
            self.remarks
        )
    }
}

/// For each remark, from the fault to the end of the load: the longest silence of its
/// updates against the longest pause of its acknowledged likes; then, 2 s after the load,
/// whether its last pushed count is the API's.
#[allow(clippy::too_many_arguments)]
async fn live_after_fault(
    http: &reqwest::Client,
    url: &str,
    tokens: &Tokens,
    item: &str,
    remarks: &[i64],
    watcher: &live::LiveWatcher,
    ledger: &Ledger,
    fault_at: Duration,
    ended: Duration,
) -> anyhow::Result<LiveReport> {
    tokio::time::sleep(Duration::from_secs(2)).await;
    for (at, what) in watcher.other.lock().expect("poisoned").iter() {
        println!(
            "  the dashboard's socket at {:.2} s: {what}",
            at.as_secs_f64()
        );
    }
    let counts = api_counts(http, url, tokens, item).await?;
    let mut report = LiveReport {
        resubscribed_within: Duration::ZERO,
        longest_silence: Duration::ZERO,
        longest_write_gap: Duration::ZERO,
        last_counts_right: 0,
        remarks: remarks.len(),
    };
    for &remark in remarks {
        let silence = watcher.longest_silence(remark, fault_at, ended);
        let likes = ledger
            .like_times
            .iter()
            .filter(|(r, _)| *r == remark)
            .map(|(_, t)| *t);
        let paused = live::longest_gap(likes, fault_at, ended);
        report.longest_silence = report.longest_silence.max(silence);
        report.longest_write_gap = report.longest_write_gap.max(paused);
        report.resubscribed_within = report
            .resubscribed_within
            .max(silence.saturating_sub(paused));
        if watcher.last(remark).is_some() && watcher.last(remark) == counts.get(&remark).copied() {
            report.last_counts_right += 1;
        }
    }
    Ok(report)
}

async fn counts_drift(
    http: &reqwest::Client,
    url: &str,
    tokens: &Tokens,
    sql: &sqlx::SqlitePool,
    item: &str,
    remarks: &[i64],
) -> anyhow::Result<usize> {
    let counted = api_counts(http, url, tokens, item).await?;
    let mut drifted = 0;
    for remark in remarks {
        let archived: i64 = sqlx::query(
            "SELECT COUNT(DISTINCT voter_id) FROM vote_log WHERE remark_id = ? AND voting = 1",
        )
        .bind(remark)
        .fetch_one(sql)
        .await?
        .get(0);
        let counted = counted.get(remark).copied().unwrap_or(-1);
        if counted != archived {
            println!("remark {remark}: the API counts {counted}, SQL has {archived} likes");
            drifted += 1;
        }
    }
    Ok(drifted)
}

/// The port of the master that holds `key`'s slot.
fn master_of(args: &Args, key: &str) -> anyhow::Result<u16> {
    let slot: u16 = cli(args.port, &["cluster", "keyslot", key])?
        .trim()
        .parse()?;
    for (port, role, slots) in nodes(args)? {
        if role == "master" && slots.iter().any(|(a, b)| (*a..=*b).contains(&slot)) {
            return Ok(port);
        }
    }
    anyhow::bail!("no master holds slot {slot}")
}

/// The reshard to run: from the master with the most slots to the one with the fewest,
/// a third of the former's slots (node ids, count, and a live node's port to run it from).
fn reshard_plan(args: &Args) -> anyhow::Result<(String, String, u32, u16)> {
    let mut masters: Vec<(String, u32, u16)> = Vec::new();
    for (port, role, slots) in nodes(args)? {
        if role == "master" && !slots.is_empty() {
            let id = cli(port, &["cluster", "myid"])?.trim().to_string();
            let count = slots.iter().map(|(a, b)| u32::from(b - a) + 1).sum();
            masters.push((id, count, port));
        }
    }
    masters.sort_by_key(|(_, count, _)| *count);
    let (to, from) = (masters.first(), masters.last());
    match (from, to) {
        (Some(from), Some(to)) if from.0 != to.0 => {
            Ok((from.0.clone(), to.0.clone(), from.1 / 3, from.2))
        }
        _ => anyhow::bail!("fewer than two masters"),
    }
}

/// A live node: its port, role and slot ranges.
type Node = (u16, String, Vec<(u16, u16)>);

/// Each live node (from `CLUSTER NODES` of a live node).
fn nodes(args: &Args) -> anyhow::Result<Vec<Node>> {
    let listing = (0..args.nodes)
        .find_map(|i| cli(args.port + i, &["cluster", "nodes"]).ok())
        .ok_or_else(|| anyhow::anyhow!("no node answers"))?;
    let mut nodes = Vec::new();
    for line in listing.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 8 || fields[2].contains("fail") {
            continue;
        }
        let port: u16 = fields[1]
            .split(['@', ':'])
            .nth(1)
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        let role = if fields[2].contains("master") {
            "master"
        } else {
            "replica"
        };
        let slots = fields[8..]
            .iter()
            .filter(|f| !f.starts_with('['))
            .filter_map(|range| match range.split_once('-') {
                Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                None => range.parse().ok().map(|s| (s, s)),
            })
            .collect();
        nodes.push((port, role.to_string(), slots));
    }
    Ok(nodes)
}

/// Starts the killed node again with its nodes.conf, and waits until it is a replica whose
/// first sync is done.
async fn rejoin(args: &Args, port: u16) -> anyhow::Result<()> {
    let dir = std::env::var("ENGAGE_CLUSTER_DIR")
        .unwrap_or_else(|_| format!("/tmp/engage-redis-cluster-{}", args.port));
    let started = Command::new("deploy/redis-cluster/node")
        .arg(port.to_string())
        .arg(dir)
        .status()?;
    anyhow::ensure!(started.success(), "node {port} did not start again");
    for _ in 0..200 {
        let replication = cli(port, &["info", "replication"]).unwrap_or_default();
        if replication.contains("role:slave") && replication.contains("master_link_status:up") {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    anyhow::bail!("node {port} did not rejoin as a synced replica within 20 s")
}

fn kill_9(port: u16) -> anyhow::Result<()> {
    let info = cli(port, &["info", "server"])?;
    let pid = info
        .lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .ok_or_else(|| anyhow::anyhow!("no process_id"))?
        .trim();
    anyhow::ensure!(Command::new("kill").args(["-9", pid]).status()?.success());
    Ok(())
}

fn cli(port: u16, command: &[&str]) -> anyhow::Result<String> {
    let output = Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(command)
        .output()?;
    anyhow::ensure!(
        output.status.success(),
        "redis-cli -p {port} {command:?} failed"
    );
    Ok(String::from_utf8(output.stdout)?)
}
