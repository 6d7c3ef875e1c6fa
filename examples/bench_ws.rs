//! Subscription fan-out: N WebSocket subscribers (graphql-transport-ws) on one instance,
//! each watching one of the item's remarks with `likeCountChanged`, while likes arrive at a
//! steady rate over those remarks. Reports delivery latency (from the like's request to the
//! subscriber's receipt), whether every subscriber saw its remark's final count, the
//! server's peak RSS and how many Redis pub/sub connections the server holds. With
//! `--server-pid` it also splits the server's CPU time between the handshakes (connecting
//! and subscribing everyone) and the deliveries that follow, kernel time apart: the cost of
//! a delivery in the steady state, and how much of it is the kernel's send.
//!
//! ```sh
//! ulimit -n 20000
//! cargo run --release --example bench_ws -- --fixtures /tmp/engage-bench \
//!     --subscribers 10000 --rate 200 --seconds 30 --server-pid $(pgrep -n engage)
//! ```

use std::{
    collections::{HashMap, HashSet},
    path::PathBuf,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use clap::Parser;
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::{client::IntoClientRequest, Message};

#[path = "support/mod.rs"]
mod support;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value = "http://127.0.0.1:8000/graphql")]
    url: String,
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    redis: String,
    /// Directory written by `bench_seed` (remarks.txt).
    #[arg(long)]
    fixtures: PathBuf,
    #[arg(long, default_value_t = 10_000)]
    subscribers: usize,
    /// Likes per second, spread round-robin over the remarks.
    #[arg(long, default_value_t = 200)]
    rate: u64,
    #[arg(long, default_value_t = 30)]
    seconds: u64,
    /// The server process, for its RSS and its Redis connections.
    #[arg(long)]
    server_pid: Option<u32>,
}

/// What one subscriber received: (remark index, like count, when).
type Received = Vec<(usize, i64, Instant)>;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let remarks = lines(&args.fixtures.join("remarks.txt"))?;
    // Voters never seen before, so that every like changes a count and is published.
    let tokens = support::tokens();
    let first_voter = 7_000_000_000 + chrono::Utc::now().timestamp_millis() % 1_000_000_000;
    let voters: Vec<String> = (0..(args.rate * args.seconds) as i64)
        .map(|v| tokens.mint(first_voter + v, engage::infra::auth::Role::User, 3600, None))
        .collect();
    let index_of: Arc<HashMap<String, usize>> = Arc::new(
        remarks
            .iter()
            .enumerate()
            .map(|(i, id)| (id.clone(), i))
            .collect(),
    );
    let ws_url = args.url.replacen("http", "ws", 1);

    // Connect and subscribe everyone, a few hundred handshakes at a time.
    let before_handshakes = args.server_pid.map(cpu_ticks);
    let connecting = Instant::now();
    let ready = Arc::new(AtomicUsize::new(0));
    let stop = tokio_util::sync::CancellationToken::new();
    let mut subscribers = Vec::with_capacity(args.subscribers);
    let permits = Arc::new(tokio::sync::Semaphore::new(256));
    for n in 0..args.subscribers {
        let remark = remarks[n % remarks.len()].clone();
        let (ws_url, index_of, ready, stop, permits) = (
            ws_url.clone(),
            index_of.clone(),
            ready.clone(),
            stop.clone(),
            permits.clone(),
        );
        subscribers.push(tokio::spawn(async move {
            let permit = permits.acquire_owned().await.expect("open");
            subscribe(&ws_url, &remark, &index_of, ready, permit, stop).await
        }));
    }
    while ready.load(Ordering::Relaxed) < args.subscribers {
        if subscribers.iter().any(|s| s.is_finished()) {
            anyhow::bail!("a subscriber failed before the likes began");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "{} subscribers connected and subscribed in {:.1}s",
        args.subscribers,
        connecting.elapsed().as_secs_f64()
    );
    let pubsub = match args.server_pid {
        Some(pid) => Some(pubsub_connections(&args.redis, pid).await?),
        None => None,
    };
    let before_likes = args.server_pid.map(cpu_ticks);

    // Likes at a steady rate; each remembers when it was sent and the count it produced.
    let sent: Arc<Mutex<HashMap<(usize, i64), Instant>>> = Arc::default();
    // The server closes a connection idle for its header-read timeout (30 s by default); a
    // pooled connection idle that long could be picked just as it closes.
    let client = reqwest::Client::builder()
        .pool_idle_timeout(Duration::from_secs(10))
        .build()?;
    let mut ticker = tokio::time::interval(Duration::from_micros(1_000_000 / args.rate));
    let total = (args.rate * args.seconds) as usize;
    let mut likes = Vec::with_capacity(total);
    let mut peak_rss = 0;
    let started = Instant::now();
    for n in 0..total {
        ticker.tick().await;
        if n % 100 == 0 {
            peak_rss = peak_rss.max(args.server_pid.map_or(0, rss_kib));
        }
        let (client, url, sent) = (client.clone(), args.url.clone(), sent.clone());
        let remark = n % remarks.len();
        let remark_id = remarks[remark].clone();
        let voter = voters[n % voters.len()].clone();
        likes.push(tokio::spawn(async move {
            let at = Instant::now();
            let data = support::data(
                &client,
                &url,
                &voter,
                "mutation($id: ID!) { likeRemark(remarkId: $id) { likeCount changed } }",
                json!({ "id": remark_id }),
            )
            .await?;
            let count = data["likeRemark"]["likeCount"].as_i64().unwrap_or(-1);
            anyhow::ensure!(
                data["likeRemark"]["changed"] == true,
                "a like changed nothing"
            );
            sent.lock().expect("poisoned").insert((remark, count), at);
            anyhow::Ok((remark, count))
        }));
    }
    let mut final_count: HashMap<usize, i64> = HashMap::new();
    for like in likes {
        let (remark, count) = like.await??;
        let entry = final_count.entry(remark).or_default();
        *entry = (*entry).max(count);
    }
    let sending = started.elapsed();
    // Let the last updates arrive, then hang up.
    tokio::time::sleep(Duration::from_secs(2)).await;
    peak_rss = peak_rss.max(args.server_pid.map_or(0, rss_kib));
    let after_likes = args.server_pid.map(cpu_ticks);
    stop.cancel();

    let sent = sent.lock().expect("poisoned").clone();
    let mut latencies = Vec::new();
    let (mut complete, mut deliveries) = (0usize, 0usize);
    for (n, subscriber) in subscribers.into_iter().enumerate() {
        let received = subscriber.await??;
        let remark = n % remarks.len();
        let mut last = i64::MIN;
        for (r, count, at) in &received {
            if let Some(sent_at) = sent.get(&(*r, *count)) {
                latencies.push(at.saturating_duration_since(*sent_at));
                deliveries += 1;
            }
            last = last.max(*count);
        }
        if final_count.get(&remark).is_none_or(|f| last >= *f) {
            complete += 1;
        }
    }
    latencies.sort();
    let at = |p: f64| support::percentile_ms(&latencies, p);
    let distinct: HashSet<_> = sent.keys().map(|(r, _)| r).collect();
    println!(
        "RESULT {}",
        json!({
            "scenario": "subscriptions",
            "subscribers": args.subscribers,
            "remarks": distinct.len(),
            "likes": total,
            "likes_per_s": (total as f64 / sending.as_secs_f64()).round(),
            "deliveries": deliveries,
            "p50_ms": at(0.50), "p99_ms": at(0.99), "max_ms": at(1.0),
            "saw_final_count": complete,
            "server_peak_rss_mib": peak_rss / 1024,
            "server_pubsub_connections": pubsub,
            "server_handshakes_cpu_s": seconds_between(before_handshakes, before_likes, |t| t.total()),
            "server_steady_cpu_s": seconds_between(before_likes, after_likes, |t| t.total()),
            "server_steady_sys_s": seconds_between(before_likes, after_likes, |t| t.system),
        })
    );
    Ok(())
}

async fn subscribe(
    ws_url: &str,
    remark: &str,
    index_of: &HashMap<String, usize>,
    ready: Arc<AtomicUsize>,
    permit: tokio::sync::OwnedSemaphorePermit,
    stop: tokio_util::sync::CancellationToken,
) -> anyhow::Result<Received> {
    let mut request = ws_url.into_client_request()?;
    request
        .headers_mut()
        .insert("Sec-WebSocket-Protocol", "graphql-transport-ws".parse()?);
    let (mut socket, _) = tokio_tungstenite::connect_async(request).await?;
    socket
        .send(Message::text(
            json!({ "type": "connection_init" }).to_string(),
        ))
        .await?;
    socket
        .send(Message::text(
            json!({ "id": "1", "type": "subscribe", "payload": {
                "query": "subscription($ids: [ID!]!) { likeCountChanged(remarkIds: $ids) { remarkId likeCount } }",
                "variables": { "ids": [remark] },
            }})
            .to_string(),
        ))
        .await?;
    let mut received = Vec::new();
    let mut subscribed = false;
    let mut permit = Some(permit);
    loop {
        let message = tokio::select! {
            () = stop.cancelled() => break,
            message = socket.next() => message,
        };
        let Some(message) = message else {
            anyhow::bail!("the server closed a subscription");
        };
        let Message::Text(text) = message? else {
            continue;
        };
        let value: Value = serde_json::from_str(&text)?;
        match value["type"].as_str() {
            Some("next") => {
                let change = &value["payload"]["data"]["likeCountChanged"];
                let remark = change["remarkId"].as_str().unwrap_or_default();
                let count = change["likeCount"].as_i64().unwrap_or(-1);
                received.push((index_of[remark], count, Instant::now()));
                if !subscribed {
                    // The first message is the current count: the subscription is live.
                    subscribed = true;
                    permit.take();
                    ready.fetch_add(1, Ordering::Relaxed);
                }
            }
            Some("ping") => socket.send(Message::text(r#"{"type":"pong"}"#)).await?,
            Some("error") | Some("complete") => anyhow::bail!("subscription ended: {text}"),
            _ => {}
        }
    }
    let _ = socket.close(None).await;
    Ok(received)
}

fn lines(path: &std::path::Path) -> anyhow::Result<Vec<String>> {
    Ok(std::fs::read_to_string(path)?
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect())
}

/// A process's CPU time so far, in clock ticks.
#[derive(Clone, Copy)]
struct CpuTicks {
    user: u64,
    system: u64,
}

impl CpuTicks {
    fn total(self) -> u64 {
        self.user + self.system
    }
}

/// User and system time from `/proc/PID/stat` (fields 14 and 15; the command name before
/// them is parenthesised and may hold spaces).
fn cpu_ticks(pid: u32) -> CpuTicks {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    // The first field after the name is field 3 (the state).
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse().ok()).unwrap_or(0);
    CpuTicks {
        user: field(14),
        system: field(15),
    }
}

/// Seconds of CPU between two readings, of the part `pick` takes.
fn seconds_between(
    from: Option<CpuTicks>,
    to: Option<CpuTicks>,
    pick: impl Fn(CpuTicks) -> u64,
) -> Option<f64> {
    // SAFETY: sysconf reads a constant of the system; it has no preconditions.
    let ticks_per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some(pick(to?).saturating_sub(pick(from?)) as f64 / ticks_per_second)
}

/// Resident memory of a process, in KiB (0 if it cannot be read).
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Redis pub/sub clients whose socket belongs to the process: Redis's CLIENT LIST names the
/// peer port of each client; the process's own TCP sockets are matched by inode.
async fn pubsub_connections(redis_url: &str, pid: u32) -> anyhow::Result<usize> {
    let mut conn = redis::Client::open(redis_url)?
        .get_multiplexed_async_connection_with_config(&support::patient_redis())
        .await?;
    let clients: String = redis::cmd("CLIENT")
        .arg("LIST")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(&mut conn)
        .await?;
    let inodes: HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))?
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter_map(|target| {
            let target = target.to_string_lossy().into_owned();
            Some(
                target
                    .strip_prefix("socket:[")?
                    .strip_suffix(']')?
                    .to_string(),
            )
        })
        .collect();
    // /proc/net/tcp: local address (hex ip:port) in column 2, inode in column 10.
    let mut ports = HashSet::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        for line in std::fs::read_to_string(table)
            .unwrap_or_default()
            .lines()
            .skip(1)
        {
            let columns: Vec<&str> = line.split_whitespace().collect();
            if columns.len() > 9 && inodes.contains(columns[9]) {
                if let Some(port) = columns[1].rsplit(':').next() {
                    ports.insert(u16::from_str_radix(port, 16)?);
                }
            }
        }
    }
    Ok(clients
        .lines()
        .filter_map(|l| l.split_whitespace().find_map(|f| f.strip_prefix("addr=")))
        .filter_map(|addr| addr.rsplit(':').next()?.parse::<u16>().ok())
        .filter(|port| ports.contains(port))
        .count())
}
