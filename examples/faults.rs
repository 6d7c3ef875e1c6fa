//! The long fault suite: two real `engage serve` processes side by side (same Redis prefix,
//! same PostgreSQL schema, their own consumer names) under a mixed load of likes, sign-ins
//! and flash-sale attempts, while faults are injected one after the other:
//!
//! 1. `kill -9` of instance A mid-load; B takes over A's pending stream entries and in-flight
//!    jobs; A is started again later;
//! 2. SQL unreachable for 30 s (a TCP plug in front of PostgreSQL is pulled out);
//! 3. Redis restarted (a private `redis-server` with `deploy/redis.conf`, stopped and started).
//!
//! Every acknowledged write is recorded on the client side; after the load the archive is
//! drained and checked: each acknowledged like, sign-in and order is in Redis and in SQL
//! exactly once, `engage verify` is clean, no 5xx was answered, no server panicked.
//!
//! Run it with `reliability/run` (which builds the release binary first).

use std::{
    collections::{HashMap, HashSet},
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use clap::Parser;
use engage::infra::auth::{Role, Tokens};
use serde_json::{json, Value};
use sqlx::Row;
use tokio::net::{TcpListener, TcpStream};

#[path = "support/plug.rs"]
mod plug;
#[path = "support/mod.rs"]
mod support;
use plug::Plug;

#[derive(Parser)]
struct Args {
    /// The `engage` binary under test.
    #[arg(long, default_value = "target/release/engage")]
    engage: PathBuf,
    /// The PostgreSQL server (a schema of its own is created and dropped).
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/test")]
    postgres: String,
    /// The Redis configuration the private Redis runs with.
    #[arg(long, default_value = "deploy/redis.conf")]
    redis_conf: PathBuf,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 8)]
    in_flight: usize,
    /// Seconds the SQL outage lasts.
    #[arg(long, default_value_t = 30)]
    sql_outage: u64,
}

const LIKE: &str = "mutation($id: ID!) { likeRemark(remarkId: $id) { changed } }";
const SIGN_IN: &str = "mutation { signIn { alreadySigned } }";
const SECKILL: &str = "mutation($v: ID!) { seckillVoucher(voucherId: $v) { id } }";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// One `engage serve` process.
struct Instance {
    name: &'static str,
    port: u16,
    env: Vec<(String, String)>,
    engage: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

impl Instance {
    fn start(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let child = Command::new(&self.engage)
            .arg("serve")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("ENGAGE_BIND", format!("127.0.0.1:{}", self.port))
            .stdout(log.try_clone()?)
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()?;
        self.child = Some(child);
        Ok(())
    }

    fn kill_9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill(); // SIGKILL
            let _ = child.wait();
        }
    }

    fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/graphql", self.port)
    }
}

/// Resident memory of a process in kB.
fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

#[derive(Default)]
struct Ledger {
    /// (remark, voter) pairs whose like was acknowledged as a change.
    likes: Vec<(i64, i64)>,
    /// Users whose sign-in was acknowledged (first of the day).
    sign_ins: Vec<i64>,
    /// Order ids acknowledged to buyers.
    orders: Vec<i64>,
    /// Requests without an answer (connection refused or reset): their effect is unknown.
    in_doubt: u64,
    unavailable: u64,
    other_errors: HashMap<String, u64>,
    status_5xx: u64,
    requests: u64,
    slowest_failure: Duration,
}

struct Load {
    ledger: Mutex<Ledger>,
    next_user: AtomicU64,
    stop: AtomicBool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let started = Instant::now();
    let work = tempfile::tempdir()?;
    let say = |what: &str| println!("[{:>6.1}s] {what}", started.elapsed().as_secs_f64());

    // Private Redis with the recommended configuration.
    let redis_port = free_port();
    let redis_conf = std::fs::canonicalize(&args.redis_conf)?;
    let start_redis = |dir: &std::path::Path| -> anyhow::Result<Child> {
        Ok(Command::new("redis-server")
            .arg(&redis_conf)
            .args(["--port", &redis_port.to_string(), "--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(dir)
            .args(["--daemonize", "no", "--logfile", ""])
            .stdout(Stdio::null())
            .spawn()?)
    };
    let mut redis_server = start_redis(work.path())?;
    let redis_url = format!("redis://127.0.0.1:{redis_port}");
    let redis = redis::Client::open(redis_url.as_str())?;
    support::wait_for("Redis", || async {
        redis.get_multiplexed_async_connection().await.is_ok()
    })
    .await?;

    // A schema of its own on the PostgreSQL server, reached through a plug.
    let schema = format!("faults_{}", uuid::Uuid::new_v4().simple());
    let admin = sqlx::PgPool::connect(&args.postgres).await?;
    sqlx::query(&format!("CREATE SCHEMA {schema}"))
        .execute(&admin)
        .await?;
    let pg_host = args
        .postgres
        .split('@')
        .nth(1)
        .and_then(|rest| rest.split(['/', '?']).next())
        .unwrap_or("127.0.0.1:5432")
        .to_string();
    let sql_plug = Plug::to(&pg_host).await?;
    let options = format!("options=-c%20search_path%3D{schema}");
    let direct_url = format!("{}?{options}", args.postgres);
    let plugged_url = format!(
        "{}?{options}",
        args.postgres.replace(&pg_host, &sql_plug.addr.to_string())
    );
    let sql = sqlx::PgPool::connect(&direct_url).await?;

    // Jobs whose callback takes a while, so that some are in flight when A dies.
    let (hook_port, deliveries) = callback_target().await?;

    let secret = format!("faults-{}", uuid::Uuid::new_v4().simple());
    let env: Vec<(String, String)> = [
        ("REDIS_URL", redis_url.clone()),
        ("DATABASE_URL", plugged_url),
        ("ENGAGE_REDIS_PREFIX", "faults:".into()),
        ("ENGAGE_JWT_SECRET", secret.clone()),
        ("ENGAGE_RATE_LIMIT_PER_IP", "0".into()),
        ("ENGAGE_RATE_LIMIT_PER_USER", "0".into()),
        ("ENGAGE_MAX_CONNECTIONS_PER_IP", "0".into()),
        ("ENGAGE_WS_MAX_PER_USER", "0".into()),
        ("ENGAGE_CONSUMER_CLAIM_IDLE_MS", "5000".into()),
        ("ENGAGE_CONSUMER_MAX_BACKOFF_MS", "2000".into()),
        ("ENGAGE_JOBS_VISIBILITY_SECONDS", "5".into()),
        ("ENGAGE_CALLBACK_HOSTS", format!("127.0.0.1:{hook_port}")),
        (
            "RUST_LOG",
            "warn,engage::infra::streams=info,engage::features::jobs=info".into(),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let mut a = Instance {
        name: "A",
        port: free_port(),
        env: env.clone(),
        engage: args.engage.clone(),
        log: work.path().join("a.log"),
        child: None,
    };
    let mut b = Instance {
        name: "B",
        port: free_port(),
        env: env.clone(),
        engage: args.engage.clone(),
        log: work.path().join("b.log"),
        child: None,
    };
    a.start()?;
    wait_ready(&a).await?;
    b.start()?;
    wait_ready(&b).await?;
    say("Redis, PostgreSQL plug, instances A and B up");

    // Fixtures: remarks to like, a voucher with more stock than attempts.
    let tokens = Tokens::new(&secret);
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(args.in_flight)
        .build()?;
    let admin_token = tokens.mint(1, Role::Admin, 7200, None);
    let item = support::post(
        &http,
        &a.url(),
        &admin_token,
        "mutation { createItem(input: { name: \"faults\" }) { id } }",
        json!({}),
    )
    .await?["data"]["createItem"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let mut remarks = Vec::new();
    for author in 0..20 {
        let token = tokens.mint(10 + author, Role::User, 7200, None);
        let input = json!({ "input": { "itemId": item, "score": 5, "content": format!("remark {author}") } });
        let body = support::post(
            &http,
            &a.url(),
            &token,
            "mutation($input: CreateRemarkInput!) { createRemark(input: $input) { id } }",
            input,
        )
        .await?;
        remarks.push(support::local_id(
            body["data"]["createRemark"]["id"]
                .as_str()
                .unwrap_or_default(),
        )?);
    }
    let now = chrono::Utc::now();
    let voucher = json!({ "i": {
        "itemId": item, "title": "faults", "stock": 1_000_000,
        "beginsAt": (now - chrono::Duration::minutes(1)).to_rfc3339(),
        "endsAt": (now + chrono::Duration::hours(2)).to_rfc3339(), "payWithinSeconds": 15,
    }});
    let voucher = support::post(
        &http,
        &a.url(),
        &admin_token,
        "mutation($i: CreateVoucherInput!) { createVoucher(input: $i) { id } }",
        voucher,
    )
    .await?["data"]["createVoucher"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    // 300 jobs due in about 6 s, at the moment A is killed.
    let jobs = 300;
    for job in 0..jobs {
        let input = json!({ "input": { "id": format!("hook-{job}"), "topic": "hooks", "body": "{}",
            "delaySeconds": 6, "callbackUrl": format!("http://127.0.0.1:{hook_port}/hook/{job}"), "maxAttempts": 5 } });
        let body = support::post(
            &http,
            &b.url(),
            &admin_token,
            "mutation($input: ScheduleJobInput!) { scheduleJob(input: $input) { id } }",
            input,
        )
        .await?;
        anyhow::ensure!(body.get("errors").is_none(), "scheduling: {body}");
    }

    // Slow WebSocket clients on B: subscribe to every remark's count and never read.
    let rss_before = b.pid().map_or(0, rss_kb);
    let mut slow_clients = Vec::new();
    for _ in 0..20 {
        slow_clients.push(slow_subscriber(b.port, &remarks).await?);
    }

    // The load: sign-ins, likes and seckill attempts from fresh users, spread over A and B.
    let load = Arc::new(Load {
        ledger: Mutex::new(Ledger::default()),
        next_user: AtomicU64::new(1_000_000),
        stop: AtomicBool::new(false),
    });
    let up = Arc::new([AtomicBool::new(true), AtomicBool::new(true)]);
    let urls = [a.url(), b.url()];
    let mut workers = Vec::new();
    for worker in 0..args.in_flight {
        let (load, up, urls, http, tokens) = (
            load.clone(),
            up.clone(),
            urls.clone(),
            http.clone(),
            Tokens::new(&secret),
        );
        let (remarks, voucher) = (remarks.clone(), voucher.clone());
        workers.push(tokio::spawn(async move {
            let mut turn = worker;
            while !load.stop.load(Ordering::Relaxed) {
                turn += 1;
                let target = if up[turn % 2].load(Ordering::Relaxed) {
                    turn % 2
                } else {
                    (turn + 1) % 2
                };
                let user = load.next_user.fetch_add(1, Ordering::Relaxed) as i64;
                let token = tokens.mint(user, Role::User, 7200, None);
                let remark = remarks[user as usize % remarks.len()];
                let (query, variables) = match turn % 3 {
                    0 => (LIKE, json!({ "id": support::global_id("Remark", remark) })),
                    1 => (SIGN_IN, json!({})),
                    _ => (SECKILL, json!({ "v": voucher })),
                };
                let sent = Instant::now();
                let answer = http
                    .post(&urls[target])
                    .bearer_auth(&token)
                    .json(&json!({ "query": query, "variables": variables }))
                    .send()
                    .await;
                let response = {
                    let mut ledger = load.ledger.lock().expect("poisoned");
                    ledger.requests += 1;
                    match answer {
                        Ok(response) => {
                            if response.status().is_server_error() {
                                ledger.status_5xx += 1;
                            }
                            Some(response)
                        }
                        Err(_) => {
                            ledger.in_doubt += 1;
                            None
                        }
                    }
                };
                let Some(response) = response else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                let body: Value = response.json().await.unwrap_or(Value::Null);
                let mut ledger = load.ledger.lock().expect("poisoned");
                if let Some(code) = body["errors"][0]["extensions"]["code"].as_str() {
                    ledger.slowest_failure = ledger.slowest_failure.max(sent.elapsed());
                    if code == "UNAVAILABLE" {
                        ledger.unavailable += 1;
                    } else {
                        *ledger.other_errors.entry(code.to_string()).or_default() += 1;
                    }
                    continue;
                }
                let data = &body["data"];
                match turn % 3 {
                    0 if data["likeRemark"]["changed"] == true => ledger.likes.push((remark, user)),
                    1 if data["signIn"]["alreadySigned"] == false => ledger.sign_ins.push(user),
                    2 => {
                        if let Some(id) = data["seckillVoucher"]["id"].as_str() {
                            ledger.orders.push(support::local_id(id).unwrap_or(0));
                        }
                    }
                    _ => *ledger.other_errors.entry("UNEXPECTED".into()).or_default() += 1,
                }
            }
        }));
    }
    let acked = |load: &Load| {
        let l = load.ledger.lock().expect("poisoned");
        l.likes.len() + l.sign_ins.len() + l.orders.len()
    };

    // Fault 1: kill -9 of A while its jobs and stream entries are in flight.
    tokio::time::sleep(Duration::from_secs(7)).await;
    up[0].store(false, Ordering::Relaxed);
    a.kill_9();
    say(&format!(
        "kill -9 A ({} writes acknowledged so far)",
        acked(&load)
    ));
    let pending_of_dead = pending_entries(&redis).await?;
    say(&format!(
        "stream entries pending right after the kill: {pending_of_dead}"
    ));
    tokio::time::sleep(Duration::from_secs(12)).await;
    a.start()?;
    wait_ready(&a).await?;
    up[0].store(true, Ordering::Relaxed);
    say("A restarted");
    tokio::time::sleep(Duration::from_secs(3)).await;
    say(&format!(
        "archive backlog before the SQL outage: {}",
        stream_backlog(&redis).await?
    ));

    // Fault 2: SQL unreachable.
    sql_plug.unplug();
    say(&format!("SQL unplugged for {} s", args.sql_outage));
    let outage_started = Instant::now();
    let mut readyz_truthful = 0;
    let mut readyz_checks = 0;
    while outage_started.elapsed() < Duration::from_secs(args.sql_outage) {
        for instance in [&a, &b] {
            let ready = http
                .get(instance.url().replace("/graphql", "/readyz"))
                .send()
                .await;
            readyz_checks += 1;
            if let Ok(ready) = ready {
                let status = ready.status().as_u16();
                let body: Value = ready.json().await.unwrap_or(Value::Null);
                // The first second may still see a pooled connection succeed.
                // Degraded, still in rotation: the writes go on without SQL.
                if (status == 200 && body["status"] == "degraded" && body["sql"] == "down")
                    || outage_started.elapsed() < Duration::from_secs(2)
                {
                    readyz_truthful += 1;
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    sql_plug.plug_in();
    let backlog = stream_backlog(&redis).await?;
    say(&format!(
        "SQL plugged in; archive backlog {backlog} entries; /readyz truthful {readyz_truthful}/{readyz_checks}"
    ));
    let drain_started = Instant::now();
    let mut last_report = Instant::now();
    loop {
        let (pending, lag) = group_counts(&redis).await?;
        if pending + lag <= 2 * args.in_flight as u64
            || drain_started.elapsed() > Duration::from_secs(60)
        {
            break;
        }
        if last_report.elapsed() > Duration::from_secs(10) {
            last_report = Instant::now();
            // The groups holding most of the backlog name the slowest consumer.
            let mut groups = group_backlogs(&redis).await?;
            groups.sort_by_key(|(_, _, pending, lag)| std::cmp::Reverse(pending + lag));
            let largest: Vec<String> = groups
                .iter()
                .take(3)
                .filter(|(_, _, pending, lag)| pending + lag > 0)
                .map(|(stream, group, pending, lag)| format!("{stream} {group} {}", pending + lag))
                .collect();
            say(&format!(
                "  backlog: {pending} pending, {lag} not delivered; largest: {}",
                largest.join(", ")
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let drain_time = drain_started.elapsed();
    say(&format!(
        "backlog under load after {drain_time:.1?}: {}",
        stream_backlog(&redis).await?
    ));

    // Fault 3: Redis restarted (SIGTERM: it writes its AOF and exits; then a new one).
    let before = load.ledger.lock().expect("poisoned").unavailable;
    let _ = Command::new("kill")
        .arg(redis_server.id().to_string())
        .status();
    let _ = redis_server.wait();
    say("Redis stopped");
    tokio::time::sleep(Duration::from_secs(3)).await;
    redis_server = start_redis(work.path())?;
    let back = Instant::now();
    support::wait_for("Redis back", || async {
        redis.get_multiplexed_async_connection().await.is_ok()
    })
    .await?;
    // Recovery: a write through each instance succeeds again.
    let mut recovered = Vec::new();
    for instance in [&a, &b] {
        let mut last;
        loop {
            let user = load.next_user.fetch_add(1, Ordering::Relaxed) as i64;
            let token = tokens.mint(user, Role::User, 7200, None);
            match support::post(&http, &instance.url(), &token, SIGN_IN, json!({})).await {
                Ok(body) if body["data"]["signIn"]["alreadySigned"] == false => {
                    load.ledger.lock().expect("poisoned").sign_ins.push(user);
                    break;
                }
                Ok(body) => last = body.to_string(),
                Err(error) => last = error.to_string(),
            }
            anyhow::ensure!(
                back.elapsed() < Duration::from_secs(60),
                "instance {} did not recover from the Redis restart: {last}",
                instance.name
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        recovered.push(format!("{} {:.2?}", instance.name, back.elapsed()));
    }
    let unavailable_during = load.ledger.lock().expect("poisoned").unavailable - before;
    say(&format!(
        "Redis back; writes succeed again after: {}; UNAVAILABLE answers meanwhile: {unavailable_during}",
        recovered.join(", ")
    ));
    tokio::time::sleep(Duration::from_secs(5)).await;

    load.stop.store(true, Ordering::Relaxed);
    for worker in workers {
        let _ = worker.await;
    }
    let rss_after = b.pid().map_or(0, rss_kb);
    drop(slow_clients);
    say("load stopped; waiting for the archive and the jobs to drain");
    let drain_started = Instant::now();
    loop {
        let settled = stream_backlog(&redis).await? == 0
            && deliveries.lock().expect("poisoned").len() >= jobs;
        if settled || drain_started.elapsed() > Duration::from_secs(120) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Orders expire 15 s after they were made: wait for the last expiry jobs too.
    tokio::time::sleep(Duration::from_secs(16)).await;
    while stream_backlog(&redis).await? > 0 && drain_started.elapsed() < Duration::from_secs(150) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for (stream, group, pending, lag) in group_backlogs(&redis).await? {
        if pending + lag > 0 {
            say(&format!(
                "not drained: {stream} group {group}: {pending} pending, {lag} not delivered"
            ));
        }
    }

    // Checks.
    let ledger = std::mem::take(&mut *load.ledger.lock().expect("poisoned"));
    let mut report = Vec::new();

    // Likes: each acknowledged pair once in vote_log; no pair twice; Redis counts cover them.
    let rows = sqlx::query("SELECT remark_id, voter_id, COUNT(*) AS n FROM vote_log WHERE voting = 1 GROUP BY remark_id, voter_id")
        .fetch_all(&sql)
        .await?;
    let archived: HashMap<(i64, i64), i64> = rows
        .iter()
        .map(|r| ((r.get("remark_id"), r.get("voter_id")), r.get("n")))
        .collect();
    let lost = ledger
        .likes
        .iter()
        .filter(|pair| !archived.contains_key(pair))
        .count();
    let duplicates = archived.values().filter(|&&n| n > 1).count();
    let body = support::post(
        &http,
        &b.url(),
        &admin_token,
        "query($i: ID!) { remarks(itemId: $i, first: 100) { edges { node { id likeCount } } } }",
        json!({ "i": item }),
    )
    .await?;
    let redis_likes: i64 = body["data"]["remarks"]["edges"]
        .as_array()
        .map(|edges| {
            edges
                .iter()
                .filter_map(|e| e["node"]["likeCount"].as_i64())
                .sum()
        })
        .unwrap_or(0);
    let redis_lost = (ledger.likes.len() as i64 - redis_likes).max(0);
    report.push((
        "likes",
        ledger.likes.len(),
        lost + redis_lost as usize,
        duplicates,
        format!(
            "Redis counts {redis_likes}, SQL rows {}",
            archived.values().sum::<i64>()
        ),
    ));

    // Sign-ins: one SIGN_IN award per acknowledged user in SQL; the calendar says signed.
    let rows = sqlx::query(
        "SELECT user_id, COUNT(*) AS n FROM points_record WHERE kind = 'SIGN_IN' GROUP BY user_id",
    )
    .fetch_all(&sql)
    .await?;
    let archived: HashMap<i64, i64> = rows
        .iter()
        .map(|r| (r.get("user_id"), r.get("n")))
        .collect();
    let lost_sql = ledger
        .sign_ins
        .iter()
        .filter(|u| !archived.contains_key(u))
        .count();
    let duplicates = archived.values().filter(|&&n| n > 1).count();
    let mut lost_redis = 0;
    for chunk in ledger.sign_ins.chunks(args.in_flight) {
        let checks = chunk.iter().map(|&user| {
            let token = tokens.mint(user, Role::User, 7200, None);
            let (http, url) = (http.clone(), b.url());
            async move {
                support::post(
                    &http,
                    &url,
                    &token,
                    "{ signCalendar { today { signed } } }",
                    json!({}),
                )
                .await
                .map(|body| body["data"]["signCalendar"]["today"]["signed"] == true)
                .unwrap_or(false)
            }
        });
        lost_redis += futures::future::join_all(checks)
            .await
            .into_iter()
            .filter(|ok| !ok)
            .count();
    }
    report.push((
        "sign-ins",
        ledger.sign_ins.len(),
        lost_sql + lost_redis,
        duplicates,
        format!("SQL awards {}", archived.values().sum::<i64>()),
    ));

    // Orders: each acknowledged order once in SQL, one live order per buyer at most.
    let rows = sqlx::query("SELECT id FROM orders").fetch_all(&sql).await?;
    let archived: HashSet<i64> = rows.iter().map(|r| r.get("id")).collect();
    let lost = ledger
        .orders
        .iter()
        .filter(|id| !archived.contains(id))
        .count();
    let duplicates: i64 =
        sqlx::query("SELECT COUNT(*) - COUNT(DISTINCT (voucher_id, buyer_id)) AS n FROM orders")
            .fetch_one(&sql)
            .await?
            .get("n");
    let expired: i64 = sqlx::query("SELECT COUNT(*) AS n FROM orders WHERE status = 'EXPIRED'")
        .fetch_one(&sql)
        .await?
        .get("n");
    report.push((
        "orders",
        ledger.orders.len(),
        lost,
        duplicates as usize,
        format!("SQL orders {}, expired {expired}", archived.len()),
    ));

    // Jobs: every job delivered; more than once only if its worker died mid-call.
    let counts = deliveries.lock().expect("poisoned").clone();
    let redelivered = counts.values().filter(|&&n| n > 1).count();
    report.push((
        "jobs",
        jobs,
        jobs - counts.len(),
        0,
        format!("redelivered after the kill: {redelivered}"),
    ));

    let verify = Command::new(&args.engage)
        .arg("verify")
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env("DATABASE_URL", &direct_url)
        .env("RUST_LOG", "error")
        .output()?;
    let verify_text = String::from_utf8_lossy(&verify.stdout).to_string();
    let logs = std::fs::read_to_string(&a.log)? + &std::fs::read_to_string(&b.log)?;
    let panics = logs.matches("panicked").count();
    let takeovers = logs
        .matches("took over entries of a silent consumer")
        .count();
    let reclaimed = logs
        .matches("jobs of a silent worker are ready again")
        .count();
    // Why the servers failed requests (UNAVAILABLE and INTERNAL are logged), most frequent
    // first: an INTERNAL answer is explained here.
    let mut failure_causes: HashMap<String, u64> = HashMap::new();
    for line in logs.lines().filter(|line| line.contains("request failed")) {
        let line = without_ansi_colours(line);
        let cause = line.split_once("error=").map_or(&*line, |(_, cause)| cause);
        *failure_causes
            .entry(cause.chars().take(120).collect())
            .or_default() += 1;
    }
    let mut failure_causes: Vec<_> = failure_causes.into_iter().collect();
    failure_causes.sort_by_key(|(_, count)| std::cmp::Reverse(*count));
    let internal = ledger.other_errors.get("INTERNAL").copied().unwrap_or(0);

    println!();
    println!("| write | acknowledged | lost | duplicates | notes |");
    println!("|---|---:|---:|---:|---|");
    for (what, acked, lost, duplicates, notes) in &report {
        println!("| {what} | {acked} | {lost} | {duplicates} | {notes} |");
    }
    println!();
    println!("requests: {}, 5xx: {}, panics: {panics}, UNAVAILABLE: {}, other errors: {:?}, unanswered (in doubt): {}",
        ledger.requests, ledger.status_5xx, ledger.unavailable, ledger.other_errors, ledger.in_doubt);
    println!("slowest failed request: {:.2?}", ledger.slowest_failure);
    for (cause, count) in failure_causes.iter().take(5) {
        println!("failed requests logged ({count}×): {cause}");
    }
    println!("stream entries pending at the kill: {pending_of_dead}; take-overs logged: {takeovers}; job reclaims logged: {reclaimed}");
    println!("SQL outage: backlog {backlog} entries, waited {drain_time:.1?} for it under load (at most 60 s); /readyz truthful {readyz_truthful}/{readyz_checks}");
    println!(
        "Redis restart: writes succeed again after {}",
        recovered.join(", ")
    );
    println!("instance B RSS: {rss_before} kB before, {rss_after} kB after load with 20 never-reading subscribers");
    println!(
        "engage verify: {}",
        verify_text.lines().last().unwrap_or("(no output)")
    );
    println!("total time: {:.0?}", started.elapsed());

    let failed = report
        .iter()
        .any(|(_, _, lost, dup, _)| *lost > 0 || *dup > 0)
        || ledger.status_5xx > 0
        // An outage must answer UNAVAILABLE; INTERNAL means an error was not classified.
        || internal > 0
        || panics > 0
        || !verify.status.success();

    a.kill_9();
    b.kill_9();
    let _ = redis_server.kill();
    let _ = redis_server.wait();
    sql.close().await;
    let _ = sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
        .execute(&admin)
        .await;
    if failed {
        let kept = work.keep();
        anyhow::bail!("a check failed; logs kept in {}", kept.display());
    }
    println!("all checks passed");
    Ok(())
}

async fn wait_ready(instance: &Instance) -> anyhow::Result<()> {
    let url = instance.url().replace("/graphql", "/readyz");
    support::wait_for(instance.name, || async {
        reqwest::get(&url)
            .await
            .is_ok_and(|r| r.status().is_success())
    })
    .await
}

/// Every stream of the run (a private Redis, so a full scan is cheap).
async fn streams(conn: &mut redis::aio::MultiplexedConnection) -> anyhow::Result<Vec<String>> {
    let mut cursor: u64 = 0;
    let mut found = Vec::new();
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg("faults:*")
            .arg("COUNT")
            .arg(10_000)
            .arg("TYPE")
            .arg("stream")
            .query_async(conn)
            .await?;
        found.extend(keys);
        if next == 0 {
            return Ok(found);
        }
        cursor = next;
    }
}

/// Per group of every stream: (entries pending, entries not delivered yet).
async fn group_counts(redis: &redis::Client) -> anyhow::Result<(u64, u64)> {
    let groups = group_backlogs(redis).await?;
    Ok(groups.iter().fold((0, 0), |(pending, lag), group| {
        (pending + group.2, lag + group.3)
    }))
}

/// Every consumer group: (stream, group, pending entries, entries not yet delivered).
async fn group_backlogs(redis: &redis::Client) -> anyhow::Result<Vec<(String, String, u64, u64)>> {
    // A busy Redis may take longer than the default response timeout for a scan.
    let config = support::patient_redis();
    let mut conn = redis
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    let mut backlogs = Vec::new();
    for stream in streams(&mut conn).await? {
        let info: redis::streams::StreamInfoStreamReply = redis::cmd("XINFO")
            .arg("STREAM")
            .arg(&stream)
            .query_async(&mut conn)
            .await?;
        let groups: redis::streams::StreamInfoGroupsReply = redis::cmd("XINFO")
            .arg("GROUPS")
            .arg(&stream)
            .query_async(&mut conn)
            .await?;
        for group in groups.groups {
            // Redis's `lag` is an estimate that can stay above zero for good once a stream
            // was trimmed and Redis restarted (7.0): a group that was handed the stream's last
            // entry has nothing left to deliver, whatever `lag` says.
            let not_delivered = if group.last_delivered_id == info.last_generated_id {
                0
            } else {
                group.lag.unwrap_or(1).max(1) as u64
            };
            backlogs.push((
                stream.clone(),
                group.name,
                group.pending as u64,
                not_delivered,
            ));
        }
    }
    Ok(backlogs)
}

/// Stream entries some group has not acknowledged yet (pending or not delivered).
async fn stream_backlog(redis: &redis::Client) -> anyhow::Result<u64> {
    let (pending, lag) = group_counts(redis).await?;
    Ok(pending + lag)
}

async fn pending_entries(redis: &redis::Client) -> anyhow::Result<u64> {
    Ok(group_counts(redis).await?.0)
}

/// An HTTP endpoint for job callbacks that takes a second per call and counts calls per job.
async fn callback_target() -> anyhow::Result<(u16, Arc<Mutex<HashMap<String, usize>>>)> {
    let calls = Arc::new(Mutex::new(HashMap::new()));
    let counter = calls.clone();
    let router = axum::Router::new().route(
        "/hook/{job}",
        axum::routing::post(
            move |axum::extract::Path(job): axum::extract::Path<String>| {
                let counter = counter.clone();
                async move {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    *counter.lock().expect("poisoned").entry(job).or_insert(0) += 1;
                    "ok"
                }
            },
        ),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move { axum::serve(listener, router).await });
    Ok((port, calls))
}

/// A WebSocket subscriber to the counts of `remarks` that never reads what it is sent.
async fn slow_subscriber(
    port: u16,
    remarks: &[i64],
) -> anyhow::Result<tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<TcpStream>>>
{
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::{client::IntoClientRequest, Message};

    let mut request = format!("ws://127.0.0.1:{port}/graphql").into_client_request()?;
    request
        .headers_mut()
        .insert("sec-websocket-protocol", "graphql-transport-ws".parse()?);
    let (mut socket, _) = tokio_tungstenite::connect_async(request).await?;
    socket
        .send(Message::text(
            json!({ "type": "connection_init", "payload": {} }).to_string(),
        ))
        .await?;
    let _ack = socket.next().await;
    let ids: Vec<String> = remarks
        .iter()
        .map(|remark| support::global_id("Remark", remark))
        .collect();
    let subscribe = json!({ "id": "1", "type": "subscribe", "payload": {
        "query": "subscription($ids: [ID!]!) { likeCountChanged(remarkIds: $ids) { remarkId likeCount } }",
        "variables": { "ids": ids } } });
    socket.send(Message::text(subscribe.to_string())).await?;
    Ok(socket)
}

/// A log line without the terminal colour codes the server's logger writes.
fn without_ansi_colours(line: &str) -> String {
    let mut plain = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // ESC [ parameters m
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    plain
}
