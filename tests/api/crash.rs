//! A crash, for real: the `engage` binary killed with SIGKILL while it pays a closed board
//! period's rewards, then started again, pays each reward exactly once.

use std::time::{Duration, Instant};

use chrono::{TimeZone, Utc};
use engage::infra::auth::Role;
use serde_json::json;
use sqlx::Row;

use crate::{
    binary::Engage,
    harness::{unlimited, TestApp},
};

const RANKS: i64 = 300;
const REWARD: i64 = 7;

/// (rows owed, rows marked paid) of the period's rewards.
async fn rewards_owed(app: &TestApp) -> (i64, i64) {
    let row = sqlx::query(
        "SELECT COUNT(*) AS owed, COUNT(paid_at_ms) AS paid FROM board_rewards \
         WHERE board_key = 'crash' AND period = '2026-01-05'",
    )
    .fetch_one(app.sql())
    .await
    .unwrap();
    (row.get("owed"), row.get("paid"))
}

/// Starts the binary on the app's Redis prefix and database, closing due periods every second.
async fn engage_on(app: &TestApp) -> Engage {
    Engage::start_on(
        &app.config().redis_prefix,
        &app.config().database_url,
        // What the killed process left pending in the streams is taken over within a second.
        &[
            ("ENGAGE_ROLLOVER_CHECK_SECONDS", "1"),
            ("ENGAGE_CONSUMER_CLAIM_IDLE_MS", "1000"),
        ],
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binary_killed_while_paying_rewards_pays_each_exactly_once_after_a_restart() {
    let app = TestApp::spawn_with(|config| {
        unlimited(config);
        config.leaderboard.rollover_check_seconds = 3600;
        config.consumer_claim_idle_ms = 1000;
    })
    .await;
    // A day long gone by the binary's clock: its period is due as soon as the binary looks.
    app.set_clock(Utc.with_ymd_and_hms(2026, 1, 5, 12, 0, 0).unwrap());
    app.data(
        Some(&app.admin_token()),
        "mutation($i: CreateBoardInput!) { createBoard(input: $i) { key } }",
        json!({ "i": { "key": "crash", "title": "Crash", "reset": "DAILY",
                       "rewards": [ { "fromRank": 1, "toRank": RANKS, "points": REWARD } ] } }),
    )
    .await;
    let service = app.token(999, Role::Service);
    for user in 1..=RANKS {
        app.data(
            Some(&service),
            "mutation($u: ID!, $s: Int!, $k: String!) {
                submitScore(boardKey: \"crash\", userId: $u, score: $s, idempotencyKey: $k) { rank } }",
            json!({ "u": user.to_string(), "s": user, "k": format!("s{user}") }),
        )
        .await;
    }

    // Killed once some rewards are marked paid, and not all.
    let first = engage_on(&app).await;
    let started = Instant::now();
    let at_kill = loop {
        let (owed, paid) = rewards_owed(&app).await;
        if paid > 0 {
            break (owed, paid);
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the binary paid nothing"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    first.kill();
    assert_eq!(at_kill.0, RANKS, "every rank is owed before any is paid");
    assert!(
        at_kill.1 < RANKS,
        "the kill came after the last payment ({at_kill:?}): nothing was interrupted"
    );

    // Started again, it pays the rest, and nothing twice: once the killed holder's lease of
    // the period's lock (30 s) has run out, the fence of the new holder is newer.
    let second = engage_on(&app).await;
    let started = Instant::now();
    while rewards_owed(&app).await.1 < RANKS {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the restarted binary did not finish: {:?}",
            rewards_owed(&app).await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let archived = || async {
        sqlx::query(
            "SELECT COUNT(*) AS n, COUNT(DISTINCT user_id) AS users, \
             CAST(COALESCE(SUM(points), 0) AS BIGINT) AS points FROM points_record \
             WHERE idempotency_key LIKE 'reward:crash:2026-01-05:%'",
        )
        .fetch_one(app.sql())
        .await
        .map(|row| {
            (
                row.get::<i64, _>("n"),
                row.get::<i64, _>("users"),
                row.get::<i64, _>("points"),
            )
        })
        .unwrap()
    };
    let started = Instant::now();
    while archived().await.0 < RANKS && started.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(archived().await, (RANKS, RANKS, RANKS * REWARD));
    for user in 1..=RANKS {
        let answer = app
            .data(
                Some(&app.user_token(user)),
                "{ viewer { pointsBalance { earned balance } } }",
                json!({}),
            )
            .await;
        let balance = answer["viewer"]["pointsBalance"].clone();
        assert_eq!(
            balance,
            json!({ "earned": REWARD, "balance": REWARD }),
            "user {user}"
        );
    }
    second.kill();
}
