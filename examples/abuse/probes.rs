//! Scrapes of `/metrics` and `/readyz` in a flood, and many subscribers of one board.
//!
//! - **Scrape flood**: `/metrics` as fast as 16 clients on 4 addresses can ask, for a few
//!   seconds: answered and refused, and what the server spent on Redis meanwhile against
//!   the same time idle (its pool's round trips, from `engage_redis_round_trips_total`; and
//!   the commands of the whole Redis, from `INFO commandstats`, which counts other clients
//!   of the same Redis too).
//! - **Rank subscribers**: 3,000 `myRankChanged` subscriptions of 3,000 ranked users,
//!   spread over 30 addresses, then 50 awards that each pass every one of them: Redis
//!   round trips, the commands the server sent (`engage_redis_commands_total`) and those of
//!   the whole Redis, and the server's CPU, per award, against 50 such awards with nobody
//!   subscribed; and how many rank changes reached the subscribers (each award moves each
//!   of them down one).

use std::{
    net::{IpAddr, SocketAddr},
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use engage::infra::auth::Role;
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::{client::IntoClientRequest, Message};

use crate::{support, Args, Report, Socket, Tally};

/// Where the run reads the server's counters from: an address no flood uses.
const OBSERVER: &str = "127.0.0.250";
const SUBSCRIBERS: i64 = 3_000;
const AWARDS: i64 = 50;
/// Awards are this far apart, so that each is read on its own rather than several coalesced.
const AWARD_EVERY: Duration = Duration::from_millis(300);
/// The first user id of the run's subscribers (a range no other class uses).
const FIRST_USER: i64 = 770_001;
/// The points of each award measured: more than any subscriber has (the most one award
/// may give).
const CLIMB: i64 = 10_000;

pub async fn run(args: &Args, _client: &reqwest::Client, report: &Report) -> anyhow::Result<()> {
    scrape_flood(args, report).await?;
    rank_subscribers(args, report).await
}

fn client_from(address: &str) -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .local_address(address.parse::<IpAddr>()?)
        .timeout(Duration::from_secs(30))
        .build()?)
}

/// What the server and Redis have spent so far: the server's pool round trips, the calls
/// of every command Redis ran, and the server's CPU seconds (when its pid is known).
#[derive(Clone, Copy)]
struct Spent {
    round_trips: f64,
    /// Commands the server sent (a script call counts one).
    sent: f64,
    commands: u64,
    cpu_seconds: Option<f64>,
}

impl Spent {
    async fn now(
        args: &Args,
        redis: &mut redis::aio::MultiplexedConnection,
    ) -> anyhow::Result<Self> {
        let metrics = client_from(OBSERVER)?
            .get(format!("{}/metrics", args.url))
            .send()
            .await?
            .text()
            .await?;
        let round_trips = metrics
            .lines()
            .find_map(|line| line.strip_prefix("engage_redis_round_trips_total "))
            .and_then(|value| value.trim().parse().ok())
            .unwrap_or(0.0);
        let sent = metrics
            .lines()
            .find_map(|line| line.strip_prefix("engage_redis_commands_total "))
            .and_then(|value| value.trim().parse().ok())
            .unwrap_or(0.0);
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(redis)
            .await?;
        let commands = info
            .lines()
            .filter_map(|line| line.split("calls=").nth(1))
            .filter_map(|rest| rest.split(',').next()?.parse::<u64>().ok())
            .sum();
        Ok(Self {
            round_trips,
            sent,
            commands,
            cpu_seconds: args.server_pid.and_then(cpu_seconds),
        })
    }

    /// (round trips, commands sent, Redis-wide commands, CPU seconds) from `earlier` to `self`.
    fn since(&self, earlier: &Self) -> (f64, f64, u64, Option<f64>) {
        (
            self.round_trips - earlier.round_trips,
            self.sent - earlier.sent,
            self.commands.saturating_sub(earlier.commands),
            self.cpu_seconds
                .zip(earlier.cpu_seconds)
                .map(|(a, b)| a - b),
        )
    }
}

/// The user and system CPU time of a process, in seconds (Linux).
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

async fn redis() -> anyhow::Result<redis::aio::MultiplexedConnection> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    Ok(redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?)
}

async fn scrape_flood(args: &Args, report: &Report) -> anyhow::Result<()> {
    let mut redis = redis().await?;
    let window = Duration::from_secs(3);

    let before = Spent::now(args, &mut redis).await?;
    tokio::time::sleep(window).await;
    let idle = Spent::now(args, &mut redis).await?.since(&before);

    let before = Spent::now(args, &mut redis).await?;
    let started = Instant::now();
    let mut scrapers = Vec::new();
    for i in 0..16 {
        let client = client_from(&format!("127.0.0.{}", 2 + i % 4))?;
        let url = format!("{}/metrics", args.url);
        scrapers.push(tokio::spawn(async move {
            let mut tally = Tally::default();
            while started.elapsed() < window {
                match client.get(&url).send().await {
                    Ok(response) => {
                        let status = response.status().as_u16();
                        let _ = response.bytes().await;
                        tally.add(match status {
                            200 => "answered".to_string(),
                            429 => "refused (429)".to_string(),
                            other => format!("HTTP {other}"),
                        });
                    }
                    Err(_) => tally.add("DROPPED"),
                }
            }
            tally
        }));
    }
    let mut tally = Tally::default();
    for scraper in scrapers {
        for (what, count) in scraper.await?.0 {
            *tally.0.entry(what).or_default() += count;
        }
    }
    let elapsed = started.elapsed();
    let flood = Spent::now(args, &mut redis).await?.since(&before);
    let sent: usize = tally.0.values().sum();
    println!(
        "{}",
        report.line(
            "/metrics flood, 16 clients on 4 addresses, 3 s",
            &format!("{sent} ({:.0}/s)", sent as f64 / elapsed.as_secs_f64()),
            &format!(
                "{tally}; server's Redis round trips {:.0} (idle 3 s: {:.0}); Redis-wide commands {} (idle: {})",
                flood.0, idle.0, flood.2, idle.2
            )
        )
    );
    Ok(())
}

/// A `graphql-transport-ws` socket from `address`, signed in as `user`, subscribed to
/// `myRankChanged` and past its first answer (the user's entry).
async fn subscribe_rank(args: &Args, address: &str, user: i64) -> anyhow::Result<Socket> {
    let token = support::tokens().mint(user, Role::User, 3600, None);
    let mut request =
        format!("{}/graphql", args.url.replacen("http", "ws", 1)).into_client_request()?;
    request
        .headers_mut()
        .insert("sec-websocket-protocol", "graphql-transport-ws".parse()?);
    let server: SocketAddr = tokio::net::lookup_host(
        request
            .uri()
            .authority()
            .ok_or_else(|| anyhow::anyhow!("no authority in {}", args.url))?
            .as_str(),
    )
    .await?
    .next()
    .ok_or_else(|| anyhow::anyhow!("{} does not resolve", args.url))?;
    let tcp = tokio::net::TcpSocket::new_v4()?;
    tcp.bind(SocketAddr::new(address.parse()?, 0))?;
    let stream = tcp.connect(server).await?;
    let (mut socket, _) =
        tokio_tungstenite::client_async(request, tokio_tungstenite::MaybeTlsStream::Plain(stream))
            .await?;
    let init = json!({ "type": "connection_init", "payload": { "Authorization": format!("Bearer {token}") } });
    socket.send(Message::text(init.to_string())).await?;
    let subscribe = json!({ "id": "1", "type": "subscribe", "payload": { "query": "subscription { myRankChanged { rank } }" } });
    socket.send(Message::text(subscribe.to_string())).await?;
    loop {
        let message = tokio::time::timeout(Duration::from_secs(30), socket.next())
            .await?
            .ok_or_else(|| anyhow::anyhow!("closed before its first rank"))??;
        if let Message::Text(text) = message {
            let value: Value = serde_json::from_str(&text)?;
            match value["type"].as_str() {
                Some("next") => return Ok(socket),
                Some("connection_ack") | Some("ping") | Some("pong") => {}
                _ => anyhow::bail!("unexpected {value}"),
            }
        }
    }
}

/// Awards `points` to each of `users`, [`AWARD_EVERY`] apart when `paced`, each through a
/// service identity of its own among a hundred and a client address in turn (so that no
/// identity's or address's rate is reached: a release server answers an award in a third of
/// a millisecond, past any address's rate when they are not paced).
async fn award_each(
    args: &Args,
    clients: &[reqwest::Client],
    users: impl Iterator<Item = (i64, i64)>,
    paced: bool,
) -> anyhow::Result<()> {
    let url = format!("{}/graphql", args.url);
    let query = "mutation($u: ID!, $p: Int!, $k: String!) {
        awardPoints(userId: $u, type: SIGN_IN, points: $p, idempotencyKey: $k) { awarded } }";
    for (i, (user, points)) in users.enumerate() {
        let started = Instant::now();
        let service = support::tokens().mint(990_000 + (i % 100) as i64, Role::Service, 3600, None);
        let key = format!("abuse-probes-{user}-{}", uuid::Uuid::new_v4().simple());
        let variables = json!({ "u": user.to_string(), "p": points, "k": key });
        let client = &clients[i % clients.len()];
        support::data(client, &url, &service, query, variables).await?;
        if paced {
            tokio::time::sleep(AWARD_EVERY.saturating_sub(started.elapsed())).await;
        }
    }
    Ok(())
}

async fn rank_subscribers(args: &Args, report: &Report) -> anyhow::Result<()> {
    let mut redis = redis().await?;
    let awarder = (240..244)
        .map(|host| client_from(&format!("127.0.0.{host}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    // The subscribers, ranked: user FIRST_USER + i has 1 + i points (sign-in awards have
    // no daily cap).
    award_each(
        args,
        &awarder,
        (0..SUBSCRIBERS).map(|i| (FIRST_USER + i, 1 + i)),
        false,
    )
    .await?;
    // Climbers: each award below passes every subscriber.
    let climbers = FIRST_USER + SUBSCRIBERS;

    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = Spent::now(args, &mut redis).await?;
    award_each(
        args,
        &awarder,
        (0..AWARDS).map(|i| (climbers + i, CLIMB)),
        true,
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let alone = Spent::now(args, &mut redis).await?.since(&before);

    // 3,000 subscriptions over 30 addresses, 100 connecting at a time.
    let connecting = Instant::now();
    let sockets: Vec<anyhow::Result<Socket>> = futures::stream::iter(0..SUBSCRIBERS)
        .map(|i| async move {
            let address = format!("127.0.0.{}", 2 + i % 30);
            subscribe_rank(args, &address, FIRST_USER + i).await
        })
        .buffer_unordered(100)
        .collect()
        .await;
    let mut failed = Tally::default();
    let sockets: Vec<Socket> = sockets
        .into_iter()
        .filter_map(|socket| socket.map_err(|error| failed.add(error.to_string())).ok())
        .collect();
    let connected = connecting.elapsed();
    // Each subscriber counts the rank changes it is sent from now on.
    let changes = Arc::new(AtomicUsize::new(0));
    let readers: Vec<_> = sockets
        .into_iter()
        .map(|mut socket| {
            let changes = changes.clone();
            tokio::spawn(async move {
                while let Some(Ok(message)) = socket.next().await {
                    if let Message::Text(text) = message {
                        if text.contains("\"next\"") {
                            changes.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        })
        .collect();
    let subscribed = readers.len();

    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = Spent::now(args, &mut redis).await?;
    award_each(
        args,
        &awarder,
        (0..AWARDS).map(|i| (climbers + AWARDS + i, CLIMB)),
        true,
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let watched = Spent::now(args, &mut redis).await?.since(&before);
    let received = changes.load(Ordering::Relaxed);
    for reader in readers {
        reader.abort();
    }

    let per_award = |spent: (f64, f64, u64, Option<f64>)| {
        let cpu = spent.3.map_or("-".to_string(), |cpu| {
            format!("{:.1} ms CPU", cpu * 1e3 / AWARDS as f64)
        });
        format!(
            "{:.1} round trips, {:.1} commands sent, {:.0} Redis-wide commands, {cpu}",
            spent.0 / AWARDS as f64,
            spent.1 / AWARDS as f64,
            spent.2 as f64 / AWARDS as f64
        )
    };
    let failed = if failed.0.is_empty() {
        String::new()
    } else {
        format!(" (failed: {failed})")
    };
    println!(
        "{}",
        report.line(
            "3,000 myRankChanged subscriptions on 30 addresses, then 50 awards passing them all",
            &format!("{subscribed} subscribed in {connected:.1?}{failed}, {AWARDS} awards"),
            &format!(
                "per award: {} with them, {} without; {:.1}× the round trips, {:.1}× the commands sent, {:.1}× the Redis-wide commands; rank changes received {received} of {}",
                per_award(watched),
                per_award(alone),
                watched.0 / alone.0.max(1.0),
                watched.1 / alone.1.max(1.0),
                watched.2 as f64 / alone.2.max(1) as f64,
                subscribed as i64 * AWARDS
            )
        )
    );
    Ok(())
}
