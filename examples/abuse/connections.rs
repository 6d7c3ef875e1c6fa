//! Slow bodies, idle sockets and big headers from one address, while another is served.
//!
//! Each abuser connects from loopback addresses of its own (127.0.0.2, …; all reach a
//! server on 127.0.0.1): the server caps connections per address, and the neighbour that
//! probes it meanwhile (127.0.0.3) must be served at once. The server's body deadline and
//! idle time decide how long the rows take: `reliability/abuse` starts it with 5 s each.

use std::{
    collections::BTreeMap,
    net::{Ipv4Addr, SocketAddr},
    time::{Duration, Instant},
};

use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpSocket, TcpStream},
};
use tokio_tungstenite::{
    tungstenite::{client::IntoClientRequest, Message},
    MaybeTlsStream,
};

use crate::{support, Args, Report, Socket};

/// The neighbour: served while the abusers hold their caps.
const NEIGHBOUR: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 3);

pub async fn run(args: &Args, _client: &reqwest::Client, report: &Report) -> anyhow::Result<()> {
    if args.runs("slow-bodies") {
        slow_bodies(args, report).await?;
    }
    if args.runs("idle-sockets") {
        idle_sockets(args, report).await?;
    }
    if args.runs("user-sockets") {
        sockets_of_one_user(args, report).await?;
    }
    if args.runs("pings") {
        ping_flood(args, report).await?;
    }
    if args.runs("big-headers") {
        big_headers(args, report).await?;
    }
    Ok(())
}

fn server(args: &Args) -> anyhow::Result<SocketAddr> {
    Ok(args.url.trim_start_matches("http://").parse()?)
}

/// A TCP connection to the server from `local`.
async fn tcp_from(server: SocketAddr, local: Ipv4Addr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind((local, 0).into())?;
    socket.connect(server).await
}

/// A `graphql-transport-ws` socket from `local`, or why not (`HTTP 429`, `failed`).
async fn websocket_from(args: &Args, local: Ipv4Addr) -> Result<Socket, String> {
    let server = server(args).map_err(|e| e.to_string())?;
    let stream = tcp_from(server, local)
        .await
        .map_err(|_| "connect failed".to_string())?;
    let url = format!("{}/graphql", args.url.replacen("http", "ws", 1));
    let mut request = url.into_client_request().map_err(|e| e.to_string())?;
    request.headers_mut().insert(
        "sec-websocket-protocol",
        "graphql-transport-ws".parse().expect("a header value"),
    );
    match tokio_tungstenite::client_async(request, MaybeTlsStream::Plain(stream)).await {
        Ok((socket, _)) => Ok(socket),
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            Err(format!("HTTP {}", response.status().as_u16()))
        }
        Err(_) => Err("upgrade failed".to_string()),
    }
}

/// Sends `connection_init` and returns `ack`, or how the socket ended.
async fn init(socket: &mut Socket, token: Option<&str>) -> String {
    let payload = token.map_or(
        json!({}),
        |t| json!({ "Authorization": format!("Bearer {t}") }),
    );
    let init = json!({ "type": "connection_init", "payload": payload });
    if socket.send(Message::text(init.to_string())).await.is_err() {
        return "dropped".into();
    }
    loop {
        match tokio::time::timeout(Duration::from_secs(15), socket.next()).await {
            Ok(Some(Ok(Message::Text(text)))) => {
                let message: Value = serde_json::from_str(&text).unwrap_or_default();
                if message["type"] == "connection_ack" {
                    return "ack".into();
                }
            }
            Ok(Some(Ok(Message::Close(frame)))) => {
                return format!("close {}", frame.map_or(0, |f| u16::from(f.code)));
            }
            Ok(Some(Ok(_))) => {}
            Ok(Some(Err(_)) | None) => return "dropped".into(),
            Err(_) => return "silent".into(),
        }
    }
}

/// What the neighbour sees: `/healthz` and a GraphQL query, each with its time.
async fn neighbour_probe(args: &Args) -> String {
    let Ok(client) = reqwest::Client::builder()
        .local_address(std::net::IpAddr::V4(NEIGHBOUR))
        .timeout(Duration::from_secs(10))
        .build()
    else {
        return "no client".into();
    };
    let started = Instant::now();
    let health = match client.get(format!("{}/healthz", args.url)).send().await {
        Ok(response) => response.status().as_u16().to_string(),
        Err(_) => "DROPPED".into(),
    };
    let health_ms = started.elapsed().as_secs_f64() * 1e3;
    let started = Instant::now();
    let answer = client
        .post(format!("{}/graphql", args.url))
        .json(&json!({ "query": "{ seasons { id name } }" }))
        .send()
        .await;
    let query = match answer {
        Ok(response) => {
            let status = response.status();
            let body: Value = response.json().await.unwrap_or_default();
            if body.get("errors").is_none() && body["data"]["seasons"].is_array() {
                "ok".to_string()
            } else {
                body["errors"][0]["extensions"]["code"]
                    .as_str()
                    .map_or_else(|| format!("HTTP {status}"), str::to_string)
            }
        }
        Err(_) => "DROPPED".into(),
    };
    let query_ms = started.elapsed().as_secs_f64() * 1e3;
    format!(
        "127.0.0.3 meanwhile: /healthz {health} in {health_ms:.1} ms, a query {query} in {query_ms:.1} ms"
    )
}

/// Outcomes with the range of times they came after.
#[derive(Default)]
struct Outcomes(BTreeMap<String, (usize, Duration, Duration)>);

impl Outcomes {
    fn add(&mut self, outcome: String, after: Duration) {
        let entry = self
            .0
            .entry(outcome)
            .or_insert((0, Duration::MAX, Duration::ZERO));
        entry.0 += 1;
        entry.1 = entry.1.min(after);
        entry.2 = entry.2.max(after);
    }
}

impl std::fmt::Display for Outcomes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|(outcome, (n, first, last))| {
                format!(
                    "{outcome} {n} after {:.1}–{:.1} s",
                    first.as_secs_f64(),
                    last.as_secs_f64()
                )
            })
            .collect();
        f.write_str(&parts.join(", "))
    }
}

/// The status of a raw HTTP answer (`HTTP 408`), or how the connection ended.
fn status_of(read: std::io::Result<usize>, answer: &[u8]) -> String {
    match read {
        Err(_) if answer.is_empty() => "reset".into(),
        _ if answer.is_empty() => "closed".into(),
        _ => {
            let text = String::from_utf8_lossy(answer);
            text.split_whitespace()
                .nth(1)
                .map_or("garbled".into(), |status| format!("HTTP {status}"))
        }
    }
}

/// POSTs whose bodies trickle a byte a second from 127.0.0.2: the server cuts each at its
/// body deadline, however it trickles, and refuses those past the address's cap.
async fn slow_bodies(args: &Args, report: &Report) -> anyhow::Result<()> {
    let server = server(args)?;
    let from = Ipv4Addr::new(127, 0, 0, 2);
    let wait = Duration::from_secs(args.connection_wait_seconds);
    let mut tasks = Vec::new();
    for _ in 0..args.slow_connections {
        let stream = tcp_from(server, from).await;
        tasks.push(tokio::spawn(async move {
            let opened = Instant::now();
            let Ok(stream) = stream else {
                return ("connect failed".to_string(), opened.elapsed());
            };
            let (mut reader, mut writer) = stream.into_split();
            let trickle = tokio::spawn(async move {
                let head =
                    "POST /graphql HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
                            content-length: 100000\r\n\r\n{\"query\":";
                if writer.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                loop {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    if writer.write_all(b" ").await.is_err() {
                        return;
                    }
                }
            });
            let mut answer = Vec::new();
            let outcome = match tokio::time::timeout(wait, reader.read_to_end(&mut answer)).await {
                Ok(read) => status_of(read, &answer),
                Err(_) => "still open".into(),
            };
            trickle.abort();
            (outcome, opened.elapsed())
        }));
    }
    let held = format!(
        "{} POST bodies trickling a byte a second, from 127.0.0.2",
        args.slow_connections
    );
    let ended = "the same bodies, trickling on";
    report_held_then_ended(args, report, Duration::from_secs(1), &held, ended, tasks).await
}

/// Anonymous sockets from 127.0.0.4 that send nothing but pings (the protocol's and
/// WebSocket frames), a second apart: closed once idle, past the cap refused.
async fn idle_sockets(args: &Args, report: &Report) -> anyhow::Result<()> {
    let from = Ipv4Addr::new(127, 0, 0, 4);
    let wait = Duration::from_secs(args.connection_wait_seconds);
    let mut tasks = Vec::new();
    for _ in 0..args.slow_connections {
        let socket = websocket_from(args, from).await;
        tasks.push(tokio::spawn(async move {
            let opened = Instant::now();
            let mut socket = match socket {
                Ok(socket) => socket,
                Err(refused) => return (refused, opened.elapsed()),
            };
            let acknowledged = init(&mut socket, None).await;
            if acknowledged != "ack" {
                return (acknowledged, opened.elapsed());
            }
            let (mut sink, mut stream) = socket.split();
            let pinging = async {
                loop {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    let ping = Message::text(json!({ "type": "ping" }).to_string());
                    if sink.send(ping).await.is_err()
                        || sink
                            .send(Message::Ping(b"x".to_vec().into()))
                            .await
                            .is_err()
                    {
                        std::future::pending::<()>().await;
                    }
                }
            };
            let closed = async {
                loop {
                    match stream.next().await {
                        Some(Ok(Message::Close(frame))) => {
                            break format!("close {}", frame.map_or(0, |f| u16::from(f.code)))
                        }
                        Some(Ok(_)) => continue,
                        _ => break "dropped".to_string(),
                    }
                }
            };
            let outcome = tokio::select! {
                () = pinging => unreachable!("pings go on"),
                outcome = closed => outcome,
                () = tokio::time::sleep(wait) => "still open".to_string(),
            };
            (outcome, opened.elapsed())
        }));
    }
    let held = format!(
        "{} anonymous WebSockets sending only pings, from 127.0.0.4",
        args.slow_connections
    );
    let ended = "the same sockets, pinging on";
    report_held_then_ended(args, report, Duration::from_secs(2), &held, ended, tasks).await
}

/// The two rows of a class that holds connections: once they are all held (after `settle`),
/// what a neighbour meets meanwhile; then how each one ended, and when.
async fn report_held_then_ended(
    args: &Args,
    report: &Report,
    settle: Duration,
    held: &str,
    ended: &str,
    tasks: Vec<tokio::task::JoinHandle<(String, Duration)>>,
) -> anyhow::Result<()> {
    tokio::time::sleep(settle).await;
    let count = args.slow_connections.to_string();
    println!(
        "{}",
        report.line(held, &count, &neighbour_probe(args).await)
    );
    let mut outcomes = Outcomes::default();
    for task in tasks {
        let (outcome, after) = task.await?;
        outcomes.add(outcome, after);
    }
    println!("{}", report.line(ended, "-", &outcomes.to_string()));
    Ok(())
}

/// One token opening as many sockets as the idle run, from 127.0.0.5.
async fn sockets_of_one_user(args: &Args, report: &Report) -> anyhow::Result<()> {
    let from = Ipv4Addr::new(127, 0, 0, 5);
    let token = support::tokens().mint(880_002, engage::infra::auth::Role::User, 3600, None);
    let mut held = Vec::new();
    let mut tally = crate::Tally::default();
    for _ in 0..args.slow_connections {
        match websocket_from(args, from).await {
            Ok(mut socket) => {
                tally.add(init(&mut socket, Some(&token)).await);
                held.push(socket);
            }
            Err(refused) => tally.add(refused),
        }
    }
    println!(
        "{}",
        report.line(
            &format!(
                "{} WebSockets with one token, from 127.0.0.5",
                args.slow_connections
            ),
            &args.slow_connections.to_string(),
            &tally.to_string()
        )
    );
    drop(held);
    Ok(())
}

/// 50,000 protocol pings at once on one socket, from 127.0.0.6.
async fn ping_flood(args: &Args, report: &Report) -> anyhow::Result<()> {
    const PINGS: usize = 50_000;
    let mut socket = websocket_from(args, Ipv4Addr::new(127, 0, 0, 6))
        .await
        .map_err(|refused| anyhow::anyhow!("the ping socket was refused: {refused}"))?;
    anyhow::ensure!(init(&mut socket, None).await == "ack", "no ack");
    let (mut sink, mut stream) = socket.split();
    let started = Instant::now();
    let sending = async {
        for _ in 0..PINGS {
            let ping = Message::text(r#"{"type":"ping"}"#);
            if sink.feed(ping).await.is_err() {
                break;
            }
        }
        let _ = sink.flush().await;
    };
    let mut pongs = 0;
    let mut end = "open".to_string();
    let counting = async {
        loop {
            match tokio::time::timeout(Duration::from_secs(2), stream.next()).await {
                Ok(Some(Ok(Message::Text(_)))) => pongs += 1,
                Ok(Some(Ok(Message::Close(frame)))) => {
                    end = format!("close {}", frame.map_or(0, |f| u16::from(f.code)));
                    break;
                }
                Ok(Some(Ok(_))) => {}
                Ok(Some(Err(_)) | None) => {
                    end = "dropped".into();
                    break;
                }
                Err(_) => break, // quiet for 2 s: every ping was read
            }
        }
    };
    futures::join!(sending, counting);
    println!(
        "{}",
        report.line(
            "50,000 pings on one socket, from 127.0.0.6",
            &format!("50,000 in {:.1} s", started.elapsed().as_secs_f64()),
            &format!("pong {pongs}; socket {end}")
        )
    );
    Ok(())
}

/// Connections from six addresses (127.0.0.10–15) each holding a request head one byte
/// short of the cap, unfinished: what the server's memory grows by, and gives back once
/// they close. Then one head past the cap.
async fn big_headers(args: &Args, report: &Report) -> anyhow::Result<()> {
    let server = server(args)?;
    let prefix = "GET /healthz HTTP/1.1\r\nhost: x\r\nx-padding: ";
    let unfinished = format!(
        "{prefix}{}",
        "a".repeat(args.max_header_bytes - 1 - prefix.len())
    );
    let before = report.rss_mb();
    let mut held = Vec::new();
    let mut tally = crate::Tally::default();
    for n in 0..args.big_headers {
        let local = Ipv4Addr::new(127, 0, 0, 10 + (n % 6) as u8);
        match tcp_from(server, local).await {
            Ok(mut stream) => match stream.write_all(unfinished.as_bytes()).await {
                Ok(()) => {
                    tally.add("held");
                    held.push(stream);
                }
                Err(_) => tally.add("write failed"),
            },
            Err(_) => tally.add("connect failed"),
        }
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let holding = report.rss_mb();
    let grown = |from: Option<f64>, to: Option<f64>| match (from, to) {
        (Some(from), Some(to)) => format!("{:+.0} MB", to - from),
        _ => "-".into(),
    };
    println!(
        "{}",
        report.line(
            &format!(
                "{} connections holding {} bytes of unfinished headers, from 127.0.0.10–15",
                args.big_headers,
                args.max_header_bytes - 1
            ),
            &args.big_headers.to_string(),
            &format!(
                "{tally}; RSS {} since before; {}",
                grown(before, holding),
                neighbour_probe(args).await
            )
        )
    );
    // Closed: the server's memory comes back once its allocator returns the freed pages.
    // mimalloc does so lazily, on a worker thread's next allocations: an idle server keeps
    // them, one that serves anything (here /healthz twice a second, as a load balancer
    // asks) gives them back. How long that took is part of the row.
    drop(held);
    let closed = Instant::now();
    let back = |rss: Option<f64>| match (before, rss) {
        (Some(before), Some(rss)) => rss <= before + 10.0,
        _ => true,
    };
    let health = reqwest::Client::new();
    while !back(report.rss_mb()) && closed.elapsed() < Duration::from_secs(60) {
        let _ = health.get(format!("{}/healthz", args.url)).send().await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    println!(
        "{}",
        report.line(
            "the same connections, closed by the client (/healthz asked every 0.5 s)",
            "-",
            &format!(
                "RSS {} since they were held, {} since before, {:.1} s after they closed",
                grown(holding, report.rss_mb()),
                grown(before, report.rss_mb()),
                closed.elapsed().as_secs_f64()
            )
        )
    );

    // A head that reaches the cap (exactly: the server then has read all of it, and its
    // answer is not overtaken by a reset).
    let mut stream = tcp_from(server, Ipv4Addr::new(127, 0, 0, 16)).await?;
    let past = format!("{unfinished}a");
    stream.write_all(past.as_bytes()).await?;
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer))
        .await
        .unwrap_or(Ok(0));
    println!(
        "{}",
        report.line(
            &format!("a request head of {} bytes, unfinished", past.len()),
            "1",
            &status_of(read, &answer)
        )
    );
    Ok(())
}
