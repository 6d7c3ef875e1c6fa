//! A rolling stop as the clients see it: likes sent without pause through a load balancer,
//! and a `likeCountChanged` subscription held through it, while one instance behind it is
//! stopped with SIGTERM (by `deploy/smoke`, which puts nginx in front of two instances).
//!
//! It prints `subscribed via <instance>` each time the subscription connects (the balancer
//! names the instance in `X-Engage-Upstream`), so that the script knows which one to stop,
//! and a summary at the end. It checks that every like was answered 200 without errors,
//! that the subscription was closed with 1001 by the stopping instance, resumed on the
//! other and kept receiving counts, and that its last count is the number of likes. Any
//! failure exits 1.

use std::{
    sync::{
        atomic::{AtomicI64, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use clap::Parser;
use engage::infra::auth::Role;
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::{client::IntoClientRequest, Message};
use tokio_util::sync::CancellationToken;

#[path = "support/mod.rs"]
mod support;

#[derive(Parser)]
struct Args {
    /// The load balancer's base URL.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
    /// How long likes are sent.
    #[arg(long, default_value_t = 15)]
    seconds: u64,
    /// Clients sending likes at once.
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// Pause of each client between two likes: 4 clients every 80 ms stay well within
    /// the per-IP rate of one instance, which takes them all once the other has stopped.
    #[arg(long, default_value_t = 80)]
    pause_ms: u64,
}

const LIKE: &str = "mutation($id: ID!) { likeRemark(remarkId: $id) { likeCount changed } }";
const LIVE_COUNT: &str =
    "subscription($ids: [ID!]!) { likeCountChanged(remarkIds: $ids) { likeCount } }";
/// Users who like, one like each, from this id up.
const FIRST_VOTER: i64 = 1000;

/// What the subscription went through, connection after connection.
#[derive(Default)]
struct Subscription {
    /// Each connection: the instance that served it and the counts it received.
    connections: Vec<(String, Vec<i64>)>,
    /// How each connection ended: a close code, or what broke it.
    ends: Vec<String>,
}

impl Subscription {
    fn last_count(&self) -> Option<i64> {
        self.connections
            .iter()
            .rev()
            .find_map(|(_, counts)| counts.last().copied())
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let tokens = support::tokens();
    let http = reqwest::Client::new();
    let graphql = format!("{}/graphql", args.url);

    let admin = tokens.mint(1, Role::Admin, 3600, None);
    let item = support::data(
        &http,
        &graphql,
        &admin,
        "mutation { createItem(input: { name: \"Rolling stop\" }) { id } }",
        json!({}),
    )
    .await?["createItem"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let author = tokens.mint(2, Role::User, 3600, None);
    let remark = support::data(
        &http,
        &graphql,
        &author,
        "mutation($input: CreateRemarkInput!) { createRemark(input: $input) { id } }",
        json!({ "input": { "itemId": item, "score": 5, "content": "still here" } }),
    )
    .await?["createRemark"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();

    let subscription = Arc::new(Mutex::new(Subscription::default()));
    let stop_watching = CancellationToken::new();
    let watcher = tokio::spawn(watch(
        graphql.replacen("http", "ws", 1),
        remark.clone(),
        subscription.clone(),
        stop_watching.clone(),
    ));

    let began = Instant::now();
    let load = Duration::from_secs(args.seconds);
    let next_voter = Arc::new(AtomicI64::new(FIRST_VOTER));
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut clients = Vec::new();
    for _ in 0..args.clients {
        let (http, graphql, remark) = (http.clone(), graphql.clone(), remark.clone());
        let (tokens, next_voter, failures) = (tokens.clone(), next_voter.clone(), failures.clone());
        let pause = Duration::from_millis(args.pause_ms);
        clients.push(tokio::spawn(async move {
            let mut answered = 0u64;
            while began.elapsed() < load {
                let voter = next_voter.fetch_add(1, Ordering::Relaxed);
                let token = tokens.mint(voter, Role::User, 3600, None);
                match like(&http, &graphql, &token, &remark).await {
                    Ok(()) => answered += 1,
                    Err(failure) => failures
                        .lock()
                        .expect("poisoned")
                        .push(format!("{:.1}s: {failure}", began.elapsed().as_secs_f64())),
                }
                tokio::time::sleep(pause).await;
            }
            answered
        }));
    }
    let mut answered = 0;
    for client in clients {
        answered += client.await?;
    }
    let sent = next_voter.load(Ordering::Relaxed) - FIRST_VOTER;

    // The last like's count reaches the subscription within moments.
    let expected = i64::try_from(answered)?;
    for _ in 0..100 {
        if subscription.lock().expect("poisoned").last_count() == Some(expected) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop_watching.cancel();
    let _ = watcher.await;

    let failures = failures.lock().expect("poisoned");
    let subscription = subscription.lock().expect("poisoned");
    println!(
        "likes: {sent} sent, {answered} answered 200 without errors, {} failed",
        failures.len()
    );
    for failure in failures.iter().take(10) {
        println!("  failed: {failure}");
    }
    let path: Vec<String> = subscription
        .connections
        .iter()
        .zip(
            subscription
                .ends
                .iter()
                .map(Some)
                .chain(std::iter::repeat(None)),
        )
        .map(|((instance, counts), end)| {
            let end = end.map_or(String::new(), |end| format!(", ended by {end}"));
            format!("via {instance} ({} counts{end})", counts.len())
        })
        .collect();
    println!("subscription: {}", path.join(" -> "));
    let last = subscription.last_count();
    println!("last count received: {last:?}, likes answered: {expected}");

    let mut problems = Vec::new();
    if !failures.is_empty() {
        problems.push("some likes failed".to_string());
    }
    let went_away = subscription.ends.iter().position(|end| end == "close 1001");
    match went_away {
        None => problems.push("the subscription was never closed with 1001".into()),
        Some(index) => match subscription.connections.get(index + 1) {
            None => problems.push("the subscription did not reconnect".into()),
            Some((instance, counts)) => {
                if *instance == subscription.connections[index].0 {
                    problems.push(format!("the subscription came back to {instance}"));
                }
                // The first count is the current one, sent on subscribing; more are updates.
                if counts.len() < 2 {
                    problems.push("no update after the subscription resumed".into());
                }
            }
        },
    }
    if last != Some(expected) {
        problems.push(format!(
            "the last count received is {last:?}, not {expected}"
        ));
    }
    if problems.is_empty() {
        println!("ok");
        Ok(())
    } else {
        for problem in &problems {
            println!("FAILED: {problem}");
        }
        std::process::exit(1);
    }
}

/// One like by a user who never liked the remark: answered 200, without errors, counted.
async fn like(
    http: &reqwest::Client,
    graphql: &str,
    token: &str,
    remark: &str,
) -> Result<(), String> {
    let response = http
        .post(graphql)
        .bearer_auth(token)
        .json(&json!({ "query": LIKE, "variables": { "id": remark } }))
        .send()
        .await
        .map_err(|error| format!("not answered: {error}"))?;
    let status = response.status();
    let body: Value = response
        .json()
        .await
        .map_err(|error| format!("{status}, unreadable body: {error}"))?;
    if status != 200 || body.get("errors").is_some() {
        return Err(format!("{status}: {body}"));
    }
    if body["data"]["likeRemark"]["changed"] != true {
        return Err(format!("not counted: {body}"));
    }
    Ok(())
}

/// Holds the subscription until `stop`, connecting again (after a short pause, as the
/// dashboard does) whenever the connection ends.
async fn watch(
    ws_url: String,
    remark: String,
    subscription: Arc<Mutex<Subscription>>,
    stop: CancellationToken,
) {
    while !stop.is_cancelled() {
        let end = tokio::select! {
            end = follow(&ws_url, &remark, &subscription) => end,
            () = stop.cancelled() => return,
        };
        subscription.lock().expect("poisoned").ends.push(end);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One connection of the subscription, until it ends; how it ended.
async fn follow(ws_url: &str, remark: &str, subscription: &Mutex<Subscription>) -> String {
    let Ok(mut request) = ws_url.into_client_request() else {
        return "a bad URL".into();
    };
    request.headers_mut().insert(
        "sec-websocket-protocol",
        "graphql-transport-ws".parse().expect("a valid header"),
    );
    let (mut socket, response) = match tokio_tungstenite::connect_async(request).await {
        Ok(connected) => connected,
        Err(error) => return format!("no connection: {error}"),
    };
    let instance = response
        .headers()
        .get("x-engage-upstream")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("an unnamed instance")
        .to_string();
    println!("subscribed via {instance}");
    subscription
        .lock()
        .expect("poisoned")
        .connections
        .push((instance, Vec::new()));
    let init = json!({ "type": "connection_init", "payload": {} });
    let subscribe = json!({ "id": "1", "type": "subscribe",
        "payload": { "query": LIVE_COUNT, "variables": { "ids": [remark] } } });
    for message in [init, subscribe] {
        if socket
            .send(Message::text(message.to_string()))
            .await
            .is_err()
        {
            return "not sent".into();
        }
    }
    while let Some(message) = socket.next().await {
        let text = match message {
            Ok(Message::Text(text)) => text,
            Ok(Message::Close(frame)) => {
                return frame.map_or("close without a code".into(), |frame| {
                    format!("close {}", u16::from(frame.code))
                })
            }
            Ok(_) => continue,
            Err(error) => return format!("a broken connection: {error}"),
        };
        let Ok(body) = serde_json::from_str::<Value>(&text) else {
            continue;
        };
        if body["type"] == "ping" {
            let _ = socket
                .send(Message::text(json!({ "type": "pong" }).to_string()))
                .await;
        }
        if let Some(count) = body["payload"]["data"]["likeCountChanged"]["likeCount"].as_i64() {
            let mut subscription = subscription.lock().expect("poisoned");
            if let Some((_, counts)) = subscription.connections.last_mut() {
                counts.push(count);
            }
        }
    }
    "the end of the stream".into()
}
