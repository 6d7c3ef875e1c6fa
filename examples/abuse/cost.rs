//! What a document costs is charged by its size, and trusted documents.
//! Costly documents within every size limit, from one address, while another is served.
//!
//! 127.0.0.3 sends an ordinary query at a steady 40 a second, alone and then while
//! 127.0.0.2 sends the costliest documents admission takes (1,000 selections in 11 KB,
//! valid, within every cap) from four concurrent senders as fast as it is allowed: a refused
//! request waits 50 ms before the next. The rows give both addresses' answers and the
//! ordinary client's p50 and p99 alone and under the attack.

use std::{
    net::{IpAddr, Ipv4Addr},
    sync::{
        atomic::{AtomicBool, Ordering},
        Mutex,
    },
    time::{Duration, Instant},
};

use serde_json::json;

use crate::{post, Args, Report, Tally};

const ATTACKER: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
const ORDINARY: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3));
const ATTACKERS: usize = 4;
const PHASE: Duration = Duration::from_secs(10);

pub async fn run(args: &Args, _client: &reqwest::Client, report: &Report) -> anyhow::Result<()> {
    let from = |ip: IpAddr| {
        reqwest::Client::builder()
            .local_address(ip)
            .timeout(Duration::from_secs(30))
            .build()
    };
    let ordinary = from(ORDINARY)?;
    let attacker = from(ATTACKER)?;

    let (alone, alone_tally) = ordinary_phase(args, &ordinary).await;

    let stop = AtomicBool::new(false);
    let attack_tally = Mutex::new(Tally::default());
    let costly = json!({ "query": format!("{{ {} }}", "__typename ".repeat(1_000)) });
    let attack = futures::future::join_all((0..ATTACKERS).map(|_| async {
        while !stop.load(Ordering::Relaxed) {
            let answer = post(&attacker, args, costly.clone()).await;
            let limited = answer["errors"][0]["extensions"]["code"] == "RATE_LIMITED";
            attack_tally.lock().unwrap().answer(&answer);
            if limited {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }));
    let measured = async {
        // The attack's first second is its burst; the steady state is what others live with.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let phase = ordinary_phase(args, &ordinary).await;
        stop.store(true, Ordering::Relaxed);
        phase
    };
    let (_, (attacked, attacked_tally)) = tokio::join!(attack, measured);
    let attack_tally = attack_tally.into_inner().unwrap();

    println!(
        "{}",
        report.line(
            "costly documents (1,000 selections, 11 KB) from 127.0.0.2, 4 senders, 11 s",
            &total(&attack_tally).to_string(),
            &format!("{attack_tally}")
        )
    );
    println!(
        "{}",
        report.line(
            "ordinary queries from 127.0.0.3 at 40/s, alone then under the costly documents",
            &format!("{} + {}", total(&alone_tally), total(&attacked_tally)),
            &format!(
                "alone: {alone_tally}, p50 {}, p99 {}; attacked: {attacked_tally}, p50 {}, \
                 p99 {} ({:.1}× p50)",
                ms(percentile(&alone, 50)),
                ms(percentile(&alone, 99)),
                ms(percentile(&attacked, 50)),
                ms(percentile(&attacked, 99)),
                percentile(&attacked, 50).as_secs_f64()
                    / percentile(&alone, 50).as_secs_f64().max(1e-9)
            )
        )
    );
    Ok(())
}

/// The ordinary client for one phase: its latencies, sorted, and its answers.
async fn ordinary_phase(args: &Args, client: &reqwest::Client) -> (Vec<Duration>, Tally) {
    let query = "query Remarks($item: ID!) { item(id: $item) { id name } remarks(itemId: \
                 $item, first: 10) { edges { node { id content likeCount } } } }";
    let body = json!({ "query": query, "variables": { "item": "1" } });
    let mut every = tokio::time::interval(Duration::from_millis(25));
    let mut latencies = Vec::new();
    let mut tally = Tally::default();
    let started = Instant::now();
    while started.elapsed() < PHASE {
        every.tick().await;
        let sent = Instant::now();
        tally.answer(&post(client, args, body.clone()).await);
        latencies.push(sent.elapsed());
    }
    latencies.sort();
    (latencies, tally)
}

fn total(tally: &Tally) -> usize {
    tally.0.values().sum()
}

fn percentile(sorted: &[Duration], p: usize) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[(sorted.len() - 1) * p / 100]
}

fn ms(duration: Duration) -> String {
    format!("{:.1} ms", duration.as_secs_f64() * 1e3)
}
