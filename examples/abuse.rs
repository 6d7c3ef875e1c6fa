//! Hostile input against a running server, class by class, with figures: what it answered,
//! how long it took, the connections it held and its memory before and after. Run by
//! `reliability/abuse`, which starts a release server of its own; RELIABILITY.md's
//! "Hostile input" table comes from its output.
//!
//! ```sh
//! reliability/abuse                     # builds, starts a server, runs every class
//! cargo run --release --example abuse -- --url http://127.0.0.1:8000 --server-pid $(pgrep -n engage)
//! ```

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use clap::Parser;
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::{client::IntoClientRequest, Message};

#[path = "support/hostile.rs"]
mod hostile;
#[path = "support/mod.rs"]
mod support;

// The second round's classes, one file per kind of abuse, each with a `run` that prints its
// rows. They connect from loopback addresses other than 127.0.0.1 where a per-address rule
// is at stake, as many clients would.
#[path = "abuse/connections.rs"]
mod connections;
#[path = "abuse/cost.rs"]
mod cost;
#[path = "abuse/probes.rs"]
mod probes;

#[derive(Parser)]
struct Args {
    /// The server's base URL.
    #[arg(long, default_value = "http://127.0.0.1:8000")]
    url: String,
    /// The server process, for its RSS and liveness.
    #[arg(long)]
    server_pid: Option<u32>,
    /// Half-open sockets to hold at once.
    #[arg(long, default_value_t = 1500)]
    half_open: usize,
    /// How long to wait for the server to close half-open sockets (its header-read
    /// timeout is 30 s by default).
    #[arg(long, default_value_t = 40)]
    half_open_wait_seconds: u64,
    /// Slow bodies, idle sockets and one user's sockets to open, each from an address of
    /// their own (past the server's cap per address, 256 by default, they are refused).
    #[arg(long, default_value_t = 300)]
    slow_connections: usize,
    /// How long to wait for the server to cut slow bodies and close idle sockets (its body
    /// deadline is 30 s and its idle time 300 s by default; `reliability/abuse` sets 5 s).
    #[arg(long, default_value_t = 40)]
    connection_wait_seconds: u64,
    /// Connections holding unfinished headers, from six addresses.
    #[arg(long, default_value_t = 1500)]
    big_headers: usize,
    /// The server's `ENGAGE_MAX_HEADER_BYTES`.
    #[arg(long, default_value_t = 32 * 1024)]
    max_header_bytes: usize,
    /// Run only these classes (comma separated): documents, fragments, websocket,
    /// persisted, names, half-open, slow-bodies, idle-sockets, user-sockets, pings,
    /// big-headers, cost, probes. All of them when not given.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
}

impl Args {
    /// Whether the run includes `class`.
    fn runs(&self, class: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|only| only == class)
    }
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()?;
    let report = Report::new(&args);
    println!("{}", report.line("start", "-", "-"));

    if args.runs("documents") {
        hostile_documents(&args, &client, &report).await?;
    }
    if args.runs("fragments") {
        fragment_bombs(&args, &client, &report).await?;
    }
    if args.runs("websocket") {
        websocket_abuse(&args, &report).await?;
    }
    if args.runs("persisted") {
        persisted_query_flood(&args, &client, &report).await?;
    }
    if args.runs("names") {
        invented_operation_names(&args, &client, &report).await?;
    }
    if args.runs("half-open") {
        half_open_sockets(&args, &client, &report).await?;
    }
    connections::run(&args, &client, &report).await?;
    if args.runs("cost") {
        cost::run(&args, &client, &report).await?;
    }
    if args.runs("probes") {
        probes::run(&args, &client, &report).await?;
    }

    println!("{}", report.line("end", "-", "-"));
    anyhow::ensure!(report.alive(), "the server process is gone");
    Ok(())
}

/// Prints one row per class: what was sent, what came back, and the server's RSS and
/// liveness at that moment.
struct Report {
    pid: Option<u32>,
}

impl Report {
    fn new(args: &Args) -> Self {
        Self {
            pid: args.server_pid,
        }
    }

    fn rss_mb(&self) -> Option<f64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid?)).ok()?;
        let kb: f64 = status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        Some(kb / 1024.0)
    }

    fn alive(&self) -> bool {
        self.pid
            .is_none_or(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists())
    }

    fn line(&self, class: &str, sent: &str, answers: &str) -> String {
        let rss = self
            .rss_mb()
            .map_or("-".to_string(), |mb| format!("{mb:.0} MB"));
        format!(
            "| {class} | {sent} | {answers} | RSS {rss} | alive {} |",
            if self.alive() { "yes" } else { "NO" }
        )
    }
}

/// Tally of answers: error codes, `ok`, WebSocket close codes, 5xx.
#[derive(Default)]
struct Tally(BTreeMap<String, usize>);

impl Tally {
    fn add(&mut self, what: impl Into<String>) {
        *self.0.entry(what.into()).or_default() += 1;
    }

    fn answer(&mut self, body: &Value) {
        match body["errors"][0]["extensions"]["code"].as_str() {
            Some(code) => self.add(code),
            None if body.get("errors").is_some() => self.add("UNCODED"),
            None => self.add("ok"),
        }
    }
}

impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self.0.iter().map(|(k, v)| format!("{k} {v}")).collect();
        f.write_str(&parts.join(", "))
    }
}

async fn post(client: &reqwest::Client, args: &Args, body: Value) -> Value {
    match client
        .post(format!("{}/graphql", args.url))
        .json(&body)
        .send()
        .await
    {
        Ok(response) if response.status().is_server_error() => {
            json!({ "errors": [{ "extensions": { "code": format!("HTTP {}", response.status()) } }] })
        }
        Ok(response) => response
            .json()
            .await
            .unwrap_or(json!({ "errors": [{ "extensions": { "code": "NOT JSON" } }] })),
        Err(_) => json!({ "errors": [{ "extensions": { "code": "DROPPED" } }] }),
    }
}

async fn hostile_documents(
    args: &Args,
    client: &reqwest::Client,
    report: &Report,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut tallies: BTreeMap<&str, Tally> = BTreeMap::new();
    let bombs = hostile::nesting_bombs(3_000);
    for (_, document) in &bombs {
        tallies
            .entry("POST")
            .or_default()
            .answer(&post(client, args, json!({ "query": document })).await);
        let hash = hex::encode(Sha256::digest(document.as_bytes()));
        let persisted = json!({ "query": document, "extensions": { "persistedQuery": { "version": 1, "sha256Hash": hash } } });
        tallies
            .entry("APQ")
            .or_default()
            .answer(&post(client, args, persisted).await);
        for protocol in ["graphql-transport-ws", "graphql-ws"] {
            let answer =
                websocket_operation(args, protocol, None, json!({ "query": document })).await;
            tallies.entry(protocol).or_default().answer(&answer);
        }
    }
    for (_, document) in hostile::nesting_bombs(500) {
        let query = serde_urlencoded::to_string([("query", document)])?;
        let url = format!("{}/graphql?{query}", args.url);
        let answer = match client.get(url).send().await {
            Ok(response) => response.json().await.unwrap_or(json!({})),
            Err(_) => json!({ "errors": [{ "extensions": { "code": "DROPPED" } }] }),
        };
        tallies.entry("GET").or_default().answer(&answer);
    }
    let answers = tallies
        .iter()
        .map(|(via, tally)| format!("{via}: {tally}"))
        .collect::<Vec<_>>()
        .join("; ");
    println!(
        "{}",
        report.line(
            "nesting bombs (8 shapes × CR/LF/CRLF/CR-only, 3,000 deep; GET 500)",
            &format!(
                "{} per transport in {:.1} s",
                bombs.len(),
                started.elapsed().as_secs_f64()
            ),
            &answers
        )
    );
    Ok(())
}

async fn fragment_bombs(
    args: &Args,
    client: &reqwest::Client,
    report: &Report,
) -> anyhow::Result<()> {
    let mut tally = Tally::default();
    let mut slowest = Duration::ZERO;
    // As long a chain as fits in a 64 KiB body.
    for (_, document) in hostile::fragment_bombs(1_500) {
        for _ in 0..10 {
            let started = Instant::now();
            tally.answer(&post(client, args, json!({ "query": document })).await);
            slowest = slowest.max(started.elapsed());
        }
    }
    println!(
        "{}",
        report.line(
            "fragment fan-out 2^40, chain of 1,500, cycle (POST)",
            "30",
            &format!("{tally}; slowest {:.1} ms", slowest.as_secs_f64() * 1e3)
        )
    );
    Ok(())
}

async fn connect(args: &Args, protocol: &str) -> anyhow::Result<Socket> {
    let url = format!("{}/graphql", args.url.replacen("http", "ws", 1));
    let mut request = url.into_client_request()?;
    request
        .headers_mut()
        .insert("sec-websocket-protocol", protocol.parse()?);
    Ok(tokio_tungstenite::connect_async(request).await?.0)
}

/// Opens a socket, initialises it and runs one operation; the answer, or the close code.
async fn websocket_operation(
    args: &Args,
    protocol: &str,
    token: Option<&str>,
    payload: Value,
) -> Value {
    let dropped = json!({ "errors": [{ "extensions": { "code": "DROPPED" } }] });
    let Ok(mut socket) = connect(args, protocol).await else {
        return dropped;
    };
    let init = token.map_or(
        json!({}),
        |t| json!({ "Authorization": format!("Bearer {t}") }),
    );
    let _ = socket
        .send(Message::text(
            json!({ "type": "connection_init", "payload": init }).to_string(),
        ))
        .await;
    let start = if protocol == "graphql-ws" {
        "start"
    } else {
        "subscribe"
    };
    let message = json!({ "id": "1", "type": start, "payload": payload });
    let _ = socket.send(Message::text(message.to_string())).await;
    let answer = read_answer(&mut socket, "1").await;
    let _ = socket.close(None).await;
    answer
}

async fn read_answer(socket: &mut Socket, id: &str) -> Value {
    loop {
        let next = tokio::time::timeout(Duration::from_secs(15), socket.next()).await;
        let message = match next {
            Ok(Some(Ok(message))) => message,
            Ok(Some(Err(_)) | None) => {
                return json!({ "errors": [{ "extensions": { "code": "DROPPED" } }] })
            }
            Err(_) => return json!({ "errors": [{ "extensions": { "code": "SILENT" } }] }),
        };
        match message {
            Message::Text(text) => {
                let value: Value = serde_json::from_str(&text).unwrap_or_default();
                if value["id"] != id {
                    continue;
                }
                return match value["type"].as_str() {
                    Some("error") if value["payload"].is_array() => {
                        json!({ "errors": value["payload"] })
                    }
                    Some("error") => json!({ "errors": [value["payload"]] }),
                    _ => value["payload"].clone(),
                };
            }
            Message::Close(frame) => {
                let code = frame.map_or(0, |f| u16::from(f.code));
                return json!({ "errors": [{ "extensions": { "code": format!("close {code}") } }] });
            }
            _ => {}
        }
    }
}

async fn websocket_abuse(args: &Args, report: &Report) -> anyhow::Result<()> {
    let token = support::tokens().mint(880_001, engage::infra::auth::Role::User, 3600, None);

    // A flood of operations on one socket: each counts against the rates.
    let mut tally = Tally::default();
    let mut socket = connect(args, "graphql-transport-ws").await?;
    let init = json!({ "type": "connection_init", "payload": { "Authorization": format!("Bearer {token}") } });
    socket.send(Message::text(init.to_string())).await?;
    let started = Instant::now();
    for i in 0..1000 {
        let message = json!({ "id": i.to_string(), "type": "subscribe", "payload": { "query": "{ viewer { id } }" } });
        socket.send(Message::text(message.to_string())).await?;
    }
    // Answers come in any order: read until every operation has its first one.
    let mut answered = std::collections::HashSet::new();
    while answered.len() < 1000 {
        let Ok(Some(Ok(Message::Text(text)))) =
            tokio::time::timeout(Duration::from_secs(15), socket.next()).await
        else {
            tally.add("DROPPED or SILENT");
            break;
        };
        let message: Value = serde_json::from_str(&text).unwrap_or_default();
        let Some(id) = message["id"].as_str() else {
            continue;
        };
        if !answered.insert(id.to_string()) {
            continue;
        }
        match message["type"].as_str() {
            Some("error") => tally.answer(&json!({ "errors": message["payload"] })),
            _ => tally.answer(&message["payload"]),
        }
    }
    let _ = socket.close(None).await;
    println!(
        "{}",
        report.line(
            "1,000 queries on one socket at once (graphql-transport-ws, one user)",
            &format!("1,000 in {:.2} s", started.elapsed().as_secs_f64()),
            &tally.to_string()
        )
    );

    // Messages over the size limit.
    let mut tally = Tally::default();
    for protocol in ["graphql-transport-ws", "graphql-ws"] {
        let padding = " ".repeat(1 << 20);
        let payload = json!({ "query": format!("{{ __typename {padding} }}") });
        tally.answer(&websocket_operation(args, protocol, None, payload).await);
    }
    println!(
        "{}",
        report.line("1 MiB message, both protocols", "2", &tally.to_string())
    );

    // Sockets that never initialise.
    let started = Instant::now();
    let mut sockets = Vec::new();
    for _ in 0..200 {
        sockets.push(connect(args, "graphql-transport-ws").await?);
    }
    let mut tally = Tally::default();
    for socket in &mut sockets {
        tally.answer(&read_answer(socket, "none").await);
    }
    println!(
        "{}",
        report.line(
            "200 sockets without connection_init",
            "200",
            &format!("{tally} after {:.1} s", started.elapsed().as_secs_f64())
        )
    );
    Ok(())
}

async fn persisted_query_flood(
    args: &Args,
    client: &reqwest::Client,
    report: &Report,
) -> anyhow::Result<()> {
    let redis = redis::Client::open("redis://127.0.0.1:6379")?;
    let mut conn = redis.get_multiplexed_async_connection().await?;
    let used = |info: String| -> i64 {
        info.lines()
            .find_map(|l| l.strip_prefix("used_memory:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    let before = used(
        redis::cmd("INFO")
            .arg("memory")
            .query_async(&mut conn)
            .await?,
    );
    let mut tally = Tally::default();
    for i in 0..300 {
        let padding = format!("# {i} {}\n", "x".repeat(30_000));
        let document = format!("{padding}{{ __typename }}");
        let hash = hex::encode(Sha256::digest(document.as_bytes()));
        let body = json!({ "query": document, "extensions": { "persistedQuery": { "version": 1, "sha256Hash": hash } } });
        tally.answer(&post(client, args, body).await);
    }
    let after = used(
        redis::cmd("INFO")
            .arg("memory")
            .query_async(&mut conn)
            .await?,
    );
    println!(
        "{}",
        report.line(
            "300 distinct 30 KB persisted queries, anonymous",
            "300",
            &format!(
                "{tally}; Redis used_memory {:+.2} MB",
                (after - before) as f64 / 1e6
            )
        )
    );
    Ok(())
}

async fn invented_operation_names(
    args: &Args,
    client: &reqwest::Client,
    report: &Report,
) -> anyhow::Result<()> {
    let metrics = |text: String| (text.len(), text.matches("operation=").count());
    let before = metrics(
        client
            .get(format!("{}/metrics", args.url))
            .send()
            .await?
            .text()
            .await?,
    );
    let mut tally = Tally::default();
    for i in 0..2000 {
        let name = format!("Invented{i}");
        let body =
            json!({ "query": format!("query {name} {{ __typename }}"), "operationName": name });
        tally.answer(&post(client, args, body).await);
    }
    let after = metrics(
        client
            .get(format!("{}/metrics", args.url))
            .send()
            .await?
            .text()
            .await?,
    );
    println!(
        "{}",
        report.line(
            "2,000 invented operation names",
            "2,000",
            &format!(
                "{tally}; /metrics {} → {} bytes, operation labels {} → {}",
                before.0, after.0, before.1, after.1
            )
        )
    );
    Ok(())
}

async fn half_open_sockets(
    args: &Args,
    client: &reqwest::Client,
    report: &Report,
) -> anyhow::Result<()> {
    let address: std::net::SocketAddr = args.url.trim_start_matches("http://").parse()?;
    let mut held = Vec::new();
    for i in 0..args.half_open {
        // From six addresses, each within the server's cap per address (127.0.0.1 probes).
        let local = std::net::Ipv4Addr::new(127, 0, 0, 20 + (i % 6) as u8);
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind((local, 0).into())?;
        let mut socket = socket.connect(address).await?;
        if i % 2 == 0 {
            // Half a request; the other half send nothing at all.
            socket
                .write_all(b"POST /graphql HTTP/1.1\r\nHost: x\r\n")
                .await?;
        }
        held.push(socket);
    }
    let started = Instant::now();
    let health = client.get(format!("{}/healthz", args.url)).send().await?;
    let health_ms = started.elapsed().as_secs_f64() * 1e3;
    println!(
        "{}",
        report.line(
            &format!("{} half-open sockets held", args.half_open),
            &format!("{}", args.half_open),
            &format!("/healthz {} in {health_ms:.1} ms", health.status())
        )
    );

    let started = Instant::now();
    let deadline = started + Duration::from_secs(args.half_open_wait_seconds);
    let mut closed = 0;
    let mut last_close = Duration::ZERO;
    for socket in &mut held {
        let mut buffer = [0u8; 512];
        let left = deadline.saturating_duration_since(Instant::now());
        // Any outcome but a time-out is the server's doing: a 408 then EOF, an EOF or a reset.
        if tokio::time::timeout(left, socket.read(&mut buffer))
            .await
            .is_ok()
        {
            closed += 1;
            last_close = last_close.max(started.elapsed());
        }
    }
    drop(held);
    tokio::time::sleep(Duration::from_secs(1)).await;
    println!(
        "{}",
        report.line(
            "the same sockets, left alone",
            "-",
            &format!(
                "{closed} of {} closed by the server, the last {:.1} s after the probe",
                args.half_open,
                last_close.as_secs_f64()
            )
        )
    );
    Ok(())
}
