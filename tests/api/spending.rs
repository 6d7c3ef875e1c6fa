//! Points as currency: balances, spending under concurrency, revoking an award (its season
//! score too), idempotent replays, the history's reasons and sources, coded errors, and
//! balances rebuilt from SQL after Redis lost them.

use engage::infra::auth::Role;
use serde_json::{json, Value};

use crate::harness::{self, first_code, global_id, scan, streams_settled, unlink, TestApp};

const AWARD: &str = "mutation($u: ID!, $p: Int!, $k: String!) {
    awardPoints(userId: $u, type: SIGN_IN, points: $p, idempotencyKey: $k) { awarded } }";
const SPEND: &str = "mutation($a: Int!, $r: String!, $k: String!) {
    spendPoints(amount: $a, reason: $r, idempotencyKey: $k) { earned spent revoked balance } }";
const REVOKE: &str = "mutation($u: ID!, $k: String!, $r: String!) {
    revokeAward(userId: $u, idempotencyKey: $k, reason: $r) { earned spent revoked balance } }";
const BALANCE: &str = "{ viewer { pointsBalance { earned spent revoked balance } } }";
const USER_BALANCE: &str = "query($id: ID!) { node(id: $id) { ... on User {
    pointsBalance { earned spent revoked balance } } } }";
const HISTORY: &str =
    "{ pointsHistory(first: 20) { edges { node { type points reason source } } } }";
const BOARD: &str = "{ leaderboard { total entries { rank points user { id } } } }";

async fn unlimited() -> TestApp {
    in_buckets(None).await
}

/// With the points keys in `buckets` buckets (the default without).
async fn in_buckets(buckets: Option<u32>) -> TestApp {
    TestApp::spawn_with(|config| {
        harness::unlimited(config);
        if buckets.is_some() {
            config.points.points_buckets = buckets;
        }
    })
    .await
}

/// Awards `points` SIGN_IN points (uncapped) to `user` under the service key `key`.
async fn award(app: &TestApp, user: i64, points: i64, key: &str) {
    let service = app.token(900, Role::Service);
    let awarded = app
        .data(
            Some(&service),
            AWARD,
            json!({ "u": user.to_string(), "p": points, "k": key }),
        )
        .await;
    assert_eq!(awarded["awardPoints"]["awarded"], points, "{awarded}");
}

/// `(earned, spent, revoked, balance)` of a balance.
fn numbers(balance: &Value) -> (i64, i64, i64, i64) {
    let n = |field: &str| {
        balance[field]
            .as_i64()
            .unwrap_or_else(|| panic!("{balance}"))
    };
    (n("earned"), n("spent"), n("revoked"), n("balance"))
}

async fn balance_of(app: &TestApp, user: i64) -> (i64, i64, i64, i64) {
    let viewer = app
        .data(Some(&app.user_token(user)), BALANCE, json!({}))
        .await;
    numbers(&viewer["viewer"]["pointsBalance"])
}

async fn spend(app: &TestApp, user: i64, amount: i64, reason: &str, key: &str) -> Value {
    app.gql(
        Some(&app.user_token(user)),
        SPEND,
        json!({ "a": amount, "r": reason, "k": key }),
    )
    .await
}

async fn revoke(app: &TestApp, user: i64, key: &str, reason: &str) -> Value {
    app.gql(
        Some(&app.admin_token()),
        REVOKE,
        json!({ "u": user.to_string(), "k": key, "r": reason }),
    )
    .await
}

/// Waits until the points archive wrote everything the points scripts streamed.
async fn archived(app: &TestApp) {
    streams_settled(app, &app.keys().points_streams(), "archive").await;
}

/// The viewer's history: (type, points, reason, source), newest first.
async fn history(app: &TestApp, user: i64) -> Vec<(Value, i64, Value, Value)> {
    app.data(Some(&app.user_token(user)), HISTORY, json!({}))
        .await["pointsHistory"]["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|edge| {
            let node = &edge["node"];
            (
                node["type"].clone(),
                node["points"].as_i64().unwrap(),
                node["reason"].clone(),
                node["source"].clone(),
            )
        })
        .collect()
}

/// The current season's board: (points, user id) by rank.
async fn board(app: &TestApp) -> Vec<(i64, String)> {
    app.data(None, BOARD, json!({})).await["leaderboard"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["points"].as_i64().unwrap(),
                e["user"]["id"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Reports of `engage verify` that found drift.
async fn drifted(app: &TestApp) -> Vec<String> {
    app.verify_all()
        .await
        .expect("verify runs")
        .into_iter()
        .filter(|report| !report.is_clean())
        .map(|report| format!("{}: {:?}", report.feature, report.examples))
        .collect()
}

/// Forgets the Redis marker of a key, as a week does.
async fn forget_marker(app: &TestApp, user: i64, key: &str) {
    let mut conn = app.redis_connection().await;
    let removed: i64 = redis::cmd("DEL")
        .arg(app.keys().points_award_marker(user, key))
        .query_async(&mut *conn)
        .await
        .unwrap();
    assert_eq!(removed, 1, "the marker of {key} existed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_concurrent_spends_never_take_the_balance_below_zero() {
    let app = std::sync::Arc::new(unlimited().await);
    award(&app, 51, 1000, "grant").await;
    let spends: Vec<_> = (0..500)
        .map(|i| {
            let app = app.clone();
            tokio::spawn(
                async move { spend(&app, 51, 3, "a sticker", &format!("sticker-{i}")).await },
            )
        })
        .collect();
    let mut accepted = 0;
    for spend in spends {
        let body = spend.await.unwrap();
        if body["errors"].is_null() {
            accepted += 1;
            let (_, _, _, balance) = numbers(&body["data"]["spendPoints"]);
            assert!(balance >= 0, "{body}");
        } else {
            assert_eq!(first_code(&body), "INSUFFICIENT_POINTS", "{body}");
        }
    }
    assert_eq!(accepted, 333, "1000 points buy 333 stickers of 3");
    let (earned, spent, revoked, balance) = balance_of(&app, 51).await;
    assert_eq!((earned, spent, revoked), (1000, accepted * 3, 0));
    assert_eq!(balance, 1);

    // Archived exactly once: one negative row per accepted spend.
    archived(&app).await;
    let rows: Vec<(i64, i64)> = sqlx::query_as(
        "SELECT CAST(COUNT(*) AS BIGINT), CAST(SUM(points) AS BIGINT) FROM points_record \
         WHERE user_id = 51 AND kind = 'SPEND'",
    )
    .fetch_all(app.sql())
    .await
    .unwrap();
    assert_eq!(rows, [(accepted, -accepted * 3)]);
    assert_eq!(drifted(&app).await, Vec::<String>::new());
}

#[tokio::test]
async fn a_spend_is_idempotent_for_ever_and_in_the_history_with_its_reason() {
    let app = unlimited().await;
    award(&app, 52, 50, "welcome").await;
    let first = spend(&app, 52, 20, "a blue hat", "hat").await;
    assert_eq!(numbers(&first["data"]["spendPoints"]), (50, 20, 0, 30));
    // A replay, even with another amount, spends nothing and answers the balance.
    for amount in [20, 5] {
        let again = spend(&app, 52, amount, "a blue hat", "hat").await;
        assert_eq!(numbers(&again["data"]["spendPoints"]), (50, 20, 0, 30));
    }

    // A week later Redis has forgotten the key; SQL has not.
    archived(&app).await;
    forget_marker(&app, 52, "spend:hat").await;
    let later = spend(&app, 52, 20, "a blue hat", "hat").await;
    assert_eq!(numbers(&later["data"]["spendPoints"]), (50, 20, 0, 30));

    spend(&app, 52, 5, "a red scarf", "scarf").await;
    archived(&app).await;
    assert_eq!(
        history(&app, 52).await,
        [
            (Value::Null, -5, json!("a red scarf"), json!("spend")),
            (Value::Null, -20, json!("a blue hat"), json!("spend")),
            (json!("SIGN_IN"), 50, Value::Null, json!("service")),
        ]
    );
    assert_eq!(balance_of(&app, 52).await, (50, 25, 0, 25));
}

#[tokio::test]
async fn bad_input_a_shortfall_and_other_users_balances_answer_coded_errors() {
    let app = unlimited().await;
    award(&app, 53, 10, "small").await;
    let long_reason = "r".repeat(201);
    let long_key = "k".repeat(129);
    for (amount, reason, key) in [
        (0, "ok", "k"),
        (-5, "ok", "k"),
        (1, "", "k"),
        (1, "  ", "k"),
        (1, long_reason.as_str(), "k"),
        (1, "ok", ""),
        (1, "ok", long_key.as_str()),
    ] {
        let body = spend(&app, 53, amount, reason, key).await;
        assert_eq!(
            first_code(&body),
            "BAD_USER_INPUT",
            "{amount} {reason:?} {key:?}"
        );
    }

    // Short: nothing is spent, and the key stays free for a later try.
    let short = spend(&app, 53, 11, "a lamp", "lamp").await;
    assert_eq!(first_code(&short), "INSUFFICIENT_POINTS", "{short}");
    assert_eq!(balance_of(&app, 53).await, (10, 0, 0, 10));
    award(&app, 53, 5, "more").await;
    let bought = spend(&app, 53, 11, "a lamp", "lamp").await;
    assert_eq!(numbers(&bought["data"]["spendPoints"]), (15, 11, 0, 4));

    let anonymous = app
        .gql(None, SPEND, json!({ "a": 1, "r": "x", "k": "y" }))
        .await;
    assert_eq!(first_code(&anonymous), "UNAUTHENTICATED");

    // A balance is its user's own, or an admin's to see.
    let user = global_id("User", 53);
    app.data(Some(&app.user_token(53)), "{ viewer { id } }", json!({}))
        .await;
    let other = app
        .gql(
            Some(&app.user_token(54)),
            USER_BALANCE,
            json!({ "id": user }),
        )
        .await;
    assert_eq!(first_code(&other), "FORBIDDEN", "{other}");
    let admin = app
        .data(
            Some(&app.admin_token()),
            USER_BALANCE,
            json!({ "id": user }),
        )
        .await;
    assert_eq!(numbers(&admin["node"]["pointsBalance"]), (15, 11, 0, 4));

    // Revoking: admins only, a key the user has an award under, and no spend.
    let by_user = app
        .gql(
            Some(&app.user_token(53)),
            REVOKE,
            json!({ "u": "53", "k": "small", "r": "x" }),
        )
        .await;
    assert_eq!(first_code(&by_user), "FORBIDDEN");
    assert_eq!(
        first_code(&revoke(&app, 53, "never-given", "x").await),
        "NOT_FOUND"
    );
    assert_eq!(
        first_code(&revoke(&app, 54, "small", "x").await),
        "NOT_FOUND"
    );
    archived(&app).await;
    assert_eq!(
        first_code(&revoke(&app, 53, "spend:lamp", "x").await),
        "BAD_USER_INPUT"
    );
    assert_eq!(
        first_code(&revoke(&app, 53, "small", "").await),
        "BAD_USER_INPUT"
    );
    assert_eq!(balance_of(&app, 53).await, (15, 11, 0, 4));
}

#[tokio::test]
async fn a_revoke_takes_the_award_off_the_balance_and_the_season_board_once() {
    let app = unlimited().await;
    award(&app, 61, 30, "a1").await;
    award(&app, 61, 20, "a2").await;
    award(&app, 62, 25, "b1").await;
    let (a, b) = (global_id("User", 61), global_id("User", 62));
    assert_eq!(board(&app).await, [(50, a.clone()), (25, b.clone())]);
    spend(&app, 61, 45, "a bicycle", "bike").await;

    // Revoked at once, before the archive may have written the award.
    let revoked = revoke(&app, 61, "a1", "given by mistake").await;
    assert_eq!(
        numbers(&revoked["data"]["revokeAward"]),
        (50, 45, 30, -25),
        "below zero by what was revoked: {revoked}"
    );
    assert_eq!(board(&app).await, [(25, b.clone()), (20, a.clone())]);

    // Again, and again once Redis forgot the revoke: nothing changes.
    let again = revoke(&app, 61, "a1", "given by mistake").await;
    assert_eq!(numbers(&again["data"]["revokeAward"]), (50, 45, 30, -25));
    archived(&app).await;
    forget_marker(&app, 61, "revoke:service:a1").await;
    let later = revoke(&app, 61, "service:a1", "given by mistake").await;
    assert_eq!(numbers(&later["data"]["revokeAward"]), (50, 45, 30, -25));
    assert_eq!(board(&app).await, [(25, b.clone()), (20, a.clone())]);

    // Revoking the rest takes the user off the board.
    revoke(&app, 61, "a2", "also a mistake").await;
    assert_eq!(board(&app).await, [(25, b.clone())]);
    assert_eq!(balance_of(&app, 61).await, (50, 45, 50, -45));
    // A spend cannot overdraw a negative balance.
    let short = spend(&app, 61, 1, "a bell", "bell").await;
    assert_eq!(first_code(&short), "INSUFFICIENT_POINTS");

    archived(&app).await;
    assert_eq!(
        history(&app, 61).await,
        [
            (
                json!("SIGN_IN"),
                -20,
                json!("also a mistake"),
                json!("revoke")
            ),
            (
                json!("SIGN_IN"),
                -30,
                json!("given by mistake"),
                json!("revoke")
            ),
            (Value::Null, -45, json!("a bicycle"), json!("spend")),
            (json!("SIGN_IN"), 20, Value::Null, json!("service")),
            (json!("SIGN_IN"), 30, Value::Null, json!("service")),
        ]
    );
    assert_eq!(drifted(&app).await, Vec::<String>::new());
}

#[tokio::test]
async fn balances_and_boards_are_rebuilt_from_sql_after_redis_lost_them() {
    rebuilt_after_a_loss(None).await;
}

/// The same with the points keys in seven buckets: each user's balance is in their bucket.
#[tokio::test]
async fn balances_in_seven_buckets_are_rebuilt_from_sql_after_redis_lost_them() {
    rebuilt_after_a_loss(Some(7)).await;
}

async fn rebuilt_after_a_loss(buckets: Option<u32>) {
    let app = in_buckets(buckets).await;
    for user in 71..=74 {
        award(&app, user, 10 * user, "first").await;
        award(&app, user, 5, "second").await;
    }
    spend(&app, 71, 30, "a kite", "kite").await;
    spend(&app, 72, 800, "too much", "yacht").await; // refused: nothing recorded
    revoke(&app, 73, "second", "duplicate").await;
    spend(&app, 74, 745, "everything", "all").await;
    revoke(&app, 74, "first", "fraud").await;
    let users = 71..=74;
    let mut before = Vec::new();
    for user in users.clone() {
        before.push(balance_of(&app, user).await);
    }
    assert_eq!(
        before,
        [
            (715, 30, 0, 685),
            (725, 0, 0, 725),
            (735, 0, 5, 730),
            (745, 745, 740, -740)
        ]
    );
    let board_before = board(&app).await;
    archived(&app).await;
    assert_eq!(drifted(&app).await, Vec::<String>::new(), "before the loss");

    // Redis loses every key of this service.
    let keys = scan(&app, &app.keys().all_pattern()).await;
    unlink(&app, &keys).await;
    assert_eq!(balance_of(&app, 71).await, (0, 0, 0, 0));
    let lost = drifted(&app).await;
    assert!(
        lost.iter().any(|d| d.starts_with("points balances")),
        "{lost:?}"
    );

    app.rebuild_from_sql().await.expect("rebuild");
    assert_eq!(
        drifted(&app).await,
        Vec::<String>::new(),
        "after the rebuild"
    );
    let mut after = Vec::new();
    for user in users {
        after.push(balance_of(&app, user).await);
    }
    assert_eq!(after, before);
    assert_eq!(board(&app).await, board_before);

    // Spending goes on against the rebuilt balance, and replays are still refused.
    let replay = spend(&app, 71, 30, "a kite", "kite").await;
    assert_eq!(numbers(&replay["data"]["spendPoints"]), (715, 30, 0, 685));
    let short = spend(&app, 71, 686, "a plane", "plane").await;
    assert_eq!(first_code(&short), "INSUFFICIENT_POINTS");
}

/// Spends made while a rebuild runs (before its snapshot, between it and the hold, held
/// back during the hold, after it) are all in the rebuilt balance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spends_made_while_a_rebuild_runs_are_all_in_the_rebuilt_balance() {
    let app = std::sync::Arc::new(unlimited().await);
    award(&app, 81, 5000, "grant").await;
    archived(&app).await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let spender = {
        let (app, stop) = (app.clone(), stop.clone());
        tokio::spawn(async move {
            let mut accepted = 0;
            let mut n = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                n += 1;
                let body = spend(&app, 81, 2, "a sticker", &format!("during-{n}")).await;
                assert!(body["errors"].is_null(), "{body}");
                accepted += 1;
            }
            accepted
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    app.rebuild_from_sql().await.expect("rebuild");
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let accepted = spender.await.unwrap();
    assert!(accepted > 0);
    assert_eq!(
        balance_of(&app, 81).await,
        (5000, 2 * accepted, 0, 5000 - 2 * accepted)
    );
    archived(&app).await;
    assert_eq!(drifted(&app).await, Vec::<String>::new());
}
