//! The probes (`/metrics`, `/readyz`) and the shared board readers cost a client what they cost the server.
//!
//! - Production serves `/metrics` only on `ENGAGE_METRICS_BIND`, and does not start without
//!   it unless `ENGAGE_METRICS_PUBLIC=true`.
//! - What `/metrics` reads from Redis is read at most once a second, however many scrapes.
//! - `/readyz` and `/metrics` are rate-limited per client IP, well above a load balancer's
//!   and Prometheus' polling; `/healthz` is not.
//! - `myRankChanged`'s subscribers of a board share one reader, which moves their ranks by
//!   each award: an award costs no more Redis commands with 300 subscribers than with none,
//!   but the awarded viewer's own read.

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use engage::{
    app::App,
    infra::{auth::Role, config::Environment},
};
use serde_json::json;

use crate::harness::{
    base_config, client_from, next_data, next_message, websocket_from, Socket, TestApp,
};

/// A free loopback address for a listener of the test's own.
fn free_address() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// Round trips the app made to Redis through its pool so far.
fn round_trips(app: &TestApp) -> u64 {
    app.redis_round_trips()
}

/// The Redis commands the app sent so far (a script call counts one).
fn commands(app: &TestApp) -> u64 {
    app.redis_commands()
}

#[tokio::test]
async fn production_refuses_to_start_without_an_address_for_metrics() {
    let mut config = base_config();
    config.bind = "127.0.0.1:0".parse().unwrap();
    config.environment = Environment::Production;
    // Random, so that production's check of the secret does not speak first.
    config.jwt_secret = Some("b1f4c0d9e83a27f6519d0c4ab7e26f83d5a09c1e".into());
    let refused = format!(
        "{:#}",
        App::start(config.clone()).await.err().expect("refused")
    );
    assert!(
        refused.contains("ENGAGE_METRICS_BIND") && refused.contains("ENGAGE_METRICS_PUBLIC=true"),
        "the message says what to set: {refused}"
    );
    config.metrics_public = Some(false);
    let refused = format!(
        "{:#}",
        App::start(config.clone()).await.err().expect("refused")
    );
    assert!(refused.contains("ENGAGE_METRICS_BIND"), "{refused}");
    // Either answer lets it start.
    config.metrics_public = Some(true);
    config.check().unwrap();
    config.metrics_public = None;
    config.metrics_bind = Some("127.0.0.1:9123".parse().unwrap());
    config.check().unwrap();
}

#[tokio::test]
async fn production_with_a_metrics_address_does_not_answer_metrics_publicly() {
    let address = free_address();
    let app = TestApp::spawn_with(|config| {
        config.environment = Environment::Production;
        config.metrics_bind = Some(address);
    })
    .await;
    let public = app.http.get(app.url("/metrics")).send().await.unwrap();
    assert_eq!(public.status(), 404);
    let private = app
        .http
        .get(format!("http://{address}/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(private.status(), 200);
    assert!(private.text().await.unwrap().contains("# TYPE "));

    // Asked for, production serves it publicly as well; development does without asking.
    let public_too = TestApp::spawn_with(|config| {
        config.environment = Environment::Production;
        config.metrics_public = Some(true);
    })
    .await;
    let response = public_too.http.get(public_too.url("/metrics")).send().await;
    assert_eq!(response.unwrap().status(), 200);
    let development = TestApp::spawn().await;
    let response = development
        .http
        .get(development.url("/metrics"))
        .send()
        .await;
    assert_eq!(response.unwrap().status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_flood_costs_redis_at_most_one_reading_a_second() {
    // Periodic background work shares the pool: slow it down so that scrapes alone count.
    let app = TestApp::spawn_with(|config| {
        config.probe_rate_per_ip = 0;
        config.leaderboard.rollover_check_seconds = 3600;
        config.vouchers.order_sweep_seconds = 3600;
        config.jobs.jobs_tick_ms = 600_000;
    })
    .await;
    // A topic with work, so that the delay queue's gauges read something.
    app.jobs()
        .schedule(crate::jobs::job(
            "flooded",
            "later",
            Duration::from_secs(3600),
        ))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = round_trips(&app);
    let text = app.get_text("/metrics").await;
    assert!(
        text.contains("engage_jobs_delayed{topic=\"later\"} 1"),
        "{text}"
    );
    let one_reading = round_trips(&app) - before;
    assert!(one_reading >= 2, "a scrape reads Redis: {one_reading}");

    let before = round_trips(&app);
    let started = Instant::now();
    let flood = Duration::from_secs(3);
    let scrapers = (2..10).map(|i| {
        let client = client_from(&format!("127.0.0.{i}"));
        let url = app.url("/metrics");
        tokio::spawn(async move {
            let mut answered = 0;
            while started.elapsed() < flood {
                let response = client.get(&url).send().await.unwrap();
                assert_eq!(response.status(), 200);
                response.bytes().await.unwrap();
                answered += 1;
            }
            answered
        })
    });
    let mut scrapes = 0;
    for scraper in scrapers.collect::<Vec<_>>() {
        scrapes += scraper.await.unwrap();
    }
    let spent = round_trips(&app) - before;
    let seconds = started.elapsed().as_secs_f64().ceil() as u64;
    // A reading per second begun, and one more for a second boundary crossed mid-flood.
    assert!(scrapes > 100, "only {scrapes} scrapes: not a flood");
    assert!(
        spent <= one_reading * (seconds + 1),
        "{scrapes} scrapes in {seconds} s cost {spent} round trips; one reading costs {one_reading}"
    );
}

/// Requests to `path` from `client` until one is refused; the refusal.
async fn until_refused(client: &reqwest::Client, url: &str) -> (usize, reqwest::Response) {
    for sent in 1..=1000 {
        let response = client.get(url).send().await.unwrap();
        if response.status() == 429 {
            return (sent, response);
        }
        assert!(response.status().is_success(), "{}", response.status());
    }
    panic!("1000 requests to {url} and none refused");
}

#[tokio::test]
async fn readyz_and_metrics_are_refused_past_their_rate_per_address_but_healthz_is_free() {
    let app = TestApp::spawn().await;
    let rate = app.config().probe_rate_per_ip;
    assert!(rate >= 10, "the default leaves room for polling: {rate}");
    let prober = client_from("127.0.0.1");

    // A load balancer and Prometheus polling together, several times a second: never refused.
    for _ in 0..10 {
        for path in ["/readyz", "/metrics"] {
            let response = prober.get(app.url(path)).send().await.unwrap();
            assert_eq!(response.status(), 200, "{path}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The two share an address's allowance: each is flooded from an address of its own.
    for (path, from) in [("/readyz", "127.0.0.1"), ("/metrics", "127.0.0.3")] {
        let flooder = client_from(from);
        let (sent, refused) = until_refused(&flooder, &app.url(path)).await;
        assert!(sent > 10, "{path} refused after {sent} requests");
        let retry_after: u64 = refused.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=60).contains(&retry_after), "{retry_after}");
        let body: serde_json::Value = refused.json().await.unwrap();
        assert_eq!(body["errors"][0]["extensions"]["code"], "RATE_LIMITED");

        // Another address is answered meanwhile.
        let other = client_from("127.0.0.2");
        let response = other.get(app.url(path)).send().await.unwrap();
        assert_eq!(response.status(), 200, "{path} from another address");
    }
    // Liveness costs nothing and is never refused, even to the address that was.
    for _ in 0..200 {
        let response = prober.get(app.url("/healthz")).send().await.unwrap();
        assert_eq!(response.status(), 200);
    }
}

const RANK: &str = "subscription { myRankChanged { rank points } }";

/// A `graphql-transport-ws` connection from `address`, signed in with `token`, running
/// `query` as operation "1".
async fn subscribe_from(app: &TestApp, address: &str, token: &str, query: &str) -> Socket {
    use futures::SinkExt;
    use tokio_tungstenite::tungstenite::Message;

    let mut socket = websocket_from(app, address, crate::via::Via::TransportWs)
        .await
        .expect("upgrade accepted");
    let init = json!({ "type": "connection_init", "payload": { "Authorization": format!("Bearer {token}") } });
    socket.send(Message::text(init.to_string())).await.unwrap();
    assert_eq!(next_message(&mut socket).await["type"], "connection_ack");
    let subscribe = json!({ "id": "1", "type": "subscribe", "payload": { "query": query } });
    socket
        .send(Message::text(subscribe.to_string()))
        .await
        .unwrap();
    socket
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_award_costs_at_most_three_times_as_much_with_300_rank_subscribers() {
    const VIEWERS: i64 = 300;
    let app = TestApp::spawn_with(|config| {
        config.rate_limit_per_ip = 0;
        config.rate_limit_per_user = 0;
        config.leaderboard.rollover_check_seconds = 3600;
        config.vouchers.order_sweep_seconds = 3600;
        config.jobs.jobs_tick_ms = 600_000;
        // The consumers that write SQL (the archives, notifications) read again a linger
        // after each short batch: with the default half second, whether their next read
        // falls in a window of the measure depends on its length. Here they read the first
        // batch and then wait, so both windows count the award and its fan-out alone.
        config.archive_linger_ms = 60_000;
    })
    .await;
    let service = app.token(999, Role::Service);
    let award = async |user: i64, points: i64| {
        app.data(
            Some(&service),
            "mutation($u: ID!, $p: Int!, $k: String!) {
                awardPoints(userId: $u, type: SIGN_IN, points: $p, idempotencyKey: $k) { awarded } }",
            json!({ "u": user.to_string(), "p": points, "k": uuid::Uuid::new_v4().to_string() }),
        )
        .await;
    };
    // The viewers, ranked 1..=300 by points (the first has the most).
    for viewer in 1..=VIEWERS {
        award(viewer, 1000 - viewer).await;
    }
    // What an award costs when nobody watches: a user passes everyone.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = commands(&app);
    award(5001, 2000).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let alone = commands(&app) - before;

    // The viewers, spread over a few addresses as browsers would be.
    let mut sockets = Vec::new();
    for viewer in 1..=VIEWERS {
        let from = format!("127.0.0.{}", 2 + viewer % 10);
        let token = app.user_token(viewer);
        let mut socket = subscribe_from(&app, &from, &token, RANK).await;
        let first = next_data(&mut socket).await;
        assert_eq!(
            first["myRankChanged"],
            json!({ "rank": viewer + 1, "points": 1000 - viewer })
        );
        sockets.push(socket);
    }
    assert_eq!(app.leaderboards().boards.readers(), 1);
    tokio::time::sleep(Duration::from_millis(500)).await;

    // Another user passes everyone: every viewer moves down one, and is told so, without
    // a read of any viewer.
    let before = commands(&app);
    award(5002, 3000).await;
    for (viewer, socket) in (1..=VIEWERS).zip(&mut sockets) {
        assert_eq!(
            next_data(socket).await["myRankChanged"],
            json!({ "rank": viewer + 2, "points": 1000 - viewer })
        );
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let watched = commands(&app) - before;
    assert!(
        watched <= 3 * alone,
        "{watched} commands with {VIEWERS} viewers, {alone} without"
    );

    // A viewer's own award: those it passes are told, those ahead of it are not; only
    // the awarded viewer's entry is read.
    let before = commands(&app);
    award(10, 5000).await;
    assert_eq!(
        next_data(&mut sockets[9]).await["myRankChanged"],
        json!({ "rank": 1, "points": 5990 })
    );
    for (viewer, socket) in (1..10).zip(&mut sockets) {
        assert_eq!(
            next_data(socket).await["myRankChanged"],
            json!({ "rank": viewer + 3, "points": 1000 - viewer })
        );
    }
    for socket in &mut sockets[10..20] {
        let quiet = tokio::time::timeout(Duration::from_millis(300), next_data(socket)).await;
        assert!(
            quiet.is_err(),
            "a rank that did not change was sent: {quiet:?}"
        );
    }
    // The viewer's one read: a script call per part of the board, however many viewers.
    let own = commands(&app) - before;
    let season = app.current_month();
    let parts = app.keys().season_board_parts(season).len() as u64;
    assert!(
        own <= 3 * alone + parts,
        "{own} commands for a viewer's award with {VIEWERS} viewers, {alone} without"
    );
}
